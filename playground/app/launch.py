"""Start the server: build the page, serve it, then start the background load of the default model.

`main` is what `app.py` (and so the Hugging Face Space) runs; `launch_kwargs` is what `launch()` needs besides the
address (styles, theme, the upload limit), shared with tests that launch the page themselves.
"""

from __future__ import annotations

import os
from typing import Any

import gradio as gr

from .. import microscope_view, render
from ..models import DEFAULT_TARGET, gc_paused
from ..settings import get_settings
from . import language
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
"""


def launch_kwargs() -> dict[str, Any]:
    """What `launch()` needs besides the server address: styles, title and the upload limit."""
    return {"css": render.CSS + microscope_view.CSS + PAGE_CSS + language.CSS, "head": language.HEAD, "i18n": language.L, "theme": gr.themes.Soft(primary_hue="blue", neutral_hue="slate"),
            # The only upload is a trace file: refuse anything larger before it reaches the disk.
            "max_file_size": MAX_TRACE_BYTES}


def start_preload() -> None:
    """Load the default model in the background (PLAYGROUND_PRELOAD), while the page already answers."""
    if get_settings().preload:
        PRELOAD.start(DEFAULT_TARGET, "auto")


def main() -> None:
    """Serve the page on GRADIO_SERVER_NAME:GRADIO_SERVER_PORT (default 127.0.0.1:7860) until interrupted."""
    configure_logging()
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
    start_preload()
    demo.block_thread()
