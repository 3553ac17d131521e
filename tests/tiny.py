"""Tiny randomly initialised models and a small tokenizer, saved to disk like real checkpoints.

Seconds to build, no download; the playground loads them through its real loader.
"""

from __future__ import annotations

from pathlib import Path

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


def build_tokenizer(vocab_size: int = 384) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
    )
    fast.chat_template = (
        "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    return fast


def llama_config(tokenizer: PreTrainedTokenizerFast, layers: int = 4, hidden: int = 64) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )


def save_tiny_llama(path: Path, seed: int, layers: int = 4, hidden: int = 64, tokenizer: PreTrainedTokenizerFast | None = None,
                    perturb_from: Path | None = None, noise: float = 0.0) -> Path:
    """Save a tiny Llama; with `perturb_from`, a noisy copy of that model (a partly agreeing drafter)."""
    tokenizer = tokenizer or build_tokenizer()
    torch.manual_seed(seed)
    if perturb_from is not None:
        model = LlamaForCausalLM.from_pretrained(perturb_from)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(noise * torch.randn_like(p) * p.std())
    else:
        model = LlamaForCausalLM(llama_config(tokenizer, layers, hidden))
        with torch.no_grad():  # sharper distributions than the default init: more ties broken clearly
            model.lm_head.weight.mul_(8.0)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path
