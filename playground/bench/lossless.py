"""The lossless check: a greedy method must reproduce baseline's (or plain `generate()`'s) tokens.

In float32 a difference is an error; in bfloat16/float16 it is reported with the first divergent token and
the target's probability margin there (a near-tie flipped by batched arithmetic).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import theory
from ..methods import REFERENCE, get_method
from ..precision import REDUCED_DTYPES
from ..trace import Trace

SEVERITIES = ("ok", "error", "near-tie", "n/a")


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
    severity: str  # one of SEVERITIES
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
    if dtype in REDUCED_DTYPES:
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


def checked_against(prepared_baseline: Any, trace: Trace, baseline: Trace) -> LosslessCheck:
    """`trace` checked against `baseline` (its first divergence's margin read from the target when greedy)."""
    margin = None
    sample = bool(trace.decoding.get("sample"))
    index = theory.first_divergence(trace.output_ids, baseline.output_ids)
    if index is not None and not trace.lossy and not sample:
        try:
            margin = divergence_margin(prepared_baseline, baseline.output_ids, trace.output_ids, index)
        except Exception:  # the margin is a courtesy; the mismatch itself is still reported
            margin = None
    return check_lossless(trace.output_ids, baseline.output_ids, dtype=str(trace.env.get("dtype", "")),
                          lossy=trace.lossy, sample=sample, margin=margin)


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
    from ..engine import LiveRun, prepare

    req = prepared.request
    plain_request = req.but(method=REFERENCE, assistant=None, params={})
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
    check = checked_against(prepared, trace, plain)
    return PlainCheck(speedup, False, f"{where}: {check.note.replace('baseline', 'plain generate()')}", plain)
