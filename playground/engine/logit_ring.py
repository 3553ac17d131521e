"""The logits a run keeps until its steps get their figures: the budget (`KEPT_LOGITS_BYTES`), a held run's batches,
and the ring buffer a held run copies its steps' logits into (`_LogitRing`, one kept spare between runs)."""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

import numpy
import torch


# A run keeps its steps' logits until generation has ended, up to this many bytes: a run nobody watches
# (`LiveRun.run`, `LiveRun._items`) and a run shown as it comes, whose steps get their figures then
# (`LiveRun._figures_later`). Past three quarters of it (96 MiB: the page's default 64-token run of a 262k
# vocabulary holds 64 MiB, a 96-token baseline run 96 MiB) the oldest are digested while generation runs, so memory
# does not grow with the run and the next batch finds room in the buffer (`_LogitRing`, of this size).
KEPT_LOGITS_BYTES = 128 * 2**20
# A run nobody watches hands its records over in batches of an eighth of KEPT_LOGITS_BYTES of logits (and one when
# the attempt ends), not one by one: each hand-off wakes the consumer, whose thread then takes the interpreter lock
# from the generating one (counted, 2 Dec, tiny models in a fresh process: 234-268 voluntary context switches of the
# generating thread in a 48-token baseline run, against 3 for plain generate()).
HELD_BATCHES = 8


def _held_batch_bytes() -> int:
    return KEPT_LOGITS_BYTES // HELD_BATCHES


def _ring_floats() -> int:
    """The floats of a held run's ring buffer: a quarter of KEPT_LOGITS_BYTES (a float is four bytes)."""
    return KEPT_LOGITS_BYTES // 4


def _digest_above() -> int:
    """Past this many bytes of kept logits the consumer digests the oldest (room for the next batch in the buffer)."""
    return KEPT_LOGITS_BYTES - 2 * _held_batch_bytes()


@dataclass
class _Span:
    """A stretch of a `_LogitRing` buffer: [start, end) in floats, and the copy of one step's logits that it holds."""

    start: int
    end: int
    view: torch.Tensor
    owner: "_LogitRing"
    freed: bool = False


class _LogitRing:
    """Memory, written once before `generate()` starts, that a run nobody watches copies its steps' logits into.

    Holding Transformers' own score tensors instead keeps their memory from being reused, so each step's new scores
    land on pages the process never touched: in a fresh process every held byte costs a page fault inside the timed
    generation (counted on two cores, 2 Dec: a CLI run of prompt lookup on the bundled Gemma, bfloat16, 96 new
    tokens, had 42,000-45,000 minor faults inside generate() against 20,000-21,000 for plain generate(); about 2 µs
    each). A copy into pages faulted before the clock starts costs a memory copy (6 MB: about 0.2 ms) instead. A ring:
    the worker takes stretches in order, the consumer frees each when it digests that step; where no stretch is
    free, the step keeps Transformers' tensor as before. One buffer outlives its run (`_take_ring`), so a
    process pays for the pages once."""

    def __init__(self, floats: int):
        # Every page written now, outside the clock, by numpy: a torch fill this large would start an OpenMP team in
        # the calling thread, and with more OpenMP threads than cores libgomp's idle threads sleep after a short spin
        # instead of waiting for the next parallel region, so generation's own team then sleeps and wakes around every
        # op (counted, 2 Dec: 2,700-4,000 voluntary context switches per generating thread in a 96-token prompt-lookup
        # run, against 0-50 without; the fresh CLI run took 1.2-2.1x plain generate() in a quiet window).
        filled = numpy.empty(floats, dtype=numpy.float32)
        filled.fill(0.0)
        self.buffer = torch.from_numpy(filled)
        self._spans: collections.deque[_Span] = collections.deque()  # taken, oldest first
        self._head = 0  # where the next stretch starts
        self._lock = threading.Lock()

    def hold(self, logits: torch.Tensor | None, spans: list[_Span]) -> torch.Tensor | None:
        """A copy of `logits` in the buffer (its stretch appended to `spans`), or `logits` itself where there is no
        room, or it is not a float32 tensor in main memory."""
        if logits is None or logits.dtype != torch.float32 or logits.device.type != "cpu":
            return logits
        size = logits.numel()
        with self._lock:
            start = self._place(size)
            if start is None:
                return logits
            span = _Span(start, start + size, self.buffer[start:start + size].view(logits.shape), self)
            self._spans.append(span)
            self._head = span.end
        span.view.copy_(logits)
        spans.append(span)
        return span.view

    def _place(self, size: int) -> int | None:
        """Where a stretch of `size` floats fits (None: nowhere). Taken stretches lie in [first, head), or, once the
        ring wrapped, in [first, capacity) and [0, head)."""
        if not 0 < size <= self.buffer.numel():
            return None
        if not self._spans:
            self._head = 0
            return 0
        first = self._spans[0].start
        if first < self._head:  # not wrapped
            if self._head + size <= self.buffer.numel():
                return self._head
            return 0 if size <= first else None
        return self._head if self._head + size <= first else None

    def release(self, span: _Span) -> None:
        """The step's copy was digested: its stretch (and every freed one before it) can be taken again."""
        with self._lock:
            span.freed = True
            while self._spans and self._spans[0].freed:
                self._spans.popleft()

    def reset(self) -> None:
        with self._lock:
            self._spans.clear()
            self._head = 0


_SPARE_RING: list[_LogitRing] = []  # one buffer kept between runs (a process pays for its pages once)
_SPARE_RING_LOCK = threading.Lock()


def _take_ring(floats: int) -> _LogitRing | None:
    """A buffer of `floats` floats for one run: the spare one when it is free and of that size, else a new one."""
    if floats <= 0:
        return None
    with _SPARE_RING_LOCK:
        if _SPARE_RING and _SPARE_RING[0].buffer.numel() == floats:
            return _SPARE_RING.pop()
    return _LogitRing(floats)


def _give_back_ring(ring: _LogitRing) -> None:
    """The run is over (its steps built): keep the buffer for the next run, unless one is kept already."""
    ring.reset()
    with _SPARE_RING_LOCK:
        if not _SPARE_RING:
            _SPARE_RING.append(ring)
