"""Nothing English on a Russian or Arabic page except code, model ids and the names the translations keep in Latin.

An English word is a Latin-script word of three letters or more, outside code (`<code>`, `<pre>`), that is not a
code-shaped identifier (a digit, `_`, `=`, `/`, `.` or a call's `()` in it: `generate()`, `HF_TOKEN`, `bfloat16`,
`device_map="auto"`), not a word of a catalogue model's id or label, a method, parameter, parameter value or preset
name, a formula's function name, nor one of `KEPT_IN_LATIN` (names and file formats the guide's Russian and Arabic
editions write in Latin too). Checked on the preset picker's server text for every preset, and in headless Chromium
on every tab of the page with ?lang=ru and ?lang=ar, the preset picker's list open and a preset picked.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest
from appserver import HandlerCalls, app_url_fixture, browser_fixture, needs_chromium
from appserver import still

from playground import i18n
from playground.app import preset_picker
from playground.methods import METHODS
from playground.models import CATALOGUE
from playground.presets import PRESETS

OTHER_LANGUAGES = ("ru", "ar")

# Proper names and terms the guide's Russian and Arabic editions themselves write in Latin.
KEPT_IN_LATIN = {"Transformers", "Hugging", "Face", "LayerSkip", "n-gram", "MTP", "UAD", "GPU", "pipeline",
                 "DeepSeek", "GLM", "Gemma", "SmolLM", "SmolLM2", "Llama", "Qwen", "Gradio", "JSON", "API", "MCP",
                 "CPU", "CUDA", "KV", "RAG", "safetensors", "GGUF", "PyPI", "torch"}
# A package's name, and the ROC curve Transformers re-fits the confidence threshold with (Russian and Arabic ML texts
# write "ROC" in Latin), as the draft-length preset's note names them.
KEPT_IN_LATIN |= {"scikit-learn", "ROC"}
# An author's surname as the glossary keeps it (glossary.json `leviathan`: Leviathan et al.'s formula, cited in Latin
# letters as Russian and Arabic technical writing cites foreign authors).
KEPT_IN_LATIN |= {"Leviathan"}
# The Hugging Face Hub, by the name the page gives it in every language ("нужен Hub", «يحتاج إلى Hub»).
KEPT_IN_LATIN |= {"Hub"}
# Keys by the names printed on them (a clicker's Page Down, Shift): the pace's help names the keys a presenter presses.
KEPT_IN_LATIN |= {"Page", "Down", "Shift"}
# Keys as their caps print them: a keyboard shows "Enter" in every language.
KEPT_IN_LATIN |= {"Enter", "Tab"}
# Formula names the lectures write in their formulas: min(1, p/q).
FORMULA_NAMES = {"min", "max", "argmax", "softmax"}
# The language picker's label is written in every language on purpose (anyone can find it).
MULTILINGUAL = ("pg-language",)

WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.\-/=:\"']*(?:\(\.*\))?")


def _allowed() -> set[str]:
    # "auto": dtype="auto", the precision control's value
    words = set(KEPT_IN_LATIN) | FORMULA_NAMES | set(METHODS) | set(PRESETS) | {"auto"}
    for method in METHODS.values():
        for param in method.params:  # a parameter's name and its choices are generate()'s values
            words |= {param.name, *(param.choices or ())}
    for key, model in CATALOGUE.items():
        # A model's id, word by word ("Instruct" of SmolLM2-360M-Instruct); not its English label: "(bundled)" and
        # "assistant" are words the page translates (`model.<key>.label`).
        words |= set(re.findall(r"[A-Za-z][A-Za-z0-9]*", model.hub_id or "")) | {key, model.hub_id or ""}
    return {w.lower() for w in words}


ALLOWED = _allowed()


def english_words(text: str) -> list[str]:
    """The English words of `text` (see the module docstring)."""
    found = []
    for token in WORD.findall(text):
        token = token.rstrip(".-:/=\"'")
        if token.lower() in ALLOWED or re.search(r"[0-9_=/.(]", token):
            continue
        found += [part for part in token.split("-") if len(part) >= 3 and part.lower() not in ALLOWED]
    return found


def without_code(markup: str) -> str:
    """The visible text of our markup, code spans left out."""
    return html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<code>.*?</code>", " ", markup, flags=re.S)))


def test_the_detector_finds_english_and_passes_code_and_names():
    found = english_words("Needs: nothing beyond the Hugging Face site.")
    assert found == ["Needs", "nothing", "beyond", "the", "site"]
    assert english_words("don't stop-here") == ["don't", "stop", "here"]
    assert english_words("Нужно: HF_TOKEN, ~16 ГБ весов в bfloat16; device_map=\"auto\"; Gemma, n-gram") == []
    assert english_words("speculative-greedy-offline") == []


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
@pytest.mark.parametrize("online", [True, False])
def test_the_preset_picker_writes_no_english(lang: str, online: bool) -> None:
    """Every label of the picker's list and every preset's info box (its reason where the Hub is out of reach)."""
    found = {}
    for label, name in preset_picker.choices(online, lang):
        if english_words(label):
            found[f"choice {name}"] = english_words(label)
    for name in PRESETS:
        info = preset_picker.picked([]).read(preset_picker.on_preset(name, [], online=online, lang=lang))["preset_info"]
        if english_words(without_code(info)):
            found[f"info {name}"] = english_words(without_code(info))
    assert not found, found


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
@pytest.mark.parametrize("online", [True, False])
def test_the_model_pickers_and_the_status_line_write_no_english(lang: str, online: bool, monkeypatch) -> None:
    """Text the code puts together: each model's label in the target and assistant pickers (with the Hub's mark when
    it is out of reach), and the status line that lists the loaded models (issue 45: «Загружено: Gemma 3 270M
    (bundled)», "… (needs the Hub)" appended in code)."""
    from playground.app import generate_tab, preload

    monkeypatch.setattr(generate_tab, "hub_reachable", lambda: online)
    found = {key: english_words(label) for label, key in generate_tab._target_choices(lang) if english_words(label)}
    monkeypatch.setattr(preload.STORE, "loaded", lambda: list(CATALOGUE))
    monkeypatch.setattr(preload.PRELOAD, "thread", None)
    monkeypatch.setattr(preload.PRELOAD, "error", None)
    status = without_code(preload.initial_status(lang))
    assert i18n.t("status.ready_loaded", lang, models="").split(":")[0] in status
    found.update({"status": english_words(status)} if english_words(status) else {})
    assert not found, found


# ---- the page in Chromium ----

app_url = app_url_fixture("i18n-no-english-server.log")
browser = browser_fixture()

# Visible text nodes outside code, with the id of their closest element that has one (to say where).
VISIBLE_TEXT = """() => {
  const out = [], walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement, text = node.textContent.trim();
    if (!text || !el || el.closest('code, pre, script, style, textarea, .cm-editor')) continue;
    if (!el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) continue;
    const owner = el.closest('[id]');
    out.push([owner ? owner.id : '', text]);
  }
  return out;
}"""

TABS = ("replay", "theory", "compare", "code", "methods", "tune")


def english_on_page(page: Any) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for owner, text in page.evaluate(VISIBLE_TEXT):
        if owner in MULTILINGUAL:
            continue
        words = english_words(text)
        if words:
            found.setdefault(f"#{owner}: {text[:80]}", words)
    return found


@needs_chromium
@pytest.mark.browser
@pytest.mark.server
@pytest.mark.bundled
@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_no_english_on_any_tab(browser: Any, app_url: str, lang: str) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    context = browser.new_context(viewport={"width": 1440, "height": 1000}, locale=lang)
    page = context.new_page()
    page.set_default_timeout(60_000)
    calls = HandlerCalls(page)  # before the page loads: its load events are handler calls too
    try:
        page.goto(f"{app_url}?lang={lang}")
        page.wait_for_function("() => (document.querySelector('#pg-prompt textarea') || {}).value", timeout=120_000)
        page.wait_for_function("(title) => document.querySelector('#pg-tabs').innerText.includes(title)",
                               arg=i18n.t("ui.tab.theory", lang))
        # The server-written views are localized by the page's load events: wait for the legend's (first in the chain)
        # and the preset list's (later), so the check sees the page as a visitor does once it has loaded.
        page.wait_for_function("(label) => document.querySelector('[data-testid=pg-legend]').innerText.includes(label)",
                               arg=i18n.t("render.legend.accepted.label", lang))
        calls.settle()  # every load event's answer has landed: what they localize is in the page
        for chart in ("#pg-chart-acceptance", "#pg-chart-timing"):  # their hints drawn (plotly loads after the load)
            page.wait_for_selector(f"{chart} .js-plotly-plot .main-svg")
        still(page)
        found = {"generate": english_on_page(page)}
        page.click("#pg-preset input")  # the picker's list, open
        page.wait_for_selector("[role=option]")
        # The list is localized on load, after the Hub probe: wait for it (then check whatever it shows).
        labels = [preset_picker.choices(online, lang)[0][0] for online in (True, False)]
        try:
            page.wait_for_function("(labels) => labels.includes(document.querySelector('[role=option]').innerText"
                                   ".trim())", arg=labels, timeout=30_000)
        except PlaywrightTimeout:
            pass
        found["preset list"] = english_on_page(page)
        page.locator("[role=option]").first.click()
        page.wait_for_function("() => document.querySelector('#pg-preset-info')?.innerText.trim()")
        found["preset info"] = english_on_page(page)
        for tab in TABS:
            page.click(f"#pg-tab-{tab}-button")
            page.wait_for_selector(f"#pg-tab-{tab}", state="visible")
            if tab == "theory":  # its chart, drawn once its tab shows (plotly is loaded then): its words are read too
                page.wait_for_selector("#pg-theory-chart .js-plotly-plot .main-svg")
            calls.settle()  # whatever the switch asked of the server has landed
            still(page)  # and the tab is drawn
            found[tab] = english_on_page(page)
        found = {where: words for where, words in found.items() if words}
        if found:
            pytest.fail("English on the page: " + json.dumps(found, ensure_ascii=False, indent=1))
    finally:
        context.close()
