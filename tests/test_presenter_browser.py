"""The presenter's view and "Final text only" in a real page in headless Chromium (`playground.app.presenter`).

The app runs without preloading a model (the layout needs none); the final-text check uploads a real trace of tiny
models to the replay tab. Widths are layout facts of the page, not timings.

`python tests/test_presenter_browser.py` prints the widths quoted in the README (the output box at 1280×720 in the
ordinary view and in the presenter's view).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from appserver import ARTIFACTS, NO_PRELOAD_OFFLINE, app_url_fixture, browser_fixture, needs_chromium

pytestmark = [pytest.mark.server, pytest.mark.browser, needs_chromium]

app_url = app_url_fixture("presenter-test-server.log", NO_PRELOAD_OFFLINE)
browser = browser_fixture()

PROMPT = "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three, four,"

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


def shown_box(page: Any, selector: str) -> dict[str, float]:
    """`box` of an element the test expects on the page."""
    found = box(page, selector)
    assert found is not None, selector
    return found


def output_width(browser: Any, url: str, width: int = 1280, height: int = 720) -> tuple[float, float]:
    """The output box's width in the ordinary view and after the presenter's switch is clicked."""
    page = open_page(browser, url, width, height)
    try:
        before = shown_box(page, "#pg-output .pg-tokens")["width"]
        page.click("#pg-presenter input")
        page.wait_for_function("() => document.documentElement.classList.contains('pg-presenter')")
        return before, shown_box(page, "#pg-output .pg-tokens")["width"]
    finally:
        page.close()


def test_the_presenters_view_gives_the_stream_the_width_on_a_projector(browser: Any, app_url: str) -> None:
    page = open_page(browser, app_url, 1280, 720)
    try:
        ordinary = shown_box(page, "#pg-output .pg-tokens")
        assert box(page, "#pg-settings-col") is not None
        page.click("#pg-presenter input")
        page.wait_for_function("() => document.documentElement.classList.contains('pg-presenter')")
        presenter = shown_box(page, "#pg-output .pg-tokens")
        # The settings' column gone, the stream shares the width with the legend beside it and the microscope only.
        legend, micro = shown_box(page, "#pg-legend-box"), shown_box(page, "#pg-micro-box")
        assert presenter["width"] >= 1.2 * ordinary["width"] and presenter["width"] >= 1280 - 380 - legend["width"] - 120
        assert micro["width"] <= 380 and presenter["y"] == pytest.approx(legend["y"], abs=80), (presenter, legend)
        assert presenter["y"] < 720 < ordinary["y"], "the stream starts on the screen, not below it"
        assert box(page, "#pg-settings-col") is None, "the settings fold away"
        assert "view=presenter" in page.url, "the address opens the same view"
        # Folded, not gone: the Settings button brings them back, and Generate stays in reach.
        page.click("#pg-settings-toggle")
        assert box(page, "#pg-settings-col") is not None and box(page, "#pg-generate") is not None
        page.click("#pg-presenter input")  # back to the ordinary view
        page.wait_for_function("() => !document.documentElement.classList.contains('pg-presenter')")
        assert shown_box(page, "#pg-output .pg-tokens")["width"] == pytest.approx(ordinary["width"], abs=2)
        assert "view=presenter" not in page.url
    finally:
        page.close()


@pytest.mark.parametrize("lang", ["en", "ar"])
def test_a_link_opens_the_presenters_view(browser: Any, app_url: str, lang: str) -> None:
    page = open_page(browser, f"{app_url}?view=presenter&lang={lang}", 1280, 720)
    try:
        page.wait_for_function("() => document.querySelector('#pg-presenter input')?.checked")
        assert box(page, "#pg-settings-col") is None
        # the stream's width with the legend's column beside it (626 px at 1280; the ordinary view's is 328)
        assert shown_box(page, "#pg-output .pg-tokens")["width"] >= 600
        # Large type on the projector: the stream's font is larger than the ordinary view's 15 px.
        size = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('#pg-output .pg-tokens')).fontSize)")
        assert size >= 20
    finally:
        page.close()


@pytest.mark.parametrize("query", ["", "?view=presenter"])
def test_on_a_phone_the_output_and_the_microscope_stack_at_full_width(browser: Any, app_url: str, query: str) -> None:
    page = open_page(browser, app_url + query, 390, 844)
    try:
        output, micro = shown_box(page, "#pg-output"), shown_box(page, "#pg-micro-box")
        assert micro["y"] >= output["bottom"] - 1, "one above the other"
        for part in (output, micro):
            assert part["width"] >= 0.8 * 390, (output, micro)
    finally:
        page.close()


# Every element of these parts that holds text of its own, with its font size (px), for the projector's minimum.
FONT_SIZES = """(selector) => Array.from(document.querySelectorAll(selector)).flatMap(root =>
  [root, ...root.querySelectorAll('*')]).filter(e => e.offsetParent && Array.from(e.childNodes).some(
  n => n.nodeType === 3 && n.textContent.trim())).map(e => [e.className || e.tagName,
  parseFloat(getComputedStyle(e).fontSize)])"""
PROJECTOR_PX = 17
STATUS_KIND = "() => document.querySelector('#pg-status-box [data-testid=pg-status]').dataset.kind"
STEPS_SHOWN = "() => new Set(Array.from(document.querySelectorAll('#pg-output .tok')).map(e => e.dataset.step)).size"


def wait_paused(page: Any, steps: int) -> None:
    """Until the live run stands paused after `steps` steps (or has ended)."""
    page.wait_for_function(f"(n) => ({STEPS_SHOWN})() >= n && ['idle', 'done'].includes(({STATUS_KIND})())",
                           arg=steps, timeout=120_000)


def fold_facts(page: Any) -> dict[str, Any]:
    return page.evaluate("""() => { const out = {};
      for (const [name, s] of Object.entries({line: '#pg-run-line-box .pg-run-line', narration: '#pg-narration-box',
          output: '#pg-output', legend: '#pg-legend-box', panel: '#pg-micro-box .pg-micro',
          rule: '#pg-micro-box .pg-micro-rule', generate: '#pg-generate'})) {
        const e = document.querySelector(s); if (!e || !e.offsetParent) { out[name] = null; continue; }
        const b = e.getBoundingClientRect();
        out[name] = {x: b.x, y: b.y, right: b.right, bottom: b.bottom, height: b.height, text: e.innerText,
                     lineHeight: parseFloat(getComputedStyle(e).lineHeight)}; }
      out.scrollY = window.scrollY; return out; }""")


@pytest.mark.parametrize("lang", ["en", "ar"])
def test_a_run_stepped_by_the_keys_fits_a_projector(browser: Any, app_url: str, lang: str,
                                                     tiny_models: dict[str, str]) -> None:
    """At 1280×720 in the presenter's view, a run stepped with N and a clicker's Page Down: the settings line, the
    step in words, the legend beside the output and the microscope's rule with its numbers all above the fold, in
    17 px type or larger; the step just made marked; then the replay steps with the same keys, from step 1."""
    from playground.app.links import query_for
    from playground.methods import METHODS

    # 12 new tokens: 8 steps on the tiny target (6 refusing, 1 keeping 4), each stepped by a key to the end.
    query = query_for(None, PROMPT, tiny_models["target"], None, "prompt_lookup", {"prompt_lookup_num_tokens": 10},
                      12, False, 1.0, 1.0, 0, 0, "auto", "float32")
    page = open_page(browser, f"{app_url}{query}&lang={lang}&view=presenter", 1280, 720)
    try:
        page.wait_for_function("p => document.querySelector('#pg-prompt textarea').value === p", arg=PROMPT)
        page.click("#pg-pace input[value=step]")
        page.wait_for_selector("#pg-step-on", state="visible")
        page.click("#pg-generate")
        wait_paused(page, 1)
        page.keyboard.press("n")
        wait_paused(page, 2)
        page.keyboard.press("PageDown")  # a clicker
        wait_paused(page, 3)
        assert page.evaluate(STATUS_KIND) == "idle", page.inner_text("#pg-status-box")
        # The step just made is marked as the current one.
        last = page.evaluate("""() => { const steps = document.querySelectorAll('#pg-output .pg-step');
          const e = steps[steps.length - 1]; return [e.dataset.step, getComputedStyle(e).outlineStyle]; }""")
        assert last == ["2", "solid"], last
        judged = page.locator("#pg-output .tok[data-pos]").last
        judged.click()
        page.wait_for_selector("#pg-micro-box [data-testid=pg-micro][data-step]")
        page.evaluate("() => window.scrollTo(0, 0)")
        facts = fold_facts(page)
        page.screenshot(path=str(ARTIFACTS / f"presenter-fold-{lang}.png"))
        for name in ("line", "narration", "output", "legend", "rule"):
            assert facts[name] is not None and facts[name]["bottom"] <= 720, (name, facts[name])
        method = METHODS["prompt_lookup"].localized(lang).title
        assert method in facts["line"]["text"] and "float32" in facts["line"]["text"], facts["line"]
        assert facts["line"]["height"] < 1.6 * facts["line"]["lineHeight"], "one line"
        assert facts["line"]["bottom"] <= facts["output"]["y"] <= facts["narration"]["y"], facts
        assert facts["narration"]["text"].strip(), "the step in words"
        assert any(c.isdigit() for c in facts["rule"]["text"]), facts["rule"]  # the rule's numbers
        # The legend beside the output (not under it), on the same screen.
        output, legend = facts["output"], facts["legend"]
        assert legend["y"] < output["bottom"] and (legend["x"] >= output["right"] or legend["right"] <= output["x"])
        sizes = page.evaluate(FONT_SIZES, "#pg-micro-box, #pg-legend-box, #pg-output .pg-tokens, #pg-run-line-box, "
                                          "#pg-narration-box")
        small = [(name, size) for name, size in sizes if size < PROJECTOR_PX]
        assert sizes and not small, small
        # The run goes on to its end by the keys; then the replay (the last run) steps with them too, from step 1.
        for _ in range(40):
            if page.evaluate(STATUS_KIND) == "done":
                break
            steps = page.evaluate(STEPS_SHOWN)
            page.keyboard.press("n")
            wait_paused(page, steps + 1)
        assert page.evaluate(STATUS_KIND) == "done"
        page.click("#pg-tab-replay-button")
        page.wait_for_selector("#pg-replay-output .tok")
        slider = "#pg-replay-slider input[type=number]"
        last_step = int(page.input_value(slider))
        assert last_step > 2
        page.locator("#pg-replay-output").scroll_into_view_if_needed()
        page.evaluate("() => document.activeElement && document.activeElement.blur()")  # no control has the keys
        for want, key in ((1, "n"), (2, "PageDown")):
            page.keyboard.press(key)
            page.wait_for_function("([s, n]) => document.querySelector(s).value === String(n)", arg=[slider, want],
                                   timeout=20_000)
        page.wait_for_selector("#pg-replay-output .pg-current[data-step='1']")
    finally:
        page.close()


def test_on_a_phone_generate_is_on_the_first_screen(browser: Any, app_url: str) -> None:
    page = open_page(browser, app_url, 390, 844)
    try:
        generate, settings = shown_box(page, "#pg-generate"), shown_box(page, "#pg-settings-col")
        assert generate["bottom"] <= 844, generate
        assert settings["y"] > generate["y"], "the settings come after the prompt and Generate"
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
        page.wait_for_function("() => document.querySelector('#pg-replay-output')?.classList.contains('pg-final-only')")
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
    main()
