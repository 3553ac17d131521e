"""Long jobs and their stop: the stop event of the job a thread works for (`stopped_by`), the two ways a job's work
ends early (`JobStopped`: its visitor left; `GaveWay`: a visitor's own run asked for the models), and the worker thread
a timed run happens in (which works for its caller's job)."""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Callable, Iterator

logger = logging.getLogger(__name__)


class JobStopped(BaseException):
    """The job a run belongs to was stopped (its visitor left): raised where the job's work goes on between
    generations. Not an `Exception`, so work that keeps going past a failed run (Compare) does not swallow it."""


_JOB = threading.local()  # `.stop`: the stop event of the job this thread works for (see `stopped_by`)


@contextlib.contextmanager
def stopped_by(event: threading.Event) -> Iterator[None]:
    """Every run started in this thread inside the block also ends when `event` is set (its visitor left): a long
    job (Compare, Tune, the check against plain `generate()`) stops at its current generation's next step, and
    each later run or pass refuses to start (`JobStopped`)."""
    previous = getattr(_JOB, "stop", None)
    _JOB.stop = event
    try:
        yield
    finally:
        _JOB.stop = previous


def check_stopped() -> None:
    """Raise `JobStopped` if this thread's job was stopped (long work calls it between its passes)."""
    event = getattr(_JOB, "stop", None)
    if event is not None and event.is_set():
        raise JobStopped("the job was stopped: its visitor left")


class GaveWay(BaseException):
    """A long job's pass stopped at a step because a visitor's own run asked for the models: the pass is redone
    from its beginning at the job's next turn (`redone_after_giving_way`). Not an `Exception`, as `JobStopped`."""


def redone_after_giving_way(work: Callable[[], Any]) -> Any:
    """`work()` (a pass that takes its turn with `turn()`), redone from its beginning each time it gave way: its next
    turn comes once the visitor's run is done. Its result is the one undisturbed pass's."""
    while True:
        try:
            return work()
        except GaveWay:
            logger.info("a long job's pass gave way to a visitor's run; it starts again at its next turn")


def in_worker_thread(fn: Callable[[], Any], name: str) -> Any:
    """Run `fn` in a fresh thread, as `LiveRun` runs `generate()`, and return its result (or raise its error).

    On oversubscribed cores the main thread's OpenMP team was measured several times slower than a worker
    thread's, so every timed run happens in a worker thread.
    """
    box: dict[str, Any] = {}
    job = getattr(_JOB, "stop", None)  # the worker works for the caller's job (its runs stop with it)

    def work() -> None:
        _JOB.stop = job
        try:
            box["result"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]
