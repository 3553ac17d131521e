"""Work in a worker thread with its progress streamed: a handler yields the messages while the work runs.

Used by the runs that load models (generate's preparation, the code for the current settings) and the long jobs
that must end with their visitor (Compare, Tune, the check against plain `generate()`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable, Iterator

logger = logging.getLogger(__name__)

POLL_S = 0.1  # how often the worker's progress is looked at
HEARTBEAT_S = 1.0  # the latest message is yielded again this often: Gradio can close the handler only at a yield


class ClientGone(BaseException):
    """Raised inside work run by `in_thread` once its handler's client has gone (not an `Exception`, so the
    work's own error handling, which keeps measuring other methods, does not swallow it)."""


def in_thread(work: Callable[[Callable[[str], None]], Any], name: str,
              idle_message: Callable[[], str | None] | None = None) -> Iterator[tuple[str, Any]]:
    """Run `work(progress)` in a thread; yield ("progress", message) while it runs, then ("done", result).

    `idle_message` supplies a message when the work reports nothing new (e.g. a start-up load it waits on).
    When this generator is closed (Gradio does so when the client disconnects, at the handler's next yield:
    hence the heartbeat) the work's runs end at their next step (`engine.stopped_by`) and its next call of
    `progress` raises `ClientGone`: Compare, Tune and the check against plain `generate()` stop with their visitor.
    """
    messages: "queue.Queue[str]" = queue.Queue()
    box: dict[str, Any] = {}
    gone = threading.Event()  # the handler was closed (its client left): the work ends at its next report

    def progress(message: str) -> None:
        if gone.is_set():
            raise ClientGone(f"{name}: the client went away")
        messages.put(message)

    def run() -> None:
        from ..engine import JobStopped, stopped_by  # torch: only once there is work (the page imports this module)

        try:
            with stopped_by(gone):
                box["result"] = work(progress)
        except BaseException as exc:  # re-raised in the handler's thread
            box["error"] = exc
        finally:
            if gone.is_set():  # how long the work went on after its client left, and whether it was cut short
                error = box.get("error")  # (tests/measure/hostile_sweep.py and tests/test_hostile.py read this line)
                how = ("stopped" if isinstance(error, (ClientGone, JobStopped)) else
                       "its work done" if error is None else f"failed: {type(error).__name__}")
                logger.info("%s ended %.1f s after its client left (%s)", name, time.monotonic() - box["gone_at"], how)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    last, said = "", time.monotonic()
    try:
        while thread.is_alive():
            thread.join(POLL_S)
            latest = None
            while not messages.empty():
                latest = messages.get_nowait()
            if latest is None and idle_message is not None:
                latest = idle_message()
            if (latest and latest != last) or (last and time.monotonic() - said >= HEARTBEAT_S):
                last, said = latest or last, time.monotonic()
                yield "progress", last
    finally:  # also when Gradio closes this generator because the client disconnected
        box.setdefault("gone_at", time.monotonic())
        gone.set()
    if "error" in box:
        raise box["error"]
    yield "done", box.get("result")

