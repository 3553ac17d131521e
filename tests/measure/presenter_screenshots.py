"""docs/presenter-en.png, docs/presenter-ru.png, docs/presenter-ar.png: the presenter's view at 1280×720 after a run
of the bundled Gemma 3 270M, stepped through by keyboard.

Starts the real app (it preloads the bundled model); per language opens `?view=presenter&lang=…` (the page's default
example and method), chooses the "Step by step" pace, clicks Generate and presses N after every pause until the run is
done (so the keyboard path of "Next step" is exercised end to end: it fails if a press does not step the run on),
clicks a refused or kept draft for the microscope, and screenshots the screen. Run: `python
tests/measure/presenter_screenshots.py` (a few minutes on a CPU).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from appserver import ARTIFACTS, headless_chromium, running_app  # noqa: E402

from playground.pace import STEP  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOKENS = 40
RUN_TIMEOUT_S = 900
STATUS = "#pg-status-box [data-testid=pg-status]"


def step_through(page) -> int:  # type: ignore[no-untyped-def]
    """Press N at each pause until the run is done; the number of presses."""
    presses = 0
    began = time.monotonic()
    while time.monotonic() - began < RUN_TIMEOUT_S:
        kind = page.get_attribute(STATUS, "data-kind")
        if kind in ("done", "error"):
            return presses
        steps = page.evaluate("() => new Set(Array.from(document.querySelectorAll('#pg-output .tok'))"
                              ".map(e => e.dataset.step)).size")
        if kind == "idle" and steps:  # paused after a step (`presenter.paused_status`)
            page.keyboard.press("n")
            presses += 1
            page.wait_for_function(
                "(n) => new Set(Array.from(document.querySelectorAll('#pg-output .tok')).map(e => e.dataset.step)).size"
                " > n || ['done', 'error'].includes(document.querySelector('#pg-status-box [data-testid=pg-status]')"
                ".dataset.kind)", arg=steps, timeout=RUN_TIMEOUT_S * 1000)
        else:
            page.wait_for_timeout(100)
    raise TimeoutError("the run did not finish")


def main() -> int:
    ARTIFACTS.mkdir(exist_ok=True)
    with running_app(ARTIFACTS / "presenter-screenshots-server.log") as url, headless_chromium() as browser:
        for lang in ("en", "ru", "ar"):
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.set_default_timeout(120_000)
            page.goto(f"{url}?view=presenter&lang={lang}")
            page.wait_for_function("() => (document.querySelector('#pg-prompt textarea') || {}).value")
            page.wait_for_timeout(1500)  # the page's load events (language, link) have settled
            page.click("#pg-settings-toggle")  # the settings are folded away, a click from reach
            box = page.locator("#pg-max-new-tokens input[type=number]")
            box.fill(str(TOKENS))
            box.press("Enter")
            page.click("#pg-settings-toggle")
            page.click(f"#pg-pace input[value={STEP}]")
            page.wait_for_selector("#pg-step-on", state="visible")
            page.click("#pg-generate")
            page.wait_for_function("() => document.querySelector('#pg-status-box [data-testid=pg-status]')"
                                   ".dataset.kind === 'running'")
            presses = step_through(page)
            kind = page.get_attribute(STATUS, "data-kind")
            steps = page.evaluate("() => new Set(Array.from(document.querySelectorAll('#pg-output .tok'))"
                                  ".map(e => e.dataset.step)).size")
            print(f"{lang}: {kind}, {steps} steps, {presses} presses of N", flush=True)
            if kind != "done" or presses != steps - 1:
                print(page.inner_text(STATUS), file=sys.stderr)
                return 1
            for status in ("rejected", "accepted", "correction"):
                token = page.locator(f"#pg-output .tok[data-status={status}]")
                if token.count():
                    token.first.click()
                    break
            page.wait_for_timeout(600)
            page.locator("#pg-pace-row").scroll_into_view_if_needed()
            page.evaluate("() => window.scrollTo(0, document.querySelector('#pg-prompt').getBoundingClientRect().top"
                          " + window.scrollY - 8)")
            page.wait_for_timeout(300)
            path = ROOT / "docs" / f"presenter-{lang}.png"
            page.screenshot(path=str(path))
            print(path)
            page.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
