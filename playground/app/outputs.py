"""A handler's outputs, declared once by name.

Gradio matches a handler's return to its `outputs=` list by position. Counting positions by hand (`[gr.skip()] * 14`,
`filled[12]`) broke the page twice when a merge added an output. So each handler's outputs are an `Outputs`: a tuple
of names from which both sides are derived. The page wires `OUTPUTS.components(by_name)`; the handler returns
`OUTPUTS(status=…, tokens=…)`, every name it does not give left as it is (`gr.skip()`); a test reads
`OUTPUTS.read(returned)["status"]`. A name given that the declaration lacks, or a component missing from the page's
map, is an error at once, not a value in the wrong box.

A method's parameter controls are outputs too; their names depend on the registry (`param_specs`), so they are
declared with `params=` and given with `OUTPUTS.params_of(values)`.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import gradio as gr

PARAM = "param:"  # the prefix of a parameter control's output name


class Outputs:
    """The names of a handler's outputs, in the order Gradio wires them."""

    def __init__(self, *names: str, params: Iterable[str] = ()) -> None:
        self.names: tuple[str, ...] = (*names, *(PARAM + p for p in params))
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"an output is named twice: {self.names}")
        self._known = frozenset(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __add__(self, other: Outputs) -> Outputs:
        return Outputs(*self.names, *other.names)

    def __repr__(self) -> str:
        return f"Outputs{self.names}"

    def prefixed(self, prefix: str) -> Outputs:
        """The same outputs under `prefix` (one handler's outputs inside another's, e.g. the replay's in after-run)."""
        return Outputs(*(prefix + name for name in self.names))

    def components(self, by_name: Mapping[str, Any]) -> list[Any]:
        """The page's components for these names, in order (the `outputs=` of the handler's event)."""
        missing = [name for name in self.names if name not in by_name]
        if missing:
            raise KeyError(f"the page has no component for {missing}")
        return [by_name[name] for name in self.names]

    def __call__(self, *values: Mapping[str, Any], **named: Any) -> tuple[Any, ...]:
        """The handler's return: each declared output's value where given (in mappings by name, then by keyword, the
        later winning), `gr.skip()` for the rest."""
        given: dict[str, Any] = {}
        for mapping in (*values, named):
            given.update(mapping)
        unknown = set(given) - self._known
        if unknown:
            raise KeyError(f"not declared among the outputs: {sorted(unknown)}")
        return tuple(given[name] if name in given else gr.skip() for name in self.names)

    def skip(self) -> tuple[Any, ...]:
        """Every output left as it is."""
        return self()

    def read(self, returned: Sequence[Any], prefix: str = "") -> dict[str, Any]:
        """A handler's return by name (under `prefix`), checked to be one value per output."""
        if len(returned) != len(self.names):
            raise ValueError(f"{len(returned)} values for {len(self.names)} outputs {self.names}")
        return {prefix + name: value for name, value in zip(self.names, returned)}

    @staticmethod
    def params_of(values: Mapping[str, Any]) -> dict[str, Any]:
        """Parameter controls' values by output name (`params=` in the declaration)."""
        return under(PARAM, values)

    @staticmethod
    def param_components(names: Iterable[str], components: Iterable[Any]) -> dict[str, Any]:
        """The parameter controls by output name, for `components`."""
        return under(PARAM, dict(zip(names, components, strict=True)))


def under(prefix: str, by_name: Mapping[str, Any]) -> dict[str, Any]:
    """A tab's components (or values) by name, under `prefix`: the map for a declaration made with `prefixed`."""
    return {prefix + name: value for name, value in by_name.items()}
