"""The "All methods explained" tab: every method's five lecture parts side by side, from the registry.

`lecture_html` is the same five parts for one method (the "How it works" box beside the method picker).
"""

from __future__ import annotations

import html

import gradio as gr

from ..methods import METHODS, Method

LECTURE_LABELS = {"drafts": "What drafts", "verifies": "How it is verified", "pays_off": "When it pays off",
                  "cost": "What it costs", "failure": "When it fails"}


def lecture_html(method: Method) -> str:
    """One method's lecture as a definition list."""
    items = "".join(
        f"<dt>{html.escape(LECTURE_LABELS.get(key, key))}</dt><dd>{html.escape(text)}</dd>"
        for key, text in method.lecture.items()
    )
    return f'<dl class="pg-lecture">{items}</dl>'


def methods_table_html() -> str:
    """Every method's five lecture parts side by side."""
    head = "<tr><th>method</th>" + "".join(f"<th>{html.escape(v)}</th>" for v in LECTURE_LABELS.values()) + "</tr>"
    rows = []
    for name, method in METHODS.items():
        cells = "".join(f"<td>{html.escape(method.lecture.get(key, '–'))}</td>" for key in LECTURE_LABELS)
        rows.append(f'<tr data-method="{html.escape(name)}"><th>{html.escape(method.title)}</th>{cells}</tr>')
    return f'<table class="pg-methods-table" data-testid="pg-methods-table">{head}{"".join(rows)}</table>'


def build_methods() -> None:
    """The tab (call inside the page's `gr.Tabs`): a table, no events."""
    with gr.Tab("All methods explained", id="methods", elem_id="pg-tab-methods"):
        gr.HTML(methods_table_html(), elem_id="pg-methods")
