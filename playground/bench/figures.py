"""Plotly figures for benchmark and Compare results.

Every builder takes `Aggregate` records (or a race timeline from `timeline.race_timeline`) and returns a
`plotly.graph_objects.Figure`, so the HTML report and the page's Compare view draw the same charts (the
report in English, the page in its visitor's `lang`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from .. import charts
from ..i18n import DEFAULT_LANGUAGE, number, separators, t
from ..methods import is_reference
from ..report_html import BASELINE_COLOR, color, style_figure
from .aggregation import ALL, Aggregate, in_category

if TYPE_CHECKING:
    from .measure import CompareResult


def _methods(aggs: list[Aggregate]) -> list[Aggregate]:
    return [a for a in aggs if not a.is_baseline]


def _by_category(aggs: list[Aggregate], label: str) -> dict[str, Aggregate]:
    return {a.category: a for a in aggs if a.label == label}


def speedup_vs_theory_figure(aggs: list[Aggregate], category: str | None = None,
                             lang: str = DEFAULT_LANGUAGE) -> go.Figure:
    """Measured speedup next to Leviathan et al.'s prediction and the refined one, per method."""
    rows = _methods(in_category(aggs, category))
    labels = [a.label for a in rows]
    fig = go.Figure()
    for key, name, colour in (("speedup", "measured", charts.RUNNING), ("refined_speedup", "refined", "#00cc96"),
                              ("theoretical_speedup", "leviathan", "#ffa15a")):
        values = [getattr(a, key) for a in rows]
        fig.add_bar(x=labels, y=values, name=t(f"bench.chart.speedup.{name}", lang), marker_color=colour,
                    text=[("–" if v is None else number(v, lang) + "×") for v in values], textposition="outside")
    fig.add_hline(y=1.0, line_dash="dash", line_color=BASELINE_COLOR, annotation_text=t("tune.chart.baseline", lang))
    return style_figure(fig, t("bench.chart.speedup.title", lang), barmode="group",
                        yaxis_title=t("bench.chart.speedup.y", lang), separators=separators(lang))


def speedup_by_category_figure(aggs: list[Aggregate]) -> go.Figure:
    """Measured speedup per category, one bar per method."""
    cats = [c for c in dict.fromkeys(a.category for a in aggs) if c != ALL]
    fig = go.Figure()
    for i, label in enumerate(dict.fromkeys(a.label for a in _methods(aggs))):
        by_cat = _by_category(aggs, label)
        fig.add_bar(x=cats, y=[by_cat[c].speedup if c in by_cat else None for c in cats], name=label,
                    marker_color=color(i))
    fig.add_hline(y=1.0, line_dash="dash", line_color=BASELINE_COLOR, annotation_text="baseline")
    return style_figure(fig, "Measured speedup by category", barmode="group", yaxis_title="× baseline")


def throughput_figure(aggs: list[Aggregate], lang: str = DEFAULT_LANGUAGE) -> go.Figure:
    """Tokens per second per category, one bar per method (baseline included)."""
    cats = list(dict.fromkeys(a.category for a in aggs))
    fig = go.Figure()
    for i, label in enumerate(dict.fromkeys(a.label for a in aggs)):
        by_cat = _by_category(aggs, label)
        colour = BASELINE_COLOR if is_reference(label) else color(i)
        fig.add_bar(x=cats, y=[by_cat[c].tokens_per_s if c in by_cat else None for c in cats], name=label,
                    marker_color=colour)
    return style_figure(fig, t("bench.chart.throughput.title", lang), barmode="group",
                        yaxis_title=t("bench.chart.throughput.y", lang), separators=separators(lang))


def position_acceptance_figure(aggs: list[Aggregate], category: str | None = None,
                               lang: str = DEFAULT_LANGUAGE) -> go.Figure:
    """How often the k-th drafted token survives verification, per method: what decides the best draft length."""
    fig = go.Figure()
    for i, a in enumerate(_methods(in_category(aggs, category))):
        rates = a.position_acceptance
        # each point's counts, then its rate as the page's language writes a percentage (Plotly's own is "45%")
        counts = [[*c, number(rate, lang, ".0%") if rate is not None else ""]
                  for c, rate in zip(a.position_counts, rates)]
        if not rates:
            continue
        fig.add_scatter(x=list(range(1, len(rates) + 1)), y=rates, mode="lines+markers", name=a.label,
                        line_color=color(i), customdata=counts,
                        hovertemplate=t("bench.chart.positions.hover", lang))
        judged = a.position_acceptance_judged
        if judged:
            fig.add_scatter(x=list(range(1, len(judged) + 1)), y=judged, mode="lines+markers",
                            name=t("bench.chart.positions.judged", lang, label=a.label),
                            line=dict(color=color(i), dash="dot"),
                            customdata=[[*c, number(rate, lang, ".0%") if rate is not None else ""]
                                        for c, rate in zip(a.position_counts, judged)],
                            hovertemplate=t("bench.chart.positions.judged_hover", lang))
    return style_figure(fig, t("bench.chart.positions.title", lang), xaxis_title=t("bench.chart.positions.x", lang),
                        yaxis_title=t("bench.chart.positions.y", lang), yaxis_range=[0, 1.05], xaxis_dtick=1,
                        separators=separators(lang))


def step_cost_figure(aggs: list[Aggregate], category: str | None = None, lang: str = DEFAULT_LANGUAGE) -> go.Figure:
    """Mean draft, verify and other time per step (stacked), tokens per step on top; baseline's step as reference."""
    rows = in_category(aggs, category)
    labels = [a.label for a in rows]
    fig = go.Figure()
    fig.add_bar(x=labels, y=[a.draft_ms_per_step for a in rows], name=t("bench.chart.cost.draft", lang), marker_color="#ffa15a")
    fig.add_bar(x=labels, y=[a.verify_ms_per_step for a in rows], name=t("bench.chart.cost.verify", lang), marker_color="#636efa")
    fig.add_bar(x=labels, y=[a.other_ms_per_step or 0.0 for a in rows], name=t("bench.chart.cost.other", lang),
                marker_color="#9a9a9a",
                text=[("" if a.tokens_per_step is None else f"τ = {number(a.tokens_per_step, lang)}") for a in rows],
                textposition="outside")
    base = [a for a in rows if a.is_baseline]
    if base and base[0].verify_ms_per_step:
        # Named in the legend, not labelled on the line: a label there lands on the tallest bar.
        fig.add_hline(y=base[0].verify_ms_per_step + (base[0].other_ms_per_step or 0.0), line_dash="dash",
                      line_color=BASELINE_COLOR, showlegend=True, name=t("bench.chart.cost.baseline_step", lang))
    return style_figure(fig, t("bench.chart.cost.title", lang), barmode="stack", yaxis_title=t("bench.chart.cost.y", lang),
                        separators=separators(lang))


def race_figure(timeline: dict[str, Any]) -> go.Figure:
    """Tokens emitted over time for each lane of a race (static; the page animates the same data)."""
    fig = go.Figure()
    for i, lane in enumerate(timeline["lanes"]):
        pts = lane["points"]
        fig.add_scatter(x=[p["t_ms"] / 1000 for p in pts], y=[p["tokens"] for p in pts], mode="lines",
                        line_shape="hv", name=lane["label"],
                        line_color=BASELINE_COLOR if is_reference(lane["method"]) else color(i),
                        text=[p["text"] for p in pts], hovertemplate="%{x:.2f} s: %{y} tokens<br>%{text}")
    return style_figure(fig, "Race: tokens emitted over time (sum of step times)", xaxis_title="seconds",
                        yaxis_title="tokens emitted")


def figures(aggs: list[Aggregate], lang: str = DEFAULT_LANGUAGE) -> dict[str, go.Figure]:
    """The standard set of charts for a benchmark or a Compare result."""
    figs = {
        "speedup_vs_theory": speedup_vs_theory_figure(aggs, lang=lang),
        "throughput": throughput_figure(aggs, lang),
        "position_acceptance": position_acceptance_figure(aggs, lang=lang),
        "step_cost": step_cost_figure(aggs, lang=lang),
    }
    if len({a.category for a in aggs if a.category != ALL}) > 1:
        figs["speedup_by_category"] = speedup_by_category_figure(aggs)
    return figs


def compare_figures(result: "CompareResult", lang: str = DEFAULT_LANGUAGE) -> dict[str, go.Figure]:
    """Charts for a Compare result (one prompt), for the page's Compare view (light or dark, in `lang`)."""
    return {name: charts.follow_the_page(fig) for name, fig in figures(result.aggregates, lang).items()}
