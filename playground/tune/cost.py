"""What a drafting run costs (torch-free): the calibration's figures and their lookups (`Calibration`), a predicted
time, and the pace arithmetic over real runs' traces (loop time, pace ratios, the reference baseline).

Pure: the timers that fill a `Calibration` are in `calibration`, the runs whose traces these read in `one_prompt`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..trace import Step

# A calibrated figure whose samples spread wider than this (max − min over the median) is sampled again, up to
# SPREAD_ROUNDS times as many samples; a baseline whose pace changed more than PACE_TOLERANCE (either way) between
# before and after the calibration makes tune measure again once, then call its times unreliable.
SPREAD_LIMIT = 0.25
SPREAD_ROUNDS = 3
PACE_TOLERANCE = 0.25
PACE_CHECK_TOKENS = 16  # the short baseline after the calibration (and the least the method's short run makes)
# The short real run of the method's default gives `scale` (the median pace of its steps after the first) and the loop's
# time: it makes at least this many steps after the first, by the default's own replay. At 16 tokens a 5-token draft
# that is all accepted makes two, whose ratios (0.936 and 1.064, bundled Gemma, summarization) set every prediction.
PACE_STEPS = 6
# Tune recommends a setting over the default only where it predicts it faster by more than this (plus the pace
# change measured under the calibration): the median absolute error of a predicted time measured by
# tests/measure/tune_accuracy.py on the bundled Gemma was 8-16 % per method (docs/tune.md), so a smaller predicted gain
# cannot be told from the prediction's own error.
RECOMMEND_MARGIN = 0.15
WARM_UP_TOKENS = 4  # a baseline's warm-up: enough decode steps to create the one-token kernels before it is timed


def calibration_points(longest: int) -> list[int]:
    """The widths (and draft lengths) calibrated for drafts up to `longest`: every one up to 16, then a sparse
    ladder to `longest` itself, so every length a prediction asks for is calibrated or lies between two that are."""
    dense = list(range(1, min(longest, 16) + 1))
    ladder = [w for w in (24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024) if w < longest]
    return sorted(set(dense + ladder + [max(1, longest)]))


def _at(table: dict[int, float], x: int) -> float:
    """`table[x]`, or a straight line between the calibrated points either side (past the last: through the
    last two, which tune avoids by calibrating up to the longest draft it predicts)."""
    if x in table:
        return table[x]
    keys = sorted(table)
    below = [k for k in keys if k < x]
    above = [k for k in keys if k > x]
    if below and above:
        a, b = below[-1], above[0]
        return table[a] + (table[b] - table[a]) * (x - a) / (b - a)
    a, b = (keys[-2], keys[-1]) if len(keys) > 1 else (keys[-1], keys[-1])
    slope = max(0.0, (table[b] - table[a]) / (b - a)) if b != a else 0.0
    return table[b] + (x - b) * slope


@dataclass
class Calibration:
    """What one drafting run spends on this machine at this context length (seconds), and how sure that is.

    A step of the drafting loop costs its drafting (one `get_candidates` call of the step's draft length: the
    drafter's cache crop and its `assistant.generate()`, or one prompt-lookup `get_candidates`), the target's forward at the step's
    verification width, and the loop's own time around them (candidate handling, cache crop, stopping checks:
    once per step, whatever the width). The calibration times the first two with the real calls (Transformers' own
    candidate generator; the forward with the loop's work on its logits). A short real run of the method, made
    right after, gives the loop's own time (its median `other` phase), the set-up and first step, and the absolute
    level: `scale` is its draft and verify phases ÷ the calibrated ones (without it, the baseline's pace).
    """

    target_prefill_s: float
    target_forward_s: dict[int, float]  # verification width -> one target forward
    drafter_prefill_s: float = 0.0  # the drafter's first call at the calibration's context (its prefill and a draft)
    drafter_call_s: dict[int, float] = field(default_factory=dict)  # draft length -> one get_candidates call
    lookup_call_s: dict[int, float] = field(default_factory=dict)  # max n-gram size -> one prompt-lookup call
    baseline_first_step_s: float = 0.0  # the baseline run's set-up and first step (prefill + first token)
    baseline_forward_s: float = 0.0  # the baseline run's median verification phase of a later step
    loop_s: float = 0.0  # the drafting loop's own time per step: a real run's median `other` phase
    # A real run of the method (its default setting): its set-up and first step (both prefills, the first draft and
    # verification), and that first step's draft length; 0 / None where there is none (the baseline's first step).
    method_first_step_s: float = 0.0
    method_first_draft: int | None = None
    # The same run's pace ÷ the calibration's (its later steps' measured draft + verify phases ÷ the calibrated
    # drafting and verification of those steps); 0 where there is none (then the baseline's pace sets `scale`).
    method_pace: float = 0.0
    method_pace_steps: list[float] = field(default_factory=list)  # its per-step ratios, `method_pace` their median
    spread: float = 0.0  # the widest spread of a calibrated figure's samples, after repeating where it was wide
    pace_change: float = 1.0  # a short baseline's step pace after the calibration ÷ the baseline's before it
    reliable: bool = True  # False: the machine's pace changed under the tune even after measuring again

    def forward(self, width: int) -> float:
        """The target's forward for `width` tokens (calibrated, or between two calibrated widths)."""
        return _at(self.target_forward_s, width)

    def drafter_call(self, length: int) -> float:
        """One `assistant.generate()` call drafting `length` tokens (0: the loop makes no call)."""
        return _at(self.drafter_call_s, length) if length and self.drafter_call_s else 0.0

    @property
    def scale(self) -> float:
        """The drafting loop's pace ÷ the calibration's: measured on a real run of the method (`method_pace`), else
        the baseline's median forward phase against a calibrated one-token forward."""
        if self.method_pace:
            return self.method_pace
        one = self.forward(1) if self.target_forward_s else 0.0
        return self.baseline_forward_s / one if self.baseline_forward_s and one else 1.0

    def drafting_s(self, step: Step, ngram: int | None = None) -> float:
        """A step's drafting at the calibration's pace (`ngram`: prompt lookup's max n-gram size; None: a drafter)."""
        return self.lookup_call_s.get(ngram, 0.0) if ngram is not None else self.drafter_call(len(step.drafted))

    def step_s(self, step: Step, first: bool, ngram: int | None = None) -> float:
        """One step: its drafting, and (after the first, whose forward is the prefill) the target's forward at
        its verification width and the loop's own time."""
        total = self.drafting_s(step, ngram) * self.scale
        if not first:
            total += self.forward(len(step.drafted) + 1) * self.scale + self.loop_s
        return total

    def first_step_s(self, step: Step | None, ngram: int | None = None) -> float:
        """The set-up and first step: a real run's (both prefills, its first draft and verification, measured in the
        loop), its draft exchanged for this step's draft (at the loop's pace, `scale`). Without such a run: the
        baseline's first step, the calibrated drafter's first call and this step's drafting."""
        if self.method_first_draft is None:
            if step is None:
                return self.baseline_first_step_s or self.target_prefill_s
            prefill = self.drafter_prefill_s * self.scale if ngram is None and step.drafted else 0.0
            return (self.baseline_first_step_s or self.target_prefill_s) + prefill + self.step_s(step, True, ngram)
        if ngram is not None or step is None:
            return self.method_first_step_s
        return self.method_first_step_s + (self.drafter_call(len(step.drafted))
                                           - self.drafter_call(self.method_first_draft)) * self.scale

    def predict_s(self, steps: list[Step], ngram: int | None = None) -> float:
        """Predicted time of a run with these steps (`ngram`: prompt lookup's max n-gram size; None: a drafter)."""
        total = self.first_step_s(steps[0] if steps else None, ngram)
        return total + sum(self.step_s(s, False, ngram) for s in steps[1:])


def _spread(samples: list[float]) -> float:
    middle = statistics.median(samples)
    return (max(samples) - min(samples)) / middle if middle > 0 else 0.0


def pace_run_tokens(default_steps: Sequence[Step], max_new: int) -> int:
    """New tokens for the short real run of the method's default: enough for PACE_STEPS steps after the first by the
    default's replayed steps (`default_steps`), at least PACE_CHECK_TOKENS, at most the request's `max_new`."""
    needed = sum(len(st.emitted) for st in default_steps[:PACE_STEPS + 1])
    return min(max_new, max(PACE_CHECK_TOKENS, needed))


def step_pace_s(trace: Any, steps: int | None = None) -> float | None:
    """A run's median later step (seconds; the first `steps` steps only, when given): the pace the baseline check
    compares before and after the calibration (a median, so one step held up by another process does not decide)."""
    later = trace.steps[1:steps]
    if not later:
        return None
    return statistics.median(s.draft_ms + s.verify_ms + (s.other_ms or 0.0) for s in later) / 1000


def loop_time_s(trace: Any) -> float | None:
    """The drafting loop's own time per step in a real run: the median over its later steps of the `other` phase
    (what the loop spends outside drafting and verification). Not what is left of draft + verify once calibrated
    figures are taken off: that difference of two noisy figures, each tens of times larger than the loop's few
    milliseconds, came out 0 or 25 ms on one machine, and was then charged on every step."""
    rest = [(s.other_ms or 0.0) / 1000 for s in trace.steps[1:]]
    return statistics.median(rest) if rest else None


def pace_ratios(trace: Any, calibration: Calibration, ngram: int | None = None) -> list[float]:
    """Each later step of a real drafting run: its measured draft + verify phases ÷ the calibrated drafting and
    verification of the same step (the first step is the prefill, which the calibration does not time)."""
    ratios = []
    for st in trace.steps[1:]:
        calibrated = calibration.drafting_s(st, ngram) + calibration.forward(len(st.drafted) + 1)
        if calibrated > 0:
            ratios.append((st.draft_ms + st.verify_ms) / 1000 / calibrated)
    return ratios


def loop_pace(trace: Any, calibration: Calibration, ngram: int | None = None) -> float | None:
    """A real drafting run's pace ÷ the calibration's: the median over its later steps of the measured draft + verify
    phases ÷ the calibrated drafting and verification of the same step. The calls a prediction charges, timed in the
    loop itself, not the baseline's one-token decoding (whose pace against a single calibrated one-token forward
    was 1.36 where the loop's own forwards ran at 1.0 on one machine, summarization at commit fca2a30)."""
    ratios = pace_ratios(trace, calibration, ngram)
    return statistics.median(ratios) if ratios else None


def reference_baseline_s(run_s: float, first_step_s: float, pace_change: float) -> float:
    """The baseline time every predicted speedup divides: the baseline run's set-up and first step (`first_step_s`),
    and its later steps at the mean pace of the two baselines tune runs, that run (`run_s` in all) before the
    calibration and the short check after it (`pace_change` = the check's step pace ÷ the run's).

    One baseline run carries the pace of its moment: over 27 method × category figures of tests/measure/tune_accuracy.py
    (commits 64aca3b, a0bf4f9, add47be) tune's baseline ÷ the baselines measured beside the real runs had a median
    error of 6.9 % (max 19.9 %), and followed the check (correlation 0.74 with the check's pace ÷ the run's); at the
    two runs' mean pace it came to 5.1 % (max 13.5 %). The check alone did no better than the run (7.1 %): two moments
    are better than one, as `verify`'s reference is the mean of a baseline before and one after."""
    later = max(0.0, run_s - first_step_s)
    return first_step_s + later * (1 + pace_change) / 2


def forward_pace_s(trace: Any) -> float:
    """A baseline run's median verification phase over its later steps (seconds; 0 without one): the pace `scale`
    takes, a median so that a cold first decode step or one held up by another process does not set it."""
    later = [st.verify_ms for st in trace.steps[1:]]
    return statistics.median(later) / 1000 if later else 0.0
