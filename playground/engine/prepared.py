"""A run resolved and loaded (`PreparedRun`), the error a request that cannot run raises, and the names of what the
engine may do to an assistant beyond loading it (a script that reproduces the run must do the same)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import RunError  # noqa: F401  (defined torch-free, so Tune's pure part can raise its own)
from ..methods import Method
from ..models import LoadedModel, Precision
from ..request import RunRequest


# The assistant adaptations PreparedRun.assistant_adaptations may name, and why.
ID_ORDERED_VOCABULARY = "id_ordered_vocabulary"  # the assistant tokenizer lists its vocabulary in id order
PRUNED_BEFORE_SEEDING = "pruned_before_seeding"  # universal sampling's LM-head pruning done before the seed
ASSISTANT_ADAPTATIONS = {
    ID_ORDERED_VOCABULARY: "transformers 5.24 prunes a universal assistant's LM head in get_vocab() order but "
                           "scatters its draft logits in id order: listed in id order, q lands on the right tokens",
    PRUNED_BEFORE_SEEDING: "pruning builds a new nn.Linear whose initialisation draws from torch's global "
                           "generator: done before seeding, it does not move the run's random stream",
}


@dataclass
class PreparedRun:
    """Everything resolved and loaded; `generate_kwargs` is exactly what `generate()` receives."""

    request: RunRequest
    method: Method
    params: dict[str, Any]
    target: LoadedModel
    assistant: LoadedModel | None
    input_ids: torch.Tensor
    rendered_prompt: str
    chat: bool
    generate_kwargs: dict[str, Any]
    draft_config: dict[str, Any]  # set on `draft_config_model.generation_config` for the run
    draft_config_model: Any
    eos_ids: frozenset[int]
    lossy: bool
    precision: Precision  # the request's dtype choice resolved once (dtype, device, why): every view reads it
    # What the engine did to the assistant beyond loading it, by name (see ASSISTANT_ADAPTATIONS): a script
    # that reproduces the run must do the same.
    assistant_adaptations: tuple[str, ...] = ()

    def models(self) -> list[LoadedModel]:
        return [m for m in (self.target, self.assistant) if m is not None]

    def with_max_new_tokens(self, n: int) -> "PreparedRun":
        """The same run cut to `n` new tokens (a warm-up), without loading or validating anything again."""
        return dataclasses.replace(self, request=self.request.but(max_new_tokens=int(n)),
                                   generate_kwargs={**self.generate_kwargs, "max_new_tokens": int(n)})
