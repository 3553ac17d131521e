"""Every drafting method of the brief on tiny random checkpoints: the registry, the engine, the CLI.

Every instrumented run must equal plain `generate()` with the same arguments; lossless methods must
reproduce a baseline run (no drafting) token for token (greedy, float32); every trace must satisfy the
invariants. test_lossless.py does the same on sliding-window models and checks the recorded p and q. The statistical tests of sampling live in test_method_sampling.py,
the runs on the real bundled models in test_method_bundled.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from playground import cli
from playground.engine import LiveRun, RunRequest, model_facts, plain_generate, prepare
from playground.errors import PlaygroundError
from playground.methods import ENSEMBLE, METHODS, MethodError, ModelFacts, get_method
from playground.models import ModelStore
from playground.trace import Trace, check_invariants
from tiny import (
    build_other_tokenizer, build_tokenizer, save_tiny_deepseek_v3, save_tiny_gemma4, save_tiny_gemma4_assistant,
    save_tiny_llama,
)

PROMPT = "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three,"
DRAFT_KEYS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


# --------------------------------------------------------------------------- fixtures


pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.models]  # models built: not in the model-free tier


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Tiny checkpoints for every method. Built once per module (a few seconds)."""
    root = tmp_path_factory.mktemp("methods")
    tok = build_tokenizer()
    paths = {
        "target": save_tiny_llama(root / "target", seed=0, tokenizer=tok),
        "target2": save_tiny_llama(root / "target2", seed=4, tokenizer=tok),
        "noisy": save_tiny_llama(root / "noisy", seed=1, tokenizer=tok, perturb_from=root / "target", noise=0.3),
        # another tokenizer (other size, other ids): the universal pair
        "other_tok": save_tiny_llama(root / "other_tok", seed=3, tokenizer=build_other_tokenizer(320)),
        # another tokenizer of the *same size* (384): what Transformers cannot tell apart
        "same_size": save_tiny_llama(root / "same_size", seed=3, tokenizer=build_other_tokenizer(384)),
        "deepseek": save_tiny_deepseek_v3(root / "deepseek", seed=0, tokenizer=tok),
        "deepseek_no_mtp": save_tiny_deepseek_v3(root / "deepseek_no_mtp", seed=0, tokenizer=tok, with_mtp=False),
        "gemma4": save_tiny_gemma4(root / "gemma4", seed=0, tokenizer=tok),
        "gemma4_assistant": save_tiny_gemma4_assistant(root / "gemma4_assistant", seed=1, tokenizer=tok),
    }
    return {name: str(path) for name, path in paths.items()}


def _request(**kw) -> RunRequest:
    kw.setdefault("dtype", "float32")
    return RunRequest(**kw)


def _run(store: ModelStore, **kw) -> tuple[Trace, list[int]]:
    """The instrumented run, checked against plain generate() with the very same arguments (the instrumentation
    changes nothing, seeded sampling included), and the reference a lossless greedy run must equal: a baseline
    run, i.e. plain generate() of the same target and prompt with no drafting at all (for sampling runs, the
    same call's output)."""
    kw.setdefault("prompt", PROMPT)
    kw.setdefault("dtype", "float32")
    kw.setdefault("max_new_tokens", 20)
    prepared = prepare(_request(**kw), store)
    trace = LiveRun(prepared).run()
    same_call, _ = plain_generate(prepared)
    assert trace.output_ids == same_call, "the instrumented run must be the plain generate() call"
    check_invariants(trace)
    assert Trace.from_json(trace.to_json()) == trace
    if kw.get("sample"):
        return trace, same_call
    baseline = prepare(_request(**{**kw, "method": "baseline", "assistant": None, "params": {}}), store)
    return trace, plain_generate(baseline)[0]


def _assert_lossless(trace: Trace, reference: list[int]) -> None:
    assert trace.output_ids == reference, "greedy drafting must reproduce a baseline run (plain greedy decoding)"
    assert not trace.lossy
    for step in trace.steps[:-1]:
        assert len(step.emitted) == step.accepted + 1


def _draft_settings(model) -> dict:
    return {k: getattr(model.generation_config, k, None) for k in DRAFT_KEYS}


# --------------------------------------------------------------------------- the registry (no models)


def test_every_method_is_fully_described() -> None:
    assert list(METHODS) == ["baseline", "speculative", "prompt_lookup", "early_exit", "mtp", "mtp_drafter", "universal"]
    for method in METHODS.values():
        assert method.title and method.summary
        assert set(method.lecture) == {"drafts", "verifies", "pays_off", "cost", "failure"}
        assert all(text.strip() for text in method.lecture.values())
        assert method.resolve_params(None) == method.defaults()
        for param in method.params:
            assert param.help and param.label
            assert param.coerce(param.default) == param.default


def test_ensemble_is_offered_exactly_where_there_are_draft_logits() -> None:
    with_ensemble = {m.name for m in METHODS.values() if ENSEMBLE in m.params}
    with_logits = {m.name for m in METHODS.values() if m.draft_logits != "never"}
    assert with_ensemble == with_logits == {"speculative", "early_exit", "mtp", "mtp_drafter", "universal"}


@pytest.mark.parametrize("name", ["speculative", "early_exit", "universal"])
def test_draft_length_settings_go_where_transformers_reads_them(name: str) -> None:
    method = get_method(name)
    gen, draft = method.split_params(method.resolve_params({"num_assistant_tokens": 7}))
    assert not set(DRAFT_KEYS) & set(gen), "passed to generate() they would be silently ignored"
    # The threshold is written even at 0 ("off"): left unset, Transformers would fill in 0.4.
    assert draft == {"num_assistant_tokens": 7, "num_assistant_tokens_schedule": "constant",
                     "assistant_confidence_threshold": 0.0}
    assert method.draft_config_on_target == (name == "early_exit")


def test_mtp_drafter_gets_its_draft_length_from_the_registry() -> None:
    method = get_method("mtp_drafter")
    _, draft = method.split_params(method.resolve_params(None))
    assert draft == {"num_assistant_tokens": 5}  # Transformers has no default for it: int(None) fails


def test_ensemble_is_refused_where_there_are_no_draft_logits() -> None:
    with pytest.raises(MethodError, match="has no parameter 'assistant_ensemble_weight'.*no draft probabilities"):
        get_method("prompt_lookup").resolve_params({"assistant_ensemble_weight": 0.5})
    universal = get_method("universal")
    params = universal.resolve_params({"assistant_ensemble_weight": 0.5})
    facts = ModelFacts(target_class="A", target_layers=4, assistant_class="B", same_vocabulary=False,
                       target_vocab_size=10, assistant_vocab_size=12)
    with pytest.raises(MethodError, match="greedy universal assisted decoding has none.*turn on sampling"):
        universal.validate(facts, params)
    universal.validate(ModelFacts(**{**facts.__dict__, "sample": True}), params)  # sampling has draft logits


def test_lossy_runs_are_named_with_their_reason() -> None:
    spec = get_method("speculative")
    assert spec.lossy_reason(spec.resolve_params(None), sample=True) is None
    reason = spec.lossy_reason(spec.resolve_params({"assistant_ensemble_weight": 0.7}))
    assert reason and "0.7·target + 0.3·draft" in reason
    drafter = get_method("mtp_drafter")
    assert not drafter.is_lossy(drafter.resolve_params(None), sample=False)
    assert drafter.is_lossy(drafter.resolve_params(None), sample=True)
    reason = drafter.lossy_reason(drafter.resolve_params(None), sample=True)
    assert reason is not None
    assert "argmax" in reason


def _facts(**kw) -> ModelFacts:
    base = dict(target_class="LlamaForCausalLM", target_layers=4, assistant_class="LlamaForCausalLM",
                same_vocabulary=True, target_vocab_size=384, assistant_vocab_size=384)
    return ModelFacts(**{**base, **kw})


@pytest.mark.parametrize("method, facts, message", [
    ("speculative", _facts(same_vocabulary=False), "even though both have 384 entries.*choose the 'universal' method"),
    ("speculative", _facts(same_vocabulary=False, assistant_vocab_size=320), "tokenizer differs.*'universal'"),
    ("speculative", _facts(assistant_vocab_size=400), "declare different vocabulary sizes.*'universal'"),
    ("speculative", _facts(assistant_class="Gemma4AssistantForCausalLM", assistant_reads_shared_kv=True),
     "'mtp_drafter'"),
    ("universal", _facts(assistant_class="Gemma4AssistantForCausalLM", assistant_reads_shared_kv=True,
                         same_vocabulary=False, assistant_vocab_size=320), "'mtp_drafter'"),
    ("universal", _facts(), "share a tokenizer: use 'speculative'"),
    ("universal", _facts(same_vocabulary=False), "both declare 384 tokens.*vocabulary size alone"),
    ("mtp", _facts(target_class="DeepseekV3ForCausalLM", target_has_mtp=True, target_on_disk=False), "built in memory"),
    ("mtp", _facts(target_class="DeepseekV3ForCausalLM", target_has_mtp=True, target_mtp_weights=False),
     "holds no MTP weights"),
    ("mtp", _facts(), "no multi-token-prediction layers"),
    ("mtp_drafter", _facts(), "needs a Gemma 4 assistant"),
    ("mtp_drafter", _facts(assistant_class="Gemma4AssistantForCausalLM", assistant_reads_shared_kv=True),
     "target must be a Gemma 4"),
    # Every method, the generic check: a drafter that reads a target's KV states is no target (the fact, whatever the
    # class is called).
    ("baseline", _facts(target_class="KvDrafter", target_reads_shared_kv=True), "KvDrafter is a Gemma 4 assistant"),
    ("prompt_lookup", _facts(target_class="KvDrafter", target_reads_shared_kv=True), "cannot write text on its own"),
])
def test_impossible_combinations_get_clear_messages(method: str, facts: ModelFacts, message: str) -> None:
    m = get_method(method)
    with pytest.raises(MethodError, match=message):
        m.validate(facts, m.resolve_params(None))


def test_padded_vocabulary_pair_may_use_universal() -> None:
    get_method("universal").validate(_facts(assistant_vocab_size=400), {"num_assistant_tokens": 5})


def test_the_gemma4_assistant_checks_read_model_facts_not_class_names() -> None:
    """A Gemma 4 assistant is known by the facts the engine states (`model_facts`), not by its class name here."""
    named = "Gemma4AssistantForCausalLM"
    get_method("baseline").validate(_facts(target_class=named), {})
    get_method("mtp_drafter").validate(_facts(target_class="SharesKv", assistant_class="ReadsKv",
                                              assistant_reads_shared_kv=True, target_shares_kv=True),
                                       {"num_assistant_tokens": 5})


def test_the_engine_states_which_models_share_and_read_kv_states(store, models) -> None:
    """Transformers' rule (`compat.transformers_internals`), read off the loaded models' classes: the tiny Gemma 4
    assistant reads a target's shared KV states, the tiny Gemma 4 shares them, a Llama does neither."""
    gemma4, assistant, llama = (store.get(models[name], "float32") for name in ("gemma4", "gemma4_assistant", "target"))
    facts = model_facts(gemma4, assistant, sample=False)
    assert (facts.target_shares_kv, facts.assistant_reads_shared_kv, facts.target_reads_shared_kv) == (True, True, False)
    facts = model_facts(assistant, llama, sample=False)  # its class also starts with "Gemma4", as Transformers reads it
    assert (facts.assistant_reads_shared_kv, facts.target_reads_shared_kv) == (False, True)
    facts = model_facts(llama, None, sample=False)
    assert (facts.target_shares_kv, facts.assistant_reads_shared_kv, facts.target_reads_shared_kv) == (False, False, False)


# --------------------------------------------------------------------------- speculative


@pytest.mark.parametrize("schedule", ["constant", "heuristic", "heuristic_transient"])
def test_speculative_schedules_are_lossless_and_visible_per_step(store, models, schedule) -> None:
    assistant = store.get(models["noisy"], "float32").model
    before = _draft_settings(assistant)
    trace, reference = _run(store, target=models["target"], method="speculative", assistant=models["noisy"],
                            max_new_tokens=30, params={"num_assistant_tokens": 3, "num_assistant_tokens_schedule": schedule})
    _assert_lossless(trace, reference)
    assert _draft_settings(assistant) == before, "draft settings are restored after the run"
    lengths = [s.draft_len for s in trace.steps]
    produced = 0
    for i, step in enumerate(trace.steps[:-1]):
        # Transformers caps a draft so that it leaves room for the target's own token.
        room = 30 - produced - 1
        produced += len(step.emitted)
        if schedule == "constant":
            assert lengths[i] == min(3, room)
        else:  # +2 after a fully accepted draft, -1 (not below 1) otherwise
            expected = lengths[i] + 2 if step.accepted == lengths[i] else max(1, lengths[i] - 1)
            nxt_room = 30 - produced - 1
            if lengths[i + 1] < nxt_room:
                assert lengths[i + 1] == expected, f"step {i + 1}: {lengths}"
    if schedule != "constant":
        assert len(set(lengths)) > 1, "the heuristic schedule changes the draft length"


def test_heuristic_draft_length_is_reset_per_run(store, models) -> None:
    kw = dict(target=models["target"], method="speculative", assistant=models["target"], max_new_tokens=24,
              params={"num_assistant_tokens": 2, "num_assistant_tokens_schedule": "heuristic"})
    first, reference = _run(store, **kw)
    second, _ = _run(store, **kw)
    _assert_lossless(first, reference)
    # The assistant agrees with itself, so Transformers grows the length (2, 4, 6, …) and writes it back to the
    # assistant's generation_config; without the reset the second run would start where the first ended.
    assert [s.draft_len for s in first.steps][:3] == [2, 4, 6]
    assert [s.drafted for s in first.steps] == [s.drafted for s in second.steps]


def test_confidence_threshold_cuts_drafts_and_zero_means_off(store, models) -> None:
    kw = dict(target=models["target"], method="speculative", assistant=models["noisy"], max_new_tokens=30)
    off, reference = _run(store, **kw, params={"num_assistant_tokens": 6, "assistant_confidence_threshold": 0.0})
    _assert_lossless(off, reference)
    # This drafter is unsure of every token (q < 0.4): unset, Transformers' default threshold 0.4 would cut
    # every draft to one token. 0 means off: full drafts (capped only near the length limit).
    assert all(q < 0.4 for s in off.steps if s.q for q in s.q)
    produced = 0
    for step in off.steps:
        assert step.draft_len == min(6, 30 - produced - 1)
        produced += len(step.emitted)
    cut, reference = _run(store, **kw, params={"num_assistant_tokens": 6, "assistant_confidence_threshold": 0.9})
    _assert_lossless(cut, reference)
    assert all(s.draft_len == 1 for s in cut.steps[:-1]), "drafting stops after the first unsure token"


def test_speculative_refuses_an_assistant_with_another_vocabulary_of_the_same_size(store, models) -> None:
    with pytest.raises(MethodError, match="even though both have 384 entries.*'universal'"):
        prepare(_request(prompt=PROMPT, target=models["target"], method="speculative", assistant=models["same_size"]), store)
    with pytest.raises(MethodError, match="tokenizer differs.*'universal'"):
        prepare(_request(prompt=PROMPT, target=models["target"], method="speculative", assistant=models["other_tok"]), store)


def test_speculative_sampling_runs_are_seeded_and_exact_in_shape(store, models) -> None:
    kw = dict(target=models["target"], method="speculative", assistant=models["noisy"], sample=True, temperature=0.9,
              top_k=20, seed=3, params={"num_assistant_tokens": 4})
    first, _ = _run(store, **kw)
    second, _ = _run(store, **kw)
    assert first.output_ids == second.output_ids and not first.lossy
    assert all(s.q is not None and s.p is not None for s in first.steps if s.drafted)


# --------------------------------------------------------------------------- prompt lookup and early exit


def test_prompt_lookup_greedy_and_sampling(store, models) -> None:
    params = {"prompt_lookup_num_tokens": 4, "max_matching_ngram_size": 3}
    trace, reference = _run(store, target=models["target"], method="prompt_lookup", params=params)
    _assert_lossless(trace, reference)
    assert trace.summary.drafted > 0 and all(s.q is None for s in trace.steps)
    sampled, _ = _run(store, target=models["target"], method="prompt_lookup", params=params, sample=True, seed=5)
    again, _ = _run(store, target=models["target"], method="prompt_lookup", params=params, sample=True, seed=5)
    assert sampled.output_ids == again.output_ids and sampled.summary.drafted > 0


@pytest.mark.parametrize("layer", [1, 3])
def test_early_exit_greedy_and_sampling(store, models, layer) -> None:
    target = store.get(models["target"], "float32").model
    before = _draft_settings(target)
    params = {"assistant_early_exit": layer, "num_assistant_tokens": 3}
    trace, reference = _run(store, target=models["target"], method="early_exit", params=params)
    _assert_lossless(trace, reference)
    sampled, _ = _run(store, target=models["target"], method="early_exit", params=params, sample=True, seed=2)
    assert sampled.summary.drafted > 0 and all(s.q is not None for s in sampled.steps if s.drafted)
    assert target.config.num_hidden_layers == 4 and _draft_settings(target) == before


# --------------------------------------------------------------------------- mtp (DeepSeek-V3 style)


def test_mtp_greedy_equals_plain_greedy(store, models) -> None:
    trace, reference = _run(store, target=models["deepseek"], method="mtp", max_new_tokens=12)
    _assert_lossless(trace, reference)
    assert trace.steps[0].drafted == [], "MTP needs the target's hidden states: the first step drafts nothing"
    assert all(s.draft_len == 1 for s in trace.steps[1:-1]), "one MTP layer drafts one token per step"
    assert all(s.q is not None for s in trace.steps[1:] if s.drafted)


def test_mtp_sampling_and_ensemble(store, models) -> None:
    kw = dict(target=models["deepseek"], method="mtp", max_new_tokens=10, sample=True, seed=4)
    first, _ = _run(store, **kw)
    second, _ = _run(store, **kw)
    assert first.output_ids == second.output_ids and first.summary.drafted > 0 and not first.lossy
    mixed, _ = _run(store, **kw, params={"assistant_ensemble_weight": 0.5})
    assert mixed.lossy


def test_mtp_without_mtp_weights_gets_a_clear_message(store, models) -> None:
    with pytest.raises(MethodError, match="holds no MTP weights"):
        prepare(_request(prompt=PROMPT, target=models["deepseek_no_mtp"], method="mtp"), store)
    with pytest.raises(MethodError, match="no multi-token-prediction layers"):
        prepare(_request(prompt=PROMPT, target=models["target"], method="mtp"), store)


def test_mtp_on_a_model_built_in_memory_gets_a_clear_message(store, models) -> None:
    loaded = store.get(models["deepseek"], "float32")
    facts_path = loaded.model.config._name_or_path
    loaded.model.config._name_or_path = ""  # what a model built from a config looks like
    try:
        with pytest.raises(MethodError, match="built in memory"):
            prepare(_request(prompt=PROMPT, target=models["deepseek"], method="mtp"), store)
    finally:
        loaded.model.config._name_or_path = facts_path


# --------------------------------------------------------------------------- mtp_drafter (Gemma 4 assistant)


def test_mtp_drafter_greedy_equals_plain_greedy(store, models) -> None:
    assistant = store.get(models["gemma4_assistant"], "float32").model
    assert assistant.generation_config.num_assistant_tokens is None
    trace, reference = _run(store, target=models["gemma4"], method="mtp_drafter", assistant=models["gemma4_assistant"],
                            max_new_tokens=16, params={"num_assistant_tokens": 3})
    _assert_lossless(trace, reference)
    assert trace.steps[0].drafted == [], "the drafter needs the target's KV states: the first step drafts nothing"
    assert max(s.draft_len for s in trace.steps) == 3
    assert assistant.generation_config.num_assistant_tokens is None, "restored after the run"


def test_mtp_drafter_sampling_is_marked_lossy(store, models) -> None:
    kw = dict(target=models["gemma4"], method="mtp_drafter", assistant=models["gemma4_assistant"], max_new_tokens=10,
              sample=True, seed=1)
    trace, _ = _run(store, **kw)
    again, _ = _run(store, **kw)
    assert trace.output_ids == again.output_ids
    assert trace.lossy, "Transformers drafts the argmax even when sampling (see test_method_sampling.py)"


@pytest.mark.parametrize("kw, message", [
    ({"target": "target", "assistant": "gemma4_assistant"}, "target must be a Gemma 4"),
    ({"target": "gemma4", "assistant": "noisy"}, "needs a Gemma 4 assistant"),
])
def test_mtp_drafter_with_other_models_gets_a_clear_message(store, models, kw, message) -> None:
    request = _request(prompt=PROMPT, method="mtp_drafter", **{k: models[v] for k, v in kw.items()})
    with pytest.raises(MethodError, match=message):
        prepare(request, store)


# --------------------------------------------------------------------------- universal (different tokenizers)


def test_universal_greedy_equals_plain_greedy(store, models) -> None:
    trace, reference = _run(store, target=models["target"], method="universal", assistant=models["other_tok"],
                            max_new_tokens=24, params={"num_assistant_tokens": 4})
    _assert_lossless(trace, reference)
    assert trace.summary.drafted > 0
    assert all(s.q is None for s in trace.steps), "greedy universal decoding has no draft logits"
    vocab = len(store.get(models["target"], "float32").tokenizer)
    assert all(0 <= t < vocab for s in trace.steps for t in s.drafted), "drafts are shown in the target's vocabulary"


def test_universal_sampling_uses_a_dedicated_copy_per_target(store, models) -> None:
    shared = store.get(models["other_tok"], "float32")
    head = shared.model.get_output_embeddings()
    for target in ("target", "target2", "target"):  # a second target used to re-prune the same copy and crash
        trace, _ = _run(store, target=models[target], method="universal", assistant=models["other_tok"], sample=True,
                        seed=1, max_new_tokens=12)
        assert trace.summary.drafted > 0 and all(s.q is not None for s in trace.steps if s.drafted)
    assert shared.model.get_output_embeddings() is head and isinstance(head, torch.nn.Linear), "the shared one is untouched"
    store.evict(models["target"])  # a reloaded target brings a new tokenizer object: the copy stays usable
    trace, _ = _run(store, target=models["target"], method="universal", assistant=models["other_tok"], sample=True,
                    seed=1, max_new_tokens=12)
    greedy, reference = _run(store, target=models["target"], method="universal", assistant=models["other_tok"])
    _assert_lossless(greedy, reference)


def test_universal_sampling_copy_is_released_when_its_target_is_evicted(models) -> None:
    """Transformers' AssistantVocabTranslatorCache keeps every translator it made, and each refers to both
    tokenizers and the pruned copy's embeddings: evicting the target must release the copy made for it."""
    import gc
    import weakref

    from transformers.generation.candidate_generator import AssistantVocabTranslatorCache

    own = ModelStore()
    kw = dict(target=models["target2"], method="universal", assistant=models["other_tok"], sample=True, seed=1,
              max_new_tokens=6)
    first, _ = _run(own, **kw)
    prepared = prepare(_request(prompt=PROMPT, **kw), own)
    copy = prepared.assistant
    assert copy is not None
    held = [weakref.ref(x) for x in (copy, copy.model, copy.model.get_input_embeddings().weight, copy.tokenizer,
                                     prepared.target.tokenizer)]
    assert prepared.target.tokenizer in AssistantVocabTranslatorCache._cache
    own.get(models["other_tok"], "float32")  # the shared assistant stays: only the copy goes with the target
    del prepared, copy
    own.evict(models["target2"])
    gc.collect()
    assert [ref() is None for ref in held] == [True] * len(held)
    assert own.loaded() == [models["other_tok"]]
    again, _ = _run(own, **kw)  # a reloaded target gets a fresh copy; the same seed gives the same output
    assert again.output_ids == first.output_ids


def test_universal_refuses_a_same_size_vocabulary_it_cannot_tell_apart(store, models) -> None:
    with pytest.raises(MethodError, match="both declare 384 tokens"):
        prepare(_request(prompt=PROMPT, target=models["target"], method="universal", assistant=models["same_size"]), store)


# --------------------------------------------------------------------------- ensemble verification


@pytest.mark.parametrize("method, extra", [
    ("speculative", {"assistant": "noisy"}),
    ("early_exit", {"params": {"assistant_early_exit": 2}}),
    ("mtp_drafter", {"target": "gemma4", "assistant": "gemma4_assistant"}),
])
@pytest.mark.parametrize("sample", [False, True])
def test_ensemble_runs_are_marked_lossy(store, models, method, extra, sample) -> None:
    kw = {"target": models["target"], "method": method, "sample": sample, "seed": 2, "max_new_tokens": 12}
    for key, value in extra.items():
        kw[key] = value if key == "params" else models[value]
    kw["params"] = {**kw.get("params", {}), "assistant_ensemble_weight": 0.7}
    trace, _ = _run(store, **kw)
    assert trace.lossy and trace.params["assistant_ensemble_weight"] == 0.7
    assert trace.summary.drafted > 0


def test_greedy_ensemble_verification_departs_from_a_baseline_run(store, models) -> None:
    """Static ensemble verification is lossy greedy as well as sampling: with the draft given most of the say
    (w = 0.05), greedy output leaves a baseline run's (what `ENSEMBLE_VERIFICATION.proven` claims for greedy)."""
    trace, reference = _run(store, target=models["target"], method="speculative", assistant=models["noisy"],
                            params={"assistant_ensemble_weight": 0.05})
    assert trace.lossy and trace.summary.drafted > 0
    assert trace.output_ids != reference


def test_ensemble_is_refused_for_prompt_lookup_and_greedy_universal(store, models) -> None:
    with pytest.raises(PlaygroundError, match="no draft probabilities"):
        prepare(_request(prompt=PROMPT, target=models["target"], method="prompt_lookup",
                           params={"assistant_ensemble_weight": 0.5}), store)
    with pytest.raises(PlaygroundError, match="greedy universal assisted decoding has none"):
        prepare(_request(prompt=PROMPT, target=models["target"], method="universal", assistant=models["other_tok"],
                           params={"assistant_ensemble_weight": 0.5}), store)
    trace, _ = _run(store, target=models["target"], method="universal", assistant=models["other_tok"], sample=True,
                    max_new_tokens=8, params={"assistant_ensemble_weight": 0.5})
    assert trace.lossy


# --------------------------------------------------------------------------- the CLI, every method


CLI_CASES = [
    ("baseline", "target", None, []),
    ("speculative", "target", "noisy", ["num_assistant_tokens=3", "num_assistant_tokens_schedule=heuristic"]),
    ("prompt_lookup", "target", None, ["prompt_lookup_num_tokens=4", "max_matching_ngram_size=2"]),
    ("early_exit", "target", None, ["assistant_early_exit=2"]),
    ("mtp", "deepseek", None, []),
    ("mtp_drafter", "gemma4", "gemma4_assistant", ["num_assistant_tokens=2"]),
    ("universal", "target", "other_tok", ["num_assistant_tokens=3"]),
]


@pytest.mark.parametrize("sample", [False, True])
@pytest.mark.parametrize("method, target, assistant, sets", CLI_CASES)
def test_cli_runs_every_method(models, tmp_path: Path, capsys, method, target, assistant, sets, sample) -> None:
    out = tmp_path / "trace.json"
    argv = ["run", "--method", method, "--target", models[target], "--prompt", PROMPT, "--max-new-tokens", "8",
            "--dtype", "float32", "--no-chat", "--quiet", "--trace-out", str(out)]
    if assistant:
        argv += ["--assistant", models[assistant]]
    for item in sets:
        argv += ["--set", item]
    if sample:
        argv += ["--sample", "--seed", "3"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    line = capsys.readouterr().out
    assert line.startswith(f"[{method}]") and "acceptance" in line
    trace = Trace.load(out)
    assert trace.method == method and trace.decoding["sample"] == sample and trace.summary.new_tokens > 0
    assert json.loads(out.read_text())["params"] == trace.params


@pytest.mark.parametrize("argv, message", [
    (["--method", "speculative", "--assistant", "same_size"], "'universal'"),
    (["--method", "mtp", "--target", "deepseek_no_mtp"], "holds no MTP weights"),
    (["--method", "mtp_drafter", "--assistant", "noisy"], "needs a Gemma 4 assistant"),
    (["--method", "prompt_lookup", "--set", "assistant_ensemble_weight=0.5"], "no draft probabilities"),
    (["--method", "universal", "--assistant", "other_tok", "--set", "assistant_ensemble_weight=0.5"], "greedy universal"),
])
def test_cli_refusals_are_one_line(models, capsys, argv, message) -> None:
    argv = [models.get(a, a) for a in argv]
    if "--target" not in argv:
        argv += ["--target", models["target"]]
    assert cli.main(["run", "--prompt", PROMPT, "--quiet", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert message in err
