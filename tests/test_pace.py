"""A pace a class can follow (`playground.pace`, `engine.stopping._Stop._pause`): a run at the "step" pace stops after each
verification step until the presenter steps on, gives its turn to other visitors' runs meanwhile, and gives the
tokens an unpaused run gives; its pauses are in no phase (setup + phases = elapsed) and reported apart (paused_ms).

Real tiny models through the real engine; no timings asserted (a paused run is watched until its worker has looked
twice whether it may go on: the window in which a wrongly running worker would show itself really passed).
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from playground.app import generate_tab, presenter
from playground.engine import LiveRun, RunRequest, prepare
from playground.errors import PlaygroundError
from playground.pace import FREE, POLL_S, SLOW, STEP, Pace
from playground.trace import check_invariants
from test_turns import Consumer  # the consuming thread the scheduler's tests use

pytestmark = pytest.mark.usefixtures("one_torch_thread")

WAIT_S = 120  # a hang fails the test instead of holding the suite
HOLD_S = 2.0  # one pause held this long: were it counted in a phase, that step would take longer than it
PROMPT = "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three,"


def _request(models: dict[str, str], method: str = "speculative", tokens: int = 24, **more: Any) -> RunRequest:
    kw: dict[str, Any] = dict(target=models["target"], prompt=PROMPT, method=method, dtype="float32",
                              max_new_tokens=tokens)
    if method == "speculative":
        kw.update(assistant=models["noisy"], params={"num_assistant_tokens": 3})
    return RunRequest(**{**kw, **more})


def _until(condition: Any, what: str) -> None:
    began = time.monotonic()
    while not condition():
        assert time.monotonic() - began < WAIT_S, f"never: {what}"
        time.sleep(0.005)


class _CountedWaits(threading.Condition):
    """A pace's condition that counts the waits that returned: each one is the waiting worker looking again whether
    it may go on (every `POLL_S` at the step pace)."""

    def __init__(self) -> None:
        super().__init__()
        self.returned = 0

    def wait(self, timeout: float | None = None) -> bool:
        woke = super().wait(timeout)
        self.returned += 1
        return woke


def _step_pace() -> Pace:
    """A pace at "step" whose waiting worker's looks are counted (`_paused_after`)."""
    pace = Pace(STEP)
    pace._cond = _CountedWaits()
    return pace


def _paused_after(live: LiveRun, pace: Pace, steps: int) -> None:
    """The run stands paused after exactly `steps` steps, and stays so: after its worker looked again twice whether it
    may go on and stayed (an event, not a fixed wait a slow machine makes too short to show a worker that went on)."""
    _until(lambda: pace.waiting and live.generated_steps >= steps, f"paused after {steps} steps")
    counted = pace._cond
    assert isinstance(counted, _CountedWaits)  # `_step_pace`'s
    looked = counted.returned
    _until(lambda: counted.returned >= looked + 2, "the paused worker looked again twice")
    assert live.generated_steps == steps, "no further step without a press of Step on"
    assert pace.waiting


def _assert_tiles(trace: Any) -> None:
    check_invariants(trace)
    phases = trace.setup_ms + sum(s.draft_ms + s.verify_ms + s.other_ms for s in trace.steps)
    assert phases == pytest.approx(trace.summary.elapsed_s * 1000, rel=0.02), "the phases tile the elapsed time"


@pytest.mark.parametrize("method", ["speculative", "baseline"])
def test_a_run_at_the_step_pace_stops_after_each_step_until_stepped_on(store, tiny_models, method) -> None:
    alone = LiveRun(prepare(_request(tiny_models, method), store)).run()
    assert len(alone.steps) > 4
    pace = _step_pace()
    live = LiveRun(prepare(_request(tiny_models, method), store), pace=pace)
    consumer = Consumer(live)
    _paused_after(live, pace, 1)
    time.sleep(HOLD_S)  # the class looks at the first step a while
    for n in range(1, 4):  # one step per press
        _paused_after(live, pace, n)
        pace.step_on()
    _paused_after(live, pace, 4)
    pace.set(FREE)  # the rest as fast as it goes
    trace = consumer.join()
    assert trace.output_ids == alone.output_ids, "the tokens of an unpaused run"
    assert trace.finish_reason == alone.finish_reason == "length"
    assert pace.pauses == 4 and not pace.waiting
    _assert_tiles(trace)
    assert trace.paused_ms >= HOLD_S * 1000 + 4 * POLL_S * 1000, "the pauses are reported apart (each a poll or more)"
    assert trace.steps[0].time_ms < HOLD_S * 1000, "the first pause is in none of the first step's phases"


def test_a_paused_run_gives_way_to_another_visitors_run(store, tiny_models) -> None:
    pace = _step_pace()
    paused = LiveRun(prepare(_request(tiny_models), store), pace=pace)
    consumer = Consumer(paused)
    _paused_after(paused, pace, 1)
    other = LiveRun(prepare(_request(tiny_models, "baseline", tokens=8), store))
    other_consumer = Consumer(other)
    other_trace = other_consumer.join()  # while the first run stands paused, on the same models
    assert other_trace.summary.new_tokens == 8 and other_trace.waited_ms == pytest.approx(0, abs=50)
    assert paused.generated_steps == 1 and pace.waiting
    pace.set(FREE)
    consumer.join()


def test_stop_or_a_visitor_who_leaves_ends_a_paused_run(store, tiny_models) -> None:
    pace = _step_pace()
    live = LiveRun(prepare(_request(tiny_models), store), pace=pace)
    consumer = Consumer(live)
    _paused_after(live, pace, 1)
    pace.step_on()
    _paused_after(live, pace, 2)
    live.stop()
    trace = consumer.join()
    assert trace.finish_reason == "stopped" and len(trace.steps) == 2

    # The page's handler hears None while the run stands paused (`idle_s`) and closes the iteration when its visitor
    # left: the worker ends without a further step.
    pace = _step_pace()
    live = LiveRun(prepare(_request(tiny_models), store), pace=pace)
    live.idle_s = 0.05
    items = iter(live)
    seen = [next(items)]
    while seen[-1] is not None:  # the first step, then the idle beats of the pause
        seen.append(next(items))
    items.close()
    assert not live.running and live.generated_steps == 1 and live.cancel.is_set()


def test_a_step_pause_never_counts_against_the_time_limit_but_ends_the_run_with_no_press(store, tiny_models,
                                                                                      monkeypatch) -> None:
    """A presenter's pause is not the run's own time (PLAYGROUND_RUN_TIMEOUT_S 2 s does not end it); a pause with no
    press for PLAYGROUND_PAUSE_IDLE_S ends the run as `idle` (on the old code the pause was bounded by the time limit
    and the run ended as `timeout` at 2 s)."""
    monkeypatch.setenv("PLAYGROUND_PAUSE_IDLE_S", "3")
    pace = _step_pace()
    live = LiveRun(prepare(_request(tiny_models), store), timeout_s=2.0, pace=pace)
    trace = Consumer(live).join()
    assert trace.finish_reason == "idle" and len(trace.steps) == 1
    assert trace.paused_ms >= 3000 and pace.runs == 0


def test_time_waited_at_the_slowed_pace_counts_against_the_time_limit(store, tiny_models) -> None:
    """Slowed to 10 s a step, a run with a 1 s time limit ends at its limit, in its first wait (on the old code the
    waits extended the deadline: it went on 10 s a step)."""
    live = LiveRun(prepare(_request(tiny_models), store), timeout_s=1.0, pace=Pace(SLOW, 10.0))
    began = time.monotonic()
    trace = Consumer(live).join()
    assert trace.finish_reason == "timeout" and len(trace.steps) == 1
    assert time.monotonic() - began < 9, "ended before the first slowed step was due"


def test_no_run_outlives_its_lifetime_whatever_its_pace(store, tiny_models, monkeypatch) -> None:
    """PLAYGROUND_RUN_LIFETIME_S bounds a run from its start, pauses included: a step-by-step run whose presenter keeps
    pressing "Next step" ends at it (on the old code nothing bounded such a run but its steps)."""
    monkeypatch.setenv("PLAYGROUND_RUN_LIFETIME_S", "2")
    pace = _step_pace()
    live = LiveRun(prepare(_request(tiny_models, tokens=200), store), pace=pace)
    consumer = Consumer(live)
    began = time.monotonic()
    while consumer.thread.is_alive() and time.monotonic() - began < WAIT_S:
        time.sleep(0.3)
        pace.step_on()  # a presenter who is there
    trace = consumer.join()
    # About 2 s / 0.3 s of presses: far fewer than the ~190 steps the old code went on to (it ended only by its
    # run time limit of its own work).
    assert trace.finish_reason == "timeout" and 1 < len(trace.steps) < 20, len(trace.steps)


def test_a_slowed_run_gives_the_same_tokens_and_reports_its_pauses_apart(store, tiny_models) -> None:
    alone = LiveRun(prepare(_request(tiny_models, tokens=8), store)).run()
    pace = Pace(SLOW, 0.25)
    trace = Consumer(LiveRun(prepare(_request(tiny_models, tokens=8), store), pace=pace)).join()
    assert trace.output_ids == alone.output_ids
    assert pace.pauses == len(trace.steps) - 1 and trace.paused_ms > 0
    _assert_tiles(trace)


def test_the_pages_handler_shows_each_step_and_waits_for_next_step(tiny_models) -> None:
    """The page's own handler (`generate_tab.generate`) with the visitor's pace set by the page's handlers: each step
    is on the page with the status "Paused after step n" before the run goes on, and only "Next step" moves it."""
    prompt, kw = "The quick brown fox", dict(target=tiny_models["target"], method="baseline", max_new_tokens=6,
                                             dtype="float32")
    alone = _final(list(generate_tab.generate(prompt, **kw, request=SimpleNamespace(session_hash="unpaced"))))
    request = SimpleNamespace(session_hash="paced")
    presenter.set_pace(STEP, 2.0, request)
    shown_at_pauses = []
    outputs = []
    for out in generate_tab.generate(prompt, **kw, request=request):
        outputs.append(out)
        shown = generate_tab.RUN.read(out)
        if isinstance(shown["status"], str) and "Paused after step" in shown["status"]:
            shown_at_pauses.append(shown["tokens"].count('class="tok"'))
            presenter.step_on(request)
    final = _final(outputs)
    assert shown_at_pauses == [1, 2, 3, 4, 5], "one pause after each step but the last, its token on the page"
    assert final["tokens"] == alone["tokens"], "the tokens of the unpaced run"
    assert 'data-kind="done"' in final["status"] and "at the presenter&#x27;s pace" in final["status"]
    assert final["run_trace"].paused_ms > 0 and alone["run_trace"].paused_ms == 0
    presenter.set_pace(FREE, 2.0, request)
    with pytest.raises(PlaygroundError):
        presenter.set_pace("fast", 2.0, request)
    with pytest.raises(PlaygroundError):
        presenter.set_pace(SLOW, "2", request)


def _final(outputs: list) -> dict:
    """The last of `generate`'s updates, by output name."""
    return generate_tab.RUN.read(outputs[-1])


def test_the_replays_speed_control_sets_plays_interval() -> None:
    from playground.app.replay_tab import replay_speed

    assert replay_speed(3)["value"] == 3.0
    assert replay_speed(0.01)["value"] == 0.25 and replay_speed(100)["value"] == 10.0  # the control's range
    with pytest.raises(PlaygroundError):
        replay_speed("fast")
