"""A step's logits to figures: probabilities (`_softmax`), the drafted tokens' p and q, and the step microscope's
top-k lists of p, q, ensemble verification's mixture and the residual (`_step_dists`, `_digest`), without starting an
OpenMP team (the note above GRAIN_SIZE). Computed in the consumer's thread, or in the generating worker's when the
consumer fell MAX_PENDING_LOGITS records behind (`recorder._Recorder.push`)."""

from __future__ import annotations

import numpy
import torch

from ..methods import mixture
from ..trace import Position, Ranked
from .records import _Raw


# The consumer's vocabulary-wide work runs in its own thread alone. An ATen op over more than GRAIN_SIZE (32,768)
# elements starts an OpenMP team of the calling thread, which on a machine whose cores generation keeps busy fights
# generation's own team: measured on two cores (1 Dec), an amax over one 262,144-entry row took 0.02 ms of CPU alone
# and 19 ms of wall time (3.5 ms of CPU) with a team, a softmax over 6 rows 1.6 ms and 40 ms. So a softmax takes one
# row at a time (one row's softmax is never split across threads) and the chunk maxima by numpy. Counted in a fresh
# thread (2 Dec), sampling's own work started a team too: the residual max(0, p − q) (its subtraction, clamp, sum and
# division), ensemble verification's mixture, the whole-row sort of a flat row, and the float32 copy of a drafter's
# bfloat16 logits (the MTP drafter's); on the CPU these are numpy's now (`_mixture`, `_residual`, `_sorted_top`) and
# the copy goes in pieces of GRAIN_SIZE (`_float_rows`). Only the residual's sum changes order (numpy's pairwise sum).
GRAIN_SIZE = 32_768  # at::internal::GRAIN_SIZE: a CPU op over more elements than this may split across threads


def _float_rows(logits: torch.Tensor, rows: int) -> torch.Tensor:
    """The first `rows` rows of logits as float32: no copy when they are float32 already (Transformers' scores), else
    on the CPU converted GRAIN_SIZE entries at a time (the conversion is exact: the same values as `.float()`)."""
    logits = logits[:rows]
    if logits.dtype == torch.float32 or logits.device.type != "cpu":
        return logits.float()
    converted = torch.empty(logits.shape, dtype=torch.float32)
    for row in range(logits.shape[0]):
        for start in range(0, logits.shape[1], GRAIN_SIZE):
            converted[row, start:start + GRAIN_SIZE].copy_(logits[row, start:start + GRAIN_SIZE])
    return converted


def _softmax(logits: torch.Tensor | None, rows: int) -> torch.Tensor | None:
    """The probabilities of the first `rows` rows of logits (float32; None where there are none), one row at a time
    (see the note above GRAIN_SIZE). One softmax per step and distribution: every figure of the step (the drafted
    token's p and q, the top-k lists) is read from it."""
    if logits is None or rows <= 0:
        return None
    logits = _float_rows(logits, rows)
    probs = torch.empty_like(logits)
    for row in range(probs.shape[0]):
        torch.softmax(logits[row], dim=-1, out=probs[row])
    return probs


def _probs_of(probs: torch.Tensor | None, ids: list[int]) -> list[float] | None:
    """Probability of each given id under each row of probs (rows aligned with ids; NaN, from overflowed scores,
    read as 0)."""
    if probs is None or not ids:
        return None
    picked = probs[: len(ids)].gather(1, torch.tensor(ids, device=probs.device).unsqueeze(1)).squeeze(1)
    return [min(1.0, max(0.0, x)) if x == x else 0.0 for x in picked.tolist()]


# Top-k of a vocabulary-wide row without torch.topk, which on the CPU copies the row into (value, index) pairs and
# sorts them partially: about 0.5 ms per row of Gemma's 262,144 entries on one core (1 Dec), half of a whole softmax.
# Instead each row's chunks of TOP_K_CHUNK entries get their maximum (one vectorised pass); the k-th largest chunk
# maximum is a floor that at least k entries reach, so every entry of the top k reaches it and lies in a chunk whose
# maximum does; the entries of those few chunks that reach the floor (a few dozen) are sorted in Python, ties to the
# lower id. About 0.1 ms per row. Rows of at most SMALL_ROW entries (or k beyond their chunk count), and rows so flat
# that more than MAX_CANDIDATES entries reach the floor, are sorted whole.
TOP_K_CHUNK = 512
SMALL_ROW = 16 * TOP_K_CHUNK
MAX_CANDIDATES = 4096
_SMALLEST_POSITIVE = float(torch.nextafter(torch.zeros(()), torch.ones(())))  # p > 0 ⇔ p ≥ this


def _candidates(row: torch.Tensor, k: int) -> tuple[list[float], list[int]]:
    """The entries of a probability row that reach its floor (see above), as (probabilities, ids), ids ascending:
    every entry of the row's top k is among them. Computed in this thread alone (see the note above GRAIN_SIZE): by
    numpy on the CPU, whose reductions, partitions and fancy indexing never start threads (torch's topk, indexing
    and nonzero do, from a few thousand entries on), else by torch (a GPU has no OpenMP team to compete with)."""
    width = row.shape[0]
    whole = width - width % TOP_K_CHUNK
    if row.device.type == "cpu":
        values = row.numpy()
        maxima = values[:whole].reshape(-1, TOP_K_CHUNK).max(axis=-1)
        if whole < width:
            maxima = numpy.append(maxima, values[whole:].max())
        floor = max(float(numpy.partition(maxima, len(maxima) - k)[len(maxima) - k]), _SMALLEST_POSITIVE)
        ids = (numpy.flatnonzero(maxima >= floor)[:, None] * TOP_K_CHUNK + numpy.arange(TOP_K_CHUNK)).ravel()
        ids = ids[ids < width]
        hit = numpy.flatnonzero(values[ids] >= floor)
        return values[ids[hit]].tolist(), ids[hit].tolist()
    maxima = row[:whole].view(-1, TOP_K_CHUNK).amax(dim=-1)
    if whole < width:
        maxima = torch.cat([maxima, row[whole:].amax(dim=0, keepdim=True)])
    floor = max(float(maxima.topk(k).values[-1]), _SMALLEST_POSITIVE)
    ids = ((maxima >= floor).nonzero().squeeze(1).unsqueeze(1) * TOP_K_CHUNK
           + torch.arange(TOP_K_CHUNK, device=row.device)).reshape(-1)
    ids = ids[ids < width]
    hit = ids[row[ids] >= floor]
    return row[hit].tolist(), hit.tolist()


def _ranked(values: list[float], ids: list[int]) -> list[Ranked]:
    """A top-k list from probabilities and ids in rank order: probabilities clamped to [0, 1] (float32 rounding can
    put one a hair outside), tokens of probability 0 (removed by a warper) left out, the first always kept."""
    ranked = [Ranked(int(i), min(1.0, max(0.0, v))) for v, i in zip(values, ids)]
    return [r for n, r in enumerate(ranked) if n == 0 or r.prob > 0]


def _top_row(row: torch.Tensor, k: int) -> list[Ranked]:
    """The k most probable tokens of a probability row, most probable first, ties to the lower id (as argmax, and so
    greedy decoding, picks), zeros left out (`_ranked`). Texts are filled in by the consumer."""
    width = row.shape[0]
    k = min(k, width)
    if width > SMALL_ROW and k <= width // TOP_K_CHUNK:
        values, ids = _candidates(row, k)  # NaN (overflowed scores) reaches no floor: none
        if len(ids) <= MAX_CANDIDATES:
            entries = sorted(zip((-v for v in values), ids))[:k]
            if not entries:  # no entry is a positive number (NaN scores): the row's argmax stands alone
                first = int(row.argmax())
                entries = [(-float(row[first]), first)]
            return _ranked([-v for v, _ in entries], [i for _, i in entries])
    return _ranked(*_sorted_top(row, k))


def _sorted_top(row: torch.Tensor, k: int) -> tuple[list[float], list[int]]:
    """The first k of the whole row sorted as `row.sort(descending=True, stable=True)` sorts it (NaN first, then the
    largest, ties to the lower id), as (values, ids). On the CPU by numpy: torch's sort copies the row first, and that
    copy starts an OpenMP team (see the note above GRAIN_SIZE)."""
    if row.device.type == "cpu":
        values = row.numpy()
        order = numpy.lexsort((-values, ~numpy.isnan(values)))[:k]  # last key first: NaN, then descending values
        return values[order].tolist(), order.tolist()
    values, ids = row.sort(descending=True, stable=True)
    return values[:k].tolist(), ids[:k].tolist()


def _mixture(p: torch.Tensor, q: torch.Tensor, weight: float) -> torch.Tensor:
    """Ensemble verification's v = w·p + (1−w)·q over rows of probabilities (`methods.mixture`, in float32). On the CPU
    by numpy (see the note above _softmax), with the same float32 steps as torch's (w and 1 − w rounded to float32,
    two products, one sum): the same bits."""
    if p.device.type == "cpu":
        return torch.from_numpy(mixture(p.numpy(), q.numpy(), weight))
    return mixture(p, q, weight)


def _residual(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, float]:
    """max(0, p − q) over one row and its sum. On the CPU by numpy (see the note above GRAIN_SIZE): the same row to
    the last bit; its float32 sum is numpy's pairwise one, whose order differs from torch's (which itself changes
    with the number of threads), so the total can differ from torch's in its last bits."""
    if p.device.type == "cpu":
        residual = numpy.subtract(p.numpy(), q.numpy())
        numpy.maximum(residual, numpy.float32(0), out=residual)
        return torch.from_numpy(residual), float(residual.sum())
    residual = (p - q).clamp(min=0)
    return residual, float(residual.sum())


def _normalised(row: torch.Tensor, total: float) -> torch.Tensor:
    """row / total, each entry divided by the total rounded to float32 (as torch divides a float32 tensor by a Python
    float). On the CPU by numpy (see the note above GRAIN_SIZE)."""
    if row.device.type == "cpu":
        return torch.from_numpy(row.numpy() / numpy.float32(total))
    return row / total


def _top_rows(probs: torch.Tensor, k: int) -> list[list[Ranked]]:
    """`_top_row` of each row of `probs` (2-D), one row at a time (see the note above GRAIN_SIZE)."""
    return [_top_row(probs[row], k) for row in range(probs.shape[0])]


def _refused_at(drafted: list[int], emitted: list[int]) -> int | None:
    """The position whose draft the target may have refused: the first where the emitted token differs, or the last
    emitted one when every emitted token equals its draft (ensemble verification can resample the refused id itself;
    when the end of generation cut the step there, the consumer drops what was computed for it)."""
    for i, (d, e) in enumerate(zip(drafted, emitted)):
        if d != e:
            return i
    return len(emitted) - 1 if emitted and len(emitted) <= len(drafted) else None


def _step_dists(drafted: list[int], emitted: list[int], p: torch.Tensor | None, q: torch.Tensor | None, k: int,
                sample: bool, ensemble_weight: float | None) -> list[Position] | None:
    """The step microscope's records of one step: per emitted token, the top-k of the target's row that decided it
    (p: softmax of the very scores Transformers decided with, after its logits processors), of the drafter's row (q:
    softmax of the candidate logits Transformers received, warped as `Method.q_source` says), of ensemble verification's
    mixture v = w·p + (1−w)·q, and at the refused position under sampling with q the residual max(0, p − q)
    normalised the correction was drawn from (Transformers' `_speculative_sampling`; ensemble: the same, since
    max(0, v − q) = w·max(0, p − q), or p itself where the residual is numerically zero). `p`, `q`: the step's
    probability rows (`_softmax`). Only k-sized lists leave this function."""
    if k <= 0 or p is None:
        return None
    rows = len(emitted)
    p = p[:rows]
    q = q[: min(rows, len(drafted))] if q is not None and drafted else None
    if q is not None and q.shape[-1] != p.shape[-1]:
        q = None  # not comparable token for token (Transformers could not compare them either)
    refused = _refused_at(drafted, emitted) if sample and q is not None else None
    judged = min(rows, len(drafted))
    p_top, p_emitted = _top_rows(p, k), _probs_of(p, emitted) or []
    p_drafted = _probs_of(p, drafted[:judged]) or []
    q_top, q_drafted = [], []
    if q is not None:
        q_top, q_drafted = _top_rows(q, k), _probs_of(q, drafted[: q.shape[0]]) or []
    if q is not None and ensemble_weight is not None:
        v = _mixture(p[: q.shape[0]], q, ensemble_weight)
        v_top, v_drafted = _top_rows(v, k), _probs_of(v, drafted[: q.shape[0]]) or []
    positions = []
    for i in range(rows):
        position = Position(p=p_top[i], p_emitted=p_emitted[i])
        if i < judged:
            position.p_drafted = p_drafted[i]
            if q is not None and i < q.shape[0]:
                position.q, position.q_drafted = q_top[i], q_drafted[i]
                if ensemble_weight is not None:
                    position.v, position.v_drafted = v_top[i], v_drafted[i]
                if i == refused:
                    residual, total = _residual(p[i], q[i])
                    if ensemble_weight is not None and total <= torch.finfo(residual.dtype).tiny:
                        residual, total = p[i], 1.0
                    if total > 0:
                        residual = _normalised(residual, total)
                        position.residual = _top_row(residual, k)
                        position.residual_emitted = (_probs_of(residual.unsqueeze(0), [emitted[i]]) or [0.0])[0]
        positions.append(position)
    return positions


def _digest(raw: "_Raw", k: int, sample: bool, ensemble_weight: float | None) -> None:
    """Turn a step's logits into what the trace keeps (the drafted tokens' q and p, the microscope's top-k lists)
    and let go of the logits."""
    drafted = raw.drafted.tolist() if raw.drafted is not None else []
    emitted = raw.emitted.tolist()
    p = _softmax(raw.p_logits, max(len(drafted), len(emitted) if k > 0 else 0))
    q = _softmax(raw.q_logits, len(drafted))
    raw.q, raw.p = _probs_of(q, drafted), _probs_of(p, drafted)
    raw.dists = _step_dists(drafted, emitted, p, q, k, sample, ensemble_weight)
    raw.release()
    raw.digested = True
