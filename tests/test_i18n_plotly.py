"""Plotly's hover texts speak each language like the page's sentences do (issue 45).

Plotly fills a hover template in the browser with d3's formats, outside `i18n.number` and the plural tests: a d3
percentage is "45%" in every language (Russian writes «45 %»), and a decimal before a counted noun must take the form a
fraction takes («2,35 токена», not «токенов»). Each figure the page draws is built in each language and each hover
text filled as Plotly fills it (d3's formats, the figure's `separators`), point by point; then every percentage must be
written as `i18n.number` writes it, and every noun after a decimal must be the form CLDR's plural rule gives a
fraction in that language.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest

from playground import charts, i18n
from playground.bench.figures import position_acceptance_figure
from playground.trace import Step

FIELD = re.compile(r"%\{([a-z]+)(?:\[(\d+)\])?(?::([^}]*))?\}")


def _d3(value: Any, spec: str | None, separators: str) -> str:
    """A value as d3-format writes it for Plotly (only the specs the page uses: none, .Nf, .N%)."""
    if spec is None:
        return str(value)
    match = re.fullmatch(r"\.(\d+)([f%])", spec)
    assert match, f"a format the check does not know: {spec}"
    digits, kind = int(match.group(1)), match.group(2)
    text = f"{value * 100 if kind == '%' else value:.{digits}f}" + ("%" if kind == "%" else "")
    return text.replace(".", separators[0])


def hover_texts(figure: Any) -> list[str]:
    """Every hover text of `figure`, filled for each of its points as Plotly fills it."""
    fig = figure.to_dict() if hasattr(figure, "to_dict") else figure
    separators = fig["layout"].get("separators") or ".,"
    out = []
    for trace in fig["data"]:
        template = trace.get("hovertemplate")
        if not template:
            continue
        for i in range(len(trace.get("x") or trace.get("y") or [])):
            def fill(match: re.Match) -> str:
                name, index, spec = match.groups()
                value = trace[name][i]
                value = value[int(index)] if index is not None else value
                return _d3(value, spec, separators)
            out.append(re.sub(r"<[^>]+>", " ", FIELD.sub(fill, template)))
    return out


def _figures(lang: str) -> list[Any]:
    steps = [Step(index=0, drafted=[1, 2, 3], accepted=2, rejected=[3], emitted=[1, 2, 9], draft_ms=2.0, verify_ms=60.0,
                  other_ms=1.5),
             Step(index=1, drafted=[4, 5], accepted=2, rejected=[], emitted=[4, 5, 6], draft_ms=1.0, verify_ms=58.0)]
    agg: Any = SimpleNamespace(label="prompt lookup", category="all", is_baseline=False,
                          position_counts=[[20, 9, 20], [9, 4, 9]], position_acceptance=[0.45, 4 / 9],
                          position_acceptance_judged=[0.45, 4 / 9])
    return [*charts.figures(steps, lang=lang),
            charts.theory_figure(0.45, 2.35, 2.7, 2.2, lang=lang),
            position_acceptance_figure([agg], "all", lang=lang)]


def _fraction_nouns(lang: str) -> dict[str, str]:
    """Each noun a counted phrase of `lang` puts after its number, mapped to the form a fraction takes (ru: every form
    of «токен» -> «токена»)."""
    fraction = i18n.plural_category(lang, 2.35)
    nouns: dict[str, str] = {}
    for value in i18n.catalogue(lang).values():
        if isinstance(value, dict) and fraction in value:
            after = re.match(r"\{n\} (\w+)", value[fraction])
            for form in value.values():
                noun = re.match(r"\{n\} (\w+)", form)
                if noun and after and noun.group(1) != after.group(1):
                    nouns.setdefault(noun.group(1), after.group(1))
    return nouns


def wrong_forms(texts: list[str], lang: str) -> list[str]:
    """The percentages and the nouns after decimals in `texts` that `lang` does not write so."""
    hit = re.fullmatch(r"45(\D*)%", i18n.number(0.45, lang, ".0%"))
    assert hit is not None
    sign = hit.group(1)  # what stands between number and %
    nouns = _fraction_nouns(lang)
    wrong = []
    for text in texts:
        wrong += [m.group() for m in re.finditer(r"\d(\s?)%", text) if m.group(1) != sign]
        wrong += [m.group() for m in re.finditer(r"\d[.,]\d+ (\w+)", text) if m.group(1) in nouns]
    return wrong


@pytest.mark.parametrize("lang", list(i18n.LANGUAGES))
def test_every_hover_text_writes_counts_and_percentages_as_the_language_does(lang: str) -> None:
    texts = [text for figure in _figures(lang) for text in hover_texts(figure)]
    assert len(texts) > 100 and any("%" in text for text in texts)
    wrong = sorted(set(wrong_forms(texts, lang)))
    assert not wrong, f"{lang}: hover texts not in the language's form: {wrong}"


def test_the_check_finds_plotlys_percentage_and_a_whole_numbers_noun_after_a_fraction() -> None:
    """The control: d3's "45%" and «2,35 токенов» in a Russian hover are found; «45 %» and «2,35 токена» are not."""
    assert wrong_forms(["принято 45%", "2,35 токенов за шаг"], "ru") == ["5%", "2,35 токенов"]
    assert wrong_forms(["принято 45\u00a0%", "2,35 токена за шаг", "3 токенов"], "ru") == []
    assert wrong_forms(["45 %"], "en") == ["5 %"]


def _page_figures(lang: str) -> list[Any]:
    """Every figure the page draws: the run's charts and the theory curve, Compare's and Tune's charts."""
    from test_i18n import sample_compare, sample_tune

    from playground import bench, tune_report

    return [*_figures(lang), *bench.compare_figures(sample_compare(lang), lang).values(),
            *tune_report.figures(sample_tune(), lang).values()]


def _written(figure: Any) -> list[str]:
    """The text a figure writes itself (bar and point labels, tick labels, annotations), not through a template."""
    fig = figure.to_dict() if hasattr(figure, "to_dict") else figure
    out = [str(text) for trace in fig["data"] for text in (trace.get("text") if isinstance(trace.get("text"), list)
                                                            else [trace.get("text") or ""])]
    out += [str(a.get("text") or "") for a in fig["layout"].get("annotations") or []]
    out += [str(tick) for name, axis in fig["layout"].items() if name.startswith(("xaxis", "yaxis"))
            for tick in axis.get("ticktext") or []]
    return out


@pytest.mark.parametrize("lang", list(i18n.LANGUAGES))
def test_every_figures_axes_and_labels_write_numbers_as_the_language_does(lang: str) -> None:
    """Plotly writes an axis's ticks with the figure's `separators` (ru "0,5"; without them, "0.5") and a d3
    `tickformat` percentage as "45%" in every language: each figure the page draws carries the language's separators,
    formats no axis as a d3 percentage, and writes the numbers of its own labels with the language's decimal sign."""
    figures = _page_figures(lang)
    decimal = i18n.separators(lang)[0]
    assert len(figures) >= 8
    for figure in figures:
        layout = figure.to_dict()["layout"]
        assert layout.get("separators") == i18n.separators(lang), (lang, layout.get("title"))
        for name, axis in layout.items():
            if name.startswith(("xaxis", "yaxis")):
                assert "%" not in str(axis.get("tickformat", "")) + str(axis.get("ticksuffix", "")), (lang, name)
    other = "." if decimal == "," else ","
    written = [text for figure in figures for text in _written(figure)]
    assert any(re.search(r"\d" + re.escape(decimal) + r"\d", text) for text in written)
    wrong = [text for text in written if re.search(r"\d" + re.escape(other) + r"\d", text)]
    assert not wrong, f"{lang}: numbers written with another language's decimal sign: {wrong}"
