"""The benchmark: several drafting methods against baseline, measured honestly.

Fair by construction: one warm-up of every method, then baseline and each method run on the
**same prompt in the same run**, interleaved (the order rotates every repeat), repeated, and
medians reported. Greedy outputs are checked against baseline: a lossless method that differs in
float32 is an error; in bfloat16/float16 the difference is reported with the first divergent token
and the target's probability margin there (a near-tie flipped by batched arithmetic).

Building blocks used by the CLI (`python -m playground bench`), the HTML report and the UI's
Compare view:

* `parse_methods`, `load_prompts`: what to run on what.
* `compare_on_prompt(...)`: several methods on one prompt (baseline included, warm-up,
  interleaved, repeated) -> `CompareResult` with one row per method, aggregates, the traces and
  a diagnosis per method.
* `aggregate(rows)`: per method x category figures (pure; tested on hand-built rows).
* `race_timeline(baseline_trace, method_trace)`: cumulative time -> tokens for a race replay.
* `run_bench(...)` + `write_outputs(...)`: the whole benchmark and its CSV/JSON/HTML.

Speedup is tokens/s of the method over tokens/s of baseline, paired within a repeat and the median
taken over repeats; when both emit the same tokens (every lossless greedy run) it is exactly the
wall-time ratio baseline / method.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from . import examples, theory
from .methods import METHODS, MethodError, get_method, parse_assignments
from .trace import Trace, acceptance_by_position

Progress = Callable[[str], None]

# The columns of results.csv, in order (the first fourteen are the ones the issue asks for).
CSV_COLUMNS = [
    "method", "label", "category", "question_id", "new_tokens", "steps", "acceptance_rate", "tokens_per_step",
    "tokens_per_s", "speedup", "draft_ms", "verify_ms", "theoretical_speedup", "lossless_ok",
    "refined_speedup", "gamma", "c", "verify_cost", "empty_draft_fraction", "expected_tokens_per_step",
    "elapsed_s", "plain_elapsed_s", "speedup_plain", "overhead", "drafted", "accepted", "prompt_tokens",
    "repeats", "dtype", "first_divergence", "divergence_margin", "lossless_note", "instrumented_matches_plain",
    "error", "params", "other_ms", "setup_ms", "other_cost",
]

# The project's own small example set, in Spec-Bench's format. Written for a base model (the
# bundled Gemma 3 270M continues the text); a chat model gets them through its chat template.
EXAMPLE_PROMPTS: list[dict[str, Any]] = [
    {"question_id": e.question_id, "category": e.category, "turns": [e.text]} for e in examples.EXAMPLES
]


class BenchError(MethodError):
    """Bad benchmark input (prompt file, categories, method list); the message is for the user."""


# --- what to run on what --------------------------------------------------------------------------

@dataclass(frozen=True)
class MethodSpec:
    method: str
    params: dict[str, Any] = field(default_factory=dict)
    assistant: str | None = None
    label: str = ""

    def __hash__(self) -> int:
        return hash(self.label)


def _label(method: str, params: dict[str, Any]) -> str:
    if not params:
        return method
    return f"{method}(" + ", ".join(f"{k}={v}" for k, v in params.items()) + ")"


def make_spec(method: str, params: dict[str, Any] | None = None, assistant: str | None = None,
              label: str | None = None) -> MethodSpec:
    """A validated method + parameters (only the parameters given are kept, for a short label)."""
    m = get_method(method)
    given = dict(params or {})
    m.resolve_params(given)  # refuses unknown names and bad values, with the registry's messages
    coerced = {k: m.param(k).coerce(v) for k, v in given.items()}
    return MethodSpec(method=m.name, params=coerced, assistant=assistant if m.needs_assistant else None,
                      label=label or _label(m.name, coerced))


def parse_methods(text: str | None, default_assistant: str | None = None) -> list[MethodSpec]:
    """Parse `prompt_lookup:prompt_lookup_num_tokens=5,speculative:num_assistant_tokens=5`.

    Methods are separated by commas; a method's parameters follow a colon, separated by colons or
    commas (`prompt_lookup:prompt_lookup_num_tokens=5,max_matching_ngram_size=3`). The special key
    `assistant=SPEC` gives one method its own assistant. Baseline is always included, first.
    """
    groups: list[tuple[str, list[str]]] = []
    for raw in (text or "").split(","):
        item = raw.strip()
        if not item:
            continue
        head, _, rest = item.partition(":")
        if "=" in head:  # a further parameter of the previous method
            if not groups:
                raise BenchError(f"parameter {item!r} comes before any method name")
            groups[-1][1].extend(p for p in item.split(":") if p.strip())
            continue
        groups.append((head.strip(), [p for p in rest.split(":") if p.strip()] if rest else []))
    specs: list[MethodSpec] = [make_spec("baseline")]
    for name, assignments in groups:
        if name not in METHODS:
            raise BenchError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
        values = parse_assignments(assignments)
        assistant = values.pop("assistant", None) or default_assistant
        if name == "baseline" and not values:
            continue
        method = get_method(name)
        if method.needs_assistant and not assistant:
            raise BenchError(f"{name} needs an assistant model: pass --assistant or {name}:assistant=MODEL")
        specs.append(make_spec(name, values, assistant))
    labels = [s.label for s in specs]
    dupes = {label for label in labels if labels.count(label) > 1}
    if dupes:
        raise BenchError(f"method listed twice with the same parameters: {', '.join(sorted(dupes))}")
    return specs


@dataclass(frozen=True)
class BenchPrompt:
    question_id: Any
    category: str
    text: str


# Spec-Bench's 480 questions (Apache-2.0), carried with the project: see data/spec_bench/README.md.
SPEC_BENCH_FILE = Path(__file__).resolve().parent / "data" / "spec_bench" / "question.jsonl"
SPEC_BENCH_NAME = "spec-bench"


def load_prompts(path: str | Path | None = None, categories: Sequence[str] | None = None,
                 limit: int | None = None) -> list[BenchPrompt]:
    """Prompts from a Spec-Bench-style JSONL (first turn), the bundled Spec-Bench set ('spec-bench') or the
    example set (None or 'examples'); `limit` is per category."""
    if path is not None and str(path) == SPEC_BENCH_NAME:
        path = SPEC_BENCH_FILE
    if path is None or str(path) == "examples":
        records: Iterable[dict[str, Any]] = EXAMPLE_PROMPTS
        source = "the example set"
    else:
        p = Path(path)
        try:
            lines = p.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise BenchError(f"cannot read prompt file {p}: {exc.strerror}") from None
        records = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BenchError(f"{p}:{number}: not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get("turns"), list) or not record["turns"] \
                    or not isinstance(record["turns"][0], str):
                raise BenchError(f"{p}:{number}: expected an object with 'turns' (a list of strings), as in Spec-Bench")
            records.append(record)
        source = str(p)
    prompts = [BenchPrompt(r.get("question_id", i), str(r.get("category", "uncategorized")), r["turns"][0])
               for i, r in enumerate(records)]
    if categories:
        wanted = [c.strip() for c in categories if c.strip()]
        available = sorted({p.category for p in prompts})
        unknown = [c for c in wanted if c not in available]
        if unknown:
            raise BenchError(f"no prompts of category {', '.join(unknown)} in {source}; it has: {', '.join(available)}")
        prompts = [p for c in wanted for p in prompts if p.category == c]
    if limit is not None:
        if limit < 1:
            raise BenchError(f"--limit must be at least 1; got {limit}")
        seen: dict[str, int] = {}
        kept = []
        for p in prompts:
            seen[p.category] = seen.get(p.category, 0) + 1
            if seen[p.category] <= limit:
                kept.append(p)
        prompts = kept
    if not prompts:
        raise BenchError(f"no prompts selected from {source}")
    return prompts


# --- running one prompt ---------------------------------------------------------------------------

@dataclass
class Divergence:
    index: int
    baseline_token: int | None
    method_token: int | None
    baseline_text: str = ""
    method_text: str = ""
    p_baseline: float | None = None  # target probability of baseline's token at the divergence
    p_method: float | None = None  # ... of the method's token
    margin: float | None = None  # p_baseline − p_method: how near the tie was


@dataclass
class LosslessCheck:
    ok: bool | None  # None: not applicable (lossy method or sampling)
    severity: str  # "ok" | "error" | "near-tie" | "n/a"
    note: str
    divergence: Divergence | None = None


def check_lossless(method_ids: list[int], baseline_ids: list[int], *, dtype: str, lossy: bool = False,
                   sample: bool = False, margin: Divergence | None = None) -> LosslessCheck:
    """Compare a greedy method's output with baseline's: equal, an error (float32) or a near-tie (bf16/fp16)."""
    if sample:
        return LosslessCheck(None, "n/a", "sampling: outputs are compared in distribution, not token by token")
    if lossy:
        return LosslessCheck(None, "n/a", "lossy: ensemble verification does not promise baseline's output")
    index = theory.first_divergence(method_ids, baseline_ids)
    if index is None:
        return LosslessCheck(True, "ok", "identical to baseline")
    div = margin or Divergence(index, _at(baseline_ids, index), _at(method_ids, index))
    where = f"first divergent token at index {index}"
    if div.margin is not None:
        where += (f"; the target's probabilities there: {div.p_baseline:.4f} for baseline's token vs "
                  f"{div.p_method:.4f} for the method's (margin {div.margin:.4f}"
                  + (", an exact tie at this precision" if div.margin == 0 else "") + ")")
    if dtype in ("bfloat16", "float16"):
        return LosslessCheck(False, "near-tie", f"differs in {dtype} ({where}): batched verification rounds "
                             "differently from one-token steps, which can flip a near-tie", div)
    return LosslessCheck(False, "error", f"LOSSLESS VIOLATION in {dtype}: {where}", div)


def _at(ids: list[int], i: int) -> int | None:
    return ids[i] if 0 <= i < len(ids) else None


def divergence_margin(prepared: Any, baseline_ids: list[int], method_ids: list[int], index: int) -> Divergence:
    """The target's probabilities for both candidate tokens at the first divergence (one forward pass)."""
    import torch

    div = Divergence(index, _at(baseline_ids, index), _at(method_ids, index))
    target = prepared.target
    tok = target.tokenizer
    div.baseline_text = tok.decode([div.baseline_token]) if div.baseline_token is not None else "<end>"
    div.method_text = tok.decode([div.method_token]) if div.method_token is not None else "<end>"
    ids = prepared.input_ids[0].tolist() + baseline_ids[:index]
    with target.lock, torch.inference_mode():
        logits = target.model(torch.tensor([ids], device=target.device)).logits[0, -1].float()
    probs = logits.softmax(-1)
    if div.baseline_token is not None:
        div.p_baseline = float(probs[div.baseline_token])
    if div.method_token is not None:
        div.p_method = float(probs[div.method_token])
    if div.p_baseline is not None and div.p_method is not None:
        div.margin = div.p_baseline - div.p_method
    return div


@dataclass
class PlainCheck:
    """A run checked against the same settings without drafting (plain `generate()`, run right after it)."""

    speedup: float | None  # tokens/s of the run over the plain run's (one pair, not interleaved)
    identical: bool
    verdict: str  # "identical to plain generate()" or where and why the outputs diverge
    plain: Trace


def check_against_plain(prepared: Any, trace: Trace, store: Any = None) -> PlainCheck:
    """Run `prepared`'s settings as baseline and compare outputs: identical, or the first divergence with its
    reason (a lossy setting, sampling's different draws, or a near-tie in reduced precision and its margin)."""
    from .engine import LiveRun, RunRequest, prepare

    req = prepared.request
    plain_request = RunRequest(**{**req.__dict__, "method": "baseline", "assistant": None, "params": {}})
    plain = LiveRun(prepare(plain_request, store) if store is not None else prepare(plain_request)).run()
    speedup = theory.measured_speedup(trace, plain)
    index = theory.first_divergence(trace.output_ids, plain.output_ids)
    sample = bool(trace.decoding.get("sample"))
    if index is None:
        return PlainCheck(speedup, True, "identical to plain generate()", plain)
    where = f"differs from plain generate() from token {index}"
    if trace.lossy:
        reason = get_method(trace.method).lossy_reason(trace.params, sample) or "the output is not the target's alone"
        return PlainCheck(speedup, False, f"{where}: a lossy setting ({reason})", plain)
    if sample:
        return PlainCheck(speedup, False, f"{where}: with sampling, drafting draws its random numbers differently, "
                          "so the same seed picks other tokens from the same target distribution", plain)
    try:
        margin = divergence_margin(prepared, plain.output_ids, trace.output_ids, index)
    except Exception:  # the margin is a courtesy; the divergence itself is still reported
        margin = None
    check = check_lossless(trace.output_ids, plain.output_ids, dtype=str(trace.env.get("dtype", "")), margin=margin)
    return PlainCheck(speedup, False, f"{where}: {check.note.replace('baseline', 'plain generate()')}", plain)


@dataclass
class Measurement:
    """One method on one prompt: every repeat's instrumented trace and (optionally) plain generate() time."""

    spec: MethodSpec
    traces: list[Trace] = field(default_factory=list)
    plain_s: list[float] = field(default_factory=list)
    plain_ids: list[list[int]] = field(default_factory=list)
    error: str = ""


@dataclass
class CompareResult:
    prompt: BenchPrompt
    rows: list[dict[str, Any]]
    aggregates: list[dict[str, Any]]
    traces: dict[str, Trace]  # label -> representative trace (the repeat with the median time)
    diagnoses: dict[str, list[str]]
    checks: dict[str, LosslessCheck]


def _median_index(values: list[float]) -> int:
    order = sorted(range(len(values)), key=lambda i: values[i])
    return order[(len(order) - 1) // 2]


def _request(spec: MethodSpec, prompt: str, *, target: str, max_new_tokens: int, dtype: str, chat: bool | None) -> Any:
    from .engine import RunRequest

    return RunRequest(prompt=prompt, target=target, method=spec.method, assistant=spec.assistant,
                      params=dict(spec.params), max_new_tokens=max_new_tokens, dtype=dtype, chat=chat)


def compare_on_prompt(
    prompt: str | BenchPrompt,
    specs: Sequence[MethodSpec],
    *,
    target: str | None = None,
    max_new_tokens: int = 48,
    dtype: str = "auto",
    chat: bool | None = None,
    repeats: int = 1,
    warmup: bool = True,
    measure_overhead: bool = True,
    store: Any = None,
    progress: Progress | None = None,
    prompt_label: str = "",
) -> CompareResult:
    """Run baseline and `specs` on one prompt, interleaved and repeated; rows, aggregates, traces, diagnoses.

    Baseline is added first if missing. `warmup` runs every method once (16 tokens) before
    measuring. Each repeat runs every method once, in an order rotated by one per repeat; with
    `measure_overhead` each method also runs as plain `generate()` next to its instrumented run
    (alternating which goes first). A method that fails records its error in its row.
    """
    from .engine import LiveRun, plain_generate, prepare, user_message
    from .models import DEFAULT_TARGET, STORE

    store = store if store is not None else STORE
    target = target or DEFAULT_TARGET
    bp = prompt if isinstance(prompt, BenchPrompt) else BenchPrompt("", "", prompt)
    if repeats < 1:
        raise BenchError(f"repeats must be at least 1; got {repeats}")
    specs = list(specs)
    if not any(s.method == "baseline" for s in specs):
        specs.insert(0, make_spec("baseline"))
    report = progress or (lambda _msg: None)

    prepared: dict[str, Any] = {}
    for spec in specs:  # load and validate everything before measuring anything
        prepared[spec.label] = prepare(_request(spec, bp.text, target=target, max_new_tokens=max_new_tokens,
                                                dtype=dtype, chat=chat), store, progress)
    if warmup:
        for spec in specs:
            report(f"{prompt_label}warm-up {spec.label}")
            try:
                req = _request(spec, bp.text, target=target, max_new_tokens=min(16, max_new_tokens), dtype=dtype, chat=chat)
                LiveRun(prepare(req, store)).run()
            except Exception:  # the measured run will report it
                pass

    results = {s.label: Measurement(s) for s in specs}
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
                m.error = user_message(exc)
                report(f"{prompt_label}{spec.label}: error: {m.error}")
                continue
            t = m.traces[-1]
            base = results[specs[0].label].traces
            sp = theory.measured_speedup(t, base[-1]) if base and spec.method != "baseline" else None
            acc = "" if t.summary.acceptance_rate is None else f", α={t.summary.acceptance_rate:.2f}"
            report(f"{prompt_label}rep {r + 1}/{repeats} {spec.label}: {t.summary.new_tokens} tok in "
                   f"{t.summary.elapsed_s:.2f} s, {t.summary.tokens_per_s or 0:.1f} tok/s, "
                   f"τ={t.summary.tokens_per_step or 0:.2f}{acc}" + (f", ×{sp:.2f} vs baseline" if sp else ""))

    base_m = results[specs[0].label]
    checks: dict[str, LosslessCheck] = {}
    rows: list[dict[str, Any]] = []
    traces: dict[str, Trace] = {}
    diagnoses: dict[str, list[str]] = {}
    base_rep = base_m.traces[_median_index([t.summary.elapsed_s for t in base_m.traces])] if base_m.traces else None
    for spec in specs:
        m = results[spec.label]
        check = None
        if m.traces and base_m.traces and spec.method != "baseline":
            t0, b0 = m.traces[0], base_m.traces[0]
            dtype_name = str(t0.env.get("dtype", ""))
            margin = None
            index = theory.first_divergence(t0.output_ids, b0.output_ids)
            if index is not None and not t0.lossy and not t0.decoding.get("sample"):
                try:
                    margin = divergence_margin(prepared[specs[0].label], b0.output_ids, t0.output_ids, index)
                except Exception:  # the margin is a courtesy; the mismatch itself is still reported
                    margin = None
            check = check_lossless(t0.output_ids, b0.output_ids, dtype=dtype_name, lossy=t0.lossy,
                                   sample=bool(t0.decoding.get("sample")), margin=margin)
            checks[spec.label] = check
            if check.severity in ("error", "near-tie"):
                report(f"{prompt_label}{spec.label}: {check.note}")
        row = build_row(spec, bp, m, base_m, check)
        rows.append(row)
        if m.traces:
            rep = m.traces[_median_index([t.summary.elapsed_s for t in m.traces])]
            traces[spec.label] = rep
            diagnoses[spec.label] = theory.diagnose(rep, base_rep if spec.method != "baseline" else None)
    return CompareResult(prompt=bp, rows=rows, aggregates=aggregate(rows), traces=traces, diagnoses=diagnoses,
                         checks=checks)


def _med(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(vals) if vals else None


def build_row(spec: MethodSpec, prompt: BenchPrompt, m: Measurement, base: Measurement,
              check: LosslessCheck | None) -> dict[str, Any]:
    """One CSV row: medians over repeats; speedups paired with baseline's run of the same repeat."""
    row: dict[str, Any] = {c: None for c in CSV_COLUMNS}
    row.update(method=spec.method, label=spec.label, category=prompt.category, question_id=prompt.question_id,
               params=json.dumps(spec.params, sort_keys=True), repeats=len(m.traces), error=m.error or "")
    if not m.traces:
        row["lossless_ok"] = None
        return row
    t0 = m.traces[0]
    s0 = t0.summary
    row.update(new_tokens=s0.new_tokens, steps=s0.steps, drafted=s0.drafted, accepted=s0.accepted,
               acceptance_rate=s0.acceptance_rate, tokens_per_step=s0.tokens_per_step, prompt_tokens=t0.prompt_tokens,
               dtype=t0.env.get("dtype"))
    row["elapsed_s"] = _med(t.summary.elapsed_s for t in m.traces)
    row["tokens_per_s"] = _med(t.summary.tokens_per_s for t in m.traces)
    row["draft_ms"] = _med(t.summary.draft_ms for t in m.traces)
    row["verify_ms"] = _med(t.summary.verify_ms for t in m.traces)
    row["other_ms"] = _med(t.summary.other_ms for t in m.traces)
    row["setup_ms"] = _med(t.setup_ms for t in m.traces)
    pairs = list(zip(m.traces, base.traces))
    ests = [theory.estimate(t, b) for t, b in pairs] or [theory.estimate(t0)]
    row["speedup"] = 1.0 if spec.method == "baseline" else _med(e.measured_speedup for e in ests)
    row["theoretical_speedup"] = _med(e.theoretical_speedup for e in ests)
    row["refined_speedup"] = _med(e.refined_speedup for e in ests)
    row["gamma"] = ests[0].gamma
    row["empty_draft_fraction"] = ests[0].empty_fraction if spec.method != "baseline" else None
    row["expected_tokens_per_step"] = ests[0].expected_tau
    row["c"] = _med(e.c for e in ests)
    row["verify_cost"] = _med(e.v for e in ests)
    row["other_cost"] = _med(e.o for e in ests)
    # for pooling in aggregates (JSON only)
    row["baseline_step_ms"] = _med(e.baseline_step_ms for e in ests)
    row["empty_cost"] = _med(e.empty_cost for e in ests)
    row["prefill_share"] = _med(e.prefill_share for e in ests)
    row["prefill_ratio"] = _med(e.prefill_ratio for e in ests)
    row["drafting_steps"] = ests[0].drafting_steps
    row["drafted_tokens_total"] = sum(len(s.drafted) for s in t0.steps)
    row["position_counts"] = [list(x) for x in acceptance_by_position(t0.steps)]
    if m.plain_s:
        row["plain_elapsed_s"] = _med(m.plain_s)
        ratios = [t.summary.elapsed_s / p for t, p in zip(m.traces, m.plain_s) if p > 0]
        row["overhead"] = _med(ratios)
        row["overhead_ratios"] = ratios
        row["instrumented_matches_plain"] = all(ids == t.output_ids for ids, t in zip(m.plain_ids, m.traces))
        if spec.method == "baseline":
            row["speedup_plain"] = 1.0
        elif base.plain_s:
            plain_pairs = [(p, bp) for p, bp in zip(m.plain_s, base.plain_s) if p > 0 and bp > 0]
            n_m, n_b = s0.new_tokens, base.traces[0].summary.new_tokens if base.traces else 0
            if n_m and n_b:
                row["speedup_plain"] = _med((n_m / p) / (n_b / bp) for p, bp in plain_pairs)
    if spec.method == "baseline":
        row["lossless_ok"] = True
        row["lossless_note"] = "the reference"
    elif check is not None:
        row["lossless_ok"] = check.ok
        row["lossless_note"] = check.note
        if check.divergence is not None:
            row["first_divergence"] = check.divergence.index
            row["divergence_margin"] = check.divergence.margin
            row["divergence"] = asdict(check.divergence)
        row["lossless_severity"] = check.severity
    return row


# --- aggregation (pure) ---------------------------------------------------------------------------

def _num(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per method (label) x category, plus each label over all categories ("all").

    speedup = (Σ tokens / Σ median time of the method) / (Σ tokens / Σ median time of baseline)
    over the prompts where both ran; acceptance_rate = Σ accepted / Σ verified drafts; τ = Σ tokens
    / Σ steps; per-step draft and verify ms = Σ ms / Σ steps; acceptance by position pooled over
    prompts; α, γ, c, v pooled (γ weighted by drafting steps, c by drafted tokens, v by drafting
    steps) and fed to the same formulas as a single run.
    """
    ok = [r for r in rows if not r.get("error") and r.get("new_tokens")]
    baseline = {(r["category"], r["question_id"]): r for r in ok if r["method"] == "baseline"}
    labels = list(dict.fromkeys(r["label"] for r in ok))
    categories = list(dict.fromkeys(r["category"] for r in ok))
    out: list[dict[str, Any]] = []
    for label in labels:
        for category in categories + (["all"] if len(categories) > 1 else []):
            group = [r for r in ok if r["label"] == label and (category == "all" or r["category"] == category)]
            if group:
                out.append(_aggregate_group(label, category, group, baseline))
    return out


def _aggregate_group(label: str, category: str, group: list[dict[str, Any]],
                     baseline: dict[tuple[Any, Any], dict[str, Any]]) -> dict[str, Any]:
    method = group[0]["method"]
    tokens = sum(r["new_tokens"] for r in group)
    seconds = sum(r["elapsed_s"] or 0.0 for r in group)
    steps = sum(r["steps"] for r in group)
    drafted = sum(r.get("drafted") or 0 for r in group)
    accepted = sum(r.get("accepted") or 0 for r in group)
    agg: dict[str, Any] = {
        "method": method, "label": label, "category": category, "prompts": len(group), "new_tokens": tokens,
        "steps": steps, "elapsed_s": seconds, "tokens_per_s": tokens / seconds if seconds > 0 else None,
        "acceptance_rate": accepted / drafted if drafted else None, "drafted": drafted, "accepted": accepted,
        "tokens_per_step": tokens / steps if steps else None,
        "draft_ms_per_step": sum(r.get("draft_ms") or 0.0 for r in group) / steps if steps else None,
        "verify_ms_per_step": sum(r.get("verify_ms") or 0.0 for r in group) / steps if steps else None,
        "other_ms_per_step": sum(r.get("other_ms") or 0.0 for r in group) / steps if steps else None,
        "setup_ms_per_run": sum(r.get("setup_ms") or 0.0 for r in group) / len(group),
    }
    paired = [(r, baseline.get((r["category"], r["question_id"]))) for r in group]
    paired = [(r, b) for r, b in paired if b is not None and b.get("elapsed_s") and r.get("elapsed_s")]
    if paired:
        m_rate = sum(r["new_tokens"] for r, _ in paired) / sum(r["elapsed_s"] for r, _ in paired)
        b_rate = sum(b["new_tokens"] for _, b in paired) / sum(b["elapsed_s"] for _, b in paired)
        agg["speedup"] = m_rate / b_rate
        agg["baseline_step_ms"] = _weighted([(b.get("baseline_step_ms"), 1) for _, b in paired])
    else:
        agg["speedup"] = None
    plain = [r for r in group if r.get("plain_elapsed_s")]
    agg["overhead"] = _med(x for r in group for x in (r.get("overhead_ratios") or ([r["overhead"]] if r.get("overhead") else [])))
    if plain and paired:
        agg["speedup_plain"] = _med(r.get("speedup_plain") for r in group)
    # acceptance by position, pooled
    counts: list[list[int]] = []
    for r in group:
        for k, (n, kept, *judged) in enumerate(r.get("position_counts") or []):
            while len(counts) <= k:
                counts.append([0, 0, 0])
            counts[k][0] += n
            counts[k][1] += kept
            counts[k][2] += judged[0] if judged else n  # rows of schema-1 traces: every verified draft counted as judged
    agg["position_counts"] = counts
    agg["position_acceptance"] = [kept / n if n else None for n, kept, _ in counts]
    agg["position_acceptance_judged"] = [kept / judged if judged else None for _, kept, judged in counts]
    # theory from pooled inputs
    drafting_steps = sum(r.get("drafting_steps") or 0 for r in group)
    agg["empty_draft_fraction"] = 1 - drafting_steps / steps if steps and method != "baseline" else None
    agg["gamma"] = (sum(r.get("drafted_tokens_total") or 0 for r in group) / drafting_steps) if drafting_steps else None
    agg["c"] = _weighted([(r.get("c"), r.get("drafted_tokens_total") or 0) for r in group])
    agg["verify_cost"] = _weighted([(r.get("verify_cost"), r.get("drafting_steps") or 0) for r in group])
    agg["other_cost"] = _weighted([(r.get("other_cost"), r.get("drafting_steps") or 0) for r in group])
    agg["empty_cost"] = _weighted([(r.get("empty_cost"), r["steps"] - (r.get("drafting_steps") or 0)) for r in group])
    agg["prefill_share"] = _weighted([(r.get("prefill_share"), 1) for r in group])
    agg["prefill_ratio"] = _weighted([(r.get("prefill_ratio"), 1) for r in group])
    step_rest = None if agg["verify_cost"] is None else agg["verify_cost"] + (agg["other_cost"] or 0.0)
    agg.update(predict(method, agg["acceptance_rate"], agg["gamma"], agg["c"], step_rest,
                       agg["empty_draft_fraction"] or 0.0, agg["empty_cost"], agg["prefill_share"], agg["prefill_ratio"]))
    mism = [r for r in group if r.get("lossless_ok") is False]
    agg["lossless_mismatches"] = len(mism)
    agg["lossless_errors"] = sum(1 for r in mism if r.get("lossless_severity") == "error")
    agg["explanation"] = theory.explain_gap(agg) if method != "baseline" else ""
    return agg


def predict(method: str, alpha: float | None, gamma: float | None, c: float | None, v: float | None,
            e: float = 0.0, empty_cost: float | None = None, prefill_share: float | None = None,
            prefill_ratio: float | None = None) -> dict[str, float | None]:
    """Leviathan's prediction and the refinement stages for pooled inputs (None where not computable).

    `v` is what a drafting step costs besides drafting, in baseline steps: verify + other (v + o)."""
    if method == "baseline":
        return {"theoretical_speedup": 1.0, "with_verify_cost": 1.0, "with_empty_steps": 1.0,
                "refined_speedup": 1.0, "expected_tokens_per_step": 1.0}
    out: dict[str, float | None] = {"theoretical_speedup": None, "with_verify_cost": None, "with_empty_steps": None,
                                    "refined_speedup": None, "expected_tokens_per_step": None}
    if alpha is None or gamma is None:
        return out
    out["expected_tokens_per_step"] = (1 - e) * theory.expected_tokens_per_step(alpha, gamma) + e
    if c is None or v is None:
        return out
    out["theoretical_speedup"] = theory.expected_speedup(alpha, gamma, c)
    out["with_verify_cost"] = theory.refined_speedup(alpha, gamma, c, v)
    out["with_empty_steps"] = theory.refined_speedup(alpha, gamma, c, v, e, empty_cost if empty_cost is not None else 1.0)
    out["refined_speedup"] = theory.refined_speedup(alpha, gamma, c, v, e, empty_cost if empty_cost is not None else 1.0,
                                                    prefill_share or 0.0, prefill_ratio if prefill_ratio is not None else 1.0)
    return out


def _weighted(pairs: list[tuple[Any, float]]) -> float | None:
    pairs = [(float(x), w) for x, w in pairs if _num(x) is not None and w]
    total = sum(w for _, w in pairs)
    return sum(x * w for x, w in pairs) / total if total else None


# --- race replay (pure) ---------------------------------------------------------------------------

@dataclass
class RacePoint:
    t_ms: float  # cumulative step time when this step's tokens appeared
    tokens: int  # cumulative tokens emitted
    step: int
    text: str  # text emitted in this step


@dataclass
class RaceLane:
    label: str
    method: str
    points: list[RacePoint]
    total_ms: float
    new_tokens: int


def race_lane(trace: Trace, label: str | None = None) -> RaceLane:
    """Cumulative time -> tokens for one trace (starts at 0, 0): the set-up, then each step's draft + verify + other,
    so a lane ends at the run's elapsed time."""
    t = trace.setup_ms
    n = 0
    points = [RacePoint(0.0, 0, -1, "")]
    for s in trace.steps:
        t += s.time_ms
        n += len(s.emitted)
        points.append(RacePoint(round(t, 3), n, s.index, "".join(s.emitted_text)))
    return RaceLane(label or trace.method, trace.method, points, round(t, 3), n)


def race_timeline(baseline_trace: Trace, method_trace: Trace) -> dict[str, Any]:
    """Both lanes of a race replay plus who finished first and by how much (JSON-ready)."""
    lanes = [race_lane(baseline_trace, "baseline"), race_lane(method_trace, method_trace.method)]
    b, m = lanes
    return {
        "lanes": [asdict(lane) for lane in lanes],
        "duration_ms": max(b.total_ms, m.total_ms),
        "winner": m.label if m.total_ms < b.total_ms else b.label,
        "time_ratio": (b.total_ms / m.total_ms) if m.total_ms > 0 else None,
    }


# --- the whole benchmark --------------------------------------------------------------------------

@dataclass
class BenchResult:
    meta: dict[str, Any]
    rows: list[dict[str, Any]]
    aggregates: list[dict[str, Any]]
    diagnoses: dict[str, dict[str, list[str]]]  # prompt id -> label -> sentences
    traces: dict[str, dict[str, Trace]]  # prompt id -> label -> representative trace

    @property
    def errors(self) -> list[dict[str, Any]]:
        """Rows that failed to run or broke losslessness in float32."""
        return [r for r in self.rows if r.get("error") or r.get("lossless_severity") == "error"]

    def overhead(self) -> dict[str, Any]:
        ratios = [x for r in self.rows for x in (r.get("overhead_ratios") or [])]
        per = {}
        for label in dict.fromkeys(r["label"] for r in self.rows):
            vals = [x for r in self.rows if r["label"] == label for x in (r.get("overhead_ratios") or [])]
            if vals:
                per[label] = statistics.median(vals)
        return {"median_ratio": statistics.median(ratios) if ratios else None, "runs": len(ratios), "per_method": per}


def run_bench(prompts: Sequence[BenchPrompt], specs: Sequence[MethodSpec], *, target: str | None = None,
              max_new_tokens: int = 48, dtype: str = "auto", chat: bool | None = None, repeats: int = 1,
              measure_overhead: bool = True, store: Any = None, progress: Progress | None = None,
              command: str = "") -> BenchResult:
    """Every prompt through `compare_on_prompt`; one warm-up (on the first prompt) for the whole run."""
    from .models import DEFAULT_TARGET

    target = target or DEFAULT_TARGET
    report = progress or (lambda _msg: None)
    rows: list[dict[str, Any]] = []
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
        running = [a for a in aggregate(rows) if a["category"] == "all" or len({r["category"] for r in rows}) == 1]
        summary = ", ".join(f"{a['label']} ×{a['speedup']:.2f}" for a in running
                            if a["method"] != "baseline" and a.get("speedup"))
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


# --- outputs ----------------------------------------------------------------------------------------

def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _csv_value(row.get(k)) for k in CSV_COLUMNS})


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def write_outputs(result: BenchResult, out_dir: str | Path, save_traces: bool = True) -> dict[str, Path]:
    """results.csv, results.json, report.html (and traces/ with each representative trace)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "results.csv", "json": out / "results.json", "html": out / "report.html"}
    write_csv(result.rows, paths["csv"])
    payload = {
        "meta": result.meta, "rows": result.rows, "aggregates": result.aggregates, "overhead": result.overhead(),
        "diagnoses": result.diagnoses, "theory": theory.THEORY_NOTES,
        "errors": [{"label": r["label"], "question_id": r["question_id"], "error": r.get("error") or r.get("lossless_note")}
                   for r in result.errors],
    }
    paths["json"].write_text(json.dumps(_jsonable(payload), indent=1, ensure_ascii=False, default=str), encoding="utf-8")
    from .bench_charts import render_report

    paths["html"].write_text(render_report(result), encoding="utf-8")
    if save_traces:
        tdir = out / "traces"
        tdir.mkdir(exist_ok=True)
        for key, by_label in result.traces.items():
            for label, trace in by_label.items():
                trace.save(tdir / _trace_filename(key, label))
    return paths


def _trace_filename(key: str, label: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in f"{key}__{label}") + ".json"


def load_result(out_dir: str | Path) -> BenchResult:
    """A finished benchmark read back from its results.json and traces/ (aggregates recomputed), e.g. to
    re-render report.html with `write_outputs(load_result(d), d)` after changing the report code."""
    out = Path(out_dir)
    data = json.loads((out / "results.json").read_text(encoding="utf-8"))
    traces: dict[str, dict[str, Trace]] = {}
    for key, by_label in (data.get("diagnoses") or {}).items():
        for label in by_label:
            path = out / "traces" / _trace_filename(key, label)
            if path.exists():
                traces.setdefault(key, {})[label] = Trace.load(path)
    rows = data["rows"]
    return BenchResult(meta=data["meta"], rows=rows, aggregates=aggregate(rows), diagnoses=data.get("diagnoses") or {},
                       traces=traces)


def results_table(aggregates: list[dict[str, Any]]) -> str:
    """A Markdown table of the aggregates (for notes and the terminal)."""
    head = ("| method | category | prompts | speedup | tok/s | α | τ | draft ms/step | verify ms/step | "
            "other ms/step | Leviathan | refined | overhead |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]

    def f(x: Any, fmt: str) -> str:
        return "–" if x is None else format(x, fmt)

    for a in aggregates:
        lines.append(
            f"| {a['label']} | {a['category']} | {a['prompts']} | {f(a.get('speedup'), '.2f')} | "
            f"{f(a.get('tokens_per_s'), '.1f')} | {f(a.get('acceptance_rate'), '.2f')} | "
            f"{f(a.get('tokens_per_step'), '.2f')} | {f(a.get('draft_ms_per_step'), '.0f')} | "
            f"{f(a.get('verify_ms_per_step'), '.0f')} | {f(a.get('other_ms_per_step'), '.0f')} | "
            f"{f(a.get('theoretical_speedup'), '.2f')} | "
            f"{f(a.get('refined_speedup'), '.2f')} | {f(a.get('overhead'), '.3f')} |"
        )
    return "\n".join(lines)


# --- command line -----------------------------------------------------------------------------------

def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    from .models import DEFAULT_TARGET

    parser.add_argument("--prompts", default="examples",
                        help="'spec-bench' for Spec-Bench's 480 questions (carried with the project), a Spec-Bench-style "
                             "JSONL (question_id, category, turns; the first turn is the prompt), or 'examples' for the "
                             "project's small example set (default)")
    parser.add_argument("--categories", default=None, help="comma-separated categories to keep, e.g. summarization,rag")
    parser.add_argument("--limit", type=int, default=None, help="at most this many prompts per category")
    parser.add_argument("--methods", default="prompt_lookup",
                        help="comma-separated methods with parameters, e.g. "
                             "prompt_lookup:prompt_lookup_num_tokens=5,speculative:num_assistant_tokens=5 "
                             "(baseline always runs; method:assistant=MODEL gives one method its own assistant)")
    parser.add_argument("--target", default=DEFAULT_TARGET, help="catalogue key, Hub id or local directory")
    parser.add_argument("--assistant", default=None, help="assistant for the methods that need one")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3, help="measured runs of each method per prompt (medians)")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    chat = parser.add_mutually_exclusive_group()
    chat.add_argument("--chat", dest="chat", action="store_true", default=None, help="apply the chat template")
    chat.add_argument("--no-chat", dest="chat", action="store_false", help="raw prompts, no chat template")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads for the run (default: torch's choice). On cores shared with other "
                             "work, 1 thread gives far steadier timings than an oversubscribed OpenMP team")
    parser.add_argument("--no-overhead", dest="overhead", action="store_false",
                        help="skip the plain generate() runs that measure instrumentation overhead")
    parser.add_argument("--no-traces", dest="save_traces", action="store_false", help="do not write traces/")
    parser.add_argument("--out", default="bench-out", type=Path, help="directory for results.csv, results.json, report.html")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def cmd_bench(args: argparse.Namespace) -> int:
    from .engine import user_message

    progress = None if args.quiet else (lambda msg: print(f"… {msg}", file=sys.stderr, flush=True))
    try:
        specs = parse_methods(args.methods, args.assistant)
        categories = args.categories.split(",") if args.categories else None
        prompts = load_prompts(None if args.prompts == "examples" else args.prompts, categories, args.limit)
        if args.repeats < 1:
            raise BenchError(f"--repeats must be at least 1; got {args.repeats}")
        if args.threads is not None:
            if args.threads < 1:
                raise BenchError(f"--threads must be at least 1; got {args.threads}")
            import torch

            torch.set_num_threads(args.threads)
        if progress:
            progress(f"{len(prompts)} prompts × {len(specs)} methods ({', '.join(s.label for s in specs)}) × "
                     f"{args.repeats} repeats" + (" (+ plain generate() runs for the overhead)" if args.overhead else ""))
        command = "python -m playground bench " + " ".join(_quote(a) for a in sys.argv[2:]) if sys.argv[1:2] == ["bench"] else ""
        result = run_bench(prompts, specs, target=args.target, max_new_tokens=args.max_new_tokens, dtype=args.dtype,
                           chat=args.chat, repeats=args.repeats, measure_overhead=args.overhead, progress=progress,
                           command=command)
        paths = write_outputs(result, args.out, save_traces=args.save_traces)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        print(f"error: {user_message(exc)}", file=sys.stderr)
        return 2
    print(results_table([a for a in result.aggregates if a["category"] == "all"] or result.aggregates))
    overhead = result.overhead()
    if overhead["median_ratio"] is not None:
        print(f"instrumentation overhead: median ratio instrumented/plain = {overhead['median_ratio']:.3f} "
              f"over {overhead['runs']} runs")
    print(f"wrote {paths['csv']}, {paths['json']}, {paths['html']}")
    errors = result.errors
    for r in errors:
        print(f"error: {r['label']} on {r['category']}/{r['question_id']}: {r.get('error') or r.get('lossless_note')}",
              file=sys.stderr)
    return 3 if errors else 0


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)
