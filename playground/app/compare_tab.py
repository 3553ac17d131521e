"""The "Compare methods" tab: baseline and the chosen methods on the page's prompt, then a race of two of them.

- Compare: `compare(...)` runs `bench.compare_on_prompt` (warm-up, interleaved, same prompt) in a worker thread,
  streaming its progress; `compare_table_html` and the `bench.figures` show it.
- Race: `race_frames(baseline, method)` yields (seconds into the replay, HTML) frames in which both lanes' text
  grows at the pace the traces recorded (the set-up, then each step's draft + verify + other), scaled to at most
  `RACE_MAX_S` seconds; `play_race` sleeps between them.
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import gradio as gr

from .. import bench, render, theory
from ..timeline import race_timeline
from ..errors import PlaygroundError
from ..gpu import gpu
from ..i18n import DEFAULT_LANGUAGE, joined, list_of, localize, number, t, tn
from ..report_html import fmt
from ..methods import METHODS, REFERENCE, get_method, is_reference, method_title
from ..request import MAX_NEW_TOKENS
from ..settings import get_settings
from ..trace import Trace, short_repr
from .background import in_thread
from .guard import PRIVATE_QUEUED, guarded, long_job
from .language import L, language_of, with_language
from .outputs import Inputs, Outputs
from .panels import results_panel
from .run_request import (DEFAULT_METHOD, MAX_NAME_SHOWN, build_request, collect_params, named_params, param_specs,
                          parse_integer, suggest_assistant)
from .theory_tab import remember_baseline

MAX_COMPARE_REPEATS = 5  # as the page's slider
# The slider's start: three repeats give each speedup a median and a spread (`bench.SETTLED_REPEATS`).
DEFAULT_COMPARE_REPEATS = 3
# "Quick compare", for a class waiting on it: one repeat of a few tokens per method (the table marks its
# speedups as noise, and says why).
QUICK_REPEATS = 1
QUICK_TOKENS = 12
RACE_MAX_S = 10.0  # a race replay lasts at most this long …
RACE_MIN_S = 2.5  # … and at least this long (shorter races are slowed down, and say so)
RACE_FPS = 12


@dataclass
class CompareState:
    """What the race needs from the last comparison: baseline and method traces by label."""

    baseline: Trace | None = None
    traces: dict[str, Trace] = field(default_factory=dict)
    # Each label's time as the table reads it (its median over the repeats, in ms): the race ends its lanes there.
    elapsed_ms: dict[str, float] = field(default_factory=dict)


def _changed_params(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters that differ from the registry's defaults (what a Compare label and a setting's name show)."""
    method = get_method(name)
    return {k: v for k, v in params.items() if method.param(k).default != v}


def _spec_label(name: str, params: dict[str, Any]) -> str:
    """The method's name plus only the parameters that differ from the registry's defaults."""
    changed = _changed_params(name, params)
    if not changed:
        return name
    return f"{name}(" + ", ".join(f"{k}={v}" for k, v in changed.items()) + ")"


def setting_name(spec: bench.MethodSpec, lang: str = DEFAULT_LANGUAGE) -> str:
    """A Compare setting (its `MethodSpec`: the method and the parameters it runs with) as the page names it in
    `lang`: the method's title, as the pickers show it, then each parameter that differs from the registry's default
    named as its control names it (`compare.param.<name>`, a fraction written by `i18n.number`). The label stays the
    setting's identity (the rows' `data-label`, the race's choice, the CLI's and the JSON's names); a method the
    registry does not know (a trace file's) is named by its label."""
    if spec.method not in METHODS:
        return spec.label
    title = method_title(spec.method, lang)
    changed = _changed_params(spec.method, spec.params)
    if not changed:
        return title
    parts = [t(f"compare.param.{key}", lang, value=number(value, lang, "g") if isinstance(value, float) else value)
             for key, value in changed.items()]
    return t("compare.setting", lang, title=title, params=joined(parts, lang))


def _named(result: bench.CompareResult, label: str, lang: str) -> str:
    """The setting behind one of `result`'s labels, named in `lang` (`setting_name`)."""
    return setting_name(result.specs[label], lang)


def compare_specs(methods: Sequence[str], target: str, assistant: str | None, current_method: str | None,
                  param_values: Mapping[str, Any]) -> list[bench.MethodSpec]:
    """Specs for the chosen methods with the page's parameter values (baseline first, always)."""

    chosen = [m for m in dict.fromkeys(methods or []) if not is_reference(m)]
    if not chosen:
        raise PlaygroundError.keyed("error.compare.no_method")
    current = METHODS.get(current_method or "")
    specs = [bench.make_spec(REFERENCE)]
    for name in chosen:
        method = get_method(name)
        params = collect_params(name, param_values)
        helper = None
        if method.needs_assistant:
            # The page's assistant field belongs to the method chosen there; others get their usual one.
            same_kind = current is not None and current.needs_assistant and current.assistant == method.assistant
            helper = suggest_assistant(method, target, assistant if same_kind else None)
        specs.append(bench.make_spec(name, params, helper, label=_spec_label(name, params)))
    return specs


def _figure(agg: bench.Aggregate | None, name: str) -> Any:
    """One of the aggregate's figures; None when the method has no aggregate (it failed)."""
    return None if agg is None else getattr(agg, name)


COLUMNS = ("method", "speedup", "tokens_per_s", "alpha", "tau", "draft_ms", "verify_ms", "leviathan", "refined",
           "output")  # the table's columns, by their `compare.head.*` keys


def _output_check(row: bench.BenchRow, trace: Trace | None, lang: str) -> str:
    """The output column (HTML): the reference, equal to baseline, where it differs (and why, on hover), or why
    it is not compared token by token (a lossy setting, sampling)."""
    if is_reference(row.method):
        return html.escape(t("compare.check.reference", lang))
    if row.lossless_ok is True:
        return html.escape(t("compare.check.same", lang))
    if row.lossless_ok is False:
        note = t("compare.check.near_tie_note" if row.lossless_severity == "near-tie" else "compare.check.error_note",
                 lang, dtype=row.dtype or "", index=row.first_divergence)
        if row.divergence_margin is not None:
            note += " " + t("compare.check.margin", lang, margin=number(row.divergence_margin, lang, ".4f"))
        return (f'<span title="{html.escape(note, quote=True)}">'
                f'{html.escape(t("compare.check.differs", lang, index=row.first_divergence))}</span>')
    if trace is not None and trace.lossy:
        return html.escape(t("compare.check.lossy", lang))
    if trace is not None and trace.decoding.get("sample"):
        return html.escape(t("compare.check.sampling", lang))
    return html.escape(row.lossless_note or "–")


def _reference(method: str) -> str:
    """The row attribute that marks the reference method's row (the page's CSS dims it)."""
    return " data-reference" if is_reference(method) else ""


def compare_table_html(result: bench.CompareResult, skipped: Sequence[tuple[bench.MethodSpec, str]] = (),
                       lang: str = DEFAULT_LANGUAGE) -> str:
    """One row per method: speedup, tokens/s, α, τ, draft vs verify ms per step, predicted speedups, output check;
    then one per `skipped` setting, with why it could not run."""
    aggs = {a.label: a for a in result.aggregates}
    head = "<tr>" + "".join(f"<th>{html.escape(t(f'compare.head.{c}', lang))}</th>" for c in COLUMNS) + "</tr>"
    rows = []
    for row in result.rows:
        label = row.label
        a = aggs.get(label)
        if row.error:
            rows.append(f'<tr data-method="{html.escape(row.method)}" data-label="{html.escape(label)}"'
                        f'{_reference(row.method)}>'
                        f'<td>{html.escape(_named(result, label, lang))}</td>'
                        f'<td colspan="9">⚠ {html.escape(row.error)}</td></tr>')
            continue
        speed = a.speedup if a is not None else row.speedup

        is_method = not is_reference(row.method)
        cells = [
            f"<b>{fmt(speed, '.2f', '×', lang)}</b>{noise_mark(a, lang)}",
            fmt(_figure(a, "tokens_per_s"), ".1f", lang=lang),
            fmt(_figure(a, "alpha"), ".0%", lang=lang),
            fmt(_figure(a, "tokens_per_step"), ".2f", lang=lang),
            fmt(_figure(a, "draft_ms_per_step"), ".1f", lang=lang),
            fmt(_figure(a, "verify_ms_per_step"), ".1f", lang=lang),
            fmt(_figure(a, "theoretical_speedup"), ".2f", "×", lang) if is_method else "",
            fmt(_figure(a, "refined_speedup"), ".2f", "×", lang) if is_method else "",
            _output_check(row, result.traces.get(label), lang),  # HTML, escaped there
        ]
        rows.append(f'<tr data-method="{html.escape(row.method)}" data-label="{html.escape(label)}" '
                    f'data-speedup="{"–" if speed is None else format(speed, ".4f")}"{_reference(row.method)}>'
                    f'<td>{html.escape(_named(result, label, lang))}</td>'
                    + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    for spec, reason in skipped:
        rows.append(f'<tr data-label="{html.escape(spec.label)}" data-skipped="true">'
                    f'<td>{html.escape(setting_name(spec, lang))}</td>'
                    f'<td colspan="9">{html.escape(t("compare.skipped", lang, reason=reason))}</td></tr>')
    n = (result.rows[0].repeats or 1) if result.rows else 1
    caption = t("compare.caption", lang, repeats=tn("compare.repeats", n, lang))
    return (f'<table class="pg-table" data-testid="pg-compare-table"><caption style="caption-side: bottom; '
            f'text-align: start; opacity: .75; font-size: 12.5px; padding-top: 4px">{html.escape(caption)}</caption>'
            f"{head}{''.join(rows)}</table>")


def compare_verdict(result: bench.CompareResult, lang: str = DEFAULT_LANGUAGE) -> str:
    rows = [a for a in result.aggregates if not a.is_baseline and a.speedup is not None]
    if not rows:
        return t("compare.verdict.none", lang)
    best = max(rows, key=lambda a: a.speedup or 0.0)  # every row has one (above)
    speedup = best.speedup or 0.0
    key = "compare.verdict.fastest" if speedup >= 1.05 else "compare.verdict.no_win"
    verdict = t(key, lang, label=_named(result, best.label, lang), x=number(speedup, lang))
    note = noise_note(rows, lang)
    return f"{verdict} {note}" if note else verdict


def noise_reasons_text(agg: bench.Aggregate, lang: str = DEFAULT_LANGUAGE) -> str:
    """Why an aggregate's speedup is noise (`bench.noise_reasons`), as one list in `lang`; empty when settled."""
    words = {
        "few_repeats": lambda: tn("compare.noise.few_repeats", agg.repeats, lang, min=bench.SETTLED_REPEATS),
        "few_tokens": lambda: tn("compare.noise.few_tokens", agg.run_tokens, lang, min=bench.SETTLED_TOKENS),
        "wide": lambda: t("compare.noise.wide", lang, lo=number(agg.speedup_interval[0], lang),  # type: ignore[index]
                          hi=number(agg.speedup_interval[1], lang)),  # type: ignore[index]
    }
    return list_of([words[reason]() for reason in agg.noise if reason in words], lang)


def noise_note(aggs: Sequence[bench.Aggregate], lang: str = DEFAULT_LANGUAGE) -> str:
    """The status's sentence where any shown speedup is noise: what marks it in the table, and why (the reasons of
    the first such method; a Compare's methods share its repeats and tokens)."""
    noisy = [a for a in aggs if a.noise and not a.is_baseline]
    if not noisy:
        return ""
    return t("compare.noise.verdict", lang, label=t("compare.noise.mark", lang), reasons=noise_reasons_text(noisy[0], lang))


def noise_mark(agg: bench.Aggregate | None, lang: str = DEFAULT_LANGUAGE) -> str:
    """The table's mark beside a speedup that is noise (its reasons on hover; the status says them); empty else."""
    if agg is None or not agg.noise or agg.is_baseline:
        return ""
    reasons = html.escape(noise_reasons_text(agg, lang))
    return (f' <small class="pg-noise" data-testid="pg-noise" data-noise="{" ".join(agg.noise)}" title="{reasons}">'
            f'({html.escape(t("compare.noise.mark", lang))})</small>')


def diagnoses_html(result: bench.CompareResult, lang: str = DEFAULT_LANGUAGE) -> str:
    """Each method's diagnosis (written in `lang` by `compare_on_prompt`) and why measured and predicted differ."""
    parts = []
    for label, sentences in result.diagnoses.items():
        if label == REFERENCE or not sentences:
            continue
        agg = next((a for a in result.aggregates if a.label == label), None)
        explanation = "" if agg is None else theory.explain_gap(agg.to_dict(), lang=lang)
        items = "".join(f"<li>{html.escape(s)}</li>" for s in sentences)
        extra = f'<p class="pg-note">{html.escape(explanation)}</p>' if explanation else ""
        parts.append(f'<div data-label="{html.escape(label)}">'
                     f'<h4 style="margin: 8px 0 2px">{html.escape(_named(result, label, lang))}</h4>'
                     f'<ul class="pg-diagnosis">{items}</ul>{extra}</div>')
    return f'<div data-testid="pg-compare-diagnosis">{"".join(parts)}</div>'


# `compare`'s outputs (`outputs.Outputs`): the results panel, the diagnoses, the race's picker, the state for the race,
# the session's baselines.
COMPARED = Outputs("status", "table", "speedup", "cost", "diagnosis", "race_method", "state", "baselines")


@gpu(duration=120)  # several warmed-up generations: longer than ZeroGPU's 60 s default
def compare(prompt: str, target: str | None, assistant: str | None, method: str | None, dtype: str | None,
            chat: Any, methods: Sequence[str] | None, max_new_tokens: float | None, repeats: float | None,
            baselines: list[Trace] | None, param_values: Mapping[str, Any], *,
            lang: str = DEFAULT_LANGUAGE) -> Iterator[tuple[Any, ...]]:
    """Run baseline and the chosen methods on the page's prompt (warm-up, interleaved, same prompt).

    Outputs: `COMPARED` (status, table HTML, speedup figure, step-cost figure, diagnoses HTML, race method
    dropdown, compare state, baselines state). Streams progress in the status; errors end up there too.
    Everything it writes is in `lang` (the page passes the visitor's language). Each method is prepared
    (loaded, validated) once: a method the target cannot do is skipped with its reason, the others measured.
    """
    from ..errors import user_message

    try:
        # The page's own checks (`build_request`) on the shared settings: types, sizes, finite numbers, text.
        request = build_request(prompt=prompt, target=target, assistant=assistant, method=method, params=None,
                                max_new_tokens=max_new_tokens or None, sample=False, temperature=None, top_p=None,
                                top_k=None, seed=None, chat=chat, dtype=dtype, surface="compare")
        if not request.prompt.strip():
            raise PlaygroundError.keyed("error.prompt_empty")
        if not isinstance(methods, list) or not all(isinstance(m, str) for m in methods):
            raise PlaygroundError.keyed("error.compare.methods", got=short_repr(methods, MAX_NAME_SHOWN))
        prompt, target, dtype, chat_value = request.prompt, request.target, request.dtype, request.chat
        tokens = request.max_new_tokens
        if not 2 <= tokens <= get_settings().max_new_tokens:
            raise PlaygroundError.keyed("error.compare.tokens", limit=get_settings().max_new_tokens, got=tokens)
        reps = parse_integer(repeats, 1, "repeats")
        if not 1 <= reps <= MAX_COMPARE_REPEATS:
            raise PlaygroundError.keyed("error.compare.repeats", limit=MAX_COMPARE_REPEATS, got=reps)
        specs = compare_specs(methods, target, request.assistant, request.method, param_values)
        yield COMPARED(status=render.status_html(t("status.preparing", lang, target=target), "running"))

        def work(progress: Callable[[str], None]) -> tuple[bench.CompareResult, list[tuple[bench.MethodSpec, str]]]:
            settings: dict[str, Any] = dict(target=target, max_new_tokens=tokens, dtype=dtype, chat=chat_value)
            prepared, skipped = bench.prepare_specs(prompt, specs, **settings, progress=progress, skip_failing=True,
                                                    lang=lang)
            if len(prepared) < 2:
                raise PlaygroundError.keyed("error.compare.none_can_run",
                                            reasons="; ".join(f"{label}: {why}" for label, why in skipped))
            ok = [spec for spec in specs if spec.label in prepared]
            result = bench.compare_on_prompt(prompt, ok, **settings, repeats=reps, warmup=True,
                                             measure_overhead=False, progress=progress, prepared=prepared, lang=lang)
            by_label = {spec.label: spec for spec in specs}
            return result, [(by_label[label], why) for label, why in skipped]

        outcome: Any = None
        for kind, value in in_thread(work, "playground-compare"):
            if kind == "progress":
                yield COMPARED(status=render.status_html(t("compare.progress", lang, stage=localize(value, lang)),
                                                         "running"))
            else:
                outcome = value
        result, skipped = outcome
        figs = bench.compare_figures(result, lang)
        state = CompareState(baseline=result.traces.get(REFERENCE),
                             traces={k: v for k, v in result.traces.items() if k != REFERENCE},
                             elapsed_ms={r.label: r.elapsed_s * 1000.0 for r in result.rows if r.elapsed_s})
        choices = list(state.traces)
        best = max((a for a in result.aggregates if a.label in state.traces and a.speedup is not None),
                   key=lambda a: a.speedup, default=None)
        race_choice = gr.update(choices=[(_named(result, label, lang), label) for label in choices],
                                value=(best.label if best else None) or (choices[0] if choices else None),
                                interactive=bool(choices))
        status = render.status_html(compare_verdict(result, lang), "done",
                                    t("compare.done_note", lang, tokens=tn("compare.new_tokens", tokens, lang),
                                      repeats=tn("compare.repeats", reps, lang)))
        yield COMPARED(status=status, table=compare_table_html(result, skipped, lang),
                       speedup=figs["speedup_vs_theory"], cost=figs["step_cost"], diagnosis=diagnoses_html(result, lang),
                       race_method=race_choice, state=state, baselines=remember_baseline(baselines, state.baseline))
    except Exception as exc:
        yield COMPARED(status=render.status_html(user_message(exc, t("error.what.comparison", lang), lang), "error"))


def quick_compare(prompt: str, target: str | None, assistant: str | None, method: str | None, dtype: str | None,
                  chat: Any, methods: Sequence[str] | None, max_new_tokens: float | None, repeats: float | None,
                  baselines: list[Trace] | None, param_values: Mapping[str, Any], *,
                  lang: str = DEFAULT_LANGUAGE) -> Iterator[tuple[Any, ...]]:
    """`compare` in the time a class can wait: `QUICK_REPEATS` repeat(s) of at most `QUICK_TOKENS` new tokens
    (the page's length when it is shorter); the sliders' own values are left as they are."""
    tokens = QUICK_TOKENS
    if isinstance(max_new_tokens, (int, float)) and not isinstance(max_new_tokens, bool) and max_new_tokens >= 2:
        tokens = min(QUICK_TOKENS, int(max_new_tokens))
    yield from compare(prompt, target, assistant, method, dtype, chat, methods, tokens, QUICK_REPEATS, baselines,
                       param_values, lang=lang)


# --------------------------------------------------------------------------- race


def race_name(lane: dict[str, Any], lang: str = DEFAULT_LANGUAGE) -> str:
    """A race lane's method as the page names it in `lang`: its title, as the method pickers show it (a lane is
    labelled by its trace's method: `timeline.race_lane`); a trace of a method the registry does not know keeps its
    label."""
    method = lane["method"]
    return method_title(method, lang) if method in METHODS else str(lane["label"])


def race_frames(baseline: Trace, method: Trace, max_s: float = RACE_MAX_S, min_s: float = RACE_MIN_S,
                fps: float = RACE_FPS, lang: str = "en",
                totals_ms: tuple[float, float] | None = None) -> Iterator[tuple[float, str]]:
    """(seconds into the replay, race HTML) frames: each lane shows the steps whose recorded end time
    (cumulative draft + verify ms, `timeline.race_timeline`) has passed; one frame per change, at most
    `fps` a second; the replay lasts the recorded time, clamped to [min_s, max_s]. `totals_ms`: where the lanes
    end (the comparison table's times), so the race's verdict is the table's speedup."""
    timeline = race_timeline(baseline, method, totals_ms)
    traces = (baseline, method)
    duration_s = max(timeline["duration_ms"] / 1000.0, 1e-6)
    play_s = min(max(duration_s, min_s), max_s)
    replay_speed = duration_s / play_s  # 1: as recorded; below 1: slowed down
    ends = [[p["t_ms"] for p in lane["points"][1:]] for lane in timeline["lanes"]]

    def lanes_at(t_ms: float) -> list[dict]:
        out = []
        for lane, trace, lane_ends in zip(timeline["lanes"], traces, ends):
            shown = sum(1 for e in lane_ends if e <= t_ms + 1e-9)
            out.append({"label": lane["label"], "name": race_name(lane, lang), "steps": trace.steps[:shown],
                        "total_tokens": lane["new_tokens"], "total_steps": len(trace.steps),
                        "finish_s": lane["total_ms"] / 1000.0})
        return out

    b, m = timeline["lanes"]
    ratio = timeline.get("time_ratio")
    if ratio and ratio >= 1.0:
        verdict = t("race.method_first", lang, method=race_name(m, lang), method_s=number(m['total_ms'] / 1000, lang),
                    base_s=number(b['total_ms'] / 1000, lang), x=number(ratio, lang))
    elif ratio:
        verdict = t("race.baseline_first", lang, method=race_name(m, lang), method_s=number(m['total_ms'] / 1000, lang),
                    base_s=number(b['total_ms'] / 1000, lang), x=number(ratio, lang))
    else:
        verdict = ""
    slots = max(1, int(play_s * fps))
    last: tuple[int, ...] | None = None
    for i in range(slots + 1):
        t_play = play_s * i / slots
        t_ms = duration_s * 1000.0 * i / slots
        lanes = lanes_at(t_ms)
        counts = tuple(len(lane["steps"]) for lane in lanes)
        if counts == last and i != slots:
            continue
        last = counts
        yield t_play, render.race_html(lanes, t_ms / 1000.0, replay_speed, verdict if i == slots else "", lang)


def play_race(choice: str | None, state: CompareState | None,
              request: gr.Request = None) -> Iterator[str]:
    """Stream the race of baseline against the chosen method at the recorded pace (in the visitor's language)."""
    lang = language_of(request)
    if state is None or state.baseline is None or not state.traces:
        yield render.status_html(t("race.no_comparison", lang), "error")
        return
    label = choice if isinstance(choice, str) and choice in state.traces else next(iter(state.traces))
    method = state.traces[label]
    totals = (state.elapsed_ms.get(REFERENCE), state.elapsed_ms.get(label))
    start = time.monotonic()
    for t_play, frame in race_frames(state.baseline, method, lang=lang,
                                     totals_ms=totals if None not in totals else None):  # type: ignore[arg-type]
        delay = start + t_play - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield frame


def race_placeholder(lang: str = "en") -> str:
    return render.status_html(t("race.placeholder", lang), "idle")


def idle_views(lang: str = DEFAULT_LANGUAGE) -> tuple[str, str]:
    """The tab's status and race box before anything ran (the page shows them in the visitor's language)."""
    return render.status_html(t("compare.idle", lang), "idle"), race_placeholder(lang)


def method_choices(lang: str = DEFAULT_LANGUAGE) -> list[tuple[str, str]]:
    """(title, name) of every drafting method, titles in `lang` (the page localizes the checkboxes on load)."""
    return [(m.localized(lang).title, name) for name, m in METHODS.items() if m.drafts]


# The page's controls Compare reads, by `compare`'s names for them (its first parameters, in order).
COMPARE_SETTINGS = ("prompt", "target", "assistant", "method", "dtype", "chat")
# `compare`'s and `quick_compare`'s inputs: those, the tab's own, the session's baselines, the parameters.
COMPARE = Inputs(*COMPARE_SETTINGS, "methods", "max_new_tokens", "repeats", "baselines", params=param_specs())
RACE = Inputs("choice", "state")  # `play_race`'s


def build_compare(settings: Mapping[str, Any], param_components: Sequence[Any], baselines: gr.State) -> dict[str, Any]:
    """The tab (call inside the page's `gr.Tabs`) and its events. `settings`: the page's controls by the names of
    `COMPARE_SETTINGS`; `baselines` is the session's baseline traces (Compare adds its own).
    Returns by name the boxes `idle_views` fills (status, race) and the methods' checkboxes (`method_choices`)."""
    max_tokens = get_settings().max_new_tokens
    with gr.Tab(L("ui.tab.compare"), id="compare", elem_id="pg-tab-compare"):
        gr.Markdown(L("ui.compare.intro"))
        with gr.Row():
            compare_methods = gr.CheckboxGroup(
                method_choices(), value=[DEFAULT_METHOD],
                label=L("ui.compare.methods"), elem_id="pg-compare-methods", scale=3)
            with gr.Column(scale=1, min_width=220):
                compare_tokens = gr.Slider(2, max_tokens, value=min(MAX_NEW_TOKENS["compare"], max_tokens),
                                           step=1, label=L("ui.compare.tokens"), elem_id="pg-compare-tokens")
                compare_repeats = gr.Slider(1, MAX_COMPARE_REPEATS, value=DEFAULT_COMPARE_REPEATS, step=1,
                                            label=L("ui.compare.repeats"), elem_id="pg-compare-repeats")
        with gr.Row():
            compare_btn = gr.Button(L("ui.compare.run"), variant="primary", elem_id="pg-compare-run")
            quick_btn = gr.Button(L("ui.compare.quick"), elem_id="pg-compare-quick")
        idle_status, idle_race = idle_views()
        panel = results_panel("compare", idle_status, ("speedup", "cost"))
        compare_diag = gr.HTML("", elem_id="pg-compare-diagnosis")
        with gr.Row():
            race_method = gr.Dropdown(choices=[], value=None, label=L("ui.compare.race_against"),
                                      interactive=False, elem_id="pg-race-method", scale=3)
            race_btn = gr.Button(L("ui.compare.race_play"), elem_id="pg-race-play", scale=1)
        race = gr.HTML(idle_race, elem_id="pg-race-box")
        compare_state = gr.State(None)

    compared = COMPARED.components(dict(status=panel.status, table=panel.table, speedup=panel.left, cost=panel.right,
                                        diagnosis=compare_diag, race_method=race_method, state=compare_state,
                                        baselines=baselines))
    inputs = COMPARE.components({**settings, "methods": compare_methods, "max_new_tokens": compare_tokens,
                                 "repeats": compare_repeats, "baselines": baselines, **named_params(param_components)})
    compare_btn.click(with_language(COMPARE.into(compare)), inputs, compared, **long_job(panel.status))
    quick_btn.click(with_language(COMPARE.into(quick_compare)), inputs, compared, **long_job(panel.status))
    race_btn.click(guarded(RACE.into(play_race)), RACE.components({"choice": race_method, "state": compare_state}), race,
                   **PRIVATE_QUEUED)
    return dict(status=panel.status, race=race, methods=compare_methods)
