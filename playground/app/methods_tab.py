"""The "All methods explained" tab: every method's five lecture parts, its `generate()` call and what the tests prove of
its output side by side, from the registry; then the lecture of each way of verifying that several methods offer
(static ensemble verification).

`lecture_html` is the same for one method (the "How it works" box beside the method picker). The call is the
registry's (`Method.generate_call`), the arguments the engine passes, shown as code in every language.
"""

from __future__ import annotations

import html

import gradio as gr

from ..i18n import list_of, t
from ..methods import METHODS, VERIFICATIONS, Method, Verification
from ..proofs import Proven
from .language import L

LECTURE_PARTS = ("drafts", "verifies", "pays_off", "cost", "failure")
LECTURE_LABELS = {part: t(f"lecture.{part}") for part in LECTURE_PARTS}  # English; `lecture.<part>` per language


def proven_html(method: Method, lang: str = "en") -> str:
    """What the tests prove of the method's output, greedy and sampling, each with the tests that prove it; and, where
    the method offers a way of verifying that gives up losslessness, that it does."""
    lines = [_proof_line(sentence, tests) for sentence, tests in method.proven.sentences(lang)]
    tab = t("ui.tab.methods", lang)
    lines += [html.escape(t(f"verification.{name}.in_method", lang, tab=tab))
              for name, verification in VERIFICATIONS.items() if verification.offered_in(method)]
    return "<br>".join(lines)


def _proof_line(sentence: str, tests: tuple[str, ...]) -> str:
    named = dict.fromkeys(test.split("[")[0] for test in tests)  # each test function once, its parameters aside
    return html.escape(sentence) + "".join(f" <code>{html.escape(test)}</code>" for test in named)


def _proven_parts(proven: Proven, lang: str) -> str:
    return "<br>".join(_proof_line(sentence, tests) for sentence, tests in proven.sentences(lang))


def lecture_html(method: Method, lang: str = "en") -> str:
    """One method's lecture as a definition list (pass the method `.localized(lang)` for its text in `lang`)."""
    items = "".join(
        f"<dt>{html.escape(t(f'lecture.{key}', lang) if key in LECTURE_PARTS else key)}</dt>"
        f"<dd>{html.escape(text)}</dd>"
        for key, text in method.lecture.items()
    )
    call = f"<dt>{html.escape(t('lecture.call', lang))}</dt><dd><code>{html.escape(method.generate_call())}</code></dd>"
    proven = f"<dt>{html.escape(t('method.proven.heading', lang))}</dt><dd>{proven_html(method, lang)}</dd>"
    return f'<dl class="pg-lecture">{items}{call}{proven}</dl>'


def verification_html(verification: Verification, lang: str = "en") -> str:
    """The lecture of a way of verifying (its parts, the methods that offer it, what is proven, the guide's call)."""
    local = verification.localized(lang)
    parts = [(t(f"verification.part.{part}", lang), html.escape(text)) for part, text in local.lecture.items()]
    parts.append((t("verification.part.methods", lang), html.escape(_offered_by(verification, lang))))
    parts.append((t("method.proven.heading", lang), _proven_parts(local.proven, lang)))
    first = verification.offered_by()[0]
    call = first.generate_call({verification.param.name: verification.guide_start}, sample=True)  # the guide's call
    parts.append((t("lecture.call", lang), f"<code>{html.escape(call)}</code>"))
    items = "".join(f"<dt>{html.escape(label)}</dt><dd>{body}</dd>" for label, body in parts)
    return (f'<section class="pg-verification" data-verification="{html.escape(verification.name)}">'
            f"<h3>{html.escape(local.title)}</h3><dl class=\"pg-lecture\">{items}</dl></section>")


def _offered_by(verification: Verification, lang: str) -> str:
    """Which methods offer it: always (their drafter returns probabilities), only when sampling, or not at all."""
    offered = verification.offered_by()
    groups = {
        "always": [m for m in offered if m.draft_logits == "always"],
        "sampling": [m for m in offered if m.draft_logits == "sampling"],
        "none": [m for m in METHODS.values() if m.drafts and m not in offered],
    }
    return " ".join(t(f"verification.methods.{group}", lang,
                      methods=list_of([m.localized(lang).title for m in methods], lang))
                    for group, methods in groups.items() if methods)


def methods_table_html(lang: str = "en") -> str:
    """Every method's five lecture parts, its generate() call and what is proven side by side, in `lang`; then the
    lecture of each way of verifying that several methods offer."""
    head = (f"<tr><th>{html.escape(t('lecture.method', lang))}</th>"
            + "".join(f"<th>{html.escape(t(f'lecture.{part}', lang))}</th>" for part in (*LECTURE_PARTS, "call"))
            + f"<th>{html.escape(t('method.proven.heading', lang))}</th></tr>")
    rows = []
    for name, registered in METHODS.items():
        method = registered.localized(lang)
        cells = "".join(f"<td>{html.escape(method.lecture.get(key, '–'))}</td>" for key in LECTURE_LABELS)
        cells += f"<td><code>{html.escape(method.generate_call())}</code></td><td>{proven_html(method, lang)}</td>"
        rows.append(f'<tr data-method="{html.escape(name)}"><th>{html.escape(method.title)}</th>{cells}</tr>')
    table = f'<table class="pg-methods-table" data-testid="pg-methods-table">{head}{"".join(rows)}</table>'
    return table + "".join(verification_html(verification, lang) for verification in VERIFICATIONS.values())


def build_methods() -> gr.HTML:
    """The tab (call inside the page's `gr.Tabs`): a table and the verification lectures, no events."""
    with gr.Tab(L("ui.tab.methods"), id="methods", elem_id="pg-tab-methods"):
        return gr.HTML(methods_table_html(), elem_id="pg-methods")
