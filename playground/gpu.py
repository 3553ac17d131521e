"""ZeroGPU support: `@gpu` runs a handler on a borrowed GPU on Hugging Face ZeroGPU Spaces.

On a ZeroGPU Space the `spaces` package is preinstalled and `spaces.GPU` attaches a GPU for the
duration of each call to the decorated function (generator functions, i.e. streaming Gradio
handlers, included). Everywhere else `spaces` is not installed and `gpu` returns the function
unchanged; where `spaces` is installed but the hardware is not ZeroGPU, `spaces.GPU` is itself a
no-op. Usage (the UI's generation handler):

    from playground.gpu import gpu

    @gpu                      # or @gpu(duration=120) for calls longer than ZeroGPU's 60 s default
    def generate(...): ...

Import this module (it imports `spaces` when available) before anything initialises CUDA, as
ZeroGPU requires.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

try:
    import spaces as _spaces
except ImportError:  # not on a Hugging Face Space
    _spaces = None


def available() -> bool:
    """Whether `spaces` is importable (then `gpu` delegates to `spaces.GPU`)."""
    return _spaces is not None


def gpu(fn: F | None = None, *, duration: int | None = None) -> Any:
    """`spaces.GPU` where the `spaces` package exists, else the identity; usable bare or with `duration`."""
    if fn is None:
        return functools.partial(gpu, duration=duration)
    if _spaces is None:
        return fn
    return _spaces.GPU(fn) if duration is None else _spaces.GPU(duration=duration)(fn)
