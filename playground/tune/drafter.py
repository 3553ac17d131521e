"""The drafter pass (torch): a greedy drafter's proposals after every prefix of the baseline's output, sharing KV
caches, at the models under the engine's locks (and an early-exit drafter cut to its first layers).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Iterator, Sequence

import torch

from ..engine import check_stopped, give_way, model_locks, turn
from .replaying import Proposals

class _GreedyDrafter:
    """Greedy continuations of a causal LM after each prefix `prompt + y[:i]`, sharing KV caches.

    One cache walks along y; a branch copied from it follows the drafter's own continuation, and is
    reused at the next position as long as the drafter agreed with y, so a drafter that agrees costs
    about one forward per position.
    """

    def __init__(self, model: Any, prompt_ids: list[int], y: list[int], eos_ids: frozenset[int]):
        self.model = model
        self.prompt = prompt_ids
        self.y = y
        self.eos = eos_ids
        self.proposals = Proposals(self._extend)
        self._main_cache: Any = None
        self._main_pos = -1  # y-position the main cache has consumed up to (prompt + y[:pos])
        self._main_logits: torch.Tensor | None = None
        self._branch: dict[str, Any] | None = None

    def _forward(self, ids: list[int], cache: Any) -> tuple[torch.Tensor, Any]:
        check_stopped()  # the drafter pass is one forward per token: it ends within one of its visitor leaving
        give_way()  # and gives way within one forward to a visitor's own run (the pass is then redone)
        device = self.model.device
        out = self.model(input_ids=torch.tensor([ids], device=device), cache=cache, use_cache=True)
        return out.logits[0, -1].float(), out.cache

    def _advance_main(self, i: int) -> None:
        if self._main_pos < 0:
            self._main_logits, self._main_cache = self._forward(self.prompt + self.y[:i], None)
            self._main_pos = i
        if i < self._main_pos:  # only for extensions asked for out of order: re-read the prefix
            self._main_logits, self._main_cache = self._forward(self.prompt + self.y[:i], None)
            self._main_pos = i
        while self._main_pos < i:
            self._main_logits, self._main_cache = self._forward([self.y[self._main_pos]], self._main_cache)
            self._main_pos += 1

    @staticmethod
    def _pick(logits: torch.Tensor) -> tuple[int, float]:
        token = int(torch.argmax(logits))
        return token, float(torch.softmax(logits, dim=-1)[token])

    def _branch_for(self, i: int) -> dict[str, Any]:
        b = self._branch
        if b is not None and b["start"] <= i:
            offset = i - b["start"]
            if len(b["tokens"]) >= offset and b["tokens"][:offset] == self.y[b["start"]:i]:
                return b
        self._advance_main(i)
        token, conf = self._pick(self._main_logits)
        b = {"start": i, "tokens": [token], "conf": [conf], "cache": copy.deepcopy(self._main_cache)}
        self._branch = b
        return b

    def _extend(self, i: int, length: int) -> None:
        b = self._branch_for(i)
        offset = i - b["start"]
        while len(b["tokens"]) - offset < length and b["tokens"][-1] not in self.eos:
            logits, b["cache"] = self._forward([b["tokens"][-1]], b["cache"])
            token, conf = self._pick(logits)
            b["tokens"].append(token)
            b["conf"].append(conf)
        self.proposals.tokens[i] = b["tokens"][offset:]
        self.proposals.confidence[i] = b["conf"][offset:]
        if b["tokens"][-1] in self.eos:
            self.proposals.ends.add(i)



@contextlib.contextmanager
def _at_the_models(models: Sequence[Any]) -> Iterator[None]:
    """Hold each distinct model's generation lock (a model may be its own assistant), in the engine's order."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(turn())  # a visitor's own run waiting for these models goes first
        for lock in model_locks(list(models)):
            stack.enter_context(lock)
        stack.enter_context(torch.inference_mode())
        yield


@contextlib.contextmanager
def _first_layers(model: Any, layers: int | None) -> Iterator[None]:
    """Run `model` on its first `layers` layers, as `EarlyExitCandidateGenerator.get_candidates` does."""
    if layers is None:
        yield
        return
    base = getattr(model, model.base_model_prefix)
    full = base.config.num_hidden_layers
    base.config.num_hidden_layers = layers
    try:
        yield
    finally:
        base.config.num_hidden_layers = full
