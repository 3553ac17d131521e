"""The Download button's trace files: one per session, under one server-made folder, old ones swept.

Every path here is the server's own (`trace_root()`, a random folder name per session, the registry's method name):
the session hash a client sends is only ever a dictionary key. The run's trace itself reaches the other tabs in a
`gr.State`; these files are only what the visitor downloads.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import tempfile
import threading
import time
from pathlib import Path

from ..methods import get_method
from ..trace import Trace

TRACE_FILES_KEPT_S = 7200  # as long as Gradio keeps its own copies (the page's `delete_cache`)
TRACE_PRUNE_EVERY_S = 600  # the sweep reads every session's folder: not at the end of every run
_TRACE_FILES_LOCK = threading.Lock()  # pruning never removes a folder another run is writing into
_last_trace_prune = -math.inf  # time.monotonic() of the last sweep (none yet)
# Session key -> the name of its trace folder. The key is the client's session hash, which a client
# chooses freely (`../../x`, an absolute path): it is only ever a dictionary key here, never part of a
# path. Folder names are random and made by the server.
_TRACE_FOLDERS: dict[str, str] = {}


def trace_root() -> Path:
    """The one directory the server writes trace files under (one folder per session inside it)."""
    return Path(tempfile.gettempdir()) / "assisted-playground-traces"


def save_trace(trace: Trace, key: str) -> str:
    """Write the run's trace for the Download button: one file per session (the previous one is
    replaced), and sessions idle for longer than TRACE_FILES_KEPT_S lose theirs (swept at most every
    TRACE_PRUNE_EVERY_S), so a long-lived server's temp dir does not fill up with every visitor's traces.
    Every path is the server's own: `trace_root()`, a random folder name, the registry's method name."""
    root = trace_root()
    global _last_trace_prune
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with _TRACE_FILES_LOCK:
        if time.monotonic() - _last_trace_prune >= TRACE_PRUNE_EVERY_S:
            _last_trace_prune = time.monotonic()
            _prune_trace_files(root, TRACE_FILES_KEPT_S)
        folder = root / _TRACE_FOLDERS.setdefault(key, secrets.token_hex(16))
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("trace-*.json"):
            old.unlink(missing_ok=True)
        path = folder / f"trace-{get_method(trace.method).name}-{stamp}.json"
        trace.save(path)
    return str(path)


def save_handout(page: str, method: str, key: str) -> str:
    """Write a run's handout (`playground.handout`) beside the session's trace file, replacing the previous one;
    swept with it. The path is the server's own, as `save_trace`'s is."""
    with _TRACE_FILES_LOCK:
        folder = trace_root() / _TRACE_FOLDERS.setdefault(key, secrets.token_hex(16))
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("handout-*.html"):
            old.unlink(missing_ok=True)
        path = folder / f"handout-{get_method(method).name}-{time.strftime('%Y%m%d-%H%M%S')}.html"
        path.write_text(page, encoding="utf-8")
    return str(path)


def forget_session(key: str) -> None:
    """The visitor left: their folder (the last run's trace file and handout) and its entry go now, not when the
    sweep finds them two hours old."""
    with _TRACE_FILES_LOCK:
        name = _TRACE_FOLDERS.pop(key, None)
        if name:
            _remove_folder(trace_root() / name)


def _remove_folder(folder: Path) -> None:
    """A session's folder and the files this module wrote in it (a folder holding anything else stays)."""
    with contextlib.suppress(OSError):  # gone already, or not ours to remove
        for made in [*folder.glob("trace-*.json"), *folder.glob("handout-*.html")]:
            made.unlink(missing_ok=True)
        folder.rmdir()


def drop_session_trace(key: str) -> None:
    """A new run starts: the session's previous trace file goes (its Download button is hidden now)."""
    with _TRACE_FILES_LOCK:
        name = _TRACE_FOLDERS.get(key)
        for old in (trace_root() / name).glob("trace-*.json") if name else ():
            old.unlink(missing_ok=True)


def _prune_trace_files(root: Path, max_age_s: float) -> None:
    """Remove the folders of sessions whose newest trace is older than `max_age_s` (and forget them)."""
    now = time.time()
    for folder in (root.iterdir() if root.is_dir() else ()):
        with contextlib.suppress(OSError):  # gone already, or not ours to remove
            files = [*folder.glob("trace-*.json"), *folder.glob("handout-*.html")]
            newest = max((f.stat().st_mtime for f in files), default=folder.stat().st_mtime)
            if now - newest > max_age_s:
                _remove_folder(folder)
    for key, name in list(_TRACE_FOLDERS.items()):
        if not (root / name).is_dir():
            del _TRACE_FOLDERS[key]
