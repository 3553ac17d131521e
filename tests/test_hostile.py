"""A public Space survives hostile visitors: every endpoint through the raw Gradio queue protocol.

One `python app.py` serves the module, configured like a public Space (public mode, one allowed model
directory, no preload, its own temp dir). Every event handler is reached the way a hand-written
client reaches it: by `fn_index` in a POST to the queue's join endpoint (or to `run/predict` for the
handlers the page calls outside the queue), with a session hash the client chooses. Hostile trace
files are also opened in a real Chromium, which must run none of their script.

Every hostile input goes through `Probe.send`, which counts it and records whether it was handled:
our own one-line message (or a harmless answer), never Gradio's generic "Error", a Python exception's
text or a dead server. `test_zz_every_hostile_input_was_handled` reports the two numbers.
"""

from __future__ import annotations

import html
import json
import os
import re
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

from appserver import free_port, start_app, stop_app
from playground.trace import Step, Trace, classify_step

httpx = pytest.importorskip("httpx")

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"
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
    deps: dict[str, dict[str, Any]]  # handler name -> its dependency in the page's config

    def call(self, name: str, data: list[Any], session: str | None = None) -> Outcome:
        """Call a handler by fn_index as the page's client does, in `session` (a fresh one by default)."""
        dep = self.deps[name]
        session = session or uuid.uuid4().hex[:11]
        body = {"data": data, "fn_index": dep["id"], "session_hash": session, "event_data": None, "trigger_id": None}
        if dep.get("queue") is False:
            response = httpx.post(f"{self.url}gradio_api/run/predict", json=body, timeout=WAIT_S)
            answer = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
            if response.status_code != 200:
                return Outcome(False, [], str(answer.get("error", response.text)))
            return Outcome(True, answer.get("data", []))
        response = httpx.post(f"{self.url}gradio_api/queue/join", json=body, timeout=30)
        if response.status_code != 200:
            return Outcome(False, [], f"HTTP {response.status_code}: {response.text[:200]}")
        last: list[Any] = []
        with httpx.stream("GET", f"{self.url}gradio_api/queue/data", params={"session_hash": session},
                          timeout=WAIT_S) as stream:
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
        response = httpx.post(f"{self.url}gradio_api/upload", files={"files": (name, content)}, timeout=60)
        assert response.status_code == 200, response.text
        (path,) = response.json()
        return {"path": path, "orig_name": name, "meta": {"_type": "gradio.FileData"}}

    def alive(self) -> bool:
        return self.proc.poll() is None and httpx.get(self.url, timeout=30).status_code == 200


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, tiny_models: dict[str, str]) -> dict[str, str]:
    """The allowed directory (public mode) holding a link to the tiny target."""
    root = tmp_path_factory.mktemp("hostile-allowed")
    (root / "target").symlink_to(tiny_models["target"], target_is_directory=True)
    return {"root": str(root), "target": str(root / "target")}


@pytest.fixture(scope="module")
def server(models: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    ARTIFACTS.mkdir(exist_ok=True)
    tmp = tmp_path_factory.mktemp("hostile-server") / "tmp"
    tmp.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PLAYGROUND_", "GRADIO_"))}
    # The tiny target lives outside the allowed directory (a link to it is inside): allow its real home too.
    allowed = f"{models['root']}:{Path(models['target']).resolve().parent}"
    extra = {"PLAYGROUND_PRELOAD": "0", "PLAYGROUND_PUBLIC": "1", "PLAYGROUND_ALLOWED_DIRS": allowed,
             "PLAYGROUND_MAX_NEW_TOKENS": "64", "PLAYGROUND_RUN_TIMEOUT_S": "30", "TMPDIR": str(tmp),
             "GRADIO_TEMP_DIR": str(tmp / "gradio")}
    log = ARTIFACTS / "hostile-server.log"
    port = free_port()
    proc = start_app(port, log, extra, base_env=base)
    try:
        url = f"http://127.0.0.1:{port}/"
        config = httpx.get(f"{url}config", timeout=30).json()
        deps = {d["api_name"]: d for d in config["dependencies"] if d.get("api_name")}
        yield Server(url=url, proc=proc, log=log, tmp=tmp, deps=deps)
    finally:
        stop_app(proc)


def generate_args(models: dict[str, str], **kw: Any) -> list[Any]:
    """The generate endpoint's inputs in order, for a short greedy float32 run on the tiny target."""
    args = {"prompt": PROMPT, "target": models["target"], "assistant": None, "method": "baseline", "params": {},
            "max_new_tokens": 4, "sample": False, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "seed": 0,
            "chat": "auto", "dtype": "float32"}
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
            problem = f"leaked: {LEAKS.search(outcome.text()).group(0)!r} in {outcome.text()[:300]!r}"
        elif not outcome.success and (not outcome.error or outcome.error.strip() in ("Error", "None", "")):
            problem = f"Gradio's generic error: {outcome.error!r}"
        elif expect is not None and expect not in outcome.text():
            problem = f"expected {expect!r}, got {outcome.text()[:300]!r}"
        if problem:
            self.unhandled.append(f"{what}: {problem}")
        return outcome


PROBE = Probe()


# --------------------------------------------------------------------------- hole 2: no path from the client


def _tree(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")} if root.exists() else set()


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
        assert httpx.get(download["value"]["url"], timeout=30).status_code == 200
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
    """The replay after a run takes no file from the client (only its session): it shows that session's run."""
    session = uuid.uuid4().hex[:11]
    outcome = PROBE.send(server, "after-run with no run", "after_run", [None], session=session)
    assert outcome.success and "The last run" not in outcome.text()
    assert server.call("generate", generate_args(models), session=session).success
    outcome = server.call("after_run", [None], session=session)
    assert outcome.success and "The last run: baseline" in outcome.text(), outcome
    # A failed run after it: nothing to replay (the previous file went when the run started).
    assert server.call("generate", generate_args(models, prompt=""), session=session).success
    outcome = server.call("after_run", [None], session=session)
    assert outcome.success and "The last run" not in outcome.text()
