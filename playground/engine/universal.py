"""Universal decoding with sampling: its dedicated assistant copy (pruned and remapped in place by Transformers) and
Transformers' translator cache, filled before the first seeded run and emptied when the copy goes."""

from __future__ import annotations

from typing import Any, Callable

from ..compat.transformers_internals import universal_translator_cache
from ..models import LoadedModel, ModelStore, Precision
from ..request import RunRequest
from .turns import _RNG_LOCK, one_turn


def _dedicated_assistant(store: ModelStore, req: RunRequest, precision: Precision, target: LoadedModel,
                         progress: Callable[[str], None] | None) -> LoadedModel:
    """The assistant for universal decoding with sampling: a dedicated copy, one per target tokenizer object.

    Transformers prunes this assistant's LM head (and remaps its embeddings) in place to the vocabulary it
    shares with the target, caching that mapping per tokenizer pair; a second target, or the same target
    reloaded (a new tokenizer object), would prune it again and crash. The copy holds on to the tokenizer it
    was made for, so the id in its store key cannot be reused, and the store drops it with its target. Its
    vocabulary is listed in id order: transformers 5.24 prunes the head in get_vocab() order but scatters the
    draft logits in id order, so with a hash-ordered vocabulary q lands on the wrong tokens and sampling is
    biased (the chi-square tests in tests/test_method_sampling.py show both).
    """
    purpose = f"universal-sampling:{req.target}:{id(target.tokenizer)}"
    # Copying the base model and pruning the copy (it draws from torch's generator) take one turn among the runs
    # that take turns on them (`one_turn`): they wait for one step of those runs, not for their end.
    assert req.assistant is not None  # universal decoding always has one (`Method.assistant`)
    assistant = store.get_copy(req.assistant, precision, purpose=purpose, progress=progress, bound_to=target,
                               holding=lambda lock: one_turn([lock]))
    assistant.universal_target_tokenizer = target.tokenizer  # type: ignore[attr-defined]
    tok = assistant.tokenizer
    if getattr(tok, "_playground_id_ordered", False) and assistant.on_release:
        return assistant  # adapted already: no need to wait for the runs using it (they hold its lock by turns)
    with one_turn([assistant.lock, _RNG_LOCK]):  # a sampling run in another thread must not see its random stream move
        if not getattr(tok, "_playground_id_ordered", False):
            unordered = tok.get_vocab
            tok.get_vocab = lambda: dict(sorted(unordered().items(), key=lambda item: item[1]))
            tok._playground_id_ordered = True
        if not assistant.on_release:  # a new copy: prune it, and forget Transformers' translator when it goes
            _build_universal_translator(target, assistant)
            target_tok = target.tokenizer
            assistant.on_release.append(lambda: forget_universal_translator(target_tok, tok))
    return assistant


def _build_universal_translator(target: LoadedModel, assistant: LoadedModel) -> None:
    """Prune the copy now, as generate() would on its first call: pruning builds a new nn.Linear, whose random
    initialisation draws from torch's global generator, so done inside the first seeded run it would make that
    run differ from every later run with the same seed (and from the script that reproduces it)."""
    from transformers.generation.candidate_generator import AssistantVocabTranslatorCache

    AssistantVocabTranslatorCache.get_translator(  # the caller holds `_RNG_LOCK` (by a turn: `one_turn`)
        target.tokenizer, assistant.tokenizer, target.model.config.get_text_config().vocab_size,
        assistant_model=assistant.model, assistant_prune_lm_head=True,
    )


def forget_universal_translator(target_tokenizer: Any, assistant_tokenizer: Any) -> None:
    """Drop Transformers' cached translator for this tokenizer pair. Its cache is keyed weakly on the tokenizers,
    but the translator it stores refers to both of them (and to the pruned copy's embeddings), so without this
    the entry, the tokenizers and the embedding weights live as long as the process."""
    cache = universal_translator_cache()
    pairs = cache.get(target_tokenizer)
    if pairs is not None:
        pairs.pop(assistant_tokenizer, None)
        if not len(pairs):
            cache.pop(target_tokenizer, None)
