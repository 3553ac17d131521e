"""Follow the presenter on a real public server (`playground.app.follow`, `playground.rooms`), its visitors speaking
Gradio's own protocol (`classroom.Visitor`): a presenter steps through a run at the step-by-step pace with a class link
open; a follower sees the run step by step, answers "kept or refused?", opens a token's microscope; the presenter's
page shows the tally and the answer; an unknown code is refused in words; a follower cannot step the run."""

from __future__ import annotations

import re
import threading
import time
from typing import Any, Iterator

import pytest
from classroom import (
    CODE_IN_LINK,
    Visitor,
    handlers,
    public_server,
    shown_after,
    steps_in,
    text_of,
)

pytestmark = [pytest.mark.server, pytest.mark.models]

PROMPT = "one two three four five six seven eight nine ten"


@pytest.fixture(scope="module")
def server(tiny_models: dict[str, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    with public_server(tiny_models, "follow-server.log") as url:
        yield url, handlers(url)


def run_args(models: dict[str, str], tokens: int = 24) -> list[Any]:
    return [PROMPT, models["target"], models["noisy"], "speculative", {"num_assistant_tokens": 3}, tokens, False, 1.0,
            1.0, 0, 0, "off", "float32", False, None]


def until(check: Any, what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def paused_after(status_html: Any, least: int = 1) -> int | None:
    """The step after which the presenter's run stands paused, as its status box says, if it is `least` or later
    (None: it does not stand paused, or stands before it)."""
    found = re.search(r"Paused after step (\d+)", text_of(status_html))
    return int(found.group(1)) if found and int(found.group(1)) >= least else None


class Watched:
    """A queued handler's stream read in a thread: its latest outputs, and all of them."""

    def __init__(self, visitor: Visitor, name: str, data: list[Any]) -> None:
        self.seen: list[list[Any]] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._read, args=(visitor, name, data), daemon=True)
        self.thread.start()

    def _read(self, visitor: Visitor, name: str, data: list[Any]) -> None:
        try:
            for outputs in visitor.stream(name, data):
                self.seen.append(shown_after(self.last, outputs))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    @property
    def last(self) -> list[Any]:
        """What the page shows now: each output's latest value (a skip leaves it as it was)."""
        return self.seen[-1] if self.seen else [None] * 9


def test_a_follower_sees_the_presenters_run_step_by_step_and_the_class_answers(
        server: tuple[str, dict[str, Any]], tiny_models: dict[str, str]) -> None:
    url, deps = server
    presenter, follower = Visitor(url, deps), Visitor(url, deps)
    presenter.call("set_pace", ["step", 1.0])
    link = presenter.call("open_class", [url])[0]
    hit = CODE_IN_LINK.search(link)
    assert hit is not None
    code = hit.group(1)
    assert "<svg" in link and f"{url}?follow={code}" in link.replace("&amp;", "&")
    follower.query = f"?follow={code}"
    joined = follower.call("join_class")
    assert "follow" in text_of(str(joined)).lower()

    run = Watched(presenter, "generate", run_args(tiny_models))
    view = Watched(follower, "follow_stream", [None])
    # The run stands after its first step; the class is asked about it (its drafts shown, its fate not).
    until(lambda: "pg-class-question" in str(view.last[5]), "the class's first question", 240)
    hit = re.search(r'data-asked="(\d+)"', view.last[5])
    assert hit is not None
    asked = int(hit.group(1))
    assert steps_in(view.last[0]) == asked  # every step before the question, none after
    follower.call("answer_kept")
    with pytest.raises(RuntimeError, match="already answered"):
        follower.call("answer_refused")
    tally = presenter.call("class_tick")[0]
    assert 'data-followers="1"' in tally and "kept 1 · refused 0" in text_of(tally), tally
    # A follower's "Next step" is their own page's: it is not a press of the presenter's. Presses are counted (a
    # paused run takes one step per press), so had it counted, each of the presenter's presses below would leave
    # the run standing one step further than it does: it stands paused after step `paused` + the presses so far.
    paused = until(lambda: paused_after(run.last[4]), "the presenter's run standing paused")
    assert steps_in(run.last[0]) == paused
    follower.call("step_on")
    # Step by step: each press of the presenter's moves the run one step and shows the class one more step.
    for press in range(1, 4):
        before = steps_in(view.last[0])
        presenter.call("step_on")
        until(lambda: steps_in(view.last[0]) > before, f"the follower's view after press {press}")
        assert steps_in(view.last[0]) == before + 1
        stands = until(lambda: paused_after(run.last[4], paused + press),
                       f"the presenter's run standing paused again after press {press}")
        assert stands == paused + press and steps_in(run.last[0]) == stands, (stands, paused, press)
    tally = text_of(presenter.call("class_tick")[0])
    assert f"Step {asked + 1}: the target" in tally and "right answers: " in tally and "/1." in tally, tally
    assert "You said kept" in text_of(view.last[5]) or steps_in(view.last[0]) > asked + 1
    # The microscope on a token the class was shown, from the room's trace.
    panel = follower.call("open_token", [None], event_data={"step": 0, "pos": 0})[0]
    assert 'data-testid="pg-micro"' in panel and 'data-step="0"' in panel and "data-empty" not in panel
    # ... and not on the step under question (its fate is the answer).
    hit = re.search(r'data-asked="(\d+)"', view.last[5])
    assert hit is not None
    hidden = int(hit.group(1))
    panel = follower.call("open_token", [None], event_data={"step": hidden, "pos": 0})[0]
    assert 'data-empty="true"' in panel
    # The rest at the free pace: the follower ends with the presenter's whole output and the done status.
    presenter.call("set_pace", ["free", 1.0])
    presenter.call("step_on")
    run.thread.join(120)
    assert run.error is None and 'data-kind="done"' in run.last[4]
    # Every pause the run made, in order, from its whole stream: one after each of the presenter's three presses and
    # none more (a pause a moment ahead of the wait above, a press counted twice, shows here).
    pauses = [after for after in map(paused_after, (shown[4] for shown in run.seen)) if after]
    assert [p for i, p in enumerate(pauses) if i == 0 or p != pauses[i - 1]] == \
        [paused, paused + 1, paused + 2, paused + 3], pauses
    until(lambda: 'data-kind="done"' in str(view.last[2]), "the follower's finished view")
    assert steps_in(view.last[0]) == steps_in(run.last[0])
    assert text_of(view.last[0]) == text_of(run.last[0])
    # The follower stops following (their own Generate): their stream ends.
    follower.call("leave_class")
    view.thread.join(30)
    assert not view.thread.is_alive() and view.error is None


@pytest.mark.parametrize("lang, words", [("en", "unknown or its class has ended"),
                                         ("ru", "занятие уже закончилось"), ("ar", "انتهى صفه")])
def test_an_unknown_code_is_refused_in_the_visitors_language(server: tuple[str, dict[str, Any]], lang: str,
                                                             words: str) -> None:
    url, deps = server
    for code in ("A" * 16, "nonsense"):
        visitor = Visitor(url, deps, f"?follow={code}&lang={lang}")
        joined = visitor.outputs("join_class", visitor.call("join_class"))
        status = next(v for v in joined.values() if isinstance(v, str) and "pg-status" in v)
        assert 'data-kind="error"' in status and words in text_of(status)


def test_a_class_larger_than_gradios_workers_leaves_room_for_runs_and_sees_every_step(
        server: tuple[str, dict[str, Any]], tiny_models: dict[str, str]) -> None:
    """Every follower's stream runs in Gradio's queue as long as its page is open, and the queue runs at most 40
    events at once (`launch(max_threads=40)`): 45 followers held every worker and the presenter's run never started.
    The run starts and ends while they follow, and each follower ends with every step of it, in order."""
    url, deps = server
    presenter = Visitor(url, deps)
    presenter.call("set_pace", ["free", 1.0])
    hit = CODE_IN_LINK.search(presenter.call("open_class", [url])[0])
    assert hit is not None
    code = hit.group(1)
    followers = [Visitor(url, deps, f"?follow={code}") for _ in range(45)]
    watched = []
    try:
        for follower in followers:
            follower.call("join_class")
            watched.append(Watched(follower, "follow_stream", [None]))
        until(lambda: all(w.seen for w in watched), "every follower's stream writing", 120)
        run = Watched(presenter, "generate", run_args(tiny_models, 16))
        run.thread.join(180)
        assert not run.thread.is_alive(), "the presenter's run did not end while 45 followers followed"
        assert run.error is None and 'data-kind="done"' in run.last[4]
        steps = steps_in(run.last[0])
        assert steps >= 2
        until(lambda: all(steps_in(w.last[0]) == steps for w in watched), "every follower shown the whole run", 120)
        for w in watched:
            assert re.findall(r'class="pg-step[^"]*" data-step="(\d+)"', w.last[0]) == [str(i) for i in range(steps)]
            assert text_of(w.last[0]) == text_of(run.last[0])
            shown = [steps_in(seen[0]) for seen in w.seen]
            assert shown == sorted(shown)  # steps arrive in order, never taken back
    finally:
        for follower in followers:
            follower.call("leave_class")
        for w in watched:
            w.thread.join(30)
        for follower in followers:
            follower.close()
