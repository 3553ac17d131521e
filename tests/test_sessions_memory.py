"""A departed class's memory handed back to the system (`playground.app.sessions`): once sessions are dropped, one
collection and one glibc `malloc_trim` follow the last drop, however many sessions left at once. Model-free: Gradio's
session holder as `sessions._drop` reads it, on an event loop of the test's own."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
from appserver import run_coroutine_apart

from playground.app import sessions


def holder_with(keys: list[str]) -> Any:
    states = {key: SimpleNamespace(is_closed=True, state_components=[]) for key in keys}
    return SimpleNamespace(lock=threading.Lock(), session_data=dict(states), time_last_used=dict.fromkeys(keys, 0.0))


def test_a_class_leaving_gives_its_memory_back_once(monkeypatch: pytest.MonkeyPatch) -> None:
    given: list[str] = []
    monkeypatch.setattr(sessions, "TRIM_AFTER_S", 0.05)
    monkeypatch.setattr(sessions, "give_back", lambda: given.append(threading.current_thread().name) or True)
    keys = [f"student-{i}" for i in range(30)]
    holder = holder_with(keys)

    loop_thread: list[str] = []

    async def leave() -> None:
        loop_thread.append(threading.current_thread().name)
        states = dict(holder.session_data)
        for key in keys:
            sessions._drop(holder, key, states[key])
        await asyncio.sleep(0.5)

    run_coroutine_apart(leave())
    assert holder.session_data == {}
    assert len(given) == 1  # one give-back for the whole class, after the last drop
    assert given[0] != loop_thread[0]  # off the event loop's thread (a thread of its own beside Playwright's loop)


def test_the_give_back_returns_freed_heap_pages_to_the_system() -> None:
    """Freed objects in the middle of glibc's heap stay resident (only a free top is trimmed by itself): 117 MB freed
    behind blocks still alive leave the resident size where it was, until the give-back."""
    if sessions.MALLOC_TRIM is None:
        pytest.skip("no glibc malloc_trim here")
    process = psutil.Process()
    blocks = [bytearray(64 * 1024) for _ in range(2000)]  # 125 MB below glibc's mmap threshold: on its heap
    kept = blocks[::16]  # one block in 16 stays: the freed ones are holes, not the heap's top
    del blocks
    freed = process.memory_info().rss
    sessions.give_back()
    assert freed - process.memory_info().rss > 60 * 2**20
    assert len(kept) == 125
