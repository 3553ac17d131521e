"""Plotly figures for benchmark and Compare results.

Every builder takes `Aggregate` records (or a race timeline from `timeline.race_timeline`) and returns a
`plotly.graph_objects.Figure`, so the HTML report and the page's Compare view draw the same charts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from .. import charts
from ..methods import is_reference
from ..report_html import BASELINE_COLOR, color, style_figure
from .aggregation import ALL, Aggregate, in_category

if TYPE_CHECKING:
    from .measure import CompareResult


def _methods(aggs: list[Aggregate]) -> list[Aggregate]:
    return [a for a in aggs if not a.is_baseline]


def _by_category(aggs: list[Aggregate], label: str) -> dict[str, Aggregate]:
    return {a.category: a for a in aggs if a.label == label}


def speedup_vs_theory_figure(aggs: list[Aggregate], category: str | None = None) -> go.Figure:
    """Measured speedup next to Leviathan et al.'s prediction and the refined one, per method."""
    rows = _methods(in_category(aggs, category))
    labels = [a.label for a in rows]
    fig = go.Figure()
    for key, name, colour in (("speedup", "measured", charts.RUNNING), ("refined_speedup", "refined prediction", "#00cc96"),
                              ("theoretical_speedup", "Leviathan et al.", "#ffa15a")):
        values = [getattr(a, key) for a in rows]
        fig.add_bar(x=labels, y=values, name=name, marker_color=colour,
                    text=[("–" if v is None else f"{v:.2f}×") for v in values], textposition="outside")
    fig.add_hline(y=1.0, line_dash="dash", line_color=BASELINE_COLOR, annotation_text="baseline")
    return style_figure(fig, "Speedup over baseline: measured vs theory", barmode="group", yaxis_title="× baseline")


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


def throughput_figure(aggs: list[Aggregate]) -> go.Figure:
    """Tokens per second per category, one bar per method (baseline included)."""
    cats = list(dict.fromkeys(a.category for a in aggs))
    fig = go.Figure()
    for i, label in enumerate(dict.fromkeys(a.label for a in aggs)):
        by_cat = _by_category(aggs, label)
        colour = BASELINE_COLOR if is_reference(label) else color(i)
        fig.add_bar(x=cats, y=[by_cat[c].tokens_per_s if c in by_cat else None for c in cats], name=label,
                    marker_color=colour)
    return style_figure(fig, "Throughput", barmode="group", yaxis_title="tokens / s")


def position_acceptance_figure(aggs: list[Aggregate], category: str | None = None) -> go.Figure:
    """How often the k-th drafted token survives verification, per method: what decides the best draft length."""
    fig = go.Figure()
    for i, a in enumerate(_methods(in_category(aggs, category))):
        rates = a.position_acceptance
        counts = a.position_counts
        if not rates:
            continue
        fig.add_scatter(x=list(range(1, len(rates) + 1)), y=rates, mode="lines+markers", name=a.label,
                        line_color=color(i), customdata=counts,
                        hovertemplate="position %{x}: %{y:.0%} of the drafts that reached verification kept "
                                      "(%{customdata[1]} of %{customdata[0]})")
        judged = a.position_acceptance_judged
        if judged:
            fig.add_scatter(x=list(range(1, len(judged) + 1)), y=judged, mode="lines+markers",
                            name=f"{a.label} (given judged)", line=dict(color=color(i), dash="dot"),
                            customdata=counts, hovertemplate="position %{x}: %{y:.0%} accepted of those judged, i.e. "
                                                             "every draft before it kept (%{customdata[1]} of "
                                                             "%{customdata[2]})")
    return style_figure(fig, "Acceptance by position within the draft (solid: of drafts reaching verification; "
                        "dotted: of drafts judged)", xaxis_title="drafted token position",
                        yaxis_title="share accepted", yaxis_range=[0, 1.05], xaxis_dtick=1)


def step_cost_figure(aggs: list[Aggregate], category: str | None = None) -> go.Figure:
    """Mean draft, verify and other time per step (stacked), tokens per step on top; baseline's step as reference."""
    rows = in_category(aggs, category)
    labels = [a.label for a in rows]
    fig = go.Figure()
    fig.add_bar(x=labels, y=[a.draft_ms_per_step for a in rows], name="draft ms / step", marker_color="#ffa15a")
    fig.add_bar(x=labels, y=[a.verify_ms_per_step for a in rows], name="verify ms / step", marker_color="#636efa")
    fig.add_bar(x=labels, y=[a.other_ms_per_step or 0.0 for a in rows], name="other ms / step",
                marker_color="#9a9a9a",
                text=[("" if a.tokens_per_step is None else f"τ={a.tokens_per_step:.2f}") for a in rows],
                textposition="outside")
    base = [a for a in rows if a.is_baseline]
    if base and base[0].verify_ms_per_step:
        # Named in the legend, not labelled on the line: a label there lands on the tallest bar.
        fig.add_hline(y=base[0].verify_ms_per_step + (base[0].other_ms_per_step or 0.0), line_dash="dash",
                      line_color=BASELINE_COLOR, showlegend=True, name="one baseline step")
    return style_figure(fig, "Time per step: draft vs verify vs other (τ = tokens per step)", barmode="stack",
                        yaxis_title="ms per step")


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


def figures(aggs: list[Aggregate]) -> dict[str, go.Figure]:
    """The standard set of charts for a benchmark or a Compare result."""
    figs = {
        "speedup_vs_theory": speedup_vs_theory_figure(aggs),
        "throughput": throughput_figure(aggs),
        "position_acceptance": position_acceptance_figure(aggs),
        "step_cost": step_cost_figure(aggs),
    }
    if len({a.category for a in aggs if a.category != ALL}) > 1:
        figs["speedup_by_category"] = speedup_by_category_figure(aggs)
    return figs


def compare_figures(result: "CompareResult") -> dict[str, go.Figure]:
    """Charts for a Compare result (one prompt), for the page's Compare view (light or dark)."""
    return {name: charts.follow_the_page(fig) for name, fig in figures(result.aggregates).items()}
