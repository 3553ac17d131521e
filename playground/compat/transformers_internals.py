"""Transformers' (and torch's) private names the engine hooks, each with what it is used for.

Written against transformers 5.24.0 and torch 2.13.0 (`WRITTEN_AGAINST`). `tests/test_compat.py` checks each name is
still where, and what, it was (test_the_transformers_internals_are_where_and_what_they_were).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.generation import utils as generation_utils

WRITTEN_AGAINST = {"transformers": "5.24.0", "torch": "2.13.0"}

# GenerationMixin's factory of the assisted loop's candidate generator: `engine/recorder.py` wraps it on the model
# instance for one run, to patch `get_candidates` and `update_candidate_strategy` of the generator it builds.
CANDIDATE_GENERATOR_FACTORY = "_get_candidate_generator"
# GenerationMixin's builder of the processor list (the caller's processors, then the sampling warpers): wrapped on the
# model instance for a plain run, so the recorder sees the scores each token is picked from.
LOGITS_PROCESSOR_FACTORY = "_get_logits_processor"
# generation/utils.py's rejection-sampling step, which `_assisted_decoding` looks up by its module-level name every
# step and whose first `torch.rand_like` is the draw r: `draw_tap.py` replaces both while a sampling run observes.
SPECULATIVE_SAMPLING = "_speculative_sampling"
SAMPLING_MODULE = generation_utils
RAND_LIKE_MODULE = torch  # `torch.rand_like`, looked up on the module at each call
# `_get_candidate_generator` picks the generator of a drafter that works from the target's shared KV states (a Gemma 4
# assistant) by its class name's prefix, and refuses a target whose class starts with neither of the second pair:
# `engine/preparing.py` states both as model facts (`methods.ModelFacts`) by the same rule.
SHARED_KV_DRAFTERS = ("Gemma4Assistant", "Gemma4UnifiedAssistant")
SHARED_KV_TARGETS = ("Gemma4", "Gemma3n")


def universal_translator_cache() -> Any:
    """`AssistantVocabTranslatorCache._cache`: target tokenizer -> {assistant tokenizer -> translator} (weak keys),
    which `engine/universal.py` empties for a pair when its pruned assistant copy goes."""
    from transformers.generation.candidate_generator import AssistantVocabTranslatorCache

    return AssistantVocabTranslatorCache._cache
