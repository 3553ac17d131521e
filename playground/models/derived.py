"""Models built at run time into the cache from a bundled model's conversion, for the methods no bundled checkpoint
can show offline: nothing is downloaded and nothing large is committed (the recipe is in the catalogue).

- `first_layers`: the bundled Gemma cut to its first N layers (with its final norm and its tied output head), saved as
  a model of its own: a smaller drafter with the very same tokenizer, so offline speculative decoding really refuses
  drafts. It is not a trained assistant: it drafts what early exit at layer N drafts, from a cache of its own.
- `tiny_glm4_moe_mtp`, `tiny_gemma4`, `tiny_gemma4_assistant`: tiny randomly initialised look-alikes of the guide's
  MTP models (GLM-4.5-Air's class with its multi-token-prediction layer at `model.layers.46.*`; a Gemma 4 target and
  a Gemma 4 assistant that reads its KV cache), with the bundled Gemma's tokenizer. Transformers' own MTP code paths
  run on them; their words mean nothing.

Each is written into a work folder and renamed into place under the cross-process lock the conversion uses, with a
marker naming its recipe and the conversion it was built from (a new conversion rebuilds it).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..i18n import Message
from ..settings import get_settings
from .cache import _MARKER, _conversion_locks, _conversion_locks_guard, _read_marker, converted_dir, one_process_at_a_time
from .catalogue import CATALOGUE, DerivedSource, ModelEntry, label_message
from .gguf_convert import ensure_converted
from .loaded import Progress, _no_progress

# Bump when a recipe's output changes so old builds are rebuilt, not trusted.
_DERIVED_FORMAT = 2
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
_WEIGHTS = "model.safetensors"
GLM_45_AIR_LAYERS = 46  # Transformers finds GLM-4.5-Air's MTP weights by the key pattern `model.layers.46.*`
# How much of each layer's output the tiny GLM keeps (`_tiny_glm4_moe_mtp`). Measured once by a throwaway script (not
# kept): `_tiny_glm4_moe_mtp` at each value, then `generate(use_mtp=True)` for 40 greedy tokens on the guide's prompt in
# float32 took 21 target forwards at 0 (every draft kept), 24 at 0.3 and 27 at 0.6 (about one draft in four refused),
# its output equal to plain greedy at each; tests/test_offline_refusals.py checks the refusals and the equality.
MTP_LAYER_DAMPING = 0.6


def ensure_local(entry: ModelEntry, progress: Progress | None = None) -> Path:
    """The folder a bundled entry loads from: its GGUF's conversion, or its derived build (made once)."""
    if entry.derived is None:
        return ensure_converted(entry, progress)
    return ensure_derived(entry, progress)


def _marker_for(entry: ModelEntry, base_dir: Path) -> dict[str, Any]:
    assert entry.derived is not None
    recipe = entry.derived
    return {"format": _DERIVED_FORMAT, "key": entry.key, "recipe": recipe.recipe, "layers": recipe.layers,
            "seed": recipe.seed, "backbone": recipe.backbone, "base": _read_marker(base_dir)}


def _built_as(folder: Path, wanted: dict[str, Any]) -> bool:
    marker = _read_marker(folder)
    return isinstance(marker, dict) and {k: v for k, v in marker.items() if k != "built_at"} == wanted


def ensure_derived(entry: ModelEntry, progress: Progress | None = None) -> Path:
    """Build a derived entry into the cache once (one thread and one process at a time), and return its folder."""
    assert entry.derived is not None
    report = progress or _no_progress
    base_dir = ensure_converted(CATALOGUE[entry.derived.base], report)
    if entry.derived.backbone is not None:  # an assistant sized for its target: the target first
        ensure_local(CATALOGUE[entry.derived.backbone], report)
    final = converted_dir(entry.key, get_settings())
    with _conversion_locks_guard:
        lock = _conversion_locks.setdefault(str(final), threading.Lock())
    with lock:
        wanted = _marker_for(entry, base_dir)
        if _built_as(final, wanted):
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        with one_process_at_a_time(final, label_message(entry.key), report) as report:
            if _built_as(final, wanted):  # another process built it while this one waited
                return final
            report(Message.keyed("load.deriving", label=label_message(entry.key)))
            work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
            try:
                out = work / "out"
                out.mkdir()
                _build(entry.derived, base_dir, out)
                for name in _TOKENIZER_FILES:
                    shutil.copy2(base_dir / name, out / name)
                if entry.chat:  # the bundled Gemma is a base model: its tokenizer has no chat template
                    _add_chat_template(out / "tokenizer_config.json")
                # When it was built: a dtype copy keeps its source's marker, so a rebuild invalidates older copies.
                built = {**wanted, "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
                (out / _MARKER).write_text(json.dumps(built, indent=2) + "\n")
                if final.exists():  # a build from an older conversion or format: move it aside
                    final.rename(work / "stale")
                out.rename(final)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return final


# Gemma's turn format (Gemma 3's template, reduced: a system message opens the first user turn, as Gemma's does), for a
# stand-in of a chat model built with the base Gemma's tokenizer; template variables such as enable_thinking are ignored.
GEMMA_TURNS_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first = messages[0]['content'] + '\\n\\n' %}"
    "{% set turns = messages[1:] %}{% else %}{% set first = '' %}{% set turns = messages %}{% endif %}"
    "{% for m in turns %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{{ (first if loop.first else '') + m['content'] }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def _add_chat_template(tokenizer_config: Path) -> None:
    config = json.loads(tokenizer_config.read_text())
    config["chat_template"] = GEMMA_TURNS_TEMPLATE
    tokenizer_config.write_text(json.dumps(config, indent=2) + "\n")


def _build(recipe: DerivedSource, base_dir: Path, out: Path) -> None:
    import torch

    from .transformers_once import MODEL_BUILDS

    if recipe.recipe == "first_layers":
        _first_layers(base_dir, out, recipe.layers)
        return
    base = json.loads((base_dir / "config.json").read_text())
    ids = {name: base[name] for name in ("bos_token_id", "eos_token_id", "pad_token_id")}
    # A build never moves the runs' random state, and builds one model at a time (`MODEL_BUILDS`).
    with MODEL_BUILDS, torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        if recipe.recipe == "tiny_glm4_moe_mtp":
            _tiny_glm4_moe_mtp(base["vocab_size"], ids, recipe.seed, out)
        elif recipe.recipe == "tiny_gemma4":
            _save(_tiny_gemma4(base["vocab_size"], ids, layers=4, hidden=64, per_layer_input=True), ids, out)
        elif recipe.recipe == "tiny_gemma4_assistant":
            from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM

            assert recipe.backbone is not None
            backbone = json.loads((converted_dir(recipe.backbone) / "config.json").read_text())
            config = Gemma4AssistantConfig(
                text_config=_gemma4_config(base["vocab_size"], ids, layers=2, hidden=32, per_layer_input=False),
                backbone_hidden_size=backbone["hidden_size"])
            _save(Gemma4AssistantForCausalLM(config), ids, out)
        else:
            raise ValueError(f"unknown recipe {recipe.recipe!r}")


def _first_layers(base_dir: Path, out: Path, layers: int) -> None:
    """The base model's first `layers` decoder layers, embeddings, final norm and head, in a config that says so."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    config = json.loads((base_dir / "config.json").read_text())
    if not 0 < layers < int(config["num_hidden_layers"]):
        raise ValueError(f"keep 1 to {config['num_hidden_layers'] - 1} layers, not {layers}")
    config["num_hidden_layers"] = layers
    if isinstance(config.get("layer_types"), list):
        config["layer_types"] = config["layer_types"][:layers]
    dropped = tuple(f"model.layers.{i}." for i in range(layers, 1000))
    with safe_open(str(base_dir / _WEIGHTS), framework="pt") as handle:
        tensors = {name: handle.get_tensor(name) for name in handle.keys() if not name.startswith(dropped)}
        metadata = handle.metadata()
    save_file(tensors, str(out / _WEIGHTS), metadata=metadata)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    shutil.copy2(base_dir / "generation_config.json", out / "generation_config.json")


def _save(model: Any, ids: dict[str, int], out: Path) -> None:
    model.generation_config.eos_token_id = ids["eos_token_id"]
    model.generation_config.pad_token_id = ids["pad_token_id"]
    model.save_pretrained(out)


def _gemma4_config(vocab: int, ids: dict[str, int], layers: int, hidden: int, per_layer_input: bool) -> Any:
    from transformers import Gemma4TextConfig

    return Gemma4TextConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=16, max_position_embeddings=2048,
        sliding_window=16, layer_types=["sliding_attention"] * (layers - 1) + ["full_attention"],
        vocab_size_per_layer_input=vocab if per_layer_input else 0, hidden_size_per_layer_input=0, **ids)


def _tiny_gemma4(vocab: int, ids: dict[str, int], layers: int, hidden: int, per_layer_input: bool) -> Any:
    """A tiny random Gemma 4 text model (Gemma4ForCausalLM): it hands its shared KV states to a Gemma 4 assistant."""
    from transformers import Gemma4ForCausalLM

    return Gemma4ForCausalLM(_gemma4_config(vocab, ids, layers, hidden, per_layer_input))


def _glm4_moe_config(vocab: int, ids: dict[str, int], layers: int, hidden: int) -> Any:
    from transformers import Glm4MoeConfig

    # Dense main layers (first_k_dense_replace) keep it small; the MTP layer is MoE as Transformers builds it.
    return Glm4MoeConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2, moe_intermediate_size=hidden,
        num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=2, head_dim=8, n_shared_experts=1,
        n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=GLM_45_AIR_LAYERS,
        max_position_embeddings=2048, num_mtp_layers=1, tie_word_embeddings=False, **ids)


def _tiny_glm4_moe_mtp(vocab: int, ids: dict[str, int], seed: int, out: Path, hidden: int = 16,
                       alpha: float = MTP_LAYER_DAMPING) -> None:
    """GLM-4.5-Air's class, 46 layers, with its MTP layer at `model.layers.46.*` as GLM ships it: the last block of
    a 47-layer twin (built as Transformers builds MTP blocks) plus `enorm`, `hnorm`, `eh_proj`, `shared_head.norm`.

    Random weights alone give an MTP layer that never agrees with its target. So the layers' outputs (attention's
    `o_proj`, the MLPs' `down_proj`) are scaled by `alpha`, making the target close to a bigram model (its next token
    mostly follows from the last one), and the MTP layer is wired to be that bigram model (its block adds nothing,
    `eh_proj` passes the next token's embedding): its draft for the token after next is then the target's choice
    where the context matters little, and refused where it matters."""
    import torch
    from safetensors.torch import save_file
    from transformers import Glm4MoeForCausalLM

    twin = Glm4MoeForCausalLM(_glm4_moe_config(vocab, ids, GLM_45_AIR_LAYERS + 1, hidden))
    with torch.no_grad():
        twin.lm_head.weight.mul_(8.0)  # sharper next-token choices than a random init's near-uniform ones
        for index, layer in enumerate(twin.model.layers):
            scale = alpha if index < GLM_45_AIR_LAYERS else 0.0
            layer.self_attn.o_proj.weight.mul_(scale)
            for name, param in layer.mlp.named_parameters():
                if "down_proj" in name:
                    param.mul_(scale)
    state = {name: tensor.contiguous() for name, tensor in twin.state_dict().items()}
    del twin
    _save(Glm4MoeForCausalLM(_glm4_moe_config(vocab, ids, GLM_45_AIR_LAYERS, hidden)), ids, out)
    prefix = f"model.layers.{GLM_45_AIR_LAYERS}."
    state[prefix + "enorm.weight"] = torch.ones(hidden)
    state[prefix + "hnorm.weight"] = torch.ones(hidden)
    state[prefix + "eh_proj.weight"] = torch.cat([torch.eye(hidden), torch.zeros(hidden, hidden)], dim=1)
    state[prefix + "shared_head.norm.weight"] = torch.ones(hidden)
    for stale in out.glob("model*.safetensors*"):
        stale.unlink()
    save_file(state, str(out / _WEIGHTS), metadata={"format": "pt"})
