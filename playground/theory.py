"""Theory beside measurement: Leviathan et al.'s expected speedup, its inputs estimated from traces,
and a plain-language diagnosis of why a run was faster or slower than baseline.

Pure functions of traces (no torch, no models): the benchmark, the report and the UI all call them.

Definitions (stated once here, repeated in the report):

* **α (acceptance probability)**, the α of Leviathan et al.'s formula: the chance that the target accepts a
  drafted token given that it accepted every draft before it = accepted drafted tokens / drafted tokens the
  target *judged* (the accepted ones and, in each step, the first refused one). Drafts discarded after a
  refusal were never judged, and drafts cut off by the end of generation (EOS or the length limit) were
  never verified: both are excluded. (The *share of drafts kept*, accepted / drafted tokens that reached
  verification, discarded ones included, is the run's acceptance rate in the stats; it is not α: under
  independent acceptance it is (E(α, γ) − 1) / γ, below α, and fed to the formula it would predict too few
  tokens per step.)
* **γ (draft length)** = mean number of drafted tokens over the steps that drafted anything. Steps
  with an empty draft (prompt lookup found no matching n-gram; MTP-style drafters draft nothing on
  their first step) are plain decoding steps: they are *not* averaged into γ but counted separately
  as the fraction ``e`` of empty-draft steps, whose own cost c₀ + v₀ (any drafting attempt, e.g. a
  universal assistant whose draft re-tokenised to nothing, plus the forward) is measured separately.
  With a varying draft length (heuristic schedule,
  confidence threshold, short lookups) γ is the mean, so the formula is evaluated at a non-integer γ.
* **Phases.** The trace splits every step into draft (the drafter's ``get_candidates``), verify (from
  the end of drafting until the step's tokens are decided: the target forward over γ + 1 positions,
  logits processing, acceptance, cache crop; for baseline: the forward, choosing the token and the
  stopping criteria, which its loop runs before streaming the token) and other (the rest of the loop until the next step: candidate-strategy update,
  kwargs update, stopping criteria). ``setup_ms`` is the time inside ``generate()`` before the first
  step (building the candidate generator, pruning a universal assistant's LM head, loading MTP layers).
  setup + Σ(draft + verify + other) = the elapsed time, with the same definitions for baseline.
* **T (baseline step)** = mean time of one whole baseline decoding step (verify + other) in the same
  run, excluding the first step (which also processes the prompt: prefill). Costs below are in units of T.
* **c (draft cost ratio)** = (total draft time / tokens drafted) over the drafting steps, excluding
  the first step, divided by T. Prompt lookup only searches the context: c ≈ 0.
* **v (verify cost ratio)** = mean verify time of a drafting step, excluding the first step, divided
  by T; **o (other cost ratio)** = mean other time of a drafting step over T. The formulas charge a
  step v + o: Leviathan et al. assume v + o = 1 (a wide forward costs the same as a one-token one, as
  on a memory-bound GPU); on CPUs v is often well above 1.

* Measured speedup = tokens/s of the method over tokens/s of baseline, paired within a repeat (the
  same prompt, interleaved), median over repeats; equal to the wall-time ratio when both emit the
  same tokens.

Predictions:

* Expected tokens per step (i.i.d. acceptance):  E(α, γ) = (1 − α^(γ+1)) / (1 − α)  (γ + 1 at α = 1).
* **Leviathan et al.** expected speedup:  S = E(α, γ) / (γc + 1).
* **Refined** prediction, replacing their assumptions with what this run measured, step by step:
  1. measured verification and loop cost: E / (γc + v + o);
  2. empty-draft steps (fraction e, each costing c₀ + v₀ and emitting one token):
     ((1 − e)·E + e) / ((1 − e)(γc + v + o) + e(c₀ + v₀));
  3. the set-up and the first step (prefill) are not sped up (Amdahl): with f the share of baseline
     time spent in its set-up and first step and r the method's set-up and first step over baseline's,
     S_run = 1 / (f·r + (1 − f) / S₂).
  What is left between the refined prediction and the measured speedup is acceptance that is not
  independent of position (compare E with the measured τ) and timing noise: the phases account for
  every millisecond of the run.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from .i18n import DEFAULT_LANGUAGE, number, t
from .methods import is_reference
from .precision import REDUCED_DTYPES
from .trace import Step, Trace, acceptance_by_position

__all__ = [
    "expected_tokens_per_step", "expected_speedup", "refined_speedup", "Estimates", "estimate",
    "baseline_step_ms", "first_divergence", "measured_speedup", "diagnose", "explain_gap", "cost_sentence",
    "position_rates", "conditional_position_rates",
    "THEORY_NOTES",
]


# --- the formulas ------------------------------------------------------------------------------

def expected_tokens_per_step(alpha: float, gamma: float) -> float:
    """E(α, γ) = (1 − α^(γ+1)) / (1 − α): tokens one verification step yields under i.i.d. acceptance."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1]; got {alpha}")
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0; got {gamma}")
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1.0)) / (1.0 - alpha)


def expected_speedup(alpha: float, gamma: float, c: float) -> float:
    """Leviathan et al. (2023), Theorem 3.8: (1 − α^(γ+1)) / ((1 − α)(γc + 1))."""
    if c < 0:
        raise ValueError(f"c must be >= 0; got {c}")
    return expected_tokens_per_step(alpha, gamma) / (gamma * c + 1.0)


def refined_speedup(
    alpha: float, gamma: float, c: float, v: float, empty_fraction: float = 0.0, empty_cost: float = 1.0,
    prefill_share: float = 0.0, prefill_ratio: float = 1.0,
) -> float:
    """The prediction with measured costs: verify cost v, empty-draft steps, and an un-sped-up prefill."""
    step_speedup = _mixed_speedup(alpha, gamma, c, v, empty_fraction, empty_cost)
    return _amdahl(step_speedup, prefill_share, prefill_ratio)


def _mixed_speedup(alpha: float, gamma: float, c: float, v: float, e: float, empty_cost: float) -> float:
    tokens = (1.0 - e) * expected_tokens_per_step(alpha, gamma) + e
    cost = (1.0 - e) * (gamma * c + v) + e * empty_cost
    return tokens / cost if cost > 0 else math.inf


def _amdahl(step_speedup: float, share: float, ratio: float) -> float:
    denom = share * ratio + (1.0 - share) / step_speedup
    return 1.0 / denom if denom > 0 else math.inf


# --- estimating the inputs from traces ------------------------------------------------------------

def _steady(steps: list[Step]) -> list[Step]:
    """Steps after the first (the first also processes the prompt); all steps if there is only one."""
    return steps[1:] if len(steps) > 1 else list(steps)


def baseline_step_ms(baseline: Trace) -> float | None:
    """T: mean time of one whole baseline decoding step (all its phases), first (prefill) step excluded."""
    steps = _steady(baseline.steps)
    if not steps:
        return None
    mean = sum(s.time_ms for s in steps) / len(steps)
    return mean if mean > 0 else None


@dataclass
class Estimates:
    """Everything the theory needs from one method trace (and its baseline), plus the predictions."""

    steps: int = 0
    drafting_steps: int = 0
    empty_fraction: float = 0.0  # e: share of steps that drafted nothing
    drafted: int = 0  # drafted tokens that reached verification (discarded ones included)
    accepted: int = 0
    judged: int = 0  # drafted tokens the target judged: the accepted ones and each step's first refused one
    kept_share: float | None = None  # accepted / drafted: the run's acceptance rate (not the formula's α)
    alpha: float | None = None  # accepted / judged: Leviathan et al.'s α
    gamma: float | None = None
    tau: float | None = None  # measured tokens per step
    expected_tau: float | None = None  # E(α, γ) over drafting steps, mixed with empty steps
    baseline_step_ms: float | None = None  # T
    draft_ms_per_token: float | None = None
    c: float | None = None
    verify_ms: float | None = None  # mean verify time of a steady drafting step
    v: float | None = None  # verify cost ratio
    other_ms: float | None = None  # mean other time (the loop outside draft and verify) of a steady drafting step
    o: float | None = None  # other cost ratio
    empty_cost: float | None = None  # c0 + v0: cost of an empty-draft step in units of T
    prefill_share: float | None = None  # f: share of baseline time in its set-up and first step
    prefill_ratio: float | None = None  # r: method set-up + first step / baseline's
    theoretical_speedup: float | None = None  # Leviathan et al.
    with_verify_cost: float | None = None  # step 1 of the refinement
    with_empty_steps: float | None = None  # step 2
    refined_speedup: float | None = None  # step 3 (the whole refined prediction)
    measured_speedup: float | None = None  # tokens/s ratio against the baseline trace
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def estimate(trace: Trace, baseline: Trace | None = None) -> Estimates:
    """α, γ, c, v and the predictions for one run, as defined in the module docstring."""
    steps = trace.steps
    est = Estimates(steps=len(steps))
    drafting = [s for s in steps if s.drafted]
    est.drafting_steps = len(drafting)
    est.empty_fraction = (len(steps) - len(drafting)) / len(steps) if steps else 0.0
    est.drafted = sum(s.verified_drafts for s in steps)
    est.accepted = sum(s.accepted for s in steps)
    est.judged = sum(s.judged_drafts for s in steps)
    est.kept_share = est.accepted / est.drafted if est.drafted else None
    est.alpha = est.accepted / est.judged if est.judged else None
    est.gamma = sum(len(s.drafted) for s in drafting) / len(drafting) if drafting else None
    new_tokens = sum(len(s.emitted) for s in steps)
    est.tau = new_tokens / len(steps) if steps else None
    if est.alpha is not None and est.gamma is not None:
        e = est.empty_fraction
        est.expected_tau = (1 - e) * expected_tokens_per_step(est.alpha, est.gamma) + e

    steady_drafting = _steady(drafting) if drafting and steps and drafting[0] is steps[0] else drafting
    if not steady_drafting:
        steady_drafting = drafting
    tokens_drafted = sum(len(s.drafted) for s in steady_drafting)
    if tokens_drafted:
        est.draft_ms_per_token = sum(s.draft_ms for s in steady_drafting) / tokens_drafted
        est.verify_ms = sum(s.verify_ms for s in steady_drafting) / len(steady_drafting)
        est.other_ms = sum(s.other_ms for s in steady_drafting) / len(steady_drafting)

    if baseline is not None:
        est.measured_speedup = measured_speedup(trace, baseline)
        T = baseline_step_ms(baseline)
        est.baseline_step_ms = T
        if T:
            if est.draft_ms_per_token is not None and est.verify_ms is not None:
                est.c = est.draft_ms_per_token / T
                est.v = est.verify_ms / T
                est.o = (est.other_ms or 0.0) / T
            empty = [s for s in _steady(steps) if not s.drafted]
            if empty:
                est.empty_cost = sum(s.time_ms for s in empty) / len(empty) / T
            total_b = baseline.setup_ms + sum(s.time_ms for s in baseline.steps)
            if len(baseline.steps) > 1 and total_b > 0 and steps:
                first_b = _unsped_ms(baseline)
                est.prefill_share = first_b / total_b
                est.prefill_ratio = _unsped_ms(trace) / first_b if first_b > 0 else 1.0

    if is_reference(trace.method):
        est.theoretical_speedup = est.with_verify_cost = est.with_empty_steps = est.refined_speedup = 1.0
        return est
    if est.alpha is None or est.gamma is None:
        est.notes.append("nothing was drafted, so there is no acceptance rate to predict from")
        return est
    if est.c is not None:
        est.theoretical_speedup = expected_speedup(est.alpha, est.gamma, est.c)
        step_rest = (est.v or 0.0) + (est.o or 0.0)
        est.with_verify_cost = _mixed_speedup(est.alpha, est.gamma, est.c, step_rest, 0.0, 1.0)
        empty_cost = est.empty_cost if est.empty_cost is not None else 1.0
        est.with_empty_steps = _mixed_speedup(est.alpha, est.gamma, est.c, step_rest, est.empty_fraction, empty_cost)
        if est.prefill_share is not None:
            est.refined_speedup = _amdahl(est.with_empty_steps, est.prefill_share, est.prefill_ratio or 1.0)
        else:
            est.refined_speedup = est.with_empty_steps
    return est


def _unsped_ms(trace: Trace) -> float:
    """What drafting cannot speed up: the set-up inside generate() and the first step (prefill)."""
    return trace.setup_ms + (trace.steps[0].time_ms if trace.steps else 0.0)


def measured_speedup(trace: Trace, baseline: Trace) -> float | None:
    """tokens/s of the run over tokens/s of baseline (= the wall-time ratio when both emit the same tokens)."""
    a, b = trace.summary, baseline.summary
    if not a.new_tokens or not b.new_tokens or a.elapsed_s <= 0 or b.elapsed_s <= 0:
        return None
    return (a.new_tokens / a.elapsed_s) / (b.new_tokens / b.elapsed_s)


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where two outputs differ (a length difference counts); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    if len(a) != len(b):
        return min(len(a), len(b))
    return None


# --- the diagnosis --------------------------------------------------------------------------------

def _x(value: float, lang: str) -> str:
    return number(value, lang) + "×"


def _pct(value: float, lang: str) -> str:
    return number(value, lang, ".0%")


# The figures a comparison's table shows (`bench.Aggregate`'s names) that `diagnose` quotes in their place.
FIGURES = ("speedup", "tokens_per_s", "baseline_tokens_per_s", "theoretical_speedup", "refined_speedup")


def diagnose(trace: Trace, baseline: Trace | None = None, lang: str = DEFAULT_LANGUAGE,
             figures: dict[str, float | None] | None = None) -> list[str]:
    """A few plain sentences (in `lang`) on why this run was faster or slower than baseline (pure; for the UI).

    `figures` (keys of `FIGURES`): the numbers a table over several repeats shows beside these sentences; where
    given they are what the sentences quote (the measured speedup, both tokens/s, both predictions), so the table
    and its text read one set of numbers; the rest (acceptance, step cost) is the representative run's own."""
    s = trace.summary
    out: list[str] = []
    known: dict[str, float] = {k: v for k, v in (figures or {}).items() if k in FIGURES and v is not None}
    if is_reference(trace.method):
        T = baseline_step_ms(trace)
        if T:
            out.append(t("diag.baseline", lang, ms=number(T, lang, ".0f"), tps=number(s.tokens_per_s or 0, lang, ".1f")))
        else:
            out.append(t("diag.baseline_short", lang))
        return out

    est = estimate(trace, baseline)
    if baseline is not None:
        est.measured_speedup = known.get("speedup", est.measured_speedup)
    est.theoretical_speedup = known.get("theoretical_speedup", est.theoretical_speedup)
    est.refined_speedup = known.get("refined_speedup", est.refined_speedup)
    if baseline is None:
        out.append(t("diag.no_baseline", lang))
    elif est.measured_speedup is not None:
        sp = est.measured_speedup
        b = baseline.summary
        if sp >= 1.05:
            verdict = t("diag.verdict.faster", lang, x=_x(sp, lang))
        elif sp <= 0.95:
            verdict = t("diag.verdict.slower", lang, x=_x(sp, lang))
        else:
            verdict = t("diag.verdict.same", lang, x=_x(sp, lang))
        tps = known.get("tokens_per_s", s.tokens_per_s or 0)
        base_tps = known.get("baseline_tokens_per_s", b.tokens_per_s or 0)
        out.append(t("diag.this_run", lang, verdict=verdict, tps=number(tps, lang, ".1f"),
                     base=number(base_tps, lang, ".1f")))
        if trace.env.get("dtype") and baseline.env.get("dtype") and trace.env.get("dtype") != baseline.env.get("dtype"):
            out.append(t("diag.dtype_mismatch", lang, run=trace.env["dtype"], base=baseline.env["dtype"]))

    if est.alpha is None:
        out.append(t("diag.nothing_drafted", lang))
        return out

    tau, gamma = est.tau or 0.0, est.gamma or 0.0  # both known where α is
    out.append(t("diag.acceptance", lang, alpha=_pct(est.alpha, lang), accepted=est.accepted, judged=est.judged,
                 kept=_pct(est.kept_share or 0.0, lang), drafted=est.drafted, gamma=number(gamma, lang, ".1f"),
                 tau=number(tau, lang)))
    if est.empty_fraction >= 0.1:
        out.append(t("diag.empty_steps", lang, share=_pct(est.empty_fraction, lang)))

    if est.c is not None and est.v is not None:
        o = est.o or 0.0
        cost = gamma * est.c + est.v + o
        out.append(t("diag.step_cost", lang, cost=number(cost, lang), draft=number(gamma * est.c, lang),
                     c=number(est.c, lang, ".3f"), v=number(est.v, lang), positions=number(gamma + 1, lang, ".1f"),
                     o=number(o, lang))
                   + (t("diag.wide_forward", lang) if est.v > 1.2 else t("diag.period", lang)))
        theo = est.theoretical_speedup or 0.0
        ref = est.refined_speedup or 0.0
        sentence = t("diag.prediction", lang, theo=_x(theo, lang), ref=_x(ref, lang))
        if est.measured_speedup is not None:
            gap = est.measured_speedup / ref if ref else 0.0
            measured = _x(est.measured_speedup, lang)
            if 0.8 <= gap <= 1.25:
                sentence += t("diag.gap.close", lang, x=measured)
            elif gap < 0.8:
                sentence += t("diag.gap.short", lang, x=measured)
            else:
                sentence += t("diag.gap.beats", lang, x=measured)
        out.append(sentence)
        if est.measured_speedup is not None and est.measured_speedup < 1.0:
            out.append(_advice(est, lang, trace.env.get("dtype")))
    elif baseline is not None:
        out.append(t("diag.baseline_too_short", lang))
    else:
        total = s.setup_ms + s.draft_ms + s.verify_ms + s.other_ms
        if total > 0:
            out.append(t("diag.time_shares", lang, draft=_pct(s.draft_ms / total, lang),
                         verify=_pct(s.verify_ms / total, lang), other=_pct(s.other_ms / total, lang),
                         setup=_pct(s.setup_ms / total, lang)))

    if baseline is not None and not trace.decoding.get("sample") and not baseline.decoding.get("sample"):
        index = first_divergence(trace.output_ids, baseline.output_ids)
        if index is not None and not trace.lossy:
            out.append(
                t("diag.diverges_near_tie", lang, index=index,
                  dtype=trace.env.get("dtype", t("diag.this_precision", lang)))
                if trace.env.get("dtype") in REDUCED_DTYPES
                else t("diag.diverges_bug", lang, index=index)
            )
        elif trace.lossy:
            out.append(t("diag.ensemble_on", lang))
    return out


def _advice(est: Estimates, lang: str = DEFAULT_LANGUAGE, dtype: str | None = None) -> str:
    """One line of advice for a run slower than baseline; `dtype` is the run's own precision (a run already in
    bfloat16 is not told to try it)."""
    alpha, gamma = est.alpha or 0.0, est.gamma or 0.0
    if est.v is not None and est.v > 1.5 and alpha > 0.5:
        if dtype in REDUCED_DTYPES:
            return t("diag.advice.verify_expensive_reduced", lang, dtype=dtype)
        return t("diag.advice.verify_expensive", lang)
    if alpha < 0.3:
        return t("diag.advice.rejected", lang)
    if est.c is not None and est.c > 0.3:
        return t("diag.advice.draft_slow", lang)
    if gamma > 4 and alpha < 0.6:
        return t("diag.advice.falls", lang)
    return t("diag.advice.cpu", lang)


def explain_gap(fig: dict[str, Any], threshold: float = 0.2, lang: str = DEFAULT_LANGUAGE) -> str:
    """Why measured and Leviathan's speedup differ, factor by factor (in `lang`).

    Each refinement stage is a multiplicative factor on Leviathan's prediction (measured verify
    cost, empty-draft steps, un-sped-up prefill); then correlated acceptance, τ measured / E(α, γ)
    (the formula assumes every drafted token is accepted independently with probability α, but real
    drafts tend to be all right or wrong from the start); what is left is timing noise (the set-up
    and every phase of a step are counted). Within `threshold` the sentence says whether that is because the assumptions hold or
    because factors cancel.

    `fig` holds speedup, theoretical_speedup, with_verify_cost, with_empty_steps, refined_speedup,
    tokens_per_step, expected_tokens_per_step, verify_cost, other_cost, c, gamma, acceptance_rate,
    empty_draft_fraction, prefill_share, prefill_ratio (the aggregate or row keys of the benchmark).
    """
    measured, theo = fig.get("speedup"), fig.get("theoretical_speedup")
    if measured is None or theo is None or theo <= 0:
        if fig.get("acceptance_rate") is None and not is_reference(fig.get("method")):
            return t("gap.nothing_drafted", lang)
        return ""
    rel = measured / theo - 1.0
    factors: list[tuple[str, float]] = []
    stages = [
        (t("gap.factor.verify", lang, cost=number((fig.get('verify_cost') or 0) + (fig.get('other_cost') or 0), lang)),
         theo, fig.get("with_verify_cost")),
        (t("gap.factor.empty", lang, share=number(fig.get('empty_draft_fraction') or 0, lang, ".0%")),
         fig.get("with_verify_cost"), fig.get("with_empty_steps")),
        (t("gap.factor.prefill", lang, share=number(fig.get('prefill_share') or 0, lang, ".0%"),
           ratio=number(fig.get('prefill_ratio') or 1, lang)), fig.get("with_empty_steps"), fig.get("refined_speedup")),
    ]
    for text, before, after in stages:
        if before and after:
            factors.append((text, after / before))
    ref = fig.get("refined_speedup")
    tau, etau = fig.get("tokens_per_step"), fig.get("expected_tokens_per_step")
    residual = measured / ref if ref else None
    if tau and etau:
        f_tau = tau / etau
        factors.append((t("gap.factor.correlated", lang, tau=number(tau, lang), expected=number(etau, lang)), f_tau))
        if residual is not None:
            residual /= f_tau
    if residual is not None:
        factors.append((t("gap.factor.noise", lang), residual))
    notable = sorted([(text, f) for text, f in factors if abs(f - 1) >= 0.05], key=lambda tf: -abs(math.log(tf[1])))
    listed = "; ".join(f"{text} (×{number(f, lang)})" for text, f in notable)
    figures = dict(measured=number(measured, lang), theo=number(theo, lang), threshold=number(threshold, lang, ".0%"))
    if abs(rel) <= threshold:
        if not notable or all(abs(f - 1) < 0.1 for _, f in notable):
            out = t("gap.within.hold", lang, **figures)
        else:
            out = t("gap.within.cancel", lang, **figures, factors=listed)
    else:
        out = t("gap.off", lang, **figures, rel=("+" if rel >= 0 else "") + number(rel, lang, ".0%"))
        if listed:
            out += t("gap.by_factor", lang, factors=listed)
    c = fig.get("c")
    gamma = fig.get("gamma") or 0
    if c is not None and gamma * c > 0.5:
        out += t("gap.costly_drafter", lang, cost=number(gamma * c, lang), c=number(c, lang))
    return out


def cost_sentence(fig: dict[str, Any]) -> str:
    """One sentence with the figures that decide a speedup: α, τ, and a step's cost in baseline steps."""
    alpha, tau = fig.get("alpha", fig.get("acceptance_rate")), fig.get("tokens_per_step")
    if alpha is None or tau is None:
        return ""
    text = f"α = {alpha:.0%}, τ = {tau:.2f} tokens per step"
    gamma, c, v, o = fig.get("gamma"), fig.get("c"), fig.get("verify_cost"), fig.get("other_cost") or 0.0
    if gamma is not None and c is not None and v is not None:
        text += (f", but a drafting step costs {gamma * c + v + o:.2f} baseline steps "
                 f"({gamma * c:.2f} for drafting γ = {gamma:.1f} tokens at c = {c:.3f} each, {v:.2f} for verifying, "
                 f"{o:.2f} for the rest of the loop)")
    e = fig.get("empty_draft_fraction")
    if e:
        text += f"; {e:.0%} of steps drafted nothing"
    return text + "."


def position_rates(steps: list[Step]) -> list[float | None]:
    """Per draft position k (0-based): the share of k-th drafts that survived, of all that reached verification."""
    return [kept / n if n else None for n, kept, _ in acceptance_by_position(steps)]


def conditional_position_rates(steps: list[Step]) -> list[float | None]:
    """Per draft position k: the share accepted of the k-th drafts the target judged (every draft before it kept)."""
    return [kept / judged if judged else None for _, kept, judged in acceptance_by_position(steps)]


def median(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(vals) if vals else None


def _notes(doc: str) -> str:
    """The module docstring's definitions and predictions, as plain text for the report."""
    start = doc.find("Definitions")
    text = doc[start:] if start >= 0 else doc
    return text.replace("**", "").replace("``", "").strip()


THEORY_NOTES = _notes(__doc__ or "")
