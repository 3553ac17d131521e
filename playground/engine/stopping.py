"""The run's stopping criteria (`_Stop`): they end it when asked, when its job stops, when its time is up or when the
target's scores overflowed (`_ScoreWatch`), and they are where a run pauses at its pace or lets another run step."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, Iterator

import torch
from transformers import StoppingCriteria

from ..i18n import Message
from ..pace import IDLE, TIMEOUT, Pace
from .jobs import _JOB
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


class _Stop(StoppingCriteria):
    """Ends generation after the current step when asked to, when its job was stopped, when the run's time is up,
    or when the target's scores overflowed."""

    def __init__(self, cancel: threading.Event, deadline: float | None, watch: _ScoreWatch | None = None):
        self.cancel = cancel
        self.job: threading.Event | None = getattr(_JOB, "stop", None)  # the job of the thread making the run
        self.deadline = deadline
        self.watch = watch
        self.timed_out = False
        self.gives_way = False  # a long job's run that is redone whole when it gives way (`LiveRun.run`)
        self.gave_way = False  # it did, at the step just ended: a visitor's own run waits for the models
        # A run that takes turns per step (`_Turns`): at each boundary where another waits it lets that one step first;
        # `on_wait` hears the seconds waited; no turn is passed on after the last step (`_last`).
        self.turns: _Turns | None = None
        self.on_wait: Callable[[float], None] = lambda seconds: None
        self.before_pause: Callable[[torch.Tensor], None] = lambda input_ids: None  # the step reaches its viewer first
        # A visitor's run at a pace (`pace.Pace`): after each step but the last it waits as the pace asks, outside its
        # turn and its place (`_Turns.pause`). A step-by-step pause with no press for `pause_idle_s` ends the run
        # (`idle`); time waited at the slowed pace counts against the run's time limit (`deadline`); `ends_at` (the
        # run's lifetime, pauses and waits included) bounds everything. Times are `time.perf_counter()`'s.
        self.pace: Pace | None = None
        self.pause_idle_s: float | None = None
        self.ends_at: float | None = None
        self.idle = False  # the run ended after a step-by-step pause with no press for `pause_idle_s`
        self.max_length: int | None = None
        self.eos_ids: frozenset[int] = frozenset()

    def begin_attempt(self, turns: _Turns | None, max_length: int, eos_ids: frozenset[int],
                      on_wait: Callable[[float], None], before_pause: Callable[[torch.Tensor], None]) -> None:
        """An attempt of the run begins: its collaborators between steps, set together (the turns it takes, where it
        ends, who hears its waits, who hands its step over before a pause)."""
        self.turns = turns
        self.max_length = max_length
        self.eos_ids = eos_ids
        self.on_wait = on_wait
        self.before_pause = before_pause

    def clock_from(self, start: float, timeout_s: float | None, lifetime_s: float | None) -> None:
        """The attempt's clock starts at `start` (perf_counter): its time limit and its lifetime (None or 0: none)."""
        self.deadline = start + timeout_s if timeout_s else None
        self.ends_at = start + lifetime_s if lifetime_s else None

    def _last(self, input_ids: torch.LongTensor) -> bool:
        """Whether the step just ended is the run's last (its length reached, or EOS)."""
        return ((self.max_length is not None and input_ids.shape[1] >= self.max_length)
                or (bool(self.eos_ids) and int(input_ids[0, -1]) in self.eos_ids))

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        now = time.perf_counter()
        if (self.deadline is not None and now > self.deadline) or (self.ends_at is not None and now > self.ends_at):
            self.timed_out = True
        if self.job is not None and self.job.is_set():
            self.cancel.set()
        if self.gives_way and _SCHEDULER.foreground_runs > 0:
            self.gave_way = True
        stop = (self.cancel.is_set() or self.timed_out or self.gave_way
                or (self.watch is not None and self.watch.tripped()))
        if not stop and self.pace is not None and self.turns is not None and self.pace.holds() \
                and not self._last(input_ids):
            stop = self._pause(input_ids)
        if not stop and self.turns is not None and others_waiting() and not self._last(input_ids):
            waited = self.turns.between_steps()  # the runs waiting take their step now
            if waited:
                self.on_wait(waited)
                if self.deadline is not None:  # the run's time limit bounds its own work, not its waits
                    self.deadline += waited
                if self.job is not None and self.job.is_set():
                    self.cancel.set()
                stop = self.cancel.is_set()
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)

    def _pause(self, input_ids: torch.Tensor) -> bool:
        """Wait at the pace between two steps (the run's visitor or Stop ends the wait); whether to stop now."""
        assert self.pace is not None and self.turns is not None
        pace = self.pace

        def stopped() -> bool:
            return self.cancel.is_set() or (self.job is not None and self.job.is_set())

        self.before_pause(input_ids)
        # The bounds as monotonic times (the pace's clock) from the perf_counter ones kept here.
        shift = time.monotonic() - time.perf_counter()
        slow_until = None if self.deadline is None else self.deadline + shift
        until = None if self.ends_at is None else self.ends_at + shift
        paused, queued, (why, held) = self.turns.pause(
            lambda: pace.wait(stopped, self.pause_idle_s, slow_until, until))
        pace.resumed()
        self.on_wait(paused + queued)  # in no phase and not in the elapsed time
        if self.deadline is not None:  # a step-by-step pause and the wait for a turn are not the run's own time
            self.deadline += held + queued
        if why == IDLE:
            self.idle = True
        elif why == TIMEOUT:
            self.timed_out = True
        if self.job is not None and self.job.is_set():
            self.cancel.set()
        return self.cancel.is_set() or self.timed_out or self.idle
