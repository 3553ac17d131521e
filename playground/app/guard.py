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

from ..errors import PlaygroundError
from ..trace import TraceFormatError

logger = logging.getLogger(__name__)


def refusal(exc: BaseException) -> str:
    """One line for a visitor whose request was refused: our message (cut short), never an exception's text."""
    if isinstance(exc, (PlaygroundError, TraceFormatError)):
        message = str(exc)
    else:  # a value no control of the page sends; the log keeps the details
        logger.warning("refused a request: %s: %s", type(exc).__name__, str(exc)[:200])
        message = "this request cannot be handled: one of its values is not what the page's controls send"
    return message if len(message) <= 300 else message[:300] + "…"


def guarded(handler: Callable[..., Any]) -> Callable[..., Any]:
    """The page handler, answering any refusal or failure with our one-line message in a toast (`gr.Error`,
    escaped: toasts render HTML) instead of Gradio's generic "Error" or a Python exception's text."""
    if inspect.isgeneratorfunction(handler):
        @functools.wraps(handler)
        def streaming(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from handler(*args, **kwargs)
            except gr.Error:
                raise
            except Exception as exc:
                raise gr.Error(html.escape(refusal(exc)), print_exception=False) from None
        return streaming

    @functools.wraps(handler)
    def plain(*args: Any, **kwargs: Any) -> Any:
        try:
            return handler(*args, **kwargs)
        except gr.Error:
            raise
        except Exception as exc:
            raise gr.Error(html.escape(refusal(exc)), print_exception=False) from None
    return plain


# How the page registers its small handlers: outside the queue, not in the API's docs, no spinner, and the values as
# sent (`preprocess=False`: no generic refusal by Gradio first), so each handler checks them and answers a bad one
# with our message. Every handler is reachable by fn_index with any JSON, not only what its controls send.
PRIVATE: dict[str, Any] = dict(queue=False, api_visibility="private", show_progress="hidden", preprocess=False)
# The same in the queue, for handlers that do more work (a run's follow-up views, the race).
PRIVATE_QUEUED: dict[str, Any] = dict(api_visibility="private", show_progress="hidden", preprocess=False)


def long_job(status: Any) -> dict[str, Any]:
    """How a tab registers its long job (Compare, Tune): private, one at a time, its progress shown on its own
    status box only (the rest of the page stays usable)."""
    return dict(api_visibility="private", show_progress="minimal", show_progress_on=[status], concurrency_limit=1,
                preprocess=False)
