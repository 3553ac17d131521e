"""The instrumentation: `_Recorder` timestamps the loop's phases and pushes raw step records, through the patches it
puts on the model for one run (the candidate generator Transformers builds; for plain decoding a forward pre-hook, the
streamer and the tapped processor list)."""

from __future__ import annotations

import contextlib
import queue
import time
from typing import Any, Callable, Iterator

import torch
from transformers import LogitsProcessorList
from transformers.generation.streamers import BaseStreamer

from ..compat.transformers_internals import CANDIDATE_GENERATOR_FACTORY, LOGITS_PROCESSOR_FACTORY
from . import logit_ring
from .logit_ring import _LogitRing
from .records import _Other, _Raw, _Setup
from .stopping import _ScoreWatch


# A run shown as it comes hands the consumer one raw record a step (`push`), holding its logits (a few MB a step
# for a 262k vocabulary). Past this many queued records (as many steps) the worker turns the logits into the step's
# figures itself (`_digest`), in the step's `other` phase, so a consumer that falls far behind cannot make memory
# grow with the run. A held run (`batched`) copies its logits into the ring instead (`logit_ring`).
MAX_PENDING_LOGITS = 64


def _device_sync(model: Any) -> Callable[[], None] | None:
    """A function that waits for the model's device to finish queued work (None on CPU: nothing to wait for)."""
    device = getattr(model, "device", torch.device("cpu"))
    if isinstance(device, torch.device) and device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return None


class _Recorder:
    """Timestamps the loop's phases and pushes raw step records on a queue (no display work here, unless the
    consumer is more than MAX_PENDING_LOGITS queued items behind).

    Every stamp ends one phase and begins the next, so the phases tile the `generate()` call:
    setup → [draft → verify → other] per step. A step begins when drafting begins (`get_candidates`)
    or, with no drafter (baseline), when the target's forward begins; its tokens are decided when
    `update_candidate_strategy` is called (baseline: when the streamer receives the token).
    """

    def __init__(self, out: "queue.SimpleQueue[Any]", sync: Callable[[], None] | None, watch: _ScoreWatch,
                 digest: Callable[[_Raw], None] = lambda raw: None, ring: _LogitRing | None = None,
                 batched: bool = False):
        self.out = out
        # A run nobody watches (`batched`) puts its records on `out` in lists (`flush`), so the
        # consumer wakes a few times a run (HELD_BATCHES); otherwise each step as it is decided (the page shows it).
        self._batch: list[Any] | None = [] if batched else None
        self._batch_bytes = 0
        self._batch_limit = logit_ring._held_batch_bytes()
        self._closed: _Other | _Setup | None = None  # the phase closed at the current step's start (`_close_phase`)
        self.ring = ring  # where a run nobody watches copies its logits (`_LogitRing`); None: keeps the tensors
        self.sync = sync
        self.watch = watch  # told when the drafter runs (its scores are not the target's)
        self.digest = digest  # a step's logits to figures (only used here when the consumer fell far behind)
        self._scores: torch.Tensor | None = None  # plain decoding: the scores the last token was picked from
        self.started = 0.0  # set by the caller right before generate()
        self._step_start: float | None = None
        self._decided: float | None = None  # when the last step's tokens were decided
        self._draft_end = 0.0
        self._draft_ms = 0.0
        self._draft: torch.Tensor | None = None
        self._q: torch.Tensor | None = None
        self._draws: torch.Tensor | None = None  # this step's r, handed over by `draw_tap` (sampling with q only)
        self._cur_len = 0
        self.pushed = 0  # step records put on the queue (the worker may be ahead of the consumer)
        self.waited = 0.0  # seconds the run waited between its steps for other runs' steps (`_Turns`)
        self._pending_wait = 0.0  # of which not yet taken out of a phase
        self._streamer: Any = None  # plain decoding's streamer (`streamer`)
        self._handed_early = False  # its current step was handed over before a pause (`hand_over_now`)

    def note_wait(self, seconds: float) -> None:
        """The run waited `seconds` for other runs' steps: the phase it fell in (the step's `other`; baseline: its
        `verify`, where Transformers' plain loop runs the stopping criteria) does not count it."""
        self.waited += seconds
        self._pending_wait += seconds

    def _take_wait(self) -> float:
        waited, self._pending_wait = self._pending_wait, 0.0
        return waited

    def _stamp(self) -> float:
        if self.sync is not None:
            self.sync()
        return time.perf_counter()

    def push(self, raw: _Raw) -> None:
        """Hand a step's record to the consumer (its logits copied into `ring` where there is one and room); past
        MAX_PENDING_LOGITS waiting items, digested here first. Called after the step's tokens were decided: a copy
        falls in the step's `other` phase."""
        if raw.p_logits is not None and self._batch is None and self.out.qsize() > MAX_PENDING_LOGITS:
            self.digest(raw)
        elif self.ring is not None:
            raw.q_logits = self.ring.hold(raw.q_logits, raw.spans)
            raw.p_logits = self.ring.hold(raw.p_logits, raw.spans)
        raw.before, self._closed = self._closed, None  # one hand-off per step, not two
        self.pushed += 1
        if self._batch is None:
            self.out.put(raw)
            return
        self._batch.append(raw)
        self._batch_bytes += raw.logits_bytes()
        if self._batch_bytes >= self._batch_limit:
            self.flush()

    def flush(self) -> None:
        """Hand over what is not handed over yet (the attempt ended, or a batch is full)."""
        if self._closed is not None:
            self._send(self._closed)
            self._closed = None
        if self._batch:
            self.out.put(self._batch)
            self._batch = []
            self._batch_bytes = 0

    def _send(self, item: Any) -> None:
        if self._batch is None:
            self.out.put(item)
        else:
            self._batch.append(item)

    def _close_phase(self, now: float) -> bool:
        """Record the time since the last mark: the setup (no step yet) or the last step's `other` phase, handed
        over with the next step's record (`push`) or when the attempt ends (`flush`). False when the current step's
        tokens are not decided yet (there is nothing to close)."""
        if self._step_start is None:
            closed: _Other | _Setup = _Setup((now - self.started) * 1000)
        elif self._decided is not None:
            closed = _Other((now - self._decided - self._take_wait()) * 1000)
        else:
            return False
        if self._closed is not None:  # a step decided without a record (not in Transformers' loops): in order anyway
            self._send(self._closed)
        self._closed = closed
        return True

    def begin_step(self) -> float:
        """A new step begins: close the previous step's `other` phase (or the setup)."""
        now = self._stamp()
        if not self._close_phase(now):  # another forward before this step's tokens were decided: same step
            assert self._step_start is not None  # `_close_phase` is False only inside a step
            return self._step_start
        self._decided = None
        self._step_start = now
        return now

    def end_step(self, drafted: torch.Tensor | None, emitted: torch.Tensor, total_len: int,
                 verify_began: float | None, q_logits: torch.Tensor | None, p_logits: torch.Tensor | None) -> None:
        """The step's tokens are decided: its verify phase ends (begun at `verify_began`: the draft's end, or the
        step's start when nothing drafts) and its record goes to the consumer. Every path ends a step here: assisted
        decoding's `update_candidate_strategy`, plain decoding's streamer, and the hand-over before a pause. A wait
        for other runs' steps inside the phase (plain decoding runs the stopping criteria before its streamer) does
        not count; assisted decoding's fall in `other` and are taken when the next step begins."""
        self._decided = self._stamp()
        began = self._decided if verify_began is None else verify_began
        verify_ms = (self._decided - began - self._take_wait()) * 1000
        draft_ms = self._draft_ms if drafted is not None else 0.0
        self.push(_Raw(drafted, emitted, total_len, draft_ms, verify_ms, q_logits, p_logits,
                       self._draws if drafted is not None else None))
        self._draft = self._q = self._draws = None

    def take_draws(self, draws: torch.Tensor) -> None:
        """The random draws r `_speculative_sampling` compared with p/q in this step (`draw_tap.observing`)."""
        self._draws = draws

    def finish(self) -> float:
        """`generate()` returned: close the last step's `other` phase (or the setup, if no step ran)."""
        now = self._stamp()
        self._close_phase(now)  # handed over by the worker's `flush` after the attempt (`worker._Worker.work`)
        return now

    # assisted decoding: patch the generator instance Transformers builds
    def instrument(self, generator: Any) -> Any:
        get_candidates = generator.get_candidates
        update = generator.update_candidate_strategy

        def timed_get_candidates(input_ids: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            start = self.begin_step()
            self.watch.drafting = True
            try:
                candidate_ids, candidate_logits = get_candidates(input_ids, *args, **kwargs)
            finally:
                self.watch.drafting = False
            self._draft_end = self._stamp()
            self._draft_ms = (self._draft_end - start) * 1000
            self._cur_len = input_ids.shape[1]
            self._draft = candidate_ids[0, self._cur_len:].clone()
            self._q = candidate_logits[0] if candidate_logits is not None else None
            return candidate_ids, candidate_logits

        def observed_update(input_ids: torch.Tensor, scores: torch.Tensor, num_matches: int) -> Any:
            self.end_step(self._draft, input_ids[0, self._cur_len:].clone(), input_ids.shape[1], self._draft_end,
                          self._q, scores[0])
            return update(input_ids, scores, num_matches)

        generator.get_candidates = timed_get_candidates
        generator.update_candidate_strategy = observed_update
        return generator

    # plain decoding: the target's forward begins a step, the streamer sees its token (after the prompt)
    def forward_pre_hook(self, module: Any, args: Any) -> None:
        self.begin_step()

    def streamer(self, prompt_len: int) -> BaseStreamer:
        recorder = self

        class _StepStreamer(BaseStreamer):
            def __init__(self) -> None:
                self.seen_prompt = False
                self.total = prompt_len

            def put(self, value: torch.Tensor) -> None:
                if not self.seen_prompt:
                    self.seen_prompt = True
                    return
                if recorder._handed_early:  # handed over before the run paused (`hand_over_now`)
                    recorder._handed_early = False
                    return
                self.decide(value)

            def decide(self, value: torch.Tensor) -> None:
                tokens = value.reshape(-1).clone()
                self.total += tokens.shape[0]
                scores, recorder._scores = recorder._scores, None
                recorder.end_step(None, tokens, self.total, recorder._step_start, None, scores)

            def end(self) -> None:
                pass

        self._streamer = _StepStreamer()
        return self._streamer

    def hand_over_now(self, input_ids: torch.Tensor) -> None:
        """The run pauses after this step (`_Stop._pause`): its record must reach the consumer first. Assisted decoding
        handed it over already (`update_candidate_strategy` runs before the stopping criteria); Transformers' plain
        loop gives the streamer its token only after them, so the step's token is handed over here, and that put
        skipped."""
        if self._streamer is not None and not self._handed_early:
            self._streamer.decide(input_ids[0, -1:].cpu())
            self._handed_early = True


@contextlib.contextmanager
def _instrumented(model: Any, recorder: _Recorder) -> Iterator[None]:
    """Wrap this model instance's candidate-generator factory for one run (restored after)."""
    factory = getattr(type(model), CANDIDATE_GENERATOR_FACTORY)

    def build(*args: Any, **kwargs: Any) -> Any:
        return recorder.instrument(factory(model, *args, **kwargs))

    setattr(model, CANDIDATE_GENERATOR_FACTORY, build)
    try:
        yield
    finally:
        delattr(model, CANDIDATE_GENERATOR_FACTORY)


class _TappedProcessors(LogitsProcessorList):
    """Plain decoding's processor list as Transformers built it (every processor and sampling warper, unchanged), which
    also hands the recorder the scores the token is picked from (a reference: nothing is copied or computed). The list
    itself, not one more processor in it: Transformers reads each processor's signature every step
    (`inspect.signature`), 134 Python calls a step for one more processor, counted by `tests/measure/overhead.py --profile`;
    this costs one call."""

    def __init__(self, processors: LogitsProcessorList, recorder: _Recorder):
        super().__init__(processors)
        self.recorder = recorder

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        scores = super().__call__(input_ids, scores, **kwargs)
        self.recorder._scores = scores
        return scores


@contextlib.contextmanager
def _step_starts_at_forward(model: Any, recorder: _Recorder) -> Iterator[None]:
    """Plain decoding: each target forward begins a step, and the processor list (the sampling warpers Transformers
    appends behind the caller's processors included) hands the recorder its scores (hook and wrapper removed after)."""
    handle = model.register_forward_pre_hook(recorder.forward_pre_hook)
    factory = getattr(type(model), LOGITS_PROCESSOR_FACTORY)

    def processors(*args: Any, **kwargs: Any) -> LogitsProcessorList:
        return _TappedProcessors(factory(model, *args, **kwargs), recorder)

    setattr(model, LOGITS_PROCESSOR_FACTORY, processors)
    try:
        yield
    finally:
        handle.remove()
        delattr(model, LOGITS_PROCESSOR_FACTORY)
