"""docs/microscope.png: the step microscope's panel on a sampling run of the bundled Gemma 3 270M (early exit, so the
panel has the drafter's q and, at the refused token, the residual the correction was drawn from).

Starts the real app (it preloads the bundled model), sets the run by the page's shareable-link query, generates,
clicks the first refused token and screenshots the output with the panel beside it. Run: `python
tests/measure/microscope_screenshot.py` (a minute or two on a CPU; the bundled model is converted first on a fresh machine).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from appserver import ARTIFACTS, headless_chromium, running_app  # noqa: E402

from playground.app.links import query_for  # noqa: E402
from playground.models import DEFAULT_TARGET  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Write one sentence about why the sky is blue."
SETTINGS: dict[str, Any] = dict(method="early_exit", params={"assistant_early_exit": 10, "num_assistant_tokens": 4}, max_new_tokens=40,
                sample=True, temperature=0.8, seed=1)


def main() -> int:
    ARTIFACTS.mkdir(exist_ok=True)
    query = query_for(None, PROMPT, DEFAULT_TARGET, None, SETTINGS["method"], SETTINGS["params"],
                      SETTINGS["max_new_tokens"], SETTINGS["sample"], SETTINGS["temperature"], 1.0, 0, SETTINGS["seed"],
                      "auto", "float32")
    with running_app(ARTIFACTS / "microscope-screenshot-server.log") as url, headless_chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(60_000)
        page.goto(url + query)
        page.wait_for_function("(p) => (document.querySelector('#pg-prompt textarea') || {}).value === p", arg=PROMPT)
        page.click("#pg-generate")
        page.wait_for_selector("#pg-status-box [data-kind=done], #pg-status-box [data-kind=error]", timeout=900_000)
        refused = page.locator("#pg-output .tok[data-status=rejected]")
        if not refused.count():
            print("no refused token in this run: change the seed", file=sys.stderr)
            return 1
        refused.first.click()
        page.wait_for_selector("#pg-micro-box [data-testid=pg-micro][data-refused=true]")
        page.wait_for_timeout(300)
        page.locator("#pg-micro-box").locator("xpath=..").screenshot(path=str(ROOT / "docs" / "microscope.png"))
    print(ROOT / "docs" / "microscope.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
