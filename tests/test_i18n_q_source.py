"""What the page says q is, per drafter, is what Transformers 5.24 does (read in its source, see `Method.q_source`):
an assistant's inner generate() applies the sampling warpers twice, the MTP layers once, the MTP drafter not at all.
The step view's note follows the step's method; no note calls the MTP layers' or the MTP drafter's q doubly warped."""

from __future__ import annotations

import re

import pytest

from playground import i18n, render
from playground.methods import METHODS
from playground.trace import Step

TWICE = {"en": "doubly warped", "ru": "искажена дважды", "ar": "مشوَّه مرتين"}


def _step() -> Step:
    return Step(index=0, drafted=[1, 2], accepted=1, rejected=[2], emitted=[1, 3], drafted_text=["a", "b"],
                emitted_text=["a", "c"], q=[0.5, 0.4], p=[0.6, 0.1])


def _note(method: str, lang: str) -> str:
    html = render.step_detail_html(_step(), method, 0, lang=lang)
    hit = re.search(r'<p class="pg-note"[^>]*>([^<]*)</p>', html)
    assert hit is not None
    return hit.group(1)


def test_each_drafter_says_where_its_q_comes_from() -> None:
    assert {name: m.q_source for name, m in METHODS.items()} == {
        "baseline": None, "speculative": "twice", "prompt_lookup": None, "early_exit": "twice", "mtp": "once",
        "mtp_drafter": "raw", "universal": "twice"}
    assert all((m.q_source is None) == (m.draft_logits == "never") for m in METHODS.values())


@pytest.mark.parametrize("lang", list(i18n.LANGUAGES))
def test_the_step_note_follows_the_method(lang: str) -> None:
    for name, method in METHODS.items():
        if method.q_source is None:
            continue
        note = _note(name, lang)
        assert note.startswith(i18n.t(f"detail.q_note.{method.q_source}", lang)), (name, note)
        assert (TWICE[lang] in note) == (method.q_source == "twice"), (name, note)


def test_the_transformers_source_still_merges_before_it_appends_and_mtp_layers_apply_once() -> None:
    """The facts behind q_source, read from the installed Transformers: if a release changes them, so must the page."""
    import inspect

    from transformers.generation import candidate_generator, utils
    from transformers import modeling_layers

    processors = inspect.getsource(utils.GenerationMixin._get_logits_processor)
    assert processors.index("_merge_criteria_processor_list") < processors.index("TemperatureLogitsWarper(")
    drafter = inspect.getsource(candidate_generator.SinglePositionMultiTokenCandidateGenerator.get_candidates)
    assert "logits_processor" not in drafter and "argmax" in drafter
    assert "logits_processor(full_input_ids" in inspect.getsource(modeling_layers)  # MTP layers: once


# What a warped q is called in each language: the MTP drafter's lossy-sampling sentence must not say it (issue 45: it
# once said rejection sampling assumed "the drafter's warped softmax"; in 5.24 q is the softmax of its raw logits).
WARPED = {"en": r"warp", "ru": r"преобразованн|искаж", "ar": r"المعدَّل|مشوَّه|المعدل"}
RAW = {"en": r"raw logits", "ru": r"сыр", "ar": r"الخام"}


# Russian joins once lang-ru's reading of the same row lands (that engineer owns the Russian strings in this round).
@pytest.mark.parametrize("lang", ["en", "ar"])
def test_the_mtp_drafters_sampling_bias_calls_its_q_raw(lang: str) -> None:
    drafter = METHODS["mtp_drafter"]
    assert drafter.sampling_bias is not None
    sentence = i18n.localize(i18n.Message.registry("method.mtp_drafter.sampling_bias", drafter.sampling_bias), lang)
    assert re.search(RAW[lang], sentence), sentence
    assert not re.search(WARPED[lang], sentence), sentence
