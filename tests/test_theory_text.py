"""The theory the page teaches, in words, against `playground/theory.py`: the formulas the Theory tab shows compute
what the code computes, in every language; the verdicts' words point the way their own numbers do; and the reading
of the chart (the measured diamond above or below the formula's circle) follows from how α is measured."""

from __future__ import annotations

import re

import pytest
from test_theory import baseline_trace, make_trace, method_trace, step

from playground import i18n, theory

LANGS = ("en", "ru", "ar")
ISOLATES = re.compile("[\u2066-\u2069]")
SAMPLES = [(0.0, 3), (0.3, 1), (0.5, 2), (0.8, 4), (0.95, 7), (1.0, 5)]


def _text(key: str, lang: str) -> str:
    return ISOLATES.sub("", i18n.t(key, lang))


def _python(formula: str) -> str:
    """A formula as the page writes it, as Python over a (α) and g (γ), c, v, o."""
    out = formula.replace("−", "-").replace("^", "**").replace("·", "*")
    return out.replace("α", "a").replace("γ", "g")


CLOSED_FORM = re.compile(r"\(1 − α\^\(γ\+1\)\) / \(1 − α\)")


@pytest.mark.parametrize("lang", LANGS)
def test_the_expected_tokens_formula_the_page_shows_is_theorys(lang: str) -> None:
    """The closed form on the chart's title and in the lecture, and the series it sums, equal
    `theory.expected_tokens_per_step` (Leviathan et al.'s E(α, γ)) wherever it is defined."""
    for key in ("chart.theory.title", "ui.theory.text"):
        found = CLOSED_FORM.search(_text(key, lang))
        assert found, f"{lang} {key}: the closed form of E(α, γ) is missing or written differently"
        for a, g in SAMPLES:
            if a < 1.0:
                shown = eval(_python(found.group()), {}, {"a": a, "g": g})  # noqa: S307 - our own catalogue
                assert shown == pytest.approx(theory.expected_tokens_per_step(a, g)), (lang, key, a, g)
    series = re.search(r"1 \+ α \+ α² \+ … \+ α\^γ", _text("ui.theory.text", lang))
    assert series, f"{lang}: the series 1 + α + α² + … + α^γ is missing"
    for a, g in SAMPLES:  # the series the lecture writes out: Σ α^k for k = 0 … γ
        assert sum(a ** k for k in range(g + 1)) == pytest.approx(theory.expected_tokens_per_step(a, g))


@pytest.mark.parametrize("lang", LANGS)
def test_the_speedup_the_page_shows_is_theorys_refined_prediction(lang: str) -> None:
    """'Speedup ≈ tokens per step / (γ·c + v + o)': the denominator the lecture writes is the one the refined
    prediction divides by (its first stage, before empty steps and prefill), and with v + o = 1 it is Leviathan's."""
    text = _text("ui.theory.text", lang)
    found = re.search(r"≈ [^/]+/\s*\(([^)]*)\)", text)
    assert found, f"{lang}: the speedup formula is missing"
    denominator = found.group(1)
    for a, g in SAMPLES:
        for c, v, o in [(0.0, 1.0, 0.0), (0.05, 1.5, 0.2), (0.3, 2.0, 0.1)]:
            cost = eval(_python(denominator), {}, {"g": g, "c": c, "v": v, "o": o})  # noqa: S307
            assert theory.expected_tokens_per_step(a, g) / cost == pytest.approx(theory.refined_speedup(a, g, c, v + o))
            if v + o == 1.0:
                assert theory.expected_tokens_per_step(a, g) / cost == pytest.approx(theory.expected_speedup(a, g, c))


def _steps(kept_per_step: list[int], gamma: int) -> list:
    """Steps drafting `gamma` tokens each, keeping the given number (then one refused, unless all were kept)."""
    out, token = [], 1000
    for i, kept in enumerate(kept_per_step):
        drafted = list(range(token, token + gamma))
        emitted = drafted[:kept] + [token + 500]  # the correction, or the bonus after a fully accepted draft
        out.append(step(i, drafted, emitted, 5, 100))
        token += 10
    return out


def test_the_diamond_above_or_below_the_circle_reads_as_the_lecture_says() -> None:
    """The lecture: above the circle, acceptance falls along the draft; below it, it rises (all or nothing).
    Both follow only from α = accepted / judged drafts: with the share kept, every run would sit above."""
    text = i18n.t("ui.theory.text", "en")
    assert "above the circle means acceptance falls along the draft" in text
    assert "below it, acceptance rises along the draft" in text
    # falls: the first draft is kept 9 times in 10, the second once in 9
    falls = make_trace("speculative", _steps([0] + [1] * 8 + [2], 2), 1.0)
    # rises: a draft is right or wrong as a whole
    rises = make_trace("speculative", _steps([0] * 5 + [2] * 5, 2), 1.0)
    for trace, above in ((falls, True), (rises, False)):
        est = theory.estimate(trace, baseline_trace())
        assert est.tau is not None and est.expected_tau is not None
        assert (est.tau > est.expected_tau) is above, (trace.steps[0].accepted, est.tau, est.expected_tau)


def _with_elapsed(elapsed_s: float):
    return make_trace("prompt_lookup", method_trace().steps, elapsed_s)


@pytest.mark.parametrize("elapsed_s", [0.4, 0.9, 1.4, 1.6, 3.0, 9.0])
def test_each_verdict_points_the_way_its_numbers_do(elapsed_s: float) -> None:
    """'faster'/'slower'/'about as fast' against the tokens/s the same sentence quotes, and the gap's 'close to' /
    'falls short of' / 'beats' against the two speedups it compares."""
    lines = theory.diagnose(_with_elapsed(elapsed_s), baseline_trace())
    run = next(line for line in lines if line.startswith("This run was"))
    hit = re.match(r"This run was (.+): ([\d.]+) tokens/s against ([\d.]+)\.", run)
    assert hit is not None
    verdict, tps, base = hit.groups()
    hit = re.search(r"([\d.]+)×", verdict)
    assert hit is not None
    x = float(hit.group(1))
    tps_n, base_n = float(tps), float(base)  # quoted to one decimal: the ratio x is within their rounding
    assert (tps_n - 0.05) / (base_n + 0.05) - 0.005 <= x <= (tps_n + 0.05) / (base_n - 0.05) + 0.005
    if "faster" in verdict:
        assert x >= 1.05 and tps_n > base_n
    elif "slower" in verdict:
        assert x <= 0.95 and tps_n < base_n
    else:
        assert "about as fast" in verdict and 0.95 < x < 1.05
    prediction = next(line for line in lines if "Leviathan" in line)
    hit = re.search(r"it predicts ([\d.]+)×", prediction)
    assert hit is not None
    refined = float(hit.group(1))
    hit = re.search(r"The measured ([\d.]+)×", prediction)
    assert hit is not None
    measured = float(hit.group(1))
    if "beats it" in prediction:
        assert measured > refined * 1.2
    elif "falls short" in prediction:
        assert measured < refined * 0.85
    else:
        assert "close to" in prediction and refined * 0.75 <= measured <= refined * 1.3
