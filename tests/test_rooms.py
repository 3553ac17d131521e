"""Rooms for a class following its presenter (`playground.rooms`): codes, bounds, expiry, what followers are shown,
and the rules of the class's answers. Pure: no model, no server."""

from __future__ import annotations

import re

import pytest

from playground.errors import localized_message
from playground.rooms import CODE, FOLLOWER_GONE_S, KEPT, REFUSED, RoomError, Rooms
from playground.trace import Step, Trace


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def step(index: int, refused: bool) -> Step:
    """A step drafting two tokens: both kept (and a bonus), or the second refused (and a correction)."""
    if refused:
        return Step(index=index, drafted=[5, 6], accepted=1, rejected=[6], emitted=[5, 7], drafted_text=["a", "b"],
                    emitted_text=["a", "c"])
    return Step(index=index, drafted=[5, 6], accepted=2, rejected=[], emitted=[5, 6, 8], drafted_text=["a", "b"],
                emitted_text=["a", "b", "d"])


def rooms(**limits: float) -> tuple[Rooms, Clock]:
    clock = Clock()
    defaults = dict(max_rooms=3, max_followers=2, grace_s=60.0)
    return Rooms(**{**defaults, **limits}, clock=clock), clock  # type: ignore[arg-type]


def test_codes_are_unguessable_and_one_per_presenter() -> None:
    registry, _ = rooms(max_rooms=100)
    codes = {registry.open(f"presenter-{i}").code for i in range(50)}
    assert len(codes) == 50
    for code in codes:
        assert CODE.fullmatch(code) and len(code) * 6 >= 64  # url-safe base64: 6 bits a character, 96 in all
    assert registry.open("presenter-3").code in codes  # the presenter's own room again, not a new one
    assert len(registry) == 50


def test_an_unknown_or_malformed_code_is_refused_in_words() -> None:
    registry, _ = rooms()
    registry.open("presenter")
    for code in ("A" * 16, "short", None, 12, "../../etc/passwd", "A" * 15 + "!"):
        with pytest.raises(RoomError) as refused:
            registry.join(code, "student")
        assert refused.value.key == "error.room.unknown"
    assert "ended" in localized_message(refused.value, "en")
    assert "закончилось" in localized_message(refused.value, "ru")
    assert "انتهى" in localized_message(refused.value, "ar")


def test_the_number_of_rooms_and_of_followers_is_bounded() -> None:
    registry, clock = rooms()
    codes = [registry.open(f"p{i}").code for i in range(3)]
    with pytest.raises(RoomError) as full:
        registry.open("p3")
    assert full.value.key == "error.room.full"
    registry.join(codes[0], "s1")
    registry.join(codes[0], "s2")
    registry.join(codes[0], "s1")  # the same follower again takes no second place
    with pytest.raises(RoomError) as crowded:
        registry.join(codes[0], "s3")
    assert crowded.value.key == "error.room.followers_full"
    # A follower whose page closed (its stream stopped looking) gives its place back.
    clock.now += FOLLOWER_GONE_S + 1
    registry.look(codes[0], "s1")  # s1 still looks; s2 has gone silent
    registry.join(codes[0], "s3")
    # Leaving frees the place at once.
    registry.leave("s3")
    registry.join(codes[0], "s4")


def test_a_room_ends_after_its_presenter_left_and_frees_what_it_held() -> None:
    registry, clock = rooms(grace_s=60.0)
    room = registry.open("presenter")
    code = room.code
    trace = Trace(method="prompt_lookup", target="t", prompt="p", steps=[step(0, False)])
    assert registry.publish("presenter", trace, lambda: False)
    registry.join(code, "student")
    clock.now += 59
    assert registry.tally("presenter") is not None  # the presenter's page beats: the room stays
    clock.now += 59
    assert registry.look(code, "student") is room  # followers looking do not keep it open
    clock.now += 2
    assert registry.look(code, "student") is None
    assert len(registry) == 0 and registry.followed("student") is None
    assert room.trace is None and not room.followers and not room.rendered
    with pytest.raises(RoomError):
        registry.join(code, "student")
    assert not registry.publish("presenter", trace, lambda: False)  # no room: nothing is kept


def test_followers_see_the_run_but_not_the_fate_of_the_step_under_question() -> None:
    registry, _ = rooms()
    code = registry.open("presenter").code
    stepping = [True]
    trace = Trace(method="prompt_lookup", target="t", prompt="p", steps=[step(0, False), step(1, True)])
    registry.publish("presenter", trace, lambda: stepping[0])
    room = registry.join(code, "student")
    view = room.view()
    assert [s.index for s in view.steps] == [0] and view.question is not None and view.question.index == 1
    trace.steps.append(step(2, False))  # the presenter stepped on: step 1 is shown, step 2 is asked
    view = room.view()
    assert [s.index for s in view.steps] == [0, 1] and view.question is not None and view.question.index == 2
    stepping[0] = False  # at the free pace nothing is held back
    assert [s.index for s in room.view().steps] == [0, 1, 2] and room.view().question is None
    stepping[0] = True
    trace.finish_reason = "length"  # a finished run hides nothing
    assert len(room.view().steps) == 3 and room.view().question is None and room.view().finished
    # A step the target judged no draft of asks nothing and is shown at once.
    trace.finish_reason = ""
    trace.steps.append(Step(index=3, drafted=[], accepted=0, rejected=[], emitted=[9], emitted_text=["x"]))
    assert len(room.view().steps) == 4 and room.view().question is None


def test_one_answer_per_follower_per_step_counted_until_the_presenter_steps_on() -> None:
    registry, _ = rooms(max_followers=10)
    code = registry.open("presenter").code
    trace = Trace(method="prompt_lookup", target="t", prompt="p", steps=[step(0, True)])
    registry.publish("presenter", trace, lambda: True)
    for name in ("a", "b", "c"):
        registry.join(code, name)
    assert registry.answer("a", 0, KEPT) == KEPT
    registry.answer("b", 0, REFUSED)
    registry.answer("c", 0, REFUSED)
    with pytest.raises(RoomError) as twice:
        registry.answer("a", 0, REFUSED)
    assert twice.value.key == "error.room.answered"
    for bad in ("maybe", None, ["kept"], 1):
        with pytest.raises(RoomError) as wrong:
            registry.answer("a", 0, bad)
        assert wrong.value.key == "error.room.answer"
    with pytest.raises(RoomError) as other_step:
        registry.answer("a", 5, KEPT)
    assert other_step.value.key == "error.room.closed"
    with pytest.raises(RoomError):
        registry.answer("stranger", 0, KEPT)  # not following: no vote
    tally = registry.tally("presenter")
    assert tally is not None
    assert tally.followers == 3 and tally.asked == 0 and tally.asked_tally == (1, 2)
    assert tally.answered is None
    trace.steps.append(step(1, False))  # the presenter steps on
    with pytest.raises(RoomError) as late:
        registry.answer("b", 0, KEPT)
    assert late.value.key == "error.room.closed"
    tally = registry.tally("presenter")
    assert tally is not None
    assert tally.asked == 1 and tally.asked_tally == (0, 0)
    assert tally.answered is not None and tally.answered.index == 0 and tally.answered_tally == (1, 2) and tally.answered.rejected
    # A new run: the answers of the run before are gone.
    registry.publish("presenter", Trace(method="prompt_lookup", target="t", prompt="p", steps=[step(0, True)]),
                     lambda: True)
    tally = registry.tally("presenter")
    assert tally is not None and tally.asked_tally == (0, 0) and registry.answer_given("a", 0) is None


def test_only_the_current_and_the_last_asked_step_keep_answers() -> None:
    registry, _ = rooms()
    code = registry.open("presenter").code
    trace = Trace(method="prompt_lookup", target="t", prompt="p", steps=[])
    registry.publish("presenter", trace, lambda: True)
    registry.join(code, "a")
    room = registry.followed("a")
    for i in range(6):
        assert room is not None
        trace.steps.append(step(i, i % 2 == 1))
        registry.answer("a", i, KEPT)
        assert set(room.answers) <= {i - 1, i}
    assert re.fullmatch(r"[A-Za-z0-9_-]{16}", code)
