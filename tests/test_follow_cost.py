"""What a class costs the server besides the presenter's run (`playground.app.follow`): a follower's write goes
through Gradio's own output path (`Blocks.postprocess_data`, `handle_streaming_diffs`) without building a component
or hopping to a thread, and what the class sees is rendered once per step and language, however many follow.
Model-free: the page is built, no server started; the run is a trace grown by hand."""

from __future__ import annotations

import asyncio
import collections
import html
import importlib.util
import json
import sys
from types import SimpleNamespace
from typing import Any

import anyio.to_thread
import pytest
from appserver import run_coroutine_apart
from gradio import blocks as gradio_blocks
from gradio import utils as gradio_utils
from gradio.state_holder import SessionState

from playground import charts, render
from playground.app import follow, page
from playground.i18n import t
from playground.compat import gradio_internals
from playground.rooms import Rooms
from playground.trace import Step, Trace


@pytest.fixture(scope="module")
def demo() -> Any:
    return page.build_ui()


def stream_fn(demo: Any) -> Any:
    return next(fn for fn in demo.fns.values() if getattr(fn, "name", "") == "follow_stream")


def step(index: int) -> Step:
    return Step(index=index, drafted=[5, 6, 7], accepted=2, rejected=[7], emitted=[5, 6, 9],
                drafted_text=["a", "b", "c"], emitted_text=["a", "b", "d"], draft_ms=1.0, verify_ms=2.0)


def room_with_run(stepping: bool) -> tuple[Rooms, Any, Trace]:
    registry = Rooms(max_rooms=2, max_followers=100, grace_s=60.0)
    room = registry.open("presenter")
    trace = Trace(method="prompt_lookup", target="tiny", prompt="p", steps=[step(i) for i in range(6)])
    registry.publish("presenter", trace, lambda: stepping)
    return registry, room, trace


def done(*_: Any) -> tuple[str, str]:
    return "done", ""


@pytest.mark.parametrize("stepping", [False, True], ids=["free pace", "a question open"])
def test_a_followers_write_builds_no_component_and_hops_to_no_thread(demo: Any, stepping: bool,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Gradio builds a component for every update a handler writes (`gr.update`, `gr.skip()`), and postprocesses
    each output in a worker thread: ~2 ms of the server's CPU per write and follower, 60 followers a tenth and more
    of a run. The follower's stream writes values Gradio sends as they are."""
    registry, room, trace = room_with_run(stepping)
    monkeypatch.setattr(follow, "ROOMS", registry)
    registry.join(room.code, "student")
    view = room.view()
    assert (view.question is not None) == stepping
    written = follow._follower_views(room, view, "student", "en", done)
    built, hops = [], []
    block_init, run_sync = gradio_blocks.Block.__init__, anyio.to_thread.run_sync

    def counted_init(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(type(self).__name__)
        block_init(self, *args, **kwargs)

    async def counted_run_sync(*args: Any, **kwargs: Any) -> Any:
        hops.append(args[0])
        return await run_sync(*args, **kwargs)

    monkeypatch.setattr(gradio_blocks.Block, "__init__", counted_init)
    monkeypatch.setattr(anyio.to_thread, "run_sync", counted_run_sync)
    fn, state = stream_fn(demo), SessionState(demo)

    async def writes(n: int) -> list[Any]:
        sent = []
        for _ in range(n):
            data = await demo.postprocess_data(fn, list(written), state)
            sent.append(demo.handle_streaming_diffs(fn, data, "student", f"run-{stepping}", False))
        return sent

    sent = run_coroutine_apart(writes(5))
    assert built == [] and hops == [], (built, hops)
    # What the page gets: the first write whole, the same again nothing to change.
    first = dict(zip(follow.FOLLOWED.names, sent[0]))
    assert first["tokens"].count('class="pg-step') == len(view.steps) and "pg-stats" in first["stats"]
    assert first["acceptance"]["type"] == "plotly" and json.loads(first["acceptance"]["plot"])["data"]
    assert ('data-open' in first["class_question"]) == stepping
    assert all(edits == [] for later in sent[1:] for edits in later)


def test_a_followers_browser_gets_only_the_new_step_of_the_tokens(demo: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gradio sends a streamed value's change as edits; a token view closed at its end (`</div>`) is no longer a
    prefix of the next one, so every write re-sent the whole view (tens of KB a follower, many times a second).
    The follower's tokens only grow at the end, as the presenter's own do: each write appends the new steps."""
    registry, room, trace = room_with_run(False)
    monkeypatch.setattr(follow, "ROOMS", registry)
    registry.join(room.code, "student")
    fn, state = stream_fn(demo), SessionState(demo)
    tokens_at = follow.FOLLOWED.names.index("tokens")

    async def write() -> Any:
        written = follow._follower_views(room, room.view(), "student", "en", done)
        data = await demo.postprocess_data(fn, list(written), state)
        return demo.handle_streaming_diffs(fn, data, "student", "run-grows", False)[tokens_at]

    first = run_coroutine_apart(write())
    for more in range(2):
        trace.steps.append(step(len(trace.steps)))
        edits = run_coroutine_apart(write())
        new_step = render.render_step(trace.steps[-1], lang="en")
        assert [edit[0] for edit in edits] == ["append"] and edits[0][2] == new_step, edits
        first += edits[0][2]
    assert first.count('class="pg-step') == len(trace.steps)


def test_what_the_class_sees_is_rendered_once_per_step_and_language_however_many_follow(
        monkeypatch: pytest.MonkeyPatch) -> None:
    registry, room, trace = room_with_run(False)
    monkeypatch.setattr(follow, "ROOMS", registry)
    calls = {"tokens": 0, "charts": 0}
    render_step, figures = render.render_step, charts.figures

    def counted(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(render, "render_step", counted("tokens", render_step))
    monkeypatch.setattr(charts, "figures", counted("charts", figures))
    followers = [f"student-{i}" for i in range(40)]
    for key in followers:
        registry.join(room.code, key)
    for more in range(3):  # the run grows a step; every follower writes in its own language
        trace.steps.append(step(len(trace.steps)))
        view = room.view()
        for i, key in enumerate(followers):
            follow._follower_views(room, view, key, ("en", "ru", "ar")[i % 3], done)
        assert calls["tokens"] == 3 * (6 + more + 1), calls  # each step once per language, the earlier kept
        assert calls["charts"] <= 3 * (more + 1), calls


def test_gradio_looks_for_a_missing_matplotlib_once() -> None:
    """Gradio imports matplotlib around every call it runs (a follower's every write): where it is not installed,
    each attempt searched the whole import path again."""
    if importlib.util.find_spec("matplotlib") is not None and sys.modules.get("matplotlib", 0) is not None:
        pytest.skip("matplotlib is installed here: nothing to spare")
    looked: list[str] = []

    class Counting:
        @staticmethod
        def find_spec(name: str, *_: Any) -> None:
            if name == "matplotlib":
                looked.append(name)

    saved = sys.modules.pop("matplotlib", "absent")
    sys.meta_path.insert(0, Counting)
    try:
        gradio_internals.spare_missing_matplotlib()
        before = len(looked)
        for _ in range(20):
            with gradio_utils.MatplotlibBackendMananger():
                pass
        assert len(looked) == before, f"the import path searched {len(looked) - before} times for 20 calls"
        assert importlib.util.find_spec("matplotlib") is None
    finally:
        sys.meta_path.remove(Counting)
        sys.modules.pop("matplotlib", None)
        if saved != "absent":
            sys.modules["matplotlib"] = saved  # type: ignore[assignment]


def test_a_class_runs_on_its_rooms_one_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The room's watch wakes its followers' streams together when a write is due; a stream sets no timer and starts
    no task of its own. Each follower's own clock (a timeout, a wait for a write not yet due, a look of its own
    every second) cost the server's event loop a task and timers per follower several times a step: on a busy
    machine 60 such clocks scattered the class's work over the run and held the loop the presenter's stream needs.
    What the followers see is the same: every step, the run's end, and the class's end."""
    registry, room, trace = room_with_run(False)
    monkeypatch.setattr(follow, "ROOMS", registry)
    monkeypatch.setattr(follow, "LOOK_EVERY_S", 0.005)
    monkeypatch.setattr(follow, "FREE_EVERY_S", 0.02)
    monkeypatch.setattr(follow, "LOOK_AGAIN_S", 0.05)
    stream = follow.stream_for(done)
    keys = [f"student-{i}" for i in range(12)]
    for key in keys:
        registry.join(room.code, key)
    own: collections.Counter[str] = collections.Counter()

    async def follower(key: str) -> list[Any]:
        return [written async for written in stream(room.code, SimpleNamespace(session_hash=key, headers={}))]

    async def class_of_twelve() -> list[list[Any]]:
        loop = asyncio.get_running_loop()
        followers = [loop.create_task(follower(key), name=key) for key in keys]
        call_at, create_task = loop.call_at, loop.create_task

        def in_a_follower() -> bool:
            task = asyncio.current_task(loop)
            return task is not None and task.get_name().startswith("student-")

        def counted_call_at(*args: Any, **kwargs: Any) -> Any:
            own["timers"] += in_a_follower()
            return call_at(*args, **kwargs)

        def counted_create_task(coro: Any, **kwargs: Any) -> Any:  # the room's watch, started by its first follower
            own["tasks"] += in_a_follower() and coro.__qualname__ != "_Watch._watching"
            return create_task(coro, **kwargs)

        loop.call_at, loop.create_task = counted_call_at, counted_create_task  # type: ignore[method-assign, assignment]
        for _ in range(12):  # the run grows faster than the followers are written, then ends
            await asyncio.sleep(0.01)
            trace.steps.append(step(len(trace.steps)))
        trace.finish_reason = "length"
        while any(tokens_of(key) < len(trace.steps) for key in keys):
            await asyncio.sleep(0.01)
        for key in keys:  # the class leaves: every stream ends
            registry.leave(key)
        return await asyncio.wait_for(asyncio.gather(*followers), 30)

    def tokens_of(key: str) -> int:
        views = [v for k, v in registry._rooms[room.code].rendered.items() if k[0] == "tokens"]
        return len(views[0][1]) if views else 0

    written = run_coroutine_apart(class_of_twelve())
    assert own == collections.Counter(), f"the followers' own clocks: {dict(own)}"
    tokens_at, status_at = follow.FOLLOWED.names.index("tokens"), follow.FOLLOWED.names.index("status")
    for writes in written:
        assert writes[-2][tokens_at].count('class="pg-step') == len(trace.steps) == 18
        assert 'data-kind="done"' in writes[-2][status_at]
        assert html.escape(t("follow.ended", "en")) in writes[-1][status_at]


def test_a_run_at_the_free_pace_writes_each_follower_at_most_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower's write costs the server per message, not per byte (one message through Gradio's queue and one
    socket write per follower and write), and at the free pace the writes were due every 0.5 s of wall time: a 4 s
    run wrote every follower 8 times. Now at most once a second (`follow.FREE_EVERY_S`), on the room's clock, here a
    clock of the test's own (no timing in the assertion: the run's 4 s are the clock's, advanced a tenth a step). What
    the followers see stays whole: the steps only grow, the run's end is written at once, then the class's end."""
    registry, room, trace = room_with_run(False)
    monkeypatch.setattr(follow, "ROOMS", registry)
    now = [1000.0]
    monkeypatch.setattr(follow, "time", SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(follow, "LOOK_EVERY_S", 0.001)  # the watch looks between any two of the test's steps
    stream = follow.stream_for(done)
    keys = [f"student-{i}" for i in range(6)]
    for key in keys:
        registry.join(room.code, key)
    tokens_at, status_at = follow.FOLLOWED.names.index("tokens"), follow.FOLLOWED.names.index("status")
    writes: dict[str, list[tuple[float, Any]]] = {key: [] for key in keys}  # each follower's writes, at the clock's time

    async def follower(key: str) -> None:
        async for written in stream(room.code, SimpleNamespace(session_hash=key, headers={})):
            writes[key].append((now[0], written))

    def ended_run(key: str) -> bool:
        return bool(writes[key]) and 'data-kind="done"' in writes[key][-1][1][status_at]

    async def a_class_following_a_free_run() -> None:
        loop = asyncio.get_running_loop()
        followers = [loop.create_task(follower(key)) for key in keys]
        while not all(writes.values()):  # each stream's first write: the run as it stands
            await asyncio.sleep(0.005)
        for _ in range(40):  # 4 s of the run's clock, a step every tenth
            trace.steps.append(step(len(trace.steps)))
            now[0] += 0.1
            await asyncio.sleep(0.005)
        trace.finish_reason = "length"
        while not all(ended_run(key) for key in keys):  # the run's end: written at once (the clock stands)
            await asyncio.sleep(0.005)
        for key in keys:  # the class leaves; the clock goes on until every stream has looked again and ended
            registry.leave(key)
        while not all(task.done() for task in followers):
            now[0] += 0.1
            await asyncio.sleep(0.005)
        await asyncio.gather(*followers)

    run_coroutine_apart(a_class_following_a_free_run())
    for key in keys:
        during = [at - 1000.0 for at, _ in writes[key][1:-2]]  # after the first write, before the run's end
        assert len(during) <= 4 + 1, during  # the old code (due every 0.5 s): 7 or 8 in the run's 4 s
        counts = [w[tokens_at].count('class="pg-step') for _, w in writes[key][:-1]]
        assert counts == sorted(counts) and counts[-1] == len(trace.steps) == 46, counts
        assert html.escape(t("follow.ended", "en")) in writes[key][-1][1][status_at]
