"""Uploaded traces, held for their sessions within one budget for all sessions together (`PLAYGROUND_UPLOADS_MB`).

A trace file of the upload limit (20 MB) takes several times that in memory once parsed, and a Space keeps hundreds
of sessions: held in each session's `gr.State`, two hundred such uploads would fill 16 GB. So the session's
state holds only a ticket (`Held`) and the trace itself is held here, counted by its memory (`footprint`):

- a session holds one upload; its next one replaces it, and a visitor who leaves frees theirs (`sessions.forget`);
- an upload that does not fit lets go of the least recently viewed uploads of other sessions until it does; their
  visitors are told so by the replay's next view, in their language, and may upload the file again (`resolve`);
- an upload larger than the whole budget is refused in one line.
"""

from __future__ import annotations

import secrets
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ..errors import PlaygroundError
from ..i18n import Number
from ..settings import get_settings
from ..trace import Trace


@dataclass(frozen=True)
class Held:
    """What a session's state holds for its uploaded trace: a ticket the server made, never the trace."""

    ticket: str


@dataclass
class _Upload:
    trace: Trace
    size: int  # bytes, `footprint`
    session: str


_LOCK = threading.Lock()
_HELD: OrderedDict[str, _Upload] = OrderedDict()  # ticket -> upload, least recently viewed first
_BY_SESSION: dict[str, str] = {}  # session key -> its ticket
_TOTAL = 0  # the held uploads' sizes together, kept as they come and go (`hold` would otherwise re-add all per drop)


def footprint(value: Any) -> int:
    """The memory a parsed trace takes, in bytes: every object it holds (`sys.getsizeof`), objects CPython shares
    (small integers, one-character strings, None, booleans) not counted. A little above what tracemalloc counts for
    the trace (50 MB against 41 for a 19.5 MB file); the server's resident memory grows by more per held upload (the
    allocator's slack, the session's views: tests/measure/upload_memory.py), which docs/limits.md gives."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, str):
            total += sys.getsizeof(item) if len(item) > 1 else 0
        elif isinstance(item, int):
            total += sys.getsizeof(item) if not -5 <= item <= 256 else 0
        elif isinstance(item, float):
            total += sys.getsizeof(item)
        elif isinstance(item, (list, tuple)):
            total += sys.getsizeof(item)
            stack.extend(item)
        elif isinstance(item, dict):
            total += sys.getsizeof(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif hasattr(item, "__dict__"):  # the trace's records (Trace, Step, Position, Ranked)
            total += sys.getsizeof(item) + sys.getsizeof(item.__dict__)
            stack.extend(item.__dict__.values())
        else:
            total += sys.getsizeof(item)
    return total


def budget_bytes() -> int:
    return int(get_settings().uploads_mb * 2**20)


def hold(trace: Trace, session: str) -> Held:
    """Hold `trace` for `session` (replacing the session's previous upload), letting go of the least recently viewed
    uploads of other sessions until all fit the budget; an upload larger than the budget alone is refused."""
    size, budget = footprint(trace), budget_bytes()
    if size > budget:
        raise PlaygroundError.keyed("error.upload.over_budget", size=Number(size / 2**20, ".0f"),
                                    budget=Number(budget / 2**20, ".0f"))
    ticket = secrets.token_hex(16)
    with _LOCK:
        _drop(_BY_SESSION.pop(session, None))
        while _HELD and _TOTAL + size > budget:
            _drop(next(iter(_HELD)))
        _add(ticket, _Upload(trace, size, session))
    return Held(ticket)


def resolve(value: Any) -> Trace | None:
    """The trace a replay handler's state stands for: a held upload's trace (now the most recently viewed), or the
    state itself (the last run's trace, a gallery recording, None). An upload let go to make room gets our line."""
    if not isinstance(value, Held):
        return value
    with _LOCK:
        upload = _HELD.get(value.ticket)
        if upload is None:
            raise PlaygroundError.keyed("error.upload.let_go", budget=Number(budget_bytes() / 2**20, ".0f"))
        _HELD.move_to_end(value.ticket)
        return upload.trace


def drop_session(session: str) -> None:
    """The session's visitor left: its upload goes now."""
    with _LOCK:
        _drop(_BY_SESSION.pop(session, None))


def held_bytes() -> int:
    """What the held uploads take together (`footprint`), in bytes."""
    with _LOCK:
        return _TOTAL


def _add(ticket: str, upload: _Upload) -> None:
    global _TOTAL
    _HELD[ticket] = upload
    _BY_SESSION[upload.session] = ticket
    _TOTAL += upload.size


def _drop(ticket: str | None) -> None:
    global _TOTAL
    upload = _HELD.pop(ticket, None) if ticket is not None else None
    if upload is None:
        return
    _TOTAL -= upload.size
    if _BY_SESSION.get(upload.session) == ticket:
        del _BY_SESSION[upload.session]
