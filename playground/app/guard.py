"""Refusals: every page handler answers a bad value or a failure with our one-line message, never a traceback.

`refusal` words the message (ours for `PlaygroundError` and `TraceFormatError`, a generic line otherwise, the
details in the log); `guarded` wraps a handler so the message reaches the visitor as a toast.
"""

from __future__ import annotations

import functools
import html
import inspect
import logging
from typing import Any, Callable, Iterator

import gradio as gr

from .. import i18n
from ..errors import PlaygroundError, localized_message, user_message
from ..trace import TraceFormatError

logger = logging.getLogger(__name__)


def url_query(request: gr.Request | None) -> dict[str, str]:
    """The page's URL query, each name's FIRST value, as the page's own scripts read it (`URLSearchParams.get`):
    `?view=presenter&view=normal` is the presenter's view for the layout and its switch alike (`dict()` of the
    query kept the last)."""
    params = getattr(request, "query_params", None) if request is not None else None
    query: dict[str, str] = {}
    multi_items = getattr(params, "multi_items", None)
    for key, value in (multi_items() if multi_items is not None else dict(params or {}).items()):
        query.setdefault(key, value)
    return query


def language_of(request: gr.Request = None) -> str:
    """The visitor's language for a handler: the page's ?lang=, else the browser's; English for API calls."""
    if request is None:
        return i18n.DEFAULT_LANGUAGE
    try:
        query = url_query(request)
        header = (request.headers or {}).get("accept-language")
    except (AttributeError, TypeError):
        return i18n.DEFAULT_LANGUAGE
    return i18n.choose_language(query.get("lang"), header)


def session_key(request: gr.Request | None) -> str:
    """The visitor's session (Gradio's session hash): what the page's Stop, the pace and "Next step" find the
    visitor's run by."""
    return (getattr(request, "session_hash", None) or "default") if request is not None else "default"


# Failures no value a client sends can cause: a fault in the playground's own code (a name it lost, an attribute it
# misspelt) or the machine's. Answered as the playground's failure, the traceback logged, not blamed on the visitor.
OUR_FAULTS = (NameError, AttributeError, ImportError, AssertionError, NotImplementedError, MemoryError)


def refusal(exc: BaseException, lang: str = i18n.DEFAULT_LANGUAGE) -> str:
    """One line for a visitor whose request was refused (in `lang`): our message (cut short), never an exception's
    text. A fault of our own (`OUR_FAULTS`) says so, its traceback in the log."""
    if isinstance(exc, (PlaygroundError, TraceFormatError)):
        message = localized_message(exc, lang)
    elif isinstance(exc, OUR_FAULTS):
        message = user_message(exc, i18n.t("error.what.request", lang), lang)
    else:  # a value no control of the page sends; the log keeps the details
        logger.warning("refused a request: %s: %s", type(exc).__name__, str(exc)[:200])
        message = i18n.t("error.not_from_the_page", lang)
    return message if len(message) <= 300 else message[:300] + "…"


def _visitors_language(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The language of a handler's visitor, from the `gr.Request` Gradio passed it (English without one)."""
    request = next((a for a in (*args, *kwargs.values()) if isinstance(a, gr.Request)), None)
    return language_of(request)


def guarded(handler: Callable[..., Any]) -> Callable[..., Any]:
    """The page handler, answering any refusal or failure with our one-line message in a toast (`gr.Error`,
    escaped: toasts render HTML) instead of Gradio's generic "Error" or a Python exception's text; in the
    visitor's language when the handler takes the request."""
    if inspect.isgeneratorfunction(handler):
        @functools.wraps(handler)
        def streaming(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from handler(*args, **kwargs)
            except gr.Error:
                raise
            except Exception as exc:
                raise gr.Error(html.escape(refusal(exc, _visitors_language(args, kwargs)), quote=False),
                               print_exception=False) from None
        return streaming

    @functools.wraps(handler)
    def plain(*args: Any, **kwargs: Any) -> Any:
        try:
            return handler(*args, **kwargs)
        except gr.Error:
            raise
        except Exception as exc:
            raise gr.Error(html.escape(refusal(exc, _visitors_language(args, kwargs)), quote=False),
                           print_exception=False) from None
    return plain


# How the page registers its small handlers: outside the queue, not in the API's docs, no spinner, and the values as
# sent (`preprocess=False`: no generic refusal by Gradio first), so each handler checks them and answers a bad one
# with our message. Every handler is reachable by fn_index with any JSON, not only what its controls send.
PRIVATE: dict[str, Any] = dict(queue=False, api_visibility="private", show_progress="hidden", preprocess=False)
# The same in the queue, for handlers that do more work (a run's follow-up views, the race).
PRIVATE_QUEUED: dict[str, Any] = dict(api_visibility="private", show_progress="hidden", preprocess=False)


# Inputs appended to an API endpoint after its first release, last first-released one excluded: a client that sends
# the older, shorter list gets them as None (each one's default), so older clients keep working.
APPENDED_INPUTS: dict[str, tuple[str, ...]] = {"generate": ("check_plain", "preset")}


class Page(gr.Blocks):
    """The page's `gr.Blocks`, answering a raw call with too few values itself (Gradio's own refusal is its generic
    "Error"): an endpoint's appended inputs are filled with None; any other shortfall gets our message."""

    def validate_inputs(self, block_fn: Any, inputs: list[Any]) -> None:
        missing = len(block_fn.inputs) - len(inputs)
        if missing > 0:
            appended = APPENDED_INPUTS.get(block_fn.api_name or "", ())
            if missing <= len(appended):
                inputs.extend([None] * missing)  # the list Gradio goes on to preprocess
            else:
                error = PlaygroundError.keyed("error.too_few_values", n=len(block_fn.inputs), got=len(inputs))
                raise gr.Error(html.escape(refusal(error), quote=False), print_exception=False)
        super().validate_inputs(block_fn, inputs)


def long_job(status: Any) -> dict[str, Any]:
    """How a tab registers its long job (Compare, Tune): private, one at a time, its progress shown on its own
    status box only (the rest of the page stays usable)."""
    return dict(api_visibility="private", show_progress="minimal", show_progress_on=[status], concurrency_limit=1,
                preprocess=False)
