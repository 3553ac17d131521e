"""The measuring loop: several methods against baseline on one prompt (`compare_on_prompt`), and the whole
benchmark over many prompts (`run_bench`).

Fair by construction: one warm-up of every method, then baseline and each method run on the **same prompt in
the same run**, interleaved (the order rotates every repeat), repeated, and medians reported.
"""

from __future__ import annotations

import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

from .. import theory
from ..i18n import DEFAULT_LANGUAGE, number, t
from ..methods import REFERENCE
from ..request import DEFAULT_DTYPE, MAX_NEW_TOKENS
from ..trace import Trace
from .aggregation import ALL, Aggregate, aggregate
from .lossless import LosslessCheck, checked_against
from .prompts import BenchPrompt
from .rows import BenchRow, Measurement, build_row
from .specs import BenchError, MethodSpec, make_spec

Progress = Callable[[str], None]


@dataclass
class CompareResult:
    prompt: BenchPrompt
    rows: list[BenchRow]
    aggregates: list[Aggregate]
    traces: dict[str, Trace]  # label -> representative trace (the repeat with the median time)
    diagnoses: dict[str, list[str]]
    checks: dict[str, LosslessCheck]
    specs: dict[str, MethodSpec] = field(default_factory=dict)  # label -> the method and parameters it ran with


def _median_index(values: list[float]) -> int:
    order = sorted(range(len(values)), key=lambda i: values[i])
    return order[(len(order) - 1) // 2]


def _representative(traces: list[Trace]) -> Trace:
    """The repeat with the median elapsed time."""
    return traces[_median_index([t.summary.elapsed_s for t in traces])]


def prepare_specs(prompt: str, specs: Sequence[MethodSpec], *, target: str, max_new_tokens: int, dtype: str,
                  chat: bool | None, store: Any = None, progress: Progress | None = None,
                  skip_failing: bool = False, lang: str = DEFAULT_LANGUAGE) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Load and validate every spec once (label -> `PreparedRun`), before anything is measured.

    With `skip_failing`, a method other than baseline that cannot run with this target is left out and listed
    as (label, reason) instead of failing the whole comparison (the page's Compare does this).
    """
    from ..engine import prepare, user_message
    from ..models import STORE

    store = store if store is not None else STORE
    prepared: dict[str, Any] = {}
    skipped: list[tuple[str, str]] = []
    for spec in specs:
        if progress is not None:
            progress(t("bench.progress.preparing", lang, label=spec.label))
        try:
            prepared[spec.label] = prepare(spec.request(prompt, target=target, max_new_tokens=max_new_tokens,
                                                        dtype=dtype, chat=chat), store, progress)
        except Exception as exc:
            if not skip_failing or spec.is_reference:
                raise
            skipped.append((spec.label, user_message(exc, lang=lang)))
    return prepared, skipped


def compare_on_prompt(
    prompt: str | BenchPrompt,
    specs: Sequence[MethodSpec],
    *,
    target: str | None = None,
    max_new_tokens: int = MAX_NEW_TOKENS["bench"],
    dtype: str = DEFAULT_DTYPE,
    chat: bool | None = None,
    repeats: int = 1,
    warmup: bool = True,
    measure_overhead: bool = True,
    store: Any = None,
    progress: Progress | None = None,
    prompt_label: str = "",
    prepared: dict[str, Any] | None = None,
    lang: str = DEFAULT_LANGUAGE,
) -> CompareResult:
    """Run baseline and `specs` on one prompt, interleaved and repeated; rows, aggregates, traces, diagnoses.

    Baseline is added first if missing. `warmup` runs every method once (`MAX_NEW_TOKENS["bench_warm_up"]` tokens) before
    measuring. Each repeat runs every method once, in an order rotated by one per repeat; with
    `measure_overhead` each method also runs as plain `generate()` next to its instrumented run
    (alternating which goes first). A method that fails, in its warm-up too, records its error in its row.
    `prepared` (label -> `PreparedRun`, from `prepare_specs` on the same prompt and settings) saves preparing
    them again; each method is prepared once per call either way (the warm-up reuses it with fewer tokens).
    `lang` is the language of the progress messages and diagnoses (the CLI's English by default).
    """
    from ..engine import LiveRun, plain_generate, user_message
    from ..models import DEFAULT_TARGET

    target = target or DEFAULT_TARGET
    bp = prompt if isinstance(prompt, BenchPrompt) else BenchPrompt("", "", prompt)
    if repeats < 1:
        raise BenchError(f"repeats must be at least 1; got {repeats}")
    specs = list(specs)
    if not any(s.is_reference for s in specs):
        specs.insert(0, make_spec(REFERENCE))
    report = progress or (lambda _msg: None)

    prepared = dict(prepared or {})
    missing = [spec for spec in specs if spec.label not in prepared]
    if missing:  # load and validate everything before measuring anything
        prepared.update(prepare_specs(bp.text, missing, target=target, max_new_tokens=max_new_tokens, dtype=dtype,
                                      chat=chat, store=store, progress=progress, lang=lang)[0])
    results = {s.label: Measurement(s) for s in specs}
    if warmup:
        for spec in specs:
            report(t("bench.progress.warmup", lang, prefix=prompt_label, label=spec.label))
            try:
                warm_up = min(MAX_NEW_TOKENS["bench_warm_up"], max_new_tokens)
                LiveRun(prepared[spec.label].with_max_new_tokens(warm_up)).run()
            except Exception as exc:  # its row says so, and it is not measured cold as if it had warmed up
                m = results[spec.label]
                m.error = user_message(exc, lang=lang)
                report(t("bench.progress.error", lang, prefix=prompt_label, label=spec.label, error=m.error))
    for r in range(repeats):
        order = specs[r % len(specs):] + specs[: r % len(specs)]
        for spec in order:
            m = results[spec.label]
            if m.error:
                continue
            try:
                runs = ("instrumented", "plain") if r % 2 == 0 else ("plain", "instrumented")
                for kind in runs:
                    if kind == "instrumented":
                        m.traces.append(LiveRun(prepared[spec.label]).run())
                    elif measure_overhead:
                        ids, seconds = plain_generate(prepared[spec.label])
                        m.plain_ids.append(ids)
                        m.plain_s.append(seconds)
            except Exception as exc:  # keep measuring the others; the row says what failed
                m.error = user_message(exc, lang=lang)
                report(t("bench.progress.error", lang, prefix=prompt_label, label=spec.label, error=m.error))
                continue
            run = m.traces[-1]
            base = results[specs[0].label].traces
            sp = theory.measured_speedup(run, base[-1]) if base and not spec.is_reference else None
            report(_repeat_line(run, prompt_label, r, repeats, spec.label, sp, lang))

    base_m = results[specs[0].label]
    checks: dict[str, LosslessCheck] = {}
    rows: list[BenchRow] = []
    traces: dict[str, Trace] = {}
    base_rep = _representative(base_m.traces) if base_m.traces else None
    representatives: dict[str, Trace] = {}
    for spec in specs:
        m = results[spec.label]
        check = None
        if m.traces and base_m.traces and not spec.is_reference:
            check = checked_against(prepared[specs[0].label], m.traces[0], base_m.traces[0])
            checks[spec.label] = check
            if check.severity in ("error", "near-tie"):
                report(f"{prompt_label}{spec.label}: {check.note}")
        rows.append(build_row(spec, bp, m, base_m, check))
        if m.traces:
            traces[spec.label] = representatives[spec.label] = _representative(m.traces)
    aggregates = aggregate(rows)
    diagnoses = _diagnoses(specs, representatives, base_rep, aggregates, lang)
    return CompareResult(prompt=bp, rows=rows, aggregates=aggregates, traces=traces, diagnoses=diagnoses,
                         checks=checks, specs={spec.label: spec for spec in specs})


def _diagnoses(specs: Sequence[MethodSpec], representatives: dict[str, Trace], base_rep: Trace | None,
               aggregates: list[Aggregate], lang: str) -> dict[str, list[str]]:
    """Each method's sentences (`theory.diagnose` on its representative run), quoting the table's figures (the
    aggregates over every repeat), not the one run they read: the table and its text read one set of numbers."""
    by_label = {a.label: a for a in aggregates}
    base_agg = by_label.get(specs[0].label)
    diagnoses: dict[str, list[str]] = {}
    for spec in specs:
        if spec.label in representatives:
            agg = by_label.get(spec.label)
            figures = {} if agg is None else {name: getattr(agg, name, None) for name in theory.FIGURES}
            figures["baseline_tokens_per_s"] = base_agg.tokens_per_s if base_agg is not None else None
            diagnoses[spec.label] = theory.diagnose(representatives[spec.label],
                                                    base_rep if not spec.is_reference else None, lang, figures)
    return diagnoses


def _repeat_line(run: Trace, prefix: str, r: int, repeats: int, label: str, speedup: float | None, lang: str) -> str:
    """The progress line after one measured run: tokens, time, throughput, τ, α and the speedup so far."""
    s = run.summary
    line = t("bench.progress.repeat", lang, prefix=prefix, rep=r + 1, repeats=repeats, label=label,
             n=s.new_tokens, s=number(s.elapsed_s, lang), tps=number(s.tokens_per_s or 0, lang, ".1f"),
             tau=number(s.tokens_per_step or 0, lang))
    if s.acceptance_rate is not None:
        line += f", α={number(s.acceptance_rate, lang)}"
    if speedup:
        line += t("bench.progress.vs_baseline", lang, x=number(speedup, lang))
    return line


# --- the whole benchmark --------------------------------------------------------------------------

@dataclass
class BenchResult:
    meta: dict[str, Any]
    rows: list[BenchRow]
    aggregates: list[Aggregate]
    diagnoses: dict[str, dict[str, list[str]]]  # prompt id -> label -> sentences
    traces: dict[str, dict[str, Trace]]  # prompt id -> label -> representative trace

    @property
    def errors(self) -> list[BenchRow]:
        """Rows that failed to run or broke losslessness in float32."""
        return [r for r in self.rows if r.is_error]

    def overhead(self) -> dict[str, Any]:
        """Instrumented / plain `generate()` time: the median over every pair of runs, and per method."""
        ratios = [x for r in self.rows for x in (r.overhead_ratios or [])]
        per = {}
        for label in dict.fromkeys(r.label for r in self.rows):
            vals = [x for r in self.rows if r.label == label for x in (r.overhead_ratios or [])]
            if vals:
                per[label] = statistics.median(vals)
        return {"median_ratio": statistics.median(ratios) if ratios else None, "runs": len(ratios), "per_method": per}


def run_bench(prompts: Sequence[BenchPrompt], specs: Sequence[MethodSpec], *, target: str | None = None,
              max_new_tokens: int = MAX_NEW_TOKENS["bench"], dtype: str = DEFAULT_DTYPE, chat: bool | None = None, repeats: int = 1,
              measure_overhead: bool = True, store: Any = None, progress: Progress | None = None,
              command: str = "") -> BenchResult:
    """Every prompt through `compare_on_prompt`; one warm-up (on the first prompt) for the whole run."""
    from ..models import DEFAULT_TARGET

    target = target or DEFAULT_TARGET
    report = progress or (lambda _msg: None)
    rows: list[BenchRow] = []
    diagnoses: dict[str, dict[str, list[str]]] = {}
    traces: dict[str, dict[str, Trace]] = {}
    env: dict[str, Any] = {}
    started = time.perf_counter()
    for i, p in enumerate(prompts):
        label = f"[{i + 1}/{len(prompts)} {p.category} #{p.question_id}] "
        result = compare_on_prompt(p, specs, target=target, max_new_tokens=max_new_tokens, dtype=dtype, chat=chat,
                                   repeats=repeats, warmup=(i == 0), measure_overhead=measure_overhead, store=store,
                                   progress=report, prompt_label=label)
        rows.extend(result.rows)
        key = f"{p.category}/{p.question_id}"
        diagnoses[key] = result.diagnoses
        traces[key] = result.traces
        if not env and result.traces:
            first = next(iter(result.traces.values()))
            env = dict(first.env)
            env["chat"] = first.chat
        running = [a for a in aggregate(rows) if a.category == ALL or len({r.category for r in rows}) == 1]
        summary = ", ".join(f"{a.label} ×{a.speedup:.2f}" for a in running if not a.is_baseline and a.speedup)
        report(f"{label}done ({time.perf_counter() - started:.0f} s so far){': ' + summary if summary else ''}")
    meta = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "target": target,
        "methods": [asdict(s) for s in specs],
        "prompts": len(prompts),
        "categories": list(dict.fromkeys(p.category for p in prompts)),
        "max_new_tokens": max_new_tokens,
        "repeats": repeats,
        "dtype_requested": dtype,
        "env": env,
        "host": {"machine": platform.machine(), "processor": platform.processor(), "python": platform.python_version()},
        "wall_s": round(time.perf_counter() - started, 1),
    }
    return BenchResult(meta=meta, rows=rows, aggregates=aggregate(rows), diagnoses=diagnoses, traces=traces)
