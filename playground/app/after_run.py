"""After each run: replay it, place it on the theory curves with its diagnosis, show its code.

The run's trace comes from the `gr.State` that `generate` fills (never from a file or a client value), so it reaches
the Step-through, Theory and Code tabs exactly as the run produced it.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from ..trace import Trace
from ..i18n import t
from ..methods import method_title
from .code_tab import CODE, code_view
from .language import language_of
from .outputs import Inputs, Outputs
from .replay_tab import LOADED, replay_load
from .theory_tab import THEORY, find_baseline, remember_baseline, theory_view

# The last-run state, the replay's views of a loaded trace, the theory tab's, the session's baselines, the code tab's.
AFTER_RUN = (Outputs("last_run") + LOADED.prefixed("replay.") + THEORY.prefixed("theory.") + Outputs("baselines")
             + CODE.prefixed("code."))
AFTER_RAN = Inputs("trace", "baselines")  # `after_run`'s: the run's trace, the session's baselines


def after_run(trace: Any, baselines: list[Trace] | None,
              request: gr.Request = None) -> tuple[Any, ...]:
    """`AFTER_RUN` for a finished run. A failed run (no trace) leaves every view as it was."""
    from ..snippet import request_from_trace

    if not isinstance(trace, Trace):
        return AFTER_RUN.skip()
    baseline = find_baseline(trace, baselines)
    lang = language_of(request)
    code = code_view(request_from_trace(trace),
                     t("code.last_run", lang, method=method_title(trace.method, lang), target=trace.target), lang)
    return AFTER_RUN({**LOADED.read(replay_load(trace, t("replay.last_run", lang), lang), "replay."),
                      **THEORY.read(theory_view(trace, baseline, lang), "theory."),
                      **CODE.read(code, "code.")},
                     last_run=trace, baselines=remember_baseline(baselines, trace))
