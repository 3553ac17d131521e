"""A pace a class can follow: a run that stops after each verification step until the presenter steps on, or one
slowed to a chosen number of seconds per step.

Pure threading, no torch and no Gradio: the page's handlers set a visitor's `Pace` (its mode, its seconds, a press of
"Step on") from their threads, and the engine's worker asks it after each step how long to wait (`Pace.wait`). The
worker waits outside its turn at the models (`engine.turns._Turns.pause`): other visitors' runs step meanwhile, the run's
waiting takes no core, and the wait is counted apart from the step's phases (the trace's `paused_ms`).
"""

from __future__ import annotations

import threading
import time
from typing import Callable

FREE, STEP, SLOW = "free", "step", "slow"
MODES = (FREE, STEP, SLOW)  # as fast as the machine makes them; stop after each step; seconds per step
DEFAULT_SECONDS = 2.0
MIN_SECONDS, MAX_SECONDS = 0.25, 10.0
IDLE, TIMEOUT = "idle", "timeout"  # why a wait ends the run (`Pace.wait`): no press for long; the run's time is up
POLL_S = 0.25  # how often a waiting worker looks whether its run was stopped (its visitor left, Stop, the time limit)


class Pace:
    """One visitor's pace, shared by the page's handlers and the worker of the visitor's run. Presses of "Step on"
    made while a step is being computed count for the next pause; each run starts with none banked (`begin_run`)."""

    def __init__(self, mode: str = FREE, seconds: float = DEFAULT_SECONDS) -> None:
        self._cond = threading.Condition()
        self.mode = FREE
        self.seconds = DEFAULT_SECONDS
        self._presses = 0
        self._since = time.monotonic()  # when the current step's wait may be measured from (slow pace)
        self.waiting = False  # a run waits for this pace now (the page says so)
        self.pauses = 0  # pauses of the current run
        self.runs = 0  # runs going at this pace now: the page's table of paces never drops it meanwhile
        self.set(mode, seconds)

    def set(self, mode: str, seconds: float | None = None) -> None:
        """Change the pace (also while a run waits: it goes on at the new pace)."""
        if mode not in MODES:
            raise ValueError(f"unknown pace {mode!r}; known: {', '.join(MODES)}")
        with self._cond:
            self.mode = mode
            if seconds is not None:
                self.seconds = min(MAX_SECONDS, max(MIN_SECONDS, float(seconds)))
            self._cond.notify_all()

    def step_on(self) -> None:
        """The presenter steps on: a waiting run takes its next step (a slowed one stops waiting)."""
        with self._cond:
            self._presses += 1
            self._cond.notify_all()

    def begin_run(self) -> None:
        """A run starts at this pace: no press is banked from before, the slow pace measures from now."""
        with self._cond:
            self._presses = 0
            self._since = time.monotonic()
            self.pauses = 0
            self.waiting = False
            self.runs += 1

    def end_run(self) -> None:
        """The run that `begin_run` started has ended (the pace may be dropped from the page's table again)."""
        with self._cond:
            self.runs = max(0, self.runs - 1)

    def holds(self) -> bool:
        """Whether the run should stop after the step just ended (the pace is not free)."""
        return self.mode != FREE

    def wait(self, stopped: Callable[[], bool], idle_s: float | None = None, slow_until: float | None = None,
             until: float | None = None) -> tuple[str | None, float]:
        """Block the worker after a step as the pace asks: until a press of "Step on" (STEP), until `seconds` have
        passed since the last step began to be computed (SLOW), or at once (FREE); also when `stopped()` turns true.

        Bounds (monotonic times, None: none): a STEP pause with no press for `idle_s` ends the run (IDLE: the visitor
        walked away from a paused run); time waited at the SLOW pace counts against the run's time limit, which
        `slow_until` marks (TIMEOUT); `until` bounds every wait (the run's lifetime: TIMEOUT). Returns (None, or why the
        run should end, seconds of this wait spent at the STEP pace: those alone do not count against the run's time
        limit, so a presenter's pause never ends a run whose presenter is there)."""
        began = last = time.monotonic()
        held = 0.0  # seconds of this wait at the STEP pace
        with self._cond:
            self.waiting = True
            self.pauses += 1
            try:
                while True:
                    now = time.monotonic()
                    if self.mode == STEP:
                        held += now - last
                    last = now
                    if stopped():
                        return None, held
                    if self._presses:
                        self._presses -= 1
                        return None, held
                    if self.mode == FREE or (self.mode == SLOW and now >= self._since + self.seconds):
                        return None, held
                    if until is not None and now >= until:
                        return TIMEOUT, held
                    if self.mode == STEP and idle_s is not None and now - began >= idle_s:
                        return IDLE, held
                    if self.mode == SLOW and slow_until is not None and now >= slow_until + held:
                        return TIMEOUT, held
                    timeout = POLL_S if self.mode == STEP else min(POLL_S, self._since + self.seconds - now)
                    self._cond.wait(max(0.001, timeout))
            finally:
                self.waiting = False

    def resumed(self) -> None:
        """The worker computes its next step from now (the slow pace's clock starts again)."""
        with self._cond:
            self._since = time.monotonic()
