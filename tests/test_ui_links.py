"""Shareable links in a real Chromium against the real app: a link restores the settings it carries, the page's
own link button round-trips, a preset link fills the guide's example, and a hostile link changes nothing and is
shown as text. No model is loaded (PLAYGROUND_PRELOAD=0; nothing is generated)."""

from __future__ import annotations

import json
from typing import Any, Iterator
from urllib.parse import urlencode

import pytest

from appserver import NO_PRELOAD_OFFLINE, app_url_fixture, browser_fixture, needs_chromium
from playground.methods import METHODS

pytestmark = [pytest.mark.browser, pytest.mark.server,
              needs_chromium]

app_url = app_url_fixture("ui-links-server.log", NO_PRELOAD_OFFLINE)
browser = browser_fixture()


@pytest.fixture
def open_link(browser: Any, app_url: str) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1440, "height": 1000})

    def open_(query: dict[str, Any] | str) -> Any:
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(app_url + (query if isinstance(query, str) else "?" + urlencode(query)))
        if query:
            page.wait_for_selector("#pg-link-status [data-testid=pg-status]")
        else:  # nothing to restore: wait for the page's own load (the default example prompt)
            page.wait_for_function("() => (document.querySelector('#pg-prompt textarea') || {}).value")
        return page

    try:
        yield open_
    finally:
        context.close()


def controls(page: Any) -> dict[str, Any]:
    """What a person sees in the controls a link sets (the Decoding section opened)."""
    if page.locator("#pg-sample").count() == 0:
        page.get_by_text("Decoding", exact=True).click()
        page.wait_for_selector("#pg-sample input")
    return page.evaluate("""() => {
      const q = (s) => document.querySelector(s);
      const number = (id) => { const el = q(`#${id} input[type=number]`); return el ? Number(el.value) : null; };
      const checked = (id) => { const el = q(`#${id} input:checked`); return el ? el.value : null; };
      return {
        method: q('#pg-method input').value, target: q('#pg-target input').value,
        prompt: q('#pg-prompt textarea').value, sample: q('#pg-sample input').checked,
        max_new_tokens: number('pg-max-new-tokens'), dtype: checked('pg-dtype'),
        lookup: number('pg-param-prompt_lookup_num_tokens'), ngram: number('pg-param-max_matching_ngram_size'),
        exit_layer: number('pg-param-assistant_early_exit'), preset: q('#pg-preset input').value,
      };
    }""")


def link_status(page: Any) -> tuple[str, str]:
    box = page.locator("#pg-link-status [data-testid=pg-status]")
    return box.get_attribute("data-kind"), box.inner_text()


SETTINGS = {"method": "prompt_lookup", "params": json.dumps({"prompt_lookup_num_tokens": 7, "max_matching_ngram_size": 3}),
            "prompt": "Copy <b>this</b> & that", "sample": "true", "temperature": "0.7", "max_new_tokens": "33",
            "dtype": "float32"}


@pytest.mark.slow
def test_a_link_restores_its_settings_and_the_link_button_round_trips(open_link: Any) -> None:
    page = open_link(SETTINGS)
    assert link_status(page) == ("done", "✓ Settings restored from the link.")
    seen = controls(page)
    assert seen["method"] == METHODS["prompt_lookup"].title and seen["target"] == "Gemma 3 270M (bundled)"
    assert (seen["lookup"], seen["ngram"], seen["max_new_tokens"]) == (7, 3, 33)
    assert seen["prompt"] == "Copy <b>this</b> & that" and seen["sample"] and seen["dtype"] == "float32"
    assert page.locator("#pg-prompt b").count() == 0  # the prompt is text, not markup

    # The page's own link: the address bar and the link box carry the settings; opening it restores them again.
    page.click("#pg-link-make")
    page.wait_for_function("() => document.querySelector('#pg-link textarea, #pg-link input')?.value.includes('?')")
    link = page.locator("#pg-link textarea, #pg-link input").first.input_value()
    assert page.url == link and "method=prompt_lookup" in link
    again = open_link(link[link.index("?"):])
    assert controls(again) == seen


def test_a_preset_link_fills_the_guide_example_or_its_stand_in(open_link: Any) -> None:
    page = open_link({"preset": "early-exit", "prompt": "Alice and Bob"})  # the Hub is off: its stand-in
    assert link_status(page)[0] == "done"
    seen = controls(page)
    assert seen["preset"] == "Self-speculative decoding (early exit) — offline stand-in"
    assert seen["method"] == METHODS["early_exit"].title and seen["exit_layer"] == 4
    assert seen["prompt"] == "Alice and Bob" and seen["max_new_tokens"] == 20
    assert "not reachable here" in page.inner_text("#pg-preset-info")


@pytest.mark.slow
def test_a_hostile_link_changes_nothing_and_is_shown_as_text(open_link: Any) -> None:
    hostile = "<img src=x onerror=\"window.__pwned=1\">"
    default = controls(open_link({}))
    for query in ({"preset": hostile}, {"method": hostile, "prompt": "x"}, {"max_new_tokens": "lots"},
                  {"params": "{not json", "method": "prompt_lookup"}):
        page = open_link(query)
        kind, text = link_status(page)
        assert kind == "error" and text.startswith("⚠ This link's settings were not applied:"), (query, text)
        assert page.locator("#pg-link-status img").count() == 0 and not page.evaluate("() => window.__pwned")
        assert controls(page) == default, query


def test_the_preset_picker_fills_the_controls_and_an_edit_clears_it(open_link: Any) -> None:
    from playground.presets import PRESETS
    from test_ui_browser import choose, set_number

    page = open_link({})
    # Offline (HF_HUB_OFFLINE=1): picking a Hub example fills in its stand-in and says why.
    choose(page, "pg-preset", "Prompt lookup, greedy (needs the Hub: picks its offline stand-in)")
    # (The picked label itself mentions the stand-in: wait for the server's answer, the stand-in's own title.)
    page.wait_for_function("(title) => document.querySelector('#pg-preset input').value === title",
                           arg=PRESETS["prompt-lookup-greedy-offline"].title)
    seen = controls(page)
    assert seen["preset"] == PRESETS["prompt-lookup-greedy-offline"].title
    assert (seen["method"], seen["lookup"], seen["ngram"], seen["max_new_tokens"]) == (
        METHODS["prompt_lookup"].title, 5, 2, 20)
    assert seen["prompt"] == "Hugging Face is an open-source company"
    assert "not reachable here" in page.inner_text("#pg-preset-info")
    # A control the preset set, edited by hand: the run now follows the controls, not the preset.
    set_number(page, "pg-param-prompt_lookup_num_tokens", 7)
    page.wait_for_function("() => document.querySelector('#pg-preset input')?.value === ''")
    assert controls(page)["lookup"] == 7
