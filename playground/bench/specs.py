"""What the benchmark runs: a method with its parameters (`MethodSpec`), parsed from the command line's list."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..methods import METHODS, REFERENCE, MethodError, get_method, is_reference, parse_assignments
from ..request import RunRequest, new_request


class BenchError(MethodError):
    """Bad benchmark input (prompt file, categories, method list); the message is for the user."""


@dataclass(frozen=True)
class MethodSpec:
    method: str
    params: dict[str, Any] = field(default_factory=dict)
    assistant: str | None = None
    label: str = ""

    def __hash__(self) -> int:
        return hash(self.label)

    @property
    def is_reference(self) -> bool:
        """Whether this is the no-drafting run every other is measured against."""
        return is_reference(self.method)

    def request(self, prompt: str, *, target: str, max_new_tokens: int, dtype: str, chat: bool | None) -> RunRequest:
        """The engine request that runs this method on a prompt (the one request builder)."""
        return new_request(prompt, target=target, method=self.method, assistant=self.assistant,
                           params=dict(self.params), max_new_tokens=max_new_tokens, dtype=dtype, chat=chat)


def _label(method: str, params: dict[str, Any]) -> str:
    if not params:
        return method
    return f"{method}(" + ", ".join(f"{k}={v}" for k, v in params.items()) + ")"


def make_spec(method: str, params: dict[str, Any] | None = None, assistant: str | None = None,
              label: str | None = None) -> MethodSpec:
    """A validated method + parameters (only the parameters given are kept, for a short label)."""
    m = get_method(method)
    given = dict(params or {})
    m.resolve_params(given)  # refuses unknown names and bad values, with the registry's messages
    coerced = {k: m.param(k).coerce(v) for k, v in given.items()}
    return MethodSpec(method=m.name, params=coerced, assistant=assistant if m.needs_assistant else None,
                      label=label or _label(m.name, coerced))


def parse_methods(text: str | None, default_assistant: str | None = None) -> list[MethodSpec]:
    """Parse `prompt_lookup:prompt_lookup_num_tokens=5,speculative:num_assistant_tokens=5`.

    Methods are separated by commas; a method's parameters follow a colon, separated by colons or
    commas (`prompt_lookup:prompt_lookup_num_tokens=5,max_matching_ngram_size=3`). The special key
    `assistant=SPEC` gives one method its own assistant. Baseline is always included, first.
    """
    groups: list[tuple[str, list[str]]] = []
    for raw in (text or "").split(","):
        item = raw.strip()
        if not item:
            continue
        head, _, rest = item.partition(":")
        if "=" in head:  # a further parameter of the previous method
            if not groups:
                raise BenchError(f"parameter {item!r} comes before any method name")
            groups[-1][1].extend(p for p in item.split(":") if p.strip())
            continue
        groups.append((head.strip(), [p for p in rest.split(":") if p.strip()] if rest else []))
    specs: list[MethodSpec] = [make_spec(REFERENCE)]
    for name, assignments in groups:
        if name not in METHODS:
            raise BenchError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
        values = parse_assignments(assignments)
        assistant = values.pop("assistant", None) or default_assistant
        if is_reference(name) and not values:
            continue
        method = get_method(name)
        if method.needs_assistant and not assistant:
            raise BenchError(f"{name} needs an assistant model: pass --assistant or {name}:assistant=MODEL")
        specs.append(make_spec(name, values, assistant))
    labels = [s.label for s in specs]
    dupes = {label for label in labels if labels.count(label) > 1}
    if dupes:
        raise BenchError(f"method listed twice with the same parameters: {', '.join(sorted(dupes))}")
    return specs
