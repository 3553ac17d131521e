"""What comes from outside, bounded before it is read and made safe before it is printed.

One limit for every file or body the playground reads from a visitor or a command line (a trace, a prompt file, a
prompt set, an HTTP request's body): the page's upload limit, 20 MB. `read_bounded` reads at most one byte past it
and stops, so an endless file (`/dev/zero`, a pipe that never ends) costs 20 MB of memory, not all of it. The refusal
is the same sentence wherever the file came from.

`for_terminal` is the CLI's counterpart of HTML escaping: text from a file (a token's text, a prompt, a model name)
reaches the terminal with every control and format character (Unicode categories Cc and Cf: escape sequences,
U+202E and the other bidi overrides, zero-width characters) written as a visible `\\u202e`, so a trace can neither
drive the terminal nor reorder what the reader sees.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

from .errors import PlaygroundError

MAX_INPUT_BYTES = 20 * 1024 * 1024  # a trace file, a prompt file, a request's body: the page's upload limit
MAX_INPUT_MB = MAX_INPUT_BYTES // 10**6  # as the messages say it (20)
_CHUNK = 1024 * 1024


class InputTooLarge(PlaygroundError):
    """A file or request body over MAX_INPUT_BYTES: refused before (the rest of) it is read."""


def too_large() -> InputTooLarge:
    """The one refusal of a file over the limit (the page's upload, the CLI's files, the MCP tools' prompt sets)."""
    return InputTooLarge.keyed("error.trace.file_size", limit=MAX_INPUT_MB)


def read_bounded(path: str | Path, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The file's bytes, read in chunks and never more than `limit` + 1 of them: `InputTooLarge` past the limit
    (an `OSError` when it cannot be opened or read, for the caller to word)."""
    parts: list[bytes] = []
    size = 0
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(min(_CHUNK, limit + 1 - size))
            if not chunk:
                return b"".join(parts)
            size += len(chunk)
            if size > limit:
                raise too_large()
            parts.append(chunk)


def read_text_bounded(path: str | Path, limit: int = MAX_INPUT_BYTES) -> str:
    """`read_bounded` as UTF-8 text (a prompt file, a prompt set); bytes that are not UTF-8 raise `UnicodeDecodeError`."""
    return read_bounded(path, limit).decode("utf-8")


def _unsafe(ch: str) -> bool:
    return ch not in "\n\t" and unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")


def for_terminal(text: str) -> str:
    """`text` with every control, format, line-separator and lone-surrogate character but newline and tab written as
    `\\uXXXX`: what a file holds never moves the cursor, recolours or reorders the terminal."""
    if not any(_unsafe(ch) for ch in text):
        return text
    return "".join(_escaped(ch) if _unsafe(ch) else ch for ch in text)


def _escaped(ch: str) -> str:
    code = ord(ch)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
