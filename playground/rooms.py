"""Rooms: a class following its presenter's run on its own screens (torch-free, Gradio-free).

A presenter's page opens a room (`Rooms.open`): a code from `secrets` (96 random bits) that students open as
``?follow=CODE``. The presenter's current run is published into it (`Rooms.publish`: its live `Trace`, which the
run's consumer grows step by step, and whether the presenter's pace stops after each step); followers read what is
shown of it (`Room.view`) and never touch the models. Nothing about the presenter but the run is kept: the room
knows the presenter by their session key only to find their room, and never shows it.

Ask the class: while a run at the step-by-step pace stands after a step whose drafts the target judged, that step's
fate is the class's question: followers see its drafted tokens, not what the target did with them, and each may answer
once, "kept" (the target keeps every drafted token) or "refused" (it refuses one); the step is shown, and the answer
with the tally, once the presenter steps on. Answers live in the room only (the current and the last asked step).

Bounds: at most `PLAYGROUND_MAX_ROOMS` rooms and `PLAYGROUND_ROOM_FOLLOWERS` followers a room (a follower counts while its
stream is alive, `FOLLOWER_GONE_S`); a room whose presenter has not been heard of for `PLAYGROUND_ROOM_GRACE_S`
ends, and with it everything it held.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import PlaygroundError
from .settings import get_settings
from .trace import Step, Trace, short_repr

CODE_BYTES = 12  # 96 random bits: `secrets.token_urlsafe` writes them as 16 characters
CODE = re.compile(r"[A-Za-z0-9_-]{16}")
SWEEP_EVERY_S = 1.0  # how often ended rooms are looked for (each sweep reads the settings)
FOLLOWER_GONE_S = 30.0  # a follower whose stream has not looked for this long no longer counts (its page closed)
KEPT, REFUSED = "kept", "refused"
ANSWERS = (KEPT, REFUSED)


class RoomError(PlaygroundError):
    """A class link that cannot be followed, or an answer that cannot count: one line for the visitor."""


def answer_of(step: Step) -> str:
    """What the target did with a step's judged drafts: refused one of them, or kept them all."""
    return REFUSED if step.rejected else KEPT


def asks(step: Step) -> bool:
    """Whether a step makes a question: the target judged at least one of its drafts."""
    return step.verified_drafts > 0


@dataclass(frozen=True)
class RoomView:
    """What followers are shown of the room now: the run's steps whose fate is known to the class, the step under
    question (its drafts only), whether the run has finished."""

    run: int  # runs published into the room so far (0: none yet)
    trace: Trace | None  # the run's trace (its steps as the presenter's page has them; show only `steps`)
    steps: tuple[Step, ...] = ()
    question: Step | None = None
    finished: bool = False

    @property
    def version(self) -> tuple[Any, ...]:
        """Changes whenever what followers see changes (a follower's stream re-renders only then)."""
        asked = self.question.index if self.question is not None else None
        return self.run, len(self.steps), asked, self.finished


@dataclass
class Room:
    code: str
    owner: str  # the presenter's session key: never shown to a follower
    seen: float  # when the presenter was last heard of (their page's beat, a run published)
    trace: Trace | None = None
    run: int = 0
    stepping: Callable[[], bool] = lambda: False  # whether the presenter's pace stops after each step
    fill: Callable[[int], None] | None = None  # fills in a step's figures (the microscope's) from the run's own data
    followers: dict[str, float] = field(default_factory=dict)  # follower's session key -> last looked
    answers: dict[int, dict[str, str]] = field(default_factory=dict)  # step index -> follower -> answer (this run)
    asked_of: dict[str, int] = field(default_factory=dict)  # follower -> the question's step their page shows
    rendered: dict[Any, Any] = field(default_factory=dict)  # the renderers' output per version and language (a cache)

    def view(self) -> RoomView:
        trace = self.trace
        if trace is None:
            return RoomView(self.run, None)
        steps = list(trace.steps)  # a copy: the run's consumer appends to the list meanwhile
        finished = bool(trace.finish_reason)
        question = None
        if steps and not finished and self.stepping() and asks(steps[-1]):
            question = steps.pop()  # the presenter has not stepped on: its fate is still the class's question
        return RoomView(self.run, trace, tuple(steps), question, finished)

    def present(self, now: float) -> int:
        """Followers whose stream looked within `FOLLOWER_GONE_S` (the others are dropped)."""
        for key in [k for k, seen in self.followers.items() if now - seen > FOLLOWER_GONE_S]:
            del self.followers[key]
        return len(self.followers)

    def tally(self, step_index: int) -> tuple[int, int]:
        """(kept, refused): the class's answers for a step."""
        given = list(self.answers.get(step_index, {}).values())
        return given.count(KEPT), given.count(REFUSED)


@dataclass(frozen=True)
class Tally:
    """The presenter's view of the class: who follows, the open question's tally, the last answered step's."""

    followers: int
    asked: int | None = None  # the open question's step index
    asked_tally: tuple[int, int] = (0, 0)
    answered: Step | None = None  # the last step the class answered for, now shown (its fate is the answer)
    answered_tally: tuple[int, int] = (0, 0)


class Rooms:
    """Every room of the process, under one lock. Limits are read from the settings on every call (`None`), or given
    (tests); `clock` is the monotonic clock (tests pass their own)."""

    def __init__(self, max_rooms: int | None = None, max_followers: int | None = None, grace_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._limits = (max_rooms, max_followers, grace_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._rooms: dict[str, Room] = {}  # code -> room
        self._by_owner: dict[str, str] = {}  # presenter's session key -> code
        self._following: dict[str, str] = {}  # follower's session key -> code
        self._swept = float("-inf")

    def _limit(self, i: int) -> Any:
        given = self._limits[i]
        if given is not None:
            return given
        s = get_settings()
        return (s.max_rooms, s.room_followers, s.room_grace_s)[i]

    def _sweep(self, now: float) -> None:
        """End the rooms whose presenter left more than the grace period ago (lock held; at most every SWEEP_EVERY_S:
        followers look several times a second)."""
        if now - self._swept < SWEEP_EVERY_S:
            return
        self._swept = now
        grace = self._limit(2)
        for code in [c for c, room in self._rooms.items() if now - room.seen > grace]:
            self._end(code)

    def _end(self, code: str) -> None:
        room = self._rooms.pop(code)
        self._by_owner.pop(room.owner, None)
        for key in room.followers:
            if self._following.get(key) == code:
                del self._following[key]
        room.followers.clear()
        room.answers.clear()
        room.asked_of.clear()
        room.rendered.clear()
        room.trace = room.fill = None

    def __len__(self) -> int:
        with self._lock:
            self._sweep(self._clock())
            return len(self._rooms)

    # ----------------------------------------------------------------- the presenter's side

    def open(self, owner: str) -> Room:
        """The presenter's room (the one they have, or a new one with a fresh code); refused when the server has as
        many rooms as it takes."""
        with self._lock:
            now = self._clock()
            self._sweep(now)
            code = self._by_owner.get(owner)
            if code is not None:
                room = self._rooms[code]
                room.seen = now
                return room
            if len(self._rooms) >= self._limit(0):
                raise RoomError.keyed("error.room.full", limit=self._limit(0))
            code = secrets.token_urlsafe(CODE_BYTES)
            room = self._rooms[code] = Room(code=code, owner=owner, seen=now)
            self._by_owner[owner] = code
            return room

    def _heard_from(self, owner: str) -> Room | None:
        """The presenter's room, now that they were heard from (lock held)."""
        now = self._clock()
        self._sweep(now)
        code = self._by_owner.get(owner)
        if code is None:
            return None
        room = self._rooms[code]
        room.seen = now
        return room

    def owned(self, owner: str) -> Room | None:
        """The presenter's room, if they opened one and it has not ended; hearing from them keeps it open."""
        with self._lock:
            return self._heard_from(owner)

    def publish(self, owner: str, trace: Trace, stepping: Callable[[], bool],
                fill: Callable[[int], None] | None = None) -> bool:
        """The presenter starts a run: it becomes their room's (if they have one; False if not). The room reads the
        trace as the run grows it; the class's answers of the run before are dropped."""
        with self._lock:
            room = self._heard_from(owner)
            if room is None:
                return False
            room.trace, room.stepping, room.fill = trace, stepping, fill
            room.run += 1
            room.answers.clear()
            room.rendered.clear()
            return True

    def tally(self, owner: str) -> Tally | None:
        """What the presenter's page shows of the class (None without a room)."""
        room = self.owned(owner)
        if room is None:
            return None
        with self._lock:
            view = room.view()
            followers = room.present(self._clock())
            asked = view.question.index if view.question is not None else None
            answered = next((s for s in reversed(view.steps) if s.index in room.answers), None)
            return Tally(followers, asked, room.tally(asked) if asked is not None else (0, 0), answered,
                         room.tally(answered.index) if answered is not None else (0, 0))

    # ----------------------------------------------------------------- the followers' side

    def join(self, code: Any, follower: str) -> Room:
        """A follower opens the class link: refused in words when the code is unknown or its room ended, or the room
        has as many followers as it takes."""
        with self._lock:
            now = self._clock()
            self._sweep(now)
            room = self._rooms.get(code) if isinstance(code, str) and CODE.fullmatch(code) else None
            if room is None:
                raise RoomError.keyed("error.room.unknown")
            if follower == room.owner:
                return room  # the presenter's own page opened as a follower: it shows their run, as theirs does
            if follower not in room.followers and room.present(now) >= self._limit(1):
                raise RoomError.keyed("error.room.followers_full", limit=self._limit(1))
            previous = self._following.get(follower)
            if previous is not None and previous != code and previous in self._rooms:
                self._rooms[previous].followers.pop(follower, None)
            room.followers[follower] = now
            self._following[follower] = code
            return room

    def look(self, code: str, follower: str) -> Room | None:
        """The room a follower follows, as its stream looks again (None: it ended, or the follower left it)."""
        with self._lock:
            now = self._clock()
            self._sweep(now)
            room = self._rooms.get(code)
            if room is None or self._following.get(follower) != code and follower != room.owner:
                return None
            if follower != room.owner:
                room.followers[follower] = now
            return room

    def followed(self, follower: str) -> Room | None:
        """The room this visitor follows, if any."""
        with self._lock:
            code = self._following.get(follower)
            return self._rooms.get(code) if code is not None else None

    def leave(self, follower: str) -> None:
        """The follower stops following (their page closed, or they run their own)."""
        with self._lock:
            code = self._following.pop(follower, None)
            room = self._rooms.get(code) if code is not None else None
            if room is not None:
                room.followers.pop(follower, None)
                room.asked_of.pop(follower, None)

    def shown(self, room: Room, follower: str, question: Step | None) -> None:
        """The follower's page now shows `question` (or none): their answer counts for that step only."""
        with self._lock:
            if question is None:
                room.asked_of.pop(follower, None)
            else:
                room.asked_of[follower] = question.index

    def asked(self, follower: str) -> int | None:
        """The question's step the follower's page shows, if any (what their answer is for)."""
        with self._lock:
            room = self._rooms.get(self._following.get(follower, ""))
            return room.asked_of.get(follower) if room is not None else None

    def answer(self, follower: str, step_index: Any, choice: Any) -> str:
        """A follower's answer for the open question's step: counted once; refused in words when it is not one of
        `ANSWERS`, the presenter has stepped on, or the follower already answered. Returns the answer."""
        if choice not in ANSWERS:
            raise RoomError.keyed("error.room.answer", got=short_repr(choice, 40))
        with self._lock:
            code = self._following.get(follower)
            room = self._rooms.get(code) if code is not None else None
            if room is None:
                raise RoomError.keyed("error.room.unknown")
            question = room.view().question
            if question is None or step_index != question.index or isinstance(step_index, bool):
                shown = step_index + 1 if isinstance(step_index, int) and not isinstance(step_index, bool) else "?"
                raise RoomError.keyed("error.room.closed", step=shown)
            given = room.answers.setdefault(question.index, {})
            if follower in given:
                raise RoomError.keyed("error.room.answered", step=question.index + 1)
            given[follower] = choice
            for index in [i for i in room.answers if i < question.index]:
                if index != max(i for i in room.answers if i < question.index):
                    del room.answers[index]  # the question before stays (its tally shows after the step)
            return choice

    def answer_given(self, follower: str, step_index: int) -> str | None:
        """The follower's answer for a step, if they gave one."""
        with self._lock:
            room = self._rooms.get(self._following.get(follower, ""))
            return room.answers.get(step_index, {}).get(follower) if room is not None else None


ROOMS = Rooms()
