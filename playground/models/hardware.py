"""The hardware's precision facts: the device runs use (found without torch where the page asks), whether its CPU
or GPU computes bfloat16 natively, this machine's kept measurement of bfloat16 against float32 (`models.speed` makes
it), and the one place a dtype choice is resolved into a run's `Precision` record.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from ..precision import Precision, SpeedMeasurement, auto_reason, check_choice, precision_for
from .cache import converted_dir, read_kept_speed
from .catalogue import DEFAULT_TARGET, bundled_entry

SPEED_MODEL = DEFAULT_TARGET  # the model `auto`'s measurement decodes with: bundled, so every machine has it


@functools.cache
def _cpu_bf16_flags() -> tuple[str, ...]:
    """CPU features that make bfloat16 matmuls native (Linux only; elsewhere assume none)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return ()
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    names = {"avx512_bf16": "AVX512-BF16", "amx_bf16": "AMX-BF16"}
    return tuple(label for flag, label in names.items() if flag in flags)


@functools.cache
def _cpu_name() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return ""
    return next((line.partition(":")[2].strip() for line in text.splitlines() if line.startswith("model name")), "")


def _omp_threads() -> int | None:
    """The intra-op threads OMP_NUM_THREADS gives torch (its first level where it lists several); None if unset or
    not a positive number (torch then runs one a core)."""
    first = (os.environ.get("OMP_NUM_THREADS") or "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else None


def machine_identity() -> dict[str, Any]:
    """What a kept measurement was measured on (read without torch): a cache moved to another CPU, core count, thread
    count (OMP_NUM_THREADS: one thread decodes at another ratio than two) or torch release is measured again there."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = ""
    return {"cpu": _cpu_name(), "bf16": list(_cpu_bf16_flags()), "cores": cores, "threads": _omp_threads() or cores,
            "torch": torch_version}


def kept_measurement(spec: str = SPEED_MODEL) -> SpeedMeasurement | None:
    """This machine's measurement of bfloat16 against float32, as kept with `spec`'s conversion; None where there is
    none (a file read: the page asks before any run)."""
    figures = read_kept_speed(converted_dir(bundled_entry(spec).key), machine_identity())
    if figures is None:
        return None
    try:
        measured = SpeedMeasurement(float(figures["float32_tps"]), float(figures["bfloat16_tps"]),
                                    int(figures["new_tokens"]), str(figures["model"]))
    except (TypeError, KeyError, ValueError):
        return None
    return measured if measured.float32_tps > 0 and measured.bfloat16_tps > 0 else None


def _cuda_bf16() -> bool:
    import torch

    return bool(torch.cuda.is_bf16_supported())


def resolve_precision(choice: str = "auto", device: str | None = None) -> Precision:
    """The one place a precision choice is resolved for a run: the hardware asked, the record returned."""
    device = default_device() if device is None else device
    check_choice(choice)
    if choice != "auto":
        return precision_for(choice, device)
    flags = _cpu_bf16_flags() if device == "cpu" else ()
    return precision_for(choice, device, flags, _cuda_bf16() if device.startswith("cuda") else None,
                         kept_measurement() if flags else None)


def as_precision(dtype: str | Precision) -> Precision:
    """A precision record as is, a choice resolved for this host's device (the store's and loader's callers
    may pass either: a prepared run passes the record it resolved)."""
    return dtype if isinstance(dtype, Precision) else resolve_precision(dtype)


def resolve_dtype(name: str, device: str = "cpu") -> torch.dtype:
    """Map a dtype choice (one of DTYPE_CHOICES) to a torch dtype."""
    return resolve_precision(name, device).torch_dtype()


def describe_precision(name: str = "auto", device: str = "cpu") -> str:
    """Why a dtype was picked, for the UI, e.g. "bfloat16: measured 1.9× faster than float32 on this CPU (…)"."""
    return resolve_precision(name, device).reason


def host_device() -> str:
    """The device runs will use, found without importing torch or touching CUDA (the page asks before any run):
    "cuda" on a ZeroGPU Space (`spaces` attaches a GPU per call) or where torch, already imported, sees one, or
    where an NVIDIA driver is loaded; otherwise "cpu"."""
    from .. import gpu

    if gpu.available():
        return "cuda"
    if "torch" in sys.modules:
        # Imported (and not merely present: another thread may be importing it still, and a half-initialised torch
        # has no `cuda` yet; the import statement waits for that import to finish).
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if Path("/proc/driver/nvidia/version").exists() else "cpu"


def host_precision_note() -> str:
    """What "auto" means on this host, for the page before a run: the CPU's facts on a CPU host, the GPU's
    (or, before torch is imported, that it is checked when a run starts) on a GPU host; never the CPU's there."""
    device = host_device()
    if device == "cpu":
        flags = _cpu_bf16_flags()
        return auto_reason(device, flags, measured=kept_measurement() if flags else None)[1]
    from .. import gpu

    known = "torch" in sys.modules and not gpu.available()  # ZeroGPU: CUDA must not be touched outside a run
    return auto_reason(device, gpu_bf16=_cuda_bf16() if known else None)[1]


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
