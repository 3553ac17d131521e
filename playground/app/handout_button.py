"""The page's handout download: after each run, the run's printable handout (`playground.handout`) in the visitor's
language, offered by its own button.

Its own events (a `.then` after the run, a hide when the next run is asked for): the run's handler and its counted
outputs stay as they are. The file goes beside the session's trace file (`trace_files.save_handout`), replaced by the
next run's and swept with it.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from ..handout import handout_html
from ..settings import get_settings
from ..trace import Trace
from . import trace_files
from .guard import PRIVATE, guarded, language_of
from .language import L


def button() -> gr.DownloadButton:
    """The handout's download button: hidden until a run has finished."""
    return gr.DownloadButton(L("ui.handout"), value=None, visible=False, elem_id="pg-handout", size="sm")


def make_handout(trace: Trace | None, request: gr.Request = None) -> Any:
    """The finished run's handout written for this session, shown for download (hidden without a run)."""
    if not isinstance(trace, Trace):
        return gr.update(value=None, visible=False)
    key = (getattr(request, "session_hash", None) or "default") if request is not None else "default"
    # A public server names no version anywhere (its Code tab neither): the handout leaves Transformers' out.
    page = handout_html(trace, language_of(request), versions=not get_settings().public)
    path = trace_files.save_handout(page, trace.method, key)
    return gr.update(value=path, visible=True)


def hide() -> Any:
    """A new run is asked for: the previous run's handout goes out of sight."""
    return gr.update(visible=False)


def wire(generate_btn: gr.Button, run_event: Any, run_trace: gr.State, handout: gr.DownloadButton) -> None:
    generate_btn.click(hide, None, handout, **PRIVATE)
    run_event.then(guarded(make_handout), run_trace, handout, **PRIVATE)
