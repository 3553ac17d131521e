"""For a class: the presenter's view, the pace of a run, and "Final text only" on the token views.

- The presenter's view (a switch in the header, or the link's ``?view=presenter``: `links.presenter_view`) gives the
  stream and the step microscope the screen in large type; the settings fold away behind a "Settings" button (still
  there, a click or Tab away). It is a class on ``<html>`` (`HEAD` sets it before the page draws, so a projector
  never shows the ordinary layout first) and styles (`CSS`); on a phone the output and the microscope stack at full
  width in either view.
- The pace (`pace.Pace`, one per visitor): "Step by step" stops the run after each verification step until the
  presenter presses "Next step" (or the N key, or a clicker's Page Down); "Slowed" waits up to a number of seconds
  per step. The engine's worker does the waiting outside its turn at the models (`engine.turns._Turns.pause`), so other
  visitors' runs go on and the pause is in none of the step's timings. A change of pace applies to a run at once.
- "Final text only" hides the rejected, discarded and unverified drafts of a token view (`render.FINAL_HIDDEN`), so
  a class reads the answer as it stands.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import Any

import gradio as gr

from .. import render
from ..i18n import Number, number, t
from ..pace import DEFAULT_SECONDS, FREE, MAX_SECONDS, MIN_SECONDS, MODES, SLOW, Pace
from ..errors import PlaygroundError
from ..trace import short_repr
from . import links
from .guard import PRIVATE, guarded, session_key
from .language import L

MAX_PACES = 1000  # visitors' paces kept (least recently set dropped first): a few hundred bytes each

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
    """Past MAX_PACES, drop the least recently set paces no run goes at (caller holds `_PACES_LOCK`). A pace a run
    waits on is never dropped: its visitor's "Next step" and pace switch must keep reaching it. So the table holds at
    most MAX_PACES plus the runs going at once (PLAYGROUND_MAX_RUNS)."""
    excess = len(_PACES) - MAX_PACES
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


def set_pace(mode: Any, seconds: Any, request: gr.Request = None) -> tuple[Any, Any]:  # type: ignore[assignment]
    """The visitor chose a pace (also while a run goes: it goes on at the new pace): the seconds' slider shows for
    "Slowed", the "Next step" button for any pace that waits."""
    if mode not in MODES:
        raise PlaygroundError.keyed("error.pace.mode", got=short_repr(mode, 40), known=", ".join(MODES))
    _pace_for(session_key(request)).set(mode, _seconds(seconds))
    return gr.update(visible=mode == SLOW), gr.update(visible=mode != FREE)


def step_on(request: gr.Request = None) -> None:  # type: ignore[assignment]
    """"Next step": the visitor's paused run takes its next step (a slowed one stops waiting)."""
    _pace_for(session_key(request)).step_on()


def restore_view(request: gr.Request = None) -> Any:  # type: ignore[assignment]
    """On page load: the presenter's switch as the link asks (`links.presenter_view`)."""
    query = dict(request.query_params) if request is not None else {}
    return True if links.presenter_view(query) else gr.skip()


def paused_status(step: int, lang: str) -> str:
    return render.status_html(t("status.paused", lang, step=number(step, lang, "d")), "idle")


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
    mode.change(guarded(set_pace), [mode, seconds], [seconds, step], **PRIVATE)
    seconds.change(guarded(set_pace), [mode, seconds], [seconds, step], **PRIVATE)
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
# (a copied address opens the same view); N (any keyboard layout: the key's position) and a clicker's Page Down press
# "Next step" while it shows, unless the focus is in a text field.
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
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) { return; }
    if (event.code !== "KeyN" && event.key !== "PageDown") { return; }
    var button = document.querySelector("#pg-step-on");
    if (!button || !button.offsetParent) { return; }
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
/* A phone, in either view: the output and the microscope one above the other, each the screen's width. */
@media (max-width: 700px) {
  .row:has(> #pg-output) { flex-direction: column; }
  .row:has(> #pg-output) > *, .row:has(> #pg-replay-output) > * { min-width: 100% !important; width: 100%; }
  .row:has(> #pg-replay-output) { flex-direction: column; }
}
/* The presenter's view: the header's title, the settings column and the set-up's extras fold away; the stream and
   the microscope take the width, in large type. */
html.pg-presenter #pg-header, html.pg-presenter #pg-settings-col, html.pg-presenter #pg-examples,
html.pg-presenter #pg-link-make, html.pg-presenter #pg-check-plain, html.pg-presenter #pg-link,
html.pg-presenter #pg-link-status, html.pg-presenter #pg-pace .info-text,
html.pg-presenter #pg-language { display: none !important; }
/* The stream right under the run's controls and status; the legend and the figures under it. */
html.pg-presenter #pg-legend-box, html.pg-presenter #pg-stats-box { order: 1; }
html.pg-presenter.pg-show-settings #pg-settings-col { display: flex !important; }
html.pg-presenter.pg-show-settings #pg-language { display: block !important; }
html.pg-presenter.pg-show-settings #pg-examples, html.pg-presenter.pg-show-settings #pg-check-plain {
  display: block !important; }
html.pg-presenter #pg-settings-toggle { align-self: center; }
html.pg-presenter #pg-prompt textarea { max-height: 3.2em !important; }
html.pg-presenter .pg-tokens { font-size: 20px !important; line-height: 1.75 !important; }
html.pg-presenter #pg-micro-box, html.pg-presenter #pg-replay-micro { font-size: 17px !important; }
html.pg-presenter .row:has(> #pg-output) > #pg-output { flex: 1 1 0 !important; min-width: 0; }
html.pg-presenter .row:has(> #pg-output) > #pg-micro-box { flex: 0 0 min(380px, 34%) !important; min-width: 0; }
html.pg-presenter #pg-output > div { max-height: calc(100vh - 140px) !important; }
@media (max-width: 700px) {
  html.pg-presenter .row:has(> #pg-output) > #pg-micro-box { flex: 1 1 auto !important; }
  html.pg-presenter .pg-tokens { font-size: 18px !important; }
}
"""
