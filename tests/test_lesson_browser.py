"""The lesson played in a real page (#47): each method of the guide opened by its offline stand-in's link in the
presenter's view, run at the step-by-step pace and stepped with a clicker's Page Down until the target refuses a
draft, and the refusal seen on the page (a struck-through token in the output). The stand-ins are the bundled
models and those built from the bundled Gemma at first use (`models.derived`), so the first run of each loads or
builds them: minutes on a busy two-core machine.
"""

from __future__ import annotations

from typing import Any

import pytest
from appserver import app_url_fixture, browser_fixture, needs_chromium
from test_presenter_browser import STATUS_KIND, STEPS_SHOWN, fold_facts, open_page, wait_paused

from playground.examples import BY_NAME

pytestmark = [pytest.mark.server, pytest.mark.browser, pytest.mark.bundled, pytest.mark.slow, needs_chromium]

app_url = app_url_fixture("lesson-test-server.log", {"PLAYGROUND_PRELOAD": "0"})
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


@pytest.mark.parametrize("preset", list(LESSON))
def test_the_lesson_steps_each_method_to_a_refusal_with_page_down(browser: Any, app_url: str, preset: str) -> None:
    from playground.app.links import query_for

    prompt = LESSON[preset]
    query = query_for(preset, prompt, None, None, "baseline", {}, None, False, 1.0, 1.0, 0, 0, "auto", "auto")
    page = open_page(browser, f"{app_url}{query}&view=presenter", 1280, 720)
    try:
        if prompt:
            page.wait_for_function("p => document.querySelector('#pg-prompt textarea').value === p", arg=prompt)
        page.click("#pg-pace input[value=step]")
        page.wait_for_selector("#pg-step-on", state="visible")
        page.click("#pg-generate")
        wait_paused(page, 1)
        for _ in range(60):  # a clicker's Page Down, step by step, until the target refuses a draft
            above_the_fold(page, preset, ("line", "narration"))  # at every step, what the class reads fits 1280×720
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
        # (The refused token's microscope rule is not checked here: under sampling it ends at 780 px, issue 47.)
    finally:
        page.close()


def above_the_fold(page: Any, preset: str, names: tuple[str, ...]) -> None:
    """The named parts (the settings line, the step in words) shown, each ending above 720 px with the page scrolled
    to its top, as a projector shows it."""
    page.evaluate("() => window.scrollTo(0, 0)")
    facts = fold_facts(page)
    for name in names:
        assert facts[name] is not None and facts[name]["bottom"] <= 720, (preset, name, facts[name])
