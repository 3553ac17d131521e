"""The model cache on disk: where a bundled model's conversion and its copies in other dtypes live and when each is
valid (its marker), the precision measurement kept with a conversion (`keep_speed`), and the cross-process lock
under which one process at a time writes any of them, the others waiting and relaying its progress
(`one_process_at_a_time`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from safetensors import safe_open

from ..i18n import Message
from ..settings import Settings, get_settings
from .catalogue import GgufSource
from .loaded import Progress, _first_line, _no_progress

logger = logging.getLogger(__name__)


# Bump when the conversion output changes so old caches are rebuilt, not trusted.
_CONVERSION_FORMAT = 1
_MARKER = "playground.json"


# One thread at a time per conversion or dtype copy (one process at a time: `one_process_at_a_time`).
_conversion_locks: dict[str, threading.Lock] = {}
_conversion_locks_guard = threading.Lock()


def converted_dir(key: str, settings: Settings | None = None) -> Path:
    """Where the safetensors conversion of a bundled model lives."""
    settings = settings or get_settings()
    return settings.cache_dir / "converted" / key.replace("/", "--")


def _cache_is_valid(directory: Path, gguf: GgufSource) -> bool:
    """A finished conversion of this exact GGUF by this conversion format."""
    try:
        marker = json.loads((directory / _MARKER).read_text())
    except (OSError, ValueError):
        return False
    return (isinstance(marker, dict) and marker.get("format") == _CONVERSION_FORMAT
            and marker.get("gguf_sha256") == gguf.sha256)


# How often a process waiting for another's conversion looks at its progress and tries the lock again: a cold
# start waits twice (the conversion, then its dtype copy), each wait ending up to this late; a look costs ~0.1 ms.
_WAIT_POLL_S = 0.1


def _lock_file(work: Path, suffix: str) -> Path:
    """Beside `work`, in a folder of their own (a lock file stays: removing one races with its next holder)."""
    folder = work.parent / ".locks"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{work.name}.{suffix}"


def _publish(path: Path, message: str) -> None:
    """Write a progress line where processes waiting for this work read it (`one_process_at_a_time`)."""
    data = message.to_dict() if isinstance(message, Message) else {"text": str(message)}
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    try:
        partial.write_text(json.dumps(data, default=str))
        os.replace(partial, path)
    except OSError:  # progress for others is a courtesy: never fail the work over it
        pass


def _read_published(path: Path) -> str | None:
    try:
        data = json.loads(path.read_text())
        return Message.from_dict(data) if "key" in data else str(data["text"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


@contextlib.contextmanager
def one_process_at_a_time(work: Path, label: str, report: Progress) -> Iterator[Progress]:
    """Do the work that writes `work` (a conversion, a dtype copy) in one process at a time, and say how it goes.

    The server starts converting the default model in a second process while its page imports (`convert_ahead`);
    a run that needs the model meanwhile, or a CLI run beside the server, waits here instead of converting it
    again, and reports what the converting process reports (it publishes each progress line beside the lock).
    Yields the progress function to do the work with: `report`, also published. A lock file beside `work`
    (in `.locks/`), held with `flock`, which the system releases when its process dies; where there is no
    `fcntl` (Windows) or the file system takes no locks, processes do not wait for each other, and the rename
    into place keeps one conversion. A process that waits waits as long as the other works.
    """
    lock_path, progress_path = _lock_file(work, "lock"), _lock_file(work, "progress.json")
    try:
        import fcntl
    except ImportError:
        yield report
        return
    with open(lock_path, "a") as handle:
        waited_for: str | None = None
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass
            except OSError as exc:  # a file system without locks (some network mounts): as without fcntl
                logger.debug("no lock for %s (%s): not waiting for other processes", work, _first_line(exc))
                yield report
                return
            else:
                break
            # Another process holds it: say what it is doing until it is done.
            latest = _read_published(progress_path) or Message.keyed("load.waiting_other", label=label)
            if latest != waited_for:
                report(latest)
                waited_for = latest
            time.sleep(_WAIT_POLL_S)

        def report_and_publish(message: str) -> None:
            _publish(progress_path, message)
            report(message)

        try:
            yield report_and_publish
        finally:
            with contextlib.suppress(OSError):
                progress_path.unlink()
            fcntl.flock(handle, fcntl.LOCK_UN)


_WEIGHTS = "model.safetensors"


def dtype_copy_dir(directory: Path, dtype_name: str) -> Path:
    """Where a conversion's weights are kept cast to another dtype (beside it: `….bfloat16`)."""
    return directory.with_name(f"{directory.name}.{dtype_name}")


def _read_marker(directory: Path) -> Any:
    return _read_marker_file(directory / _MARKER)


def valid_dtype_copy(directory: Path, dtype_name: str) -> Path | None:
    """The copy of `directory`'s weights in `dtype_name`, if one was made from this very conversion.

    The copy's marker holds the conversion's own marker (its GGUF's sha256, format and time of conversion),
    so a copy left from an earlier conversion of the folder is refused, and made again.
    """
    copy_dir = dtype_copy_dir(directory, dtype_name)
    source = _read_marker(directory)
    if source is None or _read_marker(copy_dir) != {"dtype": dtype_name, "source": source}:
        return None
    return copy_dir if (copy_dir / _WEIGHTS).is_file() else None


def ensure_dtype_copy(directory: Path, dtype_name: str, progress: Progress | None = None) -> Path | None:
    """The copy of a conversion's weights in `dtype_name`, made now if there is none from this conversion;
    None when it cannot be written (a full or read-only disk): the load then casts the float32 weights.

    Made where it is first needed (right after a conversion, on a cold start) rather than in the background,
    so that it never competes with a first generation: once per conversion and dtype, about a second.
    """
    with _conversion_locks_guard:
        lock = _conversion_locks.setdefault(str(dtype_copy_dir(directory, dtype_name)), threading.Lock())
    with lock:
        copy_dir = valid_dtype_copy(directory, dtype_name)
        if copy_dir is not None:
            return copy_dir
        try:
            with one_process_at_a_time(dtype_copy_dir(directory, dtype_name), f"{directory.name} ({dtype_name})",
                                       progress or _no_progress) as report:
                copy_dir = valid_dtype_copy(directory, dtype_name)  # another process may have made it meanwhile
                if copy_dir is None:
                    report(Message.keyed("load.dtype_copy", dtype=dtype_name))
                    copy_dir = write_dtype_copy(directory, dtype_name)
        except OSError as exc:
            logger.warning("could not keep a %s copy of %s (%s): casting on each load", dtype_name,
                           directory, _first_line(exc))
    return copy_dir


def write_dtype_copy(directory: Path, dtype_name: str) -> Path:
    """Cast `directory`'s float32 safetensors to `dtype_name` (what from_pretrained(dtype=…) does on each
    load: `Tensor.to`) and keep the result beside it, written into a temporary folder and renamed into place.

    A warm bfloat16 load then maps half the bytes and casts nothing (0.5-0.7 s of CPU for Gemma 3 270M on
    a two-core machine, and 0.54 GB read instead of 1.07 GB).
    """
    import torch
    from safetensors.torch import save_file

    copy_dir = dtype_copy_dir(directory, dtype_name)
    source = _read_marker(directory)
    work = Path(tempfile.mkdtemp(prefix=f".{copy_dir.name}.", suffix=".tmp", dir=directory.parent))
    try:
        out = work / "out"
        out.mkdir()
        with safe_open(str(directory / _WEIGHTS), framework="pt") as handle:
            tensors = {name: handle.get_tensor(name).to(getattr(torch, dtype_name)) for name in handle.keys()}
            metadata = handle.metadata()
        save_file(tensors, str(out / _WEIGHTS), metadata=metadata)
        del tensors
        for name in ("config.json", "generation_config.json"):
            if (directory / name).is_file():
                shutil.copy2(directory / name, out / name)
        (out / _MARKER).write_text(json.dumps({"dtype": dtype_name, "source": source}, indent=2) + "\n")
        if copy_dir.exists():  # a copy of an earlier conversion: move it aside
            copy_dir.rename(work / "stale")
        try:
            out.rename(copy_dir)
        except OSError:  # another process wrote the same copy first
            if valid_dtype_copy(directory, dtype_name) is None:
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return copy_dir


# `auto`'s measurement of bfloat16 against float32 on this machine (`models.speed`), kept inside the conversion it was
# measured on: a new conversion starts without one, and a cache moved to another machine (another CPU, core count or
# torch) is measured again there.
_SPEED = "precision_speed.json"


def speed_file(directory: Path) -> Path:
    """Where a conversion keeps the precision measurement made with it."""
    return directory / _SPEED


def read_kept_speed(directory: Path, machine: dict[str, Any]) -> dict[str, Any] | None:
    """The figures kept by `keep_speed` for this very conversion and machine; None where there are none (or they were
    measured on another conversion or machine, or the file is not ours)."""
    kept = _read_marker_file(speed_file(directory))
    source = _read_marker(directory)
    if (not isinstance(kept, dict) or source is None or kept.get("source") != source
            or kept.get("machine") != machine or not isinstance(kept.get("figures"), dict)):
        return None
    return kept["figures"]


def keep_speed(directory: Path, machine: dict[str, Any], figures: dict[str, Any]) -> None:
    """Keep a measurement with the conversion it was made on (written whole, then renamed into place)."""
    data = {"source": _read_marker(directory), "machine": machine, "figures": figures}
    path = speed_file(directory)
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(partial, path)


def _read_marker_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
