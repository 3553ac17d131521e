"""The "All methods explained" tab: every method's five lecture parts and its `generate()` call side by side, from
the registry.

`lecture_html` is the same for one method (the "How it works" box beside the method picker). The call is the
registry's (`Method.generate_call`), the arguments the engine passes, shown as code in every language.
"""

from __future__ import annotations

import html

import gradio as gr

from ..i18n import t
from ..methods import METHODS, Method
from .language import L

LECTURE_PARTS = ("drafts", "verifies", "pays_off", "cost", "failure")
LECTURE_LABELS = {part: t(f"lecture.{part}") for part in LECTURE_PARTS}  # English; `lecture.<part>` per language


def lecture_html(method: Method, lang: str = "en") -> str:
    """One method's lecture as a definition list (pass the method `.localized(lang)` for its text in `lang`)."""
    items = "".join(
        f"<dt>{html.escape(t(f'lecture.{key}', lang) if key in LECTURE_PARTS else key)}</dt>"
        f"<dd>{html.escape(text)}</dd>"
        for key, text in method.lecture.items()
    )
    call = f"<dt>{html.escape(t('lecture.call', lang))}</dt><dd><code>{html.escape(method.generate_call())}</code></dd>"
    return f'<dl class="pg-lecture">{items}{call}</dl>'


def methods_table_html(lang: str = "en") -> str:
    """Every method's five lecture parts and its generate() call side by side, in `lang`."""
    head = (f"<tr><th>{html.escape(t('lecture.method', lang))}</th>"
            + "".join(f"<th>{html.escape(t(f'lecture.{part}', lang))}</th>" for part in (*LECTURE_PARTS, "call"))
            + "</tr>")
    rows = []
    for name, registered in METHODS.items():
        method = registered.localized(lang)
        cells = "".join(f"<td>{html.escape(method.lecture.get(key, '–'))}</td>" for key in LECTURE_LABELS)
        cells += f"<td><code>{html.escape(method.generate_call())}</code></td>"
        rows.append(f'<tr data-method="{html.escape(name)}"><th>{html.escape(method.title)}</th>{cells}</tr>')
    return f'<table class="pg-methods-table" data-testid="pg-methods-table">{head}{"".join(rows)}</table>'


def build_methods() -> gr.HTML:
    """The tab (call inside the page's `gr.Tabs`): a table, no events."""
    with gr.Tab(L("ui.tab.methods"), id="methods", elem_id="pg-tab-methods"):
        return gr.HTML(methods_table_html(), elem_id="pg-methods")
