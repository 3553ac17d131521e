"""The benchmark's self-contained HTML report (plotly.js inlined): verdict, tables, charts, race, theory,
lossless check, overhead, per prompt."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import theory
from ..methods import REFERENCE
from ..report_html import escape as _e
from ..report_html import figure_html, fmt, page, table
from ..timeline import race_timeline
from .aggregation import Aggregate, in_category
from .figures import figures, race_figure
from .rows import BenchRow

if TYPE_CHECKING:
    from .measure import BenchResult

CAPTIONS = {
    "speedup_vs_theory": "Measured speedup beside Leviathan et al.'s prediction and the refined prediction.",
    "speedup_by_category": "Measured speedup per category.",
    "throughput": "Tokens per second.",
    "position_acceptance": "Share of k-th drafted tokens that survive verification. Where it drops, further draft "
                           "positions mostly waste verification work: the best draft length is about where the "
                           "curve falls below the cost of verifying one more position.",
    "step_cost": "Mean time per verification step, split into drafting and verifying, against one baseline step. "
                 "A method pays off when τ tokens per step outweigh the step's cost in baseline steps.",
}


def _lbl(label: str) -> str:
    """A method label that may wrap after its opening parenthesis and commas."""
    return _e(label).replace("(", "(<wbr>").replace(",", ",<wbr>")


def _verdict(methods: list[Aggregate], errors: list[BenchRow]) -> str:
    verdict: list[str] = []
    winners = [a for a in methods if (a.speedup or 0) >= 1.05]
    if not methods:
        verdict.append("Only baseline ran.")
    elif not winners:
        verdict.append("<b>No drafting method was faster than baseline here.</b> That is common for small models on a "
                       "few CPU cores: the target's own step is already cheap, so drafting and wide verification "
                       "forwards eat the gain. The tables below show why, method by method.")
    else:
        best = max(winners, key=lambda a: a.speedup or 0.0)
        verdict.append(f"<b>Fastest: {_e(best.label)}, {best.speedup:.2f}× baseline</b> over all prompts.")
    for a in methods:
        text = " ".join(x for x in (theory.cost_sentence(a.to_dict()), a.explanation) if x)
        if text:
            verdict.append(f"<b>{_e(a.label)}</b>: {_e(text)}")
    if errors:
        verdict.append(f"<span class='bad'>{len(errors)} error(s): see “Lossless check” and “Per prompt”.</span>")
    return "<h2>Verdict</h2><div class='verdict'>" + "<br><br>".join(verdict) + "</div>"


def _summary_table(aggs: list[Aggregate]) -> str:
    headers = ["method", "category", "prompts", "speedup", "tokens/s", "α (accepted / judged)", "τ (tokens/step)",
               "draft ms/step", "verify ms/step", "Leviathan", "refined", "overhead", "lossless"]
    body = []
    for a in aggs:
        loss = "–" if a.is_baseline else (
            "<span class='ok'>ok</span>" if not a.lossless_mismatches else
            f"<span class='{'bad' if a.lossless_errors else 'warn'}'>{_e(a.lossless_mismatches)} differ</span>")
        body.append([_lbl(a.label), _e(a.category), _e(a.prompts), fmt(a.speedup, ".2f", "×"),
                     fmt(a.tokens_per_s, ".1f"), fmt(a.alpha, ".0%"),
                     fmt(a.tokens_per_step), fmt(a.draft_ms_per_step, ".0f"),
                     fmt(a.verify_ms_per_step, ".0f"), fmt(a.theoretical_speedup, ".2f", "×"),
                     fmt(a.refined_speedup, ".2f", "×"), fmt(a.overhead, ".3f"), loss])
    return "<h2>Results per method and category</h2>" + table(headers, body)


def _races(result: "BenchResult") -> str:
    """Baseline against each method on the first prompt."""
    races = []
    for key, by_label in list(result.traces.items())[:1]:
        base = by_label.get(REFERENCE)
        for label, trace in by_label.items():
            if label != REFERENCE and base is not None:
                fig = race_figure(race_timeline(base, trace))
                fig.update_layout(title=f"Race on {key}: baseline vs {label}")
                races.append(figure_html(fig))
    if not races:
        return ""
    return ("<h2>Race (first prompt)</h2><p class='small'>Cumulative tokens over the sum of recorded step "
            "times (draft + verify), as the UI's race replay plays them back.</p>" + "".join(races))


def _theory_table(methods: list[Aggregate]) -> str:
    rows = [[_lbl(a.label), fmt(a.alpha, ".3f"), fmt(a.gamma, ".2f"), fmt(a.c, ".4f"),
             fmt(a.verify_cost, ".2f"), fmt(a.empty_draft_fraction, ".0%"), fmt(a.prefill_share, ".0%"),
             fmt(a.expected_tokens_per_step), fmt(a.tokens_per_step), fmt(a.theoretical_speedup, ".2f", "×"),
             fmt(a.with_verify_cost, ".2f", "×"), fmt(a.with_empty_steps, ".2f", "×"),
             fmt(a.refined_speedup, ".2f", "×"), fmt(a.speedup, ".2f", "×")] for a in methods]
    return ("<h2>Theory beside measurement</h2>"
            + table(["method", "α", "γ", "c", "v", "e (empty steps)", "f (prefill share)", "E(α,γ) expected τ",
                     "τ measured", "Leviathan", "+ verify cost", "+ empty steps", "+ prefill = refined", "measured"],
                    rows)
            + f"<pre>{_e(theory.THEORY_NOTES.strip())}</pre>")


def _severity_class(row: BenchRow) -> str:
    return "bad" if row.lossless_severity == "error" else "warn"


def _lossless_section(rows: list[BenchRow]) -> str:
    parts = ["<h2>Lossless check</h2>",
             "<p>Greedy drafting is lossless in exact arithmetic: every method must reproduce baseline's tokens. "
             "In float32 a difference is an error. In bfloat16 a batched verification forward rounds differently "
             "from one-token steps, so where the target's two best tokens nearly tie the choice can flip; the "
             "margin below is the target's probability of baseline's token minus that of the method's token at "
             "the first divergence (from one forward pass over the shared prefix). A margin of 0.0000 is an exact "
             "tie: bfloat16 keeps 8 significant bits, so the two best tokens can get the very same probability, "
             "and which one wins then depends on the last-bit differences between a batched verification forward "
             "and a one-token step. Once the outputs differ, the rest of both texts differ too, so the speedup of "
             "such a row compares slightly different texts.</p>"]
    mism = [r for r in rows if r.lossless_ok is False]
    if not mism:
        parts.append("<p class='ok'>Every lossless method reproduced baseline's output on every prompt.</p>")
        return "".join(parts)
    body = []
    for r in mism:
        d = r.divergence
        body.append([_lbl(r.label), _e(f"{r.category}/{r.question_id}"),
                     f"<span class='{_severity_class(r)}'>{_e(r.lossless_severity)}</span>",
                     fmt(r.first_divergence, "d"), _e(repr(d.baseline_text if d else "")),
                     _e(repr(d.method_text if d else "")), fmt(d.p_baseline if d else None, ".4f"),
                     fmt(d.p_method if d else None, ".4f"), fmt(r.divergence_margin, ".4f")])
    parts.append(table(["method", "prompt", "severity", "first divergent index", "baseline token", "method token",
                        "p(baseline token)", "p(method token)", "margin"], body))
    if any(r.lossless_severity == "error" for r in mism):
        parts.append("<p class='bad'>A float32 difference is a bug (in Transformers' loop or in how it was "
                     "called): please report it with the traces in traces/.</p>")
    return "".join(parts)


def _overhead_section(result: "BenchResult") -> str:
    overhead = result.overhead()
    if overhead["median_ratio"] is None:
        return "<h2>Instrumentation overhead</h2><p>Not measured (--no-overhead).</p>"
    per = ", ".join(f"{_e(k)} {v:.3f}" for k, v in overhead["per_method"].items())
    return ("<h2>Instrumentation overhead</h2>"
            f"<p>Median ratio instrumented / plain <code>generate()</code> (same arguments, interleaved): "
            f"<b>{overhead['median_ratio']:.3f}</b> over {_e(overhead['runs'])} pairs of runs ({per}). "
            "The quality bar is ≤ 1.03; on shared cores single pairs scatter by several percent either way.</p>")


def _lossless_cell(row: BenchRow) -> str:
    if row.lossless_ok is None:
        return "n/a"
    return "ok" if row.lossless_ok else (row.lossless_severity or "differs")


def _per_prompt_table(rows: list[BenchRow]) -> str:
    headers = ["method", "prompt", "tokens", "steps", "kept (accepted / drafted)", "τ", "tok/s", "speedup",
               "draft ms", "verify ms", "Leviathan", "refined", "overhead", "lossless", "error"]
    body = [[_lbl(r.label), _e(f"{r.category}/{r.question_id}"), fmt(r.new_tokens, "d"), fmt(r.steps, "d"),
             fmt(r.acceptance_rate, ".0%"), fmt(r.tokens_per_step), fmt(r.tokens_per_s, ".1f"),
             fmt(r.speedup, ".2f", "×"), fmt(r.draft_ms, ".0f"), fmt(r.verify_ms, ".0f"),
             fmt(r.theoretical_speedup, ".2f", "×"), fmt(r.refined_speedup, ".2f", "×"), fmt(r.overhead, ".3f"),
             _e(_lossless_cell(r)), _e(r.error or "")] for r in rows]
    return "<h2>Per prompt</h2>" + table(headers, body)


def render_report(result: "BenchResult") -> str:
    """The self-contained HTML report (plotly.js inlined) for a `BenchResult`."""
    meta, aggs, rows = result.meta, result.aggregates, result.rows
    env = meta.get("env", {})
    methods = [a for a in in_category(aggs) if not a.is_baseline]
    parts: list[str] = [
        f"<h1>Assisted decoding benchmark: {_e(meta.get('target'))}</h1>",
        f"<p class='small'>{_e(meta.get('created'))} · {_e(meta.get('prompts'))} prompts "
        f"({_e(', '.join(meta.get('categories', [])))}) · {_e(meta.get('repeats'))} repeats · "
        f"max {_e(meta.get('max_new_tokens'))} new tokens · {_e(env.get('dtype'))} ({_e(env.get('precision', ''))}) · "
        f"{_e(env.get('device'))}, {_e(env.get('threads'))} threads · torch {_e(env.get('torch'))}, transformers "
        f"{_e(env.get('transformers'))} · chat template: {_e(env.get('chat'))} · wall {_e(meta.get('wall_s'))} s</p>",
    ]
    if meta.get("command"):
        parts.append(f"<pre>{_e(meta['command'])}</pre>")
    parts.append("<p class='small'>Timings come from the machine as it was during the run: on CPU cores shared with "
                 "other work they are noisy. One warm-up, interleaved runs and medians over repeats reduce that noise "
                 "but do not remove it; compare methods within one report, not across reports.</p>")
    parts.append(_verdict(methods, result.errors))
    parts.append(_summary_table(aggs))
    parts.append("<p class='small'>Speedup: tokens/s of the method over tokens/s of baseline on the same prompts "
                 "(Σ tokens / Σ median time), which is the wall-time ratio when outputs are equal. τ includes the "
                 "target's own token each step. Overhead: instrumented / plain <code>generate()</code> time, same "
                 "arguments (median).</p>")
    parts.append("<h2>Charts</h2>")
    for name, fig in figures(aggs).items():
        parts.append(f"<div class='chart'>{figure_html(fig)}<p class='small'>{_e(CAPTIONS.get(name, ''))}</p></div>")
    races = _races(result)
    if races:
        parts.append(races)
    parts.append(_theory_table(methods))
    parts.append(_lossless_section(rows))
    parts.append(_overhead_section(result))
    parts.append(_per_prompt_table(rows))
    diag = [f"<p><b>{_e(key)} · {_e(label)}</b>: {_e(' '.join(sentences))}</p>"
            for key, by_label in result.diagnoses.items() for label, sentences in by_label.items() if label != REFERENCE]
    if diag:
        parts.append("<h2>Diagnosis per prompt</h2>" + "".join(diag))
    return page("Assisted decoding benchmark", "\n".join(parts))
