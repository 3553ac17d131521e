"""The engine's per-step bookkeeping, made cheaper (docs/tune.md, "The engine's own cost"), gives what the full
recomputation gives, on real runs: the running summary after every step, the texts read from the context's cache,
and `LiveRun.run()`'s steps built after generation against the same run iterated step by step."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import pytest

from playground.engine import LiveRun, RunRequest, distributions, logit_ring, lookup_text, prepare, token_texts
from playground.engine import recorder as recording
from playground.trace import Trace, summarize_steps

pytestmark = pytest.mark.models  # its tests build or load models: the module stays out of the model-free tier

PROMPT = "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three,"
# Each method's run: a noisy assistant refuses drafts (corrections, discarded drafts), prompt lookup copies from
# the prompt (its source's text), baseline decodes through the processor list that hands over its scores.
CASES: dict[str, dict[str, Any]] = {
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
    """Past KEPT_LOGITS_BYTES (here none, or a few of the tiny model's steps) the oldest held logits are digested
    while generation runs: the same trace, and never more held than the budget and one step."""
    from playground import engine

    prepared = _prepared(store, tiny_models, "speculative")
    iterated, _ = _iterated(prepared)
    monkeypatch.setattr(logit_ring, "KEPT_LOGITS_BYTES", budget)
    digested_while_running: list[int] = []
    real_digest = engine.StepBoundary.digest

    def digest(self, raw):
        if sys._getframe(1).f_code.co_name == "_items":  # while generation runs (not when the steps are built)
            digested_while_running.append(raw.logits_bytes())
        real_digest(self, raw)

    monkeypatch.setattr(engine.StepBoundary, "digest", digest)
    held = LiveRun(prepared).run()
    assert _untimed(held) == _untimed(iterated)
    assert digested_while_running, "no record was digested while generation ran"
    step_bytes = max(digested_while_running)
    if budget == 0:
        assert len(digested_while_running) == len(held.steps)
    else:
        assert budget // step_bytes >= 1 and 0 < len(digested_while_running) < len(held.steps)


def _live_with_digests_counted(prepared, monkeypatch) -> tuple[LiveRun, list[int], list[bool]]:
    """A run taken step by step, counting each digest by the number of steps the consumer had received then, and per
    step whether it came with any of its figures already."""
    from playground import engine

    live = LiveRun(prepared)
    digests: list[int] = []
    real_digest = engine.StepBoundary.digest

    def digest(self, raw):
        if self is live._steps:
            digests.append(len(live.trace.steps))
        real_digest(self, raw)

    monkeypatch.setattr(engine.StepBoundary, "digest", digest)
    came_with_figures = [step.dists is not None or step.p is not None or step.q is not None  # type: ignore[union-attr]
                         for step in live]  # no idle_s: never None
    return live, digests, came_with_figures


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_live_run_digests_its_logits_when_generation_has_ended(store, tiny_models, monkeypatch, case):
    """A run whose steps are taken as they come hands each step over at once, without its figures (q, p, the
    microscope's lists: a softmax and top-k per vocabulary row), and digests every step's logits once generation has
    ended (well within the budget here): no digest before the last step came, one per step, and the trace of a held
    run, every field but the times."""
    prepared = _prepared(store, tiny_models, case)
    held = LiveRun(prepared).run()
    live, digests, came_with_figures = _live_with_digests_counted(prepared, monkeypatch)
    steps = len(live.trace.steps)
    assert steps > 3 and _untimed(live.trace) == _untimed(held)
    assert not any(came_with_figures), "a step was digested before it was handed over"
    assert len(digests) == steps and all(seen == steps for seen in digests), digests


def test_a_live_run_digests_the_oldest_logits_past_its_budget(store, tiny_models, monkeypatch):
    """Past three quarters of KEPT_LOGITS_BYTES (here a few of the tiny model's steps) a live run digests its oldest
    deferred logits while generation runs, so memory does not grow with the run: the same trace."""

    prepared = _prepared(store, tiny_models, "speculative")
    held = LiveRun(prepared).run()
    step_bytes = max(r.numel() * 4 for r in _step_logits(prepared))
    monkeypatch.setattr(logit_ring, "KEPT_LOGITS_BYTES", 4 * step_bytes)  # digests past 3 target rows' worth (q's too)
    live, digests, _ = _live_with_digests_counted(prepared, monkeypatch)
    steps = len(live.trace.steps)
    assert _untimed(live.trace) == _untimed(held)
    early = [seen for seen in digests if seen < steps]
    assert len(digests) == steps and 0 < len(early) < steps - 2, digests
    assert all(seen >= n + 2 for n, seen in enumerate(early)), "digested with no other step deferred"


def test_the_microscope_gets_a_live_steps_figures_at_once(store, tiny_models):
    """While a live run goes on, `figures_now` (the page's microscope opening a token) fills in that step's figures
    at once, from another thread, as the held run has them; the steps before it still wait for the end."""
    import threading

    prepared = _prepared(store, tiny_models, "speculative")
    held = LiveRun(prepared).run()
    live = LiveRun(prepared)
    opened: dict[str, Any] | None = None
    for step in live:
        assert step is not None  # no idle_s: a step each time
        if step.index == 1:
            other = threading.Thread(target=live.figures_now, args=(step.index,))
            other.start()
            other.join()
            assert step.dists is not None and live.trace.steps[0].dists is None
            opened = dataclasses.asdict(step)
    assert _untimed(live.trace) == _untimed(held)
    want = dataclasses.asdict(held.steps[1])
    assert opened is not None
    for name in ("draft_ms", "verify_ms", "other_ms"):
        opened.pop(name), want.pop(name)
    assert opened == want


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
    run._queue = counting = _CountingQueue(run._queue)  # type: ignore[assignment]  # a counting stand-in
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
    """Past an eighth of KEPT_LOGITS_BYTES of logits a held run hands its records over (the consumer digests the
    oldest to leave the buffer room): more than one batch, fewer hand-offs than steps, and the same trace, its phases
    in their steps."""

    prepared = _prepared(store, tiny_models, "speculative")
    iterated, _ = _iterated(prepared)
    step_bytes = max(r.numel() * 4 for r in _step_logits(prepared))
    monkeypatch.setattr(logit_ring, "KEPT_LOGITS_BYTES", 3 * logit_ring.HELD_BATCHES * step_bytes)  # ~3 steps a batch
    held, counting = _counted(prepared)
    trace = held.run()
    assert _untimed(trace) == _untimed(iterated)
    assert 3 < counting.puts < len(trace.steps)
    assert all(step.other_ms > 0 for step in trace.steps)
    tiled = trace.setup_ms + sum(s.draft_ms + s.verify_ms + s.other_ms for s in trace.steps)
    assert tiled == pytest.approx(trace.summary.elapsed_s * 1000, abs=0.01 * len(trace.steps) + 0.01)


def _step_logits(prepared) -> list:
    """The target's logits of each step of a run (what a held run keeps), from a run whose records are kept raw."""

    kept = []
    real_push = recording._Recorder.push

    def push(self, raw):
        if raw.p_logits is not None:
            kept.append(raw.p_logits)
        real_push(self, raw)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(recording._Recorder, "push", push)
        for _ in LiveRun(prepared):
            pass
    return kept


def _filled(n: int, value: float):
    import torch

    return torch.full((n,), value, dtype=torch.float32)


def test_the_logit_ring_copies_in_order_and_never_overwrites_a_copy_still_kept():
    """`_LogitRing`: copies while there is room, the tensor itself when there is none; a stretch is taken again only
    once it and every stretch before it were let go (in any order); the ring wraps to the start; no live copy is
    ever overwritten."""
    import torch

    from playground.engine.logit_ring import _LogitRing

    ring = _LogitRing(10)
    live: dict[float, tuple] = {}

    def hold(n: int, value: float):
        spans: list = []
        original = _filled(n, value)
        got = ring.hold(original, spans)
        if got is original:
            return None
        assert len(spans) == 1 and got is not None and got.data_ptr() != original.data_ptr() and torch.equal(got, original)
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
    """`LiveRun.run()` copies each step's scores (and the drafter's) into its `_LogitRing` buffer, written before
    generate() starts, and keeps no score tensor of Transformers' (whose memory a fresh process would fault in during
    the timed run); a run whose steps are taken as they come copies nothing (its first step waits for no buffer, and
    the spare one stays free for a run nobody watches started meanwhile). The buffer is kept for the next run."""

    pushed: list[tuple[bool, bool]] = []  # per step: (its logits are copies in the buffer, it has logits at all)
    real_push = recording._Recorder.push

    def push(self, raw):
        real_push(self, raw)
        tensors = [t for t in (raw.q_logits, raw.p_logits) if t is not None]
        copies = self.ring is not None and all(
            t.untyped_storage().data_ptr() == self.ring.buffer.untyped_storage().data_ptr() for t in tensors)
        pushed.append((copies and len(raw.spans) == len(tensors), bool(tensors)))

    monkeypatch.setattr(recording._Recorder, "push", push)
    prepared = _prepared(store, tiny_models, case)
    held = LiveRun(prepared).run()
    assert len(pushed) == len(held.steps) and all(has for _, has in pushed)
    assert all(copied for copied, _ in pushed), "a held step kept Transformers' tensor while the buffer had room"
    assert logit_ring._SPARE_RING and logit_ring._SPARE_RING[0].buffer.numel() == logit_ring.KEPT_LOGITS_BYTES // 4
    pushed.clear()
    _iterated(prepared)
    assert pushed and not any(copied for copied, _ in pushed)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts the process's threads in /proc")
def test_taking_the_logit_ring_starts_no_openmp_team(two_torch_threads):
    """The buffer's pages are written by numpy, not by a torch fill: a fill this large starts an OpenMP team in the
    consumer's thread, and with more OpenMP threads than cores generation's own team sleeps and wakes around every op
    (`_LogitRing`). Counted in a fresh thread, which has no team yet: no thread appears while it takes the buffer."""
    import os
    import threading


    counts: list[int] = []

    def take() -> None:
        counts.append(len(os.listdir("/proc/self/task")))
        ring = logit_ring._LogitRing(logit_ring.KEPT_LOGITS_BYTES // 4)
        counts.append(len(os.listdir("/proc/self/task")))
        assert ring.buffer.numel() == logit_ring.KEPT_LOGITS_BYTES // 4 and not ring.buffer.any()

    worker = threading.Thread(target=take)
    worker.start()
    worker.join()
    assert len(counts) == 2 and counts[1] == counts[0], f"threads before and after: {counts}"


def test_a_run_that_gives_way_frees_the_void_attempts_copies(tiny_models, monkeypatch):
    """A long job's held run that gives way to a visitor's run starts again; the records of its void attempt are
    dropped unread, and their stretches of the buffer are freed with them: the attempt that counts copies its logits
    (with a buffer of a few steps, not one stays taken by the void attempt)."""
    import threading

    from playground.engine import stopped_by
    from playground.request import new_request

    from playground.models import default_device

    if default_device() != "cpu":
        pytest.skip("the ring copies CPU float32 scores only (`_LogitRing.hold`): on a GPU a held run keeps them there")
    monkeypatch.setattr(logit_ring, "KEPT_LOGITS_BYTES", 200_000)  # a buffer of a few steps (the ring wraps)
    long_run = prepare(new_request(PROMPT, target=tiny_models["target"], method="prompt_lookup", max_new_tokens=448,
                                   dtype="float32"))
    short_run = prepare(new_request(PROMPT, target=tiny_models["target"], max_new_tokens=8, dtype="float32"))
    copied: dict[int, list[bool]] = {}  # per attempt (its recorder): whether each step's scores were copied
    pushing: list[int] = []
    real_push, real_hold = recording._Recorder.push, logit_ring._LogitRing.hold

    def push(self, raw):
        pushing.append(id(self))
        real_push(self, raw)

    def hold(self, logits, spans):
        kept = real_hold(self, logits, spans)
        if logits is not None:
            copied.setdefault(pushing[-1], []).append(kept is not logits)
        return kept

    monkeypatch.setattr(recording._Recorder, "push", push)
    monkeypatch.setattr(logit_ring._LogitRing, "hold", hold)
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


# --------------------------------------------------------------------------- the consumer starts no OpenMP team
# A torch op over more than at::internal::GRAIN_SIZE (32,768) elements, called in a thread that has no OpenMP team
# yet, starts one there (the note above `distributions.GRAIN_SIZE`). The tiny models' rows (384 entries) never reach
# that, so these runs use a tiny pair whose model vocabulary is wider than the grain, as Gemma's 262,144 is (ids past
# the tokenizer's 384 read as no text, as a padded vocabulary's do).
WIDE_VOCAB = 40_000
WIDE_CASES = {"speculative": None, "ensemble": 0.7}  # ensemble verification: its weight w (the guide's start)


@pytest.fixture(scope="module")
def wide_pair(tmp_path_factory) -> dict[str, str]:
    from tiny import build_tokenizer, save_tiny_llama

    root = tmp_path_factory.mktemp("wide")
    tok = build_tokenizer()
    target = save_tiny_llama(root / "target", seed=0, tokenizer=tok, vocab_size=WIDE_VOCAB)
    drafter = save_tiny_llama(root / "drafter", seed=1, tokenizer=tok, perturb_from=target, noise=0.3)
    return {"target": str(target), "drafter": str(drafter)}


def _wide_records(store, wide_pair, weight: float | None) -> tuple[list, list]:
    """A real sampling run of the wide pair (speculative, or ensemble verification with weight w): each step's raw
    record as the consumer received it (its logits cloned before it digested them), and the trace's steps."""

    params = {"num_assistant_tokens": 4, **({"assistant_ensemble_weight": weight} if weight is not None else {})}
    prepared = prepare(RunRequest(prompt=PROMPT, target=wide_pair["target"], assistant=wide_pair["drafter"],
                                  method="speculative", params=params, max_new_tokens=16, dtype="float32",
                                  sample=True, temperature=1.0, top_k=0, top_p=1.0, seed=3), store)
    records = []
    real_digest = distributions._digest

    def digest(raw, *args):
        records.append(dataclasses.replace(
            raw, drafted=None if raw.drafted is None else raw.drafted.clone(), emitted=raw.emitted.clone(),
            q_logits=None if raw.q_logits is None else raw.q_logits.clone(), p_logits=raw.p_logits.clone(),
            spans=[]))
        real_digest(raw, *args)

    distributions._digest = digest
    try:
        trace = LiveRun(prepared).run()
    finally:
        distributions._digest = real_digest
    assert trace.vocab_size == WIDE_VOCAB and len(records) == len(trace.steps)
    return records, trace.steps


def _threads_started_by(work) -> list[str]:
    """Run `work` in a fresh thread (no OpenMP team yet) and return the threads that appeared meanwhile."""
    import os
    import threading

    seen: dict[str, set[str]] = {}

    def fresh() -> None:
        seen["before"] = set(os.listdir("/proc/self/task"))
        work()
        seen["after"] = set(os.listdir("/proc/self/task"))

    worker = threading.Thread(target=fresh)
    worker.start()
    worker.join()
    assert "after" in seen, "the work failed"
    return sorted(seen["after"] - seen["before"] - {str(worker.native_id)})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts the process's threads in /proc")
@pytest.mark.parametrize("case", sorted(WIDE_CASES))
def test_digesting_wide_sampling_records_starts_no_openmp_team(store, wide_pair, case, two_torch_threads):
    """The consumer's whole digest of real sampling records, rows wider than the grain: the softmaxes, the top-k
    lists, the drafted tokens' p and q, ensemble verification's mixture v, and the residual max(0, p − q)
    normalised at refused positions. Done in a fresh thread, no thread appears (a team there would make
    generation's own team sleep and wake around every op, `_LogitRing`)."""

    weight = WIDE_CASES[case]
    records, steps = _wide_records(store, wide_pair, weight)
    def digest_all() -> None:
        for raw in records:
            distributions._digest(raw, 5, True, weight)

    started = _threads_started_by(digest_all)
    assert started == [], f"threads started while digesting: {started}"
    positions = [position for raw in records for position in raw.dists]
    assert sum(position.residual is not None for position in positions) >= 2, "no refused position was digested"
    assert any(position.v is not None for position in positions) == (weight is not None)
    for raw, step in zip(records, steps):  # the same lists as the run's own consumer computed
        for mine, shown in zip(raw.dists, step.dists, strict=True):
            for name in ("p", "q", "v", "residual"):
                if name != "residual" or getattr(shown, name) is not None:
                    assert _pairs(getattr(mine, name)) == _pairs(getattr(shown, name)), (step.index, name)


def _pairs(ranked) -> list[tuple[int, float]] | None:
    """A microscope list as (id, probability) pairs, without texts."""
    return None if ranked is None else [(r.id, r.prob) for r in ranked]


@pytest.mark.parametrize("case", sorted(WIDE_CASES))
def test_the_mixture_and_the_residual_equal_torchs_formula(store, wide_pair, case):
    """The microscope's ensemble mixture and residual, now computed by numpy on the CPU, against the straightforward
    torch formula in this (the main) thread, on real sampling records as wide as above: the mixture
    v = w·p + (1−w)·q and the unnormalised residual max(0, p − q) to the last bit; the residual's total is numpy's
    pairwise float32 sum, whose order differs from torch's, so it and the normalised residual agree to a relative
    1e-6 (each entry divided by the same total: the same bits again), with the same ids in the same order."""
    import torch

    weight = WIDE_CASES[case]
    records, steps = _wide_records(store, wide_pair, weight)
    mixtures = residuals = 0
    for raw, step in zip(records, steps):
        if not step.drafted:
            continue
        judged = min(len(step.drafted), len(step.emitted))
        p = raw.p_logits[:len(step.emitted)].softmax(-1)
        q = raw.q_logits[:judged].softmax(-1)
        assert torch.equal(distributions._softmax(raw.p_logits, len(step.emitted)), p)
        if weight is not None:
            v = weight * p[:judged] + (1 - weight) * q
            assert torch.equal(distributions._mixture(p[:judged], q, weight), v), step.index
            for i in range(judged):
                assert _pairs(step.dists[i].v) == _sorted_pairs(v[i], 5), (step.index, i)
                assert step.dists[i].v_drafted == float(v[i, step.drafted[i]])
                mixtures += 1
        for i, position in enumerate(step.dists):
            if position.residual is None:
                continue
            expected = (p[i] - q[i]).clamp(min=0)
            row, total = distributions._residual(p[i], q[i])
            assert torch.equal(row, expected), (step.index, i)
            assert total == pytest.approx(float(expected.sum()), rel=1e-6, abs=0)
            assert torch.equal(distributions._normalised(row, total), expected / total)
            expected /= expected.sum()
            assert [r.id for r in position.residual] == [i for i, _ in _sorted_pairs(expected, 5)]
            assert [r.prob for r in position.residual] == pytest.approx([v for _, v in _sorted_pairs(expected, 5)],
                                                                         rel=1e-6, abs=0)
            assert position.residual_emitted == pytest.approx(float(expected[step.emitted[i]]), rel=1e-6, abs=0)
            residuals += 1
    assert residuals >= 2 and (mixtures > 0) == (weight is not None)


def _sorted_pairs(row, k: int) -> list[tuple[int, float]]:
    """The reference top k: the whole row sorted by torch (stable, so ties keep the lower id first), zeros dropped
    after the first, as the microscope lists them."""
    values, ids = row.sort(descending=True, stable=True)
    return [(i, min(1.0, v)) for n, (v, i) in enumerate(zip(values[:k].tolist(), ids[:k].tolist())) if n == 0 or v > 0]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts the process's threads in /proc")
def test_a_flat_row_and_bfloat16_logits_start_no_openmp_team_and_read_as_torchs(two_torch_threads):
    """The two other paths past the grain: a row so flat that its top-k is sorted whole (torch's sort copies the row,
    and the copy started a team), here with NaN entries and ties, sorted as torch sorts it; and a drafter's bfloat16
    logits (the MTP drafter's), converted to float32 in pieces, whose softmax is torch's to the last bit."""
    import torch

    width = 262_144  # Gemma's
    generator = torch.Generator().manual_seed(0)
    flat = torch.full((width,), 1.0 / width)  # more than MAX_CANDIDATES entries reach its floor: sorted whole
    flat[torch.randperm(width, generator=generator)[:distributions.MAX_CANDIDATES + 1000]] = 1.5 / width
    with_nan = flat.clone()
    with_nan[torch.randperm(width, generator=generator)[:3]] = float("nan")
    logits = (torch.randn(3, width, generator=generator) * 4).bfloat16()
    got: dict = {}

    def work() -> None:
        got["flat"] = distributions._top_row(flat, 10)
        got["with_nan"] = distributions._sorted_top(with_nan, 10)
        got["probs"] = distributions._softmax(logits, 2)

    started = _threads_started_by(work)
    assert started == [], f"threads started: {started}"
    assert _pairs(got["flat"]) == _sorted_pairs(flat, 10)
    values, ids = with_nan.sort(descending=True, stable=True)  # NaN first, then ties to the lower id
    assert got["with_nan"][1] == ids[:10].tolist() and torch.isnan(values[:3]).all()
    torch.testing.assert_close(torch.tensor(got["with_nan"][0]), values[:10], rtol=0, atol=0, equal_nan=True)
    assert torch.equal(got["probs"], logits[:2].float().softmax(-1))
