"""docs/native-{ru,ar}-first.png and docs/native-{ru,ar}-run.png: the first view and a finished run of the page in
Russian and in Arabic, for a reader who checks the words (issue #38's reading of the catalogue).

Starts the real app (it preloads the bundled Gemma 3 270M), opens `?lang=ru` and `?lang=ar`, screenshots the first
view, then runs the page's first method, prompt lookup, on a prompt that repeats itself (drafts are copied, so the output shows accepted,
rejected and bonus tokens and the narration its counted phrases) and screenshots the finished run. Run: `python
tests/measure/native_screenshots.py` (a minute or two on a CPU; the bundled model is converted first on a fresh machine).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from appserver import ARTIFACTS, headless_chromium, running_app  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = {
    "ru": "Понедельник, вторник, среда, четверг, пятница, суббота, воскресенье. Понедельник, вторник, среда,",
    "ar": "الاثنين، الثلاثاء، الأربعاء، الخميس، الجمعة، السبت، الأحد. الاثنين، الثلاثاء، الأربعاء،",
}


def main() -> int:
    ARTIFACTS.mkdir(exist_ok=True)
    with running_app(ARTIFACTS / "native-screenshots-server.log") as url, headless_chromium() as browser:
        for lang, prompt in PROMPTS.items():
            page = browser.new_context(viewport={"width": 1440, "height": 1100}, locale=lang).new_page()
            page.set_default_timeout(60_000)
            page.goto(f"{url}?lang={lang}")
            page.wait_for_function("() => (document.querySelector('#pg-prompt textarea') || {}).value")
            page.wait_for_timeout(1500)
            page.screenshot(path=str(ROOT / "docs" / f"native-{lang}-first.png"))
            page.fill("#pg-prompt textarea", prompt)
            box = page.locator("#pg-max-new-tokens input[type=number]")
            box.fill("24")
            box.press("Enter")
            box.blur()
            page.click("#pg-generate")
            page.wait_for_selector("#pg-status-box [data-kind=done], #pg-status-box [data-kind=error]",
                                   timeout=900_000)
            page.wait_for_timeout(1500)
            page.screenshot(path=str(ROOT / "docs" / f"native-{lang}-run.png"), full_page=True)
            print(lang, page.inner_text("#pg-status-box"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
