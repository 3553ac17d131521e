"""Start the server: build the page, serve it, then start the background load of the default model.

`main` is what `app.py` (and so the Hugging Face Space) runs; `launch_kwargs` is what `launch()` needs besides the
address (styles, theme, the upload limit), shared with tests that launch the page themselves.
"""

from __future__ import annotations

import json
import os
from typing import Any


from .. import microscope_view, render
from ..i18n import LANGUAGES, t
from ..models import DEFAULT_TARGET, gc_paused
from ..compat import gradio_internals
from ..settings import get_settings
from . import access, follow, gate, language, mcp_tools, presenter, sessions
from .head_start import configure_logging
from .page import build_ui
from .preload import PRELOAD
from .replay_tab import MAX_TRACE_BYTES

# Styles of the page itself (the token/legend/stat styles live in render.CSS).
PAGE_CSS = """
#pg-header h1 { margin-bottom: 0; }
#pg-header p { margin-top: 4px; opacity: .8; }
#pg-method-summary { font-size: 14px; }
#pg-method-summary p { margin: 0; }
.pg-lecture dt { font-weight: 600; margin-top: 4px; }
.pg-lecture dd { margin: 0 0 4px 0; }
/* An HTML box with nothing in it (the guide example's info, a link's status, a results table before a run) takes
   no room: it appears when it has something to show. */
.block:has(> .html-container > .prose:empty) { display: none; }
/* A phone: the title takes the row's whole width and the language picker goes under it (side by side, the title
   was squeezed into a column a word wide). */
@media (max-width: 640px) {
  .row:has(> #pg-header) { flex-wrap: wrap; }
  #pg-header { flex: 1 1 100% !important; min-width: 100% !important; }
  #pg-header h1 { font-size: 1.6rem; }
}
"""

# Runs in <head>, beside language.HEAD. Two things Gradio 6.31's dropdown does not do:
# - say what an empty choice means: the guide-example picker holds a one-line hint (in the page's language: Gradio
#   sets <html lang>) until an example is picked;
# - open its list again after Escape: it opens the list only when its input gains focus, and Escape closes it while
#   the focus stays, so a click on the same box showed nothing until the focus left and came back. A click on a
#   focused, closed dropdown now opens it as ArrowDown does (the whole list, as on focus). Enter on it after Escape
#   picked the option highlighted before, unseen: it now opens the list instead;
# - close its list when the focus leaves: its key handler runs a tick late, so Tab away from it opened the list again,
#   filtered to the box's text (one item, or none), and left it over the page.
PAGE_HEAD = """<script>(function () {
  var hints = %(hints)s;
  function hint() {
    var input = document.querySelector("#pg-preset input[role=combobox]");
    var lang = String(document.documentElement.lang || "en").split(/[-_]/)[0];
    var text = hints[lang] || hints.en;
    if (input && input.getAttribute("placeholder") !== text) { input.setAttribute("placeholder", text); }
  }
  new MutationObserver(hint).observe(document.documentElement, {childList: true, subtree: true, attributes: true,
                                                                 attributeFilter: ["lang"]});
  function closed(input) {
    return input && document.activeElement === input && input.getAttribute("aria-expanded") === "false";
  }
  function press(input, key) { input.dispatchEvent(new KeyboardEvent("keydown", {key: key, bubbles: true})); }
  document.addEventListener("click", function (event) {
    var box = event.target.closest && event.target.closest(".wrap-inner");
    var input = box && box.querySelector("input[role=combobox]");
    if (closed(input)) { press(input, "ArrowDown"); }
  });
  document.addEventListener("keydown", function (event) {
    var input = event.target;
    if (event.isTrusted && event.key === "Enter" && input.matches && input.matches("input[role=combobox]") &&
        closed(input)) {
      event.preventDefault(); event.stopPropagation(); press(input, "ArrowDown");
    }
  }, true);
  document.addEventListener("focusout", function (event) {
    var input = event.target;
    if (!(input.matches && input.matches("input[role=combobox]"))) { return; }
    setTimeout(function () {
      if (document.activeElement !== input && input.getAttribute("aria-expanded") === "true") { press(input, "Escape"); }
    }, 50);
  });
})();</script>""" % {"hints": json.dumps({lang: t("ui.preset.placeholder", lang) for lang in LANGUAGES},
                                         ensure_ascii=False)}

QUEUE_WORKERS = 40  # Gradio's own (`launch(max_threads=40)`): for every handler but the followers' streams
# How often the queue looks for a call to start when it has none, and its progress loop for messages to send
# (`gradio_internals.poll_less_when_free`; Gradio's 1 ms and 10 ms keep an idle server at 4-5 % of a core).
QUEUE_FREE_POLL_S = 0.01
QUEUE_PROGRESS_POLL_S = 0.1


def launch_kwargs() -> dict[str, Any]:
    """What `launch()` needs besides the server address: styles, title and the upload limit."""
    return {"css": render.CSS + microscope_view.CSS + PAGE_CSS + language.CSS + access.CSS + presenter.CSS + follow.CSS,
            "head": language.HEAD + PAGE_HEAD + access.HEAD + presenter.HEAD, "i18n": language.L, "theme": access.theme(),
            # The only upload is a trace file: refuse anything larger before it reaches the disk.
            "max_file_size": MAX_TRACE_BYTES,
            # Sessions kept at most (Gradio's default 10,000 each with a copy of the page's last values): `sessions`.
            "state_session_capacity": sessions.MAX_SESSIONS,
            # In front of Gradio's routes: bounded URLs and bodies, our answer where Gradio's is a 500, and an end to
            # queued calls whose answer nobody opens (`gate`).
            "app_kwargs": {"middleware": gate.middleware()}}


def start_preload() -> None:
    """Load the default model in the background (PLAYGROUND_PRELOAD), while the page already answers."""
    if get_settings().preload:
        PRELOAD.start(DEFAULT_TARGET, "auto")


def main() -> None:
    """Serve the page on GRADIO_SERVER_NAME:GRADIO_SERVER_PORT (default 127.0.0.1:7860) until interrupted."""
    configure_logging()
    sessions.cap_arenas(get_settings().malloc_arenas)  # before the server's threads allocate (`sessions`)
    gradio_internals.spare_missing_matplotlib()
    gradio_internals.keep_no_last_values()  # a session's last answers are not copied into its config (`sessions`)
    with gc_paused():  # building the page allocates in bulk (`models.gc_paused` says why)
        demo = build_ui()
        # Serve first, then load: the page answers (and shows the load's progress) while the start-up
        # load imports torch and Transformers; both compete for the same interpreter lock otherwise.
        demo.launch(
            server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
            server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
            prevent_thread_lock=True,
            mcp_server=get_settings().mcp,
            **launch_kwargs(),
        )
    # Every follower's stream runs in the queue as long as its page is open: workers for all of them besides
    # Gradio's 40 (`gradio_internals.widen_queue`), so a class never holds the queue a run needs.
    settings = get_settings()
    workers = QUEUE_WORKERS + settings.max_rooms * settings.room_followers
    gradio_internals.widen_queue(gradio_internals.queue_of(demo), workers)
    gradio_internals.poll_less_when_free(gradio_internals.queue_of(demo), QUEUE_FREE_POLL_S, QUEUE_PROGRESS_POLL_S)
    mcp_tools.end_with_agent(demo)  # an agent's tool call stops when the agent disconnects
    start_preload()
    demo.block_thread()
