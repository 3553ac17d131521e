"""The "Show the code" tab: the Transformers script and the CLI command that reproduce a run.

`code_view(request)`: `snippet.show_code` as (python, command, status), or a message; after each run the page shows
the last run's code, and the button spells out the current settings (`show_code_for_settings`, which loads their
models in a worker thread).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import gradio as gr

from .. import render
from ..i18n import localize, t
from ..methods import method_title
from .background import in_thread
from .guard import PRIVATE, PRIVATE_QUEUED, guarded
from .language import L, with_language
from .outputs import Outputs
from .run_request import METHOD_PARAMS, collect_params, named_params, request_from_inputs, request_inputs

if TYPE_CHECKING:  # the engine and snippet (torch, Transformers) are imported by the handlers that use them
    from ..engine import RunRequest

CODE = Outputs("python", "cli", "status")  # what `code_view` and the button fill


def code_view(request: RunRequest, note: str = "", lang: str = "en") -> tuple[Any, ...]:
    """`CODE` (python script, CLI command, status HTML) for a request; a message instead where it cannot be shown."""
    from ..errors import user_message
    from ..snippet import show_code

    try:
        view = show_code(request)
    except Exception as exc:
        return CODE(status=render.status_html(t("code.cannot", lang, reason=user_message(exc, lang=lang)), "error"))
    message = note or t("code.for", lang, method=method_title(request.method, lang), target=request.target)
    return CODE(python=view.python, cli=view.cli, status=render.status_html(message, "done"))


def show_code_for_settings(*inputs: Any, lang: str = "en") -> Iterator[tuple[Any, ...]]:
    """The code for the page's current settings (wired by name: `request_inputs(settings, "preset")`); loads models
    if needed.
    Its statuses are in `lang` (the page passes the visitor's language)."""
    from ..engine import prepare, user_message
    from ..snippet import show_code

    try:
        request = request_from_inputs(inputs, "preset")
        yield CODE(status=render.status_html(t("code.preparing", lang, target=request.target), "running"))
        view = None
        for kind, value in in_thread(lambda progress: show_code(prepare(request, progress=progress)), "playground-code"):
            if kind == "progress":
                yield CODE(status=render.status_html(localize(value, lang), "running"))
            else:
                view = value
        assert view is not None  # `in_thread` ends with the job's value or raises
        yield CODE(python=view.python, cli=view.cli, status=render.status_html(
            t("code.for_settings", lang, method=method_title(request.method, lang), target=request.target), "done"))
    except Exception as exc:
        yield CODE(status=render.status_html(t("code.cannot", lang, reason=user_message(exc, lang=lang)), "error"))


@dataclass
class CodeTab:
    """The views a run fills: the script, the command, and the status above them."""

    views: dict[str, Any]  # the components of `CODE`, by name


def initial_status(lang: str = "en") -> str:
    return render.status_html(t("code.initial", lang), "idle")


def build_code(method: Any, param_components: Sequence[Any], params_json: Any, settings: Mapping[str, Any]) -> CodeTab:
    """The tab (call inside the page's `gr.Tabs`) and its button. `settings`: the page's components by
    `build_request`'s names (`REQUEST_FIELDS`) and "preset"; `params_json` receives the method's parameters gathered
    from its controls."""
    with gr.Tab(L("ui.tab.code"), id="code", elem_id="pg-tab-code"):
        code_status = gr.HTML(initial_status(), elem_id="pg-code-status")
        code_btn = gr.Button(L("ui.code.show"), size="sm", elem_id="pg-code-show")
        code_python = gr.Code("", language="python", label=L("ui.code.python"), interactive=False,
                              buttons=["copy"], elem_id="pg-code-python")
        code_cli = gr.Code("", language="shell", label=L("ui.code.cli"), lines=2,
                           interactive=False, buttons=["copy"], wrap_lines=True, elem_id="pg-code-cli")
    views = dict(python=code_python, cli=code_cli, status=code_status)
    chosen = METHOD_PARAMS.components({"method_name": method, **named_params(param_components)})
    code_btn.click(guarded(METHOD_PARAMS.into(collect_params)), chosen, params_json, **PRIVATE).then(
        with_language(show_code_for_settings), request_inputs(settings, "preset"), CODE.components(views),
        **PRIVATE_QUEUED)
    return CodeTab(views=views)
