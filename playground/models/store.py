"""The in-memory store: loaded models shared between requests within a memory budget (the least recently used idle
ones evicted to make room), and the dedicated copies a method may modify, dropped with the model they serve.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import logging
import os
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import torch

from ..precision import Precision
from ..settings import get_settings
from .hardware import as_precision
from .loaded import LoadedModel, ModelLoadError, Progress
from .loading import load_model
from .placement import estimate_param_bytes
from .sources import _resolve

logger = logging.getLogger(__name__)


_StoreKey = tuple[str, "torch.dtype", str | None]


def store_key(spec: str) -> str:
    """The model a spec names, as the store keys it: the real path of a local directory (after the access rules),
    the catalogue key, or the Hub id (loaded at the Hub's default revision, the only one the playground loads).
    So `dir/`, `dir//`, `dir/./` and `/proc/self/root/dir` share one copy: no spelling loads a model twice."""
    source = _resolve(spec, get_settings())  # the access rules apply to cached models too
    if source.kind == "local":
        assert source.path is not None
        return os.path.realpath(source.path)
    if source.entry is not None:
        return source.entry.key
    assert source.hub_id is not None
    return source.hub_id


class ModelStore:
    """Loaded models, shared between requests, within a memory budget.

    Models are reused per (store_key, dtype[, purpose]); the least recently used ones that are not
    generating (lock not held) are evicted when a new model would exceed the budget.
    """

    def __init__(self, budget_gb: float | None = None) -> None:
        # None: follow PLAYGROUND_MEMORY_BUDGET_GB at each call.
        self._budget_gb = budget_gb
        self._entries: OrderedDict[_StoreKey, LoadedModel] = OrderedDict()
        self._lock = threading.RLock()
        self._key_locks: dict[_StoreKey, threading.Lock] = {}
        self._bound: dict[_StoreKey, LoadedModel] = {}  # copy -> the model it was made for (see get_copy)

    def get(self, spec: str, dtype: str | Precision = "auto", progress: Progress | None = None) -> LoadedModel:
        """The loaded model for spec, loading it (once, even with concurrent callers) if needed."""
        precision = as_precision(dtype)
        key = (store_key(spec), precision.torch_dtype(), None)
        return self._obtain(key, lambda: load_model(spec, precision, progress),
                            lambda: estimate_param_bytes(spec, precision), spec)

    def get_copy(self, spec: str, dtype: str | Precision = "auto", purpose: str = "assistant",
                 progress: Progress | None = None, bound_to: LoadedModel | None = None,
                 holding: Callable[[Any], contextlib.AbstractContextManager[Any]] = lambda lock: lock) -> LoadedModel:
        """A dedicated deep copy of a model, cached per purpose.

        Universal assisted decoding with sampling modifies the assistant model (and keys its
        vocabulary translator on the tokenizer), so it must not share either with other users.
        A copy `bound_to` another loaded model (the target it was adapted to) is useless without
        it: the store drops it with that model. `holding(lock)` holds the model being copied: its lock by
        default; the engine passes one turn among the runs that take turns on it (`engine.one_turn`).
        """
        precision = as_precision(dtype)
        key = (store_key(spec), precision.torch_dtype(), purpose)

        def make() -> LoadedModel:
            base = self.get(spec, precision, progress)
            started = time.perf_counter()
            with holding(base.lock):  # no generation may modify it while it is copied
                model, tokenizer = copy.deepcopy(base.model), copy.deepcopy(base.tokenizer)
            return replace(base, model=model, tokenizer=tokenizer, lock=threading.Lock(),
                           load_s=time.perf_counter() - started, on_release=[])

        loaded = self._obtain(key, make, lambda: None, spec)
        if bound_to is not None:
            with self._lock:
                self._bound[key] = bound_to
        return loaded

    def loaded(self) -> list[str]:
        """Models currently held (their `store_key`), least recently used first."""
        with self._lock:
            return list(dict.fromkeys(spec for spec, _, _ in self._entries))

    def used_bytes(self) -> int:
        with self._lock:
            return sum(m.param_bytes for m in self._entries.values())

    def evict(self, spec: str) -> None:
        """Drop every copy and dtype of spec (callers still holding it keep it alive)."""
        key = store_key(spec)
        with self._lock:
            dropped = self._drop([k for k in self._entries if k[0] == key])
        _release(dropped)

    def clear(self) -> None:
        with self._lock:
            dropped = self._drop(list(self._entries))
        _release(dropped)

    def _drop(self, keys: list[_StoreKey]) -> list[LoadedModel]:
        """Remove these entries and the copies bound to them (caller holds the lock); return what was removed."""
        dropped = [self._entries.pop(key) for key in keys if key in self._entries]
        while orphans := [k for k, owner in self._bound.items() if any(owner is d for d in dropped)
                          or k not in self._entries]:
            for key in orphans:
                del self._bound[key]
                if key in self._entries:
                    dropped.append(self._entries.pop(key))
        return dropped

    def _budget_bytes(self) -> int:
        budget_gb = self._budget_gb if self._budget_gb is not None else get_settings().memory_budget_gb
        return int(budget_gb * 1e9)

    def _touch(self, key: _StoreKey) -> LoadedModel | None:
        with self._lock:
            loaded = self._entries.get(key)
            if loaded is not None:
                self._entries.move_to_end(key)
            return loaded

    def _obtain(self, key: _StoreKey, make: Callable[[], LoadedModel],
                estimate: Callable[[], int | None], spec: str | None = None) -> LoadedModel:
        """The entry for `key`, made once; `spec` (as the caller wrote it) names it in a message, not the key's
        resolved path."""
        if (hit := self._touch(key)) is not None:
            return hit
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:  # a second caller for the same key waits here, then hits the cache
            if (hit := self._touch(key)) is not None:
                return hit
            budget = self._budget_bytes()
            expected = estimate()
            if expected is not None:
                self._make_room(spec or key[0], expected, budget)
            loaded = make()
            with self._lock:
                self._make_room(spec or key[0], loaded.param_bytes, budget)
                self._entries[key] = loaded
            return loaded

    def _make_room(self, spec: str, needed: int, budget: int) -> None:
        """Evict idle models, least recently used first, until `needed` more bytes fit."""
        if needed > budget:
            raise ModelLoadError.keyed("error.model.over_budget", spec=spec, size=_size(needed), budget=_size(budget))
        dropped: list[LoadedModel] = []
        with self._lock:
            used = sum(m.param_bytes for m in self._entries.values())
            for key in list(self._entries):
                if used + needed <= budget:
                    break
                candidate = self._entries.get(key)
                if candidate is None or candidate.lock.locked():
                    continue
                gone = self._drop([key])
                dropped += gone
                used -= sum(m.param_bytes for m in gone)
                logger.info("evicted %s to make room for %s", key[0], spec)
        if dropped:
            _release(dropped)
        if used + needed > budget:
            raise ModelLoadError.keyed("error.model.budget_busy", spec=spec, size=_size(needed),
                                       free=_size(budget - used), budget=_size(budget))


def _size(nbytes: float) -> str:
    """Bytes for a message: GB with two decimals, or MB below 0.1 GB (a tiny model is not "0.00 GB")."""
    return f"{nbytes / 1e9:.2f} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.2f} MB"


def _release(dropped: list[LoadedModel]) -> None:
    """Run the release hooks of models the store dropped, then return their memory."""
    for loaded in dropped:
        for hook in loaded.on_release:
            hook()
        loaded.on_release.clear()
    _release_memory()


def _release_memory() -> None:
    gc.collect()
    torch = sys.modules.get("torch")  # nothing to free on a GPU if torch was never imported
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


STORE = ModelStore()
