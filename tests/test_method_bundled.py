"""The methods on the real bundled models (Gemma 3 270M, SmolLM2 135M Instruct), float32 for exact equality.

Slow (tens of seconds per test on two cores; the two sliding-window tests prefill 500-token prompts) and they need
the bundled conversions (cached after the first use): marked `bundled` and `slow`, left out of README's quick run.
"""

from __future__ import annotations

import pytest
import torch

from playground.engine import LiveRun, RunRequest, plain_generate, prepare
from playground.models import DEFAULT_TARGET, DEFAULT_UNIVERSAL_ASSISTANT, ModelStore
from playground.trace import Trace, check_invariants

pytestmark = [pytest.mark.bundled, pytest.mark.slow]

PROMPT = "The capital of France is"
LIST_PROMPT = ("Repeat the list exactly. List: apples, pears, plums, grapes, lemons, cherries, melons. "
               "Repeated list: apples, pears,")


def _run(store: ModelStore, reference: bool = True, **kw) -> tuple[Trace, list[int] | None]:
    """The instrumented run (its invariants checked) and, where `reference`, the same `generate()` call made plain
    (a sampled run's is never compared: not computed, it cost a whole second generation)."""
    kw.setdefault("prompt", PROMPT)
    kw.setdefault("target", DEFAULT_TARGET)
    kw.setdefault("dtype", "float32")
    kw.setdefault("max_new_tokens", 16)
    prepared = prepare(RunRequest(**kw), store)
    trace = LiveRun(prepared).run()
    check_invariants(trace)
    return trace, plain_generate(prepared)[0] if reference else None


def test_bundled_speculative_gemma_as_its_own_assistant(store) -> None:
    trace, reference = _run(store, method="speculative", assistant=DEFAULT_TARGET, params={"num_assistant_tokens": 5})
    assert trace.output_ids == reference
    assert trace.summary.accepted == trace.summary.drafted > 0, "a model agrees with itself: every draft is accepted"
    assert trace.summary.tokens_per_step is not None
    assert trace.summary.tokens_per_step > 3


def test_bundled_prompt_lookup_and_early_exit_are_lossless(store) -> None:
    lookup, reference = _run(store, method="prompt_lookup", prompt=LIST_PROMPT, params={"prompt_lookup_num_tokens": 5})
    assert lookup.output_ids == reference and lookup.summary.accepted > 0
    early, reference = _run(store, method="early_exit", params={"assistant_early_exit": 12, "num_assistant_tokens": 3})
    assert early.output_ids == reference and early.summary.drafted > 0
    assert store.get(DEFAULT_TARGET, "float32").model.config.num_hidden_layers == 18


def test_bundled_universal_greedy_and_sampling(store) -> None:
    assistant = store.get(DEFAULT_UNIVERSAL_ASSISTANT, "float32")
    head = assistant.model.get_output_embeddings()
    # Sampling first: it prunes its dedicated copy of the assistant, never the shared one.
    sampled, _ = _run(store, False, method="universal", assistant=DEFAULT_UNIVERSAL_ASSISTANT, sample=True, seed=1,
                      params={"num_assistant_tokens": 5})
    assert not sampled.lossy and sampled.summary.drafted > 0
    assert all(s.q is not None and s.p is not None for s in sampled.steps if s.drafted)
    assert assistant.model.get_output_embeddings() is head and isinstance(head, torch.nn.Linear)

    greedy, reference = _run(store, method="universal", assistant=DEFAULT_UNIVERSAL_ASSISTANT,
                             params={"num_assistant_tokens": 5})
    assert greedy.output_ids == reference, "universal greedy decoding is lossless"
    assert greedy.summary.accepted > 0
    # Drafts are shown in the target's vocabulary (SmolLM2's ids re-tokenised into Gemma's): accepted drafts are
    # the very tokens and texts the target emitted.
    vocab = len(store.get(DEFAULT_TARGET, "float32").tokenizer)
    for step in greedy.steps:
        assert all(0 <= t < vocab for t in step.drafted)
        assert step.drafted_text[: step.accepted] == step.emitted_text[: step.accepted]

    mixed, _ = _run(store, False, method="universal", assistant=DEFAULT_UNIVERSAL_ASSISTANT, sample=True, seed=1,
                    max_new_tokens=8, params={"assistant_ensemble_weight": 0.7})
    assert mixed.lossy


# --------------------------------------------------------------------------- Gemma 3 270M's sliding window (512)

_FRUITS = ("apples", "pears", "plums", "grapes", "lemons", "cherries", "melons", "figs", "dates", "limes")
_MARKET = [f"Day {i}: the market sold {_FRUITS[i % 10]}, {_FRUITS[i * 3 % 10]} and {_FRUITS[i * 7 % 10]}."
           for i in range(1, 200)]
WINDOW = 512


def _market_prompt(tokenizer, tokens: int) -> str:
    """The longest run of market-log words whose prompt stays within `tokens` tokens (a word or so short)."""
    text = ""
    for word in " ".join(_MARKET).split():
        longer = f"{text} {word}".strip()
        if len(tokenizer(longer).input_ids) > tokens:
            return text
        text = longer
    raise AssertionError("not enough words")


@pytest.mark.parametrize("prompt_tokens, new_tokens", [(508, 8), (518, 5)],
                         ids=["bundled-generation-crosses-512", "bundled-prompt-beyond-512"])
def test_bundled_lossless_methods_equal_a_baseline_run_across_the_sliding_window(store, prompt_tokens,
                                                                                 new_tokens) -> None:
    """Slow (a 500-token prefill per run): every lossless method the bundled models allow, float32 greedy, equals
    plain generate() without drafting, while the sliding-window layers' cache is rolled back after rejections."""
    target = store.get(DEFAULT_TARGET, "float32")
    assert target.model.config.sliding_window == WINDOW
    prompt = _market_prompt(target.tokenizer, prompt_tokens)
    baseline = prepare(RunRequest(prompt=prompt, target=DEFAULT_TARGET, max_new_tokens=new_tokens, dtype="float32"),
                       store)
    n_prompt = baseline.input_ids.shape[1]
    assert (n_prompt < WINDOW < n_prompt + new_tokens) if prompt_tokens < WINDOW else n_prompt > WINDOW
    reference, _ = plain_generate(baseline)
    assert len(reference) == new_tokens
    for method, assistant, params in [
        ("speculative", DEFAULT_TARGET, {"num_assistant_tokens": 4}),
        ("prompt_lookup", None, {"prompt_lookup_num_tokens": 5}),
        ("early_exit", None, {"assistant_early_exit": 12, "num_assistant_tokens": 3}),
        ("universal", DEFAULT_UNIVERSAL_ASSISTANT, {"num_assistant_tokens": 4}),
    ]:
        trace = LiveRun(prepare(RunRequest(prompt=prompt, target=DEFAULT_TARGET, method=method, assistant=assistant,
                                           params=params, max_new_tokens=new_tokens, dtype="float32"), store)).run()
        check_invariants(trace)
        assert trace.output_ids == reference, f"{method} differs from plain greedy decoding past the window"
        assert trace.summary.accepted > 0, method
