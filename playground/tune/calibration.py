"""The calibration's timers (torch): the target's forwards per verification width, Transformers' own candidate
generator's calls per draft length, prompt lookup's calls per n-gram size, every figure sampled in turn.
"""

from __future__ import annotations

import copy
import statistics
import time
from typing import Any, Callable, Sequence

import torch

from ..engine import check_stopped, give_way
from .cost import SPREAD_LIMIT, SPREAD_ROUNDS, _spread

def _sampled_each(measures: dict[int, Callable[[], float]], repeats: int) -> tuple[dict[int, float], float]:
    """(median seconds per key, widest spread) of every `measures[key]()`, sampled in passes that take each key once
    in turn (1, 2, …, N, 1, 2, …, N, …), never one key's samples back to back. The machine's pace drifts over
    seconds: samples taken back to back share one slow or fast spell, so the median of three of them carries that
    spell into the one figure (a calibrated draft of 5 tokens came out above the one of 6, a forward of 10 tokens
    below those of 9 and 11, bundled Gemma at commit a8500a6); interleaved, a spell touches one sample of many
    figures, and each median leaves it out. Keys whose samples still spread wider than SPREAD_LIMIT get more passes
    of their own, up to SPREAD_ROUNDS times `repeats` samples."""
    samples: dict[int, list[float]] = {key: [] for key in measures}

    def passes(keys: list[int]) -> None:
        for _ in range(repeats):
            for key in keys:
                check_stopped()
                give_way()
                samples[key].append(measures[key]())

    passes(list(measures))
    for _ in range(SPREAD_ROUNDS - 1):
        wide = [key for key in measures if _spread(samples[key]) > SPREAD_LIMIT]
        if not wide:
            break
        passes(wide)
    return ({key: statistics.median(values) for key, values in samples.items()},
            max((_spread(values) for values in samples.values()), default=0.0))


def _verification_work(logits: torch.Tensor, width: int) -> None:
    """What the assisted loop does with a verification's logits besides the forward (`_assisted_decoding` 2.3 and 3):
    the last `width` rows to float32, a copy of them, and the greedy pick per row."""
    new_logits = logits[:, -width:].to(dtype=torch.float32)
    new_logits.clone()
    new_logits.argmax(dim=-1)


def _time_forwards(model: Any, context: list[int], widths: Sequence[int], repeats: int
                   ) -> tuple[float, dict[int, float], float]:
    """(prefill time, median verification per width, widest spread) with a KV cache of `context`: the target's
    forward over `width` tokens and the loop's work on its logits."""
    device = model.device
    start = time.perf_counter()
    cache = model(input_ids=torch.tensor([context], device=device), use_cache=True).cache
    prefill = time.perf_counter() - start

    def forward(width: int) -> Callable[[], float]:
        ids = torch.tensor([(context * width)[:width]], device=device)

        def one() -> float:
            # A fresh copy each time: cropping back would need the past recording that sliding-window layers
            # only keep when asked before the prefill.
            scratch = copy.deepcopy(cache)
            start = time.perf_counter()
            _verification_work(model(input_ids=ids, cache=scratch, use_cache=True).logits, width)
            return time.perf_counter() - start

        return one

    times, widest = _sampled_each({width: forward(width) for width in widths}, repeats)
    return prefill, times, widest


def drafter_generator(model: Any, context: list[int], longest: int) -> Any:
    """Transformers' own `AssistedCandidateGenerator` on `model` after `context`, set up as the assisted loop sets it
    up (an assistant `generate()` with its config, its cache recording its past for the crop), drafting without EOS
    or confidence stops so that a call drafts exactly `num_assistant_tokens` tokens."""
    from transformers.generation.candidate_generator import AssistedCandidateGenerator

    config = copy.deepcopy(model.generation_config)
    config.update(max_length=len(context) + longest + 2, min_length=0, do_sample=False, eos_token_id=None,
                  return_dict_in_generate=True, output_scores=True)
    ids = torch.tensor([context], device=model.device)
    generator = AssistedCandidateGenerator(input_ids=ids, assistant_model=model, generation_config=config,
                                           model_kwargs={"attention_mask": torch.ones_like(ids), "use_cache": True})
    # No confidence stop, and no re-fit of the threshold (which keeps lists of probabilities) where scikit-learn is
    # installed: the calibration times drafts of a known length.
    generator.assistant_generation_config.assistant_confidence_threshold = 0.0
    generator.generation_config.assistant_confidence_threshold = 0.0
    generator.generation_config.eos_token_id = None
    return generator


def _time_drafter_calls(model: Any, context: list[int], lengths: Sequence[int], repeats: int
                        ) -> tuple[float, dict[int, float], float]:
    """(the first call's time, median `get_candidates` call per draft length, widest spread): the call the assisted
    loop makes each step, made by Transformers' own candidate generator. After its first call (the drafter's prefill
    of `context`) each call crops the drafter's cache to all but the last two tokens, re-reads those two and drafts
    with the assistant's `generate()`, as every step of the loop does."""
    ids = torch.tensor([context], device=model.device)
    generator = drafter_generator(model, context, max(lengths, default=1))
    generator.num_assistant_tokens = min(lengths, default=1)
    start = time.perf_counter()
    generator.get_candidates(ids)
    first = time.perf_counter() - start

    def call(length: int) -> Callable[[], float]:
        def one() -> float:
            generator.num_assistant_tokens = length
            start = time.perf_counter()
            generator.get_candidates(ids)
            return time.perf_counter() - start

        return one

    times, widest = _sampled_each({length: call(length) for length in lengths}, repeats)
    return first, times, widest


def _time_lookups(context: list[int], ngram_sizes: Sequence[int], tokens: int, eos_ids: frozenset[int],
                  vocab_size: int, repeats: int) -> tuple[dict[int, float], float]:
    """(median prompt-lookup `get_candidates` call per max n-gram size, widest spread) on `context`."""
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    ids = torch.tensor([context])
    eos = torch.tensor(sorted(eos_ids)) if eos_ids else None

    def lookup(size: int) -> Callable[[], float]:
        generator = PromptLookupCandidateGenerator(eos_token_id=eos, num_output_tokens=tokens,
                                                   max_matching_ngram_size=size, max_length=len(context) + tokens + 2,
                                                   vocab_size=vocab_size)

        def one() -> float:
            start = time.perf_counter()
            generator.get_candidates(ids)
            return time.perf_counter() - start

        return one

    return _sampled_each({size: lookup(size) for size in ngram_sizes}, repeats)
