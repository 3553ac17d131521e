"""The step boundary (`_Stop`): where a run ends when asked, when its job stops, when its time is up, when the target's
scores overflowed (`_ScoreWatch`) or when it gives way to a visitor's run, and where it pauses at its pace or lets
another run step. What it decides at a boundary is a pure function of what it sees there (`at_boundary`)."""

from __future__ import annotations

import contextlib
import enum
import threading
import time
from typing import Any, Callable, Iterator, NamedTuple

import torch
from transformers import StoppingCriteria

from ..i18n import Message
from ..pace import IDLE, TIMEOUT, Pace
from .turns import _SCHEDULER, _Turns, others_waiting


def sampling_asserts_on(device: torch.device) -> bool:
    """Whether sampling from a NaN or infinite row is a device-side assert on `device` rather than an error raised.

    On a GPU `torch.multinomial` checks its probabilities inside the kernel: the assert leaves the process's CUDA
    context unusable, so every later run of the server fails (seen on an H200). On the CPU it raises a plain
    `RuntimeError`, which `LiveRun._finish` reports as the overflow it is."""
    return device.type != "cpu"


def neutralize(logits: torch.Tensor, rows_bad: torch.Tensor) -> None:
    """Make each bad row uniform (all zeros) in place, so that sampling draws a token instead of asserting; the
    run still ends at this step's boundary and says why (`_Stop`). Sound rows are untouched, bit for bit. A pass over
    every score, with no synchronisation: paid only where sampling asserts (`sampling_asserts_on`)."""
    logits.masked_fill_(rows_bad, 0.0)


class _ScoreWatch:
    """Watches the target's scores as its forwards produce them (a forward hook that, on the CPU, changes nothing).

    NaN, +inf, or a row without one finite score means the target's arithmetic overflowed (float16 on a model
    trained in bfloat16 is the usual cause): every token from there on is meaningless, typically padding. One
    reduction per forward (a row's maximum is NaN, +inf or -inf exactly when the row is bad) on the forward's own
    logits; the flag stays on the model's device (no synchronisation per forward); `_Stop` reads it once a step.
    On a GPU a bad row is also made uniform before anything samples from it (`neutralize`).
    A hook, not a logits processor: any processor at all switches the assisted loop onto its per-row processing
    of every verified position, a cost plain `generate()` does not pay. The drafter's own forwards (the target's
    first layers in early exit, or the target drafting for itself) are not the target's scores and are skipped.
    """

    def __init__(self) -> None:
        self.drafting = False  # set by the recorder around the drafter's turn
        self._bad: torch.Tensor | None = None

    def observe(self, module: Any, args: Any, output: Any) -> None:
        logits = getattr(output, "logits", None)
        if logits is None:
            return
        asserts = sampling_asserts_on(logits.device)
        if self.drafting and not asserts:  # the drafter's scores: never trip the watch; only a GPU needs them mended
            return
        rows_bad = ~torch.isfinite(logits.amax(dim=-1, keepdim=True))
        if asserts:
            neutralize(logits, rows_bad)
        if not self.drafting:
            bad = rows_bad.any()
            self._bad = bad if self._bad is None else self._bad | bad

    @contextlib.contextmanager
    def watching(self, model: Any) -> Iterator[None]:
        """Watch `model`'s forwards for the length of one run (the hook is removed after)."""
        handle = model.register_forward_hook(self.observe)
        try:
            yield
        finally:
            handle.remove()

    def tripped(self) -> bool:
        return self._bad is not None and bool(self._bad)


def non_finite_message(dtype: torch.dtype, tokens: int) -> Message:
    """Why a run whose target's scores overflowed was ended, and what to do about it (English as a str)."""
    name = str(dtype).replace("torch.", "")
    advice = Message.keyed("error.non_finite.float16" if dtype == torch.float16 else "error.non_finite.broken",
                           dtype=name)
    return Message.keyed("error.non_finite", n=tokens, advice=advice)


class Next(enum.Enum):
    """What follows a step boundary."""

    GO = "go"  # the next step, at once
    STOP = "stop"  # the run ends here (`Verdict` says whether its time was up or it gave way)
    PAUSE = "pause"  # the run waits at its pace first (out of its turn and its place: `_Turns.pause`)
    YIELD = "yield"  # the runs waiting for the baton take their step first (`_Turns.between_steps`)


class Seen(NamedTuple):
    """What a step boundary sees, read once (times are `time.perf_counter()`'s)."""

    now: float
    timed_out: bool  # an earlier boundary found the run's time up (it stays up, also for an attempt redone after it)
    deadline: float | None  # the run's time limit (its own work: waits and pauses move it on); None: none
    ends_at: float | None  # its lifetime, pauses and waits included; None: none
    stopped: bool  # Stop was pressed, its visitor left, or its job was stopped
    gives_way: bool  # a long job's run, redone whole when it gives way
    visitor_waiting: bool  # a visitor's own run waits for its models or runs
    overflowed: bool  # the target's scores overflowed (`_ScoreWatch`)
    last: bool  # the step just ended is the run's last (its length reached, or EOS): it neither pauses nor yields
    paced: bool  # it takes turns at a pace that holds it after each step (not the free pace)
    others_waiting: bool  # it takes turns and another run waits for the baton


class Verdict(NamedTuple):
    next: Next
    timed_out: bool = False  # the run's time limit or its lifetime is past
    gave_way: bool = False  # a long job's run ends here because a visitor's own run waits for the models


_GO = Verdict(Next.GO)


def at_boundary(seen: Seen) -> Verdict:
    """What follows the step just ended: the run stops (asked to, its time up, giving way, its scores overflowed);
    else, unless it was the last step, it pauses at its pace, or lets the runs waiting for the baton step first."""
    timed_out = (seen.timed_out or (seen.deadline is not None and seen.now > seen.deadline)
                 or (seen.ends_at is not None and seen.now > seen.ends_at))
    gave_way = seen.gives_way and seen.visitor_waiting
    if seen.stopped or timed_out or gave_way or seen.overflowed:
        return Verdict(Next.STOP, timed_out, gave_way)
    if seen.last:
        return _GO
    if seen.paced:
        return Verdict(Next.PAUSE)
    if seen.others_waiting:
        return Verdict(Next.YIELD)
    return _GO


def last_step(length: int, last_id: Callable[[], int], max_length: int | None, eos_ids: frozenset[int]) -> bool:
    """Whether a step that left the sequence `length` tokens long, ending in `last_id()` (read only when it matters:
    on a GPU it waits for the device), was the run's last."""
    return (max_length is not None and length >= max_length) or (bool(eos_ids) and last_id() in eos_ids)


def _nothing(_: Any) -> None:
    return None


class Attempt(NamedTuple):
    """One attempt of a run, as its step boundary needs it: the turns it takes (None: it holds its models for the
    whole attempt), where it ends (its length, its EOS ids), who hears its waits and who hands its step over before a
    pause (the recorder)."""

    turns: _Turns | None = None
    max_length: int | None = None
    eos_ids: frozenset[int] = frozenset()
    on_wait: Callable[[float], None] = _nothing
    before_pause: Callable[[torch.Tensor], None] = _nothing


class _Stop(StoppingCriteria):
    """The run's step boundary. A `StoppingCriteria` because that is the one hook `generate()` calls once per step, in
    the generating thread, between the step's verification and the next draft, with every method's model back in its
    normal state (early exit has restored its layers), in every decoding loop (plain, sampled, assisted): so it is
    where a run stops, pauses and takes turns, with no patch on Transformers' loop.

    Built whole with its collaborators: the run's own stop event (`cancel`) and its job's (a long job's run, or an MCP
    generate's call), the score watch, the visitor's pace (`pace.Pace`) with its idle bound (a step-by-step pause with
    no press for `pause_idle_s` ends the run: `idle`), whether it gives way (a long job's run, redone whole when a
    visitor's own run asks for the models: `gave_way`), its time limit (`timeout_s`: its own work; time waited at the
    slowed pace counts against it) and its lifetime (`lifetime_s`: pauses and waits included). Then, per attempt of the
    run, its `Attempt` (`begin`) and its clock (`start_clock`). What it decides is `at_boundary`'s; what it then does
    (pause, yield) is here. Nothing outside this module sets its state: the rest reads it."""

    def __init__(self, cancel: threading.Event, *, job: threading.Event | None = None,
                 watch: _ScoreWatch | None = None, pace: Pace | None = None, pause_idle_s: float | None = None,
                 gives_way: bool = False, timeout_s: float | None = None, lifetime_s: float | None = None):
        self._cancel = cancel
        self._job = job
        self._watch = watch
        self._pace = pace
        self._pause_idle_s = pause_idle_s
        self._gives_way = gives_way
        self._timeout_s = timeout_s
        self._lifetime_s = lifetime_s
        self._attempt = Attempt()
        self._deadline: float | None = None
        self._ends_at: float | None = None
        self._timed_out = False
        self._gave_way = False
        self._idle = False

    @property
    def gives_way(self) -> bool:
        return self._gives_way

    @property
    def job(self) -> threading.Event | None:
        return self._job

    @property
    def timed_out(self) -> bool:
        """The run ended because its time limit or its lifetime was past."""
        return self._timed_out

    @property
    def gave_way(self) -> bool:
        """The current attempt ended at the step just ended: a visitor's own run waits for the models."""
        return self._gave_way

    @property
    def idle(self) -> bool:
        """The run ended after a step-by-step pause with no press for `pause_idle_s`."""
        return self._idle

    def begin(self, attempt: Attempt) -> None:
        """An attempt of the run begins (the first, or one after it gave way)."""
        self._attempt = attempt
        self._gave_way = False

    def start_clock(self, start: float) -> None:
        """The attempt's clock starts at `start` (perf_counter): its time limit and its lifetime from now."""
        self._deadline = start + self._timeout_s if self._timeout_s else None
        self._ends_at = start + self._lifetime_s if self._lifetime_s else None

    def _stopped(self) -> bool:
        if self._job is not None and self._job.is_set():
            self._cancel.set()
        return self._cancel.is_set()

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        now = time.perf_counter()
        attempt = self._attempt
        turns = attempt.turns
        paced = self._pace is not None and turns is not None and self._pace.holds()
        others = turns is not None and others_waiting()
        seen = Seen(now, self._timed_out, self._deadline, self._ends_at, self._stopped(), self._gives_way,
                    _SCHEDULER.foreground_runs > 0,
                    self._watch is not None and self._watch.tripped(),
                    (paced or others) and last_step(input_ids.shape[1], lambda: int(input_ids[0, -1]),
                                                    attempt.max_length, attempt.eos_ids),
                    paced, others)
        verdict = at_boundary(seen)
        self._timed_out |= verdict.timed_out
        self._gave_way |= verdict.gave_way
        after = verdict.next
        stop = after is Next.STOP
        if after is Next.PAUSE:
            stop = self._pause(input_ids)
            after = Next.YIELD if not stop and others_waiting() else Next.GO
        if after is Next.YIELD:
            stop = self._yield()
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)

    def _yield(self) -> bool:
        """Let the runs waiting for the baton take their step; whether to stop now (the run was stopped meanwhile)."""
        assert self._attempt.turns is not None
        waited = self._attempt.turns.between_steps()
        if not waited:
            return False
        self._attempt.on_wait(waited)
        if self._deadline is not None:  # the run's time limit bounds its own work, not its waits
            self._deadline += waited
        return self._stopped()

    def _pause(self, input_ids: torch.Tensor) -> bool:
        """Wait at the pace between two steps (the run's visitor or Stop ends the wait); whether to stop now."""
        pace, turns = self._pace, self._attempt.turns
        assert pace is not None and turns is not None

        def stopped() -> bool:
            return self._cancel.is_set() or (self._job is not None and self._job.is_set())

        self._attempt.before_pause(input_ids)
        # The bounds as monotonic times (the pace's clock) from the perf_counter ones kept here.
        shift = time.monotonic() - time.perf_counter()
        slow_until = None if self._deadline is None else self._deadline + shift
        until = None if self._ends_at is None else self._ends_at + shift
        paused, queued, (why, held) = turns.pause(lambda: pace.wait(stopped, self._pause_idle_s, slow_until, until))
        pace.resumed()
        self._attempt.on_wait(paused + queued)  # in no phase and not in the elapsed time
        if self._deadline is not None:  # a step-by-step pause and the wait for a turn are not the run's own time
            self._deadline += held + queued
        if why == IDLE:
            self._idle = True
        elif why == TIMEOUT:
            self._timed_out = True
        return self._stopped() or self._timed_out or self._idle
