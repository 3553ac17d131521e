"""A handler's outputs, and its inputs, declared once by name.

Gradio matches a handler's return to its `outputs=` list by position. Counting positions by hand (`[gr.skip()] * 14`,
`filled[12]`) broke the page twice when a merge added an output. So each handler's outputs are an `Outputs`: a tuple
of names from which both sides are derived. The page wires `OUTPUTS.components(by_name)`; the handler returns
`OUTPUTS(status=…, tokens=…)`, every name it does not give left as it is (`gr.skip()`); a test reads
`OUTPUTS.read(returned)["status"]`. A name given that the declaration lacks, or a component missing from the page's
map, is an error at once, not a value in the wrong box.

A method's parameter controls are outputs too; their names depend on the registry (`param_specs`), so they are
declared with `params=` and given with `OUTPUTS.params_of(values)`.

Gradio passes an event's input values by position too. A handler's inputs are an `Inputs`, named as its parameters
are: the page wires `INPUTS.components(by_name)` and registers `INPUTS.into(handler)`, which hands each value to the
parameter of its name (a method's parameter controls, declared with `params=`, as one mapping `param_values` by
parameter name). A handler lacking a declared name, or taking one not declared, is refused when the page is built.
"""

from __future__ import annotations

import functools
import inspect
import typing
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import gradio as gr

PARAM = "param:"  # the prefix of a parameter control's name
PARAM_VALUES = "param_values"  # the parameter a handler receives the method's parameter controls in, by name


class _Names:
    """Names, each once, of the page's components a handler writes or reads, in the order Gradio wires them."""

    kind = "name"

    def __init__(self, *names: str, params: Iterable[str] = ()) -> None:
        self.names: tuple[str, ...] = (*names, *(PARAM + p for p in params))
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"an {self.kind} is named twice: {self.names}")
        self._known = frozenset(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def components(self, by_name: Mapping[str, Any]) -> list[Any]:
        """The page's components for these names, in order (the `outputs=` or `inputs=` of the handler's event)."""
        missing = [name for name in self.names if name not in by_name]
        if missing:
            raise KeyError(f"the page has no component for {missing}")
        return [by_name[name] for name in self.names]


class Outputs(_Names):
    """The names of a handler's outputs, in the order Gradio wires them."""

    kind = "output"

    def __add__(self, other: Outputs) -> Outputs:
        return Outputs(*self.names, *other.names)

    def __repr__(self) -> str:
        return f"Outputs{self.names}"

    def prefixed(self, prefix: str) -> Outputs:
        """The same outputs under `prefix` (one handler's outputs inside another's, e.g. the replay's in after-run)."""
        return Outputs(*(prefix + name for name in self.names))

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


def given_by_gradio(hint: Any) -> bool:
    """A parameter Gradio fills itself by its annotation (the visitor's request, the event's data): not an input."""
    return hint in (gr.Request, Optional[gr.Request]) or (inspect.isclass(hint) and issubclass(hint, gr.EventData))


class Inputs(_Names):
    """The names of a handler's inputs: the page's components in the order Gradio sends their values, and the
    handler's parameters that receive them, by name."""

    kind = "input"

    def __repr__(self) -> str:
        return f"Inputs{self.names}"

    @property
    def parameters(self) -> tuple[str, ...]:
        """The handler parameters these inputs fill: each plain name, then `PARAM_VALUES` if parameters are declared."""
        plain = tuple(name for name in self.names if not name.startswith(PARAM))
        return plain + ((PARAM_VALUES,) if len(plain) < len(self.names) else ())

    def named(self, values: Sequence[Any]) -> dict[str, Any]:
        """An event's values (in this declaration's order) by the handler's parameter names."""
        if len(values) != len(self.names):
            raise TypeError(f"{len(values)} values for {len(self.names)} inputs {self.names}")
        by_name = dict(zip(self.names, values))
        named = {name: value for name, value in by_name.items() if not name.startswith(PARAM)}
        if PARAM_VALUES in self.parameters:
            named[PARAM_VALUES] = {n[len(PARAM):]: v for n, v in by_name.items() if n.startswith(PARAM)}
        return named

    def into(self, handler: Callable[..., Any]) -> Callable[..., Any]:
        """`handler` as the event's handler: Gradio's values, sent in this declaration's order, reach it by parameter
        name; what Gradio gives by annotation (`gr.Request`, `gr.EventData`) and any keyword (`lang`) pass through.
        The page's handler keeps `handler`'s name (its API name), docstring and, for Gradio and the API's docs, its
        parameters: the values' in this order (`PARAM_VALUES` as one per control), then Gradio's own."""
        signature = inspect.signature(handler)
        hints = typing.get_type_hints(handler)
        own = [p for p in signature.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        gradios = [p for p in own if given_by_gradio(hints.get(p.name))]
        takes = {p.name for p in own if p not in gradios}
        if any(p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY) for p in signature.parameters.values()):
            raise TypeError(f"{handler.__name__} takes values by position: {signature}")
        if takes != set(self.parameters):
            raise TypeError(f"{handler.__name__} takes {sorted(takes)}; its inputs are named {list(self.parameters)}")
        parameters = [signature.parameters[name] if name in signature.parameters else
                      inspect.Parameter(name.replace(":", "_"), inspect.Parameter.POSITIONAL_OR_KEYWORD)
                      for name in self.names]
        parameters = _required_first([*parameters, *gradios])
        count = len(self.names)

        def named(values: tuple[Any, ...], more: dict[str, Any]) -> dict[str, Any]:
            if len(values) != count + len(gradios):
                raise TypeError(f"{handler.__name__} expects {count + len(gradios)} values (its inputs, then Gradio's), "
                                f"got {len(values)}")
            return {**self.named(values[:count]), **dict(zip((p.name for p in gradios), values[count:])), **more}

        if inspect.isgeneratorfunction(handler):
            def streaming(*values: Any, **more: Any) -> Any:
                yield from handler(**named(values, more))
            receiver = streaming
        else:
            def plain(*values: Any, **more: Any) -> Any:
                return handler(**named(values, more))
            receiver = plain
        # its name (the API's), docstring, module, and what was set on it (`mcp_tools.register` marks the page's
        # `generate` as no MCP tool: Gradio reads the mark on the event's function, this one)
        functools.update_wrapper(receiver, handler)
        receiver.__annotations__ = {name: hint for name, hint in hints.items()
                                    if name == "return" or name in {p.name for p in parameters}}
        vars(receiver).update(__signature__=signature.replace(parameters=parameters),
                              inputs=self, handler=handler)  # what Gradio reads, and what a test reads back
        return receiver


def _required_first(parameters: list[inspect.Parameter]) -> list[inspect.Parameter]:
    """`parameters` as positional ones, a default kept only where none after it lacks one (as a signature must)."""
    kept: list[inspect.Parameter] = []
    required = False
    for p in reversed(parameters):
        p = p.replace(kind=p.POSITIONAL_OR_KEYWORD)
        required = required or p.default is p.empty
        kept.append(p.replace(default=p.empty) if required else p)
    return kept[::-1]


def under(prefix: str, by_name: Mapping[str, Any]) -> dict[str, Any]:
    """A tab's components (or values) by name, under `prefix`: the map for a declaration made with `prefixed`."""
    return {prefix + name: value for name, value in by_name.items()}
