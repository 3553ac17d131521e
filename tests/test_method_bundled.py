"""The methods on the real bundled models (Gemma 3 270M, SmolLM2 135M Instruct), float32 for exact equality.

Slow-ish (seconds per run on two cores) and they need the bundled conversions (cached after the
first use): deselect with `-k "not bundled"` for a quick run.
"""

from __future__ import annotations

import torch

from playground.engine import LiveRun, RunRequest, plain_generate, prepare
from playground.models import DEFAULT_TARGET, DEFAULT_UNIVERSAL_ASSISTANT, ModelStore
from playground.trace import Trace, check_invariants

PROMPT = "The capital of France is"
LIST_PROMPT = ("Repeat the list exactly. List: apples, pears, plums, grapes, lemons, cherries, melons. "
               "Repeated list: apples, pears,")


def _run(store: ModelStore, **kw) -> tuple[Trace, list[int]]:
    kw.setdefault("prompt", PROMPT)
    kw.setdefault("target", DEFAULT_TARGET)
    kw.setdefault("dtype", "float32")
    kw.setdefault("max_new_tokens", 16)
    prepared = prepare(RunRequest(**kw), store)
    trace = LiveRun(prepared).run()
    reference, _ = plain_generate(prepared)
    check_invariants(trace)
    return trace, reference


def test_bundled_speculative_gemma_as_its_own_assistant(store) -> None:
    trace, reference = _run(store, method="speculative", assistant=DEFAULT_TARGET, params={"num_assistant_tokens": 5})
    assert trace.output_ids == reference
    assert trace.summary.accepted == trace.summary.drafted > 0, "a model agrees with itself: every draft is accepted"
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
    sampled, _ = _run(store, method="universal", assistant=DEFAULT_UNIVERSAL_ASSISTANT, sample=True, seed=1,
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

    mixed, _ = _run(store, method="universal", assistant=DEFAULT_UNIVERSAL_ASSISTANT, sample=True, seed=1,
                    max_new_tokens=8, params={"assistant_ensemble_weight": 0.7})
    assert mixed.lossy
