"""Request parsing and the method controls: what every tab needs to turn the page's (or the API's) values into a
checked `RunRequest`.

One control per distinct parameter name across the method registry (`param_specs`, `param_component`, shown or
hidden with `param_update`), the chosen method's values gathered by `collect_params`, and `build_request`: the
API's values checked (types, sizes, finite numbers, valid text) into the engine's request, with our one-line
message for a bad one. Imported by every tab; imports no tab.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping, Sequence

import gradio as gr

from .language import L
from .outputs import Inputs, Outputs
from ..errors import PlaygroundError, shorten
from ..i18n import Message
from ..methods import METHODS, Method, Param, get_method
from ..models import host_device, hub_reachable, method_defaults, suggested_assistant
from ..precision import dtype_choices
from ..presets import get_preset
from ..request import DEFAULT_METHOD, RunRequest, Surface, default, method_for, new_request
from ..settings import get_settings

DTYPES = dtype_choices(host_device())  # the precisions a run on this host can use (the page's radio, links)
CHAT_CHOICES = ("auto", "on", "off")
MAX_NAME_SHOWN = 60  # characters of a visitor's file or model name echoed in a message


# --------------------------------------------------------------------------- controls from the registry


def param_specs() -> dict[str, Param]:
    """One `Param` per distinct parameter name across the registry (first definition wins)."""
    specs: dict[str, Param] = {}
    for method in METHODS.values():
        for p in method.params:
            specs.setdefault(p.name, p)
    return specs


def target_param_specs(target: str | None) -> dict[str, Param]:
    """`param_specs` as a run on `target` sees them (`request.method_for`): each bounded by the target's layers where
    the catalogue knows them, with the target's own default where the catalogue names one."""
    specs: dict[str, Param] = {}
    for name in METHODS:
        for p in method_for(name, target).params:
            specs.setdefault(p.name, p)
    return specs


def _depends_on_target(p: Param, target: str | None) -> bool:
    """Whether a control's range or default changes with the target (early exit's layer, a catalogue default)."""
    return p.below_target_layers or any(p.name in method_defaults(target, name) for name in METHODS)


def on_target_pick(target: str | None) -> list[Any]:
    """A target the visitor picked: the controls that depend on it take its range and its own default (early exit's
    layer where its drafts are sometimes right, bounded by its layers); the others stay as the visitor set them."""
    specs = target_param_specs(target)
    return [gr.update(value=p.default, maximum=p.maximum) if _depends_on_target(p, target) else gr.skip()
            for p in specs.values()]


def on_target_change(target: str | None, param_values: Mapping[str, Any]) -> list[Any]:
    """The target changed (picked, or set by a link or a guide example with its own values): the controls that depend
    on it take its range, and a value past its top comes down to it; the values a link or an example set stay.
    `param_values`: the parameter controls' values by name."""
    specs = target_param_specs(target)
    out: list[Any] = []
    for name, p in specs.items():
        value = param_values.get(name)
        if not _depends_on_target(p, target):
            out.append(gr.skip())
            continue
        top = p.maximum
        above = isinstance(value, (int, float)) and top is not None and value > top
        out.append(gr.update(maximum=top, value=top) if above else gr.update(maximum=top))
    return out


def param_update(p: Param | None) -> dict[str, Any]:
    """Show a control with this method's definition of the parameter (for the chosen target: `request.method_for`),
    or hide it."""
    if p is None:
        return gr.update(visible=False)
    update: dict[str, Any] = {"visible": True, "label": p.label, "info": p.help}
    if p.kind == "choice":
        update["choices"] = list(p.choices)
    else:
        update.update(minimum=p.minimum, maximum=p.maximum, step=p.step or (1 if p.kind == "int" else 0.01))
    return gr.update(**update)


def param_component(p: Param, visible: bool) -> gr.components.Component:
    """The control for one parameter: a dropdown for a choice, a slider when bounded, else a number box."""
    # Labels through Gradio's I18n: the browser shows them in the page's language (`language.L`).
    common = dict(label=L(f"param.{p.name}.label"), info=L(f"param.{p.name}.help"), visible=visible,
                  interactive=True, elem_id=f"pg-param-{p.name}")
    if p.kind == "choice":
        return gr.Dropdown(choices=list(p.choices), value=p.default, **common)
    if p.minimum is not None and p.maximum is not None:
        return gr.Slider(minimum=p.minimum, maximum=p.maximum, value=p.default,
                         step=p.step or (1 if p.kind == "int" else 0.01), **common)
    return gr.Number(value=p.default, precision=0 if p.kind == "int" else None, **common)


def suggest_assistant(method: Method, target: str | None, current: str | None) -> str | None:
    """A sensible assistant for the method's kind of assistant, keeping the user's choice."""
    if not method.needs_assistant:
        return current
    if current:
        return current
    return suggested_assistant(target, method.assistant) if method.assistant else None


# `collect_params`' inputs (and a Generate click's): the method and every parameter control, by name.
METHOD_PARAMS = Inputs("method_name", params=param_specs())


def named_params(components: Sequence[Any]) -> dict[str, Any]:
    """The page's parameter controls (`param_specs`' order, as the page builds them) by their input names."""
    return Outputs.param_components(param_specs(), components)


def collect_params(method_name: str, param_values: Mapping[str, Any]) -> dict[str, Any]:
    """The chosen method's parameters (only those), named as `generate()` names them, from the parameter controls'
    values by name."""
    method = get_method(method_name)
    return parse_params({p.name: param_values.get(p.name) for p in method.params})  # the client's values, checked


# --------------------------------------------------------------------------- requests


# Bounds on what a client sends (the API and the queue reach every handler with any JSON): refused with
# our message before any work, and never echoed in full.
MAX_NAME_CHARS = 1024  # a model name: a Hub id is under 100 characters, a local path rarely near this
MAX_WORD_CHARS = 64  # a method, a precision, a chat setting, a parameter name
MAX_PARAMS = 32  # method parameters in `params` (a method has at most a handful)
MAX_PARAM_VALUE_CHARS = 100  # a parameter's value given as text
MAX_PARAMS_JSON_CHARS = 10_000  # `params` given as a JSON string


def _short(value: Any, limit: int = 40) -> str:
    """A visitor's value for a message: its repr, cut short."""
    return shorten(repr(value), limit)


def check_text(value: str, name: str, limit: int) -> str:
    """A string from a client: at most `limit` characters and valid text (no lone surrogates). `name`: the API's
    name of the value, or a `Message` for a phrase (translated with the refusal)."""
    if len(value) > limit:
        raise PlaygroundError.keyed("error.request.too_long", name=name, n=len(value), limit=limit)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PlaygroundError.keyed("error.request.surrogate", name=name) from None
    return value


def parse_params(params: Any) -> dict[str, Any]:
    """`params` as given to the API: a flat JSON object of method parameters, or a string holding one."""
    if params is None or params == "":
        return {}
    example = '{"prompt_lookup_num_tokens": 5}'
    if isinstance(params, str):
        check_text(params, "params", MAX_PARAMS_JSON_CHARS)
        try:
            params = json.loads(params)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, too many digits, nested too deep
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else Message.keyed("error.request.too_deep")
            raise PlaygroundError.keyed("error.request.params_json_reason", example=example, reason=reason) from None
    if not isinstance(params, dict):
        raise PlaygroundError.keyed("error.request.params_json", example=example)
    if len(params) > MAX_PARAMS:
        raise PlaygroundError.keyed("error.request.params_count", n=len(params), limit=MAX_PARAMS)
    for key, value in params.items():
        check_text(key, Message.keyed("error.request.a_param_name"), MAX_WORD_CHARS)
        if isinstance(value, str):
            check_text(value, key, MAX_PARAM_VALUE_CHARS)
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**63:
            raise PlaygroundError.keyed("error.request.too_large", name=key, n=value.bit_length())
        elif isinstance(value, float) and not math.isfinite(value):
            raise PlaygroundError.keyed("error.param.number", name=key, got=value)
        elif value is not None and not isinstance(value, (str, int, float)):
            raise PlaygroundError.keyed("error.request.number_or_word", name=key, got=_short(value))
    return params


def parse_chat(chat: Any) -> bool | None:
    """"auto" (the model decides) / "on" / "off"; booleans and None are accepted too."""
    if chat is None or isinstance(chat, bool):
        return chat
    if not isinstance(chat, str):
        raise PlaygroundError.keyed("error.request.chat", got=_short(chat))
    value = check_text(chat, "chat", MAX_WORD_CHARS).strip().lower()
    if value in ("auto", ""):
        return None
    if value in ("on", "true", "yes", "1"):
        return True
    if value in ("off", "false", "no", "0"):
        return False
    raise PlaygroundError.keyed("error.request.chat", got=_short(chat))


def _unset(value: Any) -> bool:
    """A value the client left out: None or an empty text."""
    return value is None or (isinstance(value, str) and value == "")


def parse_number(value: Any, default: float, name: str) -> float:
    """A number from a client: finite, not absurdly large, our message otherwise."""
    if _unset(value):
        return default
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**64:
        raise PlaygroundError.keyed("error.request.too_large", name=name, n=value.bit_length())
    if isinstance(value, bool):
        raise PlaygroundError.keyed("error.request.number", name=name, got=value)
    try:
        x = float(check_text(value, name, MAX_WORD_CHARS) if isinstance(value, str) else value)
    except (TypeError, ValueError, OverflowError):
        raise PlaygroundError.keyed("error.request.number", name=name, got=_short(value)) from None
    if not math.isfinite(x):  # NaN and infinities, also "1e400"
        raise PlaygroundError.keyed("error.param.number", name=name, got=_short(value))
    return x


def parse_integer(value: Any, default: int, name: str) -> int:
    """A whole number from a client (ints stay exact: a 64-bit seed must not be rounded, nor when sent as digits)."""
    if isinstance(value, str) and len(value) <= MAX_WORD_CHARS and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        parse_number(value, default, name)  # the size check
        return value  # exact (a float would round a 64-bit seed)
    x = parse_number(value, default, name)
    if x != int(x):
        raise PlaygroundError.keyed("error.request.whole", name=name, got=_short(value))
    if abs(x) > 2**64:  # "1e300": refused by its size, as an int of that size is, never echoed as 301 digits
        raise PlaygroundError.keyed("error.request.too_large", name=name, n=int(x).bit_length())
    return int(x)


def max_prompt_chars() -> int:
    """Characters a prompt may have before it is tokenised at all (a token is rarely over 16 characters)."""
    return 16 * get_settings().max_prompt_tokens


def parse_flag(value: Any, name: str) -> bool:
    """A boolean from the API: true/false, or the strings "true"/"false"; None means false."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise PlaygroundError.keyed("error.request.flag", name=name, got=_short(value))


# `build_request`'s values by name, in its order: the API's `generate` inputs, a link's query, the Code tab's settings.
# The page wires components by these names (`request_inputs`) and a handler reads them back by name, never by place.
REQUEST_FIELDS = ("prompt", "target", "assistant", "method", "params", "max_new_tokens", "sample", "temperature",
                  "top_p", "top_k", "seed", "chat", "dtype")


def request_inputs(by_name: Mapping[str, Any], *more: str) -> list[Any]:
    """The page's components for `REQUEST_FIELDS` and then `more` (e.g. "preset"), in that order: an event's inputs."""
    return Inputs(*REQUEST_FIELDS, *more).components(by_name)


def request_from_inputs(values: Sequence[Any], *more: str) -> RunRequest:
    """`build_request` for the values of an event wired by `request_inputs(..., *more)`, each passed by its name."""
    inputs = Inputs(*REQUEST_FIELDS, *more)
    if len(values) != len(inputs):
        raise PlaygroundError.keyed("error.too_few_values", n=len(inputs), got=len(values))
    return build_request(**inputs.named(values))


def build_request(prompt: str, target: str | None, assistant: str | None, method: str | None, params: Any,
                  max_new_tokens: float | None, sample: bool | None, temperature: float | None,
                  top_p: float | None, top_k: float | None, seed: float | None, chat: Any,
                  dtype: str | None, preset: Any = None, surface: Surface = "page") -> RunRequest:
    """The engine request for the API's (or the page's) values, checked; a `preset` (a guide example's name)
    sets everything but the prompt (an empty one: the guide's) and the precision. A value left out (None) takes
    the request's default, and the new-token count that of `surface` (the tab asking)."""
    def text(value: Any, default: str, name: str, limit: int = MAX_WORD_CHARS) -> str:
        if value is None:
            return default
        if not isinstance(value, str):
            raise PlaygroundError.keyed("error.request.text", name=name, got=_short(value))
        return check_text(value, name, limit).strip() or default

    if prompt is not None and not isinstance(prompt, str):
        raise PlaygroundError.keyed("error.request.text", name="prompt", got=_short(prompt))
    check_text(prompt or "", Message.keyed("error.request.the_prompt"), max_prompt_chars())
    if preset is not None and preset != "":
        chosen = get_preset(text(preset, "", "preset"))
        reason = chosen.unavailable(hub_reachable())
        if reason:
            raise PlaygroundError(reason)
        return chosen.request(prompt, dtype=text(dtype, default("dtype"), "dtype"))
    return new_request(
        prompt or "",
        surface=surface,
        target=text(target, default("target"), "target", MAX_NAME_CHARS),
        method=text(method, DEFAULT_METHOD, "method"),
        assistant=text(assistant, "", "assistant", MAX_NAME_CHARS) or None,
        params=parse_params(params),
        max_new_tokens=None if _unset(max_new_tokens) else parse_integer(max_new_tokens, 0, "max_new_tokens"),
        sample=parse_flag(sample, "sample"),
        temperature=parse_number(temperature, default("temperature"), "temperature"),
        top_p=parse_number(top_p, default("top_p"), "top_p"),
        top_k=parse_integer(top_k, default("top_k"), "top_k"),
        seed=parse_integer(seed, default("seed"), "seed"),
        chat=parse_chat(chat),
        dtype=text(dtype, default("dtype"), "dtype"),
    )

