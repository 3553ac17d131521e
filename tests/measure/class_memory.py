"""A class's memory: does the server give back what a class's sessions kept once the class has left?

Starts `python app.py` (the bundled Gemma 3 270M preloaded), then a class of `--class-size` visitors, each a page's
session as a browser holds it: the heartbeat connection open (`/gradio_api/heartbeat/<session>`) and its Generate
calls through Gradio's queue protocol (`--max-new-tokens` prompt-lookup runs, all visitors at once). Prints the
server's resident memory (RSS) before the class, after the first round (one run each: 30 runs by default), after
`--rounds` rounds (120 runs), then after every visitor closed its page (the heartbeat goes: Gradio runs the page's
`unload`, `app.sessions` frees the session's keep after its grace, `LEFT_GRACE_S`) and the grace has passed.

    python tests/measure/class_memory.py                        # 30 visitors, 4 rounds of 32-token runs
    python tests/measure/class_memory.py --max-new-tokens 8 --json artifacts/class-memory.json
    python tests/measure/class_memory.py --max-new-tokens 8 --uploads     # each visitor also replays an uploaded trace
    python tests/measure/class_memory.py --max-new-tokens 8 --probe /tmp/probe --tracemalloc   # where the memory is

`--uploads`: each visitor, after each of its runs, loads an uploaded trace in the replay (the page's own upload
handler; a 1.1 MB real run's longest window, `upload_memory.window_trace`, a new copy each round) and moves to its last
step. `--probe DIR`: the server loads tests/measure/memory_probe (glibc's heap figures, live objects by type, Gradio's
and the playground's per-session tables at each point, in DIR/*.json; with `--tracemalloc`, snapshots diffed between
the points, largest first).

Not collected by pytest (the file name does not start with test_).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from appserver import free_port, start_app, stop_app  # noqa: E402
from upload_memory import call, predict, window_trace  # noqa: E402
from playground.app.generate_tab import EXAMPLES  # noqa: E402
from playground.app.sessions import LEFT_GRACE_S, TRIM_AFTER_S  # noqa: E402
from playground.models import DEFAULT_TARGET  # noqa: E402

WAIT_S = 400  # a run's answer (8-token runs of 30 visitors at once: up to 234 s a round at load average 27)


class Page:
    """One visitor's page: the heartbeat held open in a thread, Generate joined in the queue and read to its end."""

    def __init__(self, url: str, fn_index: int) -> None:
        self.url, self.fn_index = url, fn_index
        self.session = uuid.uuid4().hex[:11]
        host, port = url.rstrip("/").rsplit("//", 1)[1].rsplit(":", 1)
        self._heart = socket.create_connection((host, int(port)), timeout=None)
        self._heart.sendall(f"GET /gradio_api/heartbeat/{self.session} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        threading.Thread(target=self._beat, daemon=True).start()

    def _beat(self) -> None:
        with contextlib.suppress(OSError):
            while self._heart.recv(4096):  # the heartbeat's lines, read as a browser does
                pass

    def run(self, prompt: str, tokens: int) -> str:
        data = [prompt, DEFAULT_TARGET, None, "prompt_lookup", {"prompt_lookup_num_tokens": 5}, tokens, False, 1.0,
                1.0, 0, 0, "auto", "auto", False, None]
        body = {"data": data, "fn_index": self.fn_index, "session_hash": self.session, "event_data": None,
                "trigger_id": None}
        httpx.post(f"{self.url}gradio_api/queue/join", json=body, timeout=60).raise_for_status()
        deadline = time.monotonic() + WAIT_S  # the stream's heartbeats go on after the server ended a call (gate)
        with httpx.stream("GET", f"{self.url}gradio_api/queue/data", params={"session_hash": self.session},
                          timeout=WAIT_S) as stream:
            for line in stream.iter_lines():
                if '"process_completed"' in line:
                    return "done" if 'data-kind=\\"done\\"' in line else line[:300]
                if time.monotonic() > deadline:
                    return f"no answer within {WAIT_S} s"
        return "the stream ended early"

    def replay_upload(self, url: str, deps: dict[str, int], record: dict[str, Any]) -> str:
        """Load an uploaded trace in this page's replay and move to its last step, as a visitor does."""
        loaded = call(url, deps["on_trace_upload"], [record], self.session, "127.0.0.1")
        if 'data-kind=\\"done\\"' not in json.dumps(loaded):
            return f"upload: {json.dumps(loaded)[:300]}"
        stepped = predict(url, deps["replay_view"], [None, 512], self.session, "127.0.0.1")
        return "done" if stepped["success"] else f"step: {stepped['text']}"

    def leave(self) -> None:
        """Close the page: its heartbeat connection goes now, and the server runs the page's `unload`."""
        with contextlib.suppress(OSError):
            self._heart.shutdown(socket.SHUT_RDWR)
        self._heart.close()


def upload(url: str, round_: int) -> dict[str, Any]:
    """Upload a real run's longest replay window (a new file each round, as each visitor's would be) and return the
    record a page sends its upload handler."""
    trace = window_trace().replace(b'"prompt": "x"', f'"prompt": "round {round_}"'.encode())
    uploaded = httpx.post(f"{url}gradio_api/upload", files={"files": (f"run{round_}.json", trace)}, timeout=120)
    uploaded.raise_for_status()
    return {"path": uploaded.json()[0], "orig_name": f"run{round_}.json", "meta": {"_type": "gradio.FileData"}}


def rss_mb(proc: psutil.Process) -> float:
    return round(proc.memory_info().rss / 2**20, 1)


class Probe:
    """Asks the server's memory probe (tests/measure/memory_probe) for its figures at a point, and diffs the
    tracemalloc snapshots of two points."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.taken: list[str] = []

    def env(self, tracemalloc: bool) -> dict[str, str]:
        if self.folder is None:
            return {}
        self.folder.mkdir(parents=True, exist_ok=True)
        import os
        path = os.pathsep.join([str(Path(__file__).parent / "memory_probe"), os.environ.get("PYTHONPATH", "")])
        return {"PYTHONPATH": path, "PLAYGROUND_PROBE_DIR": str(self.folder),
                "PLAYGROUND_PROBE_TRACEMALLOC": "1" if tracemalloc else "0"}

    def take(self, name: str) -> dict[str, Any]:
        if self.folder is None:
            return {}
        (self.folder / f"{name}.go").touch()
        deadline = time.monotonic() + 600
        while (self.folder / f"{name}.go").exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        figures = json.loads((self.folder / f"{name}.json").read_text())
        shown = {k: v for k, v in figures.items() if k != "by_type"}
        print(f"probe {name}: {json.dumps(shown)}", flush=True)
        if self.taken:
            self.diff(self.taken[-1], name)
        self.taken.append(name)
        return figures

    def diff(self, old: str, new: str, top: int = 25) -> None:
        assert self.folder is not None
        a, b = (json.loads((self.folder / f"{n}.json").read_text()) for n in (old, new))
        grown = sorted(((b["by_type"].get(k, 0) - a["by_type"].get(k, 0), k) for k in b["by_type"]), reverse=True)
        print(f"objects {old} -> {new}: " + ", ".join(f"{k} {d:+}" for d, k in grown[:12] if d), flush=True)
        old_tm, new_tm = (self.folder / f"{n}.tm" for n in (old, new))
        if old_tm.exists() and new_tm.exists():
            import tracemalloc
            stats = tracemalloc.Snapshot.load(str(new_tm)).compare_to(tracemalloc.Snapshot.load(str(old_tm)),
                                                                       "traceback")
            for stat in stats[:top]:
                print(f"  {stat.size_diff / 2**20:+8.2f} MB {stat.count_diff:+8} blocks  "
                      + " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in list(stat.traceback)[::-1][:8]),
                      flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--class-size", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=4, help="runs per visitor in all")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--uploads", action="store_true", help="each visitor also replays an uploaded trace per run")
    parser.add_argument("--idle", type=float, default=LEFT_GRACE_S + TRIM_AFTER_S + 20,
                        help="seconds to wait once the class has left (default: the sessions' grace, the give-back's "
                             "wait and 20 s)")
    parser.add_argument("--probe", type=Path, help="a folder for the server's memory probe's figures")
    parser.add_argument("--tracemalloc", action="store_true", help="with --probe: tracemalloc snapshots too")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server (repeatable)")
    args = parser.parse_args()
    probe = Probe(args.probe)

    work = Path(tempfile.mkdtemp(prefix="playground-class-"))
    (work / "gradio").mkdir()
    port = free_port()
    env = {"GRADIO_TEMP_DIR": str(work / "gradio"), "PLAYGROUND_PRELOAD": "1", **probe.env(args.tracemalloc),
           **dict(e.split("=", 1) for e in args.env)}
    server = start_app(port, work / "server.log", env)
    proc = psutil.Process(server.pid)
    url = f"http://127.0.0.1:{port}/"
    figures: dict[str, Any] = {"class_size": args.class_size, "rounds": args.rounds,
                               "max_new_tokens": args.max_new_tokens, "uploads": args.uploads, "env": args.env,
                               "failures": []}
    try:
        deps = {d.get("api_name"): d["id"] for d in httpx.get(f"{url}config", timeout=60).json()["dependencies"]}
        fn_index = deps["generate"]
        warm = Page(url, fn_index)
        warm.run("Warm up.", 4)  # the preload finished, the first run's one-time costs paid
        warm.leave()
        time.sleep(2)
        figures["rss_before_class_mb"] = rss_mb(proc)
        probe.take("before")
        prompts = list(EXAMPLES.values())
        pages = [Page(url, fn_index) for _ in range(args.class_size)]
        with ThreadPoolExecutor(args.class_size) as pool:
            for round_ in range(args.rounds):
                began = time.monotonic()
                record = upload(url, round_) if args.uploads else None

                def visit(numbered: tuple[int, Page]) -> list[str]:
                    number, page = numbered
                    done = [page.run(prompts[number % len(prompts)], args.max_new_tokens)]
                    return done + ([page.replay_upload(url, deps, record)] if record else [])

                results = [r for done in pool.map(visit, enumerate(pages)) for r in done]
                figures["failures"] += [r for r in results if r != "done"]
                runs = (round_ + 1) * args.class_size
                figures[f"rss_after_{runs}_runs_mb"] = rss_mb(proc)
                print(f"round {round_ + 1}: {runs} runs, {time.monotonic() - began:.0f} s, rss {rss_mb(proc)} MB",
                      flush=True)
                if round_ == 0 or round_ == args.rounds - 1:
                    probe.take(f"after_{runs}")
        for page in pages:
            page.leave()
        print(f"the class left; waiting {args.idle:.0f} s", flush=True)
        time.sleep(args.idle)
        figures["rss_after_class_left_mb"] = rss_mb(proc)
        print(f"the class left {args.idle:.0f} s ago: rss {figures['rss_after_class_left_mb']} MB", flush=True)
        probe.take("left")
    finally:
        stop_app(server)
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 1 if figures["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
