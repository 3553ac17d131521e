"""What every room of the model layer shares: a loaded model (`LoadedModel`), the one-line error a load raises
(`ModelLoadError`) and the progress lines a load reports (`Progress`).

Everything that can fail while loading raises ``ModelLoadError`` with a one-line message meant for the UI; the
original exception stays chained for logs.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal

if TYPE_CHECKING:
    import torch

from ..errors import PlaygroundError


# A progress line: plain text, or an `i18n.Message` (English as a str for the CLI, translated on the page).
Progress = Callable[[str], None]


class ModelLoadError(PlaygroundError):
    """A model could not be loaded; ``str(error)`` is a one-line message for the user."""


@dataclass(eq=False)
class LoadedModel:
    """A model ready for generation. ``lock`` serialises generations on this model."""

    name: str
    model: Any
    tokenizer: Any
    dtype: torch.dtype
    device: str
    source: Literal["bundled", "hub", "local"]
    load_s: float
    num_layers: int
    has_chat_template: bool
    param_bytes: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Called once when the store drops this model: releases what others hold on its behalf (a library cache).
    on_release: list[Callable[[], None]] = field(default_factory=list)


def same_vocabulary(tok_a: Any, tok_b: Any) -> bool:
    """True when both tokenizers map the same strings to the same ids (sizes alone can match by chance)."""
    return tok_a is tok_b or tok_a.get_vocab() == tok_b.get_vocab()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def _no_progress(_message: str) -> None:
    pass
