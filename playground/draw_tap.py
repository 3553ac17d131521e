"""The random draw r of speculative sampling, observed as Transformers draws it (for the trace and the microscope).

Transformers 5.24's `_speculative_sampling` (generation/utils.py) accepts the i-th draft when
`r_i <= p_i / q_i` (ensemble verification: `1 - w + w·p_i/q_i`, i.e. v/q), where `r_i = torch.rand_like(ratio)[i]`:
one uniform draw per drafted token, from torch's global generator, the only random number the function draws before
the correction's `multinomial`. `_assisted_decoding` calls the function by its module-level name, once per step.

`observing(sink)` replaces that name and `torch.rand_like` for the calling thread's run: the replacements call the
originals with the same arguments, once each, so the random stream, and so the run's output, is the one it would be
unobserved (tests/test_draws.py checks outputs equal under one seed); inside the function, the tensor `rand_like`
returned is handed to `sink`. Other threads call straight through. The replacements are installed while any run
observes and removed after the last (a count under a lock), so nothing stays patched between runs.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

import torch
from .compat.transformers_internals import SAMPLING_MODULE as generation_utils, SPECULATIVE_SAMPLING

TRANSFORMERS_FUNCTION = SPECULATIVE_SAMPLING  # generation/utils.py's name for the rejection-sampling step

_lock = threading.Lock()
_users = 0
_originals: dict[str, Any] = {}
_sinks: dict[int, Callable[[torch.Tensor], None]] = {}  # thread id -> where that thread's run puts its draws
_inside = threading.local()  # .active: this thread is inside `_speculative_sampling`


def _observed_sampling(*args: Any, **kwargs: Any) -> Any:
    if threading.get_ident() not in _sinks:
        return _originals[TRANSFORMERS_FUNCTION](*args, **kwargs)
    _inside.active = True
    try:
        return _originals[TRANSFORMERS_FUNCTION](*args, **kwargs)
    finally:
        _inside.active = False


def _observed_rand_like(*args: Any, **kwargs: Any) -> torch.Tensor:
    drawn = _originals["rand_like"](*args, **kwargs)
    if getattr(_inside, "active", False):
        _inside.active = False  # the first draw in the function is r; any later one is not
        sink = _sinks.get(threading.get_ident())
        if sink is not None:
            sink(drawn.detach().clone())
    return drawn


@contextlib.contextmanager
def observing(sink: Callable[[torch.Tensor], None]) -> Iterator[None]:
    """While inside: each `_speculative_sampling` call of this thread hands its draws r (a 1-D tensor, one per
    drafted token) to `sink`."""
    global _users
    ident = threading.get_ident()
    with _lock:
        if _users == 0:
            _originals[TRANSFORMERS_FUNCTION] = getattr(generation_utils, TRANSFORMERS_FUNCTION)
            _originals["rand_like"] = torch.rand_like
            setattr(generation_utils, TRANSFORMERS_FUNCTION, _observed_sampling)
            torch.rand_like = _observed_rand_like
        _users += 1
        _sinks[ident] = sink
    try:
        yield
    finally:
        with _lock:
            _sinks.pop(ident, None)
            _users -= 1
            if _users == 0:
                setattr(generation_utils, TRANSFORMERS_FUNCTION, _originals.pop(TRANSFORMERS_FUNCTION))
                torch.rand_like = _originals.pop("rand_like")
