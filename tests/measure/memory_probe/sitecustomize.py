"""Inside a server started by tests/measure/class_memory.py `--probe DIR`: where the server's memory is, on request.

Loaded by Python at start-up (this folder is put first on the server's PYTHONPATH). A thread waits for a file
`DIR/NAME.go`; it then writes `DIR/NAME.json`: the resident size, glibc's heap figures (`mallinfo2`: bytes in use,
bytes free but kept, bytes mapped apart), the live objects counted by type, the sizes of Gradio's and the
playground's per-session tables, and (with PLAYGROUND_PROBE_TRACEMALLOC=1) a tracemalloc snapshot `DIR/NAME.tm` of
what was allocated since the first probe and is still held, to diff between two points. A measuring aid, never loaded by the app itself.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys
import threading
import time
import tracemalloc
from collections import Counter
from pathlib import Path

_DIR = Path(os.environ["PLAYGROUND_PROBE_DIR"])
_TRACE = os.environ.get("PLAYGROUND_PROBE_TRACEMALLOC") == "1"  # from the first probe on (not the start-up's imports)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _heap() -> dict[str, float]:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    mb = lambda v: round(v / 2**20, 1)  # noqa: E731
    return {"heap_mb": mb(info.arena), "in_use_mb": mb(info.uordblks), "free_kept_mb": mb(info.fordblks),
            "mmapped_mb": mb(info.hblkhd), "mmapped_blocks": info.hblks, "top_releasable_mb": mb(info.keepcost)}


def _rss_mb(field: str = "VmRSS") -> float:
    """A resident size from /proc/self/status: all (VmRSS), anonymous memory (RssAnon) or mapped files (RssFile)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    return -1.0


def _tables() -> dict[str, int]:
    """How many entries Gradio's and the playground's per-session tables hold."""
    sizes: dict[str, int] = {}
    for obj in gc.get_objects():
        kind = type(obj).__name__
        if kind == "StateHolder":
            sizes["gradio.session_data"] = len(getattr(obj, "session_data", {}))
        elif kind == "Queue" and type(obj).__module__ == "gradio.queueing":
            sizes["gradio.event_analytics"] = len(obj.event_analytics)
            sizes["gradio.pending_messages_per_session"] = len(obj.pending_messages_per_session)
            sizes["gradio.pending_event_ids_session"] = len(obj.pending_event_ids_session)
            sizes["gradio.event_ids_to_events"] = len(obj.event_ids_to_events)
        elif kind == "App" and type(obj).__module__ == "gradio.routes":
            sizes["gradio.iterators"] = len(obj.iterators)
    for name in ("playground.app.presenter", "playground.app.uploads", "playground.app.trace_files",
                 "playground.rooms", "playground.pace"):
        module = sys.modules.get(name)
        for attr, value in vars(module).items() if module else ():
            if isinstance(value, (dict, list, set)) and not attr.startswith("__") or hasattr(value, "_rooms"):
                try:
                    sizes[f"{name}.{attr}"] = len(value)
                except TypeError:
                    pass
    return sizes


def _probe(name: str) -> None:
    before = _rss_mb()
    gc.collect()
    counts = Counter(type(o).__qualname__ for o in gc.get_objects())
    figures = {"name": name, "rss_mb": before, "rss_after_gc_mb": _rss_mb(),
               "rss_anon_mb": _rss_mb("RssAnon"), "rss_file_mb": _rss_mb("RssFile"), **_heap(), "threads":
               threading.active_count(), "objects": sum(counts.values()), "by_type": dict(counts.most_common(60)),
               "tables": _tables()}
    if _TRACE and not tracemalloc.is_tracing():
        tracemalloc.start(int(os.environ.get("PLAYGROUND_PROBE_FRAMES", "8")))
    if tracemalloc.is_tracing():
        figures["traced_mb"] = round(tracemalloc.get_traced_memory()[0] / 2**20, 1)
        tracemalloc.take_snapshot().dump(str(_DIR / f"{name}.tm"))
    (_DIR / f"{name}.json").write_text(json.dumps(figures, indent=1))


def _watch() -> None:
    while True:
        for asked in sorted(_DIR.glob("*.go")):
            try:
                _probe(asked.stem)
            except Exception as exc:  # noqa: BLE001 - a probe that fails says why and the server goes on
                (_DIR / f"{asked.stem}.json").write_text(json.dumps({"error": repr(exc)}))
            asked.unlink()
        time.sleep(0.3)


threading.Thread(target=_watch, name="memory-probe", daemon=True).start()
