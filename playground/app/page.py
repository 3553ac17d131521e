"""The playground page: the main view above six tabs, each built by its own module, and the one event between them.

Imported only by `launch` (which `app.py` and the Space run); the tabs import `request`, `guard` and each other's
handlers, never this module.
"""

from __future__ import annotations

import gradio as gr

from ..settings import get_settings
from . import mcp_tools
from .after_run import after_run
from .code_tab import build_code
from .compare_tab import build_compare
from .generate_tab import build_generate, generate
from .guard import PRIVATE_QUEUED, guarded
from .methods_tab import build_methods
from .replay_tab import build_replay
from .run_request import build_request, collect_params
from .theory_tab import build_theory
from .trace_files import TRACE_FILES_KEPT_S
from .tune_tab import build_tune_tab

TITLE = "Assisted-decoding playground"


def build_ui() -> gr.Blocks:
    settings = get_settings()
    # Gradio keeps a copy of every file it serves (each run's trace): without this they pile up for the
    # server's lifetime. Every 30 minutes, copies older than 2 hours are deleted.
    with gr.Blocks(title=TITLE, delete_cache=(1800, TRACE_FILES_KEPT_S)) as demo:
        if settings.mcp:  # registered first, so the agents' tools keep their plain names (generate, compare, bench)
            mcp_tools.register(generate)
        gr.Markdown(
            f"# {TITLE}\n"
            "Pick a target model and a drafting method, type a prompt and watch each token's fate as the target "
            "verifies the drafts: accepted, rejected (struck through), discarded after a rejection, corrected, bonus.",
            elem_id="pg-header",
        )
        main = build_generate(demo)
        baselines = gr.State([])  # this session's baseline traces: from runs and from Compare
        with gr.Tabs(elem_id="pg-tabs"):
            replay = build_replay()
            theory = build_theory()
            build_compare([main.prompt, main.target, main.assistant, main.method, main.dtype, main.chat],
                          main.param_components, baselines)
            code = build_code(main.method, main.param_components, main.params_json, main.settings_for_code)
            build_methods()
            build_tune_tab(dict(prompt=main.prompt, target=main.target, assistant=main.assistant, method=main.method,
                                dtype=main.dtype, chat=main.chat, max_new_tokens=main.max_new_tokens,
                                param_components=main.param_components),
                           guarded(collect_params), build_request)
        # After each run: replay it, place it on the theory curves with its diagnosis, show its code.
        main.run_event.then(after_run, [main.run_trace, baselines],
                            [replay.last_run, *replay.outputs, theory.plot, theory.diagnosis, baselines, *code.outputs],
                            **PRIVATE_QUEUED)
    demo.queue(default_concurrency_limit=settings.concurrency)
    return demo
