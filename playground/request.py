"""What a run is asked to do (`RunRequest`), and every default a surface fills in, defined once.

The request is plain data (no torch), so the page, the CLI, the API and the benchmark build it without loading
the engine. `new_request` is the one builder: a field a surface does not set takes `RunRequest`'s default, and the
number of new tokens takes the default of the surface that asks (`MAX_NEW_TOKENS`): a single run makes more tokens
than each run of a comparison or a benchmark, which runs every method several times.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from .methods import REFERENCE, Method, get_method
from .models import DEFAULT_TARGET, known_layers, method_defaults

Surface = Literal["run", "page", "compare", "bench", "bench_warm_up", "guide", "preload_warm_up"]

# New tokens per run when the caller names none, per surface; each differs on purpose.
MAX_NEW_TOKENS: dict[Surface, int] = {
    "run": 64,  # one run: RunRequest's own default, the CLI's `run`, the API's generate
    "page": 64,  # the page's length slider starts where a single run does
    "compare": 32,  # Compare tab and the API's compare/bench: every method warms up and repeats, so runs are shorter
    "bench": 48,  # `playground bench` and `bench.compare_on_prompt`: several prompts × methods × repeats
    "bench_warm_up": 16,  # at most this many in each method's warm-up run before a comparison measures
    "guide": 20,  # a guide example whose code leaves the length to generate(), whose max_length default is 20
    "preload_warm_up": 4,  # the start-up warm-up run: enough steps to run the drafting path once, nothing more
}

DEFAULT_METHOD = "prompt_lookup"  # the page's and Compare's first method: it drafts with no second model
DEFAULT_DTYPE = "auto"  # one of precision.DTYPE_CHOICES


@dataclass
class RunRequest:
    prompt: str
    target: str = DEFAULT_TARGET
    method: str = REFERENCE  # a request that names no method asks for plain decoding
    assistant: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    max_new_tokens: int = MAX_NEW_TOKENS["run"]
    sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    seed: int = 0
    chat: bool | None = None  # None: apply the chat template where the model is a chat model
    dtype: str = DEFAULT_DTYPE
    system: str | None = None  # a system message before the prompt (chat template only)
    # Extra variables for the chat template, e.g. {"enable_thinking": False} (plain JSON values only)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)

    def decoding(self) -> dict[str, Any]:
        base: dict[str, Any] = {"sample": self.sample, "max_new_tokens": self.max_new_tokens, "seed": self.seed}
        if self.sample:
            base.update(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)
        return base

    def but(self, **changes: Any) -> RunRequest:
        """This request with some fields changed (a copy: the original stays as it was)."""
        return dataclasses.replace(self, **changes)


def default(name: str) -> Any:
    """`RunRequest`'s default for a field, for a surface that shows it (a CLI flag, an API parameter, a control)."""
    spec = RunRequest.__dataclass_fields__[name]
    return spec.default_factory() if spec.default is dataclasses.MISSING else spec.default  # type: ignore[operator]  # a field has a default or a factory


def new_request(prompt: str, *, surface: Surface = "run", **fields: Any) -> RunRequest:
    """The one request builder: `fields` as given, the rest `RunRequest`'s defaults, and the new-token count the
    surface's (`MAX_NEW_TOKENS`) when none (None counts as none) is given."""
    if fields.get("max_new_tokens") is None:
        fields["max_new_tokens"] = MAX_NEW_TOKENS[surface]
    return RunRequest(prompt=prompt, **fields)



def method_for(method: str, target: str | None, layers: int | None = None) -> Method:
    """The method as a run on `target` sees it: each parameter's default the target's own where the model catalogue
    names one, bounded (and the default clamped) by the target's layers: `layers` once it is loaded, else the
    catalogue's count. A parameter a request leaves out takes this default, on every surface."""
    return get_method(method).for_target(layers if layers is not None else known_layers(target),
                                         method_defaults(target, method))
