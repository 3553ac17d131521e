"""The "Step through a run" tab: replay a trace (the last run's, or an uploaded file) one verification step at a time.

`load_trace_file` (a clear `TraceFormatError` message for anything that is not a trace), `replay_view(trace, k)`:
the coloured text of steps[:k+1] with step k outlined, the step told in words (draft → verify → append), the
charts of the first k+1 steps with step k marked, the figures. Everything that draws is in `render` and `charts`,
so a saved trace replays exactly like the run that made it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from .. import charts, microscope_view, render
from ..compat import gradio_internals
from ..errors import PlaygroundError, shorten
from ..i18n import Number, t, tn
from ..methods import method_title
from ..outside import MAX_INPUT_BYTES, read_bounded
from ..trace import Trace, TraceFormatError, short_repr, summarize_steps
from . import gallery_picker, presenter, uploads
from .guard import PRIVATE, guarded, session_key
from .language import L, language_of
from .outputs import Inputs, Outputs
from .run_request import MAX_NAME_SHOWN

MAX_TRACE_BYTES = MAX_INPUT_BYTES  # Gradio's upload limit (launch) and our reader's are one
REPLAY_WINDOW_STEPS = 200  # steps drawn around the replay's current one (text and charts)
# ...and at most this much text in them: a token weighs 1, and 1 more for each 16 characters of its text. A real run's
# window stays whole (512 new tokens and drafts of 64: 13,312 at most with tokens under 16 characters); a crafted
# file's 200 steps of 128 tokens of 350 quotes (18.7 MB) answered 124 MB per slider move, now a few steps of it.
REPLAY_WINDOW_WEIGHT = 16_384

# What the replay's state holds: the last run's trace or a gallery recording, an upload's ticket (`uploads`), nothing.
Replayed = Trace | uploads.Held | None
# The outputs of the replay's handlers (`outputs.Outputs`): a step's views, a loaded trace's, Play's.
STEP_VIEWS = Outputs("tokens", "detail", "acceptance", "timing", "stats")
LOADED = Outputs("trace", "status", "slider") + STEP_VIEWS + Outputs("panel")
PLAYING = Outputs("slider", "timer", "button", "playing")


def load_trace_file(path: str | Path | None) -> Trace:
    """A trace from an uploaded file; `TraceFormatError` with a message for the page otherwise."""
    if not path:
        raise TraceFormatError.keyed("error.trace.no_file")
    data = read_bounded(path)  # over the limit: the CLI's refusal; an OSError: the caller says it could not be read
    # Any JSON of any shape gets a trace-format message from the reader itself (`Trace.from_dict`); anything else
    # raised here is a bug of ours, and reaches the caller as one (logged with its traceback), not as the visitor's file.
    return Trace.from_json(data)


def describe_trace(trace: Trace, source: str, lang: str = "en") -> str:
    s = trace.summary
    # A file's names are the file's (a trace may name a model of a million characters): cut for the status line.
    assistant = t("replay.with_assistant", lang, assistant=shorten(trace.assistant)) if trace.assistant else ""
    # The method as the page's pickers name it; a file's unknown method as the file writes it (cut).
    return t("replay.describe", lang, source=source, method=shorten(method_title(trace.method, lang)),
             target=shorten(trace.target),
             assistant=assistant,
             tokens=tn("status.tokens", s.new_tokens, lang), steps=tn("replay.steps", s.steps, lang))


def step_number(value: Any, n: int) -> int:
    """The slider's step (1-based) as sent by a client: a whole number, clamped to 1 … n; else our message."""
    if value is None or value == "":
        return n
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PlaygroundError.keyed("error.replay.step", last=n, got=short_repr(value, MAX_NAME_SHOWN))
    return min(max(int(value), 1), n)


def replay_view(trace: Replayed, value: Any, request: gr.Request = None, *,
                lang: str | None = None) -> tuple[Any, ...]:
    """(coloured text, step in words, acceptance chart, timing chart, figures) for slider position `value`
    (1-based: the first `value` steps, the last of them outlined).

    Text and charts show at most REPLAY_WINDOW_STEPS steps up to the current one, so one move of the
    slider costs the same on a trace of any length; the figures count every step up to it.
    """
    lang = lang or language_of(request)
    trace = uploads.resolve(trace)
    if trace is None or not trace.steps:
        acceptance, timing = charts.figures([], lang=lang)
        return STEP_VIEWS(tokens=render.empty_tokens(t("replay.empty", lang), lang), detail="", acceptance=acceptance,
                          timing=timing, stats=render.stats_html(None, lang=lang))
    n = len(trace.steps)
    k = step_number(value, n) - 1
    first = window_start(trace, k)
    window = trace.steps[first: k + 1]
    tokens = render.render_tokens(window, current=k - first, earlier=first, lang=lang)
    detail = render.step_detail_html(trace.steps[k], trace.method, k, lang=lang)
    fig_a, fig_t = charts.figures(window, current=k, total_steps=n if not first else None, lang=lang)
    shown = trace.steps[: k + 1]
    elapsed = (trace.setup_ms + sum(s.time_ms for s in shown)) / 1000.0
    stats = render.stats_html(summarize_steps(shown, elapsed, trace.setup_ms), lang=lang)
    return STEP_VIEWS(tokens=tokens, detail=detail, acceptance=fig_a, timing=fig_t, stats=stats)


def _weight(step: Any) -> int:
    """What a step's tokens weigh in the replay's window (`REPLAY_WINDOW_WEIGHT`): those a view shows of it."""
    shown = render.MAX_STEP_TOKENS_SHOWN
    return sum(1 + len(text) // 16 for texts in (step.drafted_text, step.emitted_text) for text in texts[:shown])


def window_start(trace: Trace, k: int) -> int:
    """The first step of the replay's window ending at step `k` (0-based): at most REPLAY_WINDOW_STEPS steps and
    REPLAY_WINDOW_WEIGHT of text, step `k` itself always."""
    first, weight = k, _weight(trace.steps[k])
    while first > 0 and k - first + 1 < REPLAY_WINDOW_STEPS:
        weight += _weight(trace.steps[first - 1])
        if weight > REPLAY_WINDOW_WEIGHT:
            break
        first -= 1
    return first


def slider_for(trace: Trace | None, at: int | None = None) -> Any:
    """The replay slider for a trace: 1 … its steps, at step `at` (its last by default). Gradio refuses a slider
    whose minimum is its maximum, so a one-step trace (a one-token run) gets 1 … 2, fixed at 1 and not movable (the
    handlers clamp to the steps)."""
    n = len(trace.steps) if trace is not None and trace.steps else 1
    return gr.update(minimum=1, maximum=max(n, 2), value=min(n, at or n), step=1, interactive=n > 1)


def _steps_in(trace: Replayed) -> int:
    trace = uploads.resolve(trace)
    return len(trace.steps) if trace is not None and trace.steps else 1


# The replay's handlers' inputs: the trace and the slider's step (`replay_view`, `replay_prev`, …), and whether it
# plays (`replay_play`, `replay_tick`).
AT_STEP = Inputs("trace", "value")
PLAYING_AT = Inputs("trace", "value", "playing")


def replay_prev(trace: Replayed, value: Any) -> Any:
    return gr.update(value=max(1, step_number(value, _steps_in(trace)) - 1))


def replay_next(trace: Replayed, value: Any) -> Any:
    n = _steps_in(trace)
    return gr.update(value=min(n, step_number(value, n) + 1))


def replay_key(trace: Replayed, value: Any) -> Any:
    """N or a clicker's Page Down on the replay (`presenter.HEAD`): the next step; from the last one (where a loaded
    trace opens) back to step 1, so a class sees the run from its start."""
    n = _steps_in(trace)
    step = step_number(value, n)
    return gr.update(value=1 if step >= n else step + 1)


PLAY_EVERY_S = 1.0  # one verification step per second by default: time to read the sentence under the text
PLAY_SECONDS = (0.25, 10.0)  # the speed control's range (seconds per step)
PLAY, PAUSE = t("ui.replay.play"), t("ui.replay.pause")  # the button's two names (English; the page's: `L`)


def replay_play(trace: Replayed, value: Any, playing: bool,
                request: gr.Request = None) -> tuple[Any, Any, Any, bool]:
    """Play / Pause: (slider, timer, button, playing). Playing from the last step starts over at step 1."""
    lang = language_of(request)
    trace = uploads.resolve(trace)
    if playing is True or trace is None or len(trace.steps) < 2:
        return PLAYING(timer=gr.update(active=False), button=gr.update(value=t("ui.replay.play", lang)), playing=False)
    at_end = step_number(value, len(trace.steps)) >= len(trace.steps)
    return PLAYING({"slider": gr.update(value=1)} if at_end else {}, timer=gr.update(active=True),
                   button=gr.update(value=t("ui.replay.pause", lang)), playing=True)


def replay_tick(trace: Replayed, value: Any, playing: bool,
                request: gr.Request = None) -> tuple[Any, Any, Any, bool]:
    """One step forward while playing; at the last step the play ends by itself."""
    play = gr.update(value=t("ui.replay.play", language_of(request)))
    try:
        trace = uploads.resolve(trace)
    except PlaygroundError:  # let go while playing: the play stops here, the next view of it says why
        trace = None
    if playing is not True or trace is None or not trace.steps:
        return PLAYING(timer=gr.update(active=False), button=play, playing=False)
    n = len(trace.steps)
    step = min(n, step_number(value, n) + 1)
    if step >= n:
        return PLAYING(slider=gr.update(value=step), timer=gr.update(active=False), button=play, playing=False)
    return PLAYING(slider=gr.update(value=step), playing=True)


def replay_speed(seconds: Any) -> Any:
    """The speed control: Play's timer ticks every `seconds` (clamped to PLAY_SECONDS), also while it plays."""
    low, high = PLAY_SECONDS
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        raise PlaygroundError.keyed("error.pace.seconds", got=short_repr(seconds, MAX_NAME_SHOWN), lo=Number(low, "g"), hi=Number(high, "g"))
    return gr.update(value=min(high, max(low, float(seconds))))


def replay_load(trace: Trace | None, source: str, lang: str = "en", at: int | None = None) -> tuple[Any, ...]:
    """`LOADED` for a freshly loaded trace, at step `at` (its last by default; in `lang`); the panel invites a click
    on a token."""
    status = (render.status_html(t("replay.nothing", lang), "idle") if trace is None
              else render.status_html(describe_trace(trace, source, lang), "done"))
    step = min(at or len(trace.steps), len(trace.steps)) if trace is not None and trace.steps else 1
    return LOADED(STEP_VIEWS.read(replay_view(trace, step, lang=lang)), trace=trace, status=status,
                  slider=slider_for(trace, step), panel=microscope_view.empty_panel(lang=lang))


def replay_from_the_start(trace: Trace | None, source: str, lang: str = "en") -> tuple[Any, ...]:
    """`replay_load` at step 1: a gallery recording is a lesson to step through, so it opens at its beginning."""
    return replay_load(trace, source, lang, at=1)


def replay_last(trace: Trace | None, request: gr.Request = None) -> tuple[Any, ...]:
    lang = language_of(request)
    return replay_load(trace, t("replay.last_run", lang), lang)


def trace_upload_button(*args: Any, **kwargs: Any) -> gr.UploadButton:
    """The trace upload button, whose value reaches `on_trace_upload` as the client sent it: Gradio's own check of
    the file model would refuse a value that is not an upload with its generic "Error"; ours says why. Gradio still
    refuses, before any handler runs, a file record that names a path outside its upload folder. (An instance, not
    a subclass: Gradio writes a .pyi stub beside every module that subclasses a component.)"""
    button = gr.UploadButton(*args, **kwargs)
    button.data_model = None
    return button


MAX_UPLOAD_PATH_CHARS = 4096  # longer than any path Gradio's upload folder makes


def uploaded_path(upload: Any) -> Path:
    """Where Gradio stored a trace upload, from the value a client sent (a file record). Only a file inside Gradio's
    upload folder is ever read: text, a record without a path, or a path elsewhere (/etc/passwd) is refused first."""
    if isinstance(upload, list) and len(upload) == 1:  # the page's upload button sends its one file in a list
        upload = upload[0]
    path = upload.get("path") if isinstance(upload, dict) else None
    if not isinstance(path, str) or not path or len(path) > MAX_UPLOAD_PATH_CHARS:
        raise TraceFormatError.keyed("error.trace.not_an_upload", got=short_repr(upload, MAX_NAME_SHOWN))
    try:
        folder = Path(gradio_internals.upload_folder()).resolve()
        resolved = Path(path).resolve()
    except (ValueError, OSError):  # a NUL byte, a lone surrogate, a loop of links
        raise TraceFormatError.keyed("error.trace.bad_path") from None
    if folder not in resolved.parents:
        raise TraceFormatError.keyed("error.trace.elsewhere")
    if not resolved.is_file():
        raise TraceFormatError.keyed("error.trace.not_a_file")
    return resolved


def on_trace_upload(upload: Any, request: gr.Request = None) -> tuple[Any, ...]:
    """Load an uploaded trace; a file that is not one gets a clear message (and the replay is left as it was).

    `upload` is the file record as the client sent it (`trace_upload_button`, no preprocessing): only a file in Gradio's
    upload folder is read (`uploaded_path`), and its content is untrusted, checked field by field by
    `Trace.from_dict`.
    """
    from ..errors import user_message

    lang = language_of(request)
    name = t("replay.the_file", lang)
    try:
        path = uploaded_path(upload)
        name = path.name if len(path.name) <= MAX_NAME_SHOWN else path.name[:MAX_NAME_SHOWN] + "…"
        trace = load_trace_file(path)
        held = uploads.hold(trace, session_key(request))  # the session's state holds a ticket (`uploads`)
        return LOADED(LOADED.read(replay_load(trace, t("replay.loaded", lang, name=name), lang)), trace=held)
    except Exception as exc:  # TraceFormatError, OSError, or anything else: one line, never a traceback
        reason = (exc.localized(lang) if isinstance(exc, TraceFormatError) else t("replay.unreadable", lang)
                  if isinstance(exc, OSError) else user_message(exc, t("error.what.reading_trace", lang), lang))
        message = t("replay.cannot", lang, name=name, reason=reason)
        return LOADED(status=render.status_html(message, "error"))


def replay_open_token(trace: Replayed, evt: gr.EventData, request: gr.Request = None) -> str:
    """A click on a token of the replayed (or uploaded) trace: the step microscope's panel for it."""
    return microscope_view.panel_for_click(uploads.resolve(trace), gradio_internals.event_data(evt),
                                           language_of(request))


@dataclass
class ReplayTab:
    """What the page wires to the replay from outside: the last run's state and the views a loaded trace fills."""

    last_run: gr.State
    views: dict[str, Any]  # the components of `LOADED`, by name


def build_replay(demo: gr.Blocks) -> ReplayTab:
    """The tab (call inside the page's `gr.Tabs`) and its events."""
    with gr.Tab(L("ui.tab.replay"), id="replay", elem_id="pg-tab-replay"):
        gallery, gallery_look = gallery_picker.controls()
        with gr.Row():
            with gr.Column(scale=3):
                replay_status = gr.HTML(LOADED.read(replay_load(None, ""))["status"], elem_id="pg-replay-status")
            with gr.Column(scale=1, min_width=200):
                replay_last_btn = gr.Button(L("ui.replay.last"), size="sm", elem_id="pg-replay-last")
                replay_upload = trace_upload_button(L("ui.replay.upload"), file_types=[".json"],
                                             type="filepath", size="sm", elem_id="pg-replay-upload")
        replay_slider = gr.Slider(1, 2, value=1, step=1, label=L("ui.replay.slider"), interactive=False,
                                  elem_id="pg-replay-slider")
        with gr.Row():
            replay_prev_btn = gr.Button(L("ui.replay.prev"), size="sm", elem_id="pg-replay-prev")
            replay_next_btn = gr.Button(L("ui.replay.next"), size="sm", elem_id="pg-replay-next")
            replay_play_btn = gr.Button(L("ui.replay.play"), size="sm", variant="primary", elem_id="pg-replay-play")
            # What N and Page Down press on this tab (`presenter.HEAD`); not shown, not in the Tab order.
            replay_key_btn = gr.Button(L("ui.replay.next"), visible="hidden", elem_id="pg-replay-key")
            replay_seconds = gr.Slider(*PLAY_SECONDS, value=PLAY_EVERY_S, step=0.25, label=L("ui.replay.speed"),
                                       elem_id="pg-replay-speed", min_width=200)
        replay_timer = gr.Timer(PLAY_EVERY_S, active=False)
        replay_detail = gr.HTML("", elem_id="pg-replay-step")
        presenter.final_only_toggle("pg-replay-output", "pg-replay-final-only")
        with gr.Row(equal_height=False):
            replay_tokens = gr.HTML(STEP_VIEWS.read(replay_view(None, 1))["tokens"], elem_id="pg-replay-output",
                                    max_height=420,
                                    js_on_load=microscope_view.PICK_JS, scale=3, min_width=320)
            replay_panel = gr.HTML(microscope_view.empty_panel(), elem_id="pg-replay-micro", scale=2, min_width=280,
                                   js_on_load=None)
        replay_stats = gr.HTML(render.stats_html(None), elem_id="pg-replay-stats")
        with gr.Row():
            replay_acceptance = gr.Plot(charts.acceptance_figure([]), show_label=False,
                                        elem_id="pg-replay-chart-acceptance")
            replay_timing = gr.Plot(charts.timing_figure([]), show_label=False, elem_id="pg-replay-chart-timing")
        last_run = gr.State(None)
        replay_trace = gr.State(None)
        replay_playing = gr.State(False)

    step_views = dict(tokens=replay_tokens, detail=replay_detail, acceptance=replay_acceptance, timing=replay_timing,
                      stats=replay_stats)
    views = dict(trace=replay_trace, status=replay_status, slider=replay_slider, **step_views, panel=replay_panel)
    replay_views = STEP_VIEWS.components(step_views)
    replay_outputs = LOADED.components(views)
    named = {"trace": replay_trace, "value": replay_slider, "playing": replay_playing}  # by the handlers' names
    at_step, play = AT_STEP.components(named), PLAYING_AT.components(named)
    replay_slider.change(guarded(AT_STEP.into(replay_view)), at_step, replay_views, **PRIVATE)
    replay_prev_btn.click(guarded(AT_STEP.into(replay_prev)), at_step, replay_slider, **PRIVATE)
    replay_next_btn.click(guarded(AT_STEP.into(replay_next)), at_step, replay_slider, **PRIVATE)
    replay_key_btn.click(guarded(AT_STEP.into(replay_key)), at_step, replay_slider, **PRIVATE)
    play_outputs = PLAYING.components(dict(slider=replay_slider, timer=replay_timer, button=replay_play_btn,
                                           playing=replay_playing))
    replay_play_btn.click(guarded(PLAYING_AT.into(replay_play)), play, play_outputs, **PRIVATE)
    replay_timer.tick(guarded(PLAYING_AT.into(replay_tick)), play, play_outputs, **PRIVATE)
    replay_seconds.change(guarded(replay_speed), replay_seconds, replay_timer, **PRIVATE)
    replay_last_btn.click(replay_last, last_run, replay_outputs, **PRIVATE)
    replay_tokens.click(guarded(replay_open_token), replay_trace, replay_panel, **PRIVATE)
    # In the queue: parsing and checking a trace of up to MAX_TRACE_BYTES is the heaviest thing a click here does.
    replay_upload.upload(on_trace_upload, replay_upload, replay_outputs, api_visibility="private",
                         show_progress="hidden", preprocess=False)
    gallery_picker.wire(demo, gallery, gallery_look, views, LOADED, replay_from_the_start)
    return ReplayTab(last_run=last_run, views=views)
