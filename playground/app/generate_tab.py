"""The main view: the run's settings on the left, its live output on the right, and `generate`, the page's
streaming handler and the API endpoint ``/generate``.

`generate`'s parameter names mirror the CLI (`prompt`, `target`, `assistant`, `method`, `params`,
`max_new_tokens`, `sample`, `temperature`, `top_p`, `top_k`, `seed`, `chat`, `dtype`, then `check_plain` and
`preset`, appended so older clients keep working) and its first output is the coloured HTML. With `check_plain`,
the same settings then run without drafting and the stats say how much faster the run was and whether its output
is identical to plain `generate()` (if not: where, and why). A `preset` (a guide example's name) sets everything
but the prompt and the precision. In the page, a click first gathers the visible method controls into the hidden
`params` JSON, then runs `generate`; its last output, the run's `Trace`, goes to a `gr.State` that the page passes
on to the other tabs.
"""

from __future__ import annotations

import contextlib
import html
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import gradio as gr

from .. import bench, charts, microscope_view, render
from ..examples import BY_NAME, localized_examples
from ..i18n import DEFAULT_LANGUAGE, LANGUAGES, localize, number, t, tn
from ..gpu import gpu
from ..methods import METHODS, get_method
from ..models import CATALOGUE, DEFAULT_TARGET, host_precision_note, hub_reachable
from ..request import MAX_NEW_TOKENS, RunRequest, default, method_for
from ..settings import get_settings
from . import handout_button, links, preload, presenter, preset_picker, trace_files
from .background import in_thread
from .guard import PRIVATE, guarded, session_key
from .language import L, language_of, with_language
from .methods_tab import lecture_html
from .run_request import (CHAT_CHOICES, DEFAULT_METHOD, DTYPES, build_request, collect_params, param_component,
                      on_target_change, on_target_pick, param_specs, param_update, parse_flag, suggest_assistant,
                      target_param_specs)

if TYPE_CHECKING:  # the engine (torch, Transformers) is imported by the handlers, when they run
    from ..engine import LiveRun

# Page updates while streaming: tokens and figures after every step, but at most every
# UPDATE_EVERY_S (steps of real models on CPU take longer; tiny models would flood the browser),
# the charts at most every CHART_EVERY_S (a Plotly figure is re-sent whole), and always once at
# the end, so the final state is never lost. The first chart update waits CHART_EVERY_S too: the
# browser redraws a Plotly chart in about 0.1 s of CPU, and drawing two with the first tokens held
# those tokens back and took that CPU from the model sharing the machine (a local run).
UPDATE_EVERY_S = 0.04
CHART_EVERY_S = 1.5
# A run at a pace (`presenter`) may stand paused: the handler then hears from it every IDLE_S (it shows the step just
# made and says the run is paused) and yields at least every BEAT_S, so a visitor who left is noticed (Gradio closes
# the handler at a yield) and the paused run ends.
IDLE_S = 0.25
BEAT_S = 1.0

# Every language's example prompts by name (the names differ between languages, so one lookup serves all).
EXAMPLES: dict[str, str] = {e.name: e.text for lang in LANGUAGES for e in localized_examples(lang)}
EXAMPLE_NOTES: dict[str, str] = {e.name: e.note for lang in LANGUAGES for e in localized_examples(lang)}
DEFAULT_EXAMPLE = "Edit code"


def example_names(lang: str) -> list[str]:
    return [e.name for e in localized_examples(lang)]


# --------------------------------------------------------------------------- the settings' handlers


def on_method_change(method_name: str, target: str | None, assistant: str | None,
                     request: gr.Request = None) -> list[Any]:  # type: ignore[assignment]
    """Explanation, assistant field and parameter controls for the chosen method (in the visitor's language)."""
    lang = language_of(request)
    method = method_for(method_name, target).localized(lang)  # the controls bounded by the target's layers
    by_name = {p.name: p for p in method.params}
    updates: list[Any] = [method.summary, lecture_html(method, lang)]
    if method.needs_assistant:
        suggested = suggest_assistant(method, target, assistant)
        preload.PRELOAD.convert_assistant(suggested)  # a bundled one is converted while the user sets up the run
        updates.append(gr.update(visible=True, value=suggested, info=t(f"ui.assistant.info.{method.assistant}", lang)))
    else:
        updates.append(gr.update(visible=False))
    updates.extend(param_update(by_name.get(name)) for name in param_specs())
    return updates

def on_generate_click(method_name: str, *values: Any, lang: str = DEFAULT_LANGUAGE) -> tuple[dict[str, Any], str, bool]:
    """Runs at once on a click (outside the queue): gather the parameters, say the run is queued (in `lang`; the
    page passes the visitor's, see `with_language`), and mark the status box as the run's (so the start-up
    load's poll stops writing to it)."""
    return collect_params(method_name, *values), render.status_html(t("status.queued", lang), "running"), True


def on_sample_change(sample: bool) -> list[Any]:
    return [gr.update(visible=bool(sample)) for _ in range(3)]


def on_example(name: str | None) -> Any:  # any language's example name
    return EXAMPLES.get(name or "", gr.skip())


def example_after_prompt(prompt: Any, name: Any) -> Any:
    """The example picker once the prompt changed: cleared when the prompt is no longer its example's text (a guide
    example, a shared link or an edit replaced it), so the page never names an example it is not showing."""
    if not name or (isinstance(name, str) and EXAMPLES.get(name) == prompt):
        return gr.skip()
    return None


def example_note_html(name: str | None) -> str:
    """Under the examples: where the bundled model cannot do the picked task in this language, what it does instead
    and what to try (empty where it does the task)."""
    note = EXAMPLE_NOTES.get(name or "", "")
    return f'<p class="pg-example-note" role="note">{html.escape(note)}</p>' if note else ""


# --------------------------------------------------------------------------- sessions (for Stop)


@dataclass
class _Session:
    stop: threading.Event = field(default_factory=threading.Event)
    live: LiveRun | None = None


_SESSIONS: dict[str, _Session] = {}
_SESSIONS_LOCK = threading.Lock()


_session_key = session_key


def stop(request: gr.Request = None) -> str:  # type: ignore[assignment]
    """Ask this session's run to end after the current step (what was produced is kept)."""
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(_session_key(request))
    if session is None:
        return render.status_html(t("status.nothing_running", language_of(request)), "idle")
    session.stop.set()
    if session.live is not None:
        session.live.stop()
    return gr.skip()


# --------------------------------------------------------------------------- the step microscope


def open_token(trace: Any, evt: gr.EventData, request: gr.Request = None) -> str:  # type: ignore[assignment]
    """A click on a token of the output: its panel (the finished run's trace, or while it runs the live one, whose
    step gets its figures now: a run shown as it comes computes them when generation ends, `LiveRun.figures_now`)."""
    data = getattr(evt, "_data", None)
    if trace is None:
        with _SESSIONS_LOCK:
            session = _SESSIONS.get(_session_key(request))
        live = session.live if session is not None else None
        trace = live.trace if live is not None else None
        step = data.get("step") if isinstance(data, dict) else None
        if live is not None and isinstance(step, int) and not isinstance(step, bool):
            live.figures_now(step)
    return microscope_view.panel_for_click(trace, data, language_of(request))


def after_run_tables(trace: Any, request: gr.Request = None) -> tuple[str, str]:  # type: ignore[assignment]
    """After a run: the per-run tables (what the drafter got wrong) and the panel's invitation, in the page's language."""
    lang = language_of(request)
    return microscope_view.run_tables_html(trace, lang), microscope_view.empty_panel(lang=lang)


# --------------------------------------------------------------------------- page load


def on_page_load(request: gr.Request = None) -> tuple[Any, ...]:  # type: ignore[assignment]
    """Fill in the default example (here rather than as the textbox's initial value, so the API's
    `prompt` stays a required parameter) and show the loading state; in the visitor's language."""
    lang = language_of(request)
    example = BY_NAME[DEFAULT_EXAMPLE].localized(lang)
    examples = gr.update(choices=example_names(lang), value=example.name) if lang != "en" else example.name
    return (example.text, examples, preload.initial_status(lang), gr.update(active=preload.PRELOAD.running))


def localize_view(method_name: str, request: gr.Request = None) -> tuple[Any, ...]:  # type: ignore[assignment]
    """The main view's server-written parts in the visitor's language (a page in English keeps them as built):
    the method picker's titles, the method's summary and lecture, the legend, the empty output, stats and charts,
    the precision's note, the microscope's invitation."""
    lang = language_of(request)
    if lang == "en":
        return tuple(gr.skip() for _ in range(10))
    known = isinstance(method_name, str) and method_name in METHODS  # a client may send anything here
    method = get_method(method_name if known else DEFAULT_METHOD).localized(lang)
    return (gr.update(choices=[(m.localized(lang).title, name) for name, m in METHODS.items()]), method.summary,
            lecture_html(method, lang), render.legend_html(lang), render.empty_tokens(lang=lang),
            render.stats_html(None, lang=lang), *charts.figures([], lang=lang),
            gr.update(info=t("ui.dtype.info", lang, what=localize(host_precision_note(), lang))),
            microscope_view.empty_panel(lang=lang))


def restore_link(request: gr.Request) -> list[Any]:
    """The settings of a shareable link (the page's URL query), validated as the API's values are; last, what the
    guide-example picker's `applied` state becomes."""
    query = dict(request.query_params) if request is not None else {}
    updates = links.restore(query, list(param_specs()), language_of(request))
    return [*updates, preset_picker.applied_after(updates[0])]  # a restored example is applied, as a pick's is


# --------------------------------------------------------------------------- the streaming handler


def _prepare_in_thread(request: RunRequest, session: _Session) -> Iterator[tuple[str, Any]]:
    """Run `prepare` in a thread; yield ("progress", message) while it loads, then ("ready", prepared)."""
    from ..engine import prepare

    work = lambda progress: prepare(request, progress=progress)  # noqa: E731
    # While the run waits for the start-up load or a background conversion, say how that is going.
    for kind, value in in_thread(work, "playground-prepare", preload.PRELOAD.background_message):
        yield ("ready" if kind == "done" else kind), value


def _done_message(live: LiveRun, lang: str = "en") -> tuple[str, str]:
    trace = live.trace
    s = trace.summary
    known = ("eos", "length", "stopped", "timeout")
    reason = t(f"status.finish.{trace.finish_reason}", lang) if trace.finish_reason in known else trace.finish_reason
    message = t("status.done", lang, tokens=tn("status.tokens", s.new_tokens, lang),
                steps=tn("status.steps", s.steps, lang), s=number(s.elapsed_s, lang), reason=reason)
    note = localize(trace.env.get("precision", trace.env.get("dtype", "")), lang)
    if trace.paused_ms:
        note += t("status.paused_note", lang, s=number(trace.paused_ms / 1000, lang, ".1f"))
    if trace.lossy:
        lossy = get_method(trace.method).lossy_reason(trace.params, bool(trace.decoding.get("sample")))
        note += t("status.lossy", lang, reason=localize(lossy, lang) or t("status.lossy_default", lang))
    return message, note


@gpu
def generate(
    prompt: str,
    target: str = DEFAULT_TARGET,
    assistant: str | None = None,
    method: str = DEFAULT_METHOD,
    params: Any = None,
    max_new_tokens: float = MAX_NEW_TOKENS["page"],
    sample: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: float = 0,
    seed: float = 0,
    chat: str = "auto",
    dtype: str = "auto",
    check_plain: Any = False,
    preset: str | None = None,
    request: gr.Request = None,  # type: ignore[assignment]
) -> Iterator[tuple[Any, ...]]:
    """Stream one generation: (tokens HTML, figures, acceptance chart, timing chart, status, trace file, trace).

    Not an MCP tool (its outputs are the page's HTML): agents get `mcp_tools.generate`. The last output is the
    finished run's `Trace` for the page's other tabs (a `gr.State`: not part of the API's answer), None while a
    run starts or when it fails.

    Every failure becomes a message in the page (and a warning toast); the server keeps serving.
    """
    from ..engine import LiveRun, user_message

    key = _session_key(request)
    lang = language_of(request)
    session = _Session()
    with _SESSIONS_LOCK:
        _SESSIONS[key] = session
    trace_files.drop_session_trace(key)
    stream = render.TokenStream(lang)
    live: LiveRun | None = None
    no_file = gr.update(value=None, visible=False)

    def error_outputs(exc: BaseException) -> tuple[Any, ...]:
        message = user_message(exc, t("error.what.run", lang), lang)
        gr.Warning(html.escape(message))  # toasts render HTML: the visitor's input must stay text, as in the status box
        steps = live.trace.steps if live is not None else []
        tokens = stream.html() if len(stream) else render.empty_tokens(t("status.no_output", lang), lang)
        fig_a, fig_t = charts.figures(steps, lang=lang)
        stats = render.stats_html(live.trace.summary if live is not None else None, lang=lang)
        return tokens, stats, fig_a, fig_t, render.status_html(message, "error"), no_file, None

    try:
        run_request = build_request(prompt, target, assistant, method, params, max_new_tokens, sample,
                                    temperature, top_p, top_k, seed, chat, dtype, preset)
        check = parse_flag(check_plain, "check_plain")
        yield (render.empty_tokens(t("status.preparing_short", lang), lang), render.stats_html(None, lang=lang),
               *charts.figures([], lang=lang),
               render.status_html(t("status.preparing", lang, target=run_request.target), "running"), no_file, None)
        prepared = None
        for kind, value in _prepare_in_thread(run_request, session):
            if kind == "progress":
                yield (gr.skip(), gr.skip(), gr.skip(), gr.skip(), render.status_html(localize(value, lang), "running"),
                       gr.skip(), gr.skip())
            else:
                prepared = value
        assert prepared is not None
        if session.stop.is_set():
            stopped = t("status.stopped_before", lang)
            yield (render.empty_tokens(stopped, lang), gr.skip(), gr.skip(), gr.skip(),
                   render.status_html(stopped, "idle"), no_file, None)
            return
        pace = presenter.pace_of(key)
        live = LiveRun(prepared, pace=pace)
        if pace is not None:
            live.idle_s = IDLE_S
        session.live = live
        status = render.status_html(
            t("status.generating", lang, method=prepared.method.localized(lang).title, target=run_request.target),
            "running",
            localize(prepared.precision.reason, lang))
        yield (render.empty_tokens(t("render.waiting", lang), lang), gr.skip(), gr.skip(), gr.skip(), status, gr.skip(),
               gr.skip())
        last_update, last_chart = 0.0, time.perf_counter()
        shown, paused_shown, last_beat = 0, False, last_chart
        with contextlib.closing(iter(live)) as steps:  # closing it (client gone) ends the worker
            for step in steps:
                now = time.perf_counter()
                if step is None:  # the run stands paused (or its step is long): `IDLE_S`
                    waiting = pace is not None and pace.waiting
                    if len(stream) > shown or (waiting and not paused_shown):
                        paused = (presenter.paused_status(len(stream), lang) if waiting
                                  else status if paused_shown else gr.skip())  # paused, or going on again
                        shown, paused_shown, last_update, last_beat = len(stream), waiting, now, now
                        yield (stream.html(), render.stats_html(live.trace.summary, lang=lang), gr.skip(), gr.skip(),
                               paused, gr.skip(), gr.skip())
                    elif now - last_beat >= BEAT_S:
                        last_beat = now
                        yield gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
                    continue
                stream.add(step)
                if now - last_update < UPDATE_EVERY_S:
                    continue
                last_update = last_beat = now
                shown = len(stream)
                resumed = status if paused_shown else gr.skip()  # the paused run goes on
                paused_shown = False
                if now - last_chart >= CHART_EVERY_S:
                    last_chart = now
                    fig_a, fig_t = charts.figures(live.trace.steps, lang=lang)
                else:
                    fig_a = fig_t = gr.skip()
                yield (stream.html(), render.stats_html(live.trace.summary, lang=lang), fig_a, fig_t, resumed,
                       gr.skip(), gr.skip())
        message, note = _done_message(live, lang)
        # The steps' q and p were filled in when generation ended (`LiveRun._figures_later`): the final view has them.
        stream = render.TokenStream(lang)
        stream.extend(live.trace.steps)
        path = trace_files.save_trace(live.trace, key)
        plain = None
        if check and prepared.method.drafts and live.trace.finish_reason in ("eos", "length"):
            checking = render.status_html(t("status.checking_plain", lang), "running")
            yield (stream.html(), render.stats_html(live.trace.summary, lang=lang), gr.skip(), gr.skip(), checking,
                   gr.skip(), gr.skip())
            result = None

            def check_plain_run(progress: Callable[[str], None]) -> Any:
                progress("checking")  # the heartbeat repeats it, so a visitor who leaves stops the check too
                return bench.check_against_plain(prepared, live.trace)

            for kind, value in in_thread(check_plain_run, "playground-check-plain"):
                if kind == "progress":
                    yield gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
                else:
                    result = value
            plain = (result.speedup, result.identical, result.verdict)
        yield (stream.html(), render.stats_html(live.trace.summary, plain, lang=lang),
               *charts.figures(live.trace.steps, lang=lang), render.status_html(message, "done", note),
               gr.update(value=path, visible=True, label=t("status.download", lang, name=Path(path).name)),
               live.trace)
    except Exception as exc:  # one clear message in the page; the server keeps serving
        yield error_outputs(exc)
    finally:
        with _SESSIONS_LOCK:
            if _SESSIONS.get(key) is session:
                del _SESSIONS[key]


# --------------------------------------------------------------------------- the view


def _target_choices() -> list[tuple[str, str]]:
    online = hub_reachable()
    choices = []
    for key, entry in CATALOGUE.items():
        label = entry.label if entry.source == "bundled" or online else f"{entry.label} (needs the Hub)"
        choices.append((label, key))
    return choices


@dataclass
class GenerateView:
    """The main view's controls that the other tabs read, and the run's event and trace for the after-run views."""

    prompt: gr.Textbox
    target: gr.Dropdown
    assistant: gr.Dropdown
    method: gr.Dropdown
    dtype: gr.Radio
    chat: gr.Radio
    max_new_tokens: gr.Slider
    preset: gr.Dropdown
    params_json: gr.JSON
    param_components: list[Any]
    api_inputs: list[Any]  # `generate`'s first 13 inputs, the API's order
    run_event: Any  # the click → generate chain: the page hangs the after-run views on it
    run_trace: gr.State  # the finished run's Trace (None while a run starts, or after a failed one)
    settings_for_code: list[Any] = field(default_factory=list)  # api_inputs, then the preset


def build_generate(demo: gr.Blocks) -> GenerateView:
    """The settings column and the output column, with their events (call inside the page's `gr.Blocks`)."""
    settings = get_settings()
    specs = target_param_specs(DEFAULT_TARGET)  # the controls as a run on the default target sees them
    default_method = METHODS[DEFAULT_METHOD]
    model_choices = _target_choices()
    with gr.Row(equal_height=False):
        with gr.Column(scale=2, min_width=320, elem_id="pg-settings-col"):
            preset = preset_picker.picker(hub_reachable())
            preset_info = gr.HTML("", elem_id="pg-preset-info")
            target = gr.Dropdown(
                choices=model_choices, value=DEFAULT_TARGET, label=L("ui.target.label"), allow_custom_value=True,
                info=L("ui.target.info"), elem_id="pg-target",
            )
            method = gr.Dropdown(
                choices=[(m.title, name) for name, m in METHODS.items()], value=DEFAULT_METHOD,
                label=L("ui.method.label"), elem_id="pg-method",
            )
            method_summary = gr.Markdown(default_method.summary, elem_id="pg-method-summary")
            with gr.Accordion(L("ui.how_it_works"), open=False):
                lecture = gr.HTML(lecture_html(default_method))
            assistant = gr.Dropdown(
                choices=model_choices, value=None, label=L("ui.assistant.label"), allow_custom_value=True,
                visible=default_method.needs_assistant, elem_id="pg-assistant",
            )
            default_params = {p.name for p in default_method.params}
            param_components = [param_component(p, name in default_params) for name, p in specs.items()]
            with gr.Accordion(L("ui.decoding"), open=False):
                sample = gr.Checkbox(value=False, label=L("ui.sample"), elem_id="pg-sample")
                temperature = gr.Slider(0.05, 2.0, value=1.0, step=0.05, label=L("ui.temperature"), visible=False)
                top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label=L("ui.top_p"), visible=False)
                top_k = gr.Slider(0, 200, value=0, step=1, label=L("ui.top_k"), info=L("ui.top_k.info"), visible=False)
                seed = gr.Number(value=0, precision=0, label=L("ui.seed"))
                chat = gr.Radio(list(CHAT_CHOICES), value="auto", label=L("ui.chat.label"),
                                info=L("ui.chat.info"))
            dtype = gr.Radio(list(DTYPES), value=default("dtype"), label=L("ui.dtype.label"),
                             info=t("ui.dtype.info", what=host_precision_note()), elem_id="pg-dtype")
            max_new_tokens = gr.Slider(1, settings.max_new_tokens, value=MAX_NEW_TOKENS["page"], step=1, label=L("ui.max_new_tokens"),
                                       elem_id="pg-max-new-tokens")
            params_json = gr.JSON(value={}, visible=False, label="params")

        with gr.Column(scale=3, min_width=420):
            prompt = gr.Textbox(value=None, label=L("ui.prompt.label"), lines=7, max_lines=20, elem_id="pg-prompt",
                                placeholder=L("ui.prompt.placeholder"))
            examples = gr.Radio(example_names("en"), value=None, label=L("ui.examples"), elem_id="pg-examples")
            example_note = gr.HTML("", elem_id="pg-example-note")
            with gr.Row():
                generate_btn = gr.Button(L("ui.generate"), variant="primary", elem_id="pg-generate")
                stop_btn = gr.Button(L("ui.stop"), variant="stop", elem_id="pg-stop")
                link_btn = gr.Button(L("ui.link.make"), size="sm", elem_id="pg-link-make")
            presenter.build_pace("pg-output")
            check_plain = gr.Checkbox(
                value=False, label=L("ui.check_plain.label"), elem_id="pg-check-plain",
                info=L("ui.check_plain.info"))
            link_box = gr.Textbox(label=L("ui.link.box"), interactive=False,
                                  buttons=["copy"], elem_id="pg-link", visible=False, lines=1)  # shown with a link
            link_status = gr.HTML("", elem_id="pg-link-status")
            status = gr.HTML(preload.initial_status(), elem_id="pg-status-box")
            stats = gr.HTML(render.stats_html(None), elem_id="pg-stats-box")
            legend = gr.HTML(render.legend_html(), elem_id="pg-legend-box")
            with gr.Row(equal_height=False):
                tokens = gr.HTML(render.empty_tokens(), elem_id="pg-output", max_height=560, autoscroll=True,
                                 js_on_load=microscope_view.PICK_JS, scale=3, min_width=320)
                micro_panel = gr.HTML(microscope_view.empty_panel(), elem_id="pg-micro-box", scale=2, min_width=280,
                                      js_on_load=None)
            run_tables = gr.HTML("", elem_id="pg-run-tables")
            with gr.Row():
                acceptance_plot = gr.Plot(charts.acceptance_figure([]), show_label=False,
                                          elem_id="pg-chart-acceptance")
                timing_plot = gr.Plot(charts.timing_figure([]), show_label=False, elem_id="pg-chart-timing")
            trace_file = gr.DownloadButton(L("ui.download"), value=None, visible=False,
                                           elem_id="pg-download", size="sm")
            handout_file = handout_button.button()
    run_trace = gr.State(None)
    run_started = gr.State(False)  # set by the first click: from then on the status box is the run's

    method.change(guarded(on_method_change), [method, target, assistant],
                  [method_summary, lecture, assistant, *param_components], **PRIVATE)
    # The controls that depend on the target (early exit's layer): its range always, its own default when the
    # visitor picks it (a link or a guide example sets its own values, which a change keeps).
    target.change(guarded(on_target_change), [target, *param_components], param_components, **PRIVATE)
    target.input(guarded(on_target_pick), target, param_components, **PRIVATE)
    sample.change(guarded(on_sample_change), sample, [temperature, top_p, top_k], **PRIVATE)
    examples.change(guarded(on_example), examples, prompt, **PRIVATE)
    prompt.change(guarded(example_after_prompt), [prompt, examples], examples, **PRIVATE)
    examples.change(guarded(example_note_html), examples, example_note, **PRIVATE)
    api_inputs = [prompt, target, assistant, method, params_json, max_new_tokens, sample, temperature, top_p,
                  top_k, seed, chat, dtype]
    controls = [target, assistant, method, sample, temperature, top_p, top_k, seed, chat, max_new_tokens]
    applied_preset = preset_picker.wire(preset, preset_info, controls, prompt, param_components, list(specs))
    preset_picker.wire_precision(applied_preset, dtype)
    links.wire(link_btn, link_box, preset, prompt, controls, dtype, param_components)
    outputs = [tokens, stats, acceptance_plot, timing_plot, status, trace_file, run_trace]
    run_event = generate_btn.click(guarded(with_language(on_generate_click)), [method, *param_components],
                                   [params_json, status, run_started], **PRIVATE).then(
        generate, [*api_inputs, check_plain, preset], outputs, api_name="generate", show_progress="minimal",
        show_progress_on=[status],
        # The values reach `build_request` and the engine's checks as sent, so a bad one from the API
        # (a word for a number, a value off a slider's range) gets the same clear message in the
        # status as in the CLI, not Gradio's generic refusal.
        preprocess=False,
    )
    stop_btn.click(stop, None, status, **PRIVATE)
    tokens.click(guarded(open_token), run_trace, micro_panel, **PRIVATE)
    run_event.then(guarded(after_run_tables), run_trace, [run_tables, micro_panel], **PRIVATE)
    handout_button.wire(generate_btn, run_event, run_trace, handout_file)

    timer = gr.Timer(1.0, active=preload.PRELOAD.running)
    timer.tick(guarded(preload.poll_preload), run_started, [status, timer], **PRIVATE)
    # Fill the prompt after the page loads, so the API's `prompt` stays required.
    # Then a shareable link's settings, checked by the API's request builder (links.restore).
    demo.load(on_page_load, None, [prompt, examples, status, timer], **PRIVATE).then(
        guarded(localize_view), method,
        [method, method_summary, lecture, legend, tokens, stats, acceptance_plot, timing_plot, dtype, micro_panel],
        **PRIVATE).then(
        guarded(preset_picker.localized_choices), None, preset, **PRIVATE).then(
        guarded(restore_link), None, [preset, preset_info, *controls, prompt, dtype, link_status, *param_components,
                                      applied_preset], **PRIVATE)
    return GenerateView(prompt=prompt, target=target, assistant=assistant, method=method, dtype=dtype, chat=chat,
                        max_new_tokens=max_new_tokens, preset=preset, params_json=params_json,
                        param_components=param_components, api_inputs=api_inputs, run_event=run_event,
                        run_trace=run_trace, settings_for_code=[*api_inputs, preset])
