"""The benchmark's records: one `BenchRow` per method × prompt, measured from a `Measurement`.

Typed like `trace.Trace`: every figure is a field, `to_dict` gives the JSON form (results.json's rows, in the
order of results.csv's columns, then the JSON-only fields), `from_dict` reads it back with its invariants
checked. The pooled per method × category figures are `aggregation.Aggregate`.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from .. import theory
from ..trace import RecordReader, Trace, acceptance_by_position
from .lossless import SEVERITIES, Divergence, LosslessCheck
from .prompts import BenchPrompt
from .specs import BenchError, MethodSpec

# The columns of results.csv, in order (the first fourteen are the ones the issue asks for).
CSV_COLUMNS = [
    "method", "label", "category", "question_id", "new_tokens", "steps", "acceptance_rate", "tokens_per_step",
    "tokens_per_s", "speedup", "draft_ms", "verify_ms", "theoretical_speedup", "lossless_ok",
    "refined_speedup", "gamma", "c", "verify_cost", "empty_draft_fraction", "expected_tokens_per_step",
    "elapsed_s", "plain_elapsed_s", "speedup_plain", "overhead", "drafted", "accepted", "prompt_tokens",
    "repeats", "dtype", "first_divergence", "divergence_margin", "lossless_note", "instrumented_matches_plain",
    "error", "params", "other_ms", "setup_ms", "other_cost",
]


@dataclass
class Measurement:
    """One method on one prompt: every repeat's instrumented trace and (optionally) plain generate() time."""

    spec: MethodSpec
    traces: list[Trace] = field(default_factory=list)
    plain_s: list[float] = field(default_factory=list)
    plain_ids: list[list[int]] = field(default_factory=list)
    error: str = ""


@dataclass
class BenchRow:
    """One method on one prompt: medians over repeats, speedups paired with baseline's run of the same repeat.

    The fields up to `other_cost` are results.csv's columns, in its order; the rest are in results.json only
    (the inputs the aggregates pool). A method that failed has its `error` and no figures (None)."""

    method: str
    label: str
    category: str
    question_id: Any
    new_tokens: int | None = None
    steps: int | None = None
    acceptance_rate: float | None = None
    tokens_per_step: float | None = None
    tokens_per_s: float | None = None
    speedup: float | None = None
    draft_ms: float | None = None
    verify_ms: float | None = None
    theoretical_speedup: float | None = None
    lossless_ok: bool | None = None
    refined_speedup: float | None = None
    gamma: float | None = None
    c: float | None = None
    verify_cost: float | None = None
    empty_draft_fraction: float | None = None
    expected_tokens_per_step: float | None = None
    elapsed_s: float | None = None
    plain_elapsed_s: float | None = None
    speedup_plain: float | None = None
    overhead: float | None = None
    drafted: int | None = None
    accepted: int | None = None
    prompt_tokens: int | None = None
    repeats: int = 0
    dtype: str | None = None
    first_divergence: int | None = None
    divergence_margin: float | None = None
    lossless_note: str | None = None
    instrumented_matches_plain: bool | None = None
    error: str = ""
    params: str = "{}"  # the method's parameters as sorted JSON
    other_ms: float | None = None
    setup_ms: float | None = None
    other_cost: float | None = None
    # results.json only: what the aggregates pool
    baseline_step_ms: float | None = None
    empty_cost: float | None = None
    prefill_share: float | None = None
    prefill_ratio: float | None = None
    drafting_steps: int | None = None
    drafted_tokens_total: int | None = None
    position_counts: list[list[int]] = field(default_factory=list)  # per draft position: (reached, kept, judged)
    overhead_ratios: list[float] | None = None  # instrumented / plain time, one per repeat
    speedups: list[float] | None = None  # the speedup of each repeat over baseline's run of the same repeat
    divergence: Divergence | None = None
    lossless_severity: str | None = None  # one of lossless.SEVERITIES; None for baseline and unchecked rows

    @property
    def key(self) -> tuple[str, Any]:
        """The prompt this row measured: (category, question_id)."""
        return self.category, self.question_id

    @property
    def ran(self) -> bool:
        """Whether the row has figures to pool: it did not fail and emitted tokens."""
        return not self.error and bool(self.new_tokens)

    @property
    def is_error(self) -> bool:
        """Failed to run, or broke losslessness in float32."""
        return bool(self.error) or self.lossless_severity == "error"

    def check_invariants(self) -> None:
        """Raise BenchError if the figures contradict each other."""
        for name in ("new_tokens", "steps", "drafted", "accepted", "prompt_tokens", "repeats"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise BenchError(f"benchmark row {self.label}: {name} must not be negative")
        if self.drafted is not None and self.accepted is not None and self.accepted > self.drafted:
            raise BenchError(f"benchmark row {self.label}: more tokens accepted than drafted")
        if self.lossless_severity is not None and self.lossless_severity not in SEVERITIES:
            raise BenchError(f"benchmark row {self.label}: unknown lossless severity {self.lossless_severity!r}")
        if self.error and self.new_tokens is not None:
            raise BenchError(f"benchmark row {self.label}: a failed run has no figures")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def csv_record(self) -> dict[str, Any]:
        """The row's results.csv columns."""
        return {name: getattr(self, name) for name in CSV_COLUMNS}

    @classmethod
    def from_dict(cls, data: Any) -> "BenchRow":
        """A row from results.json (its divergence a `Divergence` again, its invariants checked)."""
        return read_record(cls, data, "benchmark row")


class _BenchReader(RecordReader):
    """Benchmark records as `to_dict` writes them: a key of no field is refused, a nested record (the divergence)
    is built again; the figures are taken as written (the record's `check_invariants` judges them)."""

    refuse_unknown = True

    def field_where(self, where: str, name: str) -> str:
        return name  # a nested record is named by its field ("divergence")

    def leaf(self, value: Any, hint: Any, where: str, name: str) -> Any:
        return value

    def not_an_object(self, cls: type, where: str, value: Any) -> BenchError:
        return BenchError(f"a {where} must be a JSON object")

    def missing(self, where: str, name: str) -> BenchError:
        return BenchError(f"{where}: no '{name}'")

    def unknown_fields(self, where: str, names: list[str]) -> BenchError:
        return BenchError(f"{where}: unknown field(s) {', '.join(map(str, names))}")


def read_record(cls: type, data: Any, what: str) -> Any:
    """A benchmark record (`BenchRow`, `Aggregate`) from its JSON form, its invariants checked; `what` names it in
    messages."""
    record = _BenchReader().record(cls, data, what)
    record.check_invariants()
    return record


def median(values: Iterable[float | None]) -> float | None:
    """The median of the values that are numbers (None and NaN left out), or None."""
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(vals) if vals else None


def build_row(spec: MethodSpec, prompt: BenchPrompt, m: Measurement, base: Measurement,
              check: LosslessCheck | None) -> BenchRow:
    """One row: medians over repeats; speedups paired with baseline's run of the same repeat."""
    row = BenchRow(method=spec.method, label=spec.label, category=prompt.category, question_id=prompt.question_id,
                   params=json.dumps(spec.params, sort_keys=True), repeats=len(m.traces), error=m.error or "")
    if not m.traces:
        return row
    is_baseline = spec.is_reference
    t0 = m.traces[0]
    s0 = t0.summary
    row.new_tokens, row.steps, row.drafted, row.accepted = s0.new_tokens, s0.steps, s0.drafted, s0.accepted
    row.acceptance_rate, row.tokens_per_step = s0.acceptance_rate, s0.tokens_per_step
    row.prompt_tokens, row.dtype = t0.prompt_tokens, t0.env.get("dtype")
    row.elapsed_s = median(t.summary.elapsed_s for t in m.traces)
    row.tokens_per_s = median(t.summary.tokens_per_s for t in m.traces)
    row.draft_ms = median(t.summary.draft_ms for t in m.traces)
    row.verify_ms = median(t.summary.verify_ms for t in m.traces)
    row.other_ms = median(t.summary.other_ms for t in m.traces)
    row.setup_ms = median(t.setup_ms for t in m.traces)
    ests = [theory.estimate(t, b) for t, b in zip(m.traces, base.traces)] or [theory.estimate(t0)]
    row.speedup = 1.0 if is_baseline else median(e.measured_speedup for e in ests)
    if not is_baseline and base.traces:
        row.speedups = [e.measured_speedup for e in ests if e.measured_speedup is not None]
    row.theoretical_speedup = median(e.theoretical_speedup for e in ests)
    row.refined_speedup = median(e.refined_speedup for e in ests)
    row.gamma = ests[0].gamma
    row.empty_draft_fraction = None if is_baseline else ests[0].empty_fraction
    row.expected_tokens_per_step = ests[0].expected_tau
    row.c = median(e.c for e in ests)
    row.verify_cost = median(e.v for e in ests)
    row.other_cost = median(e.o for e in ests)
    row.baseline_step_ms = median(e.baseline_step_ms for e in ests)
    row.empty_cost = median(e.empty_cost for e in ests)
    row.prefill_share = median(e.prefill_share for e in ests)
    row.prefill_ratio = median(e.prefill_ratio for e in ests)
    row.drafting_steps = ests[0].drafting_steps
    row.drafted_tokens_total = sum(len(s.drafted) for s in t0.steps)
    row.position_counts = [list(x) for x in acceptance_by_position(t0.steps)]
    if m.plain_s:
        row.plain_elapsed_s = median(m.plain_s)
        ratios = [t.summary.elapsed_s / p for t, p in zip(m.traces, m.plain_s) if p > 0]
        row.overhead = median(ratios)
        row.overhead_ratios = ratios
        row.instrumented_matches_plain = all(ids == t.output_ids for ids, t in zip(m.plain_ids, m.traces))
        if is_baseline:
            row.speedup_plain = 1.0
        elif base.plain_s:
            plain_pairs = [(p, bp) for p, bp in zip(m.plain_s, base.plain_s) if p > 0 and bp > 0]
            n_m, n_b = s0.new_tokens, base.traces[0].summary.new_tokens if base.traces else 0
            if n_m and n_b:
                row.speedup_plain = median((n_m / p) / (n_b / bp) for p, bp in plain_pairs)
    if is_baseline:
        row.lossless_ok = True
        row.lossless_note = "the reference"
    elif check is not None:
        row.lossless_ok = check.ok
        row.lossless_note = check.note
        if check.divergence is not None:
            row.first_divergence = check.divergence.index
            row.divergence_margin = check.divergence.margin
            row.divergence = check.divergence
        row.lossless_severity = check.severity
    row.check_invariants()
    return row
