"""The step microscope's small teaching texts (issue 47), on the gallery's real recordings (model-free).

- q ≠ p where the target drafts for itself under sampling: Transformers 5.24 applies the temperature to the
  drafter's scores twice (the panel says so, with T and T²);
- r is drawn uniformly from [0, 1) (`torch.rand_like` in `_speculative_sampling`), and the sentence says it;
- a refusal whose two probabilities read alike at three decimals is written with the digits that tell them apart;
- where the decimal sign is a comma (Russian), min's arguments are separated by ";": min(1; 0,888/0,996).
"""

from __future__ import annotations

import copy
import re

import pytest

from playground import gallery, i18n, microscope, microscope_view
from playground.i18n import Number
from playground.trace import Ranked, Trace

LANGS = list(i18n.LANGUAGES)


def _first(trace: Trace, outcome: str) -> tuple[int, int]:
    """(step index in the list, position) of the first position with that outcome."""
    for k, step in enumerate(trace.steps):
        for i in range(len(step.emitted)):
            if microscope.outcome_at(step, i)[0] == outcome and step.dists is not None:
                return k, i
    raise AssertionError(f"no {outcome} position in {trace.method}")


@pytest.mark.parametrize("lang", LANGS)
def test_self_drafting_under_sampling_says_why_q_differs_from_p(lang: str) -> None:
    trace = gallery.load("speculative-sampling")  # Gemma drafting for itself at T = 0.7
    assert trace.assistant == trace.target and trace.decoding["temperature"] == 0.7
    k, i = _first(trace, microscope.KEPT)
    step = trace.steps[k]
    assert step.dists is not None
    assert step.dists[i].q_drafted != step.dists[i].p_drafted  # the recording's own q ≠ p
    note = t_note = i18n.t("microscope.sampling.self_draft", lang, temperature=Number(0.7, "g"),
                          temperature_squared=Number(0.49, "g"))
    assert i18n.number(0.49, lang, "g") in note and i18n.number(0.7, lang, "g") in note
    shown = microscope.panel_text(trace, k + 1, i + 1, lang)
    assert shown is not None
    assert t_note in shown
    panel = microscope_view.panel_html(trace, step.index, i, lang)
    assert "q ≠ p" in panel and i18n.number(0.49, lang, "g") in panel


def test_no_self_drafting_note_where_another_model_drafts_or_t_is_1() -> None:
    other = gallery.load("universal-sampling")
    k, i = _first(other, microscope.KEPT)
    assert microscope.self_draft_note(other, microscope.explain(other.steps[k], i, other.decoding)) is None
    at_one = copy.deepcopy(gallery.load("speculative-sampling"))
    at_one.decoding["temperature"] = 1.0
    k, i = _first(at_one, microscope.KEPT)
    assert microscope.self_draft_note(at_one, microscope.explain(at_one.steps[k], i, at_one.decoding)) is None


@pytest.mark.parametrize("lang", LANGS)
def test_the_draw_sentence_says_r_is_uniform_on_0_1(lang: str) -> None:
    trace = copy.deepcopy(gallery.load("speculative-sampling"))
    k, i = _first(trace, microscope.REFUSED)
    step = trace.steps[k]
    step.draws = [0.0] * i + [0.999]  # a recorded draw above any chance below 1
    verdict = microscope.explain(step, i, trace.decoding)
    text = " ".join(m.localized(lang) for m in verdict.messages)
    # Russian writes decimals with a comma, so its interval's bounds are parted by a semicolon, as its min(1; p/q).
    assert ("[0; 1)" if lang == "ru" else "[0, 1)") in text and "0.999" in text.replace(",", ".")


@pytest.mark.parametrize("lang", LANGS)
def test_a_near_tie_refusal_is_written_with_the_digits_that_differ(lang: str) -> None:
    trace = copy.deepcopy(gallery.load("universal-greedy"))
    k, i = _first(trace, microscope.REFUSED)
    step = trace.steps[k]
    assert step.dists is not None
    row = step.dists[i]
    row.p[0] = Ranked(row.p[0].id, 0.07813, row.p[0].text)
    row.p_drafted = 0.07791
    text = microscope.explain(step, i, trace.decoding).messages[0].localized(lang)
    for shown in (0.0781, 0.0779, 0.0002):
        assert i18n.number(shown, lang, ".4f") in text, text
    assert not re.search(re.escape(i18n.number(0.0, lang, ".3f")) + r"(?!\d)", text), text


def test_numbers_apart_uses_three_decimals_where_they_suffice() -> None:
    assert [str(n) for n in microscope.numbers_apart(0.888, 0.5)] == ["0.888", "0.500", "0.388"]


@pytest.mark.parametrize("lang", LANGS)
def test_formulas_separate_arguments_with_a_semicolon_where_the_decimal_sign_is_a_comma(lang: str) -> None:
    comma = "," in i18n.number(0.5, lang, ".1f")
    numbers = dict(p=Number(0.888, ".3f"), q=Number(0.996, ".3f"), v=Number(0.9, ".3f"), a=Number(0.892, ".3f"),
                   x=Number(0.888, ".3f"), draft="x")
    keys = [k for k, v in i18n.catalogue(lang).items() if isinstance(v, str) and "min(1" in v and "{" in v
            and k.startswith("microscope.")]
    assert len(keys) == 7  # the rule's sentences (5) and its short formula's two pieces
    for key in keys:
        text = i18n.t(key, lang, **numbers)
        formula = re.search(r"min\(1(.) ⁨?\d", text)
        assert formula, (key, text)
        assert formula.group(1) == (";" if comma else ","), (key, text)


@pytest.mark.parametrize("lang", LANGS)
def test_the_early_exit_stand_in_says_why_its_layer_4_is_not_the_pickers_12(lang: str) -> None:
    from playground.models.catalogue import DEFAULT_TARGET, method_defaults
    from playground.presets import PRESETS

    stand_in = PRESETS["early-exit-offline"]
    picker = method_defaults(DEFAULT_TARGET, "early_exit")["assistant_early_exit"]
    assert (stand_in.params["assistant_early_exit"], picker) == (4, 12)
    note = stand_in.note_in(lang)
    assert re.search(r"(?<!\d)4(?!\d)", note) and re.search(r"(?<!\d)12(?!\d)", note), note


@pytest.mark.parametrize("lang", LANGS)
def test_the_universal_stand_in_says_where_a_bos_draft_comes_from(lang: str) -> None:
    from playground.presets import PRESETS

    assert "add_special_tokens=True" in PRESETS["universal-offline"].note_in(lang)


@pytest.mark.parametrize("lang", LANGS)
def test_the_universal_sampling_recording_says_why_gemma_is_offered_a_letter(lang: str) -> None:
    """SmolLM2 writes a line break "Ċ" (byte-level); Transformers 5.24's AssistantToTargetTranslator matches the
    vocabularies by that written form, so the draft reaches Gemma as Gemma's own token "Ċ" (a letter, which
    Gemma's tokenizer decodes as "Ċ"). The recording shows it and the line under the picker says why."""
    trace = gallery.load("universal-sampling")
    offered = [step for step in trace.steps if "Ċ" in (step.drafted_text or [])]
    assert offered and all("Ċ" not in (step.emitted_text or []) for step in offered)
    look = gallery.get_recording("universal-sampling").look(lang)
    assert "Ċ" in look and "SmolLM2" in look
