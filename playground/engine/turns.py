"""Who uses the models when: the turn scheduler (`_Scheduler`, one object for the whole process).

Two kinds of turn. A long job's run (Compare, Tune, the plain check, an MCP compare or bench) waits until no visitor's
own run waits or runs (`_Scheduler.turn`), then holds its models for the whole run (`exclusive`), giving way at a step
when a visitor's run asks (`jobs.GaveWay`). A visitor's own run (the page's Generate, an MCP `generate`) streams to its
visitor, so it is never ended and redone: such runs take turns at the models one decoding step at a time (`_Turns`,
the baton). Also here: the order model locks are taken in (`model_locks`) and the draft settings a run sets on the
generation_config Transformers reads them from and restores after (`set_draft_settings`), used by runs and Tune alike.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from typing import Any, Callable, Iterator

import torch

from ..settings import get_settings
from .jobs import _JOB, GaveWay, JobStopped
from .prepared import PreparedRun

# Sampling draws from torch's global generator: one seeded sampling run at a time.
_RNG_LOCK = threading.Lock()


def model_locks(models: list[Any]) -> list[Any]:
    """Each distinct model's generation lock (a model may be its own assistant), in the one order every holder takes
    them (by id), so two holders never wait for each other."""
    return [lock for _, lock in sorted({id(m.lock): m.lock for m in models}.items())]


def set_draft_settings(prepared: PreparedRun) -> dict[str, Any]:
    """Set the run's draft settings on the generation_config Transformers reads them from; returns what they replaced
    (for `restore_draft_settings`)."""
    config = prepared.draft_config_model.generation_config
    saved = {k: getattr(config, k, None) for k in prepared.draft_config}
    for key, value in prepared.draft_config.items():
        setattr(config, key, value)
    return saved


def restore_draft_settings(prepared: PreparedRun, saved: dict[str, Any]) -> None:
    """Put back the draft settings `set_draft_settings` replaced."""
    config = prepared.draft_config_model.generation_config
    for key, value in saved.items():
        setattr(config, key, value)


# --- runs that take turns per step -------------------------------------------------------------
# A visitor's own run (the page's Generate, an MCP `generate`) streams to its visitor, so it is never ended and redone
# as a long job's run is: such runs take turns at the models one decoding step at a time instead. A run joins the
# holders of its models' locks (and of `_RNG_LOCK` when it samples): the first to need a lock acquires it, the last
# to finish releases it, so nothing else (a long job's run, Tune's passes, the store's copying and eviction) touches
# those models meanwhile. Among the holders one baton passes, first come first served: a run steps only while it holds
# the baton, and at the boundary between two of its steps (its stopping criteria, where every method has put the
# model back in its normal state: early exit restores the layer count right after drafting) it hands the baton on
# when another run waits and queues again behind it. What a run changes on shared objects is set at each of its turns
# and undone at the turn's end (`_Turns`): the draft settings on the generation_config Transformers reads them from,
# the hooks and wrappers the instrumentation puts on the model, and torch's random state (saved and restored, so a
# seeded run draws exactly the numbers it draws alone).


class _StoppedWaiting(BaseException):
    """The run was stopped (its visitor left) before its first turn came: it ends without a step."""


class _Scheduler:
    """The process's turns at the models: the visitors' own runs counted (a long job's run waits for them), and the
    baton the runs that take turns per step pass among themselves, with the model locks they share."""

    def __init__(self) -> None:
        self.foreground = threading.Condition()  # guards `foreground_runs`; a long job's run waits on it for its turn
        self.foreground_runs = 0  # a visitor's own runs (not a long job's) waiting for their models or running
        self.job_runs = 0  # a long job's runs that have their turn (`runs_going`: background work waits for both)
        self.baton = threading.Condition()  # guards everything below
        self.owner: _Turns | _OneTurn | None = None
        self.queue: collections.deque[_Turns | _OneTurn] = collections.deque()
        self.shared_locks: dict[int, list[Any]] = {}  # id(lock) -> [lock, runs sharing it]
        self.acquiring: set[int] = set()  # locks a run is acquiring for the holders now
        # The cores' places (PLAYGROUND_CONCURRENCY): a visitor's run computing (or queued for the baton) holds one; a
        # run standing paused at its pace holds none (`_Turns.pause`), so paused runs never keep a run from starting.
        self.places = threading.Condition()
        self.places_taken = 0

    @contextlib.contextmanager
    def turn(self, job: threading.Event | None) -> Iterator[None]:
        """A run's turn at the models. A visitor's own run (no `job`: the page's Generate, an MCP generate, whatever
        stops it) counts itself while it waits and runs; a long job's run (Compare, Tune, the plain check, an MCP
        compare or bench: `job` is that job's stop event) first waits until no such run waits or runs. So a visitor's
        short generation waits at most for the one generation a long job has already begun, never for the rest of the
        job; a job whose visitor left stops waiting (`JobStopped`)."""
        if job is None:
            with self.foreground:
                self.foreground_runs += 1
            try:
                yield
            finally:
                with self.foreground:
                    self.foreground_runs -= 1
                    self.foreground.notify_all()
            return
        with self.foreground:
            while self.foreground_runs:
                if job.is_set():
                    raise JobStopped("the job was stopped: its visitor left")
                self.foreground.wait(0.5)
            self.job_runs += 1
        try:
            yield
        finally:
            with self.foreground:
                self.job_runs -= 1

    def step_out(self) -> None:
        """A visitor's run stands paused at its pace: it no longer counts as one long jobs wait for (`turn`)."""
        with self.foreground:
            self.foreground_runs -= 1
            self.foreground.notify_all()

    def step_in(self) -> None:
        """The paused run goes on: long jobs wait for it (and a long job's run gives way) again."""
        with self.foreground:
            self.foreground_runs += 1

    def take_place(self, stopped: Callable[[], bool]) -> bool:
        """Wait for one of the cores' places (`PLAYGROUND_CONCURRENCY`); False, without one, when `stopped()` turned
        true meanwhile (the run then ends at once)."""
        with self.places:
            while self.places_taken >= get_settings().concurrency:
                if stopped():
                    return False
                self.places.wait(0.25)
            self.places_taken += 1
            return True

    def give_place(self) -> None:
        with self.places:
            self.places_taken -= 1
            self.places.notify_all()

    def join_holders(self, locks: list[Any]) -> None:
        """Share `locks` (in the order given) with the runs that take turns; acquire each one nobody of them holds."""
        for lock in locks:
            key = id(lock)
            with self.baton:
                while key in self.acquiring:
                    self.baton.wait()
                if key in self.shared_locks:
                    self.shared_locks[key][1] += 1
                    continue
                self.acquiring.add(key)
            try:
                lock.acquire()  # may wait for a long job's run or a Tune pass (they give way or end)
            finally:
                with self.baton:
                    self.acquiring.discard(key)
                    self.baton.notify_all()
            with self.baton:
                self.shared_locks[key] = [lock, 1]

    def leave_holders(self, locks: list[Any]) -> None:
        """Stop sharing `locks`; the last run to leave one releases it."""
        with self.baton:
            for lock in reversed(locks):
                entry = self.shared_locks.get(id(lock))
                if entry is None:
                    continue
                entry[1] -= 1
                if entry[1] == 0:
                    del self.shared_locks[id(lock)]
                    lock.release()
            self.baton.notify_all()

    def pass_baton_locked(self, turns: _Turns | _OneTurn) -> None:
        """Hand the baton from `turns` to the first run waiting (caller holds `baton`)."""
        if self.owner is turns:
            self.owner = self.queue.popleft() if self.queue else None
            self.baton.notify_all()

    def await_baton_locked(self, turns: _Turns | _OneTurn, first: bool) -> None:
        """Queue for the baton and wait until it comes (caller holds `baton`). A run stopped while waiting for its
        first turn leaves the queue (`_StoppedWaiting`); one stopped between its steps goes to the queue's front: it
        still takes one turn, in which `generate()` returns and the run undoes what it set."""
        if self.owner is None and not self.queue:
            self.owner = turns
            return
        self.queue.append(turns)
        moved = False
        while self.owner is not turns:
            if turns.stopped() and turns in self.queue:
                if first:
                    self.queue.remove(turns)
                    self.baton.notify_all()
                    raise _StoppedWaiting("stopped before its first turn")
                if not moved:
                    self.queue.remove(turns)
                    self.queue.appendleft(turns)
                    moved = True
            self.baton.wait(0.25)


_SCHEDULER = _Scheduler()


def visitor_waiting() -> bool:
    """Whether this thread works for a long job (`stopped_by`) while a visitor's own run waits for (or holds) its
    turn: the job's work should give way at its next step."""
    return getattr(_JOB, "stop", None) is not None and _SCHEDULER.foreground_runs > 0


def runs_going() -> bool:
    """Whether any run waits for its turn or runs (a visitor's own or a long job's): work nobody waits for (`auto`'s
    precision measurement) yields to them (read without the lock: a hint, asked again before each piece of work)."""
    return _SCHEDULER.foreground_runs > 0 or _SCHEDULER.job_runs > 0


def give_way() -> None:
    """Raise `GaveWay` in a long job's pass when a visitor's own run waits (Tune's passes call it per forward)."""
    if visitor_waiting():
        raise GaveWay("a visitor's run goes first")


def turn() -> contextlib.AbstractContextManager[None]:
    """This thread's turn at the models (`_Scheduler.turn`), for work that holds model locks outside `exclusive`
    (Tune's drafter pass)."""
    return _SCHEDULER.turn(getattr(_JOB, "stop", None))


def others_waiting() -> bool:
    """Whether a run waits for the baton (read without the lock: a hint, checked again under it)."""
    return bool(_SCHEDULER.queue)


@contextlib.contextmanager
def exclusive(prepared: PreparedRun, job: threading.Event | None = None,
              turns: _Turns | None = None) -> Iterator[None]:
    """Hold the models and the state generation mutates for the duration of one run (after `_Scheduler.turn`: `job`
    is the stop event of the long job the run belongs to; None for a visitor's own run, whose own stop event `turns`
    carries).

    One generation per loaded model at a time (early exit lowers the target's layer count, the
    heuristic schedule writes back the draft length); the draft-length settings live on the
    generation_config Transformers reads them from, set for the run and restored after. With `turns` the run
    instead takes turns per step with the other such runs (`_Turns`: its settings set per turn).
    """
    with contextlib.ExitStack() as stack:
        stack.enter_context(_SCHEDULER.turn(job))
        if turns is not None:
            stack.enter_context(turns.holding())
            yield
            return
        for lock in model_locks(prepared.models()):
            stack.enter_context(lock)
        if prepared.request.sample:
            stack.enter_context(_RNG_LOCK)
        saved = set_draft_settings(prepared)
        try:
            if prepared.request.sample:
                torch.manual_seed(int(prepared.request.seed))
            yield
        finally:
            restore_draft_settings(prepared, saved)


class _Turns:
    """One run's turns at the models: what it sets on shared objects for each turn and undoes after, and the time
    it spent waiting for other runs' steps (`waited_s`, never part of its timed phases)."""

    def __init__(self, prepared: PreparedRun, cancel: threading.Event,
                 per_turn: Callable[[], list[contextlib.AbstractContextManager[Any]]] = list,
                 job: threading.Event | None = None):
        self.prepared = prepared
        self.cancel = cancel
        self.job = job  # the MCP call the run belongs to, if any: its agent leaving stops the run too
        self.per_turn = per_turn  # the run's hooks on the model, entered at each turn and left at its end
        self.waited_s = 0.0
        self.paused_s = 0.0  # of which the run stood paused at its visitor's pace (`pause`), reported apart
        self.turns = 0
        self.has_place = False  # holds one of the cores' places now (`_Scheduler.take_place`)
        self._rng: tuple[torch.Tensor, torch.Tensor | None] | None = None
        self._saved_config: dict[str, Any] = {}
        self._stack: contextlib.ExitStack | None = None
        self._cuda = torch.device(prepared.target.device).type == "cuda"

    def stopped(self) -> bool:
        return self.cancel.is_set() or (self.job is not None and self.job.is_set())

    def locks(self) -> list[Any]:
        return model_locks(self.prepared.models()) + ([_RNG_LOCK] if self.prepared.request.sample else [])

    def _begin_turn(self) -> None:
        prepared = self.prepared
        self._saved_config = set_draft_settings(prepared)
        if prepared.request.sample:
            if self._rng is None:
                torch.manual_seed(int(prepared.request.seed))
            else:
                torch.set_rng_state(self._rng[0])
                if self._rng[1] is not None:
                    torch.cuda.set_rng_state(self._rng[1], prepared.target.device)
        self.turns += 1
        stack = contextlib.ExitStack()
        try:
            for manager in self.per_turn():
                stack.enter_context(manager)
        except BaseException:
            stack.close()
            raise
        self._stack = stack

    def _end_turn(self) -> None:
        prepared = self.prepared
        try:
            if self._stack is not None:
                self._stack.close()
                self._stack = None
        finally:
            if prepared.request.sample:
                cuda = torch.cuda.get_rng_state(prepared.target.device) if self._cuda else None
                self._rng = (torch.get_rng_state(), cuda)
            restore_draft_settings(prepared, self._saved_config)
            self._saved_config = {}

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """One of the cores' places, the run's models shared with the runs that take turns, and its first turn; its
        last turn ends after."""
        locks = self.locks()
        began = time.perf_counter()
        if not _SCHEDULER.take_place(self.stopped):
            raise _StoppedWaiting("stopped while waiting for a place")
        self.has_place = True
        try:
            _SCHEDULER.join_holders(locks)
            try:
                with _SCHEDULER.baton:
                    _SCHEDULER.await_baton_locked(self, first=True)
                self.waited_s += time.perf_counter() - began
                try:
                    self._begin_turn()
                    yield
                finally:
                    self._end_turn()  # also after a failed start of the turn: what it set is undone
                    with _SCHEDULER.baton:
                        _SCHEDULER.pass_baton_locked(self)
            finally:
                _SCHEDULER.leave_holders(locks)
        finally:
            if self.has_place:
                self.has_place = False
                _SCHEDULER.give_place()

    def pause(self, wait: Callable[[], Any]) -> tuple[float, float, Any]:
        """At a boundary between two of the run's steps: end this turn, hand the baton on, and step out of everything
        another run or job needs: the models' locks (a long job may take them), the count long jobs wait for, and the
        run's place among the cores' (another visitor's run starts in it); then `wait()` for the presenter's pace
        (`pace.Pace.wait`: no core is held), and come back in as a new run does (a place, the locks, the baton).
        Returns (seconds paused, seconds then waited for a place and the baton, what `wait()` returned); the waiting
        counts as waiting for others (`waited_s`), the pause apart (`paused_s`)."""
        began = time.perf_counter()
        locks = self.locks()
        self._end_turn()
        with _SCHEDULER.baton:
            _SCHEDULER.pass_baton_locked(self)
        _SCHEDULER.leave_holders(locks)
        _SCHEDULER.step_out()
        if self.has_place:
            self.has_place = False
            _SCHEDULER.give_place()
        try:
            ended = wait()
        finally:
            paused = time.perf_counter() - began
            _SCHEDULER.step_in()
            # A stopped run takes no place: its one last turn only lets `generate()` return.
            self.has_place = not self.stopped() and _SCHEDULER.take_place(self.stopped)
            _SCHEDULER.join_holders(locks)
            with _SCHEDULER.baton:
                _SCHEDULER.await_baton_locked(self, first=False)
            self._begin_turn()
        queued = time.perf_counter() - began - paused
        self.paused_s += paused
        self.waited_s += queued
        return paused, queued, ended

    def between_steps(self) -> float:
        """At a boundary between two of the run's steps: when another run waits, end this turn, let the runs queued
        before it take one step each, and begin the next turn. Returns the seconds it waited (0: nobody waited)."""
        if not _SCHEDULER.queue:
            return 0.0
        began = time.perf_counter()
        self._end_turn()
        with _SCHEDULER.baton:
            _SCHEDULER.pass_baton_locked(self)
            _SCHEDULER.await_baton_locked(self, first=False)
        self._begin_turn()
        waited = time.perf_counter() - began
        self.waited_s += waited
        return waited


class _OneTurn:
    """Work that needs models for one turn and no steps (copying a model, pruning a universal copy): it queues for the
    baton as a run does and never stops early."""

    def stopped(self) -> bool:
        return False


@contextlib.contextmanager
def one_turn(locks: list[Any]) -> Iterator[None]:
    """Hold `locks` (model locks, then `_RNG_LOCK` if any) for one turn: shared with the runs that take turns, the
    work waits for the baton (one step of each run queued before it), not for those runs to end; a lock nobody of them
    holds is acquired (a long job's run holding it goes on to its end or gives way). Meanwhile every such run is
    between two of its steps, its hooks and settings off the models and its random state saved (`_Turns`)."""
    work = _OneTurn()
    _SCHEDULER.join_holders(locks)
    try:
        with _SCHEDULER.baton:
            _SCHEDULER.await_baton_locked(work, first=True)
        try:
            yield
        finally:
            with _SCHEDULER.baton:
                _SCHEDULER.pass_baton_locked(work)
    finally:
        _SCHEDULER.leave_holders(locks)
