"""For a class: the presenter's view, the pace of a run, and "Final text only" on the token views.

- The presenter's view (a switch in the header, or the link's ``?view=presenter``: `links.presenter_view`) gives the
  stream and the step microscope the screen in large type; the settings fold away behind a "Settings" button (still
  there, a click or Tab away). It is a class on ``<html>`` (`HEAD` sets it before the page draws, so a projector
  never shows the ordinary layout first) and styles (`CSS`): at 1280×720 the run's settings line (`run_line_html`),
  the output with the step just made marked, the step in words under it (`narration_html`), the legend beside it and
  the microscope with its rule first fit one screen in 17 px type or larger. On a phone the prompt and Generate come
  first and the output and the microscope stack at full width, in either view.
- The pace (`pace.Pace`, one per visitor): "Step by step" stops the run after each verification step until the
  presenter presses "Next step" (or the N key, or a clicker's Page Down, which step the replay when no live run
  stands paused: `HEAD`); "Slowed" waits up to a number of seconds
  per step. The engine's worker does the waiting outside its turn at the models (`engine.turns._Turns.pause`), so other
  visitors' runs go on and the pause is in none of the step's timings. A change of pace applies to a run at once.
- "Final text only" hides the rejected, discarded and unverified drafts of a token view (`render.FINAL_HIDDEN`), so
  a class reads the answer as it stands.
"""

from __future__ import annotations

import collections
import html
import threading
from dataclasses import dataclass
from typing import Any

import gradio as gr

from .. import render
from ..errors import shorten
from ..i18n import Number, number, t
from ..methods import METHODS
from ..settings import get_settings
from ..pace import DEFAULT_SECONDS, FREE, MAX_SECONDS, MIN_SECONDS, MODES, SLOW, Pace
from ..errors import PlaygroundError
from ..trace import Step, Trace, short_repr
from . import links
from .guard import PRIVATE, guarded, session_key, url_query
from .language import L
from .outputs import Inputs

MAX_RUN_LINE_NAME = 60  # a model's name in the settings line, cut (a path may be long)

_PACES: "collections.OrderedDict[str, Pace]" = collections.OrderedDict()
_PACES_LOCK = threading.Lock()


def pace_of(key: str) -> Pace | None:
    """The visitor's pace for a run that starts now (None: the visitor never chose one, a run as fast as it goes)."""
    with _PACES_LOCK:
        return _PACES.get(key)


def _pace_for(key: str) -> Pace:
    with _PACES_LOCK:
        pace = _PACES.get(key)
        if pace is None:
            pace = _PACES[key] = Pace()
            _drop_unused_paces_locked()
        _PACES.move_to_end(key)
        return pace


def _drop_unused_paces_locked() -> None:
    """Past PLAYGROUND_MAX_PACES, drop the least recently set paces no run goes at (caller holds `_PACES_LOCK`). A pace
    a run waits on is never dropped: its visitor's "Next step" and pace switch must keep reaching it. So the table
    holds at most PLAYGROUND_MAX_PACES plus the runs going at once (PLAYGROUND_MAX_RUNS)."""
    excess = len(_PACES) - get_settings().max_paces
    if excess <= 0:
        return
    for key in [key for key, pace in _PACES.items() if not pace.runs][:excess]:
        del _PACES[key]


def forget_pace(key: str) -> None:
    """The visitor left: their pace goes, unless a run still goes at it (that run ends soon; the table's bound then
    drops it)."""
    with _PACES_LOCK:
        pace = _PACES.get(key)
        if pace is not None and not pace.runs:
            del _PACES[key]


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value == value:
        raise PlaygroundError.keyed("error.pace.seconds", got=short_repr(value, 40), lo=Number(MIN_SECONDS, "g"), hi=Number(MAX_SECONDS, "g"))
    return float(value)


PACE = Inputs("mode", "seconds")  # `set_pace`'s


def set_pace(mode: Any, seconds: Any, request: gr.Request = None) -> tuple[Any, Any]:
    """The visitor chose a pace (also while a run goes: it goes on at the new pace): the seconds' slider shows for
    "Slowed", the "Next step" button for any pace that waits."""
    if mode not in MODES:
        raise PlaygroundError.keyed("error.pace.mode", got=short_repr(mode, 40), known=", ".join(MODES))
    _pace_for(session_key(request)).set(mode, _seconds(seconds))
    return gr.update(visible=mode == SLOW), gr.update(visible=mode != FREE)


def step_on(request: gr.Request = None) -> None:
    """"Next step": the visitor's paused run takes its next step (a slowed one stops waiting)."""
    _pace_for(session_key(request)).step_on()


def restore_view(request: gr.Request = None) -> Any:
    """On page load: the presenter's switch as the link asks (`links.presenter_view`)."""
    query = url_query(request)
    return True if links.presenter_view(query) else gr.skip()


def paused_status(step: int, lang: str) -> str:
    return render.status_html(t("status.paused", lang, step=number(step, lang, "d")), "idle")


def _value(text: str) -> str:
    """A value inside the settings line (a model's name, a number): its own direction in any page."""
    return f"<bdi>{html.escape(shorten(text, MAX_RUN_LINE_NAME))}</bdi>"


def _t_html(key: str, lang: str, **fields: str) -> str:
    """A catalogue sentence as HTML, `fields` (HTML already) put in its escaped text."""
    return html.escape(t(key, lang), quote=False).format(**fields)


def run_line_html(trace: Trace | None, lang: str) -> str:
    """The run's settings in one line for the class (above the live output, and a replay's): method, assistant,
    draft length, greedy or sampling at its temperature, precision. Empty without a run."""
    if trace is None:
        return ""
    method = METHODS.get(trace.method)
    parts = [_value(method.localized(lang).title if method is not None else trace.method)]
    if method is not None and method.needs_assistant:
        parts.append(_t_html("presenter.run.assistant", lang, name=_value(trace.assistant or "")))
    name = method.draft_length_param if method is not None else None
    param = next((p for p in method.params if p.name == name), None) if method is not None else None
    if name is not None and param is not None and trace.params.get(name) is not None:
        parts.append(f"{html.escape(param.localized(lang).label)} {_value(str(trace.params[name]))}")
    if trace.decoding.get("sample"):
        temperature = trace.decoding.get("temperature", 1.0)
        shown = number(temperature, lang, "g") if isinstance(temperature, (int, float)) else str(temperature)
        parts.append(_t_html("handout.decoding.sampling", lang, temperature=f'<bdi dir="ltr">{html.escape(shown)}</bdi>'))
    else:
        parts.append(html.escape(t("handout.decoding.greedy", lang)))
    dtype = trace.env.get("dtype")
    if dtype:
        parts.append(_value(str(dtype)))
    label = html.escape(t("presenter.run.label", lang))
    return (f'<p class="pg-run-line" data-testid="pg-run-line" data-method="{html.escape(trace.method)}">'
            f'<span class="pg-run-line-label">{label}</span> {" · ".join(parts)}</p>')


def narration_html(step: Step | None, method: str, lang: str) -> str:
    """The latest step in words, under the live output (the replay's sentence: `render.narrate_step`)."""
    if step is None:
        return ""
    return (f'<p class="pg-live-narration" data-testid="pg-narration" data-step="{step.index}">'
            f'{html.escape(render.narrate_step(step, method, lang=lang))}</p>')


# The view's switch, the settings' fold and the final-text toggles act in the browser only: the server is not asked.
SWITCH_JS = "(on) => { window.pgPresenter && window.pgPresenter(on === true); return []; }"
SETTINGS_JS = "() => { document.documentElement.classList.toggle('pg-show-settings'); return []; }"


def final_only_js(view_id: str) -> str:
    return ("(on) => { const v = document.getElementById(%r); if (v) v.classList.toggle('pg-final-only', on === true);"
            " return []; }" % view_id)


def final_only_toggle(view_id: str, elem_id: str) -> gr.Checkbox:
    """A "Final text only" checkbox for the token view `view_id` (its element id); wired here."""
    box = gr.Checkbox(value=False, label=L("ui.final_only"), elem_id=elem_id, container=False, min_width=160,
                      elem_classes=["pg-final-toggle"])
    box.change(None, box, None, js=final_only_js(view_id), **PRIVATE)
    return box


def switch() -> gr.Checkbox:
    """The presenter's view switch (the header's; call inside a row)."""
    box = gr.Checkbox(value=False, label=L("ui.presenter.label"), elem_id="pg-presenter", container=False,
                      scale=0, min_width=170)
    box.change(None, box, None, js=SWITCH_JS, **PRIVATE)
    return box


@dataclass
class PaceControls:
    mode: gr.Radio
    seconds: gr.Slider
    step_on: gr.Button
    settings: gr.Button


def build_pace(view_id: str) -> PaceControls:
    """The row of how a class sees the run (call inside the output column): the pace, "Next step", "Final text only"
    for the token view `view_id`, and the presenter's "Settings" fold button (shown in the presenter's view)."""
    with gr.Row(elem_id="pg-pace-row", equal_height=False):
        # The choices' names are Gradio's translations (`L`): in the visitor's language from the first paint.
        mode = gr.Radio([(L(f"ui.pace.{name}"), name) for name in MODES], value=FREE, label=L("ui.pace.label"), info=L("ui.pace.info"),
                        elem_id="pg-pace", scale=3)
        seconds = gr.Slider(MIN_SECONDS, MAX_SECONDS, value=DEFAULT_SECONDS, step=0.25, label=L("ui.pace.seconds"),
                            visible=False, elem_id="pg-pace-seconds", scale=2, min_width=180)
        step = gr.Button(L("ui.pace.step_on"), visible=False, variant="primary", elem_id="pg-step-on", scale=1,
                         min_width=240)
        final_only_toggle(view_id, "pg-final-only")
        settings = gr.Button(L("ui.presenter.settings"), size="sm", elem_id="pg-settings-toggle", scale=0,
                             min_width=110)
    pace = PACE.components({"mode": mode, "seconds": seconds})
    mode.change(guarded(PACE.into(set_pace)), pace, [seconds, step], **PRIVATE)
    seconds.change(guarded(PACE.into(set_pace)), pace, [seconds, step], **PRIVATE)
    step.click(guarded(step_on), None, None, **PRIVATE)
    settings.click(None, None, None, js=SETTINGS_JS, **PRIVATE)
    return PaceControls(mode=mode, seconds=seconds, step_on=step, settings=settings)


def _step_on_shown(mode: Any) -> Any:
    """A run starts: "Next step" shows when the pace waits (any pace but free)."""
    return gr.update(visible=mode in MODES and mode != FREE)


def _step_on_hidden() -> Any:
    """The run ended (its end, Stop, a pause nobody stepped on, an error): "Next step" has nothing to step."""
    return gr.update(visible=False)


def wire_run(controls: PaceControls, generate: gr.Button, run_event: Any) -> None:
    """"Next step" shows while a run at a waiting pace goes, and goes with the run's end."""
    generate.click(guarded(_step_on_shown), controls.mode, controls.step_on, **PRIVATE)
    run_event.then(guarded(_step_on_hidden), None, controls.step_on, **PRIVATE)


def wire_load(demo: gr.Blocks, presenter: gr.Checkbox) -> None:
    demo.load(guarded(restore_view), None, presenter, **PRIVATE)


# Runs in <head>: the presenter's view from the link before the page draws; the switch keeps the address in step
# (a copied address opens the same view). N (any keyboard layout: the key's position) and a clicker's Page Down step
# what is on the screen: the live run while it stands paused ("Next step"), else the replay of the "Step through a
# run" tab when it shows (its hidden key button: at the last step it starts again at step 1). M scrolls the open
# microscope panel down a screenful (Shift+M up). None of them while the focus is in a text field.
HEAD = """<script>(function () {
  var root = document.documentElement;
  function fromLink() { return new URLSearchParams(window.location.search).get("view") === "presenter"; }
  if (fromLink()) { root.classList.add("pg-presenter"); }
  window.pgPresenter = function (on) {
    root.classList.toggle("pg-presenter", on);
    if (!on) { root.classList.remove("pg-show-settings"); }
    if (on === fromLink()) { return; }
    var url = new URL(window.location.href);
    if (on) { url.searchParams.set("view", "presenter"); } else { url.searchParams.delete("view"); }
    window.history.replaceState(null, "", url.toString());
  };
  function typing(el) {
    if (!el || !el.matches) { return false; }
    return el.isContentEditable || el.matches("textarea, select, input:not([type=checkbox]):not([type=radio]):not([type=range]):not([type=button])");
  }
  function shown(selector) { var e = document.querySelector(selector); return e && e.offsetParent ? e : null; }
  function onScreen(e) { var b = e.getBoundingClientRect(); return b.bottom > 0 && b.top < window.innerHeight; }
  function liveRun() {  // a live run stands paused, or goes on at a pace: the key is its "Next step"
    var button = shown("#pg-step-on"), status = document.querySelector("#pg-status-box [data-testid=pg-status]");
    var kind = status ? status.getAttribute("data-kind") : "";
    return button && (kind === "idle" || kind === "running") && document.querySelector("#pg-output .tok") ? button : null;
  }
  function replay() {
    var output = shown("#pg-replay-output");
    return output && onScreen(output) && output.querySelector(".tok") ? document.querySelector("#pg-replay-key") : null;
  }
  function panel() {
    var all = Array.prototype.slice.call(document.querySelectorAll("#pg-micro-box .pg-micro, #pg-replay-micro .pg-micro"));
    return all.filter(function (e) { return e.offsetParent && onScreen(e); })[0] || null;
  }
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) { return; }
    if (event.code === "KeyM") {
      var open = panel();
      if (!open) { return; }
      event.preventDefault();
      var by = Math.max(40, open.clientHeight * 0.8) * (event.shiftKey ? -1 : 1);
      if (open.scrollHeight > open.clientHeight + 1) { open.scrollBy({top: by}); }
      else { window.scrollBy({top: event.shiftKey ? by : Math.max(0, open.getBoundingClientRect().bottom - window.innerHeight + 8)}); }
      return;
    }
    if (event.shiftKey || (event.code !== "KeyN" && event.key !== "PageDown")) { return; }
    var button = liveRun() || replay();
    if (!button) { return; }
    event.preventDefault();
    button.click();
  });
})();</script>"""

CSS = """
/* The pace's row. */
#pg-pace-row { align-items: flex-end; }
#pg-step-on { min-height: 2.8em; white-space: nowrap; }
html:not(.pg-presenter) #pg-settings-toggle { display: none; }
.pg-final-toggle, #pg-presenter { flex: 0 0 auto !important; width: auto !important; align-self: center; }
#pg-presenter label { white-space: nowrap; }
/* Final text only: what reached the output, as it stands. */
""" + render.FINAL_ONLY_CSS + """
/* The run's settings line above the output and the latest step in words under it (both views). */
.pg-run-line { margin: 0; font-size: 14px; line-height: 1.4; }
.pg-run-line-label { font-weight: 600; }
.pg-live-narration { margin: 4px 0 0; font-size: 14px; line-height: 1.45; }
/* Beside the output in the ordinary view the legend takes a line of its own above it (the row wraps). */
#pg-output-row { flex-wrap: wrap; }
html:not(.pg-presenter) #pg-output-row > #pg-legend-box { order: -1; flex: 1 1 100% !important; min-width: 100% !important; }
/* A phone, in either view: Generate near the top (the prompt's column first, the settings after it), and the output,
   the legend and the microscope one above the other, each the screen's width. */
@media (max-width: 700px) {
  .row:has(> #pg-settings-col) > #pg-settings-col { order: 1; }
  #pg-prompt { order: -2; }
  .row:has(> #pg-generate) { order: -1; }
  #pg-prompt textarea { max-height: 9em; }
  #pg-output-row { flex-direction: column; }
  #pg-output-row > *, .row:has(> #pg-replay-output) > * { min-width: 100% !important; width: 100%; }
  .row:has(> #pg-replay-output) { flex-direction: column; }
}
/* The presenter's view: the header's title, the settings column and the set-up's extras fold away; the stream, the
   legend beside it and the microscope take the width, in projector type (17 px and up), so that at 1280×720 the
   settings line, the stream, the step in words and the microscope's rule are on one screen. */
html.pg-presenter #pg-header, html.pg-presenter #pg-settings-col, html.pg-presenter #pg-examples,
html.pg-presenter #pg-link-make, html.pg-presenter #pg-check-plain, html.pg-presenter #pg-link,
html.pg-presenter #pg-link-status, html.pg-presenter #pg-pace .info-text, html.pg-presenter #pg-example-note,
html.pg-presenter #pg-language, html.pg-presenter #pg-legend-box .pg-hint { display: none !important; }
/* Labels the eye does not need on a projector stay for screen readers. */
html.pg-presenter #pg-prompt [data-testid=block-info], html.pg-presenter #pg-pace [data-testid=block-info] {
  position: absolute !important; width: 1px; height: 1px; overflow: hidden; clip-path: inset(50%); white-space: nowrap; }
html.pg-presenter .gradio-container { --layout-gap: 8px; }
html.pg-presenter .gradio-container > .main, html.pg-presenter .gradio-container .contain { padding-top: 0 !important; }
html.pg-presenter #pg-legend-box, html.pg-presenter #pg-stats-box { order: 1; }
html.pg-presenter #pg-output-row > #pg-legend-box { order: 0; flex: 0 0 170px !important; min-width: 0 !important; }
html.pg-presenter .pg-legend { flex-direction: column; align-items: flex-start; font-size: 17px !important; gap: 6px;
  margin: 0; }
html.pg-presenter.pg-show-settings #pg-settings-col { display: flex !important; }
html.pg-presenter.pg-show-settings #pg-language { display: block !important; }
html.pg-presenter.pg-show-settings #pg-examples, html.pg-presenter.pg-show-settings #pg-check-plain {
  display: block !important; }
html.pg-presenter #pg-settings-toggle { align-self: center; }
html.pg-presenter #pg-prompt textarea { max-height: 2.4em !important; }
html.pg-presenter #pg-generate, html.pg-presenter #pg-stop, html.pg-presenter #pg-step-on { min-height: 0; padding-block: 6px; }
html.pg-presenter .pg-status { font-size: 17px !important; padding: 4px 10px; }
html.pg-presenter .pg-run-line { font-size: 17px !important; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
html.pg-presenter .pg-live-narration { font-size: 17px !important; line-height: 1.35; }
html.pg-presenter .pg-tokens { font-size: 20px !important; line-height: 1.6 !important; min-height: 4em; }
html.pg-presenter #pg-output > div { max-height: calc(100vh - 470px) !important; min-height: 5em; }
/* The step just made, marked live while the run goes (the replay's mark of its current step). */
html.pg-presenter #pg-output .pg-step:last-of-type { outline: 2px solid #0072B2; outline-offset: 2px; border-radius: 4px;
  background: rgba(0,114,178,.07); }
html.pg-presenter #pg-micro-box, html.pg-presenter #pg-replay-micro { font-size: 17px !important; }
html.pg-presenter .pg-micro { font-size: 17px !important; }
html.pg-presenter :is(#pg-micro-box, #pg-replay-micro) :is(.pg-micro-dist h4, .pg-micro-rule-title, .pg-micro-mark,
  .pg-micro-outside, .pg-micro-known, .pg-micro-context, .pg-micro-draw-end, .pg-micro-table caption) { font-size: 17px !important; }
html.pg-presenter .pg-micro-row { grid-template-columns: minmax(3em, 6em) 1fr auto; }
html.pg-presenter .pg-micro-row .pg-micro-mark { grid-column: 1 / -1; }
/* The open panel scrolls inside the screen (the M key, `HEAD`); a formula stays on one line. */
html.pg-presenter #pg-micro-box .pg-micro { max-height: calc(100vh - 250px); overflow-y: auto; }
.pg-micro-rule bdi[dir=ltr] { white-space: nowrap; }
html.pg-presenter #pg-output-row > #pg-output-col { flex: 1 1 0 !important; min-width: 0; }
html.pg-presenter #pg-output-row > #pg-micro-box { flex: 0 0 min(380px, 34%) !important; min-width: 0; }
@media (max-width: 700px) {
  html.pg-presenter #pg-output-row > * { flex: 1 1 auto !important; }
  html.pg-presenter .pg-tokens { font-size: 18px !important; }
  html.pg-presenter .pg-legend { flex-direction: row; flex-wrap: wrap; }
}
"""
