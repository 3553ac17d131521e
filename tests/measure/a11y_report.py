"""axe-core's findings on every tab of the page, in English, Russian and Arabic, light and dark: every rule, impact and
node count (tests/test_a11y_browser.py fails on the serious and critical ones only; this prints the rest too).

    python tests/measure/a11y_report.py [--out artifacts/a11y.json]

Starts its own app (PLAYGROUND_PRELOAD=0) and a headless Chromium, as the tests do.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appserver import ARTIFACTS, headless_chromium, running_app  # noqa: E402

from playground.app.page import TABS  # noqa: E402

TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ARTIFACTS / "a11y.json")
    args = parser.parse_args()
    from axe_playwright_python.sync_playwright import Axe

    axe, found = Axe(), {}
    ARTIFACTS.mkdir(exist_ok=True)
    with running_app(ARTIFACTS / "a11y-report-server.log", {"PLAYGROUND_PRELOAD": "0"}) as url, \
            headless_chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.set_default_timeout(60_000)
        for lang in ("en", "ru", "ar"):
            for scheme in ("light", "dark"):
                page.emulate_media(color_scheme=scheme)
                page.goto(f"{url}?lang={lang}")
                page.wait_for_function("() => (document.querySelector('#pg-prompt textarea') || {}).value")
                page.wait_for_timeout(1000)
                for tab in TABS:
                    page.click(f"#pg-tab-{tab}-button")
                    page.wait_for_timeout(500)
                    result = axe.run(page, options={"resultTypes": ["violations"],
                                                    "runOnly": {"type": "tag", "values": TAGS}})
                    rules = [(v["id"], v["impact"], len(v["nodes"])) for v in result.response["violations"]]
                    found[f"{lang}/{scheme}/{tab}"] = rules
                    print(f"{lang} {scheme:5} {tab:8}", ", ".join(f"{r} ({i}) {n}" for r, i, n in rules) or "none",
                          flush=True)
    args.out.write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
