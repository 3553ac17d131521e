"""The step microscope in a real headless Chromium: a real run of the tiny models through the page, a click on a
refused token, and the panel beside the text: the target's top token first, the drafted token marked; in English,
Russian and Arabic (right to left, numbers left to right), in the live view and in the step-through replay.

The app starts without preloading (PLAYGROUND_PRELOAD=0); the run's settings come in the page's own shareable-link
query, so the test sets no control by hand. Screenshots go to artifacts/ (docs/microscope.png, on the bundled
Gemma, is made by `python tests/measure/microscope_screenshot.py`).
Tests assert behaviour, never timings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from appserver import ARTIFACTS, NO_PRELOAD_OFFLINE, app_url_fixture, browser_fixture, needs_chromium

from playground import i18n
from playground.app.links import query_for

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three, four,"
RUN_TIMEOUT_MS = 300_000

pytestmark = [pytest.mark.browser, pytest.mark.server, needs_chromium]

browser = browser_fixture()


app_url = app_url_fixture("microscope-test-server.log", NO_PRELOAD_OFFLINE)  # the session's (shared)


def open_run(browser: Any, url: str, models: dict[str, str], lang: str, sample: bool = False) -> Any:
    """A page in `lang` set up by a link for a speculative run of the tiny models; generated, finished."""
    query = query_for(None, PROMPT, models["target"], models["other" if sample else "noisy"], "speculative",
                      {"num_assistant_tokens": 4}, 32 if sample else 24, sample, 1.0, 1.0, 0, 3 if sample else 0,
                      "auto", "float32")
    context = browser.new_context(viewport={"width": 1440, "height": 1100}, locale=lang)
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{url}{query}&lang={lang}")
    page.wait_for_function("(p) => (document.querySelector('#pg-prompt textarea') || {}).value === p", arg=PROMPT,
                           timeout=60_000)
    page.click("#pg-generate")
    page.wait_for_selector("#pg-status-box [data-kind=done], #pg-status-box [data-kind=error]",
                           timeout=RUN_TIMEOUT_MS)
    assert page.get_attribute("#pg-status-box [data-testid=pg-status]", "data-kind") == "done", \
        page.inner_text("#pg-status-box")
    return page


def open_refused(page: Any, output: str, panel: str, key: bool = False) -> dict[str, Any]:
    """Click (or focus and press Enter on) the first refused token of `output`; what the panel then shows."""
    token = page.locator(f"{output} .tok[data-status=rejected]").first
    drafted = int(token.get_attribute("data-id"))
    step, pos = token.get_attribute("data-step"), token.get_attribute("data-pos")
    correction = page.locator(f'{output} .tok[data-status=correction][data-step="{step}"]').first
    if key:
        token.focus()
        page.keyboard.press("Enter")
    else:
        token.click()
    page.wait_for_selector(f'{panel} [data-testid=pg-micro][data-step="{step}"][data-pos="{pos}"]')
    rows = page.eval_on_selector_all(
        f'{panel} section[data-dist="p"] li',
        "els => els.map(e => ({id: Number(e.dataset.id), drafted: e.hasAttribute('data-drafted'), "
        "chosen: e.hasAttribute('data-chosen')}))")
    outside = page.locator(f'{panel} section[data-dist="p"] .pg-micro-outside[data-drafted]')
    return {"drafted": drafted, "correction": int(correction.get_attribute("data-id")), "rows": rows,
            "outside": int(outside.get_attribute("data-id")) if outside.count() else None}


def check_refusal(seen: dict[str, Any]) -> None:
    rows = seen["rows"]
    assert rows and rows[0]["id"] == seen["correction"] and rows[0]["chosen"]  # greedy: the target's top, first
    marked = [r["id"] for r in rows if r["drafted"]]
    assert marked == [seen["drafted"]] or (not marked and seen["outside"] == seen["drafted"])


@pytest.mark.parametrize("lang", ["en", "ru", "ar"])
def test_clicking_a_refused_token_opens_the_panel(browser: Any, app_url: str, tiny_models: dict[str, str],
                                                  lang: str) -> None:
    page = open_run(browser, app_url, tiny_models, lang)
    try:
        check_refusal(open_refused(page, "#pg-output", "#pg-micro-box"))
        panel = page.locator("#pg-micro-box [data-testid=pg-micro]")
        assert i18n.t("microscope.rule", lang) in panel.inner_text()
        direction = page.evaluate("() => getComputedStyle(document.querySelector('#pg-micro-box .pg-micro')).direction")
        assert direction == ("rtl" if lang == "ar" else "ltr")
        numbers = page.eval_on_selector_all("#pg-micro-box .pg-num", "els => els.map(e => getComputedStyle(e).direction)")
        assert numbers and set(numbers) == {"ltr"}
        if lang == "ar":  # a number's digits in reading order: its first digit left of its last
            box = page.evaluate("""() => { const e = document.querySelector('#pg-micro-box .pg-num');
              const r = document.createRange(); r.setStart(e.firstChild, 0); r.setEnd(e.firstChild, 1);
              const first = r.getBoundingClientRect().left; r.setStart(e.firstChild, e.textContent.length - 1);
              r.setEnd(e.firstChild, e.textContent.length); return [first, r.getBoundingClientRect().left]; }""")
            assert box[0] < box[1]
        # the per-run tables under the view
        page.wait_for_selector("#pg-run-tables [data-testid=pg-refusals] tr[data-draft-id]")
        # the same run in the step-through replay, opened from the keyboard
        page.get_by_role("tab", name=i18n.t("ui.tab.replay", lang)).click()
        page.wait_for_selector("#pg-replay-output .tok[data-status=rejected]")
        check_refusal(open_refused(page, "#pg-replay-output", "#pg-replay-micro", key=True))
        page.screenshot(path=str(ARTIFACTS / f"microscope-{lang}.png"), full_page=False)
    finally:
        page.context.close()


def test_sampling_panel_shows_the_residual(browser: Any, app_url: str,
                                                              tiny_models: dict[str, str]) -> None:
    page = open_run(browser, app_url, tiny_models, "en", sample=True)
    try:
        token = page.locator("#pg-output .tok[data-status=rejected]").first
        token.click()
        panel = page.locator("#pg-micro-box [data-testid=pg-micro][data-refused=true]")
        panel.wait_for()
        assert panel.locator('section[data-dist="residual"] li').count() >= 1
        assert panel.locator('section[data-dist="q"] li').count() >= 1
        # the row that holds the text and the panel beside it
        page.locator("#pg-micro-box").locator("xpath=..").screenshot(path=str(ARTIFACTS / "microscope-sampling.png"))
    finally:
        page.context.close()
