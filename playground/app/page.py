"""The playground page: the main view above six tabs, each built by its own module, and the one event between them.

Imported only by `launch` (which `app.py` and the Space run); the tabs import `request`, `guard` and each other's
handlers, never this module.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from ..i18n import t
from ..settings import get_settings
from . import mcp_tools, presenter, sessions
from .after_run import AFTER_RAN, AFTER_RUN, after_run
from .code_tab import CODE, build_code
from .code_tab import initial_status as code_initial_status
from .compare_tab import COMPARE_SETTINGS, build_compare
from .compare_tab import idle_views as compare_idle_views
from .compare_tab import method_choices as compare_method_choices
from .generate_tab import build_generate, generate
from .guard import PRIVATE, PRIVATE_QUEUED, Page, guarded
from .language import L, language_of, wire_picker
from .language import picker as language_picker
from .methods_tab import build_methods, methods_table_html
from .outputs import Outputs, under
from .replay_tab import LOADED, build_replay, replay_load
from .theory_tab import THEORY, build_theory, theory_view
from .trace_files import TRACE_FILES_KEPT_S
from .tune_tab import build_tune_tab
from .tune_tab import idle_status as tune_idle_status

TITLE = "Assisted-decoding playground"
# The tabs' ids, in the page's order (their names are the `ui.tab.<id>` strings).
TABS = ("replay", "theory", "compare", "code", "methods", "tune")
# The tabs' server-written parts, which the page load writes in the visitor's language; the tabs' names too: Gradio's
# own switch of language (the page's ?lang= in another browser language) renames only the selected tab.
TAB_VIEWS = (Outputs("methods.table") + THEORY.prefixed("theory.") + LOADED.prefixed("replay.")
             + CODE.prefixed("code.") + Outputs("compare.status", "compare.race", "compare.methods", "tune.status")
             + Outputs(*(f"tab.{tab}" for tab in TABS)))


def localized_tab_views(lang: str) -> tuple[Any, ...]:
    """`TAB_VIEWS` as the tabs show them before anything ran, in `lang` (the code tab's boxes stay empty)."""
    status, race = compare_idle_views(lang)
    return TAB_VIEWS({**THEORY.read(theory_view(None, lang=lang), "theory."),
                      **LOADED.read(replay_load(None, "", lang), "replay."),
                      **{f"tab.{tab}": gr.update(label=t(f"ui.tab.{tab}", lang)) for tab in TABS}},
                     **{"methods.table": methods_table_html(lang), "code.status": code_initial_status(lang),
                        "compare.status": status, "compare.race": race,
                        "compare.methods": gr.update(choices=compare_method_choices(lang)),
                        "tune.status": tune_idle_status(lang)})


def localize_tabs(request: gr.Request = None) -> tuple[Any, ...]:
    """The page-load handler of `TAB_VIEWS`: in the visitor's language; a page in English keeps them as built."""
    lang = language_of(request)
    return TAB_VIEWS.skip() if lang == "en" else localized_tab_views(lang)


def build_ui() -> gr.Blocks:
    settings = get_settings()
    # Gradio keeps a copy of every file it serves (each run's trace): without this they pile up for the
    # server's lifetime. Every 30 minutes, copies older than 2 hours are deleted.
    with Page(title=TITLE, delete_cache=(1800, TRACE_FILES_KEPT_S)) as demo:
        if settings.mcp:  # registered first, so the agents' tools keep their plain names (generate, compare, bench)
            mcp_tools.register(generate)
        with gr.Row(equal_height=False):
            gr.Markdown(L("ui.header"), elem_id="pg-header", scale=5)
            presenter_switch = presenter.switch()
            language = language_picker()
        main = build_generate(demo)
        presenter.wire_load(demo, presenter_switch)
        baselines = gr.State([])  # this session's baseline traces: from runs and from Compare
        with gr.Tabs(elem_id="pg-tabs") as tabs:
            replay = build_replay(demo)
            theory = build_theory()
            compare = build_compare({name: getattr(main, name) for name in COMPARE_SETTINGS}, main.param_components,
                                    baselines)
            code = build_code(main.method, main.param_components, main.params_json, main.settings_for_code)
            methods_table = build_methods()
            tune_status = build_tune_tab(
                dict(prompt=main.prompt, target=main.target, assistant=main.assistant, method=main.method,
                     dtype=main.dtype, chat=main.chat, max_new_tokens=main.max_new_tokens,
                     param_components=main.param_components))
        tab_items = [child for child in tabs.children if isinstance(child, gr.Tab)]
        assert tuple(tab.id for tab in tab_items) == TABS, [tab.id for tab in tab_items]
        # The tabs' server-written parts in the visitor's language, and the language picker.
        wire_picker(demo, language)
        views = {"methods.table": methods_table, **under("theory.", theory.views), **under("replay.", replay.views),
                 **under("code.", code.views), **under("compare.", compare), "tune.status": tune_status,
                 **{f"tab.{tab.id}": tab for tab in tab_items}, "last_run": replay.last_run, "baselines": baselines}
        demo.load(guarded(localize_tabs), None, TAB_VIEWS.components(views), **PRIVATE)
        # After each run: replay it, place it on the theory curves with its diagnosis, show its code.
        ran = AFTER_RAN.components({"trace": main.run_trace, "baselines": baselines})
        main.run_event.then(AFTER_RAN.into(after_run), ran, AFTER_RUN.components(views), **PRIVATE_QUEUED)
        sessions.wire(demo)  # what a session keeps, freed when its visitor leaves (and bounded: `sessions`)
    demo.queue(default_concurrency_limit=settings.concurrency, max_size=settings.queue_size or None)
    return demo
