"""docs/presenter-en.png, docs/presenter-ru.png, docs/presenter-ar.png: the presenter's view at 1280×720 during a
run of the bundled Gemma 3 270M stepped through by keyboard.

Starts the real app (it preloads the bundled model); per language opens `?view=presenter&lang=…` (the page's default
example and method), chooses the "Step by step" pace, clicks Generate and presses N at each pause. After four presses,
with the run paused, it clicks a refused (else kept) draft for the microscope, scrolls to the page's top, prints where
the settings line, the output, the step in words, the legend and the microscope's rule end (px; the screen is 720
high) and the smallest type among them, and takes the screenshot; then it presses N on to the run's end (so the
keyboard path of "Next step" is exercised end to end: it fails if a press does not step the run on). Run: `python
tests/measure/presenter_screenshots.py` (a few minutes on a CPU).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from appserver import ARTIFACTS, headless_chromium, running_app  # noqa: E402

from playground.pace import STEP  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOKENS = 40
SHOT_AFTER = 4  # presses of N before the screenshot
RUN_TIMEOUT_S = 900
STATUS = "#pg-status-box [data-testid=pg-status]"
# Where the parts a class reads end (px from the top; the screen is 720 high), and the smallest type among them.
FOLD = """() => { const out = {};
  for (const [name, s] of Object.entries({line: '#pg-run-line-box .pg-run-line', narration: '#pg-narration-box p',
      legend: '#pg-legend-box', rule: '#pg-micro-box .pg-micro-rule', output: '#pg-output'})) {
    const e = document.querySelector(s); out[name] = e ? Math.round(e.getBoundingClientRect().bottom) : null; }
  const texts = Array.from(document.querySelectorAll('#pg-micro-box *, #pg-legend-box *, #pg-output .tok, '
    + '#pg-run-line-box *, #pg-narration-box *')).filter(e => e.offsetParent && Array.from(e.childNodes)
    .some(n => n.nodeType === 3 && n.textContent.trim()));
  out.smallest_px = Math.min(...texts.map(e => parseFloat(getComputedStyle(e).fontSize))); return out; }"""


def step_through(page, until: int | None = None) -> int:
    """Press N at each pause until the run is done (or it stands paused after `until` presses); the presses."""
    presses = 0
    began = time.monotonic()
    while time.monotonic() - began < RUN_TIMEOUT_S:
        kind = page.get_attribute(STATUS, "data-kind")
        if kind in ("done", "error") or (presses == until and kind == "idle"):
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
            # The screenshot while the run stands paused mid-way (what a class sees), the microscope open on a refusal.
            presses = step_through(page, until=SHOT_AFTER)
            for status in ("rejected", "accepted", "correction"):
                token = page.locator(f"#pg-output .tok[data-status={status}]")
                if token.count():
                    token.first.click()
                    break
            page.wait_for_timeout(600)
            page.evaluate("() => { document.activeElement.blur(); window.scrollTo(0, 0); }")  # all of it from the top
            page.wait_for_timeout(300)
            print(lang, json.dumps(page.evaluate(FOLD)), flush=True)
            path = ROOT / "docs" / f"presenter-{lang}.png"
            page.screenshot(path=str(path))
            print(path)
            presses += step_through(page)  # and on to the end, by the key
            kind = page.get_attribute(STATUS, "data-kind")
            steps = page.evaluate("() => new Set(Array.from(document.querySelectorAll('#pg-output .tok'))"
                                  ".map(e => e.dataset.step)).size")
            print(f"{lang}: {kind}, {steps} steps, {presses} presses of N", flush=True)
            if kind != "done" or presses != steps - 1:
                print(page.inner_text(STATUS), file=sys.stderr)
                return 1
            page.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
