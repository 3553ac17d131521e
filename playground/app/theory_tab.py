"""The "Theory" tab: the E(α, γ) curves with the last run's measured point, and `theory.diagnose` in sentences.

A run's diagnosis compares it with a baseline of this session on the same prompt and settings, when there is one
(`find_baseline` among those `remember_baseline` kept: from the main view or from Compare).
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any, Sequence

import gradio as gr

from .. import charts, render, theory
from ..errors import shorten
from ..i18n import joined, number, t
from ..methods import METHODS, is_reference
from ..trace import Trace
from .language import L
from .outputs import Outputs

MAX_BASELINES = 8  # baseline traces remembered per session (for diagnoses of later runs)
THEORY = Outputs("plot", "diagnosis")  # what `theory_view` fills


def _same_run_settings(a: Trace, b: Trace) -> bool:
    keys = ("sample", "max_new_tokens", "temperature", "top_p", "top_k", "seed")
    return (a.prompt == b.prompt and a.target == b.target and a.chat == b.chat
            and a.env.get("dtype") == b.env.get("dtype")
            and all(a.decoding.get(k) == b.decoding.get(k) for k in keys))


def find_baseline(trace: Trace, baselines: Sequence[Trace] | None) -> Trace | None:
    """The most recent baseline of this session run on the same prompt and settings as `trace`."""
    for b in reversed(list(baselines or [])):
        if b is not trace and _same_run_settings(trace, b):
            return b
    return None


def remember_baseline(baselines: Sequence[Trace] | None, trace: Trace | None) -> list[Trace]:
    out = list(baselines or [])
    if trace is not None and is_reference(trace.method) and trace.steps:
        out = [b for b in out if not _same_run_settings(b, trace)] + [trace]
    return out[-MAX_BASELINES:]


# --------------------------------------------------------------------------- theory



def _method_title(name: str, lang: str) -> str:
    """The diagnosis heading: the method's title in the page's language (a trace's unknown method: its name)."""
    method = METHODS.get(name)
    return method.localized(lang).title if method is not None else name


def theory_view(trace: Trace | None, baseline: Trace | None = None, lang: str = "en") -> tuple[Any, ...]:
    """`THEORY`: the E(α, γ) figure with the run's measured point, and HTML (figures in words and
    `theory.diagnose`), in `lang`."""
    if trace is None:
        return THEORY(plot=charts.theory_figure(lang=lang), diagnosis=render.status_html(t("theory.empty", lang), "idle"))
    est = theory.estimate(trace, baseline)
    fig = charts.theory_figure(est.alpha, est.tau, est.gamma, est.expected_tau, label=trace.method, lang=lang)
    sentences = theory.diagnose(trace, baseline, lang)
    facts = []
    if est.alpha is not None:
        facts.append(t("theory.fact.alpha", lang, alpha=number(est.alpha, lang, ".0%"), accepted=est.accepted,
                       judged=est.judged))
    if est.gamma is not None:
        facts.append(t("theory.fact.gamma", lang, gamma=number(est.gamma, lang, ".1f")))
    if est.tau is not None:
        facts.append(t("theory.fact.tau", lang, tau=number(est.tau, lang)))
    if est.expected_tau is not None:
        facts.append(t("theory.fact.expected", lang, tau=number(est.expected_tau, lang)))
    summary = trace.summary
    if summary.elapsed_s > 0:
        shares = [(summary.draft_ms, "draft"), (summary.verify_ms, "verify"), (summary.other_ms, "other"),
                  (summary.setup_ms, "setup")]
        facts.append(t("theory.fact.time", lang) + joined(
            [f"{t(f'theory.phase.{name}', lang)} {number(ms / (summary.elapsed_s * 1000), lang, '.0%')}"
             for ms, name in shares], lang))
    source = t("theory.same_settings", lang) if baseline is not None else ""
    items = "".join(f"<li>{html.escape(s)}</li>" for s in sentences)
    body = (f'<div class="pg-theory" data-testid="pg-diagnosis" data-baseline="{str(baseline is not None).lower()}">'
            f'<p><b>{html.escape(shorten(_method_title(trace.method, lang)))}</b> · {html.escape(" · ".join(facts))}</p>'
            f'<ul class="pg-diagnosis">{items}</ul>'
            + (f'<p class="pg-note">{html.escape(source)}</p>' if source else "") + "</div>")
    return THEORY(plot=fig, diagnosis=body)


@dataclass
class TheoryTab:
    """The views a run fills: the curves with its point, and its diagnosis."""

    plot: gr.Plot
    diagnosis: gr.HTML

    @property
    def views(self) -> dict[str, Any]:
        """The components of `THEORY`, by name."""
        return dict(plot=self.plot, diagnosis=self.diagnosis)


def build_theory() -> TheoryTab:
    """The tab (call inside the page's `gr.Tabs`); filled after each run by the page."""
    with gr.Tab(L("ui.tab.theory"), id="theory", elem_id="pg-tab-theory"):
        with gr.Row():
            with gr.Column(scale=3):
                theory_plot = gr.Plot(charts.theory_figure(), show_label=False, elem_id="pg-theory-chart")
            with gr.Column(scale=2):
                gr.Markdown(L("ui.theory.text"), elem_id="pg-theory-text")
        diagnosis = gr.HTML(THEORY.read(theory_view(None))["diagnosis"], elem_id="pg-diagnosis-box")
    return TheoryTab(plot=theory_plot, diagnosis=diagnosis)
