"""The generating side of a run (`_Worker`): `generate()` in a thread of its own, attempt after attempt while the run
gives way, its records handed to the consumer over one queue and ended by `_DONE` (`_RESTART` between attempts: the
steps so far are void). What the consumer reads of it (elapsed time, the error, the time waited for others' steps, the
steps generated so far, the turns' waits and pauses, the boundary's findings) is here; the steps are built by the
consumer (`live.LiveRun`, `steps.StepBoundary`)."""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
import time
from typing import Any, Callable

import torch
from transformers import StoppingCriteriaList

from .logit_ring import _LogitRing
from .prepared import PreparedRun
from .recorder import _device_sync, _Recorder
from .records import _Raw
from .sources import DraftSource
from .stopping import Attempt, _ScoreWatch, _Stop
from .turns import _StoppedWaiting, _Turns, exclusive


_DONE = object()  # generation has ended: nothing more comes
_RESTART = object()  # the run gave way and starts again: its steps so far are void

# The generation worker's name as the operating system sees it (/proc/<pid>/task/*/comm, `top -H`,
# `ps -L`): Python 3.11 does not pass thread names down, and Linux keeps at most 15 bytes.
WORKER_OS_THREAD_NAME = "pg-generate"


def _name_os_thread(name: str) -> None:
    """Name the calling OS thread (Linux only; elsewhere, or on any failure, nothing happens)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(15, name.encode()[:15], 0, 0, 0)  # 15 = PR_SET_NAME
    except Exception:  # naming is for observers only; never fail a run over it
        pass


class _Worker:
    """One run's generation, built whole: its step boundary (`stop`, which says whether the run gives way), where its
    records go (`out`), how its draft source observes the model, the score watch, the consumer's digest for records
    past the logits budget, the buffer a held run copies its logits into (`ring`) and whether the run is held
    (`batched`: its records handed over in batches). `start` runs it in a thread; nothing here builds a step."""

    def __init__(self, prepared: PreparedRun, source: DraftSource, stop: _Stop, out: "queue.SimpleQueue[Any]",
                 cancel: threading.Event, watch: _ScoreWatch | None = None,
                 digest: Callable[[_Raw], None] = lambda raw: None, ring: _LogitRing | None = None,
                 batched: bool = False) -> None:
        self.prepared = prepared
        self.source = source
        self.stop = stop
        self.out = out
        self.cancel = cancel
        self.job = stop.job  # the job of the thread that made the run, as its step boundary holds it
        self.watch = watch if watch is not None else _ScoreWatch()
        self.digest = digest
        self.ring = ring
        self.batched = batched
        self.error: BaseException | None = None  # what ended the run, for the consumer to re-raise
        self.elapsed = 0.0  # the last attempt's generation time, the waits for other runs' steps left out
        self.started = 0.0  # when the current attempt's generate() began (perf_counter)
        self.gave_way = 0  # times the run gave way to a visitor's run and started again
        self.recorder: _Recorder | None = None  # the current attempt's
        self.turns: _Turns | None = None  # the current attempt's, if it takes turns per step (a visitor's own run)
        self.thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    @property
    def generated_steps(self) -> int:
        """Steps the current attempt has generated so far."""
        return self.recorder.pushed if self.recorder is not None else 0

    @property
    def waited(self) -> float:
        """Seconds the current attempt waited between its steps for other runs' steps."""
        return self.recorder.waited if self.recorder is not None else 0.0

    def start(self) -> None:
        self.thread = threading.Thread(target=self.work, name="playground-generate", daemon=True)
        self.thread.start()

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()

    def work(self) -> None:
        """Attempt after attempt while the run gives way; `_RESTART` between them, `_DONE` at the end, always."""
        _name_os_thread(WORKER_OS_THREAD_NAME)
        try:
            while True:
                try:
                    self.attempt()
                finally:
                    if self.recorder is not None:  # what the attempt recorded reaches the consumer before the end
                        self.recorder.flush()
                if not self.stop.gave_way or self.error is not None or self.cancel.is_set():
                    break
                # A visitor's own run asked for the models: this long job's run ended at its step and starts again
                # from the beginning once that run is done (`_turn`); the consumer drops what it has (`_RESTART`).
                self.gave_way += 1
                self.out.put(_RESTART)
        finally:
            self.out.put(_DONE)

    def attempt(self) -> None:
        prepared = self.prepared
        model = prepared.target.model
        recorder = self.recorder = _Recorder(self.out, _device_sync(model), self.watch, self.digest, self.ring,
                                             batched=self.batched)
        kwargs = dict(prepared.generate_kwargs)
        kwargs["stopping_criteria"] = StoppingCriteriaList([self.stop])
        kwargs.update(self.source.generate_kwargs(recorder))

        def hooks() -> list[contextlib.AbstractContextManager[Any]]:
            return [self.watch.watching(model), *self.source.observe(model, recorder)]

        # A run redone when it gives way (a long job's `run`) holds its models for the whole attempt; any other run
        # (a visitor's own, an MCP generate) takes turns per step with the others, its hooks on the model per turn.
        turns = None if self.stop.gives_way else _Turns(prepared, self.cancel, hooks, self.job)
        self.turns = turns
        # Its job's stop event ends any run; only a long job's run (the one that gives way) also waits in `_turn` for
        # the visitors' runs. An MCP generate is a visitor's own run that its agent's leaving stops (`_Turns.job`).
        long_job = self.job if self.stop.gives_way else None
        self.stop.begin(Attempt(turns, prepared.input_ids.shape[1] + prepared.request.max_new_tokens,
                                prepared.eos_ids, recorder.note_wait, recorder.hand_over_now))
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(exclusive(prepared, long_job, turns))
                stack.enter_context(torch.inference_mode())
                if turns is None:
                    for manager in hooks():
                        stack.enter_context(manager)
                self.started = recorder.started = recorder._stamp()
                self.stop.start_clock(self.started)
                model.generate(**kwargs)
                self.elapsed = recorder.finish() - self.started - recorder.waited
        except _StoppedWaiting:  # stopped before its first turn (its visitor or agent left): no step, nothing to report
            self.cancel.set()
            self.elapsed = 0.0
        except BaseException as exc:  # reported to the consumer, which re-raises it
            self.elapsed = time.perf_counter() - self.started - recorder.waited if self.started else 0.0
            self.error = exc
