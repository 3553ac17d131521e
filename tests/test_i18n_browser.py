"""The page in Russian and Arabic in a real headless Chromium: direction, translated labels and server text, and a
Russian and an Arabic prompt generated on the bundled model with the coloured tokens in reading order.

Screenshots of both go to artifacts/ (to docs/screenshot-ru.png and docs/screenshot-ar.png when refreshing the
documentation's pictures: README, "Tests"). Tests assert behaviour, never
timings.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from appserver import app_url_fixture, browser_fixture, needs_chromium, picture_path
from appserver import still

from playground import i18n
from playground.methods import METHODS

RUN_TIMEOUT_MS = 900_000  # a fresh machine converts the bundled model first

# Every test drives the page of the module's app, which preloads the bundled Gemma and generates on it.
pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.bundled,
              needs_chromium]

PROMPTS = {
    "ru": "Москва — столица России. Санкт-Петербург — второй по величине город России. Москва — столица",
    "ar": "القاهرة هي عاصمة مصر. الرياض هي عاصمة السعودية. القاهرة هي عاصمة",
}

# Each token span's boxes, in the output's logical order (the DOM order is the order of generation): a span that
# wraps has one box per line, so its first and last boxes are kept ("top"/"left"/"right" of the first, "end_*" of
# the last), and consecutive tokens are compared where one ends and the next begins.
TOKEN_BOXES = """() => Array.from(document.querySelectorAll('#pg-output .tok')).map(e => {
  const rects = Array.from(e.getClientRects()).filter(r => r.width > 0);
  const first = rects[0] || e.getBoundingClientRect(), last = rects[rects.length - 1] || first;
  return {text: e.textContent, status: e.dataset.status, left: first.left, right: first.right,
          top: Math.round(first.top), width: rects.length ? first.width : 0, end_left: last.left,
          end_right: last.right, end_top: Math.round(last.top)};
})"""


app_url = app_url_fixture("i18n-test-server.log")
browser = browser_fixture()


def open_page(browser: Any, url: str, locale: str) -> Any:
    context = browser.new_context(viewport={"width": 1440, "height": 1000}, locale=locale)
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(url)
    page.wait_for_function("() => (document.querySelector('#pg-prompt textarea') || {}).value", timeout=60_000)
    return page


def label_text(page: Any, elem_id: str) -> str:
    return page.inner_text(f"#{elem_id} [data-testid=block-info], #{elem_id} label span").strip()


def wait_finished(page: Any) -> str:
    page.wait_for_selector("#pg-status-box [data-kind=done], #pg-status-box [data-kind=error]", timeout=RUN_TIMEOUT_MS)
    return page.get_attribute("#pg-status-box [data-testid=pg-status]", "data-kind")


def generate(page: Any, lang: str) -> list[dict[str, Any]]:
    page.fill("#pg-prompt textarea", PROMPTS[lang])
    box = page.locator("#pg-max-new-tokens input[type=number]")
    box.fill("24")
    box.press("Enter")
    box.blur()
    page.click("#pg-generate")
    assert wait_finished(page) == "done", page.inner_text("#pg-status-box")
    still(page)  # the run's last views drawn and laid out: the token boxes read are the final ones
    return page.evaluate(TOKEN_BOXES)


def in_reading_order(boxes: list[dict[str, Any]], rtl: bool) -> list[tuple[str, str]]:
    """Pairs of consecutive visible tokens on one line, both in the script, that are out of reading order."""
    script = (lambda c: "\u0600" <= c <= "\u06ff") if rtl else (lambda c: "\u0400" <= c <= "\u04ff")
    wrong = []
    for a, b in zip(boxes, boxes[1:]):
        if a["end_top"] != b["top"] or not a["width"] or not b["width"]:
            continue
        if not (any(map(script, a["text"])) and any(map(script, b["text"]))):
            continue
        if (b["right"] > a["end_left"] + 1) if rtl else (b["left"] < a["end_right"] - 1):
            wrong.append((a["text"], b["text"]))
    return wrong


@pytest.mark.slow
@pytest.mark.parametrize("lang,locale", [("ru", "ru-RU"), ("ar", "ar")])
def test_page_in_the_browsers_language(browser: Any, app_url: str, lang: str, locale: str) -> None:
    page = open_page(browser, app_url, locale)
    try:
        root = page.evaluate("() => [document.documentElement.lang, document.documentElement.dir]")
        assert root == [lang, i18n.direction(lang)]
        assert page.evaluate("() => getComputedStyle(document.querySelector('#pg-prompt')).direction") == \
            i18n.direction(lang)
        # Labels (Gradio's I18n) and server text (the method's title, its summary, the legend, the example prompt).
        assert i18n.t("ui.prompt.label", lang) in page.inner_text("#pg-prompt")
        assert page.inner_text("#pg-generate").strip() == i18n.t("ui.generate", lang)
        assert i18n.t("ui.tab.theory", lang) in page.inner_text("#pg-tabs")
        method = METHODS["prompt_lookup"].localized(lang)
        page.wait_for_function("t => document.querySelector('#pg-method input').value === t", arg=method.title)
        assert method.summary[:40] in page.inner_text("#pg-method-summary")
        assert i18n.t("render.legend.rejected.label", lang) in page.inner_text("#pg-legend-box")
        assert page.input_value("#pg-language input") == i18n.LANGUAGES[lang]

        boxes = generate(page, lang)
        assert i18n.t("status.done_prefix", lang) in page.inner_text("#pg-status-box")
        words = [b for b in boxes if b["status"] in ("accepted", "correction", "bonus", "target")]
        assert len(words) == 24
        # The coloured spans are in reading order: left to right in Russian, right to left in Arabic.
        assert not in_reading_order(boxes, rtl=lang == "ar")
        ordered = [b for a, b in zip(boxes, boxes[1:]) if a["end_top"] == b["top"] and a["width"] and b["width"]]
        assert ordered, "no two tokens on one line: nothing was checked"
        # The output box takes its direction from the text; the charts stay left to right.
        direction = page.evaluate("() => getComputedStyle(document.querySelector('#pg-output .pg-tokens')).direction")
        assert direction == i18n.direction(lang)
        assert page.evaluate("() => getComputedStyle(document.querySelector('#pg-chart-acceptance .js-plotly-plot'))"
                             ".direction") == "ltr"
        title = page.locator('#pg-output .tok[data-status="accepted"]').first.get_attribute("title")
        assert i18n.t("render.describe.accepted", lang) in title
        # Numbers in the page's language (CLDR via i18n.number): a decimal comma in Russian; Latin digits with a
        # point in Arabic, laid out left to right (the figures' direction stays ltr inside the rtl page).
        stats = page.inner_text("[data-testid=pg-stats]")
        per_step = page.inner_text('[data-stat="tokens_per_step"] .pg-value').strip()
        decimal = {"ru": r"\d+,\d\d", "ar": r"\d+\.\d\d"}[lang]
        assert re.fullmatch(decimal, per_step), (per_step, stats)
        assert not re.search(r"\d\.\d" if lang == "ru" else r"\d,\d|[\u0660-\u0669\u06f0-\u06f9]", stats), stats
        assert page.evaluate("() => getComputedStyle(document.querySelector('[data-stat=\"tokens_per_step\"] "
                             ".pg-value')).direction") == "ltr"
        still(page)
        page.screenshot(path=str(picture_path(f"screenshot-{lang}.png")), full_page=False)
    finally:
        page.context.close()


@pytest.mark.slow
def test_arabic_tokens_are_spans_ordered_right_to_left(browser: Any, app_url: str) -> None:
    """Independent of the run: every Arabic token span of the output is hoverable and right of the next one."""
    page = open_page(browser, app_url, "ar")
    try:
        boxes = generate(page, "ar")
        arabic = [b for b in boxes if any("\u0600" <= c <= "\u06ff" for c in b["text"]) and b["width"]]
        assert len(arabic) >= 3
        pairs = [(a, b) for a, b in zip(arabic, arabic[1:]) if a["end_top"] == b["top"]]
        assert pairs and all(a["end_left"] >= b["right"] - 1 for a, b in pairs)
        first = page.locator("#pg-output .tok").filter(has_text=arabic[0]["text"]).first
        first.hover()
        assert first.get_attribute("title")
    finally:
        page.context.close()


@pytest.mark.slow
def test_the_picker_switches_the_whole_page(browser: Any, app_url: str) -> None:
    page = open_page(browser, app_url, "ar")
    try:
        page.click("#pg-language input")
        page.click('[role=option][aria-label="Русский"]')
        page.wait_for_url("**lang=ru**", timeout=60_000)  # the picker reloads the page in the chosen language
        page.wait_for_load_state("load")
        page.wait_for_function("() => (document.querySelector('#pg-prompt textarea') || {}).value", timeout=60_000)
        assert "lang=ru" in page.url
        assert page.evaluate("() => [document.documentElement.lang, document.documentElement.dir]") == ["ru", "ltr"]
        assert page.inner_text("#pg-generate").strip() == i18n.t("ui.generate", "ru")
        page.wait_for_function("t => document.querySelector('#pg-method input').value === t",
                               arg=METHODS["prompt_lookup"].localized("ru").title)
        # An explicit English choice wins over the browser's Arabic.
        page.goto(app_url + "?lang=en")
        page.wait_for_function("() => (document.querySelector('#pg-prompt textarea') || {}).value", timeout=60_000)
        assert page.evaluate("() => document.documentElement.dir") == "ltr"
        assert page.inner_text("#pg-generate").strip() == "Generate"
        assert page.input_value("#pg-method input") == METHODS["prompt_lookup"].title
    finally:
        page.context.close()


def test_arabic_dropdown_text_keeps_clear_of_its_arrow(browser: Any, app_url: str) -> None:
    """Right to left, a dropdown's arrow sits on the left, outside the space its text takes (Gradio pins it right)."""
    page = open_page(browser, app_url, "ar")
    try:
        for elem_id in ("pg-method", "pg-target", "pg-language"):
            box = page.evaluate("""id => { const input = document.querySelector('#' + id + ' input');
              const icon = input.closest('.secondary-wrap').querySelector('.icon-wrap').getBoundingClientRect();
              const r = input.getBoundingClientRect(), cs = getComputedStyle(input);
              return {icon_left: icon.left, icon_right: icon.right, text_left: r.left + parseFloat(cs.paddingLeft),
                      text_right: r.right - parseFloat(cs.paddingRight)}; }""", elem_id)
            assert box["icon_right"] <= box["text_left"] + 0.5 and box["icon_left"] < box["text_right"], (elem_id, box)
    finally:
        page.context.close()


def test_russian_compare_and_tune_write_russian(browser: Any, app_url: str) -> None:
    """Compare's and Tune's statuses, verdict and table come in the page's language (the handlers read ?lang=)."""
    page = open_page(browser, app_url + "?lang=ru", "en-US")
    try:
        # An English browser on a Russian page: every tab's name is Russian, not only the selected one's.
        for tab in ("compare", "tune", "methods"):
            page.wait_for_function("([id, name]) => document.querySelector('#pg-tab-' + id + '-button').innerText"
                                   ".trim() === name", arg=[tab, i18n.t(f"ui.tab.{tab}", "ru")])
        assert page.inner_text("#pg-replay-play").strip() == i18n.t("ui.replay.play", "ru")
        page.click("#pg-tab-compare-button")
        page.wait_for_function("t => document.querySelector('#pg-compare-status').innerText.includes(t)",
                               arg=i18n.t("compare.idle", "ru"))
        slider = page.locator("#pg-compare-tokens input[type=number]")
        slider.fill("8")
        slider.press("Enter")
        slider.blur()
        page.click("#pg-compare-run")
        page.wait_for_selector("#pg-compare-status [data-kind=done], #pg-compare-status [data-kind=error]",
                               timeout=RUN_TIMEOUT_MS)
        status = page.inner_text("#pg-compare-status")
        assert page.get_attribute("#pg-compare-status [data-testid=pg-status]", "data-kind") == "done", status
        assert "повтор" in status and "repeat" not in status
        table = page.inner_text("#pg-compare-table")
        assert i18n.t("compare.head.speedup", "ru") in table and i18n.t("compare.check.reference", "ru") in table
        assert re.search(r"\d,\d\d×", table) and not re.search(r"\d\.\d\d×", table), table  # speedups: 1,23×
        page.click("#pg-tab-tune-button")
        page.wait_for_function("t => document.querySelector('#pg-tune-status').innerText.includes(t)",
                               arg=i18n.t("tune.status.idle", "ru"))
        page.click("#pg-tune-verify")  # nothing tuned yet: our refusal, in Russian
        page.wait_for_selector("#pg-tune-status [data-kind=error]", timeout=60_000)
        assert i18n.t("error.tune.verify_first", "ru") in page.inner_text("#pg-tune-status")
    finally:
        page.context.close()
