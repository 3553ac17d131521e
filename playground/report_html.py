"""The pieces every self-contained HTML report shares (the benchmark's and the tune's): the page, its style,
escaping, number formatting, tables, and the white-page look of a report's Plotly figures.

No torch here and nothing report-specific: `bench.report` and `tune_report` build their pages from these.
"""

from __future__ import annotations

import html
import math
from typing import Any

from .i18n import DEFAULT_LANGUAGE, number

import plotly.graph_objects as go
import plotly.offline

# The series colours of every report chart (Plotly's default palette), and baseline's grey.
COLORS = ["#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692", "#b6e880"]
BASELINE_COLOR = "#7f7f7f"

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1400px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em} h2{margin-top:2em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:1em 0;font-size:.9em} th,td{border:1px solid #ddd;padding:.3em .6em;text-align:right}
th{background:#f4f4f4} td:first-child,td:nth-child(2){text-align:left}
td:first-child{min-width:10em;max-width:18em} table{font-size:.85em}
.verdict{background:#fff8e1;border-left:4px solid #ffb300;padding:.8em 1em}
.bad{color:#b71c1c;font-weight:bold} .warn{color:#e65100} .ok{color:#2e7d32}
code,pre{background:#f6f8fa;padding:.1em .3em} pre{padding:1em;overflow-x:auto;white-space:pre-wrap}
.small{font-size:.85em;color:#555} .chart{margin:1em 0}
"""


def color(i: int) -> str:
    """The i-th series colour (the palette repeats)."""
    return COLORS[i % len(COLORS)]


def escape(text: Any) -> str:
    """Any value as HTML-escaped text."""
    return html.escape(str(text))


def fmt(x: Any, spec: str = ".2f", suffix: str = "", lang: str = DEFAULT_LANGUAGE) -> str:
    """A number for a table cell, as `lang` writes it (`i18n.number`), or '–' when missing (None or NaN)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return number(x, lang, spec) + suffix


def table(headers: list[str], rows: list[list[str]], cls: str = "") -> str:
    """An HTML table: headers are escaped here, cells are HTML already."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def style_figure(fig: go.Figure, title: str, **layout: Any) -> go.Figure:
    """A report figure's common look: white template, fixed height, legend below, room for value labels."""
    fig.update_layout(title=title, template="plotly_white", height=380, margin=dict(l=60, r=20, t=70, b=60),
                      legend=dict(orientation="h", y=-0.2), **layout)
    # Value labels above the tallest bar would be clipped by the plot area; the top margin holds them.
    fig.update_traces(cliponaxis=False, selector=dict(type="bar"))
    return fig


def figure_html(fig: go.Figure) -> str:
    """A figure as a page fragment (the page carries plotly.js once)."""
    return fig.to_html(full_html=False, include_plotlyjs=False)


def page(title: str, body: str) -> str:
    """A whole self-contained page: the shared style and plotly.js inlined (no CDN: reports open offline)."""
    js = plotly.offline.get_plotlyjs()
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{CSS}</style><script type='text/javascript'>{js}</script></head><body>" + body + "</body></html>")
