"""Hostile followers on a real public server (`playground.app.follow`), speaking Gradio's protocol as a script would:
a session that opens many follower streams gets one (the older end), and a class link whose `follow` is given twice
is read by its first value, as the page's own scripts read the query (`guard.url_query`)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Iterator

import httpx
import pytest
from classroom import CODE_IN_LINK, Visitor, handlers, public_server, text_of

pytestmark = [pytest.mark.server, pytest.mark.models]


@pytest.fixture(scope="module")
def server(tiny_models: dict[str, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    with public_server(tiny_models, "follow-hostile.log") as url:
        yield url, handlers(url)


@pytest.fixture
def room(server: tuple[str, dict[str, Any]]) -> Iterator[str]:
    """A presenter's class code, its room kept open by the page's beat while the test runs."""
    url, deps = server
    presenter = Visitor(url, deps)
    hit = CODE_IN_LINK.search(presenter.call("open_class", [url])[0])
    assert hit is not None
    code = hit.group(1)
    done = threading.Event()

    def beat() -> None:
        while not done.wait(1.0):
            presenter.call("class_tick")

    beating = threading.Thread(target=beat, daemon=True)
    beating.start()
    yield code
    done.set()
    beating.join(30)


def joined_status(visitor: Visitor) -> str:
    outputs = visitor.outputs("join_class", visitor.call("join_class"))
    return text_of(next(v for v in outputs.values() if isinstance(v, str) and "pg-status" in v))


def test_a_session_that_opens_many_follower_streams_keeps_only_its_last(server: tuple[str, dict[str, Any]],
                                                                        room: str) -> None:
    """Before: one session's 40 follower streams all ran, each written every step (3,440 writes in one 96-token
    run); now each newer stream ends the one before it, and the last one keeps following."""
    url, deps = server
    follower = Visitor(url, deps, f"?follow={room}")
    assert "Waiting for the presenter" in joined_status(follower).replace("&#x27;", "'")
    opened = 5
    for _ in range(opened):
        body = follower._body("follow_stream", [None])
        assert follower.http.post(f"{url}gradio_api/queue/join?follow={room}", json=body).status_code == 200
    completed: set[str] = set()
    started: set[str] = set()
    deadline = time.monotonic() + 60
    with httpx.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": follower.session},
                      timeout=30) as events:
        for line in events.iter_lines():  # heartbeats every few seconds keep this loop looking at the deadline
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if message.get("msg") == "process_starts":
                    started.add(message["event_id"])
                elif message.get("msg") == "process_completed":
                    completed.add(message["event_id"])
            if len(started) == opened and len(completed) >= opened - 1 or time.monotonic() > deadline:
                break
    assert len(started) == opened
    assert len(completed) == opened - 1, f"{len(completed)} of {opened} streams of one session ended"
    assert class_takes_followers(url, deps, room)


def class_takes_followers(url: str, deps: dict[str, Any], code: str) -> bool:
    """The class still takes followers after the streams ended: the server keeps serving."""
    return "Waiting for the presenter" in joined_status(Visitor(url, deps, f"?follow={code}")).replace("&#x27;", "'")


@pytest.mark.parametrize("lang, words", [("en", "unknown or its class has ended"), ("ar", "انتهى صفه")])
def test_follow_given_twice_is_read_by_its_first_value(server: tuple[str, dict[str, Any]], room: str, lang: str,
                                                       words: str) -> None:
    """`?follow=CODE&follow=x` follows the class (before: refused, the query's last value read), and
    `?follow=x&follow=CODE` is refused in the visitor's language, as the page's scripts would read it."""
    url, deps = server
    first_valid = Visitor(url, deps, f"?lang={lang}&follow={room}&follow=nonsense")
    assert words not in joined_status(first_valid)
    assert 'data-testid="pg-follow"' in str(first_valid.call("join_class"))
    last_valid = Visitor(url, deps, f"?lang={lang}&follow=nonsense&follow={room}")
    assert words in joined_status(last_valid)
