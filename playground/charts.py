"""Trace → Plotly figures: acceptance and cost per verification step.

Pure functions over `playground.trace` records (no torch, no Gradio). Colours follow the
Okabe–Ito palette used for the tokens (`render.PALETTE`); backgrounds are transparent and
text is mid-grey, so the figures read in Gradio's light and dark modes alike.

- `acceptance_figure`: per step, the drafted tokens split into accepted / rejected /
  unverified (stacked bars: bar height = drafted), and the running acceptance rate.
- `timing_figure`: per step, drafting vs verification time (stacked), and the cost per new
  token, which is where CPU runs lose: a wide verification forward can cost as much as
  several one-token steps.
"""

from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from .render import PALETTE
from .trace import ACCEPTED, REJECTED, UNVERIFIED, Step, Trace

TEXT = "#888888"
GRID = "rgba(136,136,136,0.22)"
DRAFT_TIME = "#E69F00"  # orange
VERIFY_TIME = "#56B4E9"  # sky blue
RUNNING = "#2F8FD8"  # a blue between Okabe–Ito blue and sky blue: reads on light and dark
PER_TOKEN = "#CC79A7"  # reddish purple

HEIGHT = 330


def _steps(source: Trace | Sequence[Step]) -> Sequence[Step]:
    return source.steps if isinstance(source, Trace) else source


def _layout(title: str, y_title: str, **extra: object) -> dict:
    axis = dict(gridcolor=GRID, zerolinecolor=GRID, linecolor=GRID, color=TEXT)
    layout = dict(
        title=dict(text=title, x=0.01, xanchor="left", font=dict(size=14, color=TEXT)),
        height=HEIGHT,
        margin=dict(l=50, r=50, t=36, b=20),
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        font=dict(color=TEXT, size=12),
        barmode="stack",
        bargap=0.15,
        hovermode="x unified",
        legend=dict(orientation="h", yanchor="top", y=-0.2, xanchor="left", x=0.0, bgcolor="rgba(0,0,0,0)",
                    traceorder="normal", itemwidth=30, font=dict(size=11)),
        xaxis=dict(title=dict(text="verification step"), rangemode="tozero", **axis),
        yaxis=dict(title=dict(text=y_title), rangemode="tozero", **axis),
        uirevision="keep",  # keep the user's zoom while the figure grows
    )
    layout.update(extra)
    return layout


def _figure(traces: list[dict], layout: dict, note: str | None = None) -> go.Figure:
    """Build the figure from plain dicts without plotly's per-property validation.

    Validation costs more than everything else here and the figure is rebuilt while streaming;
    the tests validate every figure once (`go.Figure(fig.to_dict())`).
    """
    if note:
        layout = {**layout, "annotations": [dict(text=note, x=0.5, y=0.5, xref="paper", yref="paper",
                                                  showarrow=False, font=dict(color=TEXT, size=13))]}
    return go.Figure(data=traces, layout=layout, _validate=False)


def acceptance_figure(source: Trace | Sequence[Step]) -> go.Figure:
    """Drafted tokens per step (accepted / rejected / unverified) and the running acceptance rate."""
    steps = _steps(source)
    layout = _layout(
        "Drafted vs accepted tokens per step", "drafted tokens",
        yaxis2=dict(title=dict(text="acceptance so far %"), overlaying="y", side="right", range=[0, 102],
                    tickmode="array", tickvals=[0, 25, 50, 75, 100], showgrid=False, color=TEXT, zeroline=False),
    )
    if not steps:
        return _figure([], layout, "Acceptance per step appears here while generating")
    x = [s.index + 1 for s in steps]
    unverified = [len(s.unverified) for s in steps]
    running: list[float | None] = []
    drafted_total = accepted_total = 0
    for s in steps:
        drafted_total += s.verified_drafts
        accepted_total += s.accepted
        running.append(round(100.0 * accepted_total / drafted_total, 2) if drafted_total else None)
    traces = [
        _bar(x, [s.accepted for s in steps], "accepted", PALETTE[ACCEPTED], "%{y} accepted"),
        _bar(x, [len(s.rejected) for s in steps], "rejected", PALETTE[REJECTED], "%{y} rejected"),
    ]
    if any(unverified):
        traces.append(_bar(x, unverified, "unverified", PALETTE[UNVERIFIED], "%{y} unverified"))
    if not drafted_total:
        return _figure(traces, layout, "Nothing drafted: every step is one plain target forward")
    traces.append(dict(
        type="scatter", x=x, y=running, name="acceptance %", yaxis="y2", mode="lines",
        line=dict(color=RUNNING, width=2), connectgaps=True,
        hovertemplate="running acceptance %{y:.0f}%<extra></extra>",
    ))
    return _figure(traces, layout)


def timing_figure(source: Trace | Sequence[Step]) -> go.Figure:
    """Draft vs verify time per step (stacked, ms) and the cost per new token."""
    steps = _steps(source)
    layout = _layout("Draft vs verify time per step", "ms")
    layout["xaxis"] = {**layout["xaxis"], "title": dict(text="verification step (step 1 includes the prompt)")}
    if not steps:
        return _figure([], layout, "Time per step appears here while generating")
    x = [s.index + 1 for s in steps]
    draft = [round(s.draft_ms, 2) for s in steps]
    traces = []
    if any(draft):
        traces.append(_bar(x, draft, "draft", DRAFT_TIME, "draft %{y:.1f} ms"))
    traces.append(_bar(x, [round(s.verify_ms, 2) for s in steps], "verify", VERIFY_TIME,
                       "verify (target forward) %{y:.1f} ms"))
    traces.append(dict(
        type="scatter", x=x, name="ms / token", mode="lines+markers",
        y=[round((s.draft_ms + s.verify_ms) / len(s.emitted), 2) if s.emitted else None for s in steps],
        line=dict(color=PER_TOKEN, width=2), marker=dict(size=4), connectgaps=True,
        hovertemplate="%{y:.1f} ms per new token<extra></extra>",
    ))
    return _figure(traces, layout)


def _bar(x: list[int], y: list[float], name: str, color: str, hover: str) -> dict:
    return dict(type="bar", x=x, y=y, name=name, marker=dict(color=color), hovertemplate=hover + "<extra></extra>")


def figures(source: Trace | Sequence[Step]) -> tuple[go.Figure, go.Figure]:
    return acceptance_figure(source), timing_figure(source)
