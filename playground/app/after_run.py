"""After each run: replay it, place it on the theory curves with its diagnosis, show its code.

The run's trace comes from the `gr.State` that `generate` fills (never from a file or a client value), so it reaches
the Step-through, Theory and Code tabs exactly as the run produced it.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from ..trace import Trace
from ..i18n import t
from .code_tab import code_view
from .language import language_of
from .replay_tab import replay_load
from .theory_tab import find_baseline, remember_baseline, theory_view

VIEWS = 16  # the outputs below


def after_run(trace: Any, baselines: list[Trace] | None,
              request: gr.Request = None) -> tuple[Any, ...]:  # type: ignore[assignment]
    """Outputs: (last-run state, replay trace state, replay status, slider, *replay_view (5), microscope panel,
    theory figure,
    diagnosis HTML, baselines state, python code, CLI command, code status). A failed run (no trace) leaves
    every view as it was."""
    from ..snippet import request_from_trace

    if not isinstance(trace, Trace):
        return tuple([gr.skip()] * VIEWS)
    baseline = find_baseline(trace, baselines)
    baselines = remember_baseline(baselines, trace)
    lang = language_of(request)
    fig, diagnosis = theory_view(trace, baseline, lang)
    python, cli, code_status = code_view(request_from_trace(trace), t("code.last_run", lang, method=trace.method,
                                                                      target=trace.target), lang)
    return (trace, *replay_load(trace, t("replay.last_run", lang), lang), fig, diagnosis, baselines, python, cli,
            code_status)
