"""Start and stop the real `python app.py` on a free local port and a headless Chromium, for tests and scripts.

Every app started and every Chromium launched is recorded (`STARTED`, `LAUNCHED`): conftest.py checks that a test
that used one carries the `server` / `browser` marker (and `bundled` when the app preloads the bundled model).
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from playground.settings import _FALSE

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"  # server logs and screenshots (git-ignored)
# The documentation's pictures are refreshed on purpose only (README: "Tests"): a test run writes its screenshots
# to artifacts/, so running the suite never changes a tracked file.
REFRESH_DOCS_PICTURES = "PLAYGROUND_REFRESH_DOCS_PICTURES"


def picture_path(name: str) -> Path:
    """Where a screenshot meant for docs/ goes: docs/ when $PLAYGROUND_REFRESH_DOCS_PICTURES=1, else artifacts/."""
    refresh = (os.environ.get(REFRESH_DOCS_PICTURES) or "").strip().lower() not in ("", *_FALSE)
    folder = ROOT / "docs" if refresh else ARTIFACTS
    folder.mkdir(exist_ok=True)
    return folder / name
# httpx.get/post/stream build a client per call, and every client loads certifi's bundle into a new SSL context:
# ~25 ms of CPU each, three per hostile call (join, stream, the liveness check), minutes over test_hostile's sweep.
# Tests talk plain HTTP to 127.0.0.1 and pass this one context instead (`verify=LOCAL_TLS`): each call still has a
# client and a connection of its own, as before; only the unused certificate load is shared.
LOCAL_TLS = ssl.create_default_context()
START_TIMEOUT_S = 180  # importing torch + gradio on two busy cores
CHROMIUM = "/usr/bin/chromium"  # Debian's; Playwright's own download is out of reach here
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run"]
needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Debian's chromium at {CHROMIUM}")


@dataclass(frozen=True)
class StartedApp:
    log_path: Path
    preloads_bundled: bool  # PLAYGROUND_PRELOAD left on: the app loads the default target, the bundled Gemma


STARTED: list[StartedApp] = []  # every app started by this process, in order
LAUNCHED: list[str] = []  # every headless Chromium launched by this process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_app(port: int, log_path: Path, extra_env: dict[str, str] | None = None,
              base_env: dict[str, str] | None = None, root: Path = ROOT) -> subprocess.Popen:
    """Launch `root`'s app.py (this checkout's unless told; environment: `base_env`, default ours, plus `extra_env`)
    and wait until it answers."""
    env = {**(os.environ if base_env is None else base_env), "GRADIO_SERVER_PORT": str(port),
           "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1",
           **(extra_env or {})}
    STARTED.append(StartedApp(log_path, (env.get("PLAYGROUND_PRELOAD") or "").strip().lower() not in _FALSE))
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=root, env=env, stdout=log_path.open("w"),
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"app.py exited with {proc.returncode}; see {log_path}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return proc
        except OSError:
            time.sleep(0.1)  # fine enough for tests/measure/startup.py's "page answers" figure
    stop_app(proc)
    raise RuntimeError(f"app.py did not answer on {url} within {START_TIMEOUT_S} s; see {log_path}")


def raw_request(url: str, request: bytes, pause_after: int | None = None) -> tuple[int, str]:
    """(status, body) of one raw HTTP/1.1 request sent as bytes on a socket of its own, read until the server closes
    it (send `Connection: close`): what httpx will not send, such as an address over 64 KB or a length it lacks.
    `pause_after`: send that many bytes, wait a moment, then the rest (the server reads the request in two parts)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        if pause_after is not None:
            sock.sendall(request[:pause_after])
            time.sleep(0.3)
            request = request[pause_after:]
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode(errors="replace")


def stop_app(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def running_app(log_path: Path, extra_env: dict[str, str] | None = None) -> Iterator[str]:
    """The URL of a real app started for the block (see `start_app`), stopped after it."""
    port = free_port()
    proc = start_app(port, log_path, extra_env)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        stop_app(proc)


@contextmanager
def headless_chromium() -> Iterator[Any]:
    """A Playwright browser on Debian's Chromium; the test is skipped where playwright or Chromium is missing."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"needs Debian's chromium at {CHROMIUM}")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        LAUNCHED.append(CHROMIUM)
        try:
            yield browser
        finally:
            browser.close()


class SharedApps:
    """The real apps a test session shares: one per configuration (its extra environment), started when a module first
    asks for it and stopped when the session ends (conftest.py's `shared_apps`). A page is a visitor's own (Gradio
    keeps each session's state apart), so modules that only open pages on an app of the same configuration need not
    pay for its start each (a preloading app also loads and warms up the bundled Gemma): they share it. An app that
    died is started again; its log is artifacts/`log_name` of the module that started it."""

    def __init__(self) -> None:
        self._apps: dict[tuple[tuple[str, str], ...], tuple[subprocess.Popen, str]] = {}

    def url(self, log_name: str, extra_env: dict[str, str] | None = None) -> str:
        key = tuple(sorted((extra_env or {}).items()))
        running = self._apps.get(key)
        if running is None or running[0].poll() is not None:
            ARTIFACTS.mkdir(exist_ok=True)
            port = free_port()
            running = (start_app(port, ARTIFACTS / log_name, extra_env), f"http://127.0.0.1:{port}/")
            self._apps[key] = running
        return running[1]

    def close(self) -> None:
        for proc, _url in self._apps.values():
            stop_app(proc)
        self._apps.clear()


# The configuration of the browser files whose app needs no model at its start (their runs, if any, load tiny or
# bundled models by link): no start-up load, the Hub off (what these machines and CI have anyway; the same presets on
# a laptop). One configuration for all of them, so a worker starts one such app, not one per file's variant.
NO_PRELOAD_OFFLINE = {"PLAYGROUND_PRELOAD": "0", "HF_HUB_OFFLINE": "1"}


def app_url_fixture(log_name: str, extra_env: dict[str, str] | None = None) -> Callable[..., Iterator[str]]:
    """A module-scoped `app_url` fixture: the session's real app of this configuration (`SharedApps`), started by the
    first module that asks for it, its log in artifacts/`log_name` of that module."""

    @pytest.fixture(scope="module")
    def app_url(shared_apps: SharedApps) -> Iterator[str]:
        yield shared_apps.url(log_name, extra_env)

    return app_url


def browser_fixture(name: str = "browser") -> Callable[..., Iterator[Any]]:
    """A module-scoped fixture (named `name`) holding the session's headless Chromium (conftest.py's
    `shared_chromium`: launched once; each test opens contexts and pages of its own in it)."""

    @pytest.fixture(scope="module", name=name)
    def browser(shared_chromium: Any) -> Iterator[Any]:
        yield shared_chromium

    return browser


# Resolves once the page has been still for 150 ms: no change to its elements, attributes or text, and no CSS
# transition running (Gradio eases a tab's and a label's colours in; `access.HEAD` inks the code's colours again in
# the next frame after a change). Checked again until it holds.
STILL_PAGE = """() => new Promise(resolve => {
  let timer = null;
  const observer = new MutationObserver(() => { clearTimeout(timer); timer = setTimeout(done, 150); });
  function done() {
    observer.disconnect();
    resolve(document.getAnimations().every(a => !(a instanceof CSSTransition) || a.playState !== 'running'));
  }
  observer.observe(document.body, {subtree: true, childList: true, attributes: true, characterData: true});
  timer = setTimeout(done, 150);
})"""


def still(page: Any) -> None:
    """Wait until `page` is still (`STILL_PAGE`): what a screenshot, a read or an axe check needs after the page's
    handler calls have ended (`HandlerCalls.settle`)."""
    page.wait_for_function(STILL_PAGE, timeout=60_000)


def run_coroutine_apart(coroutine: Any) -> Any:
    """`asyncio.run(coroutine)` in a thread of its own: the session's Chromium (Playwright's sync API) keeps an event
    loop in the main thread, where asyncio.run refuses to start."""
    import asyncio
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


class HandlerCalls:
    """The page's calls to the app's unqueued handlers (Gradio's `run/predict`: the page's private events), counted
    as they are sent and as they end. A check that nothing happened waits for them to end (`settle`): the answer it
    would have changed things with has then arrived, however slow the machine."""

    sent: list[Any]  # each call's fn_index, as sent
    ended: list[Any]  # as ended

    def __init__(self, page: Any) -> None:
        self.page, self.sent, self.ended = page, [], []
        page.on("request", lambda r: self._seen(r, self.sent))
        page.on("requestfinished", lambda r: self._seen(r, self.ended))
        page.on("requestfailed", lambda r: self._seen(r, self.ended))

    @staticmethod
    def _seen(request: Any, into: list) -> None:
        if request.method == "POST" and "/run/predict" in request.url:
            into.append((request.post_data_json or {}).get("fn_index"))

    def fn_index(self, elem_id: str, event: str) -> int:
        """The event `event` of the component with `elem_id`, as the page's config numbers it."""
        return self.page.evaluate("""([elem, event]) => {
          const config = window.gradio_config, id = config.components.find(c => c.props.elem_id === elem).id;
          return config.dependencies.find(d => d.targets.some(([t, e]) => t === id && e === event)).id;
        }""", [elem_id, event])

    def fn_named(self, api_name: str) -> int:
        """The event whose handler Gradio names `api_name` (a timer's tick has no elem_id to find it by)."""
        return self.page.evaluate("name => window.gradio_config.dependencies.find(d => d.api_name === name).id",
                                  api_name)

    def page_time(self, seconds: float) -> None:
        """Let `seconds` pass on the page's own clock, then `settle`: a `gr.Timer` ticks by `setInterval` on the same
        task queue, so every tick due in that time has been sent before it ends (a slow machine delays both alike),
        and `settle` waits for their answers."""
        self.page.evaluate("ms => new Promise(done => setTimeout(done, ms))", round(seconds * 1000))
        self.settle()

    def settle(self, timeout_s: float = 60.0) -> None:
        """Wait until every call sent has ended and none follows it within two frames (Gradio sends a deferred
        call, "always_last", as the one before it ends; the page has drawn the answers by then)."""
        deadline, last = time.monotonic() + timeout_s, None
        while time.monotonic() < deadline:
            self.page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            state = (len(self.sent), len(self.ended))
            if state[0] == state[1] and state == last:
                return
            last = state
        raise AssertionError(f"handler calls still on their way after {timeout_s} s: {self.sent} sent, {self.ended} ended")
