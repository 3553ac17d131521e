"""Gradio's (and uvicorn's, mcp's) private names the page reads, each with what it is used for.

Written against gradio 6.31.0, uvicorn 0.55.0 and mcp 1.30.0 (`WRITTEN_AGAINST`). `tests/test_compat.py` checks each name
is still where, and what, it was (test_the_gradio_internals_are_where_and_what_they_were). Nothing here imports
Gradio at its top: `app/gate.py` reads the queue it is handed.
"""

from __future__ import annotations

from typing import Any

WRITTEN_AGAINST = {"gradio": "6.31.0", "uvicorn": "0.55.0", "mcp": "1.30.0"}  # mcp: `Server.request_handlers`


class InternalMoved(RuntimeError):
    """A dependency's internal the project reads is not where it was: what relies on it cannot work (say so once)."""


def _read(owner: Any, name: str) -> Any:
    try:
        return getattr(owner, name)
    except AttributeError:
        raise InternalMoved(f"{type(owner).__name__}.{name} is gone (written against {WRITTEN_AGAINST})") from None


def queue_of(blocks: Any, default: Any = InternalMoved) -> Any:
    """`Blocks._queue`, the app's `gradio.queueing.Queue`: the gate's watcher and an MCP call's liveness read its
    events. `default` instead of InternalMoved where there may be none (no Gradio call)."""
    return _read(blocks, "_queue") if default is InternalMoved else getattr(blocks, "_queue", default)


def queued_events(queue: Any) -> list[Any]:
    """Every event the queue runs (`Queue.active_jobs`: a list of batches, None for a free worker) or holds
    (`Queue.event_queue_per_concurrency_id`: id -> `EventQueue`, whose `.queue` is a list)."""
    events = [e for job in _read(queue, "active_jobs") if job for e in job]
    return events + [e for q in list(_read(queue, "event_queue_per_concurrency_id").values()) for e in list(q.queue)]


def running_events(queue: Any) -> list[Any]:
    """The events the queue's workers are running (`Queue.active_jobs`)."""
    return [e for job in _read(queue, "active_jobs") if job for e in job]


def spare_missing_matplotlib() -> None:
    """Gradio imports matplotlib around every call it runs, a stream's every write included
    (`utils.MatplotlibBackendMananger`, twice a call); where matplotlib is not installed each attempt searches the
    whole import path again (a failed import is not remembered): ~0.1 ms a write, per follower. Mark it absent once,
    as Python's import system allows (None in `sys.modules`: `import` fails at once, `find_spec` answers None)."""
    import importlib.util
    import sys

    if "matplotlib" not in sys.modules and importlib.util.find_spec("matplotlib") is None:
        sys.modules["matplotlib"] = None  # type: ignore[assignment]


def keep_no_last_values() -> None:
    """`state_holder.SessionState._update_value_in_config`: Gradio 6.31 copies into each session's `config_values`
    the last value every handler read or wrote (a replay move's window: 3.6 MB of text, 7.2 MB of memory), kept
    until the session goes (`app/sessions.py`: up to 300 sessions, 2 GB). Nothing reads them but the deep-link route
    (`/gradio_api/deep_link`, which saves them to disk and the page never calls): keep none (the configuration stays
    as the page was built)."""
    from gradio import state_holder

    def keep_none(self: Any, key: int, value: Any) -> None:
        return None

    state_holder.SessionState._update_value_in_config = keep_none


def widen_queue(queue: Any, workers: int) -> None:
    """`Queue.max_thread_count` and `Queue.active_jobs`: the queue runs at most that many events at once, whatever
    their own limits (`launch(max_threads=...)`, 40), and a follower's stream is an event that runs as long as its
    page is open: 40 followers would hold every worker and no run could start. Widen the workers' list to `workers`
    (before the queue starts, or after: `Queue.start` makes the list from the count), without `max_threads`' other
    meaning (the threads of synchronous handlers)."""
    if _read(queue, "max_thread_count") < workers:
        queue.max_thread_count = workers
    jobs = _read(queue, "active_jobs")
    jobs.extend([None] * (workers - len(jobs)) if jobs else [])


def poll_less_when_free(queue: Any, free_s: float, progress_s: float) -> None:
    """`Queue.sleep_when_free` and `Queue.progress_update_sleep_when_free`: with nothing to start, Gradio's queue
    loop looks for work every 1 ms, and its progress loop walks every worker slot (thousands here, `widen_queue`) every
    10 ms, whether a call runs or not: 4-5 % of a core for a server nobody uses (tests/measure/idle_cpu.py). Look
    every `free_s` and `progress_s` instead (never more often than Gradio's own): a call waits at most `free_s` more
    to start; the page sends no progress messages (no `gr.Progress`), which is all the second loop delivers."""
    for name, seconds in (("sleep_when_free", free_s), ("progress_update_sleep_when_free", progress_s)):
        if _read(queue, name) < seconds:
            setattr(queue, name, seconds)


def event_id(event: Any) -> str:
    """`queueing.Event._id`: the event id a client's `/call/<name>/<event_id>` stream and `clean_events` name."""
    return _read(event, "_id")


def fn_id(fn: Any) -> int:
    """`BlockFunction._id`: the handler's index, for a log line where it has no API name."""
    return _read(fn, "_id")


async def end_event(queue: Any, event_id: str) -> None:
    """`Queue.clean_events(event_id=...)`: end a queued or running call as Gradio does for a closed stream (the
    event no longer `alive`, its handler closed at its next yield)."""
    await _read(queue, "clean_events")(event_id=event_id)


def event_data(evt: Any) -> Any:
    """`EventData._data`: the client's payload of a select event as it was sent (None where there is none); the
    public attributes of gr.SelectData drop what the page's handlers read."""
    return getattr(evt, "_data", None)


def call_context() -> tuple[Any, str | None, Any]:
    """(the Blocks, the event id, the gr.Request) of the Gradio call running in this context
    (`gradio.context.LocalContext`'s context variables), each None where there is none."""
    from gradio.context import LocalContext

    return LocalContext.blocks.get(None), LocalContext.event_id.get(None), LocalContext.request.get(None)


def upload_folder() -> str:
    """`gradio.utils.get_upload_folder()`: where Gradio keeps uploaded files (a replayed trace must come from there)."""
    from gradio import utils as gradio_utils

    return gradio_utils.get_upload_folder()


MCP_TYPE = "_mcp_type"  # a function's attribute Gradio's MCP server reads: only "tool" (or none) is listed as a tool


def not_an_mcp_tool(fn: Any) -> None:
    """Keep an API endpoint out of the MCP server's tool list (`fn._mcp_type`, read by gradio/mcp.py)."""
    setattr(fn, MCP_TYPE, "page")


def mcp_request_handlers(demo: Any) -> dict[Any, Any] | None:
    """`Blocks.mcp_server_obj.mcp_server.request_handlers` (Gradio's `GradioMCPServer`, mcp's low-level `Server`):
    request type -> handler; None when the page serves no MCP."""
    server = getattr(getattr(demo, "mcp_server_obj", None), "mcp_server", None)
    return None if server is None else server.request_handlers


def raise_head_limit(limit: int) -> None:
    """uvicorn's `h11_impl.DEFAULT_MAX_INCOMPLETE_EVENT_SIZE` (read by each new `H11Protocol`; Gradio builds its
    `uvicorn.Config` without `h11_max_incomplete_event_size`), raised to at least `limit`."""
    from uvicorn.protocols.http import h11_impl

    h11_impl.DEFAULT_MAX_INCOMPLETE_EVENT_SIZE = max(h11_impl.DEFAULT_MAX_INCOMPLETE_EVENT_SIZE, limit)


def bound_head_time(timeout_s: float) -> None:
    """uvicorn's `H11Protocol` (its `connection_made`, `on_response_complete`, `connection_lost`, and the `conn`,
    `loop`, `transport` they use): a request head not whole `timeout_s` after the connection opened or after its
    previous answer closes the connection (uvicorn 0.55 has no head timeout; `app/gate.py` says why)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    if getattr(H11Protocol, "_playground_head_timeout", False):
        return

    def arm(protocol: Any) -> None:
        if (timer := getattr(protocol, "_head_timer", None)) is not None:
            timer.cancel()

        def late() -> None:
            if protocol.conn.their_state is h11.IDLE and not protocol.transport.is_closing():
                protocol.transport.close()  # no whole request head in time: nothing to answer

        protocol._head_timer = protocol.loop.call_later(timeout_s, late)

    made, complete, lost = H11Protocol.connection_made, H11Protocol.on_response_complete, H11Protocol.connection_lost

    def connection_made(self: Any, transport: Any) -> None:
        made(self, transport)
        arm(self)

    def on_response_complete(self: Any) -> None:
        complete(self)
        arm(self)

    def connection_lost(self: Any, exc: Exception | None) -> None:
        if (timer := getattr(self, "_head_timer", None)) is not None:
            timer.cancel()
        lost(self, exc)

    H11Protocol.connection_made, H11Protocol.on_response_complete = connection_made, on_response_complete
    H11Protocol.connection_lost = connection_lost
    H11Protocol._playground_head_timeout = True
