"""What the lectures claim about Transformers' code, decided by running that code (not by reading our own text).

Each test runs the piece of Transformers 5.24 a lecture sentence describes, derives the fact from what it does, and
checks that the registry and every language's lecture say that fact and not its opposite.
"""

from __future__ import annotations

import pytest
import torch

from transformers import LlamaConfig, LlamaForCausalLM
from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

from playground.i18n import LANGUAGES, number
from playground.drafts import PROMPT_LOOKUP_MATCH
from playground.methods import get_method
from playground.proofs import Proof

pytestmark = pytest.mark.models  # its tests build or load models: the module stays out of the model-free tier

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
    from playground.drafts import NO_DRAFT_REASONS, EmptyDraft, prompt_lookup_empty_reason

    # The earliest match continues with EOS (id 2), the later one with an ordinary token: Transformers stops at the
    # earliest and drafts nothing, so the replay must say "EOS", not "a processor forbade".
    empty = EmptyDraft(context=[5, 6, 2, 5, 6, 9, 5, 6], first_step=False, last_position=False,
                       params={"max_matching_ngram_size": 2}, eos_ids=frozenset({2}))
    expected = "eos_match" if _copied_match() == "earliest" else "processor_forbade"
    assert prompt_lookup_empty_reason(empty) == NO_DRAFT_REASONS[expected]


def generate_keeping_generator(model, *args, **kwargs):
    """`model.generate(*args, **kwargs)` and the candidate generator Transformers built for it."""
    made = {}
    build = model._get_candidate_generator

    def keep(*a, **k):
        made["generator"] = build(*a, **k)
        return made["generator"]

    model._get_candidate_generator = keep
    out = model.generate(*args, **kwargs)
    return made["generator"], out


@pytest.fixture(scope="module")
def early_exit_run():
    """Transformers' early-exit generator of one greedy run on a 3-layer model exiting after layer 1."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=2, num_key_value_heads=2)
    model = LlamaForCausalLM(config).eval()
    generator, out = generate_keeping_generator(model, torch.tensor([[1, 2, 3, 4]]), assistant_early_exit=1,
                                                max_new_tokens=5, do_sample=False, return_dict_in_generate=True)
    return model, generator, out.past_key_values


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
    assert ENSEMBLE.minimum is not None and 0 < ENSEMBLE.minimum < 1
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
        assert shares[lang] in param.help and number(0.7, lang, "g") in param.help, (lang, param.help)
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


# --------------------------------------------------------------------------- MTP layers and the MTP drafter


def _mtp_layer_count_attribute() -> str:
    """The config attribute Transformers' MTP generator reads for how many MTP layers a checkpoint has, found in its
    source (so a rename in Transformers fails here, not silently on the page)."""
    import inspect
    import re

    from transformers.generation.candidate_generator import MTPCandidateGenerator

    source = inspect.getsource(MTPCandidateGenerator.__init__)
    (name,) = set(re.findall(r'getattr\(\s*main_model\.config\.get_text_config\(\),\s*"(\w+)"', source))
    return name


def test_the_mtp_lecture_names_the_config_fields_transformers_reads() -> None:
    """Transformers reads `config.<attribute>`; DeepSeek-V3's and GLM-4.5's config classes map it onto the name their
    config.json uses. The cost lecture names both, in every language, the attribute as `config.<attribute>`."""
    from transformers import DeepseekV3Config, Glm4MoeConfig

    read = _mtp_layer_count_attribute()
    in_json = {DeepseekV3Config.attribute_map[read], Glm4MoeConfig.attribute_map[read]}
    assert len(in_json) == 1
    (json_name,) = in_json
    for config_class in (DeepseekV3Config, Glm4MoeConfig):  # a config.json field of 3 is what the generator reads
        assert getattr(config_class(**{json_name: 3}), read) == 3
    for lang in LANGUAGES:
        text = _lecture("mtp", "cost", lang)
        assert f"config.{read}" in text and json_name in text and "config.json" in text, (lang, text)
        assert f"config.{json_name}" not in text, (lang, text)


# The words each language's lectures use for "the target's own modules, not copies" (MTP layers) and "a model of its
# own" (the MTP drafter).
SHARED_WORDS = {"en": "(lm_head) are the target's, not copies", "ru": "(lm_head) — её собственные, не копии",
                "ar": "(lm_head) للنموذج الهدف، لا نسخ منها"}
OWN_MODEL_WORDS = {"en": "a model of its own with its own output head", "ru": "самостоятельная модель со своей выходной головой",
                   "ar": "نموذج مستقل له رأس الإخراج الخاص به"}


def test_mtp_layers_share_the_targets_embeddings_and_output_head() -> None:
    from tiny import build_tokenizer, deepseek_v3_config
    from transformers import DeepseekV3ForCausalLM
    from transformers.modeling_layers import MtpModel

    torch.manual_seed(0)
    target = DeepseekV3ForCausalLM(deepseek_v3_config(build_tokenizer(), layers=2)).eval()
    mtp = MtpModel(target, 1)  # what MTPCandidateGenerator builds (from_pretrained then loads the MTP weights)
    assert mtp.embed_tokens is target.get_input_embeddings() and mtp.shared_head is target.lm_head
    for lang in LANGUAGES:
        assert SHARED_WORDS[lang] in _lecture("mtp", "drafts", lang), lang


def test_the_mtp_drafter_is_a_model_of_its_own_reading_the_targets_embeddings() -> None:
    """The Gemma 4 drafter, as Transformers runs it: the target's input embeddings are handed to it, its output head is
    its own, and its draft length is num_assistant_tokens (not a layer count)."""
    from tiny import build_tokenizer, gemma4_text_config
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM, Gemma4ForCausalLM

    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    target = Gemma4ForCausalLM(gemma4_text_config(tokenizer, layers=4, hidden=64, per_layer_input=True)).eval()
    drafter = Gemma4AssistantForCausalLM(Gemma4AssistantConfig(
        text_config=gemma4_text_config(tokenizer, layers=2, hidden=32, per_layer_input=False),
        backbone_hidden_size=64)).eval()
    drafter.generation_config.num_assistant_tokens = 3
    generator, _ = generate_keeping_generator(target, torch.tensor([[1, 2, 3, 4]]), assistant_model=drafter,
                                              max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert generator.target_model_input_embeddings is target.get_input_embeddings()
    assert generator.assistant_model is drafter and drafter.get_output_embeddings() is not target.get_output_embeddings()
    assert generator.num_assistant_tokens == 3
    for lang in LANGUAGES:
        text = _lecture("mtp_drafter", "drafts", lang)
        assert OWN_MODEL_WORDS[lang] in text and "num_assistant_tokens" in text, (lang, text)


# --------------------------------------------------------------------------- universal assisted decoding's alignment

# The words each language's lecture uses for how re-encoded tokens are aligned: the longest unbroken run of shared
# tokens (what the code does), not a longest common subsequence (which the lecture names only as the guide's term).
RUN_WORDS = {"en": "the code takes the longest unbroken run", "ru": "код берёт самый длинный непрерывный отрезок",
             "ar": "أما الشيفرة فتأخذ أطول سلسلة غير منقطعة"}


def _aligned_length(before: list[int], after: list[int]) -> int:
    """How many tokens Transformers' universal decoding anchors two encodings on."""
    from transformers.generation.candidate_generator import AssistedCandidateGeneratorDifferentTokenizers as Universal

    compare = (torch.tensor([before]) == torch.tensor([after]).T).to(int)
    return int(Universal._get_longest_diag_index(compare)[1])


def test_universal_alignment_is_the_longest_unbroken_run_as_the_lecture_says(tiny_pairs) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    # 1 2 9 3 4 against 1 2 3 4: a common subsequence of four tokens, but no unbroken run longer than two.
    assert _aligned_length([1, 2, 9, 3, 4], [1, 2, 3, 4]) == 2
    defaults = GenerationConfig._get_default_generation_params()
    target = AutoModelForCausalLM.from_pretrained(tiny_pairs["target"]).eval()
    assistant = AutoModelForCausalLM.from_pretrained(tiny_pairs["other"]).eval()
    tokenizers = {"tokenizer": AutoTokenizer.from_pretrained(tiny_pairs["target"]),
                  "assistant_tokenizer": AutoTokenizer.from_pretrained(tiny_pairs["other"])}
    inputs = tokenizers["tokenizer"]("def add(a, b):", return_tensors="pt")
    generator, _ = generate_keeping_generator(target, **inputs, assistant_model=assistant, **tokenizers,
                                              max_new_tokens=4, do_sample=False)
    assert type(generator).__name__ == "AssistedCandidateGeneratorDifferentTokenizers"  # greedy: through text
    windows = {"target_lookbehind": generator.target_lookbehind, "assistant_lookbehind": generator.assistant_lookbehind}
    assert windows == {name: defaults[name] for name in windows}
    for lang in LANGUAGES:
        text = _lecture("universal", "drafts", lang)
        assert RUN_WORDS[lang] in text, (lang, text)
        for name, size in windows.items():
            assert f"{name} = {size}" in text, (lang, name, text)


# --------------------------------------------------------------------------- static ensemble verification's lecture


def test_ensemble_verification_has_a_lecture_of_its_own_in_every_language() -> None:
    """The Methods tab teaches it beside the methods: its title, its parts, the methods that offer it (exactly those
    the registry gives the parameter), what is proven and the guide's call, in every language."""
    import html
    import re

    from playground.app.methods_tab import methods_table_html
    from playground.i18n import t
    from playground.methods import ENSEMBLE, ENSEMBLE_VERIFICATION, METHODS

    offered = {m.name for m in ENSEMBLE_VERIFICATION.offered_by()}
    assert offered == {m.name for m in METHODS.values() if ENSEMBLE in m.params} == {
        m.name for m in METHODS.values() if m.draft_logits != "never"}
    for lang in LANGUAGES:
        page = methods_table_html(lang)
        section = re.search(r'<section class="pg-verification" data-verification="ensemble">(.*?)</section>', page,
                            re.S)
        assert section, lang
        body = html.unescape(section.group(1))
        local = ENSEMBLE_VERIFICATION.localized(lang)
        assert local.title in body and all(text in body for text in local.lecture.values()), lang
        for method in METHODS.values():
            if method.drafts:  # every drafting method is named: offered, offered when sampling, or not offered
                assert method.localized(lang).title in body, (lang, method.name)
        assert t("method.proven.greedy.lossy", lang) in body and t("method.proven.sampling.lossy", lang) in body
        assert re.search(rf"model\.generate\(\*\*inputs, [^)]*{ENSEMBLE.name}=0\.7[^)]*, do_sample=True\)", body), lang
    english = ENSEMBLE_VERIFICATION.lecture
    assert "v = w·p + (1−w)·q" in english["mixture"] and "0.7" in english["weight"]
    assert "argmax of v" in english["greedy"] and "min(1, 1 − w + w·p/q)" in english["sampling"]


# --------------------------------------------------------------------------- what is proven, and by which test

# What a proving test must assert, and must not, by what it proves (greedy reference and lossless: equal to the
# baseline run's output; greedy lossy: not equal; exact: the chi-square p-value passes and nothing is rejected; lossy
# sampling: the test rejects).
PROOF_ASSERTS = {("greedy", "reference"): ("== reference", "!= reference"),
                 ("greedy", "lossless"): ("== reference", "!= reference"),
                 ("greedy", "lossy"): ("!= reference", "== reference"),
                 ("sampling", "exact"): ("> PASS_P", "< REJECT_P"),
                 ("sampling", "lossy"): ("< REJECT_P", None)}


def _proofs() -> list[tuple[str, str, Proof]]:
    """(subject, mode, proof) for every method's and every verification's claims."""
    from playground.methods import METHODS, VERIFICATIONS

    subjects = [*((name, method.proven) for name, method in METHODS.items()),
                *((name, verification.proven) for name, verification in VERIFICATIONS.items())]
    return [(name, mode, getattr(proven, mode)) for name, proven in subjects for mode in ("greedy", "sampling")]


@pytest.fixture(scope="module")
def collected() -> set[str]:
    """The node ids pytest collects from the files the proofs name."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    files = sorted({test.split("::")[0] for _, _, proof in _proofs() for test in proof.tests})
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                            cwd=root, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return {line.strip() for line in result.stdout.splitlines() if "::" in line}


def _names_subject(node: str, subject: str) -> bool:
    """Whether a test's node id is about `subject`: its parameters name it, or its function's name does when it has no
    parameters (a longer registered name holding it, mtp_drafter for mtp, does not count)."""
    import re

    from playground.methods import METHODS

    function, _, params = node.split("::")[-1].partition("[")
    where = params or function
    for longer in METHODS:
        if longer != subject and subject in longer:
            where = where.replace(longer, " ")
    return re.search(rf"(?<![a-z]){re.escape(subject)}(?![a-z])", where) is not None


def _function_source(node: str) -> str:
    import ast
    from pathlib import Path

    path, function = node.split("::")[0], node.split("::")[-1].partition("[")[0]
    source = (Path(__file__).resolve().parents[1] / path).read_text(encoding="utf-8")
    (found,) = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == function]
    segment = ast.get_source_segment(source, found)
    assert segment is not None
    return segment


def test_every_proven_claim_names_tests_that_exist_run_it_and_assert_it(collected) -> None:
    for subject, mode, proof in _proofs():
        if proof.kind == "untested" or (proof.kind == "reference" and mode == "sampling"):
            assert not proof.tests, (subject, mode)  # nothing to name: no test, or the definition itself
            continue
        assert proof.tests, (subject, mode, proof.kind)
        for node in proof.tests:
            assert node in collected, f"{subject} {mode}: no test {node}"
            assert _names_subject(node, subject), f"{subject} {mode}: {node} is not about {subject}"
            asserted, not_asserted = PROOF_ASSERTS[mode, proof.kind]
            body = _function_source(node)
            assert asserted in body and (not_asserted is None or not_asserted not in body), (subject, mode, node)


def test_the_proven_field_agrees_with_what_the_engine_marks_lossy() -> None:
    from playground.methods import ENSEMBLE, ENSEMBLE_VERIFICATION, METHODS

    for method in METHODS.values():
        assert method.proven.greedy.kind == ("reference" if method.reference else "lossless"), method.name
        assert (method.proven.sampling.kind == "lossy") == (method.sampling_bias is not None), method.name
        assert not method.lossy_reason(method.defaults(), sample=False)
    assert ENSEMBLE_VERIFICATION.proven.greedy.kind == ENSEMBLE_VERIFICATION.proven.sampling.kind == "lossy"
    speculative = METHODS["speculative"]
    assert speculative.lossy_reason(speculative.resolve_params({ENSEMBLE.name: 0.7})) is not None


def test_every_lecture_shows_what_is_proven_in_every_language() -> None:
    import html

    from playground.app.methods_tab import lecture_html
    from playground.i18n import t
    from playground.methods import ENSEMBLE, METHODS

    for lang in LANGUAGES:
        for method in METHODS.values():
            page = html.unescape(lecture_html(method.localized(lang), lang))
            assert t("method.proven.heading", lang) in page, (lang, method.name)
            for mode in ("greedy", "sampling"):
                proof = getattr(method.proven, mode)
                assert t(f"method.proven.{mode}.{proof.kind}", lang) in page, (lang, method.name, mode)
                for node in proof.tests:
                    assert f"<code>{node.partition('[')[0]}</code>" in page, (lang, method.name, node)
            in_method = t("verification.ensemble.in_method", lang, tab=t("ui.tab.methods", lang))
            assert (in_method in page) == (ENSEMBLE in method.params), (lang, method.name)
