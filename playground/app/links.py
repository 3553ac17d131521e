"""Shareable links: the page's settings as URL query parameters, and a page opened from such a link restored.

The query uses the API's parameter names (`prompt`, `target`, `assistant`, `method`, `params`, `max_new_tokens`,
`sample`, `temperature`, `top_p`, `top_k`, `seed`, `chat`, `dtype`, or `preset`). A link's values are untrusted:
they pass through the same request builder as the API (`run_request.build_request`) and the registry's
parameter checks before any control is set; a link that fails is not applied and the reason is shown as text.
Two more travel with a link and set no run: the page's language (``lang``) and its view (``view=presenter``: the
presenter's view, `presenter_view`).
"""

from __future__ import annotations

import json
from typing import Any, Mapping
from urllib.parse import urlencode

import gradio as gr

from .. import render
from . import preset_picker
from .guard import PRIVATE, guarded
from .outputs import Inputs, Outputs
from .run_request import DTYPES, REQUEST_FIELDS, build_request, collect_params, param_specs
from ..i18n import t
from ..request import method_for
from ..presets import get_preset
from ..errors import PlaygroundError

FIELDS = REQUEST_FIELDS  # a link's query names `build_request`'s values
MAX_LINK_PROMPT_CHARS = 4000  # longer prompts make links that browsers and chat apps cut off
MAX_LINK_CHARS = 8000  # the whole query: the prompt's share plus model names and parameters of sane length

# The browser turns the query string into the address shown and copied (no server-side notion of the page's URL,
# which differs behind a Space's proxy).
TO_ADDRESS_JS = """(query) => {
  if (!query || !query.startsWith("?")) return query;
  const lang = new URLSearchParams(window.location.search).get("lang");  // the page's language travels along
  if (lang) query += "&lang=" + encodeURIComponent(lang);
  if (document.documentElement.classList.contains("pg-presenter")) query += "&view=presenter";  // the view too
  const url = window.location.origin + window.location.pathname + query;
  window.history.replaceState(null, "", url);
  return url;
}"""


def query_for(preset: str | None, prompt: str | None, target: str | None, assistant: str | None, method: str,
              params: Mapping[str, Any], max_new_tokens: Any, sample: bool, temperature: Any, top_p: Any, top_k: Any,
              seed: Any, chat: str, dtype: str) -> str:
    """`?…` for these settings: a preset's name (plus prompt and precision where they differ), or every setting."""
    prompt = (prompt or "")[:MAX_LINK_PROMPT_CHARS]
    if preset:
        chosen = get_preset(preset)
        values: dict[str, Any] = {"preset": preset}
        if prompt and prompt != chosen.prompt:
            values["prompt"] = prompt
        if dtype and dtype != "auto":
            values["dtype"] = dtype
    else:
        values = {"prompt": prompt, "target": target or "", "assistant": assistant or "", "method": method,
                  "params": json.dumps(dict(params), separators=(",", ":")), "max_new_tokens": max_new_tokens,
                  "sample": "true" if sample else "false", "temperature": temperature, "top_p": top_p, "top_k": top_k,
                  "seed": seed, "chat": chat, "dtype": dtype}
        values = {k: v for k, v in values.items() if v not in ("", None)}
    return "?" + urlencode({k: _text(v) for k, v in values.items()})


def presenter_view(query: Mapping[str, str]) -> bool:
    """Whether a link asks for the presenter's view (``?view=presenter``; any other value is the ordinary view)."""
    return query.get("view") == "presenter"


def _text(value: Any) -> str:
    return repr(value) if isinstance(value, float) and not value.is_integer() else str(
        int(value) if isinstance(value, float) else value)


def restored(param_names: list[str]) -> Outputs:
    """What a link sets: what a guide example's pick fills (`preset_picker.picked`), the precision, the link's
    status."""
    return preset_picker.picked(param_names) + Outputs("dtype", "link_status")


def restore(query: Mapping[str, str], param_names: list[str], lang: str = "en") -> tuple[Any, ...]:
    """`restored(param_names)` from a link's query; nothing changes without one. A preset that needs the unreachable
    Hub fills in its offline stand-in, as the picker does."""
    outputs = restored(param_names)
    given = {k: query[k] for k in (*FIELDS, "preset") if k in query}
    if not given:
        return outputs.skip()
    from ..engine import validate_request  # torch: only for a link that sets something
    from ..errors import user_message
    try:
        if "preset" in given:
            get_preset(given["preset"])  # a known name, or the error below
            fields: dict[str, Any] = {**dict.fromkeys(FIELDS), "dtype": given.get("dtype")}
        else:
            fields = {k: given.get(k) for k in FIELDS}
        request = build_request(**{**fields, "prompt": given.get("prompt", "")})  # by name, not by position
        if "preset" not in given:
            method_for(request.method, request.target).resolve_params(request.params)
        validate_request(request if request.prompt.strip() else request.but(prompt="…"))
        if request.dtype not in DTYPES:
            raise PlaygroundError.keyed("error.dtype", got=repr(request.dtype), known=", ".join(DTYPES))
    except Exception as exc:  # a bad link: say why, as text, and leave the page as it is
        message = t("link.not_applied", lang, reason=user_message(exc, lang=lang))
        return outputs(link_status=render.status_html(message, "error"))
    status = render.status_html(t("link.restored", lang), "done")
    if "preset" in given:
        filled = preset_picker.picked(param_names).read(preset_picker.on_preset(given["preset"], param_names,
                                                                                lang=lang))
        if request.prompt.strip():  # the link's own prompt over the example's
            filled["prompt"] = request.prompt
        return outputs(filled, dtype=request.dtype, link_status=status)
    values = method_for(request.method, request.target).resolve_params(request.params)
    controls = {name: getattr(request, name) for name in preset_picker.CONTROLS}
    return outputs(controls, Outputs.params_of({p: values[p] for p in param_names if p in values}),
                   preset=None, preset_info="", chat=preset_picker.CHAT_VALUE[request.chat], prompt=request.prompt,
                   dtype=request.dtype, link_status=status)


# `make`'s inputs (the link button's): the example, the prompt, the controls, the precision, the parameters.
LINK = Inputs("preset", "prompt", *preset_picker.CONTROLS, "dtype", params=param_specs())


def make(preset: str | None, prompt: str, target: str | None, assistant: str | None, method: str, sample: bool,
         temperature: Any, top_p: Any, top_k: Any, seed: Any, chat: str, max_new_tokens: Any, dtype: str,
         param_values: Mapping[str, Any]) -> Any:
    """The link for the page's settings, in the link box (shown); a value no control sends is refused."""
    query = query_for(preset_picker.known(preset), prompt if isinstance(prompt, str) else "", target, assistant,
                      method, collect_params(method, param_values), max_new_tokens, sample, temperature, top_p, top_k,
                      seed, chat, dtype)
    if len(query) > MAX_LINK_CHARS:  # only a client that is not the page sends names this long
        raise PlaygroundError.keyed("error.link.too_long", n=len(query), limit=MAX_LINK_CHARS)
    return gr.update(value=query, visible=True)  # the box stays hidden until there is a link to show


def wire(button: gr.Button, link: gr.Textbox, views: Mapping[str, Any]) -> None:
    """The link button: the settings (`views`: the page's components by `LINK`'s names) become a URL, shown in
    `link` and put in the address bar; a value no control sends gets our one-line message (`guarded`)."""
    # The query string lands in the link box first; the browser then turns it into the full address.
    button.click(guarded(LINK.into(make)), LINK.components(views), link, **PRIVATE).then(
        None, link, link, js=TO_ADDRESS_JS, **PRIVATE)
