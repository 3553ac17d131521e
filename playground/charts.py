"""Trace → Plotly figures: acceptance and cost per verification step.

Pure functions over `playground.trace` records (no torch, no Gradio). Colours follow the
Okabe–Ito palette used for the tokens (`render.PALETTE`); backgrounds are transparent and
text is mid-grey, so the figures read in Gradio's light and dark modes alike.

- `acceptance_figure`: per step, the drafted tokens split into accepted / rejected /
  discarded / unverified (stacked bars: bar height = drafted), and the running acceptance rate.
- `timing_figure`: per step, draft vs verify vs other time (stacked; see `trace.Step`), and the
  cost per new token, which is where CPU runs lose: a wide verification forward can cost as much
  as several one-token steps.
"""

from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from .i18n import DEFAULT_LANGUAGE, number, separators, t
from .render import PALETTE
from .trace import ACCEPTED, DISCARDED, REJECTED, UNVERIFIED, Step, Trace

TEXT = "#888888"
GRID = "rgba(136,136,136,0.22)"
DRAFT_TIME = "#E69F00"  # orange
VERIFY_TIME = "#56B4E9"  # sky blue
OTHER_TIME = "#999999"  # grey: the rest of the loop
RUNNING = "#2F8FD8"  # a blue between Okabe–Ito blue and sky blue: reads on light and dark
PER_TOKEN = "#CC79A7"  # reddish purple

HEIGHT = 330
WAITING_HEIGHT = 96  # a chart before its first step: the title and one line of hint


def _steps(source: Trace | Sequence[Step]) -> Sequence[Step]:
    return source.steps if isinstance(source, Trace) else source


def _layout(title: str, y_title: str, lang: str = DEFAULT_LANGUAGE, **extra: object) -> dict:
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
        xaxis=dict(title=dict(text=t("chart.x.step", lang)), rangemode="tozero", **axis),
        yaxis=dict(title=dict(text=y_title), rangemode="tozero", **axis),
        uirevision="keep",  # keep the user's zoom while the figure grows
        separators=separators(lang),  # axes and hover numbers with the language's decimal sign
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


def _waiting(layout: dict) -> dict:
    """A chart with no step yet: its title and a one-line hint (the note), not a tall frame of empty axes."""
    hidden = dict(visible=False, fixedrange=True)
    return {**layout, "height": WAITING_HEIGHT, "margin": dict(l=10, r=10, t=36, b=4), "shapes": [],
            "annotations": [], "xaxis": hidden, "yaxis": hidden, "yaxis2": hidden}


def _replay(layout: dict, current: int | None, total_steps: int | None, lang: str = DEFAULT_LANGUAGE) -> dict:
    """A replay's view: the x axis spans the whole trace (`total_steps`) and step `current` (0-based) is marked."""
    if total_steps:
        layout["xaxis"] = {**layout["xaxis"], "range": [0.4, total_steps + 0.6], "autorange": False}
    if current is not None:
        layout["shapes"] = [dict(
            type="rect", xref="x", yref="paper", x0=current + 0.5, x1=current + 1.5, y0=0, y1=1,
            fillcolor="rgba(0,114,178,0.16)", line=dict(color="rgba(0,114,178,0.9)", width=1.5), layer="below",
            name=t("chart.current_step", lang),
        )]
        layout["annotations"] = [dict(text=t("chart.step_n", lang, step=current + 1), x=current + 1, xref="x", y=1.0, yref="paper",
                                      yanchor="bottom", showarrow=False, font=dict(size=11, color="#2F8FD8"))]
        layout["uirevision"] = None  # follow the replay rather than keeping the previous view
    return layout


def acceptance_figure(source: Trace | Sequence[Step], *, current: int | None = None,
                      total_steps: int | None = None, lang: str = DEFAULT_LANGUAGE) -> go.Figure:
    """Drafted tokens per step (accepted / rejected / discarded / unverified) and the running acceptance rate.

    For a replay: `current` marks that step (0-based) and `total_steps` fixes the x axis to the whole trace.
    """
    steps = _steps(source)
    layout = _layout(
        t("chart.acceptance.title", lang), t("chart.acceptance.y", lang), lang,
        yaxis2=dict(title=dict(text=t("chart.acceptance.y2", lang)), overlaying="y", side="right", range=[0, 102],
                    tickmode="array", tickvals=[0, 25, 50, 75, 100], showgrid=False, color=TEXT, zeroline=False),
    )
    layout = _replay(layout, current, total_steps, lang)
    if not steps:
        return _figure([], _waiting(layout), t("chart.acceptance.empty", lang))
    x = [s.index + 1 for s in steps]
    unverified = [len(s.unverified) for s in steps]
    running: list[float | None] = []
    drafted_total = accepted_total = 0
    for s in steps:
        drafted_total += s.verified_drafts
        accepted_total += s.accepted
        running.append(round(100.0 * accepted_total / drafted_total, 2) if drafted_total else None)
    traces = [
        _bar(x, [s.accepted for s in steps], t("chart.accepted", lang), PALETTE[ACCEPTED],
             t("chart.hover.accepted", lang)),
        _bar(x, [len(s.rejected) for s in steps], t("chart.rejected", lang), PALETTE[REJECTED],
             t("chart.hover.rejected", lang)),
    ]
    if any(s.discarded for s in steps):
        traces.append(_bar(x, [len(s.discarded) for s in steps], t("chart.discarded", lang), PALETTE[DISCARDED],
                           t("chart.hover.discarded", lang)))
    if any(unverified):
        traces.append(_bar(x, unverified, t("chart.unverified", lang), PALETTE[UNVERIFIED],
                           t("chart.hover.unverified", lang)))
    if not drafted_total:
        return _figure(traces, layout, t("chart.acceptance.nothing", lang))
    traces.append(dict(
        type="scatter", x=x, y=running, name=t("chart.acceptance.line", lang), yaxis="y2", mode="lines",
        line=dict(color=RUNNING, width=2), connectgaps=True,
        hovertemplate=t("chart.hover.running", lang) + "<extra></extra>",
    ))
    return _figure(traces, layout)


def timing_figure(source: Trace | Sequence[Step], *, current: int | None = None,
                  total_steps: int | None = None, lang: str = DEFAULT_LANGUAGE) -> go.Figure:
    """Draft vs verify vs other time per step (stacked, ms) and the cost per new token (replay options as above)."""
    steps = _steps(source)
    layout = _layout(t("chart.timing.title", lang), t("chart.ms", lang), lang)
    layout["xaxis"] = {**layout["xaxis"], "title": dict(text=t("chart.timing.x", lang))}
    layout = _replay(layout, current, total_steps, lang)
    if not steps:
        return _figure([], _waiting(layout), t("chart.timing.empty", lang))
    x = [s.index + 1 for s in steps]
    draft = [round(s.draft_ms, 2) for s in steps]
    traces = []
    if any(draft):
        traces.append(_bar(x, draft, t("chart.draft", lang), DRAFT_TIME, t("chart.hover.draft", lang)))
    traces.append(_bar(x, [round(s.verify_ms, 2) for s in steps], t("chart.verify", lang), VERIFY_TIME,
                       t("chart.hover.verify", lang)))
    if any(s.other_ms for s in steps):
        traces.append(_bar(x, [round(s.other_ms, 2) for s in steps], t("chart.other", lang), OTHER_TIME,
                           t("chart.hover.other", lang)))
    traces.append(dict(
        type="scatter", x=x, name=t("chart.ms_per_token", lang), mode="lines+markers",
        y=[round(s.time_ms / len(s.emitted), 2) if s.emitted else None for s in steps],
        line=dict(color=PER_TOKEN, width=2), marker=dict(size=4), connectgaps=True,
        hovertemplate=t("chart.hover.ms_per_token", lang) + "<extra></extra>",
    ))
    return _figure(traces, layout)


def _bar(x: list[int], y: Sequence[float], name: str, color: str, hover: str) -> dict:
    return dict(type="bar", x=x, y=y, name=name, marker=dict(color=color), hovertemplate=hover + "<extra></extra>")


def figures(source: Trace | Sequence[Step], *, current: int | None = None,
            total_steps: int | None = None, lang: str = DEFAULT_LANGUAGE) -> tuple[go.Figure, go.Figure]:
    return (acceptance_figure(source, current=current, total_steps=total_steps, lang=lang),
            timing_figure(source, current=current, total_steps=total_steps, lang=lang))


# --------------------------------------------------------------------------- theory


THEORY_GAMMAS = (1, 2, 3, 5, 8)
ALPHA_TICKS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
_GAMMA_COLORS = ("#9ecae1", "#56B4E9", "#0072B2", "#08306b", "#6a51a3")
MEASURED = "#D55E00"  # vermillion: the run's own point


def theory_figure(alpha: float | None = None, tau: float | None = None, gamma: float | None = None,
                  expected_tau: float | None = None, label: str | None = None,
                  gammas: Sequence[int] = THEORY_GAMMAS, lang: str = DEFAULT_LANGUAGE) -> go.Figure:
    """Expected tokens per step E(α, γ) = (1 − α^(γ+1)) / (1 − α) against α for several draft lengths γ,
    with a run's measured point (α, τ) and, where known, its mean draft length's curve and the point
    the formula expects for it."""
    from .theory import expected_tokens_per_step

    label = t("chart.theory.this_run", lang) if label is None else label
    alphas = [i / 100 for i in range(101)]
    layout = _layout(t("chart.theory.title", lang), t("chart.theory.y", lang), lang)
    layout.update(hovermode="closest", barmode=None, height=380, uirevision=None)
    layout["xaxis"] = {**layout["xaxis"], "title": dict(text=t("chart.theory.x", lang)),
                       "range": [0, 1.0], "rangemode": "normal", "tickvals": list(ALPHA_TICKS),
                       "ticktext": [number(a, lang, ".0%") for a in ALPHA_TICKS]}  # ru «40 %», not d3's "40%"
    top = max(gammas) + 1
    layout["yaxis"] = {**layout["yaxis"], "range": [0, top + 0.3]}
    layout["legend"] = {**layout["legend"], "y": -0.22}
    layout["margin"] = dict(l=50, r=20, t=36, b=20)
    traces: list[dict] = [dict(
        type="scatter", x=[0, 1], y=[1, 1], mode="lines", name=t("chart.theory.baseline", lang),
        line=dict(color=TEXT, width=1.5, dash="dot"), hoverinfo="skip",
    )]
    # Plotly writes a percentage its own way ("45%", d3's): each point's α as the page's language writes it instead
    # (ru «45 %»), for the hover texts' %{customdata}.
    alpha_shown = [number(a, lang, ".0%") for a in alphas]
    for i, g in enumerate(gammas):
        traces.append(dict(
            type="scatter", x=alphas, y=[round(expected_tokens_per_step(a, g), 4) for a in alphas], mode="lines",
            customdata=alpha_shown,
            name=f"γ = {g}", line=dict(color=_GAMMA_COLORS[i % len(_GAMMA_COLORS)], width=2),
            hovertemplate=t("chart.theory.hover_curve", lang, gamma=g) + "<extra></extra>",
        ))
    if gamma is not None and round(gamma, 1) not in {float(g) for g in gammas}:
        traces.append(dict(
            type="scatter", x=alphas, y=[round(expected_tokens_per_step(a, gamma), 4) for a in alphas], mode="lines",
            customdata=alpha_shown,
            name=t("chart.theory.mean_draft", lang, gamma=number(gamma, lang, ".1f"), label=label),
            line=dict(color=MEASURED, width=1.5, dash="dash"),
            hovertemplate=t("chart.theory.hover_curve", lang, gamma=number(gamma, lang, ".1f")) + "<extra></extra>",
        ))
    if alpha is not None and expected_tau is not None:
        traces.append(dict(
            type="scatter", x=[alpha], y=[round(expected_tau, 4)], mode="markers", name=t("chart.theory.expected", lang),
            marker=dict(size=11, color="rgba(0,0,0,0)", line=dict(color=MEASURED, width=2), symbol="circle"),
            hovertemplate=t("chart.theory.hover_expected", lang) + "<extra></extra>",
        ))
    if alpha is not None and tau is not None:
        traces.append(dict(
            type="scatter", x=[alpha], y=[round(tau, 4)], mode="markers+text", name=t("chart.theory.measured", lang, label=label),
            customdata=[number(alpha, lang, ".0%")],
            marker=dict(size=14, color=MEASURED, symbol="diamond", line=dict(color="white", width=1)),
            text=[f"α {number(alpha, lang, '.0%')}, τ {number(tau, lang)}"], textposition="middle right" if alpha < 0.75 else "middle left",
            textfont=dict(color=MEASURED, size=12),
            hovertemplate=t("chart.theory.hover_measured", lang) + "<extra></extra>",
        ))
        layout["yaxis"]["range"] = [0, max(top, tau, gamma + 1 if gamma else 0) + 0.3]
        note = None
    else:
        note = t("chart.theory.empty", lang)
    if note:
        layout["annotations"] = [dict(text=note, x=0.02, y=0.97, xref="paper", yref="paper", xanchor="left",
                                      showarrow=False, font=dict(color=TEXT, size=12))]
    return go.Figure(data=traces, layout=layout, _validate=False)


def follow_the_page(fig: go.Figure) -> go.Figure:
    """Restyle a report figure (white page) for the page, which may be light or dark: transparent backgrounds
    and the mid-grey text and grid of the run charts, which read on both."""
    fig.update_layout(paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)", font_color=TEXT,
                      title_font_color=TEXT, legend_bgcolor="rgba(0,0,0,0)")
    fig.update_xaxes(gridcolor=GRID, zerolinecolor=GRID, linecolor=GRID)
    fig.update_yaxes(gridcolor=GRID, zerolinecolor=GRID, linecolor=GRID)
    return fig
