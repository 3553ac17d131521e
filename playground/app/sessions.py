"""What a visitor's session keeps, given back: when the visitor leaves, after a bounded time, and bounded in count.

Gradio 6.31 keeps, per session, a copy of every component's configuration with the last value each handler read or
wrote (the run's token view, its charts, a replay window of 7.2 MB: kept for deep links only, which the page never
makes, so `launch` has it keep none: `gradio_internals.keep_no_last_values`) and the session's `gr.State`
values (the last run's trace, the baselines, Compare's results); it frees the State values an hour after the page
closed and the rest only when 10,000 newer sessions push it out. On a Space a class leaves behind hundreds of MB
that way. Here:

- the visitor leaves (Gradio's `unload`, when the page's heartbeat connection closes): their pace, trace file and
  handout (their folder too) and uploaded trace go at once; the session's State values `LEFT_GRACE_S` later (a page
  that reconnects within it keeps its run), then the session itself (`_drop`);
- a session no event touched for `IDLE_SESSION_S` (a client that never held the heartbeat, such as a script speaking
  the queue protocol) is treated as left (`_sweep`);
- at most `MAX_SESSIONS` sessions are kept (`launch`'s `state_session_capacity`), the least recently used dropped;
- once sessions were dropped and none for `TRIM_AFTER_S`, the process gives the freed memory back to the system
  (`give_back`: a collection, then glibc's `malloc_trim`): Python frees a departed class's objects, but glibc keeps
  the freed pages of its heaps and the server's resident memory would stay where the class left it;
- the server's threads share at most `PLAYGROUND_MALLOC_ARENAS` glibc heaps (`cap_arenas`, at start-up). glibc's
  default, 8 per core, gave each of a class's concurrent runs (each in a thread of its own) a heap of its own: measured
  with tests/measure/class_memory.py, 15 heaps held 800 MB free after 30 runs against 221 MB with two, and the
  resident size grew by 265 MB more from 30 to 120 runs (docs/limits.md).

What a run itself keeps (its KV cache, its deferred scores) lives only while the run does (docs/limits.md).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import os
import threading
import time
from datetime import datetime
from typing import Any

import gradio as gr

from . import presenter, trace_files, uploads
from .guard import session_key

LEFT_GRACE_S = 60.0  # a page that lost its connection for less than this (a phone's network) keeps its session
IDLE_SESSION_S = 1800.0  # a session no event touched this long is freed as if its visitor had left
MAX_SESSIONS = 300  # sessions kept at most (Gradio drops the least recently used past it)
SWEEP_EVERY_S = 30.0
TRIM_AFTER_S = 5.0  # memory is given back this long after the last dropped session (a class leaves at once)


def _glibc(name: str) -> Any:
    """A function of glibc's allocator (None elsewhere: musl, macOS, Windows)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None


MALLOC_TRIM = _glibc("malloc_trim")
MALLOPT = _glibc("mallopt")
M_ARENA_MAX = -8  # mallopt's parameter number (glibc's malloc.h)


def cap_arenas(count: int) -> bool:
    """Have glibc keep at most `count` malloc arenas (0: leave its default; glibc's MALLOC_ARENA_MAX, where set,
    already applied by glibc itself). Before the server's threads start allocating: glibc fixes its limit once it
    holds more than 8 arenas. True if the cap was set."""
    if count <= 0 or MALLOPT is None or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return bool(MALLOPT(M_ARENA_MAX, count))


_TRIM: list[asyncio.TimerHandle] = []  # the pending give-back, if any


def give_back() -> bool:
    """Collect, then hand the heaps' free pages back to the system (in a worker thread: both take tens of ms on a
    big heap). True if glibc's trim released anything."""
    gc.collect()
    return bool(MALLOC_TRIM(0)) if MALLOC_TRIM is not None else False


def _give_back_soon(loop: asyncio.AbstractEventLoop) -> None:
    """One give-back `TRIM_AFTER_S` after the last of a run of drops (a class leaving drops many at once)."""
    while _TRIM:
        _TRIM.pop().cancel()

    def give_back_now() -> None:
        _TRIM.clear()
        loop.run_in_executor(None, give_back)

    _TRIM.append(loop.call_later(TRIM_AFTER_S, give_back_now))


def forget(key: str) -> None:
    """What the playground itself keeps for a session: the visitor's pace (unless a run still goes at it), the
    last run's trace file and handout with their folder, and the uploaded trace (`uploads`)."""
    presenter.forget_pace(key)
    trace_files.forget_session(key)
    uploads.drop_session(key)


def _drop(holder: Any, key: str, state: Any) -> None:
    """The session's State values and the session itself, once its grace has passed (in the server's event loop,
    where Gradio's own code reads the sessions: nothing else changes them meanwhile)."""
    with holder.lock:
        if holder.session_data.get(key) is not state or not state.is_closed:
            return  # a newer session of that name, or the page came back
        for component, value, _ in list(state.state_components):
            component.delete_callback(value)
        del holder.session_data[key]
        holder.time_last_used.pop(key, None)
    _give_back_soon(asyncio.get_running_loop())


def _close_later(holder: Any, key: str, grace_s: float) -> None:
    """Mark the session closed: Gradio's own sweep (every second) frees its State values `grace_s` after they were
    last set; `_drop` then removes the rest, in the event loop."""
    state = holder.session_data.get(key)
    if state is None:
        return
    state.STATE_TTL_WHEN_CLOSED = grace_s
    state.is_closed = True
    asyncio.get_running_loop().call_later(grace_s + 1.0, _drop, holder, key, state)


_LOOP: list[asyncio.AbstractEventLoop] = []  # the server's event loop, once a handler of ours ran in it


def _sweep(demo: gr.Blocks) -> None:
    """Forever, every SWEEP_EVERY_S: sessions no event touched for IDLE_SESSION_S are freed as if left (their State
    values by Gradio's own sweep; the sessions themselves in the event loop, once it is known)."""
    while True:
        time.sleep(SWEEP_EVERY_S)
        holder = getattr(demo, "state_holder", None)
        if holder is None:
            continue
        now = datetime.now()
        for key, used in list(holder.time_last_used.items()):
            state = holder.session_data.get(key)
            if state is None or state.is_closed or (now - used).total_seconds() <= IDLE_SESSION_S:
                continue
            forget(key)
            if _LOOP:
                _LOOP[0].call_soon_threadsafe(_close_later, holder, key, 0.0)
            else:  # attributes Gradio's sweep reads: its State values go within a second
                state.STATE_TTL_WHEN_CLOSED = 0.0
                state.is_closed = True


def wire(demo: gr.Blocks) -> None:
    """Free a session's keep when its visitor leaves (`demo.unload`, in the server's event loop), and sweep idle
    sessions (a thread)."""

    async def left(request: gr.Request = None) -> None:
        if not _LOOP:
            _LOOP.append(asyncio.get_running_loop())
        key = session_key(request)
        forget(key)
        holder = getattr(demo, "state_holder", None)
        if holder is not None:
            _close_later(holder, key, LEFT_GRACE_S)

    demo.unload(left)
    threading.Thread(target=_sweep, args=(demo,), name="playground-sessions", daemon=True).start()
