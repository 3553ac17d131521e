"""One generation as it happens (`LiveRun`): `generate()` in a worker thread (`worker._Worker`), its steps built in the
caller's thread; `run` to the end, and `plain_generate`, the same call with no instrumentation."""

from __future__ import annotations

import collections
import platform
import queue
import threading
import time
from typing import Any, Callable, Generator, Iterator

import torch
import transformers
from transformers import StoppingCriteriaList

from ..models import STORE, ModelStore
from ..pace import Pace
from ..request import RunRequest
from ..settings import get_settings
from ..trace import Step, Trace
from . import logit_ring
from .jobs import _JOB, GaveWay, JobStopped, check_stopped, in_worker_thread, redone_after_giving_way
from .prepared import PreparedRun, RunError
from .preparing import prepare
from .records import _Other, _Raw, _Setup
from .sources import source_for
from .steps import StepBoundary
from .stopping import Attempt, _ScoreWatch, _Stop, non_finite_message
from .turns import exclusive
from .worker import _DONE, _RESTART, _Worker


_IDLE = object()  # no step came for `LiveRun.idle_s` (the run stands paused, or its step is long)


def _handed_over(received: Any) -> list[Any] | tuple[Any]:
    """The records one hand-off carries: a batch's (`_Recorder.flush`), or the one record."""
    return received if isinstance(received, list) else (received,)


def _unpacked(received: Any) -> Iterator[Any]:
    """The records a hand-off carries, in order, each step's closed phase (`_Raw.before`) before it."""
    for item in _handed_over(received):
        if isinstance(item, _Raw) and item.before is not None:
            yield item.before
        yield item


def environment(prepared: PreparedRun) -> dict[str, Any]:
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "device": prepared.target.device,
        "dtype": prepared.precision.dtype,
        "precision": prepared.precision.reason,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
    }


def plain_generate(prepared: PreparedRun) -> tuple[list[int], float]:
    """The same `generate()` call with no instrumentation: the reference for output and overhead (in a
    worker thread, as `LiveRun` runs it, so an overhead figure compares the instrumentation alone)."""

    job: threading.Event | None = getattr(_JOB, "stop", None)  # the caller's long job, if it is one
    kwargs = dict(prepared.generate_kwargs)
    # Its visitor leaving ends it at the next step (one Event look per step: no cost to see), and a visitor's own run
    # waiting for the models makes it give way and start again after that run.
    stop = _Stop(threading.Event(), job=job, gives_way=job is not None)
    if job is not None:
        kwargs["stopping_criteria"] = StoppingCriteriaList([stop])

    def attempt() -> tuple[list[int], float]:
        stop.begin(Attempt())
        with exclusive(prepared, job), torch.inference_mode():
            start = time.perf_counter()
            out = prepared.target.model.generate(**kwargs)
            if stop.gave_way:
                raise GaveWay("a visitor's run goes first")
            return out[0, prepared.input_ids.shape[1]:].tolist(), time.perf_counter() - start

    result = in_worker_thread(lambda: redone_after_giving_way(attempt), "playground-plain-generate")
    if job is not None and job.is_set():
        raise JobStopped("the job was stopped: its visitor left")
    return result


class LiveRun:
    """One generation: iterate to receive `Step`s as they happen; `trace` grows as you go."""

    def __init__(self, prepared: PreparedRun, timeout_s: float | None = None, pace: Pace | None = None):
        self.prepared = prepared
        req = prepared.request
        self.timeout_s = get_settings().run_timeout_s if timeout_s is None else timeout_s
        self.cancel = threading.Event()
        # The worker's hand-offs to this consumer: put, get and qsize in C, no Python per hand-off.
        self._queue: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._worker: _Worker | None = None  # the generating side, built whole once the run starts (`_steps_of`)
        self._watch = _ScoreWatch()
        self._job: threading.Event | None = getattr(_JOB, "stop", None)  # the job of the thread making the run
        # A visitor's run at a pace stops after its steps as `pace` asks (`_Stop._pause`): a step-by-step pause at most
        # PLAYGROUND_PAUSE_IDLE_S without a press, the whole run at most PLAYGROUND_RUN_LIFETIME_S. While it stands
        # paused its consumer hears None every `idle_s` (`__iter__`), so the page's handler yields and notices a
        # visitor who left.
        self.pace = pace
        settings = get_settings()
        self.pause_idle_s = settings.pause_idle_s
        self.lifetime_s = settings.run_lifetime_s
        self.idle_s: float | None = None
        self.trace = Trace(
            method=prepared.method.name, target=req.target, prompt=req.prompt,
            assistant=req.assistant if prepared.assistant else None, params=dict(prepared.params),
            decoding=req.decoding(), chat=prepared.chat, lossy=prepared.lossy, env=environment(prepared),
            system=req.system if prepared.chat else None,
            chat_template_kwargs=dict(req.chat_template_kwargs) if prepared.chat else {},
            prompt_tokens=int(prepared.input_ids.shape[1]),
            vocab_size=int(prepared.target.model.config.get_text_config().vocab_size),
        )
        top_k = get_settings().top_k  # the step microscope's k (0: nothing recorded)
        self.trace.decoding["recorded_top_k"] = top_k
        self.source = source_for(prepared)  # how this method's drafts are observed and explained (`sources`)
        self._steps = StepBoundary(prepared, self.source, self.trace, top_k)  # each record to the trace's next step
        self.held = False  # nobody sees the steps as they come: they are built after generation (`_items`)
        self._ring: logit_ring._LogitRing | None = None  # where such a run's worker copies its logits (`_LogitRing`)
        # A run shown as it comes: its steps whose figures (q, p, mixture, the microscope's lists) are not filled in
        # yet, by index, oldest first, with the bytes of logits they hold (`_figures_later`).
        self._later: collections.OrderedDict[int, tuple[_Raw, Step]] = collections.OrderedDict()
        self._later_bytes = 0
        self._later_lock = threading.Lock()  # the consumer and a microscope opened during the run (`figures_now`)

    @property
    def running(self) -> bool:
        return self._worker is not None and self._worker.running

    @property
    def generated_steps(self) -> int:
        """Steps the current attempt has generated so far: ahead of `trace.steps` while the consumer catches up, and
        until generation ends when nobody watches (`held`)."""
        return self._worker.generated_steps if self._worker is not None else 0

    @property
    def gave_way(self) -> int:
        """Times this run gave way to a visitor's run and started again (`run`)."""
        return self._worker.gave_way if self._worker is not None else 0

    def stop(self) -> None:
        """Ask generation to end after the current step; what was produced is kept."""
        self.cancel.set()

    def __iter__(self) -> Generator[Step | None, None, None]:
        """The steps as they come (with `idle_s` set, also None after each `idle_s` without one): a visitor's own
        run, which takes turns per step with the others like it and never gives way."""
        return self._steps_of(gives_way=False)

    def _stopping(self, gives_way: bool) -> _Stop:
        """The run's step boundary, built whole (`stopping._Stop`)."""
        return _Stop(self.cancel, job=self._job, watch=self._watch, pace=self.pace, pause_idle_s=self.pause_idle_s,
                     gives_way=gives_way, timeout_s=self.timeout_s, lifetime_s=self.lifetime_s)

    def _steps_of(self, gives_way: bool) -> Generator[Step | None, None, None]:
        """The steps as they come, of a run that gives way (a long job's: redone whole after the visitor's run) or
        takes turns (a visitor's own)."""
        if self._worker is not None:
            raise RuntimeError("a LiveRun can be iterated once")
        check_stopped()  # a stopped job starts no further run
        stop = self._stopping(gives_way)
        if self.pace is not None:
            self.pace.begin_run()  # ended in `_finish`'s caller below, however the run ends
        # A run shown as it comes keeps Transformers' tensors: its first step should not wait for a buffer's pages,
        # and the spare buffer stays free for a run nobody watches started meanwhile (an MCP generate).
        if self.held and torch.device(self.prepared.target.device).type == "cpu":
            # Its pages written here, before generate() starts.
            self._ring = logit_ring._take_ring(logit_ring._ring_floats())
        worker = self._worker = _Worker(self.prepared, self.source, stop, self._queue, self.cancel, self._watch,
                                        self._steps.digest, self._ring, batched=self.held)
        worker.start()
        try:
            for item in self._items():
                if item is _IDLE:
                    yield None  # only with `idle_s` set: the consumer's chance to yield
                    continue
                if item is _RESTART:  # the run starts again (it gave way): its steps so far are void
                    self._steps.restart()
                    continue
                if isinstance(item, (_Setup, _Other)):
                    self._steps.closed(item)
                    continue
                step = self._steps.take(item, time.perf_counter() - worker.started - worker.waited)
                if self.held or item.digested:
                    self._steps.fill_figures(item, step)
                else:
                    self._figures_later(item, step)
                yield step
            self._figures_now_for(None)  # generation has ended: the figures of every step still deferred
        finally:
            if worker.running:  # the consumer left early (closed tab, exception): end the run
                self.cancel.set()
                worker.join()
            with self._later_lock:  # left early: what is still deferred is dropped, before the buffer is reused
                for raw, _ in self._later.values():
                    raw.release()
                self._later.clear()
                self._later_bytes = 0
            if self._ring is not None:  # every step is built (or dropped): nothing reads the buffer any more
                logit_ring._give_back_ring(self._ring)
                self._ring = None
            if self.pace is not None:
                self.pace.end_run()
        self._finish()

    def _items(self) -> Iterator[Any]:
        """The worker's records as they come, until generation ends. When nobody sees the steps as they come
        (`run`: Tune, Compare, the CLI, benchmarks), the steps are built once generation has ended: on a machine whose
        cores generation keeps busy, that work (softmax and top-k, texts, prompt lookup's source, the summary) and the
        interpreter lock it holds would slow the generation being timed. The worker hands such a run's records over in
        batches (`_Recorder.flush`); only the logits past three quarters of KEPT_LOGITS_BYTES are digested while
        generation runs (oldest first, when a batch comes), so memory does not grow with the run and the buffer has
        room for the next batch. The steps come out the same, in the same order."""
        held: list[Any] = []
        undigested: collections.deque[_Raw] = collections.deque()  # oldest first
        held_bytes = 0
        while True:
            if self.idle_s is None or self.held:
                received = self._queue.get()
            else:
                try:
                    received = self._queue.get(timeout=self.idle_s)
                except queue.Empty:
                    yield _IDLE
                    continue
            if received is _DONE:
                break
            if not self.held:
                yield from _unpacked(received)
                continue
            if received is _RESTART:  # the attempt held so far gave way: its steps would only be built to be dropped
                for raw in undigested:
                    raw.release()
                held.clear()
                undigested.clear()
                held_bytes = 0
            for item in _handed_over(received):
                held.append(item)
                if isinstance(item, _Raw) and not item.digested:
                    undigested.append(item)
                    held_bytes += item.logits_bytes()
            # Room in the buffer for the next batch, which the worker copies into while this digests the oldest.
            while held_bytes > logit_ring._digest_above():
                oldest = undigested.popleft()
                held_bytes -= oldest.logits_bytes()
                self._steps.digest(oldest)
        for item in held:
            yield from _unpacked(item)

    def _figures_later(self, raw: _Raw, step: Step) -> None:
        """A step shown as it comes gets its figures (`StepBoundary.fill_figures`) when generation has ended, or when the microscope
        opens it (`figures_now`): the softmax and top-k over each of its vocabulary-wide rows would otherwise take the
        cores and the interpreter lock from the generation being timed. Past three quarters of KEPT_LOGITS_BYTES of
        deferred logits the oldest are filled in while generation runs (memory does not grow with the run, and the
        buffer has room for the next step), as a held run does (`_items`)."""
        with self._later_lock:
            self._later[step.index] = (raw, step)
            self._later_bytes += raw.logits_bytes()
            while self._later_bytes > logit_ring._digest_above():
                _, (oldest, its_step) = self._later.popitem(last=False)
                self._later_bytes -= oldest.logits_bytes()
                self._steps.fill_figures(oldest, its_step)

    def figures_now(self, step_index: int) -> None:
        """Fill in the figures of the step `step_index` now if they are still deferred (`_figures_later`): the
        microscope opened one of its tokens while the run goes on. Safe from any thread."""
        self._figures_now_for([step_index])

    def _figures_now_for(self, indices: list[int] | None) -> None:
        """Fill in the deferred figures of the steps `indices` (None: every step still deferred, read under the lock
        that `figures_now` from another thread takes too)."""
        with self._later_lock:
            for index in list(self._later) if indices is None else indices:
                entry = self._later.pop(index, None)
                if entry is not None:
                    self._later_bytes -= entry[0].logits_bytes()
                    self._steps.fill_figures(*entry)

    def _finish(self) -> None:
        trace = self.trace
        tok = self.prepared.target.tokenizer
        trace.output_text = tok.decode(trace.output_ids, skip_special_tokens=True)
        worker = self._worker
        assert worker is not None
        trace.summarize(worker.elapsed)
        if worker.turns is not None:
            trace.waited_ms = round(worker.turns.waited_s * 1000, 3)
            trace.paused_ms = round(worker.turns.paused_s * 1000, 3)
        if self._watch.tripped():  # also when sampling then failed on the NaN scores: this is why
            trace.finish_reason = "error"
            reason = non_finite_message(self.prepared.target.model.dtype, len(trace.output_ids))
            raise RunError.keyed(reason.key, **reason.fields)
        if worker.error is not None:
            trace.finish_reason = "error"
            raise worker.error
        if worker.stop.timed_out:
            trace.finish_reason = "timeout"
        elif worker.stop.idle:  # a step-by-step pause with no press for PLAYGROUND_PAUSE_IDLE_S
            trace.finish_reason = "idle"
        elif self.cancel.is_set():
            trace.finish_reason = "stopped"
        elif trace.output_ids and trace.output_ids[-1] in self.prepared.eos_ids:
            trace.finish_reason = "eos"
        else:
            trace.finish_reason = "length"

    def run(self, visitors_own: bool = False) -> Trace:
        """Run to the end; nobody sees the steps as they come (`held`). Inside a long job (`stopped_by`: Compare, Tune,
        the plain check, an MCP compare or bench) the run gives way to a visitor's own run at its next step and is
        redone whole after it (the trace is the undisturbed attempt's). `visitors_own`: the run is a visitor's own
        even so (an MCP generate, whose call's stop event only ends it): it takes turns per step and never gives way."""
        self.held = True
        for _ in self._steps_of(gives_way=self._job is not None and not visitors_own):
            pass
        return self.trace


def run(req: RunRequest, store: ModelStore = STORE, progress: Callable[[str], None] | None = None,
        visitors_own: bool = False) -> Trace:
    """Prepare and run to the end (`LiveRun.run`: the same run, giving way inside a long job unless `visitors_own`)."""
    return LiveRun(prepare(req, store, progress)).run(visitors_own)
