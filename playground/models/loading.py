"""Loading a model for generation: a catalogue key, Hub id or local folder through Transformers' `from_pretrained`
(a bundled model from its conversion, or from its copy in the dtype loaded), and a bundled model's tokenizer built
by the Rust parser from the tokenizer.json its conversion wrote.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PretrainedConfig

from huggingface_hub import try_to_load_from_cache

from ..i18n import Message, Number
from ..precision import Precision
from ..settings import get_settings
from .cache import ensure_dtype_copy
from .catalogue import CATALOGUE
from .gc_pause import gc_paused
from .derived import ensure_local
from .hardware import as_precision
from .loaded import LoadedModel, ModelLoadError, Progress, _no_progress
from .placement import _free_device_bytes, choose_device_map, estimate_param_bytes
from .sources import _load_error, _local_use_safetensors, _resolve, hub_reachable

logger = logging.getLogger(__name__)


def import_modeling(spec: str) -> None:
    """Import a bundled model's modeling code (seconds: Gemma 3's pulls in parts of torch), so a load that waits
    for another process's conversion imports it meanwhile instead of after."""
    entry = CATALOGUE.get(spec)
    model_type = entry.gguf.model_type if entry is not None and entry.gguf is not None else None
    if model_type is None:
        return
    from .transformers_once import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, transformers

    getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])


def _is_causal_lm(config: PretrainedConfig) -> bool:
    from .transformers_once import MODEL_FOR_CAUSAL_LM_MAPPING

    return type(config) in MODEL_FOR_CAUSAL_LM_MAPPING or "AutoModelForCausalLM" in (
        getattr(config, "auto_map", None) or {})


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
    from .transformers_once import AutoTokenizer, PreTrainedTokenizerFast, tokenizer_class_from_name

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
    from .transformers_once import MODEL_BUILDS, AutoConfig, AutoModelForCausalLM, AutoTokenizer

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
        location: str = str(ensure_local(source.entry, report))
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
        with MODEL_BUILDS:  # Transformers' build switches are process-wide (`transformers_once.MODEL_BUILDS`)
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
    report(Message.keyed("load.loaded", spec=spec, s=Number(loaded.load_s, ".1f")))
    return loaded
