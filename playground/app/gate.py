"""A thin layer in front of Gradio: what it would answer with a bare HTTP 500, its generic error or by reading on,
answered first in one line of ours with a fitting 4xx; and queued calls nobody reads, ended.

`Gate` is an ASGI middleware on Gradio's FastAPI app (`launch_kwargs`: `app_kwargs={"middleware": ...}`). Before
Gradio sees a request it refuses:

- an address (path and query) over MAX_URL_CHARS: 414 (Gradio 6.31 answered the page's 500, and on the queue's data
  stream heartbeats for a session nobody can have);
- a body over MAX_BODY_BYTES, by its Content-Length before a byte is read, else while it arrives: 413 (the page's
  upload limit; Gradio read a 30 MB MCP body in full before answering it);
- on the queue's join, `run/<name>` and `call/<name>`: an `fn_index` that names no handler (Gradio: 500), one that
  names a JavaScript-only event (nothing runs on the server; Gradio: its generic error), an unknown API name (500),
  a `session_hash` that is not text of 1 to MAX_SESSION_HASH_CHARS characters (the empty one: 500): 404 or 422.

- a request that gives both Content-Length and Transfer-Encoding: 400, its connection closed (uvicorn's h11 reads
  the body by Transfer-Encoding and ran what Content-Length left out as a second request: request smuggling);
- Gradio's monitoring pages (`/monitoring...`, every endpoint's counts and timings) in public mode: 404;
- Gradio's deep-link route (`/gradio_api/deep_link`) in public mode: 404 (it wrote a session's values to a new file
  on disk at every call after a change, never deleted; the page makes no deep links);
- a queued call (the queue's join, `call/<name>`) from a client address that already has PLAYGROUND_CLIENT_CALLS
  calls queued or running (429), or when PLAYGROUND_QUEUE_SIZE calls wait already (503): one client with a hundred
  session hashes held every place, and a visitor from elsewhere waited 420 s. The address is the socket's peer, or
  X-Forwarded-For's last entry where a proxy is known to set it (PLAYGROUND_TRUST_FORWARDED: inside a Space).

Everything else passes untouched: Gradio's own checks (its upload limit, its file-path rule, its body schema) stay
where they are. `docs/limits.md` lists what is answered where.

A queued call's answer goes out on an event stream the client opens after its POST (`/gradio_api/queue/data`, or
`/gradio_api/call/<name>/<event_id>`). Gradio ends a call whose stream closes, but one whose stream is never opened
runs to its end for nobody. The gate counts the open streams of each session (and event id); a watcher ends every
queued or running call whose session has had no open stream for PLAYGROUND_STREAM_OPEN_S: Gradio's own
`clean_events`, as for a closed stream, so the page's handlers close at their next yield (their runs stop at their
next step) and an MCP function's REST call sees its event no longer alive (`mcp_tools._client_connected`) and stops
its runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections import defaultdict
from typing import Any, Awaitable, Callable

from .. import i18n
from ..compat import gradio_internals as internals
from ..errors import shorten
from ..outside import MAX_INPUT_BYTES, MAX_INPUT_MB
from ..settings import get_settings

logger = logging.getLogger(__name__)

# A shared link's query is at most links.MAX_LINK_CHARS (8000); a longer hand-made one still reaches the link's own
# refusal ("This link's settings were not applied") up to this; past it Gradio 6.31 answered 500 (64 KB).
MAX_URL_CHARS = 32 * 1024
MAX_BODY_BYTES = MAX_INPUT_BYTES + 64 * 1024  # a trace of the upload limit with its multipart framing
MAX_SESSION_HASH_CHARS = 128  # Gradio's own are 11 characters; a client's own choice, within reason
# How long a queued call may wait for its client to open the answer's stream (PLAYGROUND_STREAM_OPEN_S, 30 s): every
# client opens it right after the POST (the page's and gradio_client's code, Gradio's own curl example: milliseconds),
# so this is margin for a busy server, not for a person copying an event id by hand. Past it the call ends: nobody is
# there to read its answer. 10 s was too short for a loaded machine: with its two cores at load 15-18, streams opened
# up to 8 s after their call was queued (tests/measure/upload_memory.py, each session parsing a 20 MB trace), and 3
# uploads of 200 were ended so ("the stream ended early"). The per-client bound (PLAYGROUND_CLIENT_CALLS) caps what a
# client that never reads can hold meanwhile. A setting so that a test of the ending need not wait the default.
WATCH_S = 0.5  # how often the watcher looks

_PREFIX = "/gradio_api"
_STREAM = re.compile(rf"^{_PREFIX}/(?:queue/data|call/(?:v2/)?[^/]+/(?P<event>[^/]+))/?$")
_NAMED = re.compile(rf"^{_PREFIX}/(?:run|api|call(?:/v2)?)/(?P<name>[^/]+)/?$")
_JOIN = f"{_PREFIX}/queue/join"

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class _TooLarge(Exception):
    """A body that grew past MAX_BODY_BYTES while it arrived."""


class Streams:
    """The answer streams open now, by session hash or event id, and when each key last had one open."""

    def __init__(self) -> None:
        self.open: defaultdict[str, int] = defaultdict(int)
        self.last: dict[str, float] = {}

    def opened(self, key: str) -> None:
        self.open[key] += 1
        self.last[key] = time.monotonic()

    def closed(self, key: str) -> None:
        self.open[key] -= 1
        self.last[key] = time.monotonic()
        if self.open[key] <= 0:
            del self.open[key]

    def unread_since(self, keys: tuple[str, ...], queued_at: float) -> float | None:
        """Since when none of `keys` has had an open stream (None while one has)."""
        if any(self.open.get(k) for k in keys):
            return None
        return max([queued_at] + [self.last.get(k, 0.0) for k in keys])

    def forget_older_than(self, moment: float) -> None:
        for key in [k for k, at in self.last.items() if at < moment and not self.open.get(k)]:
            del self.last[key]


class Gate:
    """The ASGI middleware (see the module's docstring)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.streams = Streams()
        self.watcher: asyncio.Task[None] | None = None
        settings = get_settings()
        self.public, self.trust_forwarded = settings.public, settings.trust_forwarded
        self.client_calls, self.queue_size = settings.client_calls, settings.queue_size
        self.stream_open_s = settings.stream_open_s

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        server_app = scope.get("app")
        if self.watcher is None and server_app is not None and hasattr(server_app, "get_blocks"):
            self.watcher = asyncio.ensure_future(self.watch(server_app))
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        lang = i18n.choose_language(None, headers.get("accept-language"))
        path = scope.get("path", "")
        url_chars = len(scope.get("raw_path") or path.encode()) + len(scope.get("query_string", b""))
        if url_chars > MAX_URL_CHARS:
            await answer(send, 414, i18n.tn("error.request_url", url_chars, lang, limit=MAX_URL_CHARS))
            return
        length = headers.get("content-length", "")
        if length and "transfer-encoding" in headers:
            await answer(send, 400, i18n.t("error.gate.length_and_chunked", lang), close=True)
            return
        if self.public and (path == "/monitoring" or path.startswith("/monitoring/")):
            await answer(send, 404, i18n.t("error.gate.monitoring", lang))
            return
        if self.public and path.rstrip("/") == "/gradio_api/deep_link":
            await answer(send, 404, i18n.t("error.gate.deep_link", lang))
            return
        if length.isdigit() and int(length) > MAX_BODY_BYTES:
            await answer(send, 413, i18n.t("error.request_size", lang, limit=MAX_INPUT_MB))
            return
        if scope.get("method") == "GET" and (stream := _STREAM.match(path)):
            key = stream.group("event") or _query(scope).get("session_hash", "")
            refusal = _session_refusal(key, lang) if stream.group("event") is None else None
            if refusal:
                await answer(send, 422, refusal)
                return
            self.streams.opened(key)
            try:
                await self.app(scope, receive, send)
            finally:
                self.streams.closed(key)
            return
        if scope.get("method") == "POST" and (path == _JOIN or _NAMED.match(path)) and server_app is not None:
            await self.checked_call(scope, receive, send, server_app, lang)
            return
        await self.bounded(scope, receive, send, lang)

    async def bounded(self, scope: dict[str, Any], receive: Receive, send: Send, lang: str) -> None:
        """Pass the request on, its body counted as it arrives: past MAX_BODY_BYTES (a body sent without its length),
        the app's reading fails, and whatever it would answer then is replaced by our 413."""
        received = 0
        over = started = False

        async def counted() -> dict[str, Any]:
            nonlocal received, over
            message = await receive()
            received += len(message.get("body", b""))
            if received > MAX_BODY_BYTES:
                over = True
                raise _TooLarge
            return message

        async def sending(message: dict[str, Any]) -> None:
            nonlocal started
            if over:
                return  # the app's answer to a body it could not finish reading: ours goes instead
            started = True
            await send(message)

        try:
            await self.app(scope, counted, sending)
        except Exception:
            if not over:
                raise
        if over and not started:
            await answer(send, 413, i18n.t("error.request_size", lang, limit=MAX_INPUT_MB))

    async def checked_call(self, scope: dict[str, Any], receive: Receive, send: Send, server_app: Any,
                           lang: str) -> None:
        """A call to a handler: its body read (bounded), the handler it names checked, then passed on as it came."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > MAX_BODY_BYTES:
                await answer(send, 413, i18n.t("error.request_size", lang, limit=MAX_INPUT_MB))
                return
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        blocks = server_app.get_blocks()
        status, refusal = _call_refusal(scope["path"], body, blocks, lang)
        if not refusal:
            status, refusal = self.load_refusal(scope, body, blocks, lang)
        if refusal:
            await answer(send, status, refusal)
            return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)

    def client(self, scope: dict[str, Any]) -> str:
        """The client's address: X-Forwarded-For's last entry (the one the trusted proxy added) where one is trusted,
        else the socket's peer."""
        if self.trust_forwarded:
            for name, value in scope.get("headers", []):
                if name.lower() == b"x-forwarded-for" and (last := value.decode("latin-1").split(",")[-1].strip()):
                    return last
        peer = scope.get("client")
        return str(peer[0]) if peer else ""

    def load_refusal(self, scope: dict[str, Any], body: bytes, blocks: Any, lang: str) -> tuple[int, str | None]:
        """(429, ...) when this client has PLAYGROUND_CLIENT_CALLS queued or running calls, (503, ...) when the queue
        holds PLAYGROUND_QUEUE_SIZE; (200, None) for a call that does not queue or fits."""
        if scope["path"] != _JOIN and not scope["path"].startswith(f"{_PREFIX}/call/"):
            return 200, None  # run/<name>: a call outside the queue (the page's small handlers, MCP's own bound)
        queue = internals.queue_of(blocks)
        if self.queue_size and len(queue) >= self.queue_size:
            return 503, i18n.t("error.gate.queue_full", lang, limit=self.queue_size)
        if self.client_calls and _holds_a_place(_called_fn(scope["path"], body, blocks)):
            client = self.client(scope)
            calls = sum(1 for event in _live_events(queue) if _holds_a_place(event.fn)
                        and event.request is not None and self.client(event.request.scope) == client)
            if calls >= self.client_calls:
                return 429, i18n.t("error.gate.client_calls", lang, limit=self.client_calls)
        return 200, None

    async def watch(self, server_app: Any) -> None:
        """End every queued call whose session has had no open answer stream for PLAYGROUND_STREAM_OPEN_S. Where
        Gradio's queue is not what it was (`InternalMoved`), say so once, loudly, and stop: the page keeps serving,
        unwatched."""
        while True:
            await asyncio.sleep(WATCH_S)
            try:
                await self.end_unread(internals.queue_of(server_app.get_blocks()))
            except (internals.InternalMoved, AttributeError):  # a hook moved: no later look can work
                logger.error("the unread-call watcher stopped: Gradio's queue moved; calls nobody reads are no longer "
                             "ended (see playground/compat/gradio_internals.py)", exc_info=True)
                return
            except Exception:  # noqa: BLE001  (one look failed: log it, keep serving)
                logger.warning("the unread-call watcher failed", exc_info=True)

    async def end_unread(self, queue: Any) -> None:
        now = time.monotonic()
        for event in _live_events(queue):
            since = self.streams.unread_since((event.session_hash, internals.event_id(event)), event.enqueue_time)
            if since is not None and now - since > self.stream_open_s:
                # tests/test_hostile3.py and tests/measure/hostile_sweep.py read this line
                logger.info("ended %s: no answer stream open for %.0f s",
                            event.fn.api_name or internals.fn_id(event.fn), self.stream_open_s)
                await internals.end_event(queue, internals.event_id(event))
        self.streams.forget_older_than(now - 4 * self.stream_open_s)


def _live_events(queue: Any) -> list[Any]:
    """Every call Gradio's queue holds that has not ended: running (its active jobs), then waiting."""
    return [e for e in internals.queued_events(queue) if e.alive]


def _query(scope: dict[str, Any]) -> dict[str, str]:
    from urllib.parse import parse_qs

    return {k: v[0] for k, v in parse_qs(scope.get("query_string", b"").decode("latin-1"),
                                          keep_blank_values=True).items()}


def _session_refusal(session: Any, lang: str) -> str | None:
    if isinstance(session, str) and 1 <= len(session) <= MAX_SESSION_HASH_CHARS:
        return None
    return i18n.t("error.gate.session_hash", lang, limit=MAX_SESSION_HASH_CHARS, got=shorten(repr(session), 40))


def _holds_a_place(fn: Any) -> bool:
    """Whether a handler's call takes one of a bounded number of places (a run, a long job, a run's views): a
    handler registered with no concurrency limit (a follower's look at its class) holds none, so a class behind one
    address is not refused its looks by the per-client bound. An unknown handler counts (Gradio refuses it anyway)."""
    return fn is None or getattr(fn, "concurrency_limit", "default") is not None


def _called_fn(path: str, body: bytes, blocks: Any) -> Any:
    """The handler a queued call names (by `fn_index` on the join, by API name on `call/<name>`), or None."""
    named = _NAMED.match(path)
    if named:
        return next((fn for fn in blocks.fns.values() if fn.api_name == named.group("name")), None)
    try:
        index = json.loads(body).get("fn_index")
    except (ValueError, RecursionError, AttributeError):
        return None
    return blocks.fns.get(index) if isinstance(index, int) and not isinstance(index, bool) else None


def _call_refusal(path: str, body: bytes, blocks: Any, lang: str) -> tuple[int, str | None]:
    """(status, our refusal) for a call Gradio would answer with a 500 or its generic error; (200, None) to pass."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return 200, None  # Gradio's schema check answers it (422)
    if not isinstance(data, dict):
        return 200, None
    if "session_hash" in data and data["session_hash"] is not None or path == _JOIN:
        refusal = _session_refusal(data.get("session_hash"), lang)
        if refusal:
            return 422, refusal
    fns = blocks.fns
    index = data.get("fn_index")
    if index is not None:
        if isinstance(index, bool) or not isinstance(index, int) or index not in fns:
            return 404, i18n.t("error.gate.fn_index", lang, got=shorten(repr(index), 40))
        if fns[index].fn is None:
            return 422, i18n.t("error.gate.js_only", lang, got=index)
        return 200, None
    named = _NAMED.match(path)
    if named and not any(fn.api_name == named.group("name") for fn in fns.values()):
        return 404, i18n.t("error.gate.api_name", lang, got=shorten(named.group("name"), 80))
    return 200, None


async def answer(send: Send, status: int, message: str, close: bool = False) -> None:
    """One line of ours as Gradio words its own refusals (`{"detail": ...}`, FastAPI's), with the status; `close`:
    the connection closes after it (nothing more read from it)."""
    body = json.dumps({"detail": message}, ensure_ascii=False).encode()
    headers = [(b"content-type", b"application/json; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status,
                "headers": headers + ([(b"connection", b"close")] if close else [])})
    await send({"type": "http.response.body", "body": body})


# uvicorn's h11 parser answers a request head over 16 KB with its own 400 "Invalid HTTP request received" (and, with
# bytes left unread, a reset connection) when the head arrives in more than one read, as under load, and passes it
# when it arrives in one: a long address got our 414 or uvicorn's 400 by chance. Gradio builds its `uvicorn.Config`
# without `h11_max_incomplete_event_size`, so uvicorn's default is raised: every head up to this reaches the gate.
MAX_HEAD_BYTES = 4 * MAX_URL_CHARS


def _heads_reach_the_gate() -> None:
    internals.raise_head_limit(MAX_HEAD_BYTES)


# uvicorn (0.55) gives a request's head no time limit: its keep-alive timer stops at the first byte, so a connection
# that sends one byte a second stays open for as long as its head lasts (slowloris: 50 such stayed open). A head
# that has not arrived in full HEAD_TIMEOUT_S after the connection opened, or after its previous answer, closes it.
HEAD_TIMEOUT_S = 10.0


def _heads_in_time() -> None:
    internals.bound_head_time(HEAD_TIMEOUT_S)


def middleware() -> list[Any]:
    """What `launch(app_kwargs=...)` takes to put the gate in front of Gradio's routes (and uvicorn's head limit
    raised, so that a long address reaches it; a head's time bounded)."""
    from starlette.middleware import Middleware

    _heads_reach_the_gate()
    _heads_in_time()
    return [Middleware(Gate)]
