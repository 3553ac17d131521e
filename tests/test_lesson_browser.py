"""The lesson played in a real page (#47): each method of the guide opened by its offline stand-in's link in the
presenter's view, run at the step-by-step pace and stepped with a clicker's Page Down until the target refuses a
draft, and the refusal seen on the page (a struck-through token in the output). The stand-ins are the bundled
models and those built from the bundled Gemma at first use (`models.derived`), so the first run of each loads or
builds them: minutes on a busy two-core machine.
"""

from __future__ import annotations

from typing import Any

import pytest
from appserver import ARTIFACTS, NO_PRELOAD_OFFLINE, app_url_fixture, browser_fixture, needs_chromium
from test_presenter_browser import STATUS_KIND, STEPS_SHOWN, fold_facts, open_page, wait_paused

from playground.examples import BY_NAME

pytestmark = [pytest.mark.server, pytest.mark.browser, pytest.mark.bundled, pytest.mark.slow, needs_chromium]

app_url = app_url_fixture("lesson-test-server.log", NO_PRELOAD_OFFLINE)
browser = browser_fixture()

# Each method of the guide by its offline stand-in (prompt lookup on the code edit, where the target refuses the
# copied `total` where `subtotal` goes: on the guide's own prompt nothing repeats, so nothing is drafted).
LESSON = {
    "speculative-greedy-offline": None,
    "speculative-sampling-offline": None,
    "prompt-lookup-greedy-offline": BY_NAME["Edit code"].text,
    "early-exit-offline": None,
    "mtp-layers-offline": None,
    "mtp-drafter-offline": None,
    "universal-offline": None,
}
REFUSED = "() => document.querySelectorAll('#pg-output .tok[data-status=rejected]').length"
# The sampled rule is the tallest (its formula, the draw, the correction): it is also checked in Russian and Arabic.
RUNS = [(preset, "en") for preset in LESSON] + [("speculative-sampling-offline", "ru"),
                                                 ("speculative-sampling-offline", "ar")]
# Each piece of the open panel's formulas (the draw's, the correction's) on one line, inside the panel: (pieces, pieces
# that break or stick out).
FORMULA_PIECES = """() => { const panel = document.querySelector('#pg-micro-box .pg-micro')?.getBoundingClientRect();
  const pieces = Array.from(document.querySelectorAll(
    '#pg-micro-box :is(.pg-micro-piece, .pg-micro-corrected bdi[dir=ltr])'));
  return [pieces.length, pieces.filter(e => { const b = e.getBoundingClientRect();
    const tops = Array.from(e.getClientRects()).map(r => r.top);  // a piece's fragments (its numbers are isolates)
    return Math.max(...tops) - Math.min(...tops) > 4 || b.left < panel.left || b.right > panel.right; })
    .map(e => e.innerText)]; }"""


@pytest.mark.parametrize(("preset", "lang"), RUNS)
def test_the_lesson_steps_each_method_to_a_refusal_with_page_down(browser: Any, app_url: str, preset: str,
                                                                  lang: str) -> None:
    from playground.app.links import query_for
    from playground.presets import get_preset

    prompt = LESSON[preset]
    query = query_for(preset, prompt, None, None, "baseline", {}, None, False, 1.0, 1.0, 0, 0, "auto", "auto")
    page = open_page(browser, f"{app_url}{query}&lang={lang}&view=presenter", 1280, 720)
    try:
        # The link's example is applied (after the page's own defaults: a click before it would run those).
        page.wait_for_function("() => !!document.querySelector('#pg-preset input')?.value")
        if prompt:
            page.wait_for_function("p => document.querySelector('#pg-prompt textarea')?.value === p", arg=prompt)
        page.click("#pg-pace input[value=step]")
        page.wait_for_selector("#pg-step-on", state="visible")
        page.click("#pg-generate")
        wait_paused(page, 1)
        for _ in range(60):  # a clicker's Page Down, step by step, until the target refuses a draft
            # At every step what the class reads fits 1280×720: the settings line, the step in words, and the rule
            # of the step's last judged token opened from the keyboard (Enter), with its numbers.
            open_last_judged_token(page)
            above_the_fold(page, f"{preset} {lang}", ("line", "narration", "rule"))
            if page.evaluate(REFUSED) or page.evaluate(STATUS_KIND) == "done":
                break
            steps = page.evaluate(STEPS_SHOWN)
            page.evaluate("() => document.activeElement && document.activeElement.blur()")  # the page has the keys
            page.keyboard.press("PageDown")
            wait_paused(page, steps + 1)
        assert page.evaluate(REFUSED) >= 1, f"{preset}: no refusal on the page"
        # The refused draft stays visible (struck through) and the target's correction follows it.
        assert page.locator("#pg-output .tok[data-status=rejected]").first.inner_text() != ""
        assert page.locator("#pg-output .tok[data-status=correction]").count() >= 1, preset
        # The refused draft's microscope: its rule with its numbers whole above the fold too (the keyboard's Enter
        # on the correction opens it, as a presenter does).
        page.locator("#pg-output .tok[data-status=correction]").first.focus()
        page.keyboard.press("Enter")
        page.wait_for_selector("#pg-micro-box [data-testid=pg-micro][data-refused=true]")
        above_the_fold(page, f"{preset} {lang}", ("line", "narration", "rule"))
        page.screenshot(path=str(ARTIFACTS / f"lesson-{preset}-{lang}.png"))
        rule = page.inner_text("#pg-micro-box .pg-micro-rule")
        assert any(c.isdigit() for c in rule), rule
        if get_preset(preset).sample:  # a sampled refusal: the draw, the chance, the correction, each piece whole
            assert page.locator("#pg-micro-box .pg-micro-rule .pg-micro-draw").count() == 1
            assert page.locator("#pg-micro-box .pg-micro-rule .pg-micro-corrected").count() == 1
            pieces, broken = page.evaluate(FORMULA_PIECES)
            assert pieces >= 6 and not broken, broken  # 4 of the draw's formula, the correction's 2
            # The sentences folded below open from the keyboard, and the panel stays accessible (axe-core).
            page.focus("#pg-micro-box .pg-micro-words summary")
            page.keyboard.press("Enter")
            page.wait_for_selector("#pg-micro-box .pg-micro-words[open] li")
            assert not micro_box_serious(page)
    finally:
        page.close()


def open_last_judged_token(page: Any) -> None:
    """Enter on the newest step's last token the target judged or chose, and wait for its panel."""
    token = page.locator("#pg-output .tok[data-pos]").last
    step, pos = token.get_attribute("data-step"), token.get_attribute("data-pos")
    token.focus()
    page.keyboard.press("Enter")
    page.wait_for_selector(f'#pg-micro-box [data-testid=pg-micro][data-step="{step}"][data-pos="{pos}"]')


def micro_box_serious(page: Any) -> list[str]:
    """axe-core's serious and critical violations inside the microscope's box."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page, context="#pg-micro-box")
    return [f"{v['id']} ({[n['target'] for n in v['nodes'][:3]]})" for v in results.response["violations"]
            if v["impact"] in ("serious", "critical")]


def above_the_fold(page: Any, preset: str, names: tuple[str, ...]) -> None:
    """The named parts (the settings line, the step in words) shown, each ending above 720 px with the page scrolled
    to its top, as a projector shows it."""
    page.evaluate("() => window.scrollTo(0, 0)")
    facts = fold_facts(page)
    for name in names:
        assert facts[name] is not None and facts[name]["bottom"] <= 720, (preset, name, facts[name])
