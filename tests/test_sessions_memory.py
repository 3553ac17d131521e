"""A departed class's memory handed back to the system (`playground.app.sessions`): once sessions are dropped, one
collection and one glibc `malloc_trim` follow the last drop, however many sessions left at once (model-free: Gradio's
session holder as `sessions._drop` reads it, on an event loop of the test's own); and a real server's threads share
at most `PLAYGROUND_MALLOC_ARENAS` glibc heaps, however many calls run at once."""

from __future__ import annotations

import asyncio
import os
import struct
import tempfile
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import psutil
import pytest
from appserver import LOCAL_TLS, free_port, run_coroutine_apart, start_app, stop_app

from playground.app import sessions, trace_files
from playground.trace import Step, Trace


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


HEAP_MAX = 64 * 2**20  # a glibc heap of an arena beside the main one: 64 MiB reserved, aligned to its size (x86-64)


def glibc_arenas(pid: int) -> int:
    """How many malloc arenas besides the main one a live process has: its anonymous mappings aligned to 64 MiB are
    glibc's heaps, each starting with a `heap_info` whose first field points at its arena; the arenas are the distinct
    pointers that land inside one of those heaps (a coincidentally aligned mapping points nowhere of the kind)."""
    heaps = []
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split()
            low, high = (int(end, 16) for end in fields[0].split("-"))
            if low % HEAP_MAX == 0 and high - low <= HEAP_MAX and fields[1].startswith("rw") and len(fields) == 5:
                heaps.append(low)
    arenas = set()
    with open(f"/proc/{pid}/mem", "rb") as memory:  # the test started the server: its parent may read it
        for low in heaps:
            memory.seek(low)
            (arena,) = struct.unpack("<Q", memory.read(8))
            if any(start <= arena < start + HEAP_MAX for start in heaps):
                arenas.add(arena)
    return len(arenas)


def queue_call(url: str, fn_index: int, data: list[Any], session: str) -> str:
    """Join a handler in Gradio's queue as a page does and read its answer to the end: "done", or what ended it."""
    body = {"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None, "trigger_id": None}
    with httpx.Client(verify=LOCAL_TLS, timeout=300) as client:
        client.post(f"{url}gradio_api/queue/join", json=body).raise_for_status()
        with client.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": session}) as answer:
            for line in answer.iter_lines():
                if '"process_completed"' in line:
                    return "done" if '"success":true' in line.replace(" ", "") else line[:300]
    return "the stream ended early"


def _trace_of(steps: int) -> bytes:
    made = Trace(method="prompt_lookup", target="t", prompt="x", output_ids=[7] * steps, vocab_size=10,
                 steps=[Step(index=i, drafted=[5] * 8, accepted=0, rejected=[5], discarded=[5] * 7, emitted=[7],
                             drafted_text=[" word"] * 8, emitted_text=[" word"], draft_ms=1.0, verify_ms=1.0)
                        for i in range(steps)])
    made.summarize(1.0)
    return made.to_json().encode()


@pytest.mark.server
def test_a_servers_concurrent_calls_share_at_most_two_malloc_arenas(tmp_path: Path) -> None:
    """glibc gives each thread that allocates while the others hold theirs an arena of its own, up to 8 per core;
    freed memory stays in the arena that held it. Twelve sessions loading a trace at once (each handler in a queue
    worker thread) left 14 arenas in a server before the cap; now one beside the main one."""
    if sessions.MALLOPT is None or not Path("/proc/self/maps").exists():
        pytest.skip("glibc on Linux only")
    port = free_port()
    server = start_app(port, tmp_path / "server.log", {"PLAYGROUND_PRELOAD": "0", "TMPDIR": str(tmp_path),
                                                        "GRADIO_TEMP_DIR": str(tmp_path / "gradio")})
    url = f"http://127.0.0.1:{port}/"
    try:
        with httpx.Client(verify=LOCAL_TLS, timeout=120) as client:
            handler = next(d["id"] for d in client.get(f"{url}config").json()["dependencies"]
                           if d.get("api_name") == "on_trace_upload")
            path = client.post(f"{url}gradio_api/upload", files={"files": ("run.json", _trace_of(64))}).json()[0]
        record = {"path": path, "orig_name": "run.json", "meta": {"_type": "gradio.FileData"}}

        with ThreadPoolExecutor(12) as pool:
            done = pool.map(lambda _: queue_call(url, handler, [record], uuid.uuid4().hex[:11]), range(12))
            assert list(done) == ["done"] * 12
        assert glibc_arenas(server.pid) <= 1  # beside the main one: two in all (PLAYGROUND_MALLOC_ARENAS)
    finally:
        stop_app(server)


@pytest.mark.server
def test_a_visitor_who_leaves_takes_their_trace_folder_with_them(tmp_path: Path, tiny_models: dict[str, str]) -> None:
    """A run writes the session's trace file (the Download button) in a folder of its own; when the visitor leaves
    (the page's `unload`), the folder goes at once, not two hours later when the sweep finds it old, as it did."""
    port = free_port()
    server = start_app(port, tmp_path / "server.log", {"PLAYGROUND_PRELOAD": "0", "TMPDIR": str(tmp_path),
                                                        "GRADIO_TEMP_DIR": str(tmp_path / "gradio")})
    url = f"http://127.0.0.1:{port}/"
    folders = tmp_path / "assisted-playground-traces"
    try:
        deps = {d.get("api_name"): d["id"] for d in httpx.get(f"{url}config", verify=LOCAL_TLS, timeout=60).json()
                ["dependencies"]}
        session = uuid.uuid4().hex[:11]
        run = ["the cat sat on the mat and the cat sat", tiny_models["target"], None, "prompt_lookup",
               {"prompt_lookup_num_tokens": 3}, 8, False, 1.0, 1.0, 0, 0, "auto", "auto", False, None]
        assert queue_call(url, deps["generate"], run, session) == "done"
        written = [p for p in folders.iterdir()] if folders.is_dir() else []
        assert len(written) == 1 and list(written[0].glob("trace-*.json")), written  # the run's trace file
        other = uuid.uuid4().hex[:11]
        assert queue_call(url, deps["generate"], run, other) == "done"  # another visitor, who stays
        assert len(list(folders.iterdir())) == 2
        assert queue_call(url, deps["left"], [], session) == "done"
        kept = list(folders.iterdir())
        assert len(kept) == 1 and kept[0] != written[0] and list(kept[0].glob("trace-*.json"))
    finally:
        stop_app(server)


def test_the_sweep_removes_an_old_folder_that_holds_a_handout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The two-hour sweep removed a session's trace file, then failed to remove a folder that still held its handout:
    such a folder, and its entry, stayed for the server's life."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(trace_files, "_TRACE_FOLDERS", {})
    trace = Trace(method="prompt_lookup", target="t", prompt="x", output_ids=[7], vocab_size=10,
                  steps=[Step(index=0, drafted=[5], accepted=0, rejected=[5], emitted=[7])])
    old = [Path(trace_files.save_trace(trace, "left-long-ago")),
           Path(trace_files.save_handout("<p>handout</p>", "prompt_lookup", "left-long-ago"))]
    new = Path(trace_files.save_handout("<p>handout</p>", "prompt_lookup", "here-now"))
    for path in old:
        os.utime(path, (0, 0))
    trace_files._prune_trace_files(trace_files.trace_root(), trace_files.TRACE_FILES_KEPT_S)
    assert not old[0].parent.exists() and "left-long-ago" not in trace_files._TRACE_FOLDERS
    assert new.exists() and "here-now" in trace_files._TRACE_FOLDERS
