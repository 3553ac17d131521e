"""The benchmark: several drafting methods against baseline, measured honestly.

Fair by construction: one warm-up of every method, then baseline and each method run on the **same prompt in
the same run**, interleaved (the order rotates every repeat), repeated, and medians reported. Greedy outputs
are checked against baseline (`lossless`).

Speedup is tokens/s of the method over tokens/s of baseline, paired within a repeat and the median taken over
repeats; when both emit the same tokens (every lossless greedy run) it is exactly the wall-time ratio
baseline / method.

Modules, in the order data flows through them:

* `specs`: what to run (`MethodSpec`, `parse_methods`); `prompts`: on what (`load_prompts`).
* `measure`: the measuring loop (`prepare_specs` loads and validates each method once, `compare_on_prompt`
  measures them on one prompt, `run_bench` on many).
* `lossless`: the check against baseline or plain `generate()`, with the target's margin at a divergence.
* `rows`: one typed `BenchRow` per method × prompt; `aggregation`: `Aggregate` per method × category.
* `figures`, `report`, `output`: the charts, the HTML report and the files (CSV, JSON, traces/).

The command line is `python -m playground bench` (`cli.py`); the page's Compare tab and the agents' tools
call the same functions.
"""

from .aggregation import (ALL, SETTLED_REPEATS, SETTLED_TOKENS, SETTLED_WIDTH, Aggregate, aggregate, bootstrap_interval,
                          in_category, noise_reasons, predict)
from .figures import compare_figures, figures
from .lossless import (Divergence, LosslessCheck, PlainCheck, check_against_plain, check_lossless,
                       divergence_margin)
from .measure import BenchResult, CompareResult, Progress, compare_on_prompt, prepare_specs, run_bench
from .output import load_result, results_table, write_csv, write_outputs
from .prompts import EXAMPLE_PROMPTS, SPEC_BENCH_FILE, SPEC_BENCH_NAME, BenchPrompt, load_prompts
from .report import render_report
from .rows import CSV_COLUMNS, BenchRow, Measurement, build_row
from .specs import BenchError, MethodSpec, make_spec, parse_methods

__all__ = [
    "ALL", "Aggregate", "aggregate", "in_category", "predict", "SETTLED_REPEATS", "SETTLED_TOKENS", "SETTLED_WIDTH",
    "bootstrap_interval", "noise_reasons", "compare_figures", "figures", "Divergence",
    "LosslessCheck", "PlainCheck", "check_against_plain", "check_lossless", "divergence_margin", "BenchResult",
    "CompareResult", "Progress", "compare_on_prompt", "prepare_specs", "run_bench", "load_result", "results_table", "write_csv",
    "write_outputs", "EXAMPLE_PROMPTS", "SPEC_BENCH_FILE", "SPEC_BENCH_NAME", "BenchPrompt", "load_prompts",
    "render_report", "CSV_COLUMNS", "BenchRow", "Measurement", "build_row", "BenchError", "MethodSpec", "make_spec",
    "parse_methods",
]
