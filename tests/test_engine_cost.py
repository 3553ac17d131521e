"""The engine's per-step bookkeeping, made cheaper (docs/tune.md, "The engine's own cost"), gives what the full
recomputation gives, on real runs: the running summary after every step, the texts read from the context's cache,
and `LiveRun.run()`'s steps built after generation against the same run iterated step by step."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from playground.engine import LiveRun, RunRequest, lookup_text, prepare, token_texts
from playground.trace import Trace, summarize_steps

PROMPT = "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three,"
# Each method's run: a noisy assistant refuses drafts (corrections, discarded drafts), prompt lookup copies from
# the prompt (its source's text), baseline decodes through the processor list that hands over its scores.
CASES = {
    "speculative": dict(method="speculative", assistant="noisy", params={"num_assistant_tokens": 4}),
    "prompt_lookup": dict(method="prompt_lookup", params={"prompt_lookup_num_tokens": 3}),
    "baseline": dict(method="baseline"),
}


def _prepared(store, tiny_models, case: str, **kw):
    spec = dict(CASES[case])
    if "assistant" in spec:
        spec["assistant"] = tiny_models[spec["assistant"]]
    return prepare(RunRequest(prompt=PROMPT, target=tiny_models["target"], dtype="float32", max_new_tokens=40,
                              **spec, **kw), store)


def _iterated(prepared) -> tuple[Trace, list[tuple[dict, dict]]]:
    """A run taken step by step (the page's way), with the live summary and its recomputation after every step."""
    live = LiveRun(prepared)
    seen = []
    for _ in live:
        trace = live.trace
        recomputed = summarize_steps(trace.steps, trace.summary.elapsed_s, trace.setup_ms)
        seen.append((dataclasses.asdict(trace.summary), dataclasses.asdict(recomputed)))
    return live.trace, seen


def _untimed(trace: Trace) -> dict:
    """The trace without what differs between two runs of the same request: its times."""
    data = trace.to_dict()
    data.pop("summary")
    data.pop("setup_ms")
    data.pop("waited_ms")  # the time it waited for its first turn (microseconds alone) is a time too
    data.pop("env")
    for step in data["steps"]:
        for name in ("draft_ms", "verify_ms", "other_ms"):
            step.pop(name)
    return data


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_live_summary_equals_the_full_recomputation_after_every_step(store, tiny_models, case):
    trace, seen = _iterated(_prepared(store, tiny_models, case))
    assert len(seen) == len(trace.steps) > 3
    for i, (live, recomputed) in enumerate(seen):
        assert live == recomputed, f"step {i}"
    if case == "speculative":  # the run exercised every sum: refusals, discarded drafts, other_ms set after a step
        assert trace.summary.rejected and trace.summary.discarded and trace.summary.other_ms > 0


@pytest.mark.parametrize("case", sorted(CASES))
def test_texts_equal_decoding_each_token_again(store, tiny_models, case):
    prepared = _prepared(store, tiny_models, case)
    trace, _ = _iterated(prepared)
    tok = prepared.target.tokenizer
    context = prepared.input_ids[0].tolist()
    anchor = context[-4:]
    sources = 0
    for step in trace.steps:
        assert step.emitted_text == token_texts(tok, context, step.emitted)
        assert step.drafted_text == token_texts(tok, context, step.drafted)
        if step.lookup_source is not None:
            sources += 1
            start, end = step.lookup_source
            assert step.lookup_text == lookup_text(tok, context, start, end, end + len(step.drafted))
        for position in step.dists or ():
            for ranked in (position.p, position.q, position.v, position.residual):
                for entry in ranked or ():
                    assert entry.text == token_texts(tok, anchor, [entry.id])[0]
        context = context + step.emitted
    assert trace.steps[0].dists, "the run recorded no top-k lists to check"
    if case == "prompt_lookup":
        assert sources > 0
    if case == "speculative":
        assert any(s.rejected for s in trace.steps)


@pytest.mark.parametrize("case", sorted(CASES))
def test_run_builds_the_same_steps_as_iterating(store, tiny_models, case):
    """`LiveRun.run()` holds the steps' display work until generation has ended: the same trace, and its times
    still tile the generation (setup + each step's draft + verify + other = elapsed)."""
    prepared = _prepared(store, tiny_models, case)
    iterated, _ = _iterated(prepared)
    held = LiveRun(prepared).run()
    assert _untimed(held) == _untimed(iterated)
    assert held.summary == summarize_steps(held.steps, held.summary.elapsed_s, held.setup_ms)
    assert all(step.other_ms > 0 for step in held.steps)
    tiled = held.setup_ms + sum(s.draft_ms + s.verify_ms + s.other_ms for s in held.steps)
    assert tiled == pytest.approx(held.summary.elapsed_s * 1000, abs=0.01 * len(held.steps) + 0.01)


@pytest.mark.parametrize("budget", [0, 40_000])
def test_run_digests_the_oldest_logits_past_its_budget(store, tiny_models, monkeypatch, budget):
    """Past HELD_LOGITS_BYTES (here none, or a few of the tiny model's steps) the oldest held logits are digested
    while generation runs: the same trace, and never more held than the budget and one step."""
    from playground import engine

    prepared = _prepared(store, tiny_models, "speculative")
    iterated, _ = _iterated(prepared)
    monkeypatch.setattr(engine, "HELD_LOGITS_BYTES", budget)
    digested_while_running: list[int] = []
    real_digest = engine.LiveRun._digest

    def digest(self, raw):
        if sys._getframe(1).f_code.co_name == "_items":  # while generation runs (not when the steps are built)
            digested_while_running.append(raw.logits_bytes())
        real_digest(self, raw)

    monkeypatch.setattr(engine.LiveRun, "_digest", digest)
    held = LiveRun(prepared).run()
    assert _untimed(held) == _untimed(iterated)
    assert digested_while_running, "no record was digested while generation ran"
    step_bytes = max(digested_while_running)
    if budget == 0:
        assert len(digested_while_running) == len(held.steps)
    else:
        assert budget // step_bytes >= 1 and 0 < len(digested_while_running) < len(held.steps)


class _CountingQueue:
    """A LiveRun's hand-off queue that counts the hand-offs: each one wakes the consumer's thread, which then takes
    the interpreter lock from the generating one."""

    def __init__(self, inner):
        self.inner, self.puts = inner, 0

    def put(self, item) -> None:
        self.puts += 1
        self.inner.put(item)

    def get(self):
        return self.inner.get()

    def qsize(self) -> int:
        return self.inner.qsize()


def _counted(prepared) -> tuple[LiveRun, _CountingQueue]:
    run = LiveRun(prepared)
    run._queue = counting = _CountingQueue(run._queue)
    return run, counting


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_held_run_wakes_its_consumer_once_per_batch_and_a_live_one_once_per_step(store, tiny_models, case):
    """A run nobody watches hands its records over when the attempt ends (one batch, then the end: two hand-offs for
    a short run); a run whose steps are shown as they come hands each step over with the phase closed before it (one
    hand-off per step, then the last step's `other` phase and the end). The same trace either way."""
    prepared = _prepared(store, tiny_models, case)
    held, held_queue = _counted(prepared)
    held.run()
    live, live_queue = _counted(prepared)
    for _ in live:
        pass
    assert len(held.trace.steps) > 3 and _untimed(held.trace) == _untimed(live.trace)
    assert held_queue.puts == 2
    assert live_queue.puts == len(live.trace.steps) + 2


def test_a_held_run_past_a_batch_of_logits_hands_over_in_batches(store, tiny_models, monkeypatch):
    """Past an eighth of HELD_LOGITS_BYTES of logits a held run hands its records over (the consumer digests the
    oldest to leave the buffer room): more than one batch, fewer hand-offs than steps, and the same trace, its phases
    in their steps."""
    from playground import engine

    prepared = _prepared(store, tiny_models, "speculative")
    iterated, _ = _iterated(prepared)
    step_bytes = max(r.numel() * 4 for r in _step_logits(prepared))
    monkeypatch.setattr(engine, "HELD_LOGITS_BYTES", 3 * engine.HELD_BATCHES * step_bytes)  # ~3 steps a batch
    held, counting = _counted(prepared)
    trace = held.run()
    assert _untimed(trace) == _untimed(iterated)
    assert 3 < counting.puts < len(trace.steps)
    assert all(step.other_ms > 0 for step in trace.steps)
    tiled = trace.setup_ms + sum(s.draft_ms + s.verify_ms + s.other_ms for s in trace.steps)
    assert tiled == pytest.approx(trace.summary.elapsed_s * 1000, abs=0.01 * len(trace.steps) + 0.01)


def _step_logits(prepared) -> list:
    """The target's logits of each step of a run (what a held run keeps), from a run whose records are kept raw."""
    from playground import engine

    kept = []
    run = LiveRun(prepared)
    real_push = engine._Recorder.push

    def push(self, raw):
        if raw.p_logits is not None:
            kept.append(raw.p_logits)
        real_push(self, raw)

    engine._Recorder.push = push
    try:
        for _ in run:
            pass
    finally:
        engine._Recorder.push = real_push
    return kept


def _filled(n: int, value: float):
    import torch

    return torch.full((n,), value, dtype=torch.float32)


def test_held_logits_copies_in_a_ring_and_never_overwrites_a_copy_still_held():
    """`_HeldLogits`: copies while there is room, the tensor itself when there is none; a stretch is taken again only
    once it and every stretch before it were let go (in any order); the ring wraps to the start; no live copy is
    ever overwritten."""
    import torch

    from playground.engine import _HeldLogits

    ring = _HeldLogits(10)
    live: dict[float, tuple] = {}

    def hold(n: int, value: float):
        spans: list = []
        original = _filled(n, value)
        got = ring.hold(original, spans)
        if got is original:
            return None
        assert len(spans) == 1 and got.data_ptr() != original.data_ptr() and torch.equal(got, original)
        live[value] = (got, spans[0])
        return spans[0]

    def release(value: float):
        got, span = live.pop(value)
        ring.release(span)

    def intact():
        for value, (got, _) in live.items():
            assert torch.equal(got, _filled(got.numel(), value)), f"the copy of {value} was overwritten"

    assert [hold(3, v).start for v in (1.0, 2.0, 3.0)] == [0, 3, 6]
    assert hold(2, 4.0) is None  # 1 float left at the end, none free at the start
    release(2.0)  # let go out of order: the stretch before it is still held, so no room yet
    assert hold(2, 4.0) is None
    release(1.0)  # [0, 6) is free now; the head is at 9
    assert hold(2, 5.0).start == 0  # wraps to the start
    assert hold(4, 6.0).start == 2  # up to the stretch at 6, exactly
    assert hold(1, 7.0) is None  # full
    intact()
    release(3.0)  # [0, 6) held, [6, 10) free
    assert hold(4, 8.0).start == 6 and hold(1, 9.0) is None
    intact()
    for value in (5.0, 6.0, 8.0):
        release(value)
    assert hold(10, 10.0).start == 0  # all let go: the whole buffer again
    intact()
    bf16 = torch.ones(2, dtype=torch.bfloat16)
    assert ring.hold(bf16, []) is bf16 and ring.hold(None, []) is None  # only float32 scores are copied


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_held_run_keeps_copies_of_its_logits_not_transformers_tensors(store, tiny_models, monkeypatch, case):
    """`LiveRun.run()` copies each step's scores (and the drafter's) into its `_HeldLogits` buffer, written before
    generate() starts, and keeps no score tensor of Transformers' (whose memory a fresh process would fault in during
    the timed run); a run whose steps are taken as they come copies nothing. The buffer is kept for the next run."""
    from playground import engine

    pushed: list[tuple[bool, bool]] = []  # per step: (its logits are copies in the buffer, it has logits at all)
    real_push = engine._Recorder.push

    def push(self, raw):
        real_push(self, raw)
        tensors = [t for t in (raw.q_logits, raw.p_logits) if t is not None]
        copies = self.held is not None and all(
            t.untyped_storage().data_ptr() == self.held.buffer.untyped_storage().data_ptr() for t in tensors)
        pushed.append((copies and len(raw.spans) == len(tensors), bool(tensors)))

    monkeypatch.setattr(engine._Recorder, "push", push)
    prepared = _prepared(store, tiny_models, case)
    held = LiveRun(prepared).run()
    assert len(pushed) == len(held.steps) and all(has for _, has in pushed)
    assert all(copied for copied, _ in pushed), "a held step kept Transformers' tensor while the buffer had room"
    assert engine._SPARE_HELD and engine._SPARE_HELD[0].buffer.numel() == engine.HELD_LOGITS_BYTES // 4
    pushed.clear()
    _iterated(prepared)
    assert pushed and not any(copied for copied, _ in pushed)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts the process's threads in /proc")
def test_taking_the_held_logits_buffer_starts_no_openmp_team():
    """The buffer's pages are written by numpy, not by a torch fill: a fill this large starts an OpenMP team in the
    consumer's thread, and with more OpenMP threads than cores generation's own team sleeps and wakes around every op
    (`_HeldLogits`). Counted in a fresh thread, which has no team yet: no thread appears while it takes the buffer."""
    import os
    import threading

    import torch

    from playground import engine

    if torch.get_num_threads() < 2:
        pytest.skip("torch runs one thread here: no team could start")
    counts: list[int] = []

    def take() -> None:
        counts.append(len(os.listdir("/proc/self/task")))
        held = engine._HeldLogits(engine.HELD_LOGITS_BYTES // 4)
        counts.append(len(os.listdir("/proc/self/task")))
        assert held.buffer.numel() == engine.HELD_LOGITS_BYTES // 4 and not held.buffer.any()

    worker = threading.Thread(target=take)
    worker.start()
    worker.join()
    assert len(counts) == 2 and counts[1] == counts[0], f"threads before and after: {counts}"


def test_a_run_that_gives_way_frees_the_void_attempts_copies(tiny_models, monkeypatch):
    """A long job's held run that gives way to a visitor's run starts again; the records of its void attempt are
    dropped unread, and their stretches of the buffer are freed with them: the attempt that counts copies its logits
    (with a buffer of a few steps, not one stays taken by the void attempt)."""
    import threading

    from playground import engine
    from playground.engine import stopped_by
    from playground.request import new_request

    monkeypatch.setattr(engine, "HELD_LOGITS_BYTES", 200_000)  # a buffer of a few steps (the ring wraps)
    long_run = prepare(new_request(PROMPT, target=tiny_models["target"], method="prompt_lookup", max_new_tokens=448,
                                   dtype="float32"))
    short_run = prepare(new_request(PROMPT, target=tiny_models["target"], max_new_tokens=8, dtype="float32"))
    copied: dict[int, list[bool]] = {}  # per attempt (its recorder): whether each step's scores were copied
    pushing: list[int] = []
    real_push, real_hold = engine._Recorder.push, engine._HeldLogits.hold

    def push(self, raw):
        pushing.append(id(self))
        real_push(self, raw)

    def hold(self, logits, spans):
        kept = real_hold(self, logits, spans)
        if logits is not None:
            copied.setdefault(pushing[-1], []).append(kept is not logits)
        return kept

    monkeypatch.setattr(engine._Recorder, "push", push)
    monkeypatch.setattr(engine._HeldLogits, "hold", hold)
    box: dict = {}
    began = threading.Event()

    def long_job() -> None:
        with stopped_by(threading.Event()):
            box["live"] = live = LiveRun(long_run)
            began.set()
            box["trace"] = live.run()

    worker = threading.Thread(target=long_job)
    worker.start()
    assert began.wait(60)
    while not box["live"].generated_steps:
        assert worker.is_alive()
        threading.Event().wait(0.001)
    for _ in LiveRun(short_run):
        pass
    worker.join(120)
    assert box["live"].gave_way >= 1
    last = list(copied.values())[-1]  # the attempt that counts (the visitor's run copies nothing: not held)
    assert len(box["trace"].steps) >= len(last) > 20
    assert sum(last) > len(last) * 3 // 4, f"{sum(last)} of {len(last)} steps copied"
