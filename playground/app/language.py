"""The page's language: Gradio's `I18n` for the components' labels, the visitor's language for what the server
writes, the language picker, and right to left for Arabic.

Two halves, one choice:
- Labels, help texts, placeholders, buttons and tab names are `gr.I18n` keys (`label=L("ui.prompt")`): the
  browser translates them from `locales/*.json` (`i18n.ui_translations`) in its own language.
- What handlers write (statuses, errors, tokens' tooltips, narration, legend, charts, diagnosis, lectures, the
  example prompts) is rendered on the server in `language_of(request)`: the page's ``?lang=`` when it names a
  supported language, else the browser's ``Accept-Language``. Gradio forwards the page's query to every event, so
  each handler sees the same choice.
- The picker (`picker`) reloads the page with ``?lang=<code>`` (keeping the rest of the query, a shared link's
  settings included) on a choice of another language only (a click, or arrows and Enter; not the Tab that passes
  it), and the reloaded page puts the focus back on the picker (`PICK_JS`, `HEAD`). Gradio's `I18n` takes the browser's language and cannot be switched from the server; its own
  Settings → Language switches it in the browser through the frontend's `changeLocale`. `HEAD` (which Gradio adds
  to the page once it has started) calls that same function when ``?lang=`` names another language than the one
  Gradio chose, so labels and server text agree; and it keeps ``<html dir>`` in step with ``<html lang>`` (Gradio
  sets ``lang`` from its locale but never ``dir``), also after Gradio's own language setting is used (that one
  switches the labels only; the picker switches everything).
"""

from __future__ import annotations

import inspect
import json
from typing import Any, Callable, Iterator

import gradio as gr

from .. import i18n
from ..methods import METHODS
from .guard import PRIVATE, guarded, language_of

__all__ = ["CSS", "HEAD", "L", "language_of", "picker", "wire_picker", "with_language"]



def _registry_labels(lang: str) -> dict[str, str]:
    """The method parameters' labels and help in `lang`, under the keys the controls use (`param.<name>.label`)."""
    out: dict[str, str] = {}
    for method in METHODS.values():
        for param in method.localized(lang).params:
            out[f"param.{param.name}.label"] = param.label
            out[f"param.{param.name}.help"] = param.help
    return out


# Gradio's translations: the page's `ui.*` strings plus the parameters' labels, in every language.
L = gr.I18n(**{lang: {**strings, **_registry_labels(lang)} for lang, strings in i18n.ui_translations().items()})

# Runs in <head>, before Gradio's scripts: see the module docstring.
HEAD = """<script>(function () {
  var supported = %(supported)s, rtl = %(rtl)s;
  function code(tag) { var c = String(tag || "").split(/[-_]/)[0].toLowerCase(); return supported.indexOf(c) >= 0 ? c : null; }
  var asked = code(new URLSearchParams(window.location.search).get("lang"));
  var root = document.documentElement, pending = !!asked;
  function follow() {
    var shown = code(root.lang);
    if (pending && shown && shown !== asked) { switchTo(asked); return; }
    if (shown === asked) { pending = false; }
    root.dir = rtl.indexOf(shown || asked || "en") >= 0 ? "rtl" : "ltr";
  }
  function switchTo(lang) {
    var core = performance.getEntriesByType("resource").map(function (e) { return e.name; })
      .filter(function (n) { return new RegExp("/assets/core-[^/]+[.]js$").test(n); })[0];
    if (core) { import(core).then(function (m) { if (m.changeLocale) { m.changeLocale(lang); } }); }
  }
  new MutationObserver(follow).observe(root, {attributes: true, attributeFilter: ["lang"]});
  follow();
  // The picker: the language it holds when it gets the focus (PICK_JS reloads only for another one), and after the
  // picker's own reload the focus back on it, once it shows the page's language (so a Tab away changes nothing).
  var names = %(names)s;
  function pickerInput() { return document.querySelector("#pg-language input[role=combobox]"); }
  function held(input) { for (var c in names) { if (names[c] === input.value) { return c; } } return undefined; }
  document.addEventListener("focusin", function (event) {
    var input = pickerInput();
    if (input && event.target === input) { window.pgLanguageAtFocus = held(input); }
  });
  var back = false;
  try { back = sessionStorage.getItem("pgFocusLanguage") === "1"; sessionStorage.removeItem("pgFocusLanguage"); } catch (e) {}
  if (back) {
    var tries = 0, timer = setInterval(function () {
      var input = pickerInput();
      if (++tries > 300) { clearInterval(timer); return; }
      if (!input || !asked || held(input) !== asked) { return; }
      clearInterval(timer);
      input.focus();
      // Gradio opens the list on focus: closed again, as it is for a visitor who tabbed here (ArrowDown opens it).
      setTimeout(function () { input.dispatchEvent(new KeyboardEvent("keydown", {key: "Escape", bubbles: true})); }, 50);
    }, 100);
  }
})();</script>""" % {"supported": json.dumps(list(i18n.LANGUAGES)), "rtl": json.dumps(sorted(i18n.RTL)),
                     "names": json.dumps(i18n.LANGUAGES, ensure_ascii=False)}

# The picker's choice: the same page with ?lang=<code>, the rest of its query kept. Gradio 6's dropdown fires `input`
# on every blur too, with the value it holds: Tab through the picker must not reload the page (it put the focus back
# at the top, and keyboard visitors never got past the picker). So only a choice that differs from the language the
# picker held when it got the focus (`pgLanguageAtFocus`, kept by `HEAD`) and from the page's own reloads: a click,
# or arrows and Enter. After that reload the focus comes back to the picker (`pgFocusLanguage`, see `HEAD`).
PICK_JS = """(code) => {
  const held = window.pgLanguageAtFocus, url = new URL(window.location.href);
  const shown = (document.documentElement.lang || "").split(/[-_]/)[0].toLowerCase();
  if (code === held || (held === undefined && code === shown)) { return code; }
  url.searchParams.set("lang", code);
  if (window.pgLanguageLeaving !== url.toString()) {  // once: a second event must not abort the first load
    window.pgLanguageLeaving = url.toString();
    try { sessionStorage.setItem("pgFocusLanguage", "1"); } catch (e) {}
    window.location.assign(url.toString()); }
  return code; }"""

# Right to left: Gradio marks every block dir="ltr"; the page's direction wins, except where left to right is the
# reading order (code, numbers, sliders' figures, charts, the JSON of a trace). A dropdown's arrow moves to the
# left (Gradio pins it to the right, where right-to-left text begins), and its text keeps clear of it.
CSS = """
html[dir="rtl"] .block[dir="ltr"], html[dir="rtl"] .form, html[dir="rtl"] label { direction: rtl; }
html[dir="rtl"] .prose, html[dir="rtl"] .prose * { text-align: start; }
html[dir="rtl"] .js-plotly-plot, html[dir="rtl"] .cm-editor, html[dir="rtl"] .cm-content, html[dir="rtl"] code,
html[dir="rtl"] pre, html[dir="rtl"] input[type="number"], html[dir="rtl"] .pg-stat .pg-value { direction: ltr; }
html[dir="rtl"] code { unicode-bidi: isolate; }
html[dir="rtl"] .pg-lecture dd { margin: 0 0 4px 0; }
html[dir="rtl"] .wrap-inner .secondary-wrap .icon-wrap { right: auto; left: var(--size-5); }
html[dir="rtl"] .wrap-inner .secondary-wrap input { padding-inline-end: var(--size-6); }
textarea, input[type="text"] { unicode-bidi: plaintext; }
"""


def picker() -> gr.Dropdown:
    """The visible language picker (its label in every language, so anyone can find it); call inside the page."""
    return gr.Dropdown(choices=[(name, code) for code, name in i18n.LANGUAGES.items()], value=i18n.DEFAULT_LANGUAGE,
                       label="Language · Язык · اللغة", elem_id="pg-language", interactive=True, min_width=220, scale=0,
                       container=True)


def wire_picker(demo: gr.Blocks, dropdown: gr.Dropdown) -> None:
    """On load the picker shows the page's language; choosing another reloads the page in it (in the browser)."""
    dropdown.input(None, dropdown, None, js=PICK_JS, **PRIVATE)
    demo.load(guarded(language_of), None, dropdown, **PRIVATE)




def with_language(handler: Callable[..., Any]) -> Callable[..., Any]:
    """`handler(*values, lang=…)` as a page handler: Gradio passes the request first (it only looks at
    positional parameters, so a handler that ends in `*values` cannot take it last), and the handler writes in
    the visitor's language. The page's handler keeps `handler`'s name (its API name stays the same)."""
    if inspect.isgeneratorfunction(handler):
        def streaming(request: gr.Request, *values: Any) -> Iterator[Any]:
            yield from handler(*values, lang=language_of(request))
        page: Callable[..., Any] = streaming
    else:
        def plain(request: gr.Request, *values: Any) -> Any:
            return handler(*values, lang=language_of(request))
        page = plain
    page.__name__ = page.__qualname__ = handler.__name__
    page.__doc__ = handler.__doc__
    return page
