"""The page's Tune view: every draft setting's predicted outcome from one run, the best one, and a button to measure it.

Built by `build_tune_tab` inside the page's tabs; it reads the page's prompt, target, assistant, method,
precision, chat toggle and method parameters. The work is done by `tune` (through its plain functions)
and drawn by `tune_report`; this module only wires Gradio to them.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any, Callable, Iterator

import gradio as gr

from .. import render, tune_report
from ..charts import follow_the_page
from ..gpu import gpu
from ..i18n import DEFAULT_LANGUAGE, t
from .guard import PRIVATE, guarded, long_job
from .background import in_thread
from .language import L, language_of
from .outputs import Inputs, Outputs
from .panels import results_panel
from .run_request import METHOD_PARAMS, build_request, collect_params, named_params
from ..settings import get_settings
from ..trace import short_repr

if TYPE_CHECKING:  # torch comes in with the first tune, not when the page is built
    from .. import tune

MAX_EXTRA_PROMPTS = 8
MAX_DRAFT = 16  # the slider's maximum
# The Tune view's outputs (`outputs.Outputs`): the results panel, the positions chart, the result for Verify.
TUNED = Outputs("status", "table", "speedup", "tokens_per_step", "positions", "result")


def _prompts(prompt: str, more: Any) -> list[str]:
    from .. import tune

    if more is not None and not isinstance(more, str):
        raise tune.TuneError.keyed("error.tune.more_not_text", got=short_repr(more, 40))
    limit = (MAX_EXTRA_PROMPTS + 1) * 16 * get_settings().max_prompt_tokens  # as the page's own prompt is bounded
    if len(more or "") > limit:
        raise tune.TuneError.keyed("error.tune.more_too_long", n=len(more or ""), limit=limit)
    try:
        (more or "").encode("utf-8")
    except UnicodeEncodeError:
        raise tune.TuneError.keyed("error.tune.more_surrogate") from None
    extra = [line.strip() for line in (more or "").splitlines() if line.strip()]
    if len(extra) > MAX_EXTRA_PROMPTS:
        raise tune.TuneError.keyed("error.tune.more_count", limit=MAX_EXTRA_PROMPTS, got=len(extra))
    return [prompt or ""] + extra


def _max_draft(value: Any) -> int:
    """The slider's K from a client: a whole number in the slider's range (NaN, text and 1e400 are refused)."""
    from .. import tune

    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 <= value <= MAX_DRAFT
            or value != int(value)):
        raise tune.TuneError.keyed("error.tune.max_draft", limit=MAX_DRAFT, got=short_repr(value, 40))
    return int(value)


def result_html(data: dict[str, Any], lang: str = DEFAULT_LANGUAGE) -> str:
    """The verdict and the best settings, predicted beside measured (in `lang`)."""
    rows = tune_report.table_rows(data, tune_report.best_rows(data), lang)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in tune_report.table_headers(lang))
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    losses = ""
    if len(data["losses"]) > 1:
        lhead = "".join(f"<th>{html.escape(h)}</th>" for h in tune_report.losses_headers(lang))
        lbody = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>"  # cells escaped by losses_rows
                        for row in tune_report.losses_rows(data, lang))
        losses = f'<table class="pg-table" data-testid="pg-tune-losses"><tr>{lhead}</tr>{lbody}</table>'
    return (f'<p data-testid="pg-tune-verdict">{html.escape(tune_report.verdict(data, lang))}</p>'
            f'<table class="pg-table" data-testid="pg-tune-table"><tr>{head}</tr>{body}</table>{losses}')


def _views(result: tune.TuneResult, message: str, lang: str) -> tuple[Any, ...]:
    data = result.to_dict()
    figures = {name: follow_the_page(f) for name, f in tune_report.figures(data, lang).items()}
    return TUNED(figures, status=render.status_html(message, "done"), table=result_html(data, lang), result=result)


def _failed(exc: BaseException, lang: str, state: Any = None) -> tuple[Any, ...]:
    from ..errors import user_message

    return TUNED(status=render.status_html(user_message(exc, t("error.what.tuning", lang), lang), "error"),
                 result=state)


@gpu(duration=300)  # a baseline run, a drafter pass and a calibration per prompt
def run_tune(prompt: str, target: str | None, assistant: str | None,
             method: str | None, params: Any, dtype: str | None, chat: Any, max_new_tokens: Any, max_draft: Any,
             more_prompts: str | None, *, lang: str = DEFAULT_LANGUAGE) -> tuple[Any, ...]:
    """Tune the page's settings on its prompt (and any more given); outputs: status, table, 3 charts, result
    (written in `lang`)."""
    from .. import tune

    try:
        run = build_request(prompt=prompt, target=target, assistant=assistant, method=method, params=params,
                            max_new_tokens=max_new_tokens, sample=False, temperature=None, top_p=None, top_k=None,
                            seed=None, chat=chat, dtype=dtype)
        draft = _max_draft(max_draft)
        result = tune.tune(tune.TuneRequest(run=run, max_draft=draft), _prompts(run.prompt, more_prompts))
    except Exception as exc:  # one clear line for the user; the server keeps serving
        return _failed(exc, lang)
    return _views(result, tuned_status(result, lang), lang)


def tuned_status(result: tune.TuneResult, lang: str = DEFAULT_LANGUAGE) -> str:
    """The status line after a tune: how many settings it predicted, and the recommended one; where no setting is
    predicted clearly faster than plain decoding (`TuneResult.standing`), that, and the fastest one, recommending
    nothing."""
    from .. import tune

    message = t("tune.status.predicted", lang, n=len(result.overall()),
                prompts=tune_report.tn_prompts(len(result.prompts), lang))
    standing, best, fastest = result.standing(), result.recommended(), result.best()
    if standing in (tune.SLOWER, tune.UNCLEAR) and fastest:
        return message + t(f"tune.status.{standing}", lang, label=fastest.setting.shown(lang))
    return message + t("tune.status.recommended", lang, label=best.setting.shown(lang)) if best else message


@gpu(duration=300)
def run_verify(result: tune.TuneResult | None, lang: str = DEFAULT_LANGUAGE) -> tuple[Any, ...]:
    """Run the recommended setting and the default for real; the table then shows measured beside predicted
    (in `lang`)."""
    from .. import tune

    if result is None:
        return _failed(tune.TuneError.keyed("error.tune.verify_first"), lang)
    try:
        tune.verify(result)
    except Exception as exc:
        return _failed(exc, lang, result)
    return _views(result, t("tune.status.measured", lang), lang)


def in_background(job: Callable[[], tuple[Any, ...]], lang: str) -> Iterator[tuple[Any, ...]]:
    """A Tune job in a worker thread, its status saying it works: the visitor who leaves (the handler closed)
    stops it at its current pass's next forward (`background.in_thread`)."""
    working = render.status_html(t("tune.status.working", lang), "running")
    outcome: Any = None

    def working_job(progress: Callable[[str], None]) -> tuple[Any, ...]:
        progress("working")
        return job()

    for kind, value in in_thread(working_job, "playground-tune"):
        if kind == "progress":
            yield TUNED(status=working)
        else:
            outcome = value
    yield outcome


def idle_status(lang: str = DEFAULT_LANGUAGE) -> str:
    """The status before anything ran (the page shows it in the visitor's language)."""
    return render.status_html(t("tune.status.idle", lang), "idle")


# `run_tune`'s inputs, by its parameters' names.
TUNE = Inputs("prompt", "target", "assistant", "method", "params", "dtype", "chat", "max_new_tokens", "max_draft",
              "more_prompts")


def build_tune_tab(page: dict[str, Any]) -> gr.HTML:
    """The Tune tab (call inside the page's `gr.Tabs`). `page` holds the page's prompt, target, assistant,
    method, dtype, chat, max_new_tokens components and its `param_components`. Returns the status box
    (`idle_status` fills it in the visitor's language)."""
    with gr.Tab(L("ui.tab.tune"), id="tune", elem_id="pg-tab-tune"):
        gr.Markdown(L("ui.tune.intro"))
        with gr.Row():
            max_draft = gr.Slider(1, MAX_DRAFT, value=8, step=1, label=L("ui.tune.max_draft"),
                                  elem_id="pg-tune-max-draft")
            more = gr.Textbox(label=L("ui.tune.more"), lines=2, elem_id="pg-tune-prompts")
        with gr.Row():
            tune_btn = gr.Button(L("ui.tune.run"), variant="primary", elem_id="pg-tune-run")
            verify_btn = gr.Button(L("ui.tune.verify"), elem_id="pg-tune-verify")
        panel = results_panel("tune", idle_status(), ("speedup", "tokens"))
        positions = gr.Plot(show_label=False, elem_id="pg-tune-positions")
        result = gr.State(None)
        params = gr.JSON(value={}, visible=False)

    outputs = TUNED.components(dict(status=panel.status, table=panel.table, speedup=panel.left,
                                    tokens_per_step=panel.right, positions=positions, result=result))
    private = long_job(panel.status)

    tune = TUNE.into(run_tune)  # the values by `run_tune`'s names

    def tune_page(request: gr.Request, *values: Any) -> Iterator[tuple[Any, ...]]:
        yield from in_background(lambda: tune(*values, lang=language_of(request)), language_of(request))

    def verify_page(result: Any, request: gr.Request) -> Iterator[tuple[Any, ...]]:
        yield from in_background(lambda: run_verify(result, lang=language_of(request)), language_of(request))

    named = {**page, "method_name": page["method"], **named_params(page["param_components"]), "params": params,
             "max_draft": max_draft, "more_prompts": more}
    tune_btn.click(guarded(METHOD_PARAMS.into(collect_params)), METHOD_PARAMS.components(named), params,
                   **PRIVATE).then(guarded(tune_page), TUNE.components(named), outputs, **private)
    verify_btn.click(guarded(verify_page), result, outputs, **private)
    return panel.status
