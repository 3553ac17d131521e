"""A public Space survives hostile visitors: every endpoint through the raw Gradio queue protocol.

One `python app.py` serves the module, configured like a public Space (public mode, one allowed model
directory, no preload, its own temp dir). Every event handler is reached the way a hand-written
client reaches it: by `fn_index` in a POST to the queue's join endpoint (or to `run/predict` for the
handlers the page calls outside the queue), with a session hash the client chooses. Hostile trace
files are also opened in a real Chromium, which must run none of their script.

Every hostile input goes through `Probe.send`, which counts it and records whether it was handled:
our own one-line message (or a harmless answer), never Gradio's generic "Error", a Python exception's
text or a dead server. When the module's server stops, `every_hostile_input_was_handled` reports the two
numbers and fails on one not handled (no test has to run last).
"""

from __future__ import annotations

import html
import json
import os
import re
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from appserver import ARTIFACTS, LOCAL_TLS, browser_fixture, free_port, start_app, stop_app
from playground.trace import Step, Trace, classify_step

httpx = pytest.importorskip("httpx")
pytestmark = pytest.mark.server  # one real app (no preload, tiny models) serves every test

WAIT_S = 120  # upper bound for anything we wait for; a hang fails instead of blocking the suite
PROMPT = "One, two, three, four, five. One, two,"
# What a Python exception's text or Gradio's own refusal looks like when it reaches a visitor.
LEAKS = re.compile(r"Traceback|Error: |Exception|object has no attribute|invalid literal|unhashable|"
                   r"not subscriptable|NoneType|errno|site-packages", re.I)


# --------------------------------------------------------------------------- the server and the protocol


@dataclass
class Outcome:
    """What a handler answered: success (Gradio's flag), its outputs, and the error text when it failed."""

    success: bool
    data: list[Any]
    error: str | None = None

    def text(self) -> str:
        """Every output as plain text (tags dropped), for looking for messages and leaks."""
        parts = [self.error or ""] + [json.dumps(d, default=str) if not isinstance(d, str) else d for d in self.data]
        return html.unescape(re.sub(r"<[^>]+>", " ", " ".join(parts)))

    def alert(self) -> str | None:
        """The text of our red status box, if one of the outputs is one."""
        for d in self.data:
            if isinstance(d, str) and 'data-kind="error"' in d:
                return html.unescape(re.sub(r"<[^>]+>", "", d)).strip()
        return None


@dataclass
class Server:
    url: str
    proc: Any
    log: Path
    tmp: Path  # the server's TMPDIR: its trace files live under tmp/assisted-playground-traces
    deps: dict[str, dict[str, Any]]  # handler name (unique in the config) -> its dependency
    state_ids: set[int] = field(default_factory=set)  # components whose value is the server's (gr.State)

    def handlers(self) -> list[dict[str, Any]]:
        """Every event handler the server runs (fn_index), as the page's config lists them."""
        return [d for d in self.deps.values() if d.get("backend_fn")]

    def call(self, name: str, data: list[Any], session: str | None = None, query: str = "") -> Outcome:
        """Call a handler by fn_index as the page's client does, in `session` (a fresh one by default)."""
        dep = self.deps[name]
        session = session or uuid.uuid4().hex[:11]
        body = {"data": data, "fn_index": dep["id"], "session_hash": session, "event_data": None, "trigger_id": None}
        # Python's JSON writer, which writes NaN and Infinity (httpx's refuses them; a hostile client need not).
        content, headers = json.dumps(body), {"content-type": "application/json"}
        if dep.get("queue") is False:
            response = httpx.post(f"{self.url}gradio_api/run/predict{query}", content=content, headers=headers,
                                  timeout=WAIT_S, verify=LOCAL_TLS)
            answer = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
            if response.status_code != 200:
                return Outcome(False, [], str(answer.get("error", response.text)))
            return Outcome(True, answer.get("data", []))
        response = httpx.post(f"{self.url}gradio_api/queue/join", content=content, headers=headers,
                              timeout=30, verify=LOCAL_TLS)
        if response.status_code != 200:
            return Outcome(False, [], f"HTTP {response.status_code}: {response.text[:200]}")
        last: list[Any] = []
        with httpx.stream("GET", f"{self.url}gradio_api/queue/data", params={"session_hash": session},
                          timeout=WAIT_S, verify=LOCAL_TLS) as stream:
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                message = json.loads(line[5:])
                if message.get("msg") == "process_generating" and message.get("output", {}).get("data"):
                    last = message["output"]["data"]
                if message.get("msg") == "process_completed":
                    output = message.get("output") or {}
                    if not message.get("success"):
                        return Outcome(False, last, str(output.get("error")))
                    return Outcome(True, output.get("data") or last)
        return Outcome(False, last, "the stream ended without process_completed")

    def upload(self, name: str, content: bytes) -> dict[str, Any]:
        """Upload a file as the page does; its FileData."""
        response = httpx.post(f"{self.url}gradio_api/upload", files={"files": (name, content)},
                              timeout=60, verify=LOCAL_TLS)
        assert response.status_code == 200, response.text
        (path,) = response.json()
        return {"path": path, "orig_name": name, "meta": {"_type": "gradio.FileData"}}

    def alive(self) -> bool:
        """The process runs and its queue answers (a cheap request, made after every hostile call)."""
        return self.proc.poll() is None and httpx.get(f"{self.url}gradio_api/queue/status",
                                                      timeout=30, verify=LOCAL_TLS).is_success


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, tiny_models: dict[str, str]) -> dict[str, str]:
    """The allowed directory (public mode) holding a link to the tiny target."""
    from tiny import save_overflowing_llama

    root = tmp_path_factory.mktemp("hostile-allowed")
    (root / "target").symlink_to(tiny_models["target"], target_is_directory=True)
    save_overflowing_llama(root / "overflowing", Path(tiny_models["target"]))
    return {"root": str(root), "target": str(root / "target"), "overflowing": str(root / "overflowing")}


@contextmanager
def public_server(models: dict[str, str], tmp_path_factory: pytest.TempPathFactory, name: str,
                  more_env: dict[str, str]) -> Iterator[Server]:
    """A real app configured as a public Space (its log in artifacts/`name`.log), stopped after the block."""
    ARTIFACTS.mkdir(exist_ok=True)
    tmp = tmp_path_factory.mktemp(name) / "tmp"
    tmp.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PLAYGROUND_", "GRADIO_"))}
    # The tiny target lives outside the allowed directory (a link to it is inside): allow its real home too.
    allowed = f"{models['root']}:{Path(models['target']).resolve().parent}"
    extra = {"PLAYGROUND_PRELOAD": "0", "PLAYGROUND_PUBLIC": "1", "PLAYGROUND_ALLOWED_DIRS": allowed,
             "PLAYGROUND_MAX_NEW_TOKENS": "512", "TMPDIR": str(tmp), "GRADIO_TEMP_DIR": str(tmp / "gradio"),
             **more_env}
    log = ARTIFACTS / f"{name}.log"
    port = free_port()
    proc = start_app(port, log, extra, base_env=base)
    try:
        url = f"http://127.0.0.1:{port}/"
        config = httpx.get(f"{url}config", timeout=30, verify=LOCAL_TLS).json()
        deps = {d["api_name"]: d for d in config["dependencies"]}
        state_ids = {c["id"] for c in config["components"] if c.get("type") == "state"}
        yield Server(url=url, proc=proc, log=log, tmp=tmp, deps=deps, state_ids=state_ids)
    finally:
        stop_app(proc)


@pytest.fixture(scope="module")
def server(models: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The module's public server; once the module's last test that used it is done, whatever the order its tests
    ran in, it is checked (`every_hostile_input_was_handled`): a failed check is an error of that last test."""
    with public_server(models, tmp_path_factory, "hostile-server", {"PLAYGROUND_RUN_TIMEOUT_S": "30"}) as served:
        yield served
        every_hostile_input_was_handled(served, models)


def generate_args(models: dict[str, str], **kw: Any) -> list[Any]:
    """The generate endpoint's inputs in order, for a short greedy float32 run on the tiny target."""
    args: dict[str, Any] = {"prompt": PROMPT, "target": models["target"], "assistant": None, "method": "baseline", "params": {},
            "max_new_tokens": 4, "sample": False, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "seed": 0,
            "chat": "auto", "dtype": "float32", "check_plain": False, "preset": None}
    args.update(kw)
    return list(args.values())


# --------------------------------------------------------------------------- counting hostile inputs


@dataclass
class Probe:
    """Counts hostile inputs and the ones not handled (with why), across the module."""

    tried: int = 0
    unhandled: list[str] = field(default_factory=list)

    def send(self, server: Server, what: str, name: str, data: list[Any], expect: str | None = None,
             session: str | None = None) -> Outcome:
        """One hostile call. Handled: the server lives, nothing leaks, and either our message (containing
        `expect` where given) is in a status box / Gradio's error field, or the call succeeded harmlessly."""
        self.tried += 1
        outcome = server.call(name, data, session)
        problem = None
        if not server.alive():
            problem = "the server died"
        elif LEAKS.search(outcome.text()):
            hit = LEAKS.search(outcome.text())
            assert hit is not None
            problem = f"leaked: {hit.group(0)!r} in {outcome.text()[:300]!r}"
        elif not outcome.success and (not outcome.error or outcome.error.strip() in ("Error", "None", "")):
            problem = f"Gradio's generic error: {outcome.error!r}"
        elif expect is not None and expect not in outcome.text():
            problem = f"expected {expect!r}, got {outcome.text()[:300]!r}"
        elif any(isinstance(v, str) and len(v) > 10_000 and v in outcome.text() for v in data):
            problem = "a value of over 10 000 characters was echoed back in full"
        if problem:
            self.unhandled.append(f"{what}: {problem}")
        return outcome


PROBE = Probe()
# Hostile values Gradio itself refuses before any handler runs (its generic error, nothing read): counted apart.
GRADIO_REFUSED: list[str] = []


# --------------------------------------------------------------------------- hole 2: no path from the client


def _tree(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")} if root.exists() else set()


@pytest.mark.slow
def test_the_session_hash_never_becomes_a_path(server: Server, models: dict[str, str]) -> None:
    """The queue protocol lets a client pick its session hash; the trace file goes where the server says."""
    traces = server.tmp / "assisted-playground-traces"
    mark = uuid.uuid4().hex[:8]
    # A short absolute folder (the old code kept 32 characters of the hash) holding a trace-*.json of its own,
    # which the old code deleted before writing its file there.
    outside = Path(tempfile.mkdtemp(prefix="pg", dir="/tmp"))
    (outside / "trace-mine.json").write_text("keep me")
    before_tmp_parent = _tree(server.tmp.parent)
    hostile = [f"../../esc-{mark}", f"../esc-{mark}", str(outside), f"{outside}/x", "/", ".", "..", "a/../../b"]
    for session in hostile:
        assert len(session) <= 32
        outcome = PROBE.send(server, f"session hash {session!r}", "generate", generate_args(models), "Done: 4 tokens",
                             session=session)
        assert outcome.success, outcome
        download = outcome.data[5]
        assert download.get("visible") and download.get("value"), download
        assert httpx.get(download["value"]["url"], timeout=30, verify=LOCAL_TLS).status_code == 200
    # Nothing appeared outside the server's trace folder (Gradio's own cache is its business), nothing was deleted.
    assert (outside / "trace-mine.json").read_text() == "keep me" and len(list(outside.iterdir())) == 1
    new = _tree(server.tmp.parent) - before_tmp_parent
    stray = {p for p in new if traces not in (p, *p.parents) and server.tmp / "gradio" not in (p, *p.parents)}
    assert not stray, stray
    # One folder per session, named by the server (not after the hash), one trace file in each.
    folders = [p for p in traces.iterdir() if p.is_dir()]
    assert all(re.fullmatch(r"[0-9a-f]{32}", p.name) for p in folders), folders
    assert len(folders) >= len(hostile)
    for session in hostile:  # the same session again reuses its folder: the old file is replaced, not kept
        PROBE.send(server, f"session hash {session!r} again", "generate", generate_args(models), "Done: 4 tokens",
                   session=session)
    assert len([p for p in traces.iterdir() if p.is_dir()]) == len(folders)
    assert all(len(list(p.glob("trace-*.json"))) == 1 for p in traces.iterdir() if p.is_dir())
    outside_files = list(outside.iterdir())
    assert outside_files == [outside / "trace-mine.json"]


def test_after_a_run_the_replay_reads_only_the_servers_own_file(server: Server, models: dict[str, str]) -> None:
    """The replay after a run takes nothing from the client: the run's trace is in the session's own `gr.State`."""
    session = uuid.uuid4().hex[:11]
    outcome = PROBE.send(server, "after-run with no run", "after_run", [None, None], session=session)
    assert outcome.success and "The last run" not in outcome.text()
    assert server.call("generate", generate_args(models), session=session).success
    outcome = server.call("after_run", [None, None], session=session)
    assert outcome.success and "The last run: Baseline (no drafting)" in outcome.text(), outcome
    # A failed run after it: nothing to replay (the previous file went when the run started).
    assert server.call("generate", generate_args(models, prompt=""), session=session).success
    outcome = server.call("after_run", [None, None], session=session)
    assert outcome.success and "The last run" not in outcome.text()


# --------------------------------------------------------------------------- hole 1: script in a trace file, in Chromium

PWN = "window.__pwned=(window.__pwned||0)+1"  # what every payload runs, if anything runs it
PAYLOADS = [f'<img src=x onerror="{PWN}">', f"<script>{PWN}</script>", f'<svg onload="{PWN}"></svg>',
            f'"><img src=x onerror="{PWN}">', f"' onmouseover='{PWN}' x='"]
ID_PAYLOAD = f'1" onmouseover="{PWN}" x="'


def script_trace() -> dict[str, Any]:
    """A valid trace whose every text is a script payload (texts may hold anything: they must stay text)."""
    drafted, emitted = [5, 6, 7], [5, 9]
    accepted, rejected, discarded, unverified = classify_step(drafted, emitted, cut=False)
    steps = [Step(index=0, drafted=drafted, accepted=accepted, rejected=rejected, discarded=discarded, emitted=emitted,
                  unverified=unverified, drafted_text=PAYLOADS[:3], emitted_text=PAYLOADS[3:5], q=[0.5, 0.2, 0.1],
                  p=[0.9, 0.1, 0.3]),
             Step(index=1, drafted=[], accepted=0, rejected=[], emitted=[4], emitted_text=[PAYLOADS[0]])]
    trace = Trace(method="speculative", target=PAYLOADS[0], assistant=PAYLOADS[1], prompt=PAYLOADS[2],
                  params={"x": PAYLOADS[3]}, output_ids=[5, 9, 4], output_text="".join(PAYLOADS), steps=steps,
                  finish_reason=PAYLOADS[4], env={"dtype": PAYLOADS[0]}, vocab_size=10)
    trace.summarize(0.5)
    return json.loads(trace.to_json())


def hostile_trace_files() -> list[tuple[str, bytes, str | None]]:
    """(file name, content, the message expected; None: it loads and must render as plain text)."""
    good = script_trace()

    def with_(path: tuple[Any, ...], value: Any) -> bytes:
        data = json.loads(json.dumps(good))
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return json.dumps(data).encode()

    return [
        ("script-texts.json", json.dumps(good).encode(), None),
        ("id-attribute.json", with_(("steps", 0, "drafted", 0), ID_PAYLOAD), "steps[0].drafted[0] must be a token id"),
        ("emitted-id.json", with_(("output_ids", 1), ID_PAYLOAD), "output_ids[1] must be a token id"),
        ("index.json", with_(("steps", 1, "index"), ID_PAYLOAD), "steps[1].index must be a whole number"),
        ("q.json", with_(("steps", 0, "q", 0), PAYLOADS[0]), "steps[0].q[0] must be a probability"),
        ("time.json", with_(("steps", 0, "draft_ms"), PAYLOADS[1]), "steps[0].draft_ms must be a finite number"),
        ("summary.json", with_(("summary", "new_tokens"), ID_PAYLOAD), "summary.new_tokens must be a whole number"),
        ("bool-id.json", with_(("steps", 1, "emitted", 0), True), "steps[1].emitted[0] must be a token id"),
        ("nan.json", with_(("steps", 0, "verify_ms"), float("nan")), "verify_ms must be a finite number"),
        (f'<img src=x onerror="{PWN}">.json', b"{not json", "not valid JSON"),
    ]


chromium = browser_fixture("chromium")


def _no_script_ran(page: Any, dialogs: list[str]) -> None:
    # Hover and click every token and chip: an injected onmouseover / onclick would fire now.
    page.eval_on_selector_all(
        "#pg-replay-output .tok, #pg-replay-step .tok, #pg-replay-status *",
        "els => els.forEach(e => ['mouseover', 'mouseenter', 'click'].forEach(t => e.dispatchEvent(new MouseEvent(t))))")
    # An inline handler runs within its event's dispatch; an injected `<img src=x onerror>` once its load fails: a
    # probe image of the same address, asked for after the payloads, has failed (or loaded) after them.
    page.evaluate("""() => new Promise(done => {
      const probe = new Image();
      probe.onerror = probe.onload = () => done();
      probe.src = 'x';  // the payloads' own address, resolved against the same page
    })""")
    assert page.evaluate("() => window.__pwned") is None, "a payload ran"
    assert dialogs == []
    injected = page.eval_on_selector_all(
        "#pg-replay-output img, #pg-replay-output script, #pg-replay-output svg, #pg-replay-step img, "
        "#pg-replay-step script, #pg-replay-status img, #pg-replay-status script, [onmouseover], [onerror], [onload]",
        "els => els.map(e => e.outerHTML)")
    assert injected == []


@pytest.mark.browser
@pytest.mark.slow
def test_script_bearing_trace_files_run_no_script_in_the_browser(server: Server, chromium: Any, tmp_path: Path) -> None:
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    try:
        page.goto(server.url)
        page.wait_for_function("() => (document.querySelector('#pg-prompt textarea') || {}).value")
        for i, (name, content, expected) in enumerate(hostile_trace_files()):
            PROBE.tried += 1
            page.set_input_files("#pg-tab-replay input[type=file]",
                                 files=[{"name": name, "mimeType": "application/json", "buffer": content}])
            # Each file's own answer: its message (or, for the loadable one, its name) in a status of its kind.
            kind = "done" if expected is None else "error"
            box = page.locator(f"#pg-replay-status [data-testid=pg-status][data-kind={kind}]",
                               has_text=expected or name)
            box.wait_for()
            text = box.inner_text()
            if expected is None:
                # It loads, and every payload is shown as the text it is.
                shown = page.inner_text("#pg-replay-output")
                assert all(p in shown for p in PAYLOADS[:3]), shown
                assert PAYLOADS[0] in text  # the target's name, in the status, as text
            else:
                assert expected in text and "Cannot replay" in text and "\n" not in text.strip(), text
            _no_script_ran(page, dialogs)
            page.screenshot(path=str(ARTIFACTS / "hostile-replay.png")) if i == 0 else None
        # A toast carries the visitor's input too (an unknown model's name): escaped like the status box.
        name = f'<img src=x onerror="{PWN}">'
        field_ = page.locator("#pg-target input")
        field_.fill(name)
        field_.press("Enter")
        field_.blur()
        page.click("#pg-generate")
        toast = page.locator("[data-testid=toast-text]").first
        toast.wait_for()
        assert name in toast.inner_text(), toast.inner_text()
        assert page.eval_on_selector_all("[data-testid=toast-body] img, #pg-status-box img", "els => els.length") == 0
        assert name in page.inner_text("#pg-status-box")
        _no_script_ran(page, dialogs)
    finally:
        context.close()


# --------------------------------------------------------------------------- every endpoint, every class of bad value

LONG = "x" * 100_000
NESTED_JSON = "[" * 100_000 + "]" * 100_000
NESTED = {"a": [[[[[[[[[[{"b": [[[[[[1]]]]]]}]]]]]]]]]]}
DEEP: Any = 1
for _ in range(400):  # deep JSON as a value (Python's JSON writer goes to about 1000 levels)
    DEEP = {"x": [DEEP]}
# Values no control of the page sends, for every input of every handler (each position in turn).
HOSTILE_VALUES: list[tuple[str, Any]] = [
    ("null", None), ("true", True), ("negative", -1), ("huge int", 2**70), ("1e308", 1e308), ("NaN", float("nan")),
    ("infinity", float("inf")), ("text 1e400", "1e400"), ("a word", "many"), ("empty list", []),
    ("a list", ["a", "b"]), ("an object", {"x": 1}), ("nested object", NESTED), ("very long text", LONG),
    ("lone surrogate", "\ud800"), ("markup", '<img src=x onerror="alert(1)">'), ("nested JSON text", NESTED_JSON),
    ("deep object", DEEP),
]


def make_trace(n_steps: int) -> dict[str, Any]:
    """A valid trace of `n_steps` steps, each drafting two tokens and keeping one."""
    steps = [Step(index=i, drafted=[5, 6], accepted=1, rejected=[6], emitted=[5, 7], drafted_text=["a", "b"],
                  emitted_text=["a", "c"], draft_ms=1.0, verify_ms=2.0) for i in range(n_steps)]
    trace = Trace(method="prompt_lookup", target="t", prompt="p", output_ids=[5, 7] * n_steps, steps=steps,
                  vocab_size=10)
    trace.summarize(0.003 * n_steps)
    return json.loads(trace.to_json())


def load_replay(server: Server, session: str, n_steps: int = 3) -> Outcome:
    data = server.upload("t.json", json.dumps(make_trace(n_steps)).encode())
    outcome = server.call("on_trace_upload", [data], session)
    assert outcome.success and "Loaded t.json" in outcome.text(), outcome
    return outcome


def valid_inputs(models: dict[str, str]) -> dict[str, list[Any]]:
    """Inputs that work for each handler, by its name less Gradio's repeat number (the base each hostile value is
    put into). A handler the page gains later must be added here: the sweep fails on one it does not know."""
    from playground import gallery
    from playground.presets import PRESETS

    params = [5, "constant", 0.0, 0.0, 10, 2, 4]  # one value per distinct method parameter, in the page's order
    run = generate_args(models)
    return {
        "on_method_change": ["prompt_lookup", models["target"], None],
        "on_sample_change": [True],
        "on_example": ["Edit code"],
        "example_tokens": ["Edit code"],
        "on_generate_click": ["prompt_lookup", *params],
        "generate": run,
        "show_code_for_settings": [*run[:13], None],  # generate's inputs less check_plain, then the preset
        "collect_params": ["prompt_lookup", *params],
        "replay_view": [None, 2],
        "replay_prev": [None, 2],
        "replay_next": [None, 2],
        "replay_play": [None, 2, None],
        "replay_tick": [None, 2, None],
        "play_race": ["prompt_lookup", None],
        "compare": [PROMPT, models["target"], None, "prompt_lookup", "float32", "auto", ["prompt_lookup"], 2, 1, None,
                    *params],
        "pick_preset": [next(iter(PRESETS)), None],  # the picker's value, the example applied (a State)
        "choose_preset": [],  # the option clicked comes as event data
        "clear_preset": [],
        "localized_choices": [],
        # preset, prompt, target, assistant, method, sample, temperature, top_p, top_k, seed, chat, tokens, dtype
        "make": [None, PROMPT, models["target"], None, "prompt_lookup", False, 1.0, 1.0, 0, 0, "auto", 4, "float32",
                 *params],
        "restore_link": [],
        # prompt, target, assistant, method, params, dtype, chat, max_new_tokens, largest draft, more prompts
        "tune_page": [PROMPT, models["target"], None, "prompt_lookup", {}, "float32", "auto", 8, 2, ""],
        "verify_page": [None],
        "after_run": [None, None],  # the run's trace and the baselines (both States)
        "replay_last": [None],
        "replay_open_token": [None],  # the replayed trace (a State); the clicked step and position come as event data
        "open_token": [None],  # the run's trace (a State), likewise
        "after_run_tables": [None],
        "on_trace_upload": [None],  # its one input is the file record: every hostile value replaces it
        "stop": [],
        "poll_preload": [None],
        "on_page_load": [],
        "localize_view": ["prompt_lookup"],  # the page's server-written parts in the visitor's language
        "language_of": [],
        "localize_tabs": [],
        "set_pace": ["free", 1.0],  # the presenter's pace and its seconds per step
        "step_on": [],  # "Next step": nothing to send, the session's paused run (if any) goes on
        "on_target_pick": [models["target"]],
        "on_target_change": [models["target"], *params],  # the target, then every method parameter's control
        "example_after_prompt": [PROMPT, "Edit code"],
        "example_note_html": ["Edit code"],
        "precision_of": [None, "auto"],  # the applied example (a State), the precision control
        "hide": [],
        "make_handout": [None],  # the run's trace (a State)
        "restore_view": [],
        "replay_speed": [1.0],
        "on_pick": [next(iter(dict(gallery.choices()).values()))],  # a recording of the replay's gallery
        "open_class": ["http://127.0.0.1/"],  # the page's address, as the presenter's browser sends it
        "class_tick": [],
        "join_class": [],  # the class link's code comes in the page's address
        "follow_stream": [None],  # the followed room's code (a State)
        "answer_kept": [],  # for the step the follower's page shows (the room keeps it)
        "answer_refused": [],
        "leave_class": [],
        "try_it_yourself": [],
        "_step_on_shown": ["step"],  # "Next step" shown with Generate at a waiting pace (the pace's mode)
        "_step_on_hidden": [],
        "replay_key": [None, 2],  # N / Page Down on the replay: the replayed trace (a State), the slider's step
        "quick_compare": [PROMPT, models["target"], None, "prompt_lookup", "float32", "auto", ["prompt_lookup"], 2, 1,
                          None, *params],  # as compare's (its tokens and repeats fixed by the handler)
        "left": [],  # the visitor's page unloaded (`sessions`)
    }


COMPARE_SWEPT = {0, 1, 2, 3, 4, 5, 6, 7, 8, 14, 15}  # compare's own inputs and prompt lookup's two parameters
CORE_VALUES = ("null", "huge int", "NaN", "a list", "very long text", "lone surrogate", "deep object")
LOADS_A_MODEL = ("generate", "show_code_for_settings", "compare", "quick_compare", "tune_page")  # null for their target: the bundled
TARGET_INPUT = 1  # of the handlers that load a model: null there means the default (bundled) model


def handler_name(dep: dict[str, Any]) -> str:
    """A handler's name in the page's config, less the number Gradio adds to repeats (clear_preset_3)."""
    return re.sub(r"_\d+$", "", dep["api_name"])


def swept_positions(server: Server, dep: dict[str, Any]) -> list[int]:
    """The inputs a client sets (a State's value is the server's: what a client sends for it is ignored)."""
    if handler_name(dep) in ("compare", "quick_compare"):
        return sorted(COMPARE_SWEPT)
    return [i for i, component in enumerate(dep["inputs"]) if component not in server.state_ids]


def sweep_values(name: str, position: int, first: int) -> list[tuple[str, Any]]:
    """Every hostile value for a handler's first swept input, the core ones for the others (one server, a
    couple of minutes); never null for a model name (that is the bundled default, a real model to load)."""
    values = [v for v in HOSTILE_VALUES if position == first or v[0] in CORE_VALUES]
    if position == TARGET_INPUT and name in LOADS_A_MODEL:
        values = [v for v in values if v[1] is not None]
    return values


@pytest.mark.slow
def test_every_input_of_every_endpoint_refuses_hostile_values(server: Server, models: dict[str, str]) -> None:
    """Every event handler in the page's config (every fn_index, those added later too) gets hostile values in
    each input a client sets; a handler without such inputs is called with the hostile values as extra inputs
    (a client may send them; Gradio passes them over). A handler the sweep has no valid inputs for fails it."""
    sweep = valid_inputs(models)
    handlers = server.handlers()
    unknown = [f"{d['api_name']} (fn_index {d['id']})" for d in handlers if handler_name(d) not in sweep]
    assert not unknown, f"handlers the hostile sweep does not cover (add them to valid_inputs): {unknown}"
    params_order = server.deps["on_generate_click"]["inputs"][1:]
    assert len(params_order) == len(sweep["collect_params"]) - 1, "the page's method parameters changed"
    swept: set[int] = set()
    for dep in handlers:
        name, base = handler_name(dep), sweep[handler_name(dep)]
        assert len(base) == len(dep["inputs"]), f"{dep['api_name']}: its inputs changed"
        session = uuid.uuid4().hex[:11]
        if name.startswith("replay_"):
            load_replay(server, session)
        positions = swept_positions(server, dep)
        if not positions:  # nothing a client sets: the hostile values come as extra inputs
            extras = [v for v in HOSTILE_VALUES if not base or v[0] in CORE_VALUES]
            for label, value in extras:
                PROBE.send(server, f"{dep['api_name']} + {label}", dep["api_name"], [*base, value], session=session)
        for position in positions:
            for label, value in sweep_values(name, position, positions[0]):
                data = list(base)
                data[position] = value
                PROBE.send(server, f"{dep['api_name']}[{position}] = {label}", dep["api_name"], data, session=session)
        swept.add(dep["id"])
    assert swept == {d["id"] for d in handlers}
    assert PROBE.unhandled == [], "\n".join(PROBE.unhandled)


# (what, handler, changes to the valid inputs by position, fragment of our message)
CLASSES: list[tuple[str, str, dict[int, Any], str]] = [
    ("seed beyond 64 bits", "generate", {10: 2**70}, "seed is far too large"),
    ("seed just beyond 64 bits", "generate", {10: 2**64}, "seed must be a whole number from 0 to 2^64"),
    ("draft length 1e400", "generate", {3: "prompt_lookup", 4: {"prompt_lookup_num_tokens": 1e400}},
     "prompt_lookup_num_tokens must be a finite number"),
    ("draft length as text 1e400", "generate", {3: "prompt_lookup", 4: '{"prompt_lookup_num_tokens": 1e400}'},
     "prompt_lookup_num_tokens must be a finite number"),
    ("draft length overflowing", "generate", {3: "prompt_lookup", 4: {"prompt_lookup_num_tokens": 10**30}},
     "prompt_lookup_num_tokens is far too large"),
    ("max new tokens 1e400", "generate", {5: "1e400"}, "max_new_tokens must be a finite number"),
    ("max new tokens NaN", "generate", {5: float("nan")}, "max_new_tokens must be a finite number"),
    ("top-p NaN", "generate", {6: True, 8: float("nan")}, "top_p must be a finite number"),
    ("temperature so small sampling yields NaN", "generate", {6: True, 7: 1e-30}, "temperature must be at least 0.01"),
    ("temperature infinite", "generate", {6: True, 7: float("inf")}, "temperature must be a finite number"),
    ("top-k beyond 64 bits", "generate", {6: True, 9: 2**70}, "top_k is far too large"),
    ("params nested deep (JSON text)", "generate", {4: NESTED_JSON}, "params is 200000 characters long"),
    ("params nested deep (text under the cap)", "generate", {4: "[" * 5000 + "]" * 5000},
     "params must be a JSON object"),
    ("params nested (object)", "generate", {3: "prompt_lookup", 4: NESTED},
     "a must be a number or a word"),
    ("params huge", "generate", {4: {f"k{i}": i for i in range(1000)}}, "params has 1000 entries"),
    ("prompt with a lone surrogate", "generate", {0: "hello \ud800"}, "the prompt is not valid text"),
    ("model name with a lone surrogate", "generate", {1: "a/\udc80"}, "target is not valid text"),
    ("absurdly long model name", "generate", {1: LONG}, "target is 100000 characters long; at most 1024"),
    ("absurdly long assistant", "generate", {3: "speculative", 2: "/" + LONG}, "assistant is 100001 characters long"),
    ("absurdly long prompt", "generate", {0: "word " * 20_000}, "the prompt is 100000 characters long"),
    ("method of the wrong type", "generate", {3: ["baseline"]}, "method must be text"),
    ("chat of the wrong type", "generate", {11: {"on": True}}, "chat must be auto, on or off"),
    ("float16 on CPU", "generate", {12: "float16"}, "float16 does not work on CPU"),
    ("the same through Show the code", "show_code_for_settings", {12: "float16"}, "float16 does not work on CPU"),
    ("compare: tokens 1e400", "compare", {7: "1e400"}, "max_new_tokens must be a finite number"),
    ("compare: repeats huge", "compare", {8: 2**70}, "repeats is far too large"),
    ("compare: repeats over the slider", "compare", {8: 50}, "repeats must be between 1 and 5"),
    ("compare: methods of the wrong type", "compare", {6: "prompt_lookup"}, "methods must be a list of method names"),
    ("compare: unknown method", "compare", {6: ["telepathy"]}, "unknown method 'telepathy'"),
    ("compare: float16 on CPU", "compare", {4: "float16"}, "float16 does not work on CPU"),
    ("method menu: unknown method", "on_method_change", {0: "telepathy"}, "unknown method 'telepathy'"),
    ("method menu: long name", "on_method_change", {0: LONG}, "method"),
    ("parameters of an unknown method", "collect_params", {0: "telepathy"}, "unknown method 'telepathy'"),
]


@pytest.mark.parametrize("what, name, changes, fragment", CLASSES, ids=[c[0] for c in CLASSES])
def test_each_class_of_bad_value_gets_our_message(what: str, name: str, changes: dict[int, Any], fragment: str,
                                                 server: Server, models: dict[str, str]) -> None:
    data = list(valid_inputs(models)[name])
    for position, value in changes.items():
        data[position] = value
    outcome = PROBE.send(server, what, name, data, fragment)
    assert fragment in outcome.text(), f"{what}: {outcome.text()[:500]}"
    assert not outcome.success or outcome.alert(), f"{what}: refused, so an alert or an error: {outcome}"


def test_a_one_step_trace_and_a_one_token_run_replay(server: Server, models: dict[str, str]) -> None:
    session = uuid.uuid4().hex[:11]
    outcome = load_replay(server, session, n_steps=1)
    slider = outcome.data[2]
    assert slider["minimum"] == 1 and slider["value"] == 1 and slider["interactive"] is False
    for name, data in (("replay_view", [None, 1]), ("replay_next", [None, 1]), ("replay_prev", [None, 1]),
                       ("replay_play", [None, 1, None])):
        assert PROBE.send(server, f"one-step trace: {name}", name, data, session=session).success
    assert PROBE.send(server, "one-token run", "generate", generate_args(models, max_new_tokens=1),
                      "Done: 1 token ", session=session).success
    outcome = PROBE.send(server, "one-token run replayed", "after_run", [None, None], "The last run", session=session)
    assert outcome.success


@pytest.mark.slow
def test_replaying_one_step_of_a_huge_trace_is_bounded(server: Server) -> None:
    """A trace of 40 000 steps loads; each move of the slider returns a window of it, not all of it."""
    session = uuid.uuid4().hex[:11]
    outcome = load_replay(server, session, n_steps=40_000)
    assert len(json.dumps(outcome.data)) < 2_000_000
    for step in (1, 20_000, 40_000):
        outcome = PROBE.send(server, f"huge trace: step {step}", "replay_view", [None, step], session=session)
        assert outcome.success and len(json.dumps(outcome.data)) < 2_000_000
        assert f"Step {step}:" in outcome.text()
    from playground.app.replay_tab import REPLAY_WINDOW_STEPS

    assert f"{40_000 - REPLAY_WINDOW_STEPS} earlier steps not shown" in outcome.text()


def test_a_value_that_is_not_an_upload_gets_our_message_and_no_file_is_read(server: Server) -> None:
    """The trace upload's input is the file record a client sends: text, a record without a path, or one naming a
    path outside Gradio's upload folder get our message, and nothing outside that folder is read (a trace placed
    there would load and say so)."""
    outside = server.tmp / "outside-trace.json"
    outside.write_text(json.dumps(make_trace(2)))
    upload = server.upload("t.json", json.dumps(make_trace(2)).encode())
    cases = [
        ("a path as text", "/etc/passwd", "expected an uploaded file"),
        ("a path to a real trace as text", str(outside), "expected an uploaded file"),
        ("a record without a path", {"orig_name": "t.json"}, "expected an uploaded file"),
        ("a record whose path is a number", {"path": 5}, "expected an uploaded file"),
        ("a record naming /etc/passwd", {"path": "/etc/passwd"}, "got a path elsewhere on the server"),
        ("a record naming a trace outside the upload folder", {"path": str(outside)}, "got a path elsewhere"),
        ("a record climbing out of the upload folder", {"path": upload["path"] + "/../../../outside-trace.json"},
         "got a path elsewhere"),
        ("a record naming a folder in the upload folder", {"path": str(Path(upload["path"]).parent)},
         "a path in the upload folder that is not a file"),
    ]
    for what, value, fragment in cases:
        outcome = PROBE.send(server, f"trace upload: {what}", "on_trace_upload", [value], fragment)
        assert outcome.success and outcome.alert() and "Loaded" not in outcome.text(), (what, outcome)
    # The page's own upload still loads.
    assert "Loaded t.json" in server.call("on_trace_upload", [upload]).text()
    assert "Loaded t.json" in server.call("on_trace_upload", [[upload]]).text()  # as the page sends it


def test_a_file_record_naming_a_path_outside_the_upload_folder_is_refused_by_gradio(server: Server) -> None:
    """A record marked as Gradio's file data is checked by Gradio itself before any handler runs, for every input
    of every handler: it refuses a path it did not store, with its own generic error (no handler of ours can
    answer it). Counted apart: nothing is read, the server keeps serving."""
    outside = server.tmp / "outside-trace.json"
    outside.write_text(json.dumps(make_trace(2)))
    for path in ("/etc/passwd", str(outside)):
        record = {"path": path, "orig_name": "t.json", "meta": {"_type": "gradio.FileData"}}
        GRADIO_REFUSED.append(f"trace upload: a file record naming {path}")
        outcome = server.call("on_trace_upload", [record])
        assert not outcome.success and "Loaded" not in outcome.text() and server.alive(), outcome


def test_a_shared_link_with_hostile_settings_is_not_applied(server: Server) -> None:
    """A link's query reaches `restore_link` (the page's load); hostile values there get our message as text."""
    from urllib.parse import quote

    cases = [("chat", "maybe"), ("max_new_tokens", "1e400"), ("target", LONG[:20_000]), ("params", NESTED_JSON[:9000]),
             ("seed", str(2**70)), ("method", '<img src=x onerror="alert(1)">'), ("preset", "x" * 5000)]
    for key, value in cases:
        query = f"?{key}={quote(value)}"
        PROBE.tried += 1
        outcome = server.call("restore_link", [], query=query)
        problem = None if outcome.success and server.alive() else f"failed: {outcome}"
        alert = outcome.alert() or ""
        if problem is None and not alert.startswith("⚠ This link's settings were not applied"):
            problem = f"not refused: {outcome.text()[:300]!r}"
        elif problem is None and (LEAKS.search(alert) or len(alert) > 2000):
            problem = f"leaked or echoed: {alert[:300]!r}"
        if problem:
            PROBE.unhandled.append(f"link with {key}: {problem}")
    assert PROBE.unhandled == [], "\n".join(PROBE.unhandled)


def test_a_run_whose_scores_overflow_says_why_instead_of_done(server: Server, models: dict[str, str]) -> None:
    """A target whose scores become NaN or infinite (float16 on CPU did this to the bundled Gemma) ends at once,
    in the status box, with the reason and the cure; the server then runs the sound model as before."""
    outcome = PROBE.send(server, "a target whose scores overflow", "generate",
                         generate_args(models, target=models["overflowing"], max_new_tokens=24),
                         "the target's scores became NaN or infinite")
    assert outcome.alert() and "Done" not in outcome.text(), outcome
    alert = outcome.alert()
    assert alert is not None
    assert "its weights may be broken" in alert
    assert "Done: 4 tokens" in server.call("generate", generate_args(models)).text()


def _worker_threads(server: Server) -> int:
    from playground.engine import WORKER_OS_THREAD_NAME

    count = 0
    for comm in Path(f"/proc/{server.proc.pid}/task").glob("*/comm"):
        try:
            count += comm.read_text().strip() == WORKER_OS_THREAD_NAME
        except OSError:
            pass
    return count


def _workers_once(server: Server, going: bool, within_s: float = WAIT_S) -> int:
    """The server's worker threads once some are going (`going`) or none are, polled for at most `within_s`: the
    count then, for the caller to assert."""
    import time

    deadline = time.monotonic() + within_s
    while bool(count := _worker_threads(server)) != going and time.monotonic() < deadline:
        time.sleep(0.02)
    return count


def test_compare_stops_when_its_client_leaves(server: Server, models: dict[str, str]) -> None:
    """Closing the connection mid-compare ends its generations (the rest of the comparison never runs): its work's
    thread ends, cut short ("stopped", not "its work done"), and the generation it was running ends with it."""

    data = list(valid_inputs(models)["compare"])
    # 200 tokens (the tiny target's context is 512, the prompt's 33: 512 was refused at once, so the old test never
    # generated), 5 repeats: a compare not stopped runs on and its log line says "its work done" (2.5 s later, seen).
    data[7], data[8] = 200, 5
    start = len(server.log.read_bytes())

    def generating() -> None:  # the next measured run has begun when the client leaves
        assert _workers_once(server, going=True), "no generation ran after the first measured one"

    _leave_after(server, "compare", data, "rep 1/5", before_leaving=generating)
    # The event that closes the window: the work's thread has ended (nothing of this compare can start after it).
    line = _wait_for_log(server, "playground-compare ended", start, within_s=WAIT_S)
    assert line is not None, f"compare kept working {WAIT_S} s after its client left"
    assert line.endswith("after its client left (stopped)"), f"compare ran on after its client left: {line}"
    # The generation it was running ends with it (its thread joined or ending).
    assert _workers_once(server, going=False) == 0, "compare's generation kept running after its client left"


# --------------------------------------------------------------------------- issue 23: refusals in our words

# What Python's own words for a malformed file look like (the JSON reader's, the codec's, the int converter's).
PYTHON_WORDS = re.compile(r"not iterable|recursion|set_int_max_str_digits|codec can't|Expecting|object is not|"
                          r"NoneType|Traceback|unhashable|has no attribute|subscriptable", re.I)


def _json_nodes(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON value: each key of an object, the first and last item of a list."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _json_nodes(item, (*path, key))
    elif isinstance(value, list) and value:
        for index in sorted({0, len(value) - 1}):
            yield from _json_nodes(value[index], (*path, index))


# Every JSON type, and the ones Python's reader fails on by itself (deep nesting, a number of 5 000 digits).
ANY_JSON: list[tuple[str, str]] = [("null", "null"), ("true", "true"), ("zero", "0"), ("negative", "-1"),
                                   ("float", "1.5"), ("NaN", "NaN"), ("-Infinity", "-Infinity"), ("text", '"x"'),
                                   ("empty list", "[]"), ("list", "[1, [2]]"), ("empty object", "{}"),
                                   ("object", '{"a": {"b": 1}}'), ("deep", "[" * 5000 + "]" * 5000),
                                   ("huge int", "9" * 5000), ("surrogate", '"\\ud800"')]


def test_every_malformed_trace_gets_a_trace_format_message() -> None:
    """Any JSON type at any place of a trace (schema 1 and 2), nesting past Python's reader, numbers past its digit
    limit, bytes that are not UTF-8: each is refused with a trace-format message of ours (or loads), never
    Python's own words; and a name of a million characters is cut in the status line."""
    from playground.app.replay_tab import describe_trace
    from playground.trace import TraceFormatError

    PLACEHOLDER = "__PLACE__"
    tried = 0
    for version in (1, 2):
        good = make_trace(2)
        good["schema_version"] = version
        for path in _json_nodes(good):
            if not path:
                continue
            data = json.loads(json.dumps(good))
            node = data
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = PLACEHOLDER
            text = json.dumps(data)
            for label, value in ANY_JSON:
                tried += 1
                try:
                    Trace.from_json(text.replace(f'"{PLACEHOLDER}"', value))
                except TraceFormatError as exc:
                    message = str(exc)
                    assert not PYTHON_WORDS.search(message) and len(message) < 400, (version, path, label, message)
                except BaseException as exc:  # noqa: BLE001 - what this test is about
                    pytest.fail(f"schema {version}, {path} = {label}: {type(exc).__name__}: {str(exc)[:200]}")
    whole_files = [b"\xff\xfe\x00{", b'{"method": "\xff"}', b"[" * 100_000, b"9" * 5000, b"", b"\x00"]
    for content in whole_files:
        with pytest.raises(TraceFormatError) as refused:
            Trace.from_json(content)
        assert not PYTHON_WORDS.search(str(refused.value)), str(refused.value)
    named = make_trace(2)
    named["target"] = "m" * 1024  # the longest model name a trace may hold: loads, and the status line cuts it
    line = describe_trace(Trace.from_dict(named), "Loaded t.json")
    assert len(line) < 1000 and "m" * 80 + "…" in line
    with pytest.raises(TraceFormatError, match="trace.target has 999000 characters; the limit is 1024"):
        Trace.from_dict({**named, "target": "m" * 999_000})
    print(f"\nmalformed traces tried: {tried + len(whole_files)}")


def test_hostile_trace_files_uploaded_get_our_words(server: Server) -> None:
    """The same through the page's upload: the status line holds our message, cut, in one line."""
    named = make_trace(2)
    named["target"] = "m" * 1024
    cases = [("deep.json", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
             ("digits.json", b'{"method": "x", "steps": [], "schema_version": ' + b"9" * 5000 + b"}", "more than 4300 digits"),
             ("latin1.json", '{"method": "é"}'.encode("latin-1"), "not UTF-8 text"),
             ("v1-steps.json", json.dumps({**make_trace(2), "schema_version": 1, "steps": 5}).encode(),
              "trace.steps must be a list"),
             ("named.json", json.dumps(named).encode(), "Loaded named.json"),
             ("long-name.json", json.dumps({**named, "target": "m" * 999_000}).encode(),
              "trace.target has 999000 characters; the limit is 1024")]
    for name, content, fragment in cases:
        PROBE.tried += 1
        outcome = server.call("on_trace_upload", [server.upload(name, content)])
        text = outcome.text()
        problem = None
        if not outcome.success or fragment not in text:
            problem = f"expected {fragment!r}, got {text[:300]!r}"
        elif PYTHON_WORDS.search(text) or LEAKS.search(text):
            problem = f"Python's words: {text[:300]!r}"
        elif "m" * 1000 in text:
            problem = "a million-character name was echoed"
        if problem:
            PROBE.unhandled.append(f"trace file {name}: {problem}")
    assert PROBE.unhandled == [], "\n".join(PROBE.unhandled)


def test_a_path_or_hub_id_that_fails_for_what_it_is_says_so(server: Server, models: dict[str, str]) -> None:
    """A name over the file system's 255 bytes and a Hub id over the Hub's 96 characters are the input's fault."""
    cases = [("300-character path component", f"{models['root']}/{'a' * 300}", "longer than the file system allows"),
             ("300-character component under it", f"{models['root']}/{'a' * 300}/x", "longer than the file system allows"),
             ("1000-character Hub id", "a/" + "b" * 998, "a Hub model id (owner/name) has at most 96"),
             ("NUL byte", f"{models['root']}/a\x00b", "the file system refuses it as a path")]
    for what, target, fragment in cases:
        outcome = PROBE.send(server, what, "generate", generate_args(models, target=target), fragment)
        assert fragment in outcome.text() and "not because of your input" not in outcome.text(), (what, outcome)
        assert len(outcome.alert() or "") < 400


def test_older_raw_clients_work_and_short_calls_get_our_message(server: Server, models: dict[str, str]) -> None:
    """/generate with the 13 values of clients older than check_plain and preset runs (both take their default);
    a call with fewer values than any handler takes gets our message instead of Gradio's generic error."""
    outcome = PROBE.send(server, "generate with 13 values", "generate", generate_args(models)[:13], "Done: 4 tokens")
    assert outcome.success and "Done: 4 tokens" in outcome.text(), outcome.text()[:300]
    for name, data in (("generate", generate_args(models)[:5]), ("compare", [PROMPT]), ("replay_view", [])):
        outcome = PROBE.send(server, f"{name} with {len(data)} values", name, data, "this endpoint takes")
        assert not outcome.success and "the call sent" in (outcome.error or ""), (name, outcome)


def test_mcp_tool_arguments_are_checked_like_the_pages() -> None:
    """An agent's lone surrogate, over-long text and unbounded repeats get the page's one-line messages, cut; the
    refusal names no server file (the Spec-Bench set by its name)."""
    import gradio as gr

    from playground.app import mcp_tools
    from playground.bench.prompts import SPEC_BENCH_FILE

    huge = "x" * 1_000_000
    cases: list[tuple[Callable[..., Any], dict[str, Any], str]] = [
        (mcp_tools.generate, dict(prompt="hello \ud800"), "the prompt is not valid text"),
        (mcp_tools.generate, dict(prompt="hi", target=huge), "target is 1000000 characters long"),
        (mcp_tools.generate, dict(prompt="hi", params=huge), "params is 1000000 characters long"),
        (mcp_tools.generate, dict(prompt="hi", method="\udc80"), "method is not valid text"),
        (mcp_tools.compare, dict(prompt="\ud800"), "the prompt is not valid text"),
        (mcp_tools.compare, dict(prompt="hi", repeats=1000), "repeats must be a whole number from 1 to 5"),
        (mcp_tools.compare, dict(prompt="hi", repeats=2**70), "repeats is far too large"),
        (mcp_tools.compare, dict(prompt="hi", methods=huge), "methods is 1000000 characters long"),
        (mcp_tools.compare, dict(prompt="hi", max_new_tokens=10**6), "max_new_tokens must be a whole number from 1"),
        (mcp_tools.bench, dict(categories="no-such-category"), "in Spec-Bench"),
        (mcp_tools.bench, dict(limit=3, repeats=5), "at most 200 are accepted in one call"),
        (mcp_tools.bench, dict(categories=huge), "categories is 1000000 characters long"),
    ]
    for tool, kwargs, fragment in cases:
        with pytest.raises(gr.Error) as refused:
            mcp_tools._tool(tool)(**kwargs)
        message = str(refused.value.message)
        assert fragment in message, (tool.__name__, kwargs.keys(), message[:300])
        assert len(message) <= mcp_tools.MAX_TOOL_MESSAGE_CHARS + 1 and str(SPEC_BENCH_FILE) not in message
        assert "/" + "data" not in message and "site-packages" not in message


def test_a_fourth_mcp_call_at_once_is_refused_with_the_bound() -> None:
    """MCP calls run outside Gradio's queue (so that a disconnect reaches them): at most MAX_TOOL_CALLS at once, the
    next is refused in our words, naming the bound; a slot freed serves the next call."""
    import gradio as gr

    from playground.app import mcp_tools

    held = 0
    try:
        while held < mcp_tools.MAX_TOOL_CALLS:  # the calls running now
            assert mcp_tools._CALLS.acquire(blocking=False)
            held += 1
        with pytest.raises(gr.Error) as refused:
            mcp_tools._tool(mcp_tools.compare)(prompt="hi", repeats=1000)
        assert str(refused.value.message) == f"{mcp_tools.MAX_TOOL_CALLS} agent calls are running already; call " \
                                             "again once one has ended"
        mcp_tools._CALLS.release()
        held -= 1
        with pytest.raises(gr.Error, match="repeats must be a whole number from 1 to 5"):
            mcp_tools._tool(mcp_tools.compare)(prompt="hi", repeats=1000)
    finally:
        for _ in range(held):
            mcp_tools._CALLS.release()


# --------------------------------------------------------------------------- issue 23: nothing about the server


def test_the_page_shows_no_server_path_nor_library_version(server: Server, models: dict[str, str]) -> None:
    """After another visitor's run on a directory, the page's status names no directory; the Code tab's script
    names neither the directory's real place (the allowed one is a link to it) nor the libraries' versions."""
    import transformers

    assert server.call("generate", generate_args(models)).success
    real = str(Path(models["target"]).resolve())
    status = server.call("on_page_load", [])
    assert status.success and models["root"] not in status.text() and real not in status.text(), status.text()[:500]
    code = server.call("show_code_for_settings", [*generate_args(models)[:13], None])
    assert code.success and "from_pretrained" in code.text(), code.text()[:300]
    assert real not in code.text(), "the Code tab shows the directory's real place on the server"
    assert transformers.__version__ not in code.text() and "torch==" not in code.text()


def test_a_public_script_names_the_cache_by_a_placeholder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bundled model's script on a public server: the cache folder as <PLAYGROUND_CACHE_DIR>, not its path."""
    from playground.settings import get_settings
    from playground.snippet import CACHE_PLACEHOLDER, model_location

    monkeypatch.setenv("PLAYGROUND_PUBLIC", "1")
    location, comment = model_location("bundled/gemma-3-270m")
    assert location.startswith(CACHE_PLACEHOLDER) and str(get_settings().cache_dir) not in location, location
    monkeypatch.delenv("PLAYGROUND_PUBLIC")
    assert model_location("bundled/gemma-3-270m")[0].startswith(str(get_settings().cache_dir.expanduser()))


# --------------------------------------------------------------------------- issue 23: one copy per model


def test_spellings_of_one_directory_share_one_copy(tiny_models: dict[str, str]) -> None:
    """`dir`, `dir/`, `dir//`, `dir/./`, `/proc/self/root/dir` and a link to it: one load, one object."""
    from playground.models import ModelStore

    store = ModelStore(budget_gb=50)
    real = str(Path(tiny_models["target"]).resolve())
    link = Path(tempfile.mkdtemp(prefix="pg-spelling")) / "link"
    link.symlink_to(real, target_is_directory=True)
    spellings = [real, real + "/", real + "//", real + "/./", "/proc/self/root" + real, str(link)]
    first = store.get(spellings[0], "float32")
    for spelling in spellings[1:]:
        assert store.get(spelling, "float32") is first, spelling
    assert store.loaded() == [real] and store.used_bytes() == first.param_bytes
    store.evict(real + "//")  # any spelling names it for eviction too
    assert store.loaded() == []


# --------------------------------------------------------------------------- issue 23: work ends with its visitor


def _leave_after(server: Server, name: str, data: list[Any], seen: str,
                 before_leaving: Callable[[], None] | None = None) -> str:
    """Join `name`'s queue, read its stream until `seen` appears, call `before_leaving` (still connected), then close
    the connection; the session."""
    session = uuid.uuid4().hex[:11]
    body = {"data": data, "fn_index": server.deps[name]["id"], "session_hash": session, "event_data": None,
            "trigger_id": None}
    assert httpx.post(f"{server.url}gradio_api/queue/join", json=body, timeout=30, verify=LOCAL_TLS).status_code == 200
    with httpx.stream("GET", f"{server.url}gradio_api/queue/data", params={"session_hash": session},
                      timeout=WAIT_S, verify=LOCAL_TLS) as stream:
        for line in stream.iter_lines():
            assert "process_completed" not in line, f"{name} ended before {seen!r} was seen: {line[:300]}"
            if seen in line:
                break
        if before_leaving is not None:
            before_leaving()
    return session


def _wait_for_log(server: Server, fragment: str, start: int, within_s: float) -> str | None:
    """The first server log line after byte `start` that holds `fragment`, waiting up to `within_s`."""
    import time

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        text = server.log.read_bytes()[start:].decode(errors="replace")  # `start` counts bytes (the log has ██)
        line = next((ln for ln in text.splitlines() if fragment in ln), None)
        if line:
            return line
        time.sleep(0.2)
    return None


def _http_request(url: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """A raw HTTP/1.1 request on a socket of its own, left open: the caller reads what it needs and closes the socket
    (a client that leaves; httpx answers a POST only once the whole response is in)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=WAIT_S)
    payload = json.dumps(body).encode() if body is not None else b""
    head = (f"{method} {path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nAccept: */*\r\n\r\n")
    sock.sendall(head.encode() + payload)
    return sock


@pytest.mark.slow
def test_tune_stops_when_its_client_leaves(server: Server, models: dict[str, str]) -> None:
    """A Tune of 9 prompts, 400 new tokens and drafts up to 16 (minutes of work) ends once its tab is closed:
    its worker thread ends and says so in the log (the work's end, however long it would have gone on)."""
    more = "\n".join(f"Prompt number {i}: one, two, three, four, five, six, seven." for i in range(8))
    # prompt, target, assistant, method, params, dtype, chat, max_new_tokens, largest draft, more prompts
    data: list[Any] = [PROMPT, models["target"], None, "prompt_lookup", {}, "float32", "auto", 400, 16, more]
    start = len(server.log.read_bytes())
    _leave_after(server, "tune_page", data, "Tuning")
    line = _wait_for_log(server, "playground-tune ended", start, within_s=60)
    assert line is not None, "Tune kept working after its client left"



def every_hostile_input_was_handled(server: Server, models: dict[str, str]) -> None:
    """The module's count, taken when its server stops (`server`): hostile inputs tried and how many were not handled
    (the goal is none); the server still serves, and no thread died on an exception."""
    assert server.alive()
    outcome = server.call("generate", generate_args(models))
    assert outcome.success and "Done: 4 tokens" in outcome.text()
    log = server.log.read_text(errors="replace")
    assert "Exception in thread" not in log
    handlers = len(server.handlers())
    print(f"\nhostile inputs tried: {PROBE.tried} across {handlers} handlers; not handled: {len(PROBE.unhandled)}; "
          f"refused by Gradio before any handler: {len(GRADIO_REFUSED)}")
    (ARTIFACTS / "hostile-count.txt").write_text(
        f"tried {PROBE.tried}\nhandlers {handlers}\nnot handled {len(PROBE.unhandled)}\n"
        f"refused by Gradio before any handler (its generic error, nothing read) {len(GRADIO_REFUSED)}\n"
        + "\n".join(PROBE.unhandled + GRADIO_REFUSED) + "\n")
    assert PROBE.unhandled == [], "\n".join(PROBE.unhandled)
