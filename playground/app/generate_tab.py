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
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterator, Mapping

import gradio as gr

from .. import bench, charts, microscope_view, render
from ..compat import gradio_internals
from ..examples import BY_NAME, localized_examples
from ..i18n import DEFAULT_LANGUAGE, LANGUAGES, localize, number, t, tn
from ..gpu import gpu
from ..methods import METHODS, get_method
from ..models import CATALOGUE, DEFAULT_TARGET, host_precision_note, hub_reachable, model_label
from ..request import MAX_NEW_TOKENS, RunRequest, default, method_for
from ..settings import get_settings
from . import follow, handout_button, links, preload, presenter, preset_picker, trace_files
from .background import in_thread
from .guard import PRIVATE, guarded, session_key, url_query
from .language import L, language_of, with_language
from .methods_tab import lecture_html
from .outputs import PARAM, Inputs, Outputs
from .run_request import (CHAT_CHOICES, DEFAULT_METHOD, DTYPES, METHOD_PARAMS, REQUEST_FIELDS, build_request,
                          collect_params, on_target_change, on_target_pick, param_component, param_specs, param_update,
                          parse_flag, suggest_assistant, target_param_specs)

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
# ... and the new-token count each one's task takes in its language (`Example.new_tokens`), where it has one.
EXAMPLE_TOKENS: dict[str, int] = {e.name: n for lang in LANGUAGES for e in localized_examples(lang)
                                  if (n := e.new_tokens_in(lang)) is not None}
DEFAULT_EXAMPLE = "Edit code"


def example_names(lang: str) -> list[str]:
    return [e.name for e in localized_examples(lang)]


# --------------------------------------------------------------------------- the outputs (`outputs.Outputs`)

PARAMS = list(param_specs())  # every method's parameter controls, by their generate() names
RUN = Outputs("tokens", "stats", "acceptance", "timing", "status", "trace_file", "run_trace", "run_line", "narration")  # `generate`'s
METHOD_VIEWS = Outputs("method_summary", "lecture", "assistant", params=PARAMS)
CLICKED = Outputs("params_json", "status", "run_started")
SAMPLING = Outputs("temperature", "top_p", "top_k")
TABLES = Outputs("run_tables", "micro_panel")
PAGE_LOAD = Outputs("prompt", "examples", "status", "timer")
LOCALIZED = Outputs("method", "target", "assistant", "method_summary", "lecture", "legend", "tokens", "stats", "acceptance", "timing", "dtype",
                    "micro_panel")
LINKED = links.restored(PARAMS)  # what a shareable link sets
# Handlers' inputs, by their parameters' names (`outputs.Inputs`); the page's map names the components.
GENERATE = Inputs(*REQUEST_FIELDS, "check_plain", "preset")  # the API's `generate`, in the API's order
METHOD_CHOSEN = Inputs("method_name", "target", "assistant")  # `on_method_change`'s
TARGET_PARAMS = Inputs("target", params=PARAMS)  # `on_target_change`'s
PROMPT_EXAMPLE = Inputs("prompt", "name")  # `example_after_prompt`'s
RESTORED = LINKED + preset_picker.APPLIED  # ... and the example picker's `applied` with it


# --------------------------------------------------------------------------- the settings' handlers


def on_method_change(method_name: str, target: str | None, assistant: str | None,
                     request: gr.Request = None) -> tuple[Any, ...]:
    """Explanation, assistant field and parameter controls for the chosen method (in the visitor's language)."""
    lang = language_of(request)
    method = method_for(method_name, target).localized(lang)  # the controls bounded by the target's layers
    by_name = {p.name: p for p in method.params}
    if method.needs_assistant:
        suggested = suggest_assistant(method, target, assistant)
        preload.PRELOAD.convert_assistant(suggested)  # a bundled one is converted while the user sets up the run
        shown = gr.update(visible=True, value=suggested, info=t(f"ui.assistant.info.{method.assistant}", lang))
    else:
        shown = gr.update(visible=False)
    return METHOD_VIEWS(Outputs.params_of({name: param_update(by_name.get(name)) for name in PARAMS}),
                        method_summary=method.summary, lecture=lecture_html(method, lang), assistant=shown)


def on_generate_click(method_name: str, param_values: Mapping[str, Any], *,
                      lang: str = DEFAULT_LANGUAGE) -> tuple[Any, ...]:
    """Runs at once on a click (outside the queue): gather the parameters, say the run is queued (in `lang`; the
    page passes the visitor's, see `with_language`), and mark the status box as the run's (so the start-up
    load's poll stops writing to it)."""
    return CLICKED(params_json=collect_params(method_name, param_values),
                   status=render.status_html(t("status.queued", lang), "running"), run_started=True)


def on_sample_change(sample: bool) -> tuple[Any, ...]:
    return SAMPLING({name: gr.update(visible=bool(sample)) for name in SAMPLING.names})


def on_example(name: str | None) -> Any:  # any language's example name
    return EXAMPLES.get(name or "", gr.skip())


def example_tokens(name: str | None) -> Any:
    """A visitor's pick: the new-token count the example's task takes (the slider left as it is where it has none;
    a page load or a link that sets the picker leaves it too: this listens to the visitor's input only)."""
    tokens = EXAMPLE_TOKENS.get(name or "")
    return gr.skip() if tokens is None else tokens


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
    stream: render.TokenStream | None = None  # the tokens shown so far (a failure keeps them in view)
    replaced: bool = False  # ended because its visitor started another run (one run per visitor)

    def end(self, replaced: bool = False) -> None:
        """Ask the run to end after its current step (a paused one at once)."""
        self.replaced = self.replaced or replaced
        self.stop.set()
        if self.live is not None:
            self.live.stop()


_SESSIONS: dict[str, _Session] = {}
_SESSIONS_LOCK = threading.Lock()


def stop(request: gr.Request = None) -> str:
    """Ask this session's run to end after the current step (what was produced is kept)."""
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(session_key(request))
    if session is None:
        return render.status_html(t("status.nothing_running", language_of(request)), "idle")
    session.end()
    return gr.skip()


# --------------------------------------------------------------------------- the step microscope


def open_token(trace: Any, evt: gr.EventData, request: gr.Request = None) -> str:
    """A click on a token of the output: its panel (the finished run's trace, or while it runs the live one, whose
    step gets its figures now: a run shown as it comes computes them when generation ends, `LiveRun.figures_now`)."""
    data = gradio_internals.event_data(evt)
    if trace is None:
        with _SESSIONS_LOCK:
            session = _SESSIONS.get(session_key(request))
        live = session.live if session is not None else None
        trace = live.trace if live is not None else None
        followed = follow.followed_panel(session_key(request), data, language_of(request)) if live is None else None
        if followed is not None:  # the visitor follows the presenter's run (`follow`)
            return followed
        step = data.get("step") if isinstance(data, dict) else None
        if live is not None and isinstance(step, int) and not isinstance(step, bool):
            live.figures_now(step)
    return microscope_view.panel_for_click(trace, data, language_of(request))


def after_run_tables(trace: Any, request: gr.Request = None) -> tuple[Any, ...]:
    """After a run: the per-run tables (what the drafter got wrong) and the panel's invitation, in the page's language."""
    lang = language_of(request)
    return TABLES(run_tables=microscope_view.run_tables_html(trace, lang),
                  micro_panel=microscope_view.empty_panel(lang=lang))


# --------------------------------------------------------------------------- page load


def on_page_load(request: gr.Request = None) -> tuple[Any, ...]:
    """Fill in the default example (here rather than as the textbox's initial value, so the API's
    `prompt` stays a required parameter) and show the loading state; in the visitor's language."""
    lang = language_of(request)
    example = BY_NAME[DEFAULT_EXAMPLE].localized(lang)
    examples = gr.update(choices=example_names(lang), value=example.name) if lang != "en" else example.name
    return PAGE_LOAD(prompt=example.text, examples=examples, status=preload.initial_status(lang),
                     timer=gr.update(active=preload.PRELOAD.running))


def localize_view(method_name: str, request: gr.Request = None) -> tuple[Any, ...]:
    """The main view's server-written parts in the visitor's language (a page in English keeps them as built):
    the method picker's titles, the method's summary and lecture, the legend, the empty output, stats and charts,
    the precision's note, the microscope's invitation."""
    lang = language_of(request)
    if lang == "en":
        return LOCALIZED.skip()
    known = isinstance(method_name, str) and method_name in METHODS  # a client may send anything here
    method = get_method(method_name if known else DEFAULT_METHOD).localized(lang)
    models = gr.update(choices=_target_choices(lang))
    return LOCALIZED(_charts([], lang), method=gr.update(choices=[(m.localized(lang).title, name) for name, m in METHODS.items()]),
                     target=models, assistant=models,
                     method_summary=method.summary, lecture=lecture_html(method, lang),
                     legend=render.legend_html(lang), tokens=render.empty_tokens(lang=lang),
                     stats=render.stats_html(None, lang=lang),
                     dtype=gr.update(info=t("ui.dtype.info", lang, what=localize(host_precision_note(), lang))),
                     micro_panel=microscope_view.empty_panel(lang=lang))


def restore_link(request: gr.Request) -> tuple[Any, ...]:
    """`RESTORED`: the settings of a shareable link (the page's URL query), validated as the API's values are; and
    what the guide-example picker's `applied` state becomes (a restored example is applied, as a pick's is)."""
    return restore_query(url_query(request), language_of(request))


def restore_query(query: dict[str, str], lang: str) -> tuple[Any, ...]:
    """`RESTORED` from a link's query (the page's address, or a followed run's settings: `follow`)."""
    updates = LINKED.read(links.restore(query, PARAMS, lang))
    return RESTORED(updates, applied=preset_picker.applied_after(updates["preset"]))


# --------------------------------------------------------------------------- the streaming handler


def _prepare_in_thread(request: RunRequest, session: _Session) -> Iterator[tuple[str, Any]]:
    """Run `prepare` in a thread; yield ("progress", message) while it loads, then ("ready", prepared)."""
    from ..engine import prepare

    work = lambda progress: prepare(request, progress=progress)  # noqa: E731
    # While the run waits for the start-up load or a background conversion, say how that is going.
    for kind, value in in_thread(work, "playground-prepare", preload.PRELOAD.background_message):
        yield ("ready" if kind == "done" else kind), value


def _done_message(live: LiveRun, lang: str = "en", replaced: bool = False) -> tuple[str, str]:
    trace = live.trace
    s = trace.summary
    known = ("eos", "length", "stopped", "timeout")
    reason = t(f"status.finish.{trace.finish_reason}", lang) if trace.finish_reason in known else trace.finish_reason
    if trace.finish_reason == "idle":  # a step-by-step run nobody stepped on for PLAYGROUND_PAUSE_IDLE_S
        reason = t("status.finish.idle", lang, s=number(live.pause_idle_s, lang, "g"))
    elif trace.finish_reason == "stopped" and replaced:
        reason = t("status.finish.replaced", lang)
    message = t("status.done", lang, tokens=tn("status.tokens", s.new_tokens, lang),
                steps=tn("status.steps", s.steps, lang), s=number(s.elapsed_s, lang), reason=reason)
    note = localize(trace.env.get("precision", trace.env.get("dtype", "")), lang)
    if trace.paused_ms:
        note += t("status.paused_note", lang, s=number(trace.paused_ms / 1000, lang, ".1f"))
    if trace.lossy:
        lossy = get_method(trace.method).lossy_reason(trace.params, bool(trace.decoding.get("sample")))
        note += t("status.lossy", lang, reason=localize(lossy, lang) or t("status.lossy_default", lang))
    return message, note


def _charts(steps: list[Any], lang: str) -> dict[str, Any]:
    return dict(zip(("acceptance", "timing"), charts.figures(steps, lang=lang)))


NO_FILE = dict(value=None, visible=False)  # the download button while no run's trace is there


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
    request: gr.Request = None,
) -> Iterator[tuple[Any, ...]]:
    """Stream one generation: `RUN` (tokens HTML, figures, acceptance chart, timing chart, status, trace file, trace).

    Not an MCP tool (its outputs are the page's HTML): agents get `mcp_tools.generate`. The last output is the
    finished run's `Trace` for the page's other tabs (a `gr.State`: not part of the API's answer), None while a
    run starts or when it fails.

    Every failure becomes a message in the page (and a warning toast); the server keeps serving.
    """
    key = session_key(request)
    lang = language_of(request)
    session = _Session(stream=render.TokenStream(lang))
    with _SESSIONS_LOCK:  # one run per visitor: a second Generate from the same page replaces the first
        earlier = _SESSIONS.get(key)
        _SESSIONS[key] = session
    if earlier is not None:
        earlier.end(replaced=True)
    trace_files.drop_session_trace(key)
    try:
        run_request = build_request(prompt=prompt, target=target, assistant=assistant, method=method, params=params,
                                    max_new_tokens=max_new_tokens, sample=sample, temperature=temperature, top_p=top_p,
                                    top_k=top_k, seed=seed, chat=chat, dtype=dtype, preset=preset)
        yield from _run(run_request, parse_flag(check_plain, "check_plain"), session, key, lang)
    except Exception as exc:  # one clear message in the page; the server keeps serving
        yield _failed(exc, session, lang)
    finally:
        with _SESSIONS_LOCK:
            if _SESSIONS.get(key) is session:
                del _SESSIONS[key]


def _run(run_request: RunRequest, check: bool, session: _Session, key: str, lang: str) -> Iterator[tuple[Any, ...]]:
    """`generate`'s phases: prepare (load, validate), stream the steps, then the finished view (after the check
    against plain decoding where asked)."""
    yield RUN(_charts([], lang), tokens=render.empty_tokens(t("status.preparing_short", lang), lang),
              stats=render.stats_html(None, lang=lang),
              status=render.status_html(t("status.preparing", lang, target=run_request.target), "running"),
              trace_file=gr.update(**NO_FILE), run_trace=None, run_line="", narration="")
    prepared = None
    for kind, value in _prepare_in_thread(run_request, session):
        if kind == "progress":
            yield RUN(status=render.status_html(localize(value, lang), "running"))
        else:
            prepared = value
    assert prepared is not None
    if session.stop.is_set():
        stopped = t("status.stopped_before", lang)
        yield RUN(tokens=render.empty_tokens(stopped, lang), status=render.status_html(stopped, "idle"),
                  trace_file=gr.update(**NO_FILE), run_trace=None)
        return
    live = yield from _streamed(prepared, session, key, run_request.target, lang)
    message, note = _done_message(live, lang, session.replaced)
    # The steps' q and p were filled in when generation ended (`LiveRun._figures_later`): the final view has them.
    session.stream = stream = render.TokenStream(lang)
    stream.extend(live.trace.steps)
    path = trace_files.save_trace(live.trace, key)
    plain = None
    if check and prepared.method.drafts and live.trace.finish_reason in ("eos", "length"):
        plain = yield from _checked_against_plain(prepared, live, stream, lang)
    yield RUN(_charts(live.trace.steps, lang), tokens=stream.html(),
              stats=render.stats_html(live.trace.summary, plain, lang=lang),
              status=render.status_html(message, "done", note),
              trace_file=gr.update(value=path, visible=True, label=t("status.download", lang, name=Path(path).name)),
              run_trace=live.trace, narration=_narration(live, lang))


def _streamed(prepared: Any, session: _Session, key: str, target: str,
              lang: str) -> Generator[tuple[Any, ...], None, LiveRun]:
    """The run's steps as they come (at the presenter's pace, if one is set); returns the finished `LiveRun`."""
    from ..engine import LiveRun

    pace = presenter.pace_of(key)
    live = LiveRun(prepared, pace=pace)
    if pace is not None:
        live.idle_s = IDLE_S
    session.live = live
    follow.publish(key, live)  # the presenter's class, if they opened one, follows this run
    stream = session.stream
    assert stream is not None
    status = render.status_html(t("status.generating", lang, method=prepared.method.localized(lang).title,
                                  target=target), "running", localize(prepared.precision.reason, lang))
    yield RUN(tokens=render.empty_tokens(t("render.waiting", lang), lang), status=status,
              run_line=presenter.run_line_html(live.trace, lang))
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
                    yield RUN(tokens=stream.html(), stats=render.stats_html(live.trace.summary, lang=lang),
                              status=paused, narration=_narration(live, lang))
                elif now - last_beat >= BEAT_S:
                    last_beat = now
                    yield RUN.skip()
                continue
            stream.add(step)
            if now - last_update < UPDATE_EVERY_S:
                continue
            last_update = last_beat = now
            shown = len(stream)
            resumed = status if paused_shown else gr.skip()  # the paused run goes on
            paused_shown = False
            charted = {}
            if now - last_chart >= CHART_EVERY_S:
                last_chart = now
                charted = _charts(live.trace.steps, lang)
            yield RUN(charted, tokens=stream.html(), stats=render.stats_html(live.trace.summary, lang=lang),
                      status=resumed, narration=_narration(live, lang))
    return live


def _narration(live: LiveRun, lang: str) -> str:
    """The latest step in words (under the output)."""
    steps = live.trace.steps
    return presenter.narration_html(steps[-1] if steps else None, live.trace.method, lang)


def _checked_against_plain(prepared: Any, live: LiveRun, stream: render.TokenStream,
                           lang: str) -> Generator[tuple[Any, ...], None, tuple[Any, ...]]:
    """The same settings run without drafting (`check_plain`): returns (speedup, identical, verdict)."""
    checking = render.status_html(t("status.checking_plain", lang), "running")
    yield RUN(tokens=stream.html(), stats=render.stats_html(live.trace.summary, lang=lang), status=checking)
    result = None

    def check_plain_run(progress: Callable[[str], None]) -> Any:
        progress("checking")  # the heartbeat repeats it, so a visitor who leaves stops the check too
        return bench.check_against_plain(prepared, live.trace)

    for kind, value in in_thread(check_plain_run, "playground-check-plain"):
        if kind == "progress":
            yield RUN.skip()
        else:
            result = value
    assert result is not None
    return result.speedup, result.identical, result.verdict


def _failed(exc: BaseException, session: _Session, lang: str) -> tuple[Any, ...]:
    """A failed run's view: the message in the status and a warning toast, what it produced so far kept."""
    from ..errors import user_message

    message = user_message(exc, t("error.what.run", lang), lang)
    gr.Warning(html.escape(message))  # toasts render HTML: the visitor's input must stay text, as in the status box
    live, stream = session.live, session.stream
    steps = live.trace.steps if live is not None else []
    tokens = stream.html() if stream is not None and len(stream) else render.empty_tokens(t("status.no_output", lang),
                                                                                          lang)
    return RUN(_charts(steps, lang), tokens=tokens,
               stats=render.stats_html(live.trace.summary if live is not None else None, lang=lang),
               status=render.status_html(message, "error"), trace_file=gr.update(**NO_FILE), run_trace=None)


# --------------------------------------------------------------------------- the view


def _target_choices(lang: str = "en") -> list[tuple[str, str]]:
    """The model pickers' choices: each catalogue model by its name in `lang`, a Hub model marked when the Hub is out
    of reach (`models.model_label`)."""
    offline = not hub_reachable()
    return [(model_label(key, lang, offline=offline), key) for key in CATALOGUE]


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
    settings_for_code: dict[str, Any] = field(default_factory=dict)  # by `build_request`'s names, and "preset"


def build_generate(demo: gr.Blocks) -> GenerateView:
    """The settings column and the output column, with their events (call inside the page's `gr.Blocks`)."""
    specs = target_param_specs(DEFAULT_TARGET)  # the controls as a run on the default target sees them
    with gr.Row(equal_height=False):
        ui = _settings_column(specs)
        ui.update(_output_column())
    ui["run_trace"] = gr.State(None)
    ui["run_started"] = gr.State(False)  # set by the first click: from then on the status box is the run's
    ui["timer"] = gr.Timer(1.0, active=preload.PRELOAD.running)
    return _wire(demo, ui, [ui[name] for name in METHOD_VIEWS.names if name.startswith(PARAM)])


def _settings_column(specs: dict[str, Any]) -> dict[str, Any]:
    """The run's settings, by output name (a method parameter's control under `param:<name>`)."""
    settings = get_settings()
    default_method = METHODS[DEFAULT_METHOD]
    model_choices = _target_choices()
    ui: dict[str, Any] = {}
    with gr.Column(scale=2, min_width=320, elem_id="pg-settings-col"):
        ui["preset"] = preset_picker.picker(hub_reachable())
        ui["preset_info"] = gr.HTML("", elem_id="pg-preset-info")
        ui["target"] = gr.Dropdown(
            choices=model_choices, value=DEFAULT_TARGET, label=L("ui.target.label"), allow_custom_value=True,
            info=L("ui.target.info"), elem_id="pg-target",
        )
        ui["method"] = gr.Dropdown(
            choices=[(m.title, name) for name, m in METHODS.items()], value=DEFAULT_METHOD,
            label=L("ui.method.label"), elem_id="pg-method",
        )
        ui["method_summary"] = gr.Markdown(default_method.summary, elem_id="pg-method-summary")
        with gr.Accordion(L("ui.how_it_works"), open=False):
            ui["lecture"] = gr.HTML(lecture_html(default_method))
        ui["assistant"] = gr.Dropdown(
            choices=model_choices, value=None, label=L("ui.assistant.label"), allow_custom_value=True,
            visible=default_method.needs_assistant, elem_id="pg-assistant",
        )
        default_params = {p.name for p in default_method.params}
        ui.update(Outputs.param_components(specs, [param_component(p, name in default_params)
                                                   for name, p in specs.items()]))
        with gr.Accordion(L("ui.decoding"), open=False):
            ui["sample"] = gr.Checkbox(value=False, label=L("ui.sample"), elem_id="pg-sample")
            ui["temperature"] = gr.Slider(0.05, 2.0, value=1.0, step=0.05, label=L("ui.temperature"), visible=False)
            ui["top_p"] = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label=L("ui.top_p"), visible=False)
            ui["top_k"] = gr.Slider(0, 200, value=0, step=1, label=L("ui.top_k"), info=L("ui.top_k.info"),
                                    visible=False)
            ui["seed"] = gr.Number(value=0, precision=0, label=L("ui.seed"))
            ui["chat"] = gr.Radio(list(CHAT_CHOICES), value="auto", label=L("ui.chat.label"), info=L("ui.chat.info"))
        ui["dtype"] = gr.Radio(list(DTYPES), value=default("dtype"), label=L("ui.dtype.label"),
                               info=t("ui.dtype.info", what=host_precision_note()), elem_id="pg-dtype")
        ui["max_new_tokens"] = gr.Slider(1, settings.max_new_tokens, value=MAX_NEW_TOKENS["page"], step=1,
                                         label=L("ui.max_new_tokens"), elem_id="pg-max-new-tokens")
        ui["params_json"] = gr.JSON(value={}, visible=False, label="params")
    return ui


def _output_column() -> dict[str, Any]:
    """The prompt, the buttons and the run's live views, by output name."""
    ui: dict[str, Any] = {}
    with gr.Column(scale=3, min_width=420):
        ui["prompt"] = gr.Textbox(value=None, label=L("ui.prompt.label"), lines=7, max_lines=20, elem_id="pg-prompt",
                                  placeholder=L("ui.prompt.placeholder"))
        ui["examples"] = gr.Radio(example_names("en"), value=None, label=L("ui.examples"), elem_id="pg-examples")
        ui["example_note"] = gr.HTML("", elem_id="pg-example-note")
        with gr.Row():
            ui["generate_btn"] = gr.Button(L("ui.generate"), variant="primary", elem_id="pg-generate")
            ui["stop_btn"] = gr.Button(L("ui.stop"), variant="stop", elem_id="pg-stop")
            ui["link_btn"] = gr.Button(L("ui.link.make"), size="sm", elem_id="pg-link-make")
        ui["pace_controls"] = presenter.build_pace("pg-output")
        ui.update(follow.build_class_box())
        ui["check_plain"] = gr.Checkbox(value=False, label=L("ui.check_plain.label"), elem_id="pg-check-plain",
                                        info=L("ui.check_plain.info"))
        ui["link_box"] = gr.Textbox(label=L("ui.link.box"), interactive=False, buttons=["copy"], elem_id="pg-link",
                                    visible=False, lines=1)  # shown with a link
        ui["link_status"] = gr.HTML("", elem_id="pg-link-status")
        ui["status"] = gr.HTML(preload.initial_status(), elem_id="pg-status-box")
        ui["stats"] = gr.HTML(render.stats_html(None), elem_id="pg-stats-box")
        # The run's settings line above the output, the latest step in words under it, the legend beside it
        # (`presenter.CSS` lays them out for a projector).
        ui["run_line"] = gr.HTML("", elem_id="pg-run-line-box")
        with gr.Row(equal_height=False, elem_id="pg-output-row"):
            with gr.Column(scale=3, min_width=320, elem_id="pg-output-col"):
                ui["tokens"] = gr.HTML(render.empty_tokens(), elem_id="pg-output", max_height=560, autoscroll=True,
                                       js_on_load=microscope_view.PICK_JS)
                ui["narration"] = gr.HTML("", elem_id="pg-narration-box")
            ui["legend"] = gr.HTML(render.legend_html(), elem_id="pg-legend-box", min_width=150)
            ui["micro_panel"] = gr.HTML(microscope_view.empty_panel(), elem_id="pg-micro-box", scale=2,
                                        min_width=280, js_on_load=None)
        ui["run_tables"] = gr.HTML("", elem_id="pg-run-tables")
        with gr.Row():
            ui["acceptance"] = gr.Plot(charts.acceptance_figure([]), show_label=False, elem_id="pg-chart-acceptance")
            ui["timing"] = gr.Plot(charts.timing_figure([]), show_label=False, elem_id="pg-chart-timing")
        ui["trace_file"] = gr.DownloadButton(L("ui.download"), value=None, visible=False, elem_id="pg-download",
                                             size="sm")
        ui["handout_file"] = handout_button.button()
    return ui


def _wire(demo: gr.Blocks, ui: dict[str, Any], param_components: list[Any]) -> GenerateView:
    """The main view's events, every handler's outputs derived from its declaration (`RUN`, `METHOD_VIEWS`, …)."""
    out = lambda outputs: outputs.components(ui)  # noqa: E731
    method, target = ui["method"], ui["target"]
    named = {**ui, "method_name": method, "name": ui["examples"], "params": ui["params_json"]}  # parameters' names
    method.change(guarded(METHOD_CHOSEN.into(on_method_change)), METHOD_CHOSEN.components(named), out(METHOD_VIEWS),
                  **PRIVATE)
    # The controls that depend on the target (early exit's layer): its range always, its own default when the
    # visitor picks it (a link or a guide example sets its own values, which a change keeps).
    target.change(guarded(TARGET_PARAMS.into(on_target_change)), TARGET_PARAMS.components(named), param_components,
                  **PRIVATE)
    target.input(guarded(on_target_pick), target, param_components, **PRIVATE)
    ui["sample"].change(guarded(on_sample_change), ui["sample"], out(SAMPLING), **PRIVATE)
    ui["examples"].change(guarded(on_example), ui["examples"], ui["prompt"], **PRIVATE)
    ui["examples"].input(guarded(example_tokens), ui["examples"], ui["max_new_tokens"], **PRIVATE)
    ui["prompt"].change(guarded(PROMPT_EXAMPLE.into(example_after_prompt)), PROMPT_EXAMPLE.components(named),
                        ui["examples"], **PRIVATE)
    ui["examples"].change(guarded(example_note_html), ui["examples"], ui["example_note"], **PRIVATE)
    by_field = {name: named[name] for name in REQUEST_FIELDS}  # "params" is the hidden params_json, as in `named`
    api_inputs = list(by_field.values())  # `generate`'s first 13, the API's order (`REQUEST_FIELDS`)
    ui["applied"] = preset_picker.wire(ui, PARAMS)
    preset_picker.wire_precision(ui["applied"], ui["dtype"])
    links.wire(ui["link_btn"], ui["link_box"], ui)
    run_event = ui["generate_btn"].click(
        guarded(with_language(METHOD_PARAMS.into(on_generate_click))), METHOD_PARAMS.components(named), out(CLICKED),
        **PRIVATE).then(
        GENERATE.into(generate), GENERATE.components(named), out(RUN), api_name="generate",
        show_progress="minimal", show_progress_on=[ui["status"]],
        # Runs that may exist at once, paused ones included; the engine's places (PLAYGROUND_CONCURRENCY) bound how many
        # compute (`engine.turns._Scheduler.take_place`), so a paused run keeps no other visitor's run from starting.
        concurrency_limit=get_settings().max_runs,
        # The values reach `build_request` and the engine's checks as sent, so a bad one from the API
        # (a word for a number, a value off a slider's range) gets the same clear message in the
        # status as in the CLI, not Gradio's generic refusal.
        preprocess=False,
    )
    ui["stop_btn"].click(stop, None, ui["status"], **PRIVATE)
    presenter.wire_run(ui["pace_controls"], ui["generate_btn"], run_event)
    ui["tokens"].click(guarded(open_token), ui["run_trace"], ui["micro_panel"], **PRIVATE)
    run_event.then(guarded(after_run_tables), ui["run_trace"], out(TABLES), **PRIVATE)
    handout_button.wire(ui["generate_btn"], run_event, ui["run_trace"], ui["handout_file"])
    ui["timer"].tick(guarded(preload.poll_preload), ui["run_started"], out(preload.POLLED), **PRIVATE)
    # Fill the prompt after the page loads, so the API's `prompt` stays required.
    # Then a shareable link's settings, checked by the API's request builder (links.restore).
    loaded = demo.load(on_page_load, None, out(PAGE_LOAD), **PRIVATE).then(
        guarded(localize_view), method, out(LOCALIZED), **PRIVATE).then(
        guarded(preset_picker.localized_choices), None, ui["preset"], **PRIVATE).then(
        guarded(restore_link), None, out(RESTORED), **PRIVATE)
    follow.wire(loaded, ui, restore_query, out(RESTORED), _done_message)  # a class link's follower, after the load
    return GenerateView(prompt=ui["prompt"], target=target, assistant=ui["assistant"], method=method,
                        dtype=ui["dtype"], chat=ui["chat"], max_new_tokens=ui["max_new_tokens"], preset=ui["preset"],
                        params_json=ui["params_json"], param_components=param_components, api_inputs=api_inputs,
                        run_event=run_event, run_trace=ui["run_trace"], settings_for_code={**by_field, "preset": ui["preset"]})
