"""Visitors' own runs take turns one decoding step at a time (`turns._Turns`), on real tiny models and real threads.

A long run is held at its first forward until a short run waits for its turn, so the two then alternate step by
step for as long as both run. Each must give exactly the tokens it gives alone (greedy and seeded sampling, every
method the tiny models run), the short one's first step must come long before the long one ends, each run's
phases must still add up to its elapsed time (the waits are in neither), the draft settings must be the original
ones afterwards, and a run whose visitor leaves while it waits for its turn must stop without another step. An MCP
generate (a run inside `stopped_by` of its call's stop event) is such a run too: it takes turns from its first step,
long jobs give way to it, and its agent leaving stops it as a visitor's leaving does.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import pytest

import playground.engine as engine
from playground.engine import LiveRun, RunRequest, prepare
from playground.engine.stopping import _Stop
from playground.engine.turns import _SCHEDULER, _OneTurn, _Turns
from playground.trace import Trace, check_invariants
from test_methods import PROMPT, models  # noqa: F401  (the tiny checkpoints of every method, as a fixture)

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.models]  # models built: not in the model-free tier

WAIT_S = 120  # no wait in these tests comes near this; a hang fails the test instead of holding the suite


def _scheduler_state() -> dict[str, Any]:
    with _SCHEDULER.baton:
        owner, queued = _SCHEDULER.owner, len(_SCHEDULER.queue)
    return {"owner": owner, "queued": queued, "places_taken": _SCHEDULER.places_taken,
            "foreground_runs": _SCHEDULER.foreground_runs, "job_runs": _SCHEDULER.job_runs}


@pytest.fixture(autouse=True)
def idle_scheduler() -> None:
    """Each test starts with the process's turns idle: no run holding the baton, queued, holding a place or counted.
    The tests' holds count on it (a place still taken by a run another test file of this worker left ending would keep
    this test's second run out of the baton's queue, and a hold waiting for it would never come). A run still ending
    is waited for; anything left after `WAIT_S` fails here, naming it, instead of as a hold that never came."""
    idle = {"owner": None, "queued": 0, "places_taken": 0, "foreground_runs": 0, "job_runs": 0}
    began = time.monotonic()
    while (state := _scheduler_state()) != idle:
        assert time.monotonic() - began < WAIT_S, f"the turns are not idle before the test: {state}"
        time.sleep(0.01)

# name -> the run's request (model names from test_methods' fixture); long runs of each get LONG_TOKENS[method].
RUNS: dict[str, dict[str, Any]] = {
    "baseline": dict(target="target"),
    "baseline-sampling": dict(target="target", sample=True, seed=5),
    "speculative": dict(target="target", assistant="noisy", params={"num_assistant_tokens": 3}),
    "speculative-sampling": dict(target="target", assistant="noisy", params={"num_assistant_tokens": 3},
                                 sample=True, seed=3),
    "prompt_lookup": dict(target="target", params={"prompt_lookup_num_tokens": 3}),
    "early_exit": dict(target="target", params={"assistant_early_exit": 2, "num_assistant_tokens": 3}),
    "early_exit-sampling": dict(target="target", params={"assistant_early_exit": 2, "num_assistant_tokens": 3},
                                sample=True, seed=2),
    "mtp": dict(target="deepseek"),
    "mtp_drafter": dict(target="gemma4", assistant="gemma4_assistant", params={"num_assistant_tokens": 3}),
    "universal": dict(target="target", assistant="other_tok", params={"num_assistant_tokens": 3}),
    "universal-sampling": dict(target="target", assistant="other_tok", params={"num_assistant_tokens": 3},
                               sample=True, seed=1),
    "ensemble": dict(target="target", assistant="noisy",
                     params={"num_assistant_tokens": 3, "assistant_ensemble_weight": 0.5}),
}
SHORT_TOKENS = 8
LONG_TOKENS = {"mtp": 40}  # the tiny DeepSeek has 61 layers: slower per step, and never more than 2 tokens a step
LONG_DEFAULT = 120  # enough steps that the long run outlasts the short one even when every draft is kept


def _request(models: dict[str, str], name: str, tokens: int, prompt: str = PROMPT, **more: Any) -> RunRequest:
    kw = {**RUNS[name], **more}
    kw["target"] = models[kw["target"]]
    if "assistant" in kw:
        kw["assistant"] = models[kw["assistant"]]
    method = name.split("-")[0]
    if method == "ensemble":  # a verification of speculative decoding, chosen by its parameter
        method = "speculative"
    return RunRequest(prompt=prompt, method=method, dtype="float32", max_new_tokens=tokens, **kw)


class Consumer:
    """Iterates a LiveRun in a thread of its own, as the page's handler does, noting when each step arrives."""

    def __init__(self, live: LiveRun, on_step: Callable[[int], None] = lambda n: None) -> None:
        self.live = live
        self.arrivals: list[float] = []
        self.steps = 0  # the steps among what arrived (a run at a pace also yields None while it stands paused)
        self.ended = 0.0
        self.error: BaseException | None = None
        self.first_step = threading.Event()

        def consume() -> None:
            try:
                for step in live:
                    self.arrivals.append(time.monotonic())
                    self.steps += step is not None
                    self.first_step.set()
                    on_step(len(self.arrivals))
            except BaseException as exc:  # noqa: BLE001  (reported by the test)
                self.error = exc
            self.ended = time.monotonic()

        self.thread = threading.Thread(target=consume, daemon=True)
        self.thread.start()

    def join(self) -> Trace:
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), "the run did not end"
        if self.error is not None:
            raise self.error
        return self.live.trace


class Hold:
    """A forward pre-hook on a model that holds the long run's worker (only it) until `release` is set, once
    `should_hold()` says so; `holding` is set once it holds. With `wait` its first forward waits for `should_hold()`
    (for something that needs no turn, such as another run queueing); else a forward holds only if it says so now."""

    def __init__(self, model: Any, long_run: LiveRun, should_hold: Callable[[], bool], wait: bool = True) -> None:
        self.long_run = long_run
        self.should_hold = should_hold
        self.wait = wait
        self.holding = threading.Event()
        self.release = threading.Event()
        self.handle = model.register_forward_pre_hook(self)

    def __call__(self, module: Any, args: Any) -> None:
        if threading.current_thread() is not _thread_of(self.long_run) or self.release.is_set():
            return
        if not self.wait and not self.should_hold():
            return
        began = time.monotonic()
        while not self.should_hold():
            if time.monotonic() - began > WAIT_S:
                return
            time.sleep(0.002)
        self.holding.set()
        self.release.wait(WAIT_S)

    def remove(self) -> None:
        self.release.set()
        self.handle.remove()


def _turns_of(live: LiveRun) -> _Turns | None:
    """The turns of the run's current attempt (None: it holds its models, or has not started)."""
    return live._worker.turns if live._worker is not None else None


def _thread_of(live: LiveRun) -> threading.Thread | None:
    """The run's generating thread (None before it starts)."""
    return live._worker.thread if live._worker is not None else None


def _waiting(live: LiveRun) -> bool:
    """Whether this run waits in the baton's queue."""
    return (turns := _turns_of(live)) is not None and _waiting_turns(turns)


def _waiting_turns(turns: _Turns) -> bool:
    with _SCHEDULER.baton:
        return turns in _SCHEDULER.queue


def _interleave(store, models, long_name: str, short_name: str) -> tuple[Trace, Trace, Consumer, Consumer, LiveRun]:
    """The long run starts, is held at its first forward until the short run waits for its turn, then both go on;
    they alternate a step at a time while both run."""
    method = long_name.split("-")[0]
    long_run = LiveRun(prepare(_request(models, long_name, LONG_TOKENS.get(method, LONG_DEFAULT)), store))
    short_run = LiveRun(prepare(_request(models, short_name, SHORT_TOKENS, prompt="def add(a, b):"), store))
    hold = Hold(long_run.prepared.target.model, long_run, lambda: _waiting(short_run))
    try:
        long_consumer = Consumer(long_run)
        started = time.monotonic()
        while (turns := _turns_of(long_run)) is None or turns.turns == 0:  # the long run holds the baton first
            assert time.monotonic() - started < WAIT_S
            time.sleep(0.002)
        short_consumer = Consumer(short_run)
        hold.holding.wait(WAIT_S)
        hold.release.set()  # the short run waits now: the long one steps once more, then hands over
        short_trace, long_trace = short_consumer.join(), long_consumer.join()
    finally:
        hold.remove()
    return long_trace, short_trace, long_consumer, short_consumer, short_run


_PRISTINE: dict[int, dict[str, Any]] = {}  # id(generation_config) -> its settings before this module ran anything


def _pristine(config: Any) -> dict[str, Any]:
    """A model's generation settings as loaded, recorded the first time a test of this module prepares a run on it
    (before that run): every run must leave them so."""
    return _PRISTINE.setdefault(id(config), config.to_dict())


def _assert_tiles(trace: Trace) -> None:
    check_invariants(trace)
    phases = trace.setup_ms + sum(s.draft_ms + s.verify_ms + s.other_ms for s in trace.steps)
    assert phases == pytest.approx(trace.summary.elapsed_s * 1000, rel=0.02), "the phases tile the elapsed time"


@pytest.mark.parametrize("name", list(RUNS))
def test_two_runs_taking_turns_step_by_step_give_what_each_gives_alone(store, models, name) -> None:  # noqa: F811
    method = name.split("-")[0]
    long_request = _request(models, name, LONG_TOKENS.get(method, LONG_DEFAULT))
    short_request = _request(models, name, SHORT_TOKENS, prompt="def add(a, b):")
    config = prepare(short_request, store).draft_config_model.generation_config
    before = _pristine(config)
    alone_long = LiveRun(prepare(long_request, store)).run()
    alone_short = LiveRun(prepare(short_request, store)).run()
    assert alone_long.waited_ms < 50 and alone_short.waited_ms < 50, "alone, nobody to wait for"

    long_trace, short_trace, long_consumer, short_consumer, short_run = _interleave(store, models, name, name)

    assert short_trace.output_ids == alone_short.output_ids, "the short run gives what it gives alone"
    assert long_trace.output_ids == alone_long.output_ids, "the long run gives what it gives alone"
    assert (short_trace.finish_reason, long_trace.finish_reason) == (alone_short.finish_reason, alone_long.finish_reason)
    # It waited once before its first step and once between every two of its steps: turns taken step by step.
    short_turns = _turns_of(short_run)
    assert short_turns is not None
    assert short_turns.turns == len(short_trace.steps) > 1
    assert short_consumer.arrivals[0] < long_consumer.ended and short_consumer.ended < long_consumer.ended
    for trace in (short_trace, long_trace):
        _assert_tiles(trace)
        assert trace.waited_ms > 0, "the wait for the other run's steps is reported apart"
    assert config.to_dict() == before, "the draft settings are the model's own again"


def test_runs_of_different_methods_on_shared_models_take_turns(store, models) -> None:  # noqa: F811
    """Early exit (it lowers the target's layer count while drafting) against a seeded speculative run on the same
    target with other draft settings: each still gives its own tokens."""
    long_name, short_name = "early_exit-sampling", "speculative-sampling"
    alone_long = LiveRun(prepare(_request(models, long_name, LONG_DEFAULT), store)).run()
    alone_short = LiveRun(prepare(_request(models, short_name, SHORT_TOKENS, prompt="def add(a, b):"), store)).run()
    long_trace, short_trace, _, _, short_run = _interleave(store, models, long_name, short_name)
    assert short_trace.output_ids == alone_short.output_ids
    assert long_trace.output_ids == alone_long.output_ids
    short_turns = _turns_of(short_run)
    assert short_turns is not None
    assert short_turns.turns == len(short_trace.steps) > 1


def test_a_run_stopped_while_waiting_for_its_first_turn_ends_without_a_step(store, models) -> None:  # noqa: F811
    long_run = LiveRun(prepare(_request(models, "baseline", 40), store))
    short_run = LiveRun(prepare(_request(models, "baseline", SHORT_TOKENS), store))
    hold = Hold(long_run.prepared.target.model, long_run, lambda: _waiting(short_run))
    try:
        long_consumer = Consumer(long_run)
        started = time.monotonic()
        while (turns := _turns_of(long_run)) is None or turns.turns == 0:
            assert time.monotonic() - started < WAIT_S, "the long run never took a turn"
            time.sleep(0.002)
        short_consumer = Consumer(short_run)
        assert hold.holding.wait(WAIT_S), "the short run queued for its turn"
        short_run.stop()  # its visitor leaves while the long run holds the models
        short_consumer.thread.join(WAIT_S)
        assert not short_consumer.thread.is_alive(), "it ended while the other run still held its turn"
        assert not hold.release.is_set()
        short_trace = short_consumer.join()
        assert short_trace.steps == [] and short_trace.finish_reason == "stopped"
        hold.release.set()
        assert long_consumer.join().summary.new_tokens == 40
    finally:
        hold.remove()


def test_a_run_stopped_while_waiting_between_its_steps_takes_no_further_step(store, models) -> None:  # noqa: F811
    alone = LiveRun(prepare(_request(models, "speculative", SHORT_TOKENS * 4), store)).run()
    long_run = LiveRun(prepare(_request(models, "baseline", LONG_DEFAULT, prompt="def add(a, b):"), store))
    short_run = LiveRun(prepare(_request(models, "speculative", SHORT_TOKENS * 4), store))
    # The long run is held once the short one has taken a turn and waits for its next.
    hold = Hold(long_run.prepared.target.model, long_run,
                lambda: (turns := _turns_of(short_run)) is not None and turns.turns >= 2 and _waiting(short_run), wait=False)
    try:
        long_consumer = Consumer(long_run)
        started = time.monotonic()
        while (turns := _turns_of(long_run)) is None or turns.turns == 0:
            assert time.monotonic() - started < WAIT_S, "the long run never took a turn"
            time.sleep(0.002)
        short_consumer = Consumer(short_run)
        assert hold.holding.wait(WAIT_S)
        waiting = _turns_of(short_run)
        assert waiting is not None
        _left_between_steps(short_run.stop, short_consumer.thread, hold, short_consumer.join, waiting,
                            alone, long_consumer)
    finally:
        hold.remove()


def _left_between_steps(leave: Callable[[], None], worker: threading.Thread, hold: Hold, finish: Callable[[], Trace],
                        waiting: _Turns, alone: Trace, other: Consumer) -> None:
    """`leave()` while the run (its thread `worker`, its turns `waiting`) waits between two of its steps and `hold`
    holds the other run: it takes its turn back to end generate() cleanly, without another step, its tokens the start
    of its tokens alone; the other run goes on to its length."""
    turns = waiting.turns
    looks: list[bool] = []  # the waiting run's looks at whether it was stopped that found it so, made in the queue
    own = waiting.stopped

    def stopped() -> bool:
        answer = own()
        if answer and waiting in _SCHEDULER.queue:
            looks.append(answer)
        return answer

    waiting.stopped = stopped  # type: ignore[method-assign]  # the queued run asks its own `stopped` as it waits (`_Scheduler.await_baton_locked`)
    leave()
    # It saw itself stopped, and after its next wait for the baton looked again still queued: it did not leave.
    deadline = time.monotonic() + WAIT_S
    while len(looks) < 2:
        assert time.monotonic() < deadline, f"the stopped run looked {len(looks)} times while queued"
        time.sleep(0.002)
    assert worker.is_alive() and _waiting_turns(waiting), "it takes its turn back to end generate() cleanly"
    hold.release.set()
    trace = finish()
    assert trace.finish_reason == "stopped"
    assert len(trace.steps) == turns, "no step after it was stopped"
    assert trace.output_ids == alone.output_ids[:len(trace.output_ids)]
    _assert_tiles(trace)
    assert other.join().finish_reason == "length"


# --- an MCP generate: a visitor's own run that its agent's leaving stops -----------------------------------------------

class AgentRun:
    """An MCP `generate` as `mcp_tools.generate` makes it: `engine.run` in a thread of its own, inside `stopped_by` of
    the call's stop event (`gone`, set when its agent leaves). `turns` is its `_Turns` once it has queued for one."""

    def __init__(self, request: RunRequest, store: Any) -> None:
        self.gone = threading.Event()
        self.trace: Trace | None = None
        self.error: BaseException | None = None
        self.ended = 0.0
        self.turns: _Turns | None = None
        self.others: set[int] = set()  # ids of the _Turns of the runs that were there before it

        def call() -> None:
            try:
                with engine.stopped_by(self.gone):
                    self.trace = engine.run(request, store, visitors_own=True)
            except BaseException as exc:  # noqa: BLE001  (reported by the test)
                self.error = exc
            self.ended = time.monotonic()

        self.thread = threading.Thread(target=call, daemon=True)

    def start(self, *others: LiveRun) -> "AgentRun":
        self.others = {id(_turns_of(run)) for run in others}
        self.thread.start()
        return self

    def waiting(self) -> bool:
        """Whether it waits in the baton's queue (noting its `_Turns` the first time)."""
        with _SCHEDULER.baton:
            mine = [t for t in _SCHEDULER.queue if id(t) not in self.others]
        if mine:
            self.turns = mine[0]  # type: ignore[assignment]  # a run's turns, never a _OneTurn: the agent is a run
        return bool(mine)

    def join(self) -> Trace:
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), "the MCP generate did not end"
        if self.error is not None:
            raise self.error
        assert self.trace is not None
        return self.trace


def _page_run_held_until(store, models, until: Callable[[], bool], wait: bool = True, tokens: int = LONG_DEFAULT,
                         ) -> tuple[LiveRun, Consumer, Hold]:  # noqa: F811
    """A page's long greedy run streaming, holding the baton first; held at a forward once `until()` (see `Hold`)."""
    page_run = LiveRun(prepare(_request(models, "baseline", tokens, prompt="def add(a, b):"), store))
    hold = Hold(page_run.prepared.target.model, page_run, until, wait=wait)
    consumer = Consumer(page_run)
    started = time.monotonic()
    while (turns := _turns_of(page_run)) is None or turns.turns == 0:
        assert time.monotonic() - started < WAIT_S
        time.sleep(0.002)
    return page_run, consumer, hold


def test_an_mcp_generate_takes_turns_from_its_first_step(store, models) -> None:  # noqa: F811
    """An MCP generate started while a page's run streams takes its first step before that run ends (it queues for
    the next turn, not for the end of the visitors' runs), then alternates with it and gives what it gives alone."""
    request = _request(models, "speculative", SHORT_TOKENS)
    alone = engine.run(request, store)
    agent = AgentRun(request, store)
    page_run, page_consumer, hold = _page_run_held_until(store, models, agent.waiting)
    try:
        agent.start(page_run)
        assert hold.holding.wait(WAIT_S), "the MCP generate queued for a turn while the page's run streamed"
        hold.release.set()
        trace = agent.join()
        page_trace = page_consumer.join()
    finally:
        hold.remove()
    assert trace.output_ids == alone.output_ids and trace.finish_reason == alone.finish_reason == "length"
    assert agent.turns is not None and agent.turns.turns == len(trace.steps) > 1, "a turn per step"
    assert agent.ended < page_consumer.ended, "it ended while the page's run still streamed"
    assert page_trace.summary.new_tokens == LONG_DEFAULT and trace.waited_ms > 0
    _assert_tiles(trace)


def test_a_long_jobs_run_gives_way_to_an_mcp_generate(store, models) -> None:  # noqa: F811
    """A long job's run (Compare's, an MCP compare's) gives way at its next step to an MCP generate, as it does to the
    page's Generate: the generate ends before the long run, which is redone whole."""
    undisturbed = LiveRun(prepare(_request(models, "prompt_lookup", LONG_DEFAULT), store)).run()
    request = _request(models, "baseline", SHORT_TOKENS, prompt="def add(a, b):")
    box: dict[str, Any] = {}
    began = threading.Event()

    class _WaitsForTheAgent(_Stop):
        """The long run's first attempt holds at the end of a step until the MCP generate waits for the models, so
        the test does not race the tiny run's speed (120 prompt-lookup tokens take a fraction of a second)."""

        def __call__(self, input_ids, scores, **kwargs):
            deadline = time.monotonic() + WAIT_S
            while box["live"].gave_way == 0 and _SCHEDULER.foreground_runs == 0 and time.monotonic() < deadline:
                time.sleep(0.001)
            return super().__call__(input_ids, scores, **kwargs)

    class _LongRun(LiveRun):
        def _stopping(self, gives_way: bool) -> _Stop:
            stop = super()._stopping(gives_way)
            stop.__class__ = _WaitsForTheAgent
            return stop

    def long_job() -> None:
        with engine.stopped_by(threading.Event()):
            box["live"] = live = _LongRun(prepare(_request(models, "prompt_lookup", LONG_DEFAULT), store))
            began.set()
            box["trace"] = live.run()
            box["ended"] = time.monotonic()

    worker = threading.Thread(target=long_job, daemon=True)
    worker.start()
    assert began.wait(WAIT_S)
    started = time.monotonic()
    while not box["live"].generated_steps:  # the long run is generating
        assert worker.is_alive(), "the long run ended before it was seen generating"
        assert time.monotonic() - started < WAIT_S, "the long run was never seen generating"
        time.sleep(0.001)
    agent = AgentRun(request, store).start()
    trace = agent.join()
    worker.join(WAIT_S)
    assert not worker.is_alive()
    assert agent.ended < box["ended"] and box["live"].gave_way >= 1, "the long run gave way to the MCP generate"
    assert trace.summary.new_tokens == SHORT_TOKENS
    assert box["trace"].output_ids == undisturbed.output_ids


def test_a_long_jobs_engine_run_gives_way_as_its_live_run_does(store, models, monkeypatch) -> None:  # noqa: F811
    """`engine.run` inside a long job (`stopped_by`) is the same run as `LiveRun.run`: it holds its models as the job's
    run, gives way at its next step to a visitor's run that asks for them, and is redone whole after it. (It was a
    visitor's own run there before: it took turns per step and never gave way.)"""
    request = _request(models, "prompt_lookup", LONG_DEFAULT)
    undisturbed = engine.run(request, store)
    runs: list[LiveRun] = []
    init = LiveRun.__init__

    def noted(self: LiveRun, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        runs.append(self)

    monkeypatch.setattr(LiveRun, "__init__", noted)
    held = threading.Event()

    def first_forward_waits(module: Any, args: Any) -> None:
        """The long job's first forward waits until a visitor's run asks for the models (a tiny run is too quick to
        race)."""
        if held.is_set() or not runs or threading.current_thread() is not _thread_of(runs[0]):
            return
        held.set()
        began = time.monotonic()
        while _SCHEDULER.foreground_runs == 0 and time.monotonic() - began < WAIT_S:
            time.sleep(0.001)

    box: dict[str, Any] = {}

    def long_job() -> None:
        try:
            with engine.stopped_by(threading.Event()):
                box["trace"] = engine.run(request, store)
        except BaseException as exc:  # noqa: BLE001  (reported by the test)
            box["error"] = exc
        box["ended"] = time.monotonic()

    handle = store.get(models["target"], "float32").model.register_forward_pre_hook(first_forward_waits)
    worker = threading.Thread(target=long_job, daemon=True)
    try:
        worker.start()
        assert held.wait(WAIT_S), "the long job's run began generating"
        visitor = Consumer(LiveRun(prepare(_request(models, "baseline", SHORT_TOKENS, prompt="def add(a, b):"), store)))
        visitor_trace = visitor.join()
        worker.join(WAIT_S)
    finally:
        handle.remove()
    assert not worker.is_alive() and "error" not in box, box.get("error")
    long_run = runs[0]
    assert _turns_of(long_run) is None, "it held its models as a long job's run does (it took turns as a visitor's)"
    assert long_run.gave_way >= 1, "it gave way to the visitor's run"
    assert visitor.ended < box["ended"]
    assert visitor_trace.summary.new_tokens == SHORT_TOKENS
    assert box["trace"].output_ids == undisturbed.output_ids and box["trace"].finish_reason == "length"


def test_an_mcp_generate_is_a_visitors_own_run_inside_its_calls_job(models, monkeypatch) -> None:  # noqa: F811
    """`mcp_tools.generate` runs inside its call's job (`stopped_by`, as every tool does) yet asks for a visitor's own
    run: its turn is counted among the visitors' runs long jobs wait for (`_Scheduler.turn` without a job), not a long
    job's. Run through the tool itself (`AgentRun` above stands in for it with the store of these tests)."""
    import json

    from playground.app import mcp_tools

    asked: list[Any] = []
    turn = _SCHEDULER.turn

    def noted(job: threading.Event | None) -> Any:
        asked.append(job)
        return turn(job)

    monkeypatch.setattr(_SCHEDULER, "turn", noted)
    with engine.stopped_by(threading.Event()):
        answer = json.loads(mcp_tools.generate(prompt=PROMPT, target=models["target"], method="baseline",
                                               max_new_tokens=4, dtype="float32"))
    assert answer["summary"]["new_tokens"] == 4 and answer["finish_reason"] == "length"
    assert asked == [None], "a visitor's own run's turn, not a long job's"


def test_an_mcp_generate_whose_agent_leaves_while_it_waits_for_its_first_turn_ends_without_a_step(
        store, models) -> None:  # noqa: F811
    agent = AgentRun(_request(models, "baseline", SHORT_TOKENS), store)
    page_run, page_consumer, hold = _page_run_held_until(store, models, agent.waiting, tokens=40)
    try:
        agent.start(page_run)
        assert hold.holding.wait(WAIT_S), "the MCP generate queued for its turn"
        agent.gone.set()  # its agent leaves while the page's run holds the models
        agent.thread.join(WAIT_S)
        assert not agent.thread.is_alive(), "it ended while the page's run still held its turn"
        assert not hold.release.is_set()
        trace = agent.join()
        assert trace.steps == [] and trace.finish_reason == "stopped"
        assert agent.turns is not None and agent.turns.turns == 0
        hold.release.set()
        assert page_consumer.join().summary.new_tokens == 40
    finally:
        hold.remove()


def test_an_mcp_generate_whose_agent_leaves_between_its_steps_takes_no_further_step(store, models) -> None:  # noqa: F811
    request = _request(models, "speculative", SHORT_TOKENS * 4)
    alone = engine.run(request, store)
    agent = AgentRun(request, store)
    # The page's run is held once the MCP generate has taken a turn and waits for its next.
    page_run, page_consumer, hold = _page_run_held_until(
        store, models, lambda: agent.waiting() and agent.turns is not None and agent.turns.turns >= 2, wait=False)
    try:
        agent.start(page_run)
        assert hold.holding.wait(WAIT_S)
        assert agent.turns is not None
        _left_between_steps(agent.gone.set, agent.thread, hold, agent.join, agent.turns, alone, page_consumer)
    finally:
        hold.remove()


# --- the dedicated copy of universal decoding with sampling ------------------------------------------------------------

def test_the_first_universal_sampling_run_waits_one_step_for_its_dedicated_copy(models) -> None:  # noqa: F811
    """Universal decoding with sampling first copies its assistant and prunes the copy (pruning draws from torch's
    generator). While a seeded run on that assistant takes turns, the copy and the pruning each take one turn among
    the runs (`engine.one_turn`): the new run streams long before that run ends, each gives what it gives alone (the
    pruning moved neither's random stream)."""
    from playground.models import ModelStore

    request = _request(models, "universal-sampling", SHORT_TOKENS)
    long_request = _request(models, "baseline-sampling", LONG_DEFAULT, prompt="def add(a, b):", target="other_tok")
    alone = LiveRun(prepare(request, ModelStore())).run()
    long_alone = LiveRun(prepare(long_request, ModelStore())).run()
    store = ModelStore()  # no copy made yet
    long_run = LiveRun(prepare(long_request, store))

    def one_off_waiting() -> bool:
        with _SCHEDULER.baton:
            return any(isinstance(t, _OneTurn) for t in _SCHEDULER.queue)

    hold = Hold(long_run.prepared.target.model, long_run, one_off_waiting)
    box: dict[str, Any] = {}

    def universal_run() -> None:
        try:
            live = LiveRun(prepare(request, store))
            for _ in live:
                box.setdefault("first_step", time.monotonic())
            box["trace"] = live.trace
        except BaseException as exc:  # noqa: BLE001  (reported by the test)
            box["error"] = exc
        box["ended"] = time.monotonic()

    worker = threading.Thread(target=universal_run, daemon=True)
    try:
        long_consumer = Consumer(long_run)
        started = time.monotonic()
        while (turns := _turns_of(long_run)) is None or turns.turns == 0:
            assert time.monotonic() - started < WAIT_S, "the long run never took a turn"
            time.sleep(0.002)
        worker.start()
        assert hold.holding.wait(WAIT_S), "the copy waited for a turn while the sampling run held the models"
        hold.remove()  # off the model before it is copied (the copy takes the model's hooks; this one holds locks)
        worker.join(WAIT_S)
        long_trace = long_consumer.join()
    finally:
        hold.remove()
    assert not worker.is_alive() and "error" not in box, box.get("error")
    assert box["first_step"] < long_consumer.ended and box["ended"] < long_consumer.ended
    assert box["trace"].output_ids == alone.output_ids
    assert long_trace.output_ids == long_alone.output_ids and long_trace.waited_ms > 0
