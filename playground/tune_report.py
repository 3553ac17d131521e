"""Tables, charts and the self-contained HTML report of a tune (from its plain JSON form; no torch here).

Every builder takes the dict `tune.TuneResult.to_dict()` writes to tune.json, so the report, the CLI and
the page's Tune view draw the same things. The page passes its visitor's `lang`; the CLI and the report are
English (the default).
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from .i18n import DEFAULT_LANGUAGE, localize, normalize, number, separators, t, tn
from .methods import get_method
from .report_html import color, escape, figure_html, fmt, page, style_figure, table
from .tune.settings import replay_of

# A sweep varies the method's draft length (`Method.draft_length_param`) on the x axis; its other knobs name a series.
def _draft_length(row: dict[str, Any]) -> int:
    return int(row["params"][get_method(row["method"]).draft_length_param])


def _series_name(row: dict[str, Any], lang: str) -> str:
    """A chart series: a setting's knobs but its draft length, each named as the setting's label names it
    (`tune.label.<parameter>`), by the replay of its method (`tune.Replay.series`)."""
    return replay_of(row["method"]).series(row["params"], lang)


def shown_label(label: str | None, data: dict[str, Any], lang: str = DEFAULT_LANGUAGE) -> str:
    """A setting's label (tune.json's English name) as the page names the setting in `lang`
    (`tune.settings.setting_label`, from its row's method and values); as written where no row or method knows it
    (a tune.json from elsewhere)."""
    if label is None or normalize(lang) == DEFAULT_LANGUAGE:
        return label or ""
    row = next((r for r in data["rows"] if r["label"] == label), None)
    if row is None:
        return label
    from .tune.settings import setting_label

    try:
        return setting_label(row["method"], row["params"], lang)
    except (KeyError, ValueError):  # a method tune has no replay for, or values missing: its label as written
        return label


def _series(rows: list[dict[str, Any]], key: str, lang: str) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        value = (r.get("predicted") or {}).get(key)
        if value is not None:
            out.setdefault(_series_name(r, lang), []).append((_draft_length(r), value))
    return {name: sorted(points) for name, points in out.items()}


def _line_figure(rows: list[dict[str, Any]], key: str, title: str, y_title: str, one: float | None = None,
                 lang: str = DEFAULT_LANGUAGE) -> go.Figure:
    fig = go.Figure()
    for i, (name, points) in enumerate(_series(rows, key, lang).items()):
        fig.add_trace(go.Scatter(x=[x for x, _ in points], y=[y for _, y in points], mode="lines+markers",
                                 name=name, line=dict(color=color(i))))
    if one is not None:
        fig.add_hline(y=one, line_dash="dot", line_color="#7f7f7f", annotation_text=t("tune.chart.baseline", lang))
    return style_figure(fig, title, xaxis_title=t("tune.chart.draft_length", lang), yaxis_title=y_title,
                        separators=separators(lang))


def speedup_figure(data: dict[str, Any], lang: str = DEFAULT_LANGUAGE) -> go.Figure:
    return _line_figure(data["rows"], "speedup", t("tune.chart.speedup.title", lang), t("tune.chart.speedup.y", lang),
                        one=1.0, lang=lang)


def _counts_title(key: str, data: dict[str, Any], lang: str) -> str:
    """A chart of counts says "exact" only where they are (float32 greedy); otherwise "predicted"."""
    return t(key if data["meta"].get("counts_exact") else key + "_predicted", lang)


def tokens_per_step_figure(data: dict[str, Any], lang: str = DEFAULT_LANGUAGE) -> go.Figure:
    return _line_figure(data["rows"], "tokens_per_step", _counts_title("tune.chart.tau.title", data, lang),
                        t("tune.chart.tau.y", lang), lang=lang)


def position_figure(data: dict[str, Any], lang: str = DEFAULT_LANGUAGE) -> go.Figure:
    """Acceptance by draft position for the recommended and the default setting."""
    fig = go.Figure()
    wanted = [data.get("recommended"), data.get("default")]
    for i, row in enumerate(r for r in data["rows"] if r["label"] in wanted):
        counts = (row.get("predicted") or {}).get("by_position") or []
        rates = [c[1] / c[0] if c[0] else None for c in counts]  # kept / verified
        fig.add_trace(go.Bar(x=[k + 1 for k in range(len(rates))], y=rates, name=shown_label(row["label"], data, lang),
                             marker_color=color(i)))
    return style_figure(fig, _counts_title("tune.chart.positions.title", data, lang), xaxis_title=t("tune.chart.positions.x", lang),
                        yaxis_title=t("tune.chart.positions.y", lang), yaxis_range=[0, 1.05], barmode="group",
                        separators=separators(lang))


def figures(data: dict[str, Any], lang: str = DEFAULT_LANGUAGE) -> dict[str, go.Figure]:
    return {"speedup": speedup_figure(data, lang), "tokens_per_step": tokens_per_step_figure(data, lang),
            "positions": position_figure(data, lang)}


def best_rows(data: dict[str, Any], count: int = 10) -> list[dict[str, Any]]:
    """The recommended and default settings first, then the fastest predicted ones."""
    predicted = [r for r in data["rows"] if r.get("predicted")]
    ranked = sorted(predicted, key=lambda r: -(r["predicted"].get("speedup") or 0))
    first = [r for r in predicted if r["label"] in (data.get("recommended"), data.get("default"))]
    return list({r["label"]: r for r in first + ranked}.values())[:count]


def _fields(outcome: dict[str, Any] | None, lang: str) -> list[str]:
    if not outcome:
        return ["–"] * 6
    time_s = fmt(outcome.get("time_s"), lang=lang)
    return [str(outcome["steps"]), str(outcome["drafted"]), str(outcome["accepted"]),
            fmt(outcome.get("tokens_per_step"), lang=lang),
            time_s if time_s == "–" else t("render.stat.seconds", lang, s=time_s),
            fmt(outcome.get("speedup"), ".2f", "×", lang)]


# The table's columns, by their `tune.head.*` keys: the setting, then predicted and measured figures.
TABLE_COLUMNS = ("setting", "steps", "drafted", "accepted", "tau", "time", "speedup",
                 "measured_steps", "drafted", "accepted", "tau", "time", "speedup")
LOSSES_COLUMNS = ("prompt", "own_best", "its_speedup", "with_overall_best", "loss")


def table_headers(lang: str = DEFAULT_LANGUAGE) -> list[str]:
    return [t(f"tune.head.{column}", lang) for column in TABLE_COLUMNS]


def losses_headers(lang: str = DEFAULT_LANGUAGE) -> list[str]:
    return [t(f"tune.losses.{column}", lang) for column in LOSSES_COLUMNS]


TABLE_HEADERS = table_headers()


def table_rows(data: dict[str, Any], rows: list[dict[str, Any]] | None = None,
               lang: str = DEFAULT_LANGUAGE) -> list[list[str]]:
    """Predicted beside measured, one row per setting (plain strings)."""
    out = []
    for r in rows if rows is not None else data["rows"]:
        if r.get("predicted") is None:
            reason = localize(r.get("refused"), lang)  # a Message from this run; text from a tune.json as written
            out.append([shown_label(r["label"], data, lang), t("tune.no_prediction", lang, reason=reason)] + [""] * 11)
            continue
        out.append([shown_label(r["label"], data, lang) + _mark(r["label"], data, lang)] + _fields(r["predicted"], lang)
                   + _fields(r.get("measured"), lang))
    return out


def _beats_baseline(data: dict[str, Any]) -> bool:
    """Whether the fastest predicted setting is predicted clearly faster than plain decoding (`tune.standing`; a dict
    without it, written by hand or before it was, gets the recommendation's wording)."""
    return data.get("standing") in (None, "faster")


def _mark(label: str, data: dict[str, Any], lang: str) -> str:
    """A row's mark: ★ on the recommended setting where it is predicted a win over plain decoding; where no setting is,
    the fastest predicted one says what it is (the least slow, or faster only within the margin), never ★."""
    if _beats_baseline(data):
        if label == data.get("recommended"):
            return " ★"
    elif label == data.get("fastest_predicted"):
        return t(f"tune.mark.{data['standing']}", lang)
    return t("tune.default_mark", lang) if label == data.get("default") else ""


def verdict(data: dict[str, Any], lang: str = DEFAULT_LANGUAGE) -> str:
    """One paragraph: what to use, how sure the prediction is, and what was measured. Where no setting is predicted
    clearly faster than plain decoding (`tune.standing`), it says so first, and by how much, and names the fastest
    predicted setting as the least slow one (or one whose gain lies inside the margin), not as a recommendation."""
    rows = {r["label"]: r for r in data["rows"]}
    best = rows.get(data.get("recommended") or "")
    if best is None:
        return t("tune.verdict.none", lang)
    prompts = tn_prompts(data["meta"].get("prompts", 1), lang)
    fastest = data.get("fastest_predicted")
    if _beats_baseline(data):
        p = best["predicted"]
        text = t("tune.verdict.recommended", lang, label=shown_label(best["label"], data, lang), x=number(p['speedup'], lang),
                 tau=number(p['tokens_per_step'], lang), accepted=p["accepted"], drafted=p["drafted"], prompts=prompts)
        if fastest and fastest != best["label"] and data.get("predicted_gain") is not None:
            text += t("tune.verdict.no_clear_win", lang, label=shown_label(fastest, data, lang),
                      gain=number(data['predicted_gain'], lang, ".0%"), margin=number(data['margin'], lang, ".0%"))
    else:
        best = rows.get(fastest or "") or best  # the fastest predicted: the one the verdict speaks of
        text = _no_win(best, data, prompts, lang)
    default = rows.get(data.get("default") or "")
    if default and default is not best and default.get("predicted"):
        text += t("tune.verdict.default", lang, label=shown_label(default["label"], data, lang), x=number(default['predicted']['speedup'], lang))
    measured = [(r["label"], r["predicted"]["speedup"], r["measured"]["speedup"]) for r in data["rows"]
                if r.get("measured") and r.get("predicted") and r["measured"].get("speedup")]
    for label, predicted, real in measured:  # a run that took longer than the baselines beside it says so
        key = "tune.verdict.measured_slower" if real < 1.0 else "tune.verdict.measured"
        text += t(key, lang, label=shown_label(label, data, lang), x=number(real, lang), predicted=number(predicted, lang))
    meta = data["meta"]
    if meta.get("counts_exact"):
        text += t("tune.verdict.exact", lang)
    else:
        text += t("tune.verdict.predicted", lang, dtype=meta.get("env", {}).get("dtype") or "?")
    if not meta.get("times_reliable", True):
        text += t("tune.verdict.unreliable", lang)
    if not meta.get("measured_reliable", True):
        text += t("tune.verdict.measured_unreliable", lang, change=number(meta.get('measured_pace_change', 1.0), lang))
    verified = data.get("verified") or {}
    if verified.get("settings"):
        text += t("tune.verdict.matched", lang, settings=verified["settings"], matched=verified["matched"])
    return text


def _no_win(fastest: dict[str, Any], data: dict[str, Any], prompts: str, lang: str) -> str:
    """The verdict's opening where no setting is predicted clearly faster than plain decoding: the fastest predicted
    setting's speedup, and either the time it would take and what each of its steps costs against a baseline step
    (none faster), or its gain against the margin (faster only within it)."""
    p = fastest["predicted"]
    x, tau = p["speedup"], p["tokens_per_step"]
    fields = dict(label=shown_label(fastest["label"], data, lang), x=number(x, lang), tau=number(tau, lang), accepted=p["accepted"],
                  drafted=p["drafted"], prompts=prompts, margin=number(data['margin'], lang, ".0%"))
    if data["standing"] == "slower":
        # speedup = τ ÷ (a step's time ÷ a baseline step's): the baseline makes one token per step
        text = t("tune.verdict.slower", lang, time=number(1 / x, lang), cost=number(tau / x, lang), **fields)
    else:
        text = t("tune.verdict.unclear", lang, gain=number(x - 1, lang, ".0%"), **fields)
    if fastest["label"] != data.get("recommended") and data.get("predicted_gain") is not None:
        text += t("tune.verdict.default_within_margin", lang, gain=number(data['predicted_gain'], lang, ".0%"),
                  margin=fields["margin"])
    return text


def tn_prompts(n: int, lang: str = DEFAULT_LANGUAGE) -> str:
    """"3 prompts" (a counted phrase in `lang`)."""
    return tn("tune.prompts", n, lang)


def losses_rows(data: dict[str, Any], lang: str = DEFAULT_LANGUAGE) -> list[list[str]]:
    return [[escape(x["prompt"]), escape(shown_label(x["own_best"], data, lang)), fmt(x["own_best_speedup"], ".2f", "×", lang),
             fmt(x["overall_best_speedup"], ".2f", "×", lang), fmt(x["loss"], ".1%", lang=lang)]
            for x in data["losses"]]


def render_report(data: dict[str, Any]) -> str:
    """The self-contained HTML report (plotly.js inlined) of a tune."""
    meta = data["meta"]
    env = meta.get("env", {})
    parts = [f"<h1>Tune: {escape(meta.get('method'))} on {escape(meta.get('target'))}</h1>",
             f"<p class='small'>{meta.get('prompts')} prompt(s) · max {meta.get('max_new_tokens')} new tokens · "
             f"draft lengths 1…{meta.get('max_draft')} · assistant {escape(meta.get('assistant') or '–')} · "
             f"{escape(env.get('dtype'))} · {escape(env.get('device'))}, {env.get('threads')} threads · torch "
             f"{escape(env.get('torch'))}, transformers {escape(env.get('transformers'))}</p>"]
    if meta.get("command"):
        parts.append(f"<pre>{escape(meta['command'])}</pre>")
    parts.append(f"<h2>Verdict</h2><div class='verdict'>{escape(verdict(data))}</div>")
    body = [[escape(c) for c in row] for row in table_rows(data, best_rows(data))]
    parts.append("<h2>Best settings, predicted beside measured</h2>" + table(TABLE_HEADERS, body))
    for fig in figures(data).values():
        parts.append(f"<div class='chart'>{figure_html(fig)}</div>")
    if len(data["losses"]) > 1:
        parts.append("<h2>Per prompt: its own best, and what the overall best costs it</h2>"
                     + table(losses_headers(), losses_rows(data)))
    body = [[escape(c) for c in row] for row in table_rows(data)]
    parts.append("<h2>Every setting</h2>" + table(TABLE_HEADERS, body))
    parts.append("<p class='small'>How the prediction works: one baseline run gives the target's greedy output; "
                 "one drafter pass records what the drafter proposes after every prefix of it; Transformers' loop "
                 "(draft cap, schedule, confidence stop, EOS and length cuts) is replayed on that record for every "
                 "setting (exact counts in float32; in other precisions a prediction from the baseline's output). "
                 "Time = the baseline run's first step + per step: its drafting (a calibrated assistant generate() "
                 "call of the step's draft length, or a prompt-lookup call), the target's forward at the step's "
                 "verification width (calibrated, at the baseline's pace) and the loop's own time once (from a short "
                 "real run). A short baseline after the calibration checks that the machine kept its pace; "
                 "predicted speedups divide the baseline run's first step and its later steps at the mean pace of "
                 "the two baselines. See docs/tune.md.</p>")
    return page("Assisted decoding tune", "".join(parts))
