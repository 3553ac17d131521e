"""The memory and device-map decision: the bytes a model's parameters will take, read from safetensors headers
before anything is loaded (the store's budget checks it), and where `from_pretrained` puts them (`device_map`: the
first GPU when the model fits in its free memory, else spread by Accelerate).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from huggingface_hub import get_safetensors_metadata, snapshot_download
from safetensors import safe_open

from ..precision import Precision
from ..settings import get_settings
from .cache import _MARKER, _cache_is_valid, converted_dir
from .hardware import as_precision
from .sources import _resolve, hub_reachable

logger = logging.getLogger(__name__)


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
    import torch

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
        assert source.entry is not None
        directory = converted_dir(source.entry.key, settings)
        gguf = source.entry.gguf
        if _cache_is_valid(directory, gguf) if gguf is not None else (directory / _MARKER).is_file():
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
