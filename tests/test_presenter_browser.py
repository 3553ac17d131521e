"""The presenter's view and "Final text only" in a real page in headless Chromium (`playground.app.presenter`).

The app runs without preloading a model (the layout needs none); the final-text check uploads a real trace of tiny
models to the replay tab. Widths are layout facts of the page, not timings.

`python tests/test_presenter_browser.py` prints the widths quoted in the README (the output box at 1280×720 in the
ordinary view and in the presenter's view).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from appserver import app_url_fixture, browser_fixture, needs_chromium

pytestmark = [pytest.mark.server, pytest.mark.browser, needs_chromium]

app_url = app_url_fixture("presenter-test-server.log", {"PLAYGROUND_PRELOAD": "0"})
browser = browser_fixture()

BOX = """(selector) => { const e = document.querySelector(selector); if (!e || !e.offsetParent) return null;
  const b = e.getBoundingClientRect(); return {x: b.x, y: b.y, width: b.width, height: b.height, bottom: b.bottom}; }"""
READY = "() => (document.querySelector('#pg-prompt textarea') || {}).value"


def open_page(browser: Any, url: str, width: int, height: int) -> Any:
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(60_000)
    page.goto(url)
    page.wait_for_function(READY, timeout=120_000)
    return page


def box(page: Any, selector: str) -> dict[str, float] | None:
    return page.evaluate(BOX, selector)


def output_width(browser: Any, url: str, width: int = 1280, height: int = 720) -> tuple[float, float]:
    """The output box's width in the ordinary view and after the presenter's switch is clicked."""
    page = open_page(browser, url, width, height)
    try:
        before = box(page, "#pg-output .pg-tokens")["width"]
        page.click("#pg-presenter input")
        page.wait_for_function("() => document.documentElement.classList.contains('pg-presenter')")
        return before, box(page, "#pg-output .pg-tokens")["width"]
    finally:
        page.close()


def test_the_presenters_view_gives_the_stream_twice_its_width_on_a_projector(browser: Any, app_url: str) -> None:
    page = open_page(browser, app_url, 1280, 720)
    try:
        ordinary = box(page, "#pg-output .pg-tokens")
        assert box(page, "#pg-settings-col") is not None
        page.click("#pg-presenter input")
        page.wait_for_function("() => document.documentElement.classList.contains('pg-presenter')")
        presenter = box(page, "#pg-output .pg-tokens")
        assert presenter["width"] >= 2 * ordinary["width"], (ordinary, presenter)
        assert presenter["y"] < 720 < ordinary["y"], "the stream starts on the screen, not below it"
        assert box(page, "#pg-settings-col") is None, "the settings fold away"
        assert "view=presenter" in page.url, "the address opens the same view"
        # Folded, not gone: the Settings button brings them back, and Generate stays in reach.
        page.click("#pg-settings-toggle")
        assert box(page, "#pg-settings-col") is not None and box(page, "#pg-generate") is not None
        page.click("#pg-presenter input")  # back to the ordinary view
        page.wait_for_function("() => !document.documentElement.classList.contains('pg-presenter')")
        assert box(page, "#pg-output .pg-tokens")["width"] == pytest.approx(ordinary["width"], abs=2)
        assert "view=presenter" not in page.url
    finally:
        page.close()


@pytest.mark.parametrize("lang", ["en", "ar"])
def test_a_link_opens_the_presenters_view(browser: Any, app_url: str, lang: str) -> None:
    page = open_page(browser, f"{app_url}?view=presenter&lang={lang}", 1280, 720)
    try:
        page.wait_for_function("() => document.querySelector('#pg-presenter input').checked")
        assert box(page, "#pg-settings-col") is None
        assert box(page, "#pg-output .pg-tokens")["width"] >= 700
        # Large type on the projector: the stream's font is larger than the ordinary view's 15 px.
        size = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('#pg-output .pg-tokens')).fontSize)")
        assert size >= 20
    finally:
        page.close()


@pytest.mark.parametrize("query", ["", "?view=presenter"])
def test_on_a_phone_the_output_and_the_microscope_stack_at_full_width(browser: Any, app_url: str, query: str) -> None:
    page = open_page(browser, app_url + query, 390, 844)
    try:
        output, micro = box(page, "#pg-output"), box(page, "#pg-micro-box")
        assert micro["y"] >= output["bottom"] - 1, "one above the other"
        for part in (output, micro):
            assert part["width"] >= 0.8 * 390, (output, micro)
    finally:
        page.close()


def test_final_text_only_in_the_replay_reads_as_the_output(browser: Any, app_url: str, tmp_path: Path,
                                                            store: Any, tiny_models: dict[str, str]) -> None:
    from test_final_only import PROMPT

    from playground.engine import LiveRun, RunRequest, prepare

    request = RunRequest(prompt=PROMPT, target=tiny_models["target"], assistant=tiny_models["noisy"],
                         method="speculative", dtype="float32", max_new_tokens=23,
                         params={"num_assistant_tokens": 4})
    trace = LiveRun(prepare(request, store)).run()
    path = tmp_path / "trace.json"
    path.write_text(trace.to_json())
    page = open_page(browser, app_url, 1280, 900)
    try:
        page.get_by_role("tab", name="Step through a run").click()
        page.set_input_files("#pg-tab-replay input[type=file]", str(path))
        page.wait_for_selector("#pg-replay-output .tok[data-status=rejected]")
        shown = "() => document.querySelector('#pg-replay-output .pg-tokens').innerText"
        everything = page.evaluate(shown)
        assert everything != trace.output_text
        page.click("#pg-replay-final-only input")
        page.wait_for_function("() => document.querySelector('#pg-replay-output').classList.contains('pg-final-only')")
        assert page.evaluate(shown) == trace.output_text
        page.click("#pg-replay-final-only input")
        assert page.evaluate(shown) == everything
    finally:
        page.close()


def main() -> None:
    """Print the output box's width at 1280×720, ordinary and presenter's view (a fresh app, no model loaded)."""
    from appserver import ARTIFACTS, headless_chromium, running_app

    ARTIFACTS.mkdir(exist_ok=True)
    with running_app(ARTIFACTS / "presenter-widths.log", {"PLAYGROUND_PRELOAD": "0"}) as url, \
            headless_chromium() as chromium:
        for width, height in ((1280, 720), (1400, 900)):
            before, after = output_width(chromium, url, width, height)
            print(json.dumps({"viewport": f"{width}x{height}", "ordinary_px": round(before, 1),
                              "presenter_px": round(after, 1), "ratio": round(after / before, 2)}))


if __name__ == "__main__":
    sys.exit(main())
