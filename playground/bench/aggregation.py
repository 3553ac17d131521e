"""Pooling rows per method × category (pure; tested on hand-built rows): the `Aggregate` record.

speedup = (Σ tokens / Σ median time of the method) / (Σ tokens / Σ median time of baseline) over the prompts
where both ran; acceptance_rate = Σ accepted / Σ verified drafts (the share kept); α = Σ accepted / Σ judged
drafts (Leviathan et al.'s α, the formulas' input, as in `theory.estimate`); τ = Σ tokens / Σ steps; per-step draft and
verify ms = Σ ms / Σ steps; acceptance by position pooled over prompts; α, γ, c, v pooled (γ weighted by
drafting steps, c by drafted tokens, v by drafting steps) and fed to the same formulas as a single run.

When a speedup is noise (`noise_reasons`): the speedup of each repeat is paired with baseline's run of the same
repeat, so the repeats' spread is the figure's own evidence. A figure is not one to quote when there are fewer than
SETTLED_REPEATS repeats (one or two runs give no spread, and one disturbance decides them: Compare with 16 tokens and
one repeat once reported 12.02×), when a run is shorter than SETTLED_TOKENS new tokens (its time is a few forwards,
where a pause of the machine's other work weighs as much as the method), or when the 95 % bootstrap interval of the
repeats' median speedup is wider than SETTLED_WIDTH of the median (the repeats disagree).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import theory
from ..methods import is_reference
from .rows import BenchRow, median, read_record
from .specs import BenchError

ALL = "all"  # the category of a label's figures over every category

SETTLED_REPEATS = 3  # repeats before a speedup has a spread to judge it by
SETTLED_TOKENS = 32  # new tokens per run before one run's time outweighs a pause of the machine's other work
SETTLED_WIDTH = 0.25  # the widest 95 % bootstrap interval of the median speedup, as a share of the median
BOOTSTRAP_RESAMPLES = 2000
NOISE_REASONS = ("few_repeats", "few_tokens", "wide")  # `Aggregate.noise`'s words, in this order


@dataclass
class Aggregate:
    """One method (label) over the prompts of one category, or over all of them (`category == "all"`)."""

    method: str
    label: str
    category: str
    prompts: int
    new_tokens: int = 0
    steps: int = 0
    elapsed_s: float = 0.0
    tokens_per_s: float | None = None
    acceptance_rate: float | None = None
    alpha: float | None = None  # Σ accepted / Σ judged drafts: the formulas' α
    drafted: int = 0
    accepted: int = 0
    tokens_per_step: float | None = None
    draft_ms_per_step: float | None = None
    verify_ms_per_step: float | None = None
    other_ms_per_step: float | None = None
    setup_ms_per_run: float | None = None
    speedup: float | None = None  # over baseline on the same prompts; None where baseline did not run
    baseline_step_ms: float | None = None
    overhead: float | None = None
    speedup_plain: float | None = None
    position_counts: list[list[int]] = field(default_factory=list)  # per draft position: (reached, kept, judged)
    position_acceptance: list[float | None] = field(default_factory=list)
    position_acceptance_judged: list[float | None] = field(default_factory=list)
    empty_draft_fraction: float | None = None
    gamma: float | None = None
    c: float | None = None
    verify_cost: float | None = None
    other_cost: float | None = None
    empty_cost: float | None = None
    prefill_share: float | None = None
    prefill_ratio: float | None = None
    theoretical_speedup: float | None = None  # Leviathan et al.
    with_verify_cost: float | None = None  # ... with the measured verify (+ other) cost
    with_empty_steps: float | None = None  # ... and the steps that drafted nothing
    refined_speedup: float | None = None  # ... and the prefill: the refined prediction
    expected_tokens_per_step: float | None = None
    lossless_mismatches: int = 0
    lossless_errors: int = 0  # mismatches in float32
    explanation: str = ""  # why measured and predicted differ (theory.explain_gap)
    repeats: int = 0  # the fewest repeats of a prompt pooled here
    run_tokens: int = 0  # the fewest new tokens of one run pooled here
    speedup_interval: list[float] | None = None  # 95 % bootstrap interval of the repeats' median speedup
    noise: list[str] = field(default_factory=list)  # why `speedup` is noise (NOISE_REASONS); empty: settled

    @property
    def is_baseline(self) -> bool:
        return is_reference(self.method)

    def check_invariants(self) -> None:
        """Raise BenchError if the figures contradict each other."""
        if self.prompts < 1:
            raise BenchError(f"aggregate {self.label}/{self.category}: pools no prompt")
        if not 0 <= self.accepted <= self.drafted:
            raise BenchError(f"aggregate {self.label}/{self.category}: accepted must be between 0 and drafted")
        if not 0 <= self.lossless_errors <= self.lossless_mismatches <= self.prompts:
            raise BenchError(f"aggregate {self.label}/{self.category}: lossless errors ≤ mismatches ≤ prompts")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> "Aggregate":
        """An aggregate from results.json (its invariants checked)."""
        return read_record(cls, data, "benchmark aggregate")


def overall_category(aggs: list[Aggregate]) -> str:
    """The category that sums a result up: "all" when there are several, else the one there is."""
    cats = {a.category for a in aggs}
    return ALL if ALL in cats else (next(iter(cats)) if cats else ALL)


def in_category(aggs: list[Aggregate], category: str | None = None) -> list[Aggregate]:
    """The aggregates of one category (default: the overall one)."""
    category = category or overall_category(aggs)
    return [a for a in aggs if a.category == category]


def aggregate(rows: list[BenchRow]) -> list[Aggregate]:
    """Per method (label) x category, plus each label over all categories ("all") when there are several."""
    ok = [r for r in rows if r.ran]
    baseline = {r.key: r for r in ok if is_reference(r.method)}
    labels = list(dict.fromkeys(r.label for r in ok))
    categories = list(dict.fromkeys(r.category for r in ok))
    out: list[Aggregate] = []
    for label in labels:
        for category in categories + ([ALL] if len(categories) > 1 else []):
            group = [r for r in ok if r.label == label and (category == ALL or r.category == category)]
            if group:
                out.append(_aggregate_group(label, category, group, baseline))
    return out


def _aggregate_group(label: str, category: str, group: list[BenchRow],
                     baseline: dict[tuple[str, Any], BenchRow]) -> Aggregate:
    method = group[0].method
    tokens = sum(r.new_tokens or 0 for r in group)
    seconds = sum(r.elapsed_s or 0.0 for r in group)
    steps = sum(r.steps or 0 for r in group)
    drafted = sum(r.drafted or 0 for r in group)
    accepted = sum(r.accepted or 0 for r in group)
    agg = Aggregate(
        method=method, label=label, category=category, prompts=len(group), new_tokens=tokens, steps=steps,
        elapsed_s=seconds, tokens_per_s=tokens / seconds if seconds > 0 else None,
        acceptance_rate=accepted / drafted if drafted else None, drafted=drafted, accepted=accepted,
        tokens_per_step=tokens / steps if steps else None,
        draft_ms_per_step=sum(r.draft_ms or 0.0 for r in group) / steps if steps else None,
        verify_ms_per_step=sum(r.verify_ms or 0.0 for r in group) / steps if steps else None,
        other_ms_per_step=sum(r.other_ms or 0.0 for r in group) / steps if steps else None,
        setup_ms_per_run=sum(r.setup_ms or 0.0 for r in group) / len(group),
    )
    paired = [(r, b) for r in group for b in [baseline.get(r.key)] if b is not None and b.elapsed_s and r.elapsed_s]
    if paired:
        m_rate = sum(r.new_tokens or 0 for r, _ in paired) / sum(r.elapsed_s or 0.0 for r, _ in paired)
        b_rate = sum(b.new_tokens or 0 for _, b in paired) / sum(b.elapsed_s or 0.0 for _, b in paired)
        agg.speedup = m_rate / b_rate
        agg.baseline_step_ms = _weighted([(b.baseline_step_ms, 1) for _, b in paired])
    agg.overhead = median(x for r in group for x in (r.overhead_ratios or ([r.overhead] if r.overhead else [])))
    if paired and any(r.plain_elapsed_s for r in group):
        agg.speedup_plain = median(r.speedup_plain for r in group)
    # acceptance by position, pooled
    counts: list[list[int]] = []
    for r in group:
        for k, (n, kept, *judged) in enumerate(r.position_counts or []):
            while len(counts) <= k:
                counts.append([0, 0, 0])
            counts[k][0] += n
            counts[k][1] += kept
            counts[k][2] += judged[0] if judged else n  # rows of schema-1 traces: every verified draft counted as judged
    agg.position_counts = counts
    agg.position_acceptance = [kept / n if n else None for n, kept, _ in counts]
    agg.position_acceptance_judged = [kept / judged if judged else None for _, kept, judged in counts]
    judged_total = sum(judged for _, _, judged in counts)
    agg.alpha = sum(kept for _, kept, _ in counts) / judged_total if judged_total else None
    # theory from pooled inputs
    drafting_steps = sum(r.drafting_steps or 0 for r in group)
    agg.empty_draft_fraction = 1 - drafting_steps / steps if steps and not is_reference(method) else None
    agg.gamma = (sum(r.drafted_tokens_total or 0 for r in group) / drafting_steps) if drafting_steps else None
    agg.c = _weighted([(r.c, r.drafted_tokens_total or 0) for r in group])
    agg.verify_cost = _weighted([(r.verify_cost, r.drafting_steps or 0) for r in group])
    agg.other_cost = _weighted([(r.other_cost, r.drafting_steps or 0) for r in group])
    agg.empty_cost = _weighted([(r.empty_cost, (r.steps or 0) - (r.drafting_steps or 0)) for r in group])
    agg.prefill_share = _weighted([(r.prefill_share, 1) for r in group])
    agg.prefill_ratio = _weighted([(r.prefill_ratio, 1) for r in group])
    step_rest = None if agg.verify_cost is None else agg.verify_cost + (agg.other_cost or 0.0)
    for name, value in predict(method, agg.alpha, agg.gamma, agg.c, step_rest, agg.empty_draft_fraction or 0.0,
                               agg.empty_cost, agg.prefill_share, agg.prefill_ratio).items():
        setattr(agg, name, value)
    agg.repeats = min(r.repeats for r in group)
    agg.run_tokens = min(r.new_tokens or 0 for r in group)
    if agg.speedup is not None and not is_reference(method):
        speedups = [x for r, _ in paired for x in (r.speedups or [])]
        agg.speedup_interval = bootstrap_interval(speedups)
        agg.noise = noise_reasons(agg.repeats, agg.run_tokens, agg.speedup_interval, median(speedups))
    mism = [r for r in group if r.lossless_ok is False]
    agg.lossless_mismatches = len(mism)
    agg.lossless_errors = sum(1 for r in mism if r.lossless_severity == "error")
    agg.explanation = theory.explain_gap(agg.to_dict()) if not is_reference(method) else ""
    agg.check_invariants()
    return agg


def bootstrap_interval(values: list[float], resamples: int = BOOTSTRAP_RESAMPLES,
                       seed: int = 0) -> list[float] | None:
    """The 95 % percentile-bootstrap interval of the median of `values` (a fixed seed: the same figures give the same
    interval); None for fewer than two values, where there is no spread to resample."""
    if len(values) < 2:
        return None
    rng = random.Random(seed)
    medians = sorted(median(rng.choices(values, k=len(values))) or 0.0 for _ in range(resamples))
    return [medians[int(0.025 * (resamples - 1))], medians[int(0.975 * (resamples - 1))]]


def noise_reasons(repeats: int, run_tokens: int, interval: list[float] | None,
                  centre: float | None) -> list[str]:
    """Why a speedup is noise rather than a figure to quote (empty: settled): too few repeats, too short runs, or
    repeats that disagree (see the module's docstring). Pure: the figures are arguments."""
    reasons = []
    if repeats < SETTLED_REPEATS:
        reasons.append("few_repeats")
    if run_tokens < SETTLED_TOKENS:
        reasons.append("few_tokens")
    if interval is not None and centre and (interval[1] - interval[0]) / centre > SETTLED_WIDTH:
        reasons.append("wide")
    return reasons


def predict(method: str, alpha: float | None, gamma: float | None, c: float | None, v: float | None,
            e: float = 0.0, empty_cost: float | None = None, prefill_share: float | None = None,
            prefill_ratio: float | None = None) -> dict[str, float | None]:
    """Leviathan's prediction and the refinement stages for pooled inputs (None where not computable).

    `v` is what a drafting step costs besides drafting, in baseline steps: verify + other (v + o)."""
    if is_reference(method):
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
    kept = [(float(x), w) for x, w in pairs if x is not None and not (isinstance(x, float) and math.isnan(x)) and w]
    total = sum(w for _, w in kept)
    return sum(x * w for x, w in kept) / total if total else None
