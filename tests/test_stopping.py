"""The step boundary's decision (`engine.stopping.at_boundary`), a pure function of what the boundary sees, and the
boundary object (`_Stop`) built whole: no model, no thread. What it then does between steps (pause at a pace, let
another run step, give way) is checked with real runs in tests/test_turns.py, tests/test_pace.py, tests/test_places.py.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from playground.engine.stopping import Attempt, Next, Seen, Verdict, _Stop, at_boundary, last_step

NOW = 100.0


def seen(**kw: object) -> Seen:
    """A boundary where nothing stops the run and nothing waits: every field as a quiet step leaves it."""
    base: dict[str, object] = dict(now=NOW, timed_out=False, deadline=None, ends_at=None, stopped=False,
                                   gives_way=False, visitor_waiting=False, overflowed=False, last=False, paced=False,
                                   others_waiting=False)
    return Seen(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize("kw, verdict", [
    ({}, Verdict(Next.GO)),
    # What ends the run, and what it says about why.
    ({"stopped": True}, Verdict(Next.STOP)),
    ({"overflowed": True}, Verdict(Next.STOP)),
    ({"deadline": NOW - 0.001}, Verdict(Next.STOP, timed_out=True)),
    ({"deadline": NOW}, Verdict(Next.GO)),  # not past yet
    ({"ends_at": NOW - 0.001, "deadline": NOW + 60}, Verdict(Next.STOP, timed_out=True)),  # its lifetime
    ({"timed_out": True, "deadline": NOW + 60}, Verdict(Next.STOP, timed_out=True)),  # found up before: stays up
    ({"gives_way": True, "visitor_waiting": True}, Verdict(Next.STOP, gave_way=True)),
    ({"gives_way": True}, Verdict(Next.GO)),  # nobody waits
    ({"visitor_waiting": True}, Verdict(Next.GO)),  # a visitor's own run never gives way
    ({"gives_way": True, "visitor_waiting": True, "deadline": 0.0}, Verdict(Next.STOP, timed_out=True, gave_way=True)),
    # A run that stops neither pauses nor yields.
    ({"stopped": True, "paced": True, "others_waiting": True}, Verdict(Next.STOP)),
    # Between two steps: the pace first (the runs waiting then step while it stands paused), else the waiting runs.
    ({"paced": True}, Verdict(Next.PAUSE)),
    ({"paced": True, "others_waiting": True}, Verdict(Next.PAUSE)),
    ({"others_waiting": True}, Verdict(Next.YIELD)),
    # After its last step a run ends: no pause, no turn handed on.
    ({"last": True, "paced": True, "others_waiting": True}, Verdict(Next.GO)),
    ({"last": True, "deadline": 0.0}, Verdict(Next.STOP, timed_out=True)),
])
def test_what_follows_a_step_is_decided_from_what_the_boundary_sees(kw: dict[str, object], verdict: Verdict) -> None:
    assert at_boundary(seen(**kw)) == verdict


def test_the_last_step_is_found_by_length_or_eos_and_the_last_id_is_read_only_when_needed() -> None:
    read: list[int] = []

    def last_id() -> int:
        read.append(1)
        return 7

    assert last_step(10, last_id, 10, frozenset({7})) and read == []  # the length alone decides
    assert not last_step(9, last_id, 10, frozenset()) and read == []  # no EOS to compare with
    assert last_step(9, last_id, 10, frozenset({7})) and len(read) == 1
    assert not last_step(9, last_id, None, frozenset({3})) and len(read) == 2


def _ids(n: int) -> torch.LongTensor:
    return torch.arange(n).unsqueeze(0)


def test_the_boundary_stops_a_run_whose_time_is_up_and_a_stopped_jobs_run() -> None:
    cancel = threading.Event()
    stop = _Stop(cancel, timeout_s=5.0, lifetime_s=60.0)
    stop.begin(Attempt(max_length=50))
    stop.start_clock(time.perf_counter())
    assert stop(_ids(4), None).tolist() == [False] and not stop.timed_out
    stop.start_clock(time.perf_counter() - 6.0)  # its five seconds are past
    assert stop(_ids(5), None).tolist() == [True] and stop.timed_out and not cancel.is_set()

    job = threading.Event()
    stop = _Stop(cancel := threading.Event(), job=job)
    stop.begin(Attempt())
    assert stop(_ids(4), None).tolist() == [False]
    job.set()  # its visitor left
    assert stop(_ids(5), None).tolist() == [True] and cancel.is_set() and not stop.timed_out


@pytest.mark.parametrize("name", ["gives_way", "gave_way", "timed_out", "idle", "job"])
def test_nothing_outside_the_boundary_sets_its_state(name: str) -> None:
    """Built whole: what a run decides with it (its pace, idle bound, whether it gives way, ...) is given when it is
    made, and what it found (time up, gave way, idle) is read, never assigned, from outside."""
    stop = _Stop(threading.Event())
    with pytest.raises(AttributeError):
        setattr(stop, name, True)
