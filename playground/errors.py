"""The one base class for failures whose message is meant for the user (UI, CLI, API).

A message the playground writes itself can carry its catalogue key and fields (`PlaygroundError.keyed`): its
`str()` is the English text (the CLI and the API print it), and `localized(lang)` is the same sentence in the
page's language. A quoted value (what the visitor sent, a library's own exception text) travels as a field,
so it appears verbatim inside the translated sentence; a field that is an `i18n.Message` (a phrase of ours, such as
"the prompt") is translated with it.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TypeVar

from .i18n import DEFAULT_LANGUAGE, Message, localize, t

E = TypeVar("E", bound="PlaygroundError")
logger = logging.getLogger(__name__)


class PlaygroundError(ValueError):
    """Bad input or an impossible request: shown to the user as is, and the app keeps serving."""

    key: str | None = None
    fields: dict[str, Any] = {}

    @classmethod
    def keyed(cls: type[E], key: str, **fields: Any) -> E:
        """The error whose English text is `key`'s in `locales/en.json`, formatted with `fields`."""
        error = cls(t(key, DEFAULT_LANGUAGE, **fields))
        error.key, error.fields = key, dict(fields)
        return error

    @classmethod
    def saying(cls: type[E], message: Message) -> E:
        """The error whose text is `message` (a reason built elsewhere, e.g. from the registry), translated with it."""
        error = cls(str.__str__(message))
        error.key, error.fields = message.key, dict(message.fields)
        return error

    def localized(self, lang: str = DEFAULT_LANGUAGE) -> str:
        """The message in `lang` (its English text when it has no key)."""
        if self.key is None or lang == DEFAULT_LANGUAGE:
            return str(self)
        return t(self.key, lang, **{name: localize(value, lang) for name, value in self.fields.items()})


class RunError(PlaygroundError):
    """The request cannot run as given; the message is for the user. Here, not in the engine, so that what derives
    from it (Tune's `TuneError`) can be raised by modules that never import torch; the engine re-exports it."""


MAX_VALUE_SHOWN = 80  # characters of a value a message echoes (a name, a path, a client's argument)


def shorten(value: Any, limit: int = MAX_VALUE_SHOWN) -> str:
    """A value for a message, cut to `limit` characters with an ellipsis: text as it is, anything else as its repr.
    Every message that echoes what a visitor sent (or a file held) passes it through here, so no value of a
    megabyte ever fills a status line, a toast or an agent's error."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def localized_message(exc: BaseException, lang: str = DEFAULT_LANGUAGE) -> str:
    """A user-facing error's message in `lang` (our keyed messages translated; any other text as it is)."""
    return exc.localized(lang) if isinstance(exc, PlaygroundError) else str(exc)


def user_message(exc: BaseException, failed: str = "this request", lang: str = DEFAULT_LANGUAGE) -> str:
    """One line for the user from any failure: our own messages verbatim (in `lang` where they carry a key).
    Anything else is a bug or the machine, not the user's input: one plain sentence saying so (`failed`: what
    failed, in `lang`), never the exception's text (it may quote the input at length); the full traceback goes
    to the server's log. Here, not in the engine: the page and the CLI say why without importing torch (a torch
    out-of-memory error exists only once torch is imported)."""
    if isinstance(exc, PlaygroundError):  # MethodError and TraceFormatError among them
        return localized_message(exc, lang)
    logger.error("%s failed unexpectedly", failed, exc_info=exc)
    torch = sys.modules.get("torch")
    out_of_memory = (MemoryError,) + ((torch.OutOfMemoryError,) if torch is not None else ())
    if isinstance(exc, out_of_memory):
        return t("error.out_of_memory", lang, failed=failed)
    return t("error.internal", lang, failed=failed)
