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
from typing import TYPE_CHECKING, Any, Iterator

import gradio as gr

from .. import bench, charts, render
from ..examples import EXAMPLES as EXAMPLE_SET
from ..gpu import gpu
from ..methods import METHODS, get_method
from ..models import CATALOGUE, DEFAULT_TARGET, describe_precision, hub_reachable
from ..settings import get_settings
from . import links, preload, preset_picker, trace_files
from .background import in_thread
from .guard import PRIVATE, guarded
from .methods_tab import lecture_html
from .run_request import (CHAT_CHOICES, DEFAULT_METHOD, DTYPES, build_request, collect_params, param_component,
                      param_specs, param_update, parse_flag, suggest_assistant)

if TYPE_CHECKING:  # the engine (torch, Transformers) is imported by the handlers, when they run
    from ..engine import LiveRun, RunRequest

# Page updates while streaming: tokens and figures after every step, but at most every
# UPDATE_EVERY_S (steps of real models on CPU take longer; tiny models would flood the browser),
# the charts at most every CHART_EVERY_S (a Plotly figure is re-sent whole), and always once at
# the end, so the final state is never lost. The first chart update waits CHART_EVERY_S too: the
# browser redraws a Plotly chart in about 0.1 s of CPU, and drawing two with the first tokens held
# those tokens back and took that CPU from the model sharing the machine (a local run).
UPDATE_EVERY_S = 0.04
CHART_EVERY_S = 1.5

EXAMPLES: dict[str, str] = {e.name: e.text for e in EXAMPLE_SET}
DEFAULT_EXAMPLE = "Edit code"


# --------------------------------------------------------------------------- the settings' handlers


_ASSISTANT_INFO = {
    "same_tokenizer": "A smaller model with the same tokenizer as the target. Offline, pick the target itself: "
                      "every draft is accepted (a sanity check).",
    "different_tokenizer": "Any small model; its drafts are re-tokenised. Offline pair: SmolLM2 135M Instruct.",
    "gemma4_assistant": "A Gemma 4 assistant checkpoint that reads the target's cache.",
}


def on_method_change(method_name: str, target: str | None, assistant: str | None) -> list[Any]:
    """Explanation, assistant field and parameter controls for the chosen method."""
    method = get_method(method_name)
    by_name = {p.name: p for p in method.params}
    updates: list[Any] = [method.summary, lecture_html(method)]
    if method.needs_assistant:
        suggested = suggest_assistant(method, target, assistant)
        preload.PRELOAD.convert_assistant(suggested)  # a bundled one is converted while the user sets up the run
        updates.append(gr.update(visible=True, value=suggested, info=_ASSISTANT_INFO.get(method.assistant, "")))
    else:
        updates.append(gr.update(visible=False))
    updates.extend(param_update(by_name.get(name)) for name in param_specs())
    return updates

def on_generate_click(method_name: str, *values: Any) -> tuple[dict[str, Any], str, bool]:
    """Runs at once on a click (outside the queue): gather the parameters, say the run is queued,
    and mark the status box as the run's (so the start-up load's poll stops writing to it)."""
    return collect_params(method_name, *values), render.status_html(
        "Queued: waiting for a free generation slot…", "running"), True


def on_sample_change(sample: bool) -> list[Any]:
    return [gr.update(visible=bool(sample)) for _ in range(3)]


def on_example(name: str | None) -> Any:
    return EXAMPLES.get(name or "", gr.skip())


# --------------------------------------------------------------------------- sessions (for Stop)


@dataclass
class _Session:
    stop: threading.Event = field(default_factory=threading.Event)
    live: LiveRun | None = None


_SESSIONS: dict[str, _Session] = {}
_SESSIONS_LOCK = threading.Lock()


def _session_key(request: gr.Request | None) -> str:
    return (getattr(request, "session_hash", None) or "default") if request is not None else "default"


def stop(request: gr.Request = None) -> str:  # type: ignore[assignment]
    """Ask this session's run to end after the current step (what was produced is kept)."""
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(_session_key(request))
    if session is None:
        return render.status_html("Nothing is running.", "idle")
    session.stop.set()
    if session.live is not None:
        session.live.stop()
    return gr.skip()


# --------------------------------------------------------------------------- page load


def on_page_load() -> tuple[Any, ...]:
    """Fill in the default example (here rather than as the textbox's initial value, so the API's
    `prompt` stays a required parameter) and show the loading state."""
    return (EXAMPLES[DEFAULT_EXAMPLE], DEFAULT_EXAMPLE, preload.initial_status(),
            gr.update(active=preload.PRELOAD.running))


def restore_link(request: gr.Request) -> list[Any]:
    """The settings of a shareable link (the page's URL query), validated as the API's values are."""
    query = dict(request.query_params) if request is not None else {}
    return links.restore(query, build_request, list(param_specs()))


# --------------------------------------------------------------------------- the streaming handler


def _prepare_in_thread(request: RunRequest, session: _Session) -> Iterator[tuple[str, Any]]:
    """Run `prepare` in a thread; yield ("progress", message) while it loads, then ("ready", prepared)."""
    from ..engine import prepare

    work = lambda progress: prepare(request, progress=progress)  # noqa: E731
    # While the run waits for the start-up load or a background conversion, say how that is going.
    for kind, value in in_thread(work, "playground-prepare", preload.PRELOAD.background_message):
        yield ("ready" if kind == "done" else kind), value


def _done_message(live: LiveRun) -> tuple[str, str]:
    trace = live.trace
    s = trace.summary
    reasons = {
        "eos": "the model ended its text",
        "length": "reached max new tokens",
        "stopped": "stopped: kept what was produced",
        "timeout": "stopped by the run time limit (PLAYGROUND_RUN_TIMEOUT_S)",
    }
    message = f"Done: {s.new_tokens} tokens in {s.steps} steps, {s.elapsed_s:.2f} s ({reasons.get(trace.finish_reason, trace.finish_reason)})."
    note = f"{trace.env.get('precision', trace.env.get('dtype', ''))}"
    if trace.lossy:
        reason = get_method(trace.method).lossy_reason(trace.params, bool(trace.decoding.get("sample")))
        note += f" · lossy: {reason or 'the output is not the target alone'}"
    return message, note


@gpu
def generate(
    prompt: str,
    target: str = DEFAULT_TARGET,
    assistant: str | None = None,
    method: str = DEFAULT_METHOD,
    params: Any = None,
    max_new_tokens: float = 64,
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
    session = _Session()
    with _SESSIONS_LOCK:
        _SESSIONS[key] = session
    trace_files.drop_session_trace(key)
    stream = render.TokenStream()
    live: LiveRun | None = None
    no_file = gr.update(value=None, visible=False)

    def error_outputs(exc: BaseException) -> tuple[Any, ...]:
        message = user_message(exc)
        gr.Warning(html.escape(message))  # toasts render HTML: the visitor's input must stay text, as in the status box
        steps = live.trace.steps if live is not None else []
        tokens = stream.html() if len(stream) else render.empty_tokens("No output.")
        fig_a, fig_t = charts.figures(steps)
        stats = render.stats_html(live.trace.summary if live is not None else None)
        return tokens, stats, fig_a, fig_t, render.status_html(message, "error"), no_file, None

    try:
        run_request = build_request(prompt, target, assistant, method, params, max_new_tokens, sample,
                                    temperature, top_p, top_k, seed, chat, dtype, preset)
        check = parse_flag(check_plain, "check_plain")
        yield (render.empty_tokens("Preparing…"), render.stats_html(None), *charts.figures([]),
               render.status_html(f"Preparing {run_request.target}…", "running"), no_file, None)
        prepared = None
        for kind, value in _prepare_in_thread(run_request, session):
            if kind == "progress":
                yield (gr.skip(), gr.skip(), gr.skip(), gr.skip(), render.status_html(value, "running"), gr.skip(),
                       gr.skip())
            else:
                prepared = value
        assert prepared is not None
        if session.stop.is_set():
            yield (render.empty_tokens("Stopped before generation started."), gr.skip(), gr.skip(), gr.skip(),
                   render.status_html("Stopped before generation started.", "idle"), no_file, None)
            return
        live = LiveRun(prepared)
        session.live = live
        status = render.status_html(
            f"Generating with {prepared.method.title} on {run_request.target}…", "running",
            describe_precision(run_request.dtype, prepared.target.device))
        yield (render.empty_tokens("Waiting for the first token…"), gr.skip(), gr.skip(), gr.skip(), status, gr.skip(),
               gr.skip())
        last_update, last_chart = 0.0, time.perf_counter()
        with contextlib.closing(iter(live)) as steps:  # closing it (client gone) ends the worker
            for step in steps:
                stream.add(step)
                now = time.perf_counter()
                if now - last_update < UPDATE_EVERY_S:
                    continue
                last_update = now
                if now - last_chart >= CHART_EVERY_S:
                    last_chart = now
                    fig_a, fig_t = charts.figures(live.trace.steps)
                else:
                    fig_a = fig_t = gr.skip()
                yield (stream.html(), render.stats_html(live.trace.summary), fig_a, fig_t, gr.skip(), gr.skip(),
                       gr.skip())
        message, note = _done_message(live)
        path = trace_files.save_trace(live.trace, key)
        plain = None
        if check and prepared.method.name != "baseline" and live.trace.finish_reason in ("eos", "length"):
            yield (stream.html(), render.stats_html(live.trace.summary), gr.skip(), gr.skip(),
                   render.status_html("Checking against plain generate() (the same settings without drafting)…",
                                      "running"), gr.skip(), gr.skip())
            result = bench.check_against_plain(prepared, live.trace)
            plain = (result.speedup, result.identical, result.verdict)
        yield (stream.html(), render.stats_html(live.trace.summary, plain), *charts.figures(live.trace.steps),
               render.status_html(message, "done", note),
               gr.update(value=path, visible=True, label=f"Download trace ({Path(path).name})"), live.trace)
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
    specs = param_specs()
    default_method = METHODS[DEFAULT_METHOD]
    model_choices = _target_choices()
    with gr.Row(equal_height=False):
        with gr.Column(scale=2, min_width=320):
            preset = preset_picker.picker(hub_reachable())
            preset_info = gr.HTML("", elem_id="pg-preset-info")
            target = gr.Dropdown(
                choices=model_choices, value=DEFAULT_TARGET, label="Target model", allow_custom_value=True,
                info="A catalogue model, a Hub id (owner/name) or a local directory.", elem_id="pg-target",
            )
            method = gr.Dropdown(
                choices=[(m.title, name) for name, m in METHODS.items()], value=DEFAULT_METHOD,
                label="Drafting method", elem_id="pg-method",
            )
            method_summary = gr.Markdown(default_method.summary, elem_id="pg-method-summary")
            with gr.Accordion("How it works", open=False):
                lecture = gr.HTML(lecture_html(default_method))
            assistant = gr.Dropdown(
                choices=model_choices, value=None, label="Assistant model", allow_custom_value=True,
                visible=default_method.needs_assistant, elem_id="pg-assistant",
            )
            default_params = {p.name for p in default_method.params}
            param_components = [param_component(p, name in default_params) for name, p in specs.items()]
            with gr.Accordion("Decoding", open=False):
                sample = gr.Checkbox(value=False, label="Sample (instead of greedy)", elem_id="pg-sample")
                temperature = gr.Slider(0.05, 2.0, value=1.0, step=0.05, label="Temperature", visible=False)
                top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p", visible=False)
                top_k = gr.Slider(0, 200, value=0, step=1, label="Top-k", info="0 = off", visible=False)
                seed = gr.Number(value=0, precision=0, label="Seed")
                chat = gr.Radio(list(CHAT_CHOICES), value="auto", label="Chat template",
                                info="auto: applied for instruct models, not for base models.")
            dtype = gr.Radio(list(DTYPES), value="auto", label="Precision",
                             info=f"auto here: {describe_precision('auto')}", elem_id="pg-dtype")
            max_new_tokens = gr.Slider(1, settings.max_new_tokens, value=64, step=1, label="Max new tokens",
                                       elem_id="pg-max-new-tokens")
            params_json = gr.JSON(value={}, visible=False, label="params")

        with gr.Column(scale=3, min_width=420):
            prompt = gr.Textbox(value=None, label="Prompt", lines=7, max_lines=20, elem_id="pg-prompt",
                                placeholder="Type a prompt, or pick an example below.")
            examples = gr.Radio(list(EXAMPLES), value=None, label="Example prompts", elem_id="pg-examples")
            with gr.Row():
                generate_btn = gr.Button("Generate", variant="primary", elem_id="pg-generate")
                stop_btn = gr.Button("Stop", variant="stop", elem_id="pg-stop")
                link_btn = gr.Button("Link to these settings", size="sm", elem_id="pg-link-make")
            check_plain = gr.Checkbox(
                value=False, label="Check against plain generate()", elem_id="pg-check-plain",
                info="After the run, the same settings without drafting: measured speedup, and whether the "
                     "output is identical (if not, where and why).")
            link_box = gr.Textbox(label="Shareable link (opening it restores these settings)", interactive=False,
                                  buttons=["copy"], elem_id="pg-link", visible=True, lines=1)
            link_status = gr.HTML("", elem_id="pg-link-status")
            status = gr.HTML(preload.initial_status(), elem_id="pg-status-box")
            stats = gr.HTML(render.stats_html(None), elem_id="pg-stats-box")
            gr.HTML(render.legend_html(), elem_id="pg-legend-box")
            tokens = gr.HTML(render.empty_tokens(), elem_id="pg-output", max_height=560, autoscroll=True)
            with gr.Row():
                acceptance_plot = gr.Plot(charts.acceptance_figure([]), show_label=False,
                                          elem_id="pg-chart-acceptance")
                timing_plot = gr.Plot(charts.timing_figure([]), show_label=False, elem_id="pg-chart-timing")
            trace_file = gr.DownloadButton("Download trace (JSON)", value=None, visible=False,
                                           elem_id="pg-download", size="sm")
    run_trace = gr.State(None)
    run_started = gr.State(False)  # set by the first click: from then on the status box is the run's

    method.change(guarded(on_method_change), [method, target, assistant],
                  [method_summary, lecture, assistant, *param_components], **PRIVATE)
    sample.change(guarded(on_sample_change), sample, [temperature, top_p, top_k], **PRIVATE)
    examples.change(guarded(on_example), examples, prompt, **PRIVATE)
    api_inputs = [prompt, target, assistant, method, params_json, max_new_tokens, sample, temperature, top_p,
                  top_k, seed, chat, dtype]
    controls = [target, assistant, method, sample, temperature, top_p, top_k, seed, chat, max_new_tokens]
    preset_picker.wire(preset, preset_info, controls, prompt, param_components, list(specs))
    links.wire(link_btn, link_box, preset, prompt, controls, dtype, param_components, guarded(collect_params))
    outputs = [tokens, stats, acceptance_plot, timing_plot, status, trace_file, run_trace]
    run_event = generate_btn.click(guarded(on_generate_click), [method, *param_components],
                                   [params_json, status, run_started], **PRIVATE).then(
        generate, [*api_inputs, check_plain, preset], outputs, api_name="generate", show_progress="minimal",
        show_progress_on=[status],
        # The values reach `build_request` and the engine's checks as sent, so a bad one from the API
        # (a word for a number, a value off a slider's range) gets the same clear message in the
        # status as in the CLI, not Gradio's generic refusal.
        preprocess=False,
    )
    stop_btn.click(stop, None, status, **PRIVATE)

    timer = gr.Timer(1.0, active=preload.PRELOAD.running)
    timer.tick(guarded(preload.poll_preload), run_started, [status, timer], **PRIVATE)
    # Fill the prompt after the page loads, so the API's `prompt` stays required.
    # Then a shareable link's settings, checked by the API's request builder (links.restore).
    demo.load(on_page_load, None, [prompt, examples, status, timer], **PRIVATE).then(
        restore_link, None, [preset, preset_info, *controls, prompt, dtype, link_status, *param_components],
        **PRIVATE)
    return GenerateView(prompt=prompt, target=target, assistant=assistant, method=method, dtype=dtype, chat=chat,
                        max_new_tokens=max_new_tokens, preset=preset, params_json=params_json,
                        param_components=param_components, api_inputs=api_inputs, run_event=run_event,
                        run_trace=run_trace, settings_for_code=[*api_inputs, preset])
