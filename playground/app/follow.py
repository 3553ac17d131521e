"""Follow the presenter: the class link on the presenter's page, the follower's live view, and asking the class.

- The presenter's page: "Class link" opens the presenter's room (`rooms.ROOMS`) and shows ``?follow=CODE`` with a QR
  code (segno, inline SVG) in ``#pg-class-link``; while the page is open it beats once a second (`class_tick`), which
  keeps the room open and shows who follows and the class's answers (``#pg-class-tally``). Each run the presenter
  starts is published into the room (`publish`, called by the page's `generate`).
- A follower's page (``?follow=CODE``): after the page load, `follow_stream` (an async generator, in a queue group of
  its own with no limit: it holds no place a run needs, and no thread) looks at the room a few times a second and,
  when what the class sees changed, writes the page's own token view, figures, charts and status, in the follower's
  language. A click on a token opens the step microscope from the room's trace (`followed_panel`). "Try it yourself"
  puts the run's settings into the follower's page, as a shared link does, and stops following. Pressing Generate
  stops following too (the follower's own run takes the view).
- Ask the class (`rooms`): at the step-by-step pace, the step the presenter stands at is the class's question.
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import time
import weakref
from types import SimpleNamespace
from typing import Any, Callable
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import gradio as gr
import segno

from .. import charts, microscope_view, render
from ..errors import localized_message
from ..i18n import number, t, tn
from ..methods import get_method
from ..pace import STEP
from ..rooms import KEPT, REFUSED, ROOMS, Room, RoomError, RoomView, Tally, answer_of
from ..trace import summarize_steps
from . import links
from .guard import PRIVATE, guarded, session_key, url_query
from .language import L, language_of
from .outputs import Outputs

LOOK_EVERY_S = 0.2  # how often a room's watch looks at it for its followers (`_Watch`)
LOOK_AGAIN_S = 1.0  # the watch wakes its followers at least this often (their own answer, having left the class)
BEAT_S = 5.0  # a follower's stream writes at least this often (at a wake), so Gradio notices a page that closed
TICK_S = 1.0  # the presenter's page's beat
# The charts at most this often while the run goes (and at each question and the end): a redrawn Plotly figure is
# re-sent whole to every follower (~17 KB for the two, where a step's tokens are ~1 KB), which was most of what a
# class cost the server. The presenter's own page redraws every 1.5 s (`generate_tab.CHART_EVERY_S`).
CHART_EVERY_S = 5.0
# The followers' writes while the run goes as fast as it comes (the watch's wakes). What a follower costs the server
# is per write, not per byte: each is one message through Gradio's queue and one socket write per follower (a
# profile of 60 followers: the SSE sends and `process_events` most of the event loop's added time), and a write due
# every so much wall time grows with a slow run. At 0.5 s a 3 s run wrote each follower 6 to 7 times; at 1 s, 3 to 4.
# The steps at the step-by-step pace, the class's question and the run's end are still written at once.
FREE_EVERY_S = 1.0
MAX_ADDRESS_CHARS = 2000

# What the follower's stream writes (the page's own run views, and the class's question).
# Its values are written as Gradio sends them (the event has `postprocess=False`): Gradio then neither builds a
# component nor hops to a thread per write and follower. So the stream never writes an update (`gr.skip()`,
# `gr.update`: each would build a component per write); the answer buttons show through the style sheet
# (`CSS`) while the question box holds an open question (`data-open`).
# Nor a State (each write of one builds its component's config): the room keeps which question a follower's page
# shows (`Rooms.shown`), and their answer is for that step.
FOLLOWED = Outputs("tokens", "stats", "status", "acceptance", "timing", "class_question")
JOINED = Outputs("follow_code", "follow_bar", "follow_try", "status", "run_started")
ANSWERED = Outputs("class_question",)
LEFT = Outputs("follow_code", "follow_bar", "follow_try", "class_question")


# --------------------------------------------------------------------------- the presenter's side


def publish(key: str, live: Any) -> None:
    """The presenter `key` starts the run `live` (an engine `LiveRun`): it becomes their room's, if they opened one.
    The room keeps the trace, the run's pace (whether it stops after each step) and a weak handle on the run's
    `figures_now` (the microscope's figures of a step, from the run's own kept scores: no model work)."""
    pace = live.pace
    fill = weakref.WeakMethod(live.figures_now)

    def fill_step(index: int) -> None:
        method = fill()
        if method is not None:
            method(index)

    ROOMS.publish(key, live.trace, lambda: pace is not None and pace.mode == STEP, fill_step)


def class_url(address: Any, code: str) -> str:
    """The class link: the page's address (as the presenter's browser has it) with ``?follow=CODE``."""
    parts = urlsplit(address) if isinstance(address, str) and len(address) <= MAX_ADDRESS_CHARS else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise RoomError.keyed("error.room.address")
    return urlunsplit((parts.scheme, parts.netloc, parts.path or "/", f"follow={code}", ""))


def link_html(url: str, lang: str) -> str:
    """The class link, written out and as a QR code a room can scan from the projector."""
    qr = segno.make(url, error="m").svg_inline(scale=5, dark="#000", light="#fff", border=2)
    label = html.escape(t("class.qr_label", lang))
    shown = html.escape(url)
    return (f'<div class="pg-class-link" data-testid="pg-class-link" data-url="{shown}">'
            f'<p>{html.escape(t("class.link_intro", lang))}</p>'
            f'<p class="pg-class-url"><bdi dir="ltr"><a href="{shown}" target="_blank" rel="noopener">{shown}</a>'
            '</bdi></p>'
            f'<figure class="pg-class-qr" role="img" aria-label="{label}">{qr}</figure></div>')


def open_class(address: Any, request: gr.Request = None) -> tuple[Any, Any, Any]:
    """"Class link": the presenter's room (opened now, or the one they have), its link and QR; the page's beat
    starts."""
    lang = language_of(request)
    key = session_key(request)
    class_url(address, "-" * 16)  # the address checked before a room is opened for it
    room = ROOMS.open(key)
    url = class_url(address, room.code)
    tally = ROOMS.tally(key)
    return link_html(url, lang), tally_html(tally, lang), gr.update(active=True)


def tally_html(tally: Tally | None, lang: str) -> str:
    """Who follows, the open question's tally, and the last answered step's answer beside the class's."""
    if tally is None:
        return ""
    lines = [tn("class.followers", tally.followers, lang)]
    if tally.asked is not None:
        kept, refused = tally.asked_tally
        lines.append(t("class.tally", lang, step=number(tally.asked + 1, lang, "d"), kept=number(kept, lang, "d"),
                       refused=number(refused, lang, "d")))
    if tally.answered is not None:
        kept, refused = tally.answered_tally
        truth = answer_of(tally.answered)
        right = kept if truth == KEPT else refused
        lines.append(t("class.answer", lang, step=number(tally.answered.index + 1, lang, "d"),
                       verdict=t(f"class.verdict.{truth}", lang), right=number(right, lang, "d"),
                       answers=number(kept + refused, lang, "d")))
    asked = "" if tally.asked is None else f' data-asked="{tally.asked}"'
    return (f'<div class="pg-class-tally" data-testid="pg-class-tally" data-followers="{tally.followers}"{asked} '
            f'role="status">' + "".join(f"<p>{html.escape(line)}</p>" for line in lines) + "</div>")


def class_tick(request: gr.Request = None) -> Any:
    """The presenter's page beats: the room stays open, the tally is shown; without a room the beat stops."""
    tally = ROOMS.tally(session_key(request))
    if tally is None:
        return "", gr.update(active=False)
    return tally_html(tally, language_of(request)), gr.skip()


# --------------------------------------------------------------------------- the follower's side


def join_class(request: gr.Request = None) -> tuple[Any, ...]:
    """On page load: a ``?follow=CODE`` link joins the class (an unknown or ended code gets one line, in the
    visitor's language); the status box becomes the class's (the start-up load's poll stops writing to it)."""
    query = url_query(request)  # each name's first value, as the page's scripts read it
    if "follow" not in query:
        return JOINED.skip()
    lang = language_of(request)
    try:
        room = ROOMS.join(query["follow"], session_key(request))
    except RoomError as exc:
        return JOINED(follow_code=None, status=render.status_html(localized_message(exc, lang), "error"),
                      run_started=True)
    banner = f'<div class="pg-follow" data-testid="pg-follow" role="note">{html.escape(t("follow.banner", lang))}</div>'
    return JOINED(follow_code=room.code, follow_bar=gr.update(value=banner, visible=True),
                  follow_try=gr.update(visible=True), status=render.status_html(t("follow.waiting", lang), "idle"),
                  run_started=True)


def _shown_summary(view: RoomView) -> Any:
    """The figures of the steps the class is shown (the question's step left out: its acceptance is the answer)."""
    trace = view.trace
    if trace is None:
        return None
    if view.finished:
        return trace.summary
    steps = list(view.steps)
    return summarize_steps(steps, (trace.setup_ms + sum(s.time_ms for s in steps)) / 1000, trace.setup_ms)


def _tokens(room: Room, view: RoomView, lang: str) -> str:
    """The run's tokens as the presenter's page writes them (`render.TokenStream`: each step rendered once, the
    container left open), so each write only grows at the end and Gradio sends a follower's browser the new steps
    alone (an "append" edit), not the whole token view again (~0.9 KB a step, where the whole is tens of KB)."""
    key = ("tokens", lang)
    kept = room.rendered.get(key)
    stream = kept[1] if kept is not None and kept[0] is view.trace else None
    if stream is None or len(stream) > len(view.steps):  # a new run (or fewer steps shown): rendered afresh
        stream = render.TokenStream(lang)
        room.rendered[key] = view.trace, stream
    stream.extend(view.steps[len(stream):])
    return stream.html()


def _rendered(room: Room, view: RoomView, lang: str, done_message: Callable[..., tuple[str, str]]) -> dict[str, Any]:
    """The run's views for `view` in `lang` (the page's tokens, stats, status and both charts, as Gradio sends them),
    rendered once per version and language for the whole class: every follower's write shares these objects."""
    cache_key = (view.version, lang)
    cached = room.rendered.get(cache_key)
    if cached is not None:
        return cached
    trace = view.trace
    if trace is None:
        views = {"tokens": render.empty_tokens(t("follow.waiting", lang), lang),
                 "stats": render.stats_html(None, lang=lang),
                 "status": render.status_html(t("follow.waiting", lang), "idle"), "acceptance": None, "timing": None}
    else:
        steps = list(view.steps)
        tokens = _tokens(room, view, lang)
        if view.finished:
            message, note = done_message(SimpleNamespace(trace=trace), lang)
            status = render.status_html(message, "done", note)
        else:
            title = get_method(trace.method).localized(lang).title
            status = render.status_html(t("follow.running", lang, method=title, target=trace.target), "running")
        views = {"tokens": tokens, "stats": render.stats_html(_shown_summary(view), lang=lang), "status": status}
        # The charts (a Plotly figure is re-sent whole, to every follower) at most every CHART_EVERY_S while the run
        # goes as fast as it comes; at each question and at the end always.
        drawn, charts_shown = room.rendered.get(("charts", lang), (-CHART_EVERY_S, {}))
        now = time.monotonic()
        if view.finished or view.question is not None or now - drawn >= CHART_EVERY_S or not charts_shown:
            # Serialised once here for the whole class, in the form Gradio's Plot sends (`PlotData`'s fields).
            charts_shown = {name: {"type": "plotly", "plot": figure.to_json()}
                            for name, figure in zip(("acceptance", "timing"), charts.figures(steps, lang=lang))}
            room.rendered[("charts", lang)] = now, charts_shown
        views.update(charts_shown)  # between drawings the last drawn figures (the same objects: nothing to send)
    if len(room.rendered) > 16:  # only the current version's are read again (and when the charts were drawn)
        for old in [k for k in room.rendered if k[0] not in ("charts", "tokens")]:
            del room.rendered[old]
    room.rendered[cache_key] = views
    return views


def question_html(view: RoomView, given: str | None, last: tuple[Any, str | None] | None, lang: str) -> str:
    """The class's question (the step's drafted tokens, not their fate), the follower's answer, and after the step
    what the target did."""
    parts = []
    if last is not None and last[1] is not None:
        step, said = last
        truth = answer_of(step)
        parts.append(t("follow.result", lang, step=number(step.index + 1, lang, "d"),
                       verdict=t(f"class.verdict.{truth}", lang), answer=t(f"class.answer_word.{said}", lang),
                       right=t("follow.right" if said == truth else "follow.wrong", lang)))
    question = view.question
    if question is not None:
        texts = (question.drafted_text or [""] * len(question.drafted))[:question.verified_drafts]
        drafts = " ".join(f"«{text}»" for text in texts)
        parts.append(t("follow.question", lang, step=number(question.index + 1, lang, "d"), tokens=drafts))
        if given is not None:
            parts.append(t("follow.answered", lang, answer=t(f"class.answer_word.{given}", lang)))
    if not parts:
        return ""
    asked = f' data-asked="{question.index}"' if question is not None else ""
    if question is not None and given is None:
        asked += " data-open"  # the answer buttons show (`CSS`)
    return (f'<div class="pg-class-question" data-testid="pg-class-question"{asked}>'
            + "".join(f"<p>{html.escape(p)}</p>" for p in parts) + "</div>")


def _follower_views(room: Room, view: RoomView, key: str, lang: str,
                    done_message: Callable[..., tuple[str, str]]) -> tuple[Any, ...]:
    given = ROOMS.answer_given(key, view.question.index) if view.question is not None else None
    last_step = view.steps[-1] if view.steps and view.steps[-1].index in room.answers else None
    last = (last_step, ROOMS.answer_given(key, last_step.index)) if last_step is not None else None
    ROOMS.shown(room, key, view.question)
    return FOLLOWED(_rendered(room, view, lang, done_message), class_question=question_html(view, given, last, lang))


# The follower stream each session has now (session key -> its token): a session's newer stream ends its older ones,
# so one client with one session cannot make the server write the class's views to it forty times over.
_CURRENT_STREAM: dict[str, object] = {}


class _Watch:
    """One per followed room, in the server's event loop, and its followers' one clock: it looks at the room every
    `LOOK_EVERY_S` and wakes all the room's followers' streams at once when a write is due (what the class sees
    changed: at once for a question, a press or the end; at most every `FREE_EVERY_S` while the run goes as fast as it
    comes) and at least every `LOOK_AGAIN_S` (a follower's own answer, their leaving, their beat). A stream resumes
    only when woken: no timer, task or look of its own between wakes, so a class of 60 costs the event loop one burst
    of writes per wake, not 60 clocks. It ends when no stream waits on it."""

    _by_room: dict[str, _Watch] = {}  # room code -> its watch

    def __init__(self, room: Room) -> None:
        self.room, self.waiting, self.wakes, self.changed = room, 0, 0, asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._watching())

    @classmethod
    def of(cls, room: Room) -> _Watch:
        watch = cls._by_room.get(room.code)
        if watch is None or watch.room is not room or watch.task.done():
            watch = cls._by_room[room.code] = cls(room)
        watch.waiting += 1
        return watch

    async def _watching(self) -> None:
        seen, woke = self.room.view().version, time.monotonic()
        while self.waiting > 0:
            await asyncio.sleep(LOOK_EVERY_S)
            view, now = self.room.view(), time.monotonic()
            urgent = view.finished or view.question is not None
            if view.version != seen and (urgent or now - woke >= FREE_EVERY_S) or now - woke >= LOOK_AGAIN_S:
                seen, woke = view.version, now
                self.wakes, woken, self.changed = self.wakes + 1, self.changed, asyncio.Event()
                woken.set()
        if _Watch._by_room.get(self.room.code) is self:
            del _Watch._by_room[self.room.code]

    async def wait(self, seen: int) -> int:
        """Until the watch's next wake after the `seen`-th (at once if it came meanwhile); the wakes so far."""
        if self.wakes == seen:
            await self.changed.wait()
        return self.wakes


def stream_for(done_message: Callable[..., tuple[str, str]]) -> Callable[..., Any]:
    """The follower's stream (`FOLLOWED`), `done_message` wording a finished run as the presenter's page does."""

    async def follow_stream(code: Any, request: gr.Request = None):
        """Writes what the class sees of the room `code` when it changed, woken by the room's `_Watch` (which paces
        the writes, and wakes every stream at least every `LOOK_AGAIN_S`); ends when the room ends or the follower
        stops following. Holds no thread and touches no model. A session has one stream: a newer one of the same
        session ends this one (at its next wake)."""
        if not isinstance(code, str):
            yield FOLLOWED.skip()
            return
        key, lang = session_key(request), language_of(request)
        mine = _CURRENT_STREAM[key] = object()  # this session's stream now: any older one ends at its next look
        shown: Any = None
        written: tuple[Any, ...] = ()
        beat = time.monotonic()
        watch: _Watch | None = None
        woken = 0
        try:
            while _CURRENT_STREAM.get(key) is mine:
                room = ROOMS.look(code, key)
                if room is not None and watch is None:
                    watch = _Watch.of(room)
                    woken = watch.wakes
                if room is None:
                    if ROOMS.followed(key) is None and written:
                        yield FOLLOWED(FOLLOWED.read(written),
                                       status=render.status_html(t("follow.ended", lang), "idle"), class_question="")
                    return
                view = room.view()
                given = ROOMS.answer_given(key, view.question.index) if view.question is not None else None
                state = (view.version, given)
                now = time.monotonic()
                if state != shown:
                    shown, beat = state, now
                    written = _follower_views(room, view, key, lang, done_message)
                    yield written
                elif now - beat >= BEAT_S and written:
                    beat = now
                    yield written  # the same values again: nothing for the page to change (Gradio sends no edit)
                assert watch is not None
                woken = await watch.wait(woken)
        finally:
            if watch is not None:
                watch.waiting -= 1
            if _CURRENT_STREAM.get(key) is mine:
                del _CURRENT_STREAM[key]

    return follow_stream


def _answer(choice: str, request: gr.Request) -> tuple[Any, ...]:
    key, lang = session_key(request), language_of(request)
    ROOMS.answer(key, ROOMS.asked(key), choice)
    text = t("follow.answered", lang, answer=t(f"class.answer_word.{choice}", lang))
    return ANSWERED(class_question=f'<div class="pg-class-question" data-testid="pg-class-question">'
                                   f"<p>{html.escape(text)}</p></div>")


def answer_kept(request: gr.Request = None) -> tuple[Any, ...]:
    """A follower answers "kept" for the class's question (the step their page shows)."""
    return _answer(KEPT, request)


def answer_refused(request: gr.Request = None) -> tuple[Any, ...]:
    """A follower answers "refused" for the class's question (the step their page shows)."""
    return _answer(REFUSED, request)


def leave_class(request: gr.Request = None) -> tuple[Any, ...]:
    """The follower runs their own (Generate): they stop following, and their stream ends."""
    key = session_key(request)
    if ROOMS.followed(key) is None:
        return LEFT.skip()
    ROOMS.leave(key)
    return LEFT(follow_code=None, follow_bar=gr.update(value="", visible=False), follow_try=gr.update(visible=False),
                class_question="")


def followed_panel(key: str, data: Any, lang: str) -> str | None:
    """The step microscope for a follower's click (None: the visitor follows no run). Only the steps the class is
    shown can be opened (the question's fate stays hidden); the step's figures come from the presenter's run's own
    kept scores, filled in once for everyone (no model work)."""
    room = ROOMS.followed(key)
    view = room.view() if room is not None else None
    if view is None or view.trace is None:
        return None
    step = data.get("step") if isinstance(data, dict) else None
    fill = room.fill if room is not None else None
    if fill is not None and isinstance(step, int) and any(s.index == step for s in view.steps):
        fill(step)
    shown = dataclasses.replace(view.trace, steps=list(view.steps))
    return microscope_view.panel_for_click(shown, data, lang)


def settings_query(room: Room | None) -> dict[str, str]:
    """The followed run's settings as a shared link's query (`links.query_for`), read back as the link's values."""
    trace = room.trace if room is not None else None
    if trace is None:
        raise RoomError.keyed("error.room.no_run")
    d = trace.decoding
    dtype = trace.env.get("dtype")
    query = links.query_for(None, trace.prompt, trace.target, trace.assistant, trace.method, trace.params,
                            d.get("max_new_tokens"), bool(d.get("sample")), d.get("temperature", 1.0),
                            d.get("top_p", 1.0), d.get("top_k", 0), d.get("seed", 0), "on" if trace.chat else "off",
                            dtype if dtype in ("float32", "bfloat16", "float16") else "auto")
    return dict(parse_qsl(query[1:], keep_blank_values=True))


def try_for(restore: Callable[[dict[str, str], str], tuple[Any, ...]]) -> Callable[..., tuple[Any, ...]]:
    """"Try it yourself": `restore` (the page's link restorer) fills the follower's page with the run's settings,
    and the follower stops following."""

    def try_it_yourself(request: gr.Request = None) -> tuple[Any, ...]:
        key, lang = session_key(request), language_of(request)
        restored = restore(settings_query(ROOMS.followed(key)), lang)
        return (*restored, *leave_class(request))

    return try_it_yourself


# --------------------------------------------------------------------------- the view


def build_class_box() -> dict[str, Any]:
    """The presenter's class link and tally, and the follower's bar and question (call inside the output column)."""
    ui: dict[str, Any] = {}
    with gr.Row(elem_id="pg-class-row", equal_height=False):
        ui["class_open"] = gr.Button(L("ui.class.open"), size="sm", elem_id="pg-class-open", scale=0, min_width=150)
        ui["follow_try"] = gr.Button(L("ui.follow.try"), size="sm", elem_id="pg-follow-try", visible=False, scale=0,
                                     min_width=150)
        ui["class_address"] = gr.Textbox(visible=False, elem_id="pg-class-address")
    ui["class_link"] = gr.HTML("", elem_id="pg-class-link")
    ui["class_tally"] = gr.HTML("", elem_id="pg-class-tally-box")
    ui["follow_bar"] = gr.HTML("", elem_id="pg-follow-bar", visible=False)
    ui["class_question"] = gr.HTML("", elem_id="pg-class-question-box")
    with gr.Row(elem_id="pg-class-answers"):
        # Shown by the style sheet only while the question box holds an open question (`CSS`).
        ui["answer_kept"] = gr.Button(L("ui.class.kept"), elem_id="pg-answer-kept", min_width=140)
        ui["answer_refused"] = gr.Button(L("ui.class.refused"), elem_id="pg-answer-refused", min_width=140)
    ui["class_timer"] = gr.Timer(TICK_S, active=False)
    ui["follow_code"] = gr.State(None)
    return ui


# The page's address as the presenter's browser has it (behind a Space's proxy the server cannot know it).
ADDRESS_JS = "() => [window.location.origin + window.location.pathname]"


def wire(loaded: Any, ui: dict[str, Any], restore: Callable[[dict[str, str], str], tuple[Any, ...]],
         restored: list[Any], done_message: Callable[..., tuple[str, str]]) -> None:
    """The class's events. `loaded`: the page load's chain (a follower joins after it, so its views are not written
    over); `restore`/`restored`: the page's link restorer and its output components (for "Try it yourself");
    `done_message`: how the page words a finished run."""
    out = lambda outputs: outputs.components(ui)  # noqa: E731
    ui["class_open"].click(guarded(open_class), ui["class_address"],
                           [ui["class_link"], ui["class_tally"], ui["class_timer"]], js=ADDRESS_JS, **PRIVATE)
    ui["class_timer"].tick(guarded(class_tick), None, [ui["class_tally"], ui["class_timer"]], **PRIVATE)
    # The follower's stream: in a queue group of its own without a limit (it waits on no run and holds no thread).
    loaded.then(guarded(join_class), None, out(JOINED), **PRIVATE).then(
        stream_for(done_message), ui["follow_code"], out(FOLLOWED), api_visibility="private", show_progress="hidden",
        preprocess=False, postprocess=False, concurrency_id="follow", concurrency_limit=None)
    ui["answer_kept"].click(guarded(answer_kept), None, out(ANSWERED), **PRIVATE)
    ui["answer_refused"].click(guarded(answer_refused), None, out(ANSWERED), **PRIVATE)
    ui["generate_btn"].click(guarded(leave_class), None, out(LEFT), **PRIVATE)
    ui["follow_try"].click(guarded(try_for(restore)), None, [*restored, *out(LEFT)], **PRIVATE)


CSS = """
#pg-class-row { align-items: center; }
.pg-class-link { display: flex; flex-wrap: wrap; gap: 4px 16px; align-items: center; }
.pg-class-link p { margin: 0; }
.pg-class-url a { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; overflow-wrap: anywhere; }
.pg-class-qr { margin: 0; line-height: 0; }
.pg-class-qr svg { width: 180px; height: 180px; }
.pg-class-tally p, .pg-class-question p, .pg-follow { margin: 2px 0; }
.pg-class-tally, .pg-class-question, .pg-follow { border-inline-start: 4px solid #0072B2; padding-inline-start: 8px; }
html.pg-presenter .pg-class-tally { font-size: 18px; }
#pg-class-answers { display: none !important; }
.gradio-container:has(#pg-class-question-box [data-open]) #pg-class-answers { display: flex !important; }
"""
