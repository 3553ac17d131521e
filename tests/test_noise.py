"""A speedup from too little evidence says it is noise (`bench.noise_reasons`), in Compare's status and table, in
every language: the rule as a pure function, its wiring through the rows' paired repeats, and the page's words."""

from __future__ import annotations

import pytest
from test_bench import _retimed
from test_i18n_no_english import english_words, without_code
from test_theory import baseline_trace, method_trace

from playground import bench, i18n
from playground.app import compare_tab
from playground.bench import BenchPrompt, CompareResult, Measurement


def test_the_rule() -> None:
    settled = bench.noise_reasons(5, 64, [1.9, 2.1], 2.0)
    assert settled == []
    assert bench.noise_reasons(1, 16, None, 12.02) == ["few_repeats", "few_tokens"]  # the 12.02×
    assert bench.noise_reasons(2, 64, [1.0, 1.1], 1.05) == ["few_repeats"]
    assert bench.noise_reasons(3, 31, [1.0, 1.1], 1.05) == ["few_tokens"]
    assert bench.noise_reasons(5, 64, [1.5, 2.6], 2.0) == ["wide"]  # 1.1 / 2.0 > SETTLED_WIDTH
    assert bench.noise_reasons(5, 64, [1.76, 2.24], 2.0) == []  # 0.24: within it


def test_the_bootstrap_interval_of_the_median() -> None:
    assert bench.bootstrap_interval([2.0]) is None
    assert bench.bootstrap_interval([2.0, 2.0, 2.0]) == [2.0, 2.0]
    interval = bench.bootstrap_interval([1.0, 2.0, 3.0, 2.1, 1.9])
    assert interval is not None
    lo, hi = interval
    assert 1.0 <= lo < 2.0 < hi <= 3.0
    assert bench.bootstrap_interval([1.0, 2.0, 3.0, 2.1, 1.9]) == [lo, hi]  # the same figures, the same interval


def _compare(method_seconds: tuple[float, ...], base_seconds: tuple[float, ...]) -> CompareResult:
    """A Compare's result from hand-timed traces of 12 tokens each (one per repeat)."""
    spec, base_spec = bench.make_spec("prompt_lookup"), bench.make_spec("baseline")
    prompt = BenchPrompt("", "", "p")
    base = Measurement(base_spec, traces=[_retimed(baseline_trace(12), s) for s in base_seconds])
    run = Measurement(spec, traces=[_retimed(method_trace(), s) for s in method_seconds])
    rows = [bench.build_row(base_spec, prompt, base, base, None), bench.build_row(spec, prompt, run, base, None)]
    return CompareResult(prompt=prompt, rows=rows, aggregates=bench.aggregate(rows), traces={}, diagnoses={},
                         checks={}, specs={"baseline": base_spec, spec.label: spec})


def test_aggregates_carry_their_repeats_spread_and_reasons() -> None:
    one = _compare((0.1,), (1.2,))
    agg = next(a for a in one.aggregates if a.label == "prompt_lookup")
    assert agg.speedup == pytest.approx(12.0) and agg.repeats == 1 and agg.run_tokens == 12
    assert agg.noise == ["few_repeats", "few_tokens"] and agg.speedup_interval is None
    base = next(a for a in one.aggregates if a.label == "baseline")
    assert base.noise == [] and base.speedup_interval is None  # baseline's 1.0 is no measurement of a speedup
    spread = next(a for a in _compare((0.4, 0.8, 0.3, 1.2, 0.6), (1.2,) * 5).aggregates if a.label == "prompt_lookup")
    assert spread.repeats == 5 and "wide" in spread.noise
    assert spread.speedup_interval is not None and spread.speedup is not None
    assert spread.speedup_interval[0] < spread.speedup < spread.speedup_interval[1]
    assert bench.Aggregate.from_dict(spread.to_dict()) == spread  # results.json round trip


@pytest.mark.parametrize("lang", list(i18n.LANGUAGES))
def test_compare_says_a_figure_is_noise(lang: str) -> None:
    result = _compare((0.1,), (1.2,))
    verdict = compare_tab.compare_verdict(result, lang)
    table = compare_tab.compare_table_html(result, lang=lang)
    mark = i18n.t("compare.noise.mark", lang)
    assert i18n.t("compare.noise.verdict", lang, label=mark, reasons="").split(":")[0] in verdict
    assert i18n.tn("compare.noise.few_repeats", 1, lang, min=bench.SETTLED_REPEATS) in verdict
    assert i18n.tn("compare.noise.few_tokens", 12, lang, min=bench.SETTLED_TOKENS) in verdict
    assert verdict.count(i18n.number(12.0, lang)) == 1  # the figure itself, once
    assert 'data-noise="few_repeats few_tokens"' in table and f"({mark})" in table
    if lang != "en":
        assert not english_words(without_code(verdict + table).replace("prompt_lookup", ""))
    settled = CompareResult(prompt=result.prompt, rows=result.rows, traces={}, diagnoses={}, checks={}, specs=result.specs,
                            aggregates=[_settled(a) for a in result.aggregates])
    assert mark not in compare_tab.compare_verdict(settled, lang)
    assert "data-noise" not in compare_tab.compare_table_html(settled, lang=lang)


def _settled(agg: bench.Aggregate) -> bench.Aggregate:
    from dataclasses import replace

    return replace(agg, noise=[])


def test_wide_spread_is_said_with_the_interval() -> None:
    result = _compare((0.4, 0.8, 0.3, 1.2, 0.6), (1.2,) * 5)
    agg = next(a for a in result.aggregates if a.label == "prompt_lookup")
    text = compare_tab.noise_reasons_text(agg, "en")
    assert agg.speedup_interval is not None
    lo, hi = agg.speedup_interval
    assert f"runs from {lo:.2f}× to {hi:.2f}×" in text and text.startswith("12 new tokens per run")
    assert " and " in text  # two reasons, joined as English lists them
    assert " и " in compare_tab.noise_reasons_text(agg, "ru")
