"""What the lectures claim about Transformers' code, decided by running that code (not by reading our own text).

Each test runs the piece of Transformers 5.24 a lecture sentence describes, derives the fact from what it does, and
checks that the registry and every language's lecture say that fact and not its opposite.
"""

from __future__ import annotations

import pytest
import torch

from transformers import LlamaConfig, LlamaForCausalLM
from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

from playground.i18n import LANGUAGES
from playground.methods import PROMPT_LOOKUP_MATCH, get_method

# The words each language's lecture uses for the match prompt lookup copies from (and must not use for the other).
MATCH_WORDS = {
    "earliest": {"en": "earliest", "ru": "самым ранним", "ar": "أقدم"},
    "most_recent": {"en": "most recent occurrence", "ru": "самого недавнего вхождения", "ar": "أحدث ظهور"},
}


def _lecture(method: str, part: str, lang: str) -> str:
    return get_method(method).localized(lang).lecture[part]


def _copied_match() -> str:
    """Which of two earlier matches Transformers' prompt lookup copies after: "earliest" or "most_recent"."""
    generator = PromptLookupCandidateGenerator(num_output_tokens=2, max_matching_ngram_size=2, max_length=100)
    #                       first match ↓↓ then 7 8   second ↓↓ then 9 10      last bigram ↓↓
    context = torch.tensor([[5, 6, 7, 8, 3, 5, 6, 9, 10, 4, 5, 6]])
    candidates, _ = generator.get_candidates(context)
    draft = candidates[0, context.shape[1]:].tolist()
    return {(7, 8): "earliest", (9, 10): "most_recent"}[tuple(draft)]


def test_prompt_lookup_copies_the_match_the_registry_and_lectures_name() -> None:
    copied = _copied_match()
    assert PROMPT_LOOKUP_MATCH == copied
    other = next(name for name in MATCH_WORDS if name != copied)
    for lang in LANGUAGES:
        text = _lecture("prompt_lookup", "drafts", lang)
        assert MATCH_WORDS[copied][lang] in text, (lang, text)
        assert MATCH_WORDS[other][lang] not in text, (lang, text)


def test_the_replays_search_copies_the_same_match() -> None:
    """The replay's own n-gram search (why a step drafted nothing) scans in the order Transformers does."""
    from playground.methods import EmptyDraft, _prompt_lookup_empty_reason, NO_DRAFT_REASONS

    # The earliest match continues with EOS (id 2), the later one with an ordinary token: Transformers stops at the
    # earliest and drafts nothing, so the replay must say "EOS", not "a processor forbade".
    empty = EmptyDraft(context=[5, 6, 2, 5, 6, 9, 5, 6], first_step=False, last_position=False,
                       params={"max_matching_ngram_size": 2}, eos_ids=frozenset({2}))
    expected = "eos_match" if _copied_match() == "earliest" else "processor_forbade"
    assert _prompt_lookup_empty_reason(empty) == NO_DRAFT_REASONS[expected]


@pytest.fixture(scope="module")
def early_exit_run():
    """Transformers' early-exit generator of one greedy run on a 3-layer model exiting after layer 1."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=2, num_key_value_heads=2)
    model = LlamaForCausalLM(config).eval()
    made = {}
    build = model._get_candidate_generator

    def keep(*args, **kwargs):
        made["generator"] = build(*args, **kwargs)
        return made["generator"]

    model._get_candidate_generator = keep
    out = model.generate(torch.tensor([[1, 2, 3, 4]]), assistant_early_exit=1, max_new_tokens=5, do_sample=False,
                         return_dict_in_generate=True)
    return model, made["generator"], out.past_key_values


def test_early_exit_shares_weights_but_not_the_cache_as_the_lecture_says(early_exit_run) -> None:
    model, generator, target_cache = early_exit_run
    shares_weights = generator.assistant_model is model
    drafter_cache = generator.assistant_kwargs["cache"]
    shares_cache = drafter_cache is target_cache
    assert shares_weights and not shares_cache  # what Transformers 5.24 does; the lecture below teaches this
    assert len(drafter_cache.layers) == 1 < len(target_cache.layers)  # the drafter's cache: its N layers only
    words = {  # (weights shared, a cache of its own, the guide says otherwise)
        "en": ("the weights are shared", "a KV cache of its own", "The guide says"),
        "ru": ("веса общие", "свой KV-кэш", "В руководстве сказано"),
        "ar": ("الأوزان مشتركة", "ذاكرة KV مؤقتة خاصة به", "يقول الدليل"),
    }
    for lang in LANGUAGES:
        text = _lecture("early_exit", "cost", lang)
        for phrase in words[lang]:
            assert phrase in text, (lang, phrase, text)


def _acceptance_of_a_token_the_target_forbids(weight: float, trials: int = 2000) -> float:
    """How often Transformers' speculative sampling keeps a draft token whose target probability is 0, at `weight`."""
    from transformers.generation.utils import _speculative_sampling

    draft_logits = torch.tensor([[[8.0, 0.0, 0.0, 0.0]]])  # the draft is sure of token 0 …
    target_logits = torch.tensor([[[-float("inf"), 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]])  # … the target forbids it
    candidate = torch.tensor([[1, 0]])
    torch.manual_seed(0)
    kept = sum(int(_speculative_sampling(candidate, draft_logits, 1, target_logits, weight)[1]) for _ in range(trials))
    return kept / trials


def test_the_ensemble_weight_is_the_targets_share_and_the_control_reads_from_lossless_to_lossy() -> None:
    from playground.methods import ENSEMBLE, ensemble_weight

    # In Transformers v = w·p + (1−w)·q: a token the target forbids (p = 0) is kept with probability 1 − w, the
    # draft's share. So w is the target's share, and a larger w is closer to plain verification.
    for weight in (0.3, 0.7, 0.95):
        assert _acceptance_of_a_token_the_target_forbids(weight) == pytest.approx(1 - weight, abs=0.04)
    # The control: its top end is plain verification (the default, lossless, not passed to generate()), and every
    # value below it is lossy, ever more so towards its bottom end.
    assert ENSEMBLE.maximum == ENSEMBLE.off_value == ENSEMBLE.default == 1.0
    assert 0 < ENSEMBLE.minimum < 1
    speculative = get_method("speculative")
    assert speculative.lossy_reason(speculative.resolve_params({})) is None
    generate_kwargs, _ = speculative.split_params(speculative.resolve_params({}))
    assert ENSEMBLE.name not in generate_kwargs
    for weight in (ENSEMBLE.minimum, 0.7, 0.95):
        assert speculative.lossy_reason(speculative.resolve_params({ENSEMBLE.name: weight})) is not None
        assert ensemble_weight({ENSEMBLE.name: weight}) == weight
    with pytest.raises(Exception):
        speculative.resolve_params({ENSEMBLE.name: 0})  # 0 would be the draft alone: Transformers refuses it too
    # Every language's help says w is the target's share and names the guide's start.
    shares = {"en": "the target's distribution p (share w)", "ru": "целевой модели p (доля w)",
              "ar": "النموذج الهدف p (بحصة w)"}
    for lang in LANGUAGES:
        param = ENSEMBLE.localized(lang)
        assert shares[lang] in param.help and "0.7" in param.help, (lang, param.help)
        assert "1 =" in param.label, (lang, param.label)


# Arguments every run passes whatever the method (the prompt, the length, greedy or sampling, padding).
EVERY_RUN = {"input_ids", "attention_mask", "max_new_tokens", "do_sample", "pad_token_id"}


def _named_in_call(call: str) -> set[str]:
    """The keyword arguments a `model.generate(**inputs, k=v, …)` call names."""
    inner = call.removeprefix("model.generate(").removesuffix(")")
    return {arg.split("=")[0].strip() for arg in inner.split(", ") if "=" in arg}


@pytest.fixture(scope="module")
def tiny_pairs(tmp_path_factory):
    """A tiny Llama target, a drafter with its tokenizer, and one with another tokenizer."""
    from tiny import build_other_tokenizer, build_tokenizer, save_tiny_llama

    root = tmp_path_factory.mktemp("call")
    tok = build_tokenizer()
    target = save_tiny_llama(root / "target", seed=0, layers=6, tokenizer=tok)  # deeper than early exit's default 4
    drafter = save_tiny_llama(root / "drafter", seed=1, layers=2, hidden=32, tokenizer=tok)
    other = save_tiny_llama(root / "other", seed=2, layers=2, hidden=32, tokenizer=build_other_tokenizer(320))
    return {"target": str(target), "same": str(drafter), "other": str(other)}


@pytest.mark.parametrize("method, assistant", [("baseline", None), ("speculative", "same"),
                                               ("prompt_lookup", None), ("early_exit", None),
                                               ("universal", "other")])
def test_the_lectures_call_names_what_the_engine_passes_to_generate(tiny_pairs, method, assistant) -> None:
    """The call every lecture shows (`Method.generate_call`, rendered as code in all languages) names exactly the
    method's arguments the engine hands to generate() for a run with the registry's defaults."""
    from playground.app.methods_tab import lecture_html
    from playground.engine import prepare
    from playground.models import ModelStore
    from playground.request import RunRequest

    registered = get_method(method)
    prepared = prepare(RunRequest(prompt="def add(a, b):", target=tiny_pairs["target"], method=method,
                                  assistant=tiny_pairs[assistant] if assistant else None, dtype="float32",
                                  max_new_tokens=4), ModelStore())
    passed = set(prepared.generate_kwargs) - EVERY_RUN
    call = registered.generate_call()
    assert _named_in_call(call) == passed, (call, sorted(passed))
    for name in passed - {"assistant_model", "tokenizer", "assistant_tokenizer"}:  # values too, where they are data
        assert f"{name}={prepared.generate_kwargs[name]!r}" in call
    for lang in LANGUAGES:
        assert call in lecture_html(registered.localized(lang), lang)


# The words each language's lecture uses for "no batched inputs" (the guide's own: «пакетные входные данные»,
# «المدخلات المجمعة»).
BATCH_WORDS = {"en": "batch size 1", "ru": "пакетные входные данные", "ar": "المدخلات المجمعة"}


def test_assisted_generation_takes_one_sequence_as_the_lectures_say() -> None:
    """Transformers' assisted decoding (the loop speculative decoding and MTP run in) refuses a batch of two; the
    speculative and MTP lectures say so in every language."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2)
    model = LlamaForCausalLM(config).eval()
    with pytest.raises(ValueError, match="batch_size = 1"):
        model.generate(torch.tensor([[1, 2, 3, 1, 2], [4, 5, 6, 4, 5]]), prompt_lookup_num_tokens=2, max_new_tokens=3,
                       do_sample=False, pad_token_id=0)
    for method in ("speculative", "mtp"):
        for lang in LANGUAGES:
            assert BATCH_WORDS[lang] in _lecture(method, "failure", lang).lower(), (method, lang)
