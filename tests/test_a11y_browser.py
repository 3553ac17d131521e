"""A page everyone can use, in a real headless Chromium: axe-core (the copy pip installs with axe-playwright-python)
on every tab in English, Russian and Arabic, light and dark; the page driven by the keyboard alone from its top;
the language picker changed from the keyboard without trapping the focus; a visible focus ring on every kind of
control; a slider filled from the right on the Arabic page.

The session's app without a start-up load (`NO_PRELOAD_OFFLINE`: the run uses the tiny models, set by the page's own
shareable link), one Chromium, one page per test reused across languages and themes. Screenshots go to artifacts/.
Tests assert behaviour, never timings.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from appserver import (ARTIFACTS, NO_PRELOAD_OFFLINE, HandlerCalls, app_url_fixture, browser_fixture, needs_chromium,
                       still)

from playground import i18n
from playground.app.access import FOCUS_DARK, FOCUS_LIGHT
from playground.app.links import query_for
from playground.app.page import TABS

pytestmark = [pytest.mark.browser, pytest.mark.server, needs_chromium]

PROMPT = "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three, four,"
RUN_TIMEOUT_MS = 300_000
SERIOUS = ("serious", "critical")
MAX_TABS = 120  # Tab presses from the top to the last tab's button (about 45 today)

browser = browser_fixture()
app_url = app_url_fixture("a11y-test-server.log", NO_PRELOAD_OFFLINE)


@pytest.fixture(scope="module")
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    try:
        yield pg
    finally:
        context.close()


def load(page: Any, url: str) -> None:
    calls = HandlerCalls(page)
    page.goto(url)
    page.wait_for_function("() => (document.querySelector('#pg-prompt textarea') || {}).value")
    calls.settle()  # the load events' answers (labels, the tabs' texts) have all arrived, none follows
    still(page)  # ... and the page has drawn them


ACTIVE = """() => { const e = document.activeElement;
  if (!e || e === document.body) return {tag: 'BODY', block: '', id: ''};
  const block = e.closest('[id^="pg-"]');
  return {tag: e.tagName, id: e.id || '', block: block ? block.id : '', role: e.getAttribute('role') || '',
          type: e.type || '', status: e.dataset ? (e.dataset.status || '') : ''}; }"""


def active(page: Any) -> dict[str, str]:
    return page.evaluate(ACTIVE)


def tab_until(page: Any, found: Any, limit: int = MAX_TABS, key: str = "Tab") -> list[dict[str, str]]:
    """Press `key` until `found(active element)` holds; the elements passed on the way (the last one found)."""
    passed = []
    for _ in range(limit):
        page.keyboard.press(key)
        now = active(page)
        passed.append(now)
        if found(now):
            return passed
    raise AssertionError(f"not reached after {limit} presses of {key}: {passed[-12:]}")


# --------------------------------------------------------------------------- axe-core


def axe_serious(page: Any, context: str | None = None) -> list[str]:
    """axe-core's serious and critical violations of the page as it is now (of `context` only, a selector, where
    given): 'rule (n nodes: first targets)'. axe-core (the copy pip installs with axe-playwright-python, 570 KB) is
    put into the page once per load, not before every check."""
    from axe_playwright_python.base import AXE_SCRIPT

    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE_SCRIPT)
    response = page.evaluate("([context, options]) => axe.run(context || document, options)",
                             [context, {"resultTypes": ["violations"]}])
    return [f"{v['id']} ({len(v['nodes'])}: {[n['target'] for n in v['nodes'][:3]]})"
            for v in response["violations"] if v["impact"] in SERIOUS]


# A digest of the page outside the tabs (`#pg-tabs`: the tab buttons and the shown tab): its markup, <body>'s theme
# class included. A tab's switch leaves it as it was, so after one check of the whole page, the next tabs' checks
# need cover the tabs only; where it changed after all, the whole page is checked again.
OUTSIDE_TABS = """() => { const tabs = document.querySelector('#pg-tabs');
  const html = document.body.outerHTML.replace(tabs ? tabs.outerHTML : '', '');
  let h = 0; for (let i = 0; i < html.length; i++) { h = (Math.imul(h, 31) + html.charCodeAt(i)) | 0; }
  return `${html.length}:${h}`; }"""


def set_scheme(page: Any, scheme: str) -> None:
    """Light or dark in place (no reload): the media query and Gradio's class on <body>, as its load sets them; then
    the page settles (the code's colours are checked again for the theme, `access.HEAD`)."""
    page.emulate_media(color_scheme=scheme)
    page.evaluate("dark => document.body.classList.toggle('dark', dark)", scheme == "dark")
    still(page)


def axe_every_tab(page: Any, label: str) -> dict[str, list[str]]:
    """axe-core on every tab as the page is now: the whole page on the first tab and wherever the part outside the
    tabs changed since its last check, the tabs alone otherwise. Violations by `label/tab`."""
    found, checked_outside = {}, None
    for tab in TABS:
        page.click(f"#pg-tab-{tab}-button")
        page.wait_for_selector(f"#pg-tab-{tab}", state="visible")
        still(page)
        outside = page.evaluate(OUTSIDE_TABS)
        if outside != checked_outside:
            violations, checked_outside = axe_serious(page), outside
        else:
            violations = axe_serious(page, "#pg-tabs")
        if violations:
            found[f"{label}/{tab}"] = violations
    return found


@pytest.mark.parametrize("lang", ["en", "ru", "ar"])
def test_axe_finds_nothing_serious_on_any_tab(page: Any, app_url: str, lang: str,
                                              tiny_models: dict[str, str]) -> None:
    """Before and after a run (the run fills the replay, the theory's curves and the Code tab's highlighted script),
    every tab, light and dark."""
    query = query_for(None, PROMPT, tiny_models["target"], None, "prompt_lookup", {"prompt_lookup_num_tokens": 10},
                      24, False, 1.0, 1.0, 0, 0, "auto", "float32")
    found = {}
    load(page, f"{app_url}{query}&lang={lang}")
    page.wait_for_function("p => document.querySelector('#pg-prompt textarea')?.value === p", arg=PROMPT,
                           timeout=120_000)
    for moment in ("before", "after"):
        if moment == "after":
            set_scheme(page, "light")
            page.click("#pg-generate")
            page.wait_for_selector("#pg-status-box [data-kind=done]", timeout=RUN_TIMEOUT_MS)
            page.wait_for_selector("#pg-code-python .cm-line", state="attached")  # the run's code is there
        # After the run too, light and dark (the dark theme switched in place once found the Code tab's comments,
        # CodeMirror's #434c5e on #1e293b, below 4.5:1).
        for scheme in ("light", "dark"):
            set_scheme(page, scheme)
            found.update(axe_every_tab(page, f"{lang}/{moment}/{scheme}"))
    # The code's scroller is a named region in the Tab order (it holds no control of its own).
    region = page.eval_on_selector("#pg-code-python .cm-scroller", "e => [e.tabIndex, e.getAttribute('role'), "
                                   "e.getAttribute('aria-label')]")
    set_scheme(page, "light")
    assert not found, found
    assert region[0] == 0 and region[1] == "region" and region[2], region


def test_the_tab_by_tab_check_finds_what_a_tab_or_its_switch_spoils(page: Any, app_url: str) -> None:
    """What `axe_every_tab` must still see where it checks the tabs alone: faint text put into a later tab (the
    Methods tab), and faint text that the Theory tab's switch adds outside the tabs (the whole page checked again)."""
    load(page, f"{app_url}?lang=en")
    page.click("#pg-tab-methods-button")  # drawn once shown, then kept (hidden) while another tab shows
    page.wait_for_selector("#pg-tab-methods", state="visible")
    faint = "color: #c8c8c8; background: #ffffff"
    page.evaluate("""faint => {
      const put = (where, id) => { const p = document.createElement('p'); p.id = id; p.style.cssText = faint;
        p.textContent = 'Faint text nobody can read'; where.appendChild(p); };
      put(document.querySelector('#pg-tab-methods'), 'pg-faint-inside');
      document.querySelector('#pg-tab-theory-button').addEventListener('click', () =>
        put(document.querySelector('#pg-tabs').parentElement, 'pg-faint-outside'), {once: true}); }""", faint)
    try:
        found = axe_every_tab(page, "spoilt")
    finally:
        page.evaluate("() => document.querySelectorAll('[id^=pg-faint-]').forEach(e => e.remove())")
    assert sorted(found) == ["spoilt/methods", "spoilt/theory"], found
    assert "#pg-faint-outside" in str(found["spoilt/theory"]), found
    assert "#pg-faint-inside" in str(found["spoilt/methods"]), found
    assert all(rule.startswith("color-contrast") for rules in found.values() for rule in rules), found


# --------------------------------------------------------------------------- the keyboard alone


def test_keyboard_alone_reaches_generate_runs_and_every_tab(page: Any, app_url: str,
                                                           tiny_models: dict[str, str]) -> None:
    query = query_for(None, PROMPT, tiny_models["target"], None, "prompt_lookup", {"prompt_lookup_num_tokens": 10},
                      24, False, 1.0, 1.0, 0, 0, "auto", "float32")
    load(page, f"{app_url}{query}&lang=en")
    page.wait_for_function("p => document.querySelector('#pg-prompt textarea').value === p", arg=PROMPT)
    # The link replaced the default example's prompt: the example picker no longer names it.
    page.wait_for_function("() => !document.querySelector('#pg-examples input:checked')", timeout=10_000)
    page.evaluate("() => { window.pgSamePage = true; }")  # gone if anything reloads the page
    # From the top: the presenter's view switch, then the language picker; passing it by Tab reloads nothing.
    order = tab_until(page, lambda a: a["id"] == "pg-generate")
    assert [a["block"] for a in order[:2]] == ["pg-presenter", "pg-language"], order[:3]
    assert page.evaluate("() => window.pgSamePage === true")
    assert all(a["tag"] != "BODY" for a in order), order  # the focus never fell back to the page's top
    blocks = [a["block"] for a in order]
    for elem_id in ("pg-preset", "pg-target", "pg-method", "pg-dtype", "pg-max-new-tokens", "pg-prompt",
                    "pg-examples"):
        assert elem_id in blocks, (elem_id, blocks)
    assert blocks.index("pg-language") < blocks.index("pg-target") < blocks.index("pg-prompt")  # the page's order
    # Shift+Tab goes back the same way.
    page.keyboard.press("Shift+Tab")
    assert active(page)["block"] == order[-2]["block"]
    page.keyboard.press("Tab")
    assert active(page)["id"] == "pg-generate"

    page.keyboard.press("Enter")
    page.wait_for_selector("#pg-status-box [data-kind=done], #pg-status-box [data-kind=error]", timeout=RUN_TIMEOUT_MS)
    assert page.get_attribute("#pg-status-box [data-testid=pg-status]", "data-kind") == "done", \
        page.inner_text("#pg-status-box")
    tokens = page.eval_on_selector_all("#pg-output .tok", "els => els.map(e => [e.getAttribute('tabindex'), "
                                       "e.getAttribute('role'), e.getAttribute('aria-label'), e.dataset.status])")
    assert tokens and all(role == "button" for _, role, _, _ in tokens)
    assert [tabindex for tabindex, *_ in tokens].count("0") == 1  # the output is one stop in the Tab order
    for _, _, label, status in tokens:  # the fate in words, for a screen reader
        assert label.endswith(": " + i18n.t(f"render.describe.{status}", "en")), label

    # On to the output: the arrows walk its tokens, Enter opens one in the microscope.
    tab_until(page, lambda a: a["block"] == "pg-output" and a["role"] == "button")
    assert page.evaluate("() => Array.from(document.querySelectorAll('#pg-output .tok')).indexOf("
                         "document.activeElement)") == 0
    judged = page.evaluate("() => Array.from(document.querySelectorAll('#pg-output .tok'))"
                           ".findIndex(e => e.dataset.pos !== undefined)")
    never = page.evaluate("""() => Array.from(document.querySelectorAll('#pg-output .tok'))
      .findIndex(e => e.dataset.status === 'discarded' || e.dataset.status === 'unverified')""")
    # The tiny target refuses most of prompt lookup's 10-token drafts: the run has both kinds.
    assert judged >= 0 and never >= 0, tokens
    for _ in range(judged):
        page.keyboard.press("ArrowRight")
    step, pos = page.evaluate("() => [document.activeElement.dataset.step, document.activeElement.dataset.pos]")
    page.keyboard.press("Enter")
    page.wait_for_selector(f'#pg-micro-box [data-testid=pg-micro][data-step="{step}"][data-pos="{pos}"]')
    # A draft never judged: Space opens it and the panel says why there is no rule for it, instead of keeping the
    # previous token's panel.
    page.keyboard.press("Home")
    for _ in range(never):
        page.keyboard.press("ArrowRight")
    status = page.evaluate("() => document.activeElement.dataset.status")
    page.keyboard.press("Space")
    panel = page.locator(f"#pg-micro-box [data-testid=pg-micro][data-outcome={status}]")
    panel.wait_for()
    assert "was never judged" in panel.inner_text()
    violations = axe_serious(page)  # the page with a run's tokens and an open panel
    assert not violations, violations

    # Every tab, in order, by Tab and Enter.
    for tab in TABS:
        tab_until(page, lambda a, tab=tab: a["id"] == f"pg-tab-{tab}-button")
        page.keyboard.press("Enter")
        page.wait_for_selector(f"#pg-tab-{tab}", state="visible")
        assert page.get_attribute(f"#pg-tab-{tab}-button", "aria-selected") == "true"
    assert page.evaluate("() => window.pgSamePage === true")


def test_language_picker_changes_only_on_a_choice_and_keeps_the_focus(page: Any, app_url: str) -> None:
    load(page, f"{app_url}?lang=en")
    page.evaluate("() => { window.pgSamePage = true; }")
    page.keyboard.press("Tab")
    assert active(page)["block"] == "pg-presenter"  # the presenter's view switch stands first
    page.keyboard.press("Tab")
    assert active(page)["block"] == "pg-language"
    page.keyboard.press("Tab")  # passing it changes nothing
    assert active(page)["block"] == "pg-preset" and page.evaluate("() => window.pgSamePage === true")
    page.keyboard.press("Shift+Tab")
    assert active(page)["block"] == "pg-language"
    # Arrows and Enter: a deliberate choice reloads the page in that language, the focus back on the picker. (The
    # list opens when the picker gets the focus, its current language highlighted.)
    page.wait_for_selector("#pg-language [role=listbox] [role=option]")
    options = page.eval_on_selector_all("#pg-language [role=option]",
                                        "els => els.map(e => [e.getAttribute('aria-label'), e.classList.contains('active')])")
    at = [active for _, active in options].index(True)
    for _ in range(([name for name, _ in options].index(i18n.LANGUAGES["ru"]) - at) % len(options)):
        page.keyboard.press("ArrowDown")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    page.wait_for_function("() => (document.querySelector('#pg-prompt textarea') || {}).value")
    assert "lang=ru" in page.url
    page.wait_for_function("() => { const e = document.activeElement; return !!e && !!e.closest('#pg-language'); }",
                           timeout=20_000)
    assert page.input_value("#pg-language input") == i18n.LANGUAGES["ru"]
    page.evaluate("() => { window.pgSamePage = true; }")
    page.keyboard.press("Tab")
    assert active(page)["block"] == "pg-preset"
    still(page)  # a reload the blur set off would have begun: the page is still, and still this one
    assert page.evaluate("() => window.pgSamePage === true") and "lang=ru" in page.url


# --------------------------------------------------------------------------- what the eye sees


def _luminance(rgb: tuple[float, ...]) -> float:
    def channel(c: float) -> float:
        c = c / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(c) for c in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def rgb(css: str) -> tuple[float, ...]:
    return tuple(float(x) for x in re.findall(r"[\d.]+", css)[:3])


# The element that draws the ring: a radio's or checkbox's label, anything else itself.
RING = """() => { const f = document.activeElement;
  const e = /^(radio|checkbox)$/.test(f.type) ? f.closest('label') : f, cs = getComputedStyle(e);
  let bg = 'rgba(0, 0, 0, 0)', el = e.parentElement;
  while (el && /rgba\\(.*, 0\\)|transparent/.test(bg)) { bg = getComputedStyle(el).backgroundColor; el = el.parentElement; }
  if (/rgba\\(.*, 0\\)|transparent/.test(bg)) bg = getComputedStyle(document.body).backgroundColor;
  return {style: cs.outlineStyle, width: parseFloat(cs.outlineWidth), color: cs.outlineColor, background: bg}; }"""

# One control of each kind, reached by Tab (the ring is :focus-visible's, which a click on a button does not show).
KINDS = {"combobox": "#pg-language input", "range": "#pg-max-new-tokens input[type=range]",
         "radio": "#pg-dtype input[type=radio]", "textarea": "#pg-prompt textarea", "button": "#pg-generate",
         "checkbox": "#pg-check-plain input", "tab": "#pg-tab-theory-button"}


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_kind_of_control_shows_a_focus_ring(page: Any, app_url: str, scheme: str) -> None:
    page.emulate_media(color_scheme=scheme)
    try:
        load(page, f"{app_url}?lang=en")
        want = {"light": "rgb(29, 78, 216)", "dark": "rgb(252, 211, 77)"}[scheme]
        expected = rgb(want)
        assert (FOCUS_LIGHT, FOCUS_DARK) == ("#1d4ed8", "#fcd34d")
        for kind, selector in KINDS.items():
            page.evaluate("s => document.querySelector(s).scrollIntoView({block: 'center'})", selector)
            # Focus the control before it, then Tab: a keyboard focus, as a visitor's.
            page.evaluate("""s => { const all = Array.from(document.querySelectorAll('button, input, textarea, a[href], '
                + '[tabindex]')).filter(e => e.tabIndex >= 0 && e.offsetParent);
              const i = all.indexOf(document.querySelector(s)); (all[i - 1] || document.body).focus(); }""", selector)
            page.keyboard.press("Tab")
            assert page.evaluate("s => document.activeElement === document.querySelector(s)", selector), kind
            try:  # Gradio's labels ease their colours in: poll until the ring shows the focus colour
                page.wait_for_function(f"want => ({RING})().color === want", arg=want, timeout=10_000)
            except PlaywrightTimeoutError:
                pass  # the assertions below say what it shows instead
            ring = page.evaluate(RING)
            assert ring["style"] == "solid" and ring["width"] >= 3, (kind, ring)
            assert rgb(ring["color"]) == expected, (kind, ring)
            assert contrast(rgb(ring["color"]), rgb(ring["background"])) >= 3, (kind, ring)
            if kind in ("radio", "range", "tab"):
                page.screenshot(path=str(ARTIFACTS / f"a11y-focus-{kind}-{scheme}.png"),
                                clip=_around(page, selector))
    finally:
        page.emulate_media(color_scheme="light")


def _around(page: Any, selector: str) -> dict[str, float]:
    box = page.locator(selector).first.bounding_box()
    return {"x": max(0, box["x"] - 160), "y": max(0, box["y"] - 60), "width": box["width"] + 320,
            "height": box["height"] + 120}


def test_arabic_sliders_fill_from_the_right(page: Any, app_url: str) -> None:
    """On the right-to-left page a slider's coloured part runs from the right edge to the thumb (as its scale does)."""
    for lang in ("en", "ar"):
        load(page, f"{app_url}?lang={lang}")
        slider = page.locator("#pg-max-new-tokens input[type=range]")
        slider.scroll_into_view_if_needed()
        box = slider.bounding_box()
        page.screenshot(path=str(ARTIFACTS / f"a11y-slider-{lang}.png"), clip={"x": box["x"] - 40, "y": box["y"] - 50, "width": box["width"] + 80,
                                              "height": box["height"] + 70})
        shot = slider.screenshot()
        from io import BytesIO

        from PIL import Image

        image = Image.open(BytesIO(shot)).convert("RGB")
        w, h = image.size
        row: list[Any] = [image.getpixel((x, h // 2)) for x in range(w)]
        blue = [x for x, (r, g, b) in enumerate(row) if b > 180 and r < 120]  # the fill (blue-500/600)
        assert blue, f"no fill found in the {lang} slider (artifacts/a11y-slider-{lang}.png)"
        # The default (64 of 512 tokens) fills about an eighth: at the left in English, at the right in Arabic.
        if lang == "ar":
            assert min(blue) > w / 2 and max(blue) > w * 0.9, (min(blue), max(blue), w)
        else:
            assert max(blue) < w / 2 and min(blue) < w * 0.1, (min(blue), max(blue), w)
