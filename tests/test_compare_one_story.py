"""Compare reads one set of numbers (issue 47): the table, the sentences under it, the prediction and the race quote
the same speedup; three repeats by default, a quick mode; advice that reads the run's own precision.

Issue 47 saw the table say prompt lookup was 2.53× faster while the text under it said "slower than baseline
(0.63×)": the sentences read one representative run, the table the medians over the repeats. The model-free tests
feed `theory.diagnose` and the race the table's figures; the last test runs a real Compare on the tiny models and
reads the speedup back from the table, the text and the race.
"""

from __future__ import annotations

import html
import re
from typing import Any

import pytest

from playground import bench, gallery, theory
from playground.app import compare_tab, run_request
from playground.timeline import race_timeline


def test_the_sentences_quote_the_tables_figures_not_the_one_run_they_read() -> None:
    method, base = gallery.load("prompt-lookup-greedy"), gallery.load("baseline-greedy")
    own = theory.measured_speedup(method, base)
    figures: dict[str, float | None] = {"speedup": 2.53, "tokens_per_s": 7.25, "baseline_tokens_per_s": 2.87,
               "theoretical_speedup": 2.15, "refined_speedup": 2.41}
    assert own is not None
    assert abs(own - 2.53) > 0.1  # the run alone says something else
    text = " ".join(theory.diagnose(method, base, "en", figures))
    assert text.startswith("This run was 2.53× faster than baseline: 7.2 tokens/s against 2.9."), text
    assert "predicts 2.15×" in text and "it predicts 2.41×" in text, text
    assert f"{own:.2f}×" not in text


def test_advice_reads_the_runs_own_precision() -> None:
    est = theory.Estimates(alpha=0.9, gamma=5.0, v=2.0, c=0.1)
    assert "try bfloat16" in theory._advice(est, "en", "float32")
    for lang in ("en", "ru", "ar"):
        reduced = theory._advice(est, lang, "bfloat16")
        assert "bfloat16" in reduced and reduced != theory._advice(est, lang, "float32")
    assert "try bfloat16" not in theory._advice(est, "en", "bfloat16")


def test_the_race_ends_where_the_table_reads() -> None:
    method, base = gallery.load("prompt-lookup-greedy"), gallery.load("baseline-greedy")
    timeline = race_timeline(base, method, totals_ms=(9000.0, 3000.0))
    assert timeline["time_ratio"] == pytest.approx(3.0)
    b, m = timeline["lanes"]
    assert (b["total_ms"], m["total_ms"]) == (9000.0, 3000.0) and b["points"][-1]["t_ms"] == pytest.approx(9000.0)
    *_, (_, last) = compare_tab.race_frames(base, method, totals_ms=(9000.0, 3000.0))
    assert "3.00× faster" in html.unescape(last)


def test_three_repeats_by_default_and_a_quick_mode() -> None:
    assert compare_tab.DEFAULT_COMPARE_REPEATS >= bench.SETTLED_REPEATS == 3
    assert compare_tab.QUICK_REPEATS * compare_tab.QUICK_TOKENS < 32


@pytest.mark.models
def test_a_compare_tells_one_story(tiny_models: dict[str, str]) -> None:
    values = {name: p.default for name, p in run_request.param_specs().items()} | {"prompt_lookup_num_tokens": 4}
    outputs = list(compare_tab.compare("One, two, three, four, five, one, two, three, four, five, one, two,",
                                       tiny_models["target"], None, "prompt_lookup", "float32", "auto",
                                       ["prompt_lookup"], 8, 2, [], values))
    out = compare_tab.COMPARED.read(outputs[-1])
    assert 'data-kind="done"' in out["status"], out["status"]
    # the figure the table shows (its bold cell), not data-speedup re-rounded: 0.7549 is kept as "0.7550" there
    hit = re.search(r'data-method="prompt_lookup"[^>]*>.*?<b>([\d.]+×)</b>', out["table"], re.S)
    assert hit is not None
    shown = hit.group(1)
    diagnosis = html.unescape(re.sub(r"<[^>]+>", " ", out["diagnosis"]))
    hit = re.search(r"This run was ([^:]*):", diagnosis)
    assert hit is not None
    this_run = hit.group(1)
    assert shown in this_run, (shown, diagnosis)  # "x× faster than baseline" / "slower than baseline (x× its speed)"
    hit = re.search(r'data-method="prompt_lookup".*?</tr>', out["table"], re.S)
    assert hit is not None
    refined = hit.group(0)
    predicted = re.findall(r"<td>([\d.]+×)</td>", refined)
    assert predicted and all(p in diagnosis for p in predicted), (predicted, diagnosis)
    state: Any = out["state"]
    label = next(iter(state.traces))
    frames = list(compare_tab.race_frames(state.baseline, state.traces[label],
                                          totals_ms=(state.elapsed_ms["baseline"], state.elapsed_ms[label])))
    verdict = html.unescape(frames[-1][1])
    assert shown in verdict, (shown, verdict)
