"""Plotly figures for benchmark and Compare results, and the self-contained HTML report.

Every figure builder takes plain data (aggregate dicts from `bench.aggregate`, or a race timeline
from `bench.race_timeline`) and returns a `plotly.graph_objects.Figure`, so the HTML report and
the UI's Compare view draw the same charts.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

import plotly.graph_objects as go
import plotly.offline

from . import charts, theory

COLORS = ["#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692", "#b6e880"]
BASELINE_COLOR = "#7f7f7f"


def _overall(aggs: list[dict[str, Any]]) -> str:
    cats = {a["category"] for a in aggs}
    return "all" if "all" in cats else (next(iter(cats)) if cats else "all")


def _pick(aggs: list[dict[str, Any]], category: str | None) -> list[dict[str, Any]]:
    category = category or _overall(aggs)
    return [a for a in aggs if a["category"] == category]


def _methods(aggs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [a for a in aggs if a["method"] != "baseline"]


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _layout(fig: go.Figure, title: str, **kw: Any) -> go.Figure:
    fig.update_layout(title=title, template="plotly_white", height=380, margin=dict(l=60, r=20, t=70, b=60),
                      legend=dict(orientation="h", y=-0.2), **kw)
    # Value labels above the tallest bar would be clipped by the plot area; the top margin holds them.
    fig.update_traces(cliponaxis=False, selector=dict(type="bar"))
    return fig


def follow_the_page(fig: go.Figure) -> go.Figure:
    """Restyle a report figure for the UI, whose page may be light or dark: transparent backgrounds
    and the mid-grey text and grid of the run charts (`charts`), which read on both."""
    fig.update_layout(paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)", font_color=charts.TEXT,
                      title_font_color=charts.TEXT, legend_bgcolor="rgba(0,0,0,0)")
    fig.update_xaxes(gridcolor=charts.GRID, zerolinecolor=charts.GRID, linecolor=charts.GRID)
    fig.update_yaxes(gridcolor=charts.GRID, zerolinecolor=charts.GRID, linecolor=charts.GRID)
    return fig


def speedup_vs_theory_figure(aggs: list[dict[str, Any]], category: str | None = None) -> go.Figure:
    """Measured speedup next to Leviathan et al.'s prediction and the refined one, per method."""
    rows = _methods(_pick(aggs, category))
    labels = [a["label"] for a in rows]
    fig = go.Figure()
    for key, name, color in (("speedup", "measured", charts.RUNNING), ("refined_speedup", "refined prediction", "#00cc96"),
                             ("theoretical_speedup", "Leviathan et al.", "#ffa15a")):
        fig.add_bar(x=labels, y=[a.get(key) for a in rows], name=name, marker_color=color,
                    text=[("–" if a.get(key) is None else f"{a[key]:.2f}×") for a in rows], textposition="outside")
    fig.add_hline(y=1.0, line_dash="dash", line_color=BASELINE_COLOR, annotation_text="baseline")
    return _layout(fig, "Speedup over baseline: measured vs theory", barmode="group", yaxis_title="× baseline")


def speedup_by_category_figure(aggs: list[dict[str, Any]]) -> go.Figure:
    """Measured speedup per category, one bar per method."""
    cats = [c for c in dict.fromkeys(a["category"] for a in aggs) if c != "all"]
    fig = go.Figure()
    for i, label in enumerate(dict.fromkeys(a["label"] for a in _methods(aggs))):
        by_cat = {a["category"]: a for a in aggs if a["label"] == label}
        fig.add_bar(x=cats, y=[by_cat.get(c, {}).get("speedup") for c in cats], name=label, marker_color=_color(i))
    fig.add_hline(y=1.0, line_dash="dash", line_color=BASELINE_COLOR, annotation_text="baseline")
    return _layout(fig, "Measured speedup by category", barmode="group", yaxis_title="× baseline")


def throughput_figure(aggs: list[dict[str, Any]]) -> go.Figure:
    """Tokens per second per category, one bar per method (baseline included)."""
    cats = list(dict.fromkeys(a["category"] for a in aggs))
    fig = go.Figure()
    for i, label in enumerate(dict.fromkeys(a["label"] for a in aggs)):
        by_cat = {a["category"]: a for a in aggs if a["label"] == label}
        color = BASELINE_COLOR if label == "baseline" else _color(i)
        fig.add_bar(x=cats, y=[by_cat.get(c, {}).get("tokens_per_s") for c in cats], name=label, marker_color=color)
    return _layout(fig, "Throughput", barmode="group", yaxis_title="tokens / s")


def position_acceptance_figure(aggs: list[dict[str, Any]], category: str | None = None) -> go.Figure:
    """How often the k-th drafted token survives verification, per method: what decides the best draft length."""
    fig = go.Figure()
    for i, a in enumerate(_methods(_pick(aggs, category))):
        rates = a.get("position_acceptance") or []
        counts = a.get("position_counts") or []
        if not rates:
            continue
        fig.add_scatter(x=list(range(1, len(rates) + 1)), y=rates, mode="lines+markers", name=a["label"],
                        line_color=_color(i), customdata=counts,
                        hovertemplate="position %{x}: %{y:.0%} of the drafts that reached verification kept "
                                      "(%{customdata[1]} of %{customdata[0]})")
        judged = a.get("position_acceptance_judged") or []
        if judged:
            fig.add_scatter(x=list(range(1, len(judged) + 1)), y=judged, mode="lines+markers",
                            name=f"{a['label']} (given judged)", line=dict(color=_color(i), dash="dot"),
                            customdata=counts, hovertemplate="position %{x}: %{y:.0%} accepted of those judged, i.e. "
                                                             "every draft before it kept (%{customdata[1]} of "
                                                             "%{customdata[2]})")
    return _layout(fig, "Acceptance by position within the draft (solid: of drafts reaching verification; dotted: "
                   "of drafts judged)", xaxis_title="drafted token position",
                   yaxis_title="share accepted", yaxis_range=[0, 1.05], xaxis_dtick=1)


def step_cost_figure(aggs: list[dict[str, Any]], category: str | None = None) -> go.Figure:
    """Mean draft, verify and other time per step (stacked), tokens per step on top; baseline's step as reference."""
    rows = _pick(aggs, category)
    labels = [a["label"] for a in rows]
    fig = go.Figure()
    fig.add_bar(x=labels, y=[a.get("draft_ms_per_step") for a in rows], name="draft ms / step", marker_color="#ffa15a")
    fig.add_bar(x=labels, y=[a.get("verify_ms_per_step") for a in rows], name="verify ms / step",
                marker_color="#636efa")
    fig.add_bar(x=labels, y=[a.get("other_ms_per_step") or 0.0 for a in rows], name="other ms / step",
                marker_color="#9a9a9a",
                text=[("" if a.get("tokens_per_step") is None else f"τ={a['tokens_per_step']:.2f}") for a in rows],
                textposition="outside")
    base = [a for a in rows if a["method"] == "baseline"]
    if base and base[0].get("verify_ms_per_step"):
        # Named in the legend, not labelled on the line: a label there lands on the tallest bar.
        fig.add_hline(y=base[0]["verify_ms_per_step"] + (base[0].get("other_ms_per_step") or 0.0), line_dash="dash",
                      line_color=BASELINE_COLOR, showlegend=True, name="one baseline step")
    return _layout(fig, "Time per step: draft vs verify vs other (τ = tokens per step)", barmode="stack",
                   yaxis_title="ms per step")


def race_figure(timeline: dict[str, Any]) -> go.Figure:
    """Tokens emitted over time for each lane of a race (static; the UI animates the same data)."""
    fig = go.Figure()
    for i, lane in enumerate(timeline["lanes"]):
        pts = lane["points"]
        fig.add_scatter(x=[p["t_ms"] / 1000 for p in pts], y=[p["tokens"] for p in pts], mode="lines",
                        line_shape="hv", name=lane["label"],
                        line_color=BASELINE_COLOR if lane["method"] == "baseline" else _color(i),
                        text=[p["text"] for p in pts], hovertemplate="%{x:.2f} s: %{y} tokens<br>%{text}")
    return _layout(fig, "Race: tokens emitted over time (sum of step times)", xaxis_title="seconds",
                   yaxis_title="tokens emitted")


def figures(aggs: list[dict[str, Any]]) -> dict[str, go.Figure]:
    """The standard set of charts for a benchmark or a Compare result."""
    figs = {
        "speedup_vs_theory": speedup_vs_theory_figure(aggs),
        "throughput": throughput_figure(aggs),
        "position_acceptance": position_acceptance_figure(aggs),
        "step_cost": step_cost_figure(aggs),
    }
    if len({a["category"] for a in aggs if a["category"] != "all"}) > 1:
        figs["speedup_by_category"] = speedup_by_category_figure(aggs)
    return figs


# --- the HTML report ------------------------------------------------------------------------------

def _f(x: Any, fmt: str = ".2f", suffix: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return format(x, fmt) + suffix


def _e(text: Any) -> str:
    return html.escape(str(text))


def _lbl(label: Any) -> str:
    """A method label that may wrap after its opening parenthesis and commas."""
    return _e(label).replace("(", "(<wbr>").replace(",", ",<wbr>")


def _table(headers: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


_CSS = """
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


def render_report(result: Any) -> str:
    """The self-contained HTML report (plotly.js inlined) for a `bench.BenchResult`."""
    meta, aggs, rows = result.meta, result.aggregates, result.rows
    env = meta.get("env", {})
    overall = _pick(aggs, None)
    overhead = result.overhead()
    parts: list[str] = []
    parts.append(f"<h1>Assisted decoding benchmark: {_e(meta.get('target'))}</h1>")
    parts.append(
        f"<p class='small'>{_e(meta.get('created'))} · {_e(meta.get('prompts'))} prompts "
        f"({_e(', '.join(meta.get('categories', [])))}) · {_e(meta.get('repeats'))} repeats · "
        f"max {_e(meta.get('max_new_tokens'))} new tokens · {_e(env.get('dtype'))} ({_e(env.get('precision', ''))}) · "
        f"{_e(env.get('device'))}, {_e(env.get('threads'))} threads · torch {_e(env.get('torch'))}, transformers "
        f"{_e(env.get('transformers'))} · chat template: {_e(env.get('chat'))} · wall {_e(meta.get('wall_s'))} s</p>")
    if meta.get("command"):
        parts.append(f"<pre>{_e(meta['command'])}</pre>")
    parts.append("<p class='small'>Timings come from the machine as it was during the run: on CPU cores shared with "
                 "other work they are noisy. One warm-up, interleaved runs and medians over repeats reduce that noise "
                 "but do not remove it; compare methods within one report, not across reports.</p>")

    # verdict
    methods = _methods(overall)
    verdict: list[str] = []
    winners = [a for a in methods if (a.get("speedup") or 0) >= 1.05]
    if not methods:
        verdict.append("Only baseline ran.")
    elif not winners:
        verdict.append("<b>No drafting method was faster than baseline here.</b> That is common for small models on a "
                       "few CPU cores: the target's own step is already cheap, so drafting and wide verification "
                       "forwards eat the gain. The tables below show why, method by method.")
    else:
        best = max(winners, key=lambda a: a["speedup"])
        verdict.append(f"<b>Fastest: {_e(best['label'])}, {best['speedup']:.2f}× baseline</b> over all prompts.")
    for a in methods:
        text = " ".join(x for x in (theory.cost_sentence(a), a.get("explanation")) if x)
        if text:
            verdict.append(f"<b>{_e(a['label'])}</b>: {_e(text)}")
    errors = result.errors
    if errors:
        verdict.append(f"<span class='bad'>{len(errors)} error(s): see “Lossless check” and “Per prompt”.</span>")
    parts.append("<h2>Verdict</h2><div class='verdict'>" + "<br><br>".join(verdict) + "</div>")

    # summary table
    headers = ["method", "category", "prompts", "speedup", "tokens/s", "α (acceptance)", "τ (tokens/step)",
               "draft ms/step", "verify ms/step", "Leviathan", "refined", "overhead", "lossless"]
    body = []
    for a in aggs:
        loss = "–" if a["method"] == "baseline" else (
            "<span class='ok'>ok</span>" if not a.get("lossless_mismatches") else
            f"<span class='{'bad' if a.get('lossless_errors') else 'warn'}'>{_e(a['lossless_mismatches'])} differ</span>")
        body.append([_lbl(a["label"]), _e(a["category"]), _e(a["prompts"]), _f(a.get("speedup"), ".2f", "×"),
                     _f(a.get("tokens_per_s"), ".1f"), _f(a.get("acceptance_rate"), ".0%"),
                     _f(a.get("tokens_per_step")), _f(a.get("draft_ms_per_step"), ".0f"),
                     _f(a.get("verify_ms_per_step"), ".0f"), _f(a.get("theoretical_speedup"), ".2f", "×"),
                     _f(a.get("refined_speedup"), ".2f", "×"), _f(a.get("overhead"), ".3f"), loss])
    parts.append("<h2>Results per method and category</h2>" + _table(headers, body))
    parts.append("<p class='small'>Speedup: tokens/s of the method over tokens/s of baseline on the same prompts "
                 "(Σ tokens / Σ median time), which is the wall-time ratio when outputs are equal. τ includes the "
                 "target's own token each step. Overhead: instrumented / plain <code>generate()</code> time, same "
                 "arguments (median).</p>")

    # charts
    figs = figures(aggs)
    captions = {
        "speedup_vs_theory": "Measured speedup beside Leviathan et al.'s prediction and the refined prediction.",
        "speedup_by_category": "Measured speedup per category.",
        "throughput": "Tokens per second.",
        "position_acceptance": "Share of k-th drafted tokens that survive verification. Where it drops, further draft "
                               "positions mostly waste verification work: the best draft length is about where the "
                               "curve falls below the cost of verifying one more position.",
        "step_cost": "Mean time per verification step, split into drafting and verifying, against one baseline step. "
                     "A method pays off when τ tokens per step outweigh the step's cost in baseline steps.",
    }
    parts.append("<h2>Charts</h2>")
    for name, fig in figs.items():
        parts.append(f"<div class='chart'>{fig.to_html(full_html=False, include_plotlyjs=False)}"
                     f"<p class='small'>{_e(captions.get(name, ''))}</p></div>")

    # race on the first prompt for each method
    races = []
    from .bench import race_timeline

    for key, by_label in list(result.traces.items())[:1]:
        base = by_label.get("baseline")
        for label, trace in by_label.items():
            if label != "baseline" and base is not None:
                tl = race_timeline(base, trace)
                fig = race_figure(tl)
                fig.update_layout(title=f"Race on {key}: baseline vs {label}")
                races.append(fig.to_html(full_html=False, include_plotlyjs=False))
    if races:
        parts.append("<h2>Race (first prompt)</h2><p class='small'>Cumulative tokens over the sum of recorded step "
                     "times (draft + verify), as the UI's race replay plays them back.</p>" + "".join(races))

    # theory
    theory_rows = []
    for a in methods:
        theory_rows.append([_lbl(a["label"]), _f(a.get("acceptance_rate"), ".3f"), _f(a.get("gamma"), ".2f"),
                            _f(a.get("c"), ".4f"), _f(a.get("verify_cost"), ".2f"),
                            _f(a.get("empty_draft_fraction"), ".0%"), _f(a.get("prefill_share"), ".0%"),
                            _f(a.get("expected_tokens_per_step")), _f(a.get("tokens_per_step")),
                            _f(a.get("theoretical_speedup"), ".2f", "×"), _f(a.get("with_verify_cost"), ".2f", "×"),
                            _f(a.get("with_empty_steps"), ".2f", "×"), _f(a.get("refined_speedup"), ".2f", "×"),
                            _f(a.get("speedup"), ".2f", "×")])
    parts.append("<h2>Theory beside measurement</h2>")
    parts.append(_table(["method", "α", "γ", "c", "v", "e (empty steps)", "f (prefill share)", "E(α,γ) expected τ",
                         "τ measured", "Leviathan", "+ verify cost", "+ empty steps", "+ prefill = refined",
                         "measured"], theory_rows))
    parts.append(f"<pre>{_e(theory.THEORY_NOTES.strip())}</pre>")

    # lossless
    mism = [r for r in rows if r.get("lossless_ok") is False]
    parts.append("<h2>Lossless check</h2>")
    parts.append("<p>Greedy drafting is lossless in exact arithmetic: every method must reproduce baseline's tokens. "
                 "In float32 a difference is an error. In bfloat16 a batched verification forward rounds differently "
                 "from one-token steps, so where the target's two best tokens nearly tie the choice can flip; the "
                 "margin below is the target's probability of baseline's token minus that of the method's token at "
                 "the first divergence (from one forward pass over the shared prefix). A margin of 0.0000 is an exact "
                 "tie: bfloat16 keeps 8 significant bits, so the two best tokens can get the very same probability, "
                 "and which one wins then depends on the last-bit differences between a batched verification forward "
                 "and a one-token step. Once the outputs differ, the rest of both texts differ too, so the speedup of "
                 "such a row compares slightly different texts.</p>")
    if mism:
        parts.append(_table(["method", "prompt", "severity", "first divergent index", "baseline token",
                             "method token", "p(baseline token)", "p(method token)", "margin"],
                            [[_lbl(r["label"]), _e(f"{r['category']}/{r['question_id']}"),
                              f"<span class='{'bad' if r.get('lossless_severity') == 'error' else 'warn'}'>"
                              f"{_e(r.get('lossless_severity'))}</span>", _f(r.get("first_divergence"), "d"),
                              _e(repr((r.get("divergence") or {}).get("baseline_text", ""))),
                              _e(repr((r.get("divergence") or {}).get("method_text", ""))),
                              _f((r.get("divergence") or {}).get("p_baseline"), ".4f"),
                              _f((r.get("divergence") or {}).get("p_method"), ".4f"),
                              _f(r.get("divergence_margin"), ".4f")] for r in mism]))
        if any(r.get("lossless_severity") == "error" for r in mism):
            parts.append("<p class='bad'>A float32 difference is a bug (in Transformers' loop or in how it was "
                         "called): please report it with the traces in traces/.</p>")
    else:
        parts.append("<p class='ok'>Every lossless method reproduced baseline's output on every prompt.</p>")

    # overhead
    parts.append("<h2>Instrumentation overhead</h2>")
    if overhead["median_ratio"] is not None:
        per = ", ".join(f"{_e(k)} {v:.3f}" for k, v in overhead["per_method"].items())
        parts.append(f"<p>Median ratio instrumented / plain <code>generate()</code> (same arguments, interleaved): "
                     f"<b>{overhead['median_ratio']:.3f}</b> over {_e(overhead['runs'])} pairs of runs ({per}). "
                     "The quality bar is ≤ 1.03; on shared cores single pairs scatter by several percent either way.</p>")
    else:
        parts.append("<p>Not measured (--no-overhead).</p>")

    # per prompt
    headers = ["method", "prompt", "tokens", "steps", "α", "τ", "tok/s", "speedup", "draft ms", "verify ms",
               "Leviathan", "refined", "overhead", "lossless", "error"]
    prow = []
    for r in rows:
        prow.append([_lbl(r["label"]), _e(f"{r['category']}/{r['question_id']}"), _f(r.get("new_tokens"), "d"),
                     _f(r.get("steps"), "d"), _f(r.get("acceptance_rate"), ".0%"), _f(r.get("tokens_per_step")),
                     _f(r.get("tokens_per_s"), ".1f"), _f(r.get("speedup"), ".2f", "×"), _f(r.get("draft_ms"), ".0f"),
                     _f(r.get("verify_ms"), ".0f"), _f(r.get("theoretical_speedup"), ".2f", "×"),
                     _f(r.get("refined_speedup"), ".2f", "×"), _f(r.get("overhead"), ".3f"),
                     _e({True: "ok", False: r.get("lossless_severity", "differs"), None: "n/a"}[r.get("lossless_ok")]),
                     _e(r.get("error") or "")])
    parts.append("<h2>Per prompt</h2>" + _table(headers, prow))

    # diagnoses
    diag = []
    for key, by_label in result.diagnoses.items():
        for label, sentences in by_label.items():
            if label != "baseline":
                diag.append(f"<p><b>{_e(key)} · {_e(label)}</b>: {_e(' '.join(sentences))}</p>")
    if diag:
        parts.append("<h2>Diagnosis per prompt</h2>" + "".join(diag))

    js = plotly.offline.get_plotlyjs()
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>Assisted decoding benchmark</title>"
            f"<style>{_CSS}</style><script type='text/javascript'>{js}</script></head><body>"
            + "\n".join(parts) + "</body></html>")


def compare_figures(result: Any) -> dict[str, go.Figure]:
    """Charts for a `bench.CompareResult` (one prompt), for the UI's Compare view (light or dark)."""
    return {name: follow_the_page(fig) for name, fig in figures(result.aggregates).items()}


def figure_json(fig: go.Figure) -> str:
    return json.dumps(fig.to_plotly_json(), default=str)
