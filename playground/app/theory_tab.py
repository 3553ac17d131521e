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
from ..trace import Trace

MAX_BASELINES = 8  # baseline traces remembered per session (for diagnoses of later runs)


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
    if trace is not None and trace.method == "baseline" and trace.steps:
        out = [b for b in out if not _same_run_settings(b, trace)] + [trace]
    return out[-MAX_BASELINES:]


# --------------------------------------------------------------------------- theory

THEORY_TEXT = """
**Why tokens per step follow these curves.** In one verification step the target checks γ drafted tokens
with a single forward pass. If each drafted token survives with probability α, independently, the step keeps
the accepted prefix plus one token of the target's own (the correction after a rejection, or the bonus after a
fully accepted draft): on average 1 + α + α² + … + α^γ = (1 − α^(γ+1)) / (1 − α) tokens (Leviathan et al., 2023).
Only the first refused draft is *rejected*; the drafts after it are *discarded* without being judged, since the
target's view of them rests on a refused prefix.
A longer draft only helps while α is high: the k-th draft token adds α^k, so at α = 50 % anything past γ ≈ 3 adds
almost nothing. Tokens per step are not yet a speedup: a step also costs γ·c for drafting (c = one draft token's
cost in baseline steps), the wide verification forward (v), which on a GPU costs about one baseline step but on a
CPU often several, and the rest of the loop (o: strategy update, stopping checks). Speedup ≈ tokens per step /
(γ·c + v + o), with the set-up and the first step (prefill) not sped up. The trace times every step as draft,
verify and other, and the set-up before the first step: together they are the run's elapsed time.
The red diamond is this run's measured point (α, τ); the hollow circle is what the formula expects from its α and
mean γ. A diamond above the circle means early draft positions were accepted more often than later ones.
"""


def theory_view(trace: Trace | None, baseline: Trace | None = None) -> tuple[Any, str]:
    """(E(α, γ) figure with the run's measured point, HTML: figures in words and `theory.diagnose`)."""
    if trace is None:
        return charts.theory_figure(), render.status_html("Run a method to see where it lands on these curves.", "idle")
    est = theory.estimate(trace, baseline)
    fig = charts.theory_figure(est.alpha, est.tau, est.gamma, est.expected_tau, label=trace.method)
    sentences = theory.diagnose(trace, baseline)
    facts = []
    if est.alpha is not None:
        facts.append(f"α = {est.alpha:.0%} ({est.accepted} of {est.drafted} drafted tokens kept)")
    if est.gamma is not None:
        facts.append(f"mean draft γ = {est.gamma:.1f}")
    if est.tau is not None:
        facts.append(f"measured τ = {est.tau:.2f} tokens per step")
    if est.expected_tau is not None:
        facts.append(f"expected from α, γ: {est.expected_tau:.2f}")
    summary = trace.summary
    if summary.elapsed_s > 0:
        shares = [(summary.draft_ms, "draft"), (summary.verify_ms, "verify"), (summary.other_ms, "other"),
                  (summary.setup_ms, "set-up")]
        facts.append("time: " + ", ".join(f"{name} {ms / (summary.elapsed_s * 1000):.0%}" for ms, name in shares))
    source = ("Compared with a baseline run of this session on the same prompt and settings."
              if baseline is not None else "")
    items = "".join(f"<li>{html.escape(s)}</li>" for s in sentences)
    body = (f'<div class="pg-theory" data-testid="pg-diagnosis" data-baseline="{str(baseline is not None).lower()}">'
            f'<p><b>{html.escape(trace.method)}</b> · {html.escape(" · ".join(facts))}</p>'
            f'<ul class="pg-diagnosis">{items}</ul>'
            + (f'<p class="pg-note">{html.escape(source)}</p>' if source else "") + "</div>")
    return fig, body


@dataclass
class TheoryTab:
    """The views a run fills: the curves with its point, and its diagnosis."""

    plot: gr.Plot
    diagnosis: gr.HTML


def build_theory() -> TheoryTab:
    """The tab (call inside the page's `gr.Tabs`); filled after each run by the page."""
    with gr.Tab("Theory", id="theory", elem_id="pg-tab-theory"):
        with gr.Row():
            with gr.Column(scale=3):
                theory_plot = gr.Plot(charts.theory_figure(), show_label=False, elem_id="pg-theory-chart")
            with gr.Column(scale=2):
                gr.Markdown(THEORY_TEXT, elem_id="pg-theory-text")
        diagnosis = gr.HTML(theory_view(None)[1], elem_id="pg-diagnosis-box")
    return TheoryTab(plot=theory_plot, diagnosis=diagnosis)
