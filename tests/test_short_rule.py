"""A sampled draft's rule in the microscope, told in a few short lines so a projector shows it whole (#47): the draw
against the chance in one formula, the draw on the unit line, the correction in one line, the sentences folded below.
Every number is the trace's own, in the page's language (Russian separates min's arguments with ";", its decimal
sign being a comma); the formula reads left to right in Arabic and breaks only between its pieces.
"""

from __future__ import annotations

import html
import re

import pytest

from playground import i18n, microscope, microscope_view
from playground.trace import Position, Ranked, Step, Trace

LANGS = list(i18n.LANGUAGES)
SAMPLING = {"sample": True}


def _trace(step: Step, decoding: dict | None = None) -> Trace:
    return Trace(method="speculative", target="t", assistant="a", params={}, prompt="x", chat=False, lossy=False,
                 env={}, output_ids=list(step.emitted), output_text="", steps=[step], decoding=decoding or SAMPLING)


def _refusal(draw: float = 0.858, p: float = 0.344, q: float = 0.569) -> Step:
    """The issue's refusal: p 0.344, q 0.569, min(1, p/q) = 0.605 < r = 0.858; the correction " that" has 0.965 in
    the residual."""
    return Step(index=0, drafted=[5, 6], accepted=0, rejected=[5, 6], emitted=[7], drafted_text=[" whose", " goal"],
                emitted_text=[" that"], q=[q, 0.4], p=[p, 0.1], draws=[draw, 0.5], dists=[
                    Position(p=[Ranked(7, 0.6, " that"), Ranked(5, p, " whose")], p_drafted=p, p_emitted=0.6,
                             q=[Ranked(5, q, " whose")], q_drafted=q,
                             residual=[Ranked(7, 0.965, " that")], residual_emitted=0.965)])


def _plain(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).replace("\u2068", "").replace("\u2069", "").replace(
        "\u200e", "")


def _short(panel: str) -> str:
    hit = re.search(r'<div class="pg-micro-rule pg-micro-rule-short".*?</details></div>', panel)
    assert hit is not None
    return hit.group(0)


@pytest.mark.parametrize("lang", LANGS)
def test_a_sampled_refusal_is_one_formula_a_draw_and_one_correction_line(lang: str) -> None:
    trace = _trace(_refusal())
    verdict = microscope.explain(trace.steps[0], 0, SAMPLING)
    panel = microscope_view.panel_html(trace, 0, 0, lang)
    short = _short(panel)
    n = lambda x: i18n.number(x, lang, ".3f")  # noqa: E731
    sep = ";" if lang == "ru" else ","
    hit = re.search(r'<p class="pg-micro-decided">(.*?)</p>', short)
    assert hit is not None
    decided = _plain(hit.group(1))
    formula = f"r = {n(0.858)} > min(1{sep} p/q) = min(1{sep} {n(0.344)}/{n(0.569)}) = {n(0.344 / 0.569)}"
    assert decided == i18n.t("microscope.short.refused", lang, formula=formula).replace("\u2068", "").replace(
        "\u2069", ""), decided
    assert n(0.344 / 0.569) == i18n.number(0.605, lang, ".3f")  # the hand check
    # The draw on the unit line beside it, and the correction's probability in the residual.
    assert 'data-testid="pg-micro-draw" data-r="0.858000" data-a="0.604569" data-kept="false"' in short
    hit = re.search(r'<p class="pg-micro-corrected">(.*?)</p>', short)
    assert hit is not None
    corrected = _plain(hit.group(1))
    assert n(0.965) in corrected and "that" in corrected and "max(0, p − q)" in corrected
    assert '<bdi dir="ltr">max(0, p − q)</bdi>' in short  # on one line (an isolate, not wrapped: presenter.CSS)
    # The sentences (the CLI's, word for word) folded below, nothing lost; no second draw outside the rule.
    words = re.search(r"<details class=\"pg-micro-words\"><summary>(.*?)</summary><ul>(.*?)</ul></details>", short)
    assert words is not None
    assert _plain(words.group(1)) == i18n.t("microscope.short.words", lang)
    assert [_plain(x) for x in re.findall(r"<li>(.*?)</li>", words.group(2))] == [
        _plain(m.localized(lang)) for m in verdict.messages]
    assert panel.count('data-testid="pg-micro-draw"') == 1
    # Left to right in every language, in pieces that never break inside (the panel is 380 px on a projector).
    pieces = re.findall(r'<span class="pg-micro-piece">(.*?)</span>(?= |</span>)', short)
    assert [_plain(x) for x in pieces] == [f"r = {n(0.858)} >", f"min(1{sep} p/q) =",
                                           f"min(1{sep} {n(0.344)}/{n(0.569)})", f"= {n(0.344 / 0.569)}"]
    assert '<span dir="ltr" class="pg-micro-formula"' in short
    assert ".pg-micro-piece { white-space: nowrap; }" in microscope_view.CSS


@pytest.mark.parametrize("lang", LANGS)
def test_a_kept_draft_and_a_tiny_chance_keep_their_numbers(lang: str) -> None:
    kept = _refusal(draw=0.25)
    kept.accepted, kept.rejected, kept.emitted, kept.emitted_text = 1, [6], [5, 8], [" whose", " x"]
    assert kept.dists is not None
    kept.dists[0].residual = kept.dists[0].residual_emitted = None
    short = _short(microscope_view.panel_html(_trace(kept), 0, 0, lang))
    hit = re.search(r'<p class="pg-micro-decided">(.*?)</p>', short)
    assert hit is not None
    decided = _plain(hit.group(1))
    assert decided.startswith(i18n.t("microscope.short.kept", lang, formula="").replace("\u2068", "").strip())
    assert f"r = {i18n.number(0.25, lang, '.3f')} ≤ " in decided and "pg-micro-corrected" not in short
    # A chance under 0.001 is written as its formula writes it (2.7E-4), never 0.000 beside r.
    tiny = _short(microscope_view.panel_html(_trace(_refusal(draw=0.871, p=2.7e-4, q=1.0)), 0, 0, lang))
    hit = re.search(r'<p class="pg-micro-decided">(.*?)</p>', tiny)
    assert hit is not None
    decided = _plain(hit.group(1))
    assert decided.endswith(f"= {_plain(i18n.number(2.7e-4, lang, '.1e'))}") and "0.000" not in decided.replace(",", ".")
    hit = re.search(r"<details.*?</details>", tiny)
    assert hit is not None
    words = _plain(hit.group(0))
    assert f"> {_plain(i18n.number(2.7e-4, lang, '.1e'))}" in words  # the sentence compares with the same written chance


def test_without_a_recorded_draw_the_sentences_stay() -> None:
    old = _refusal()
    old.draws = None
    panel = microscope_view.panel_html(_trace(old), 0, 0)
    assert "pg-micro-rule-short" not in panel and '<ul class="pg-micro-rule"' in panel
