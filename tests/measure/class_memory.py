"""A class's memory: does the server give back what a class's sessions kept once the class has left?

Starts `python app.py` (the bundled Gemma 3 270M preloaded), then a class of `--class-size` visitors, each a page's
session as a browser holds it: the heartbeat connection open (`/gradio_api/heartbeat/<session>`) and its Generate
calls through Gradio's queue protocol (`--max-new-tokens` prompt-lookup runs, all visitors at once). Prints the
server's resident memory (RSS) before the class, after the first round (one run each: 30 runs by default), after
`--rounds` rounds (120 runs), then after every visitor closed its page (the heartbeat goes: Gradio runs the page's
`unload`, `app.sessions` frees the session's keep after its grace, `LEFT_GRACE_S`) and the grace has passed.

    python tests/measure/class_memory.py                        # 30 visitors, 4 rounds of 32-token runs
    python tests/measure/class_memory.py --max-new-tokens 8 --json artifacts/class-memory.json

Not collected by pytest (the file name does not start with test_).
"""

from __future__ import annotations

import argparse
import json
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
from playground.app.generate_tab import EXAMPLES  # noqa: E402
from playground.app.sessions import LEFT_GRACE_S  # noqa: E402
from playground.models import DEFAULT_TARGET  # noqa: E402

WAIT_S = 900


class Page:
    """One visitor's page: the heartbeat held open in a thread, Generate joined in the queue and read to its end."""

    def __init__(self, url: str, fn_index: int) -> None:
        self.url, self.fn_index = url, fn_index
        self.session = uuid.uuid4().hex[:11]
        self._left = threading.Event()
        self._heart = threading.Thread(target=self._beat, daemon=True)
        self._heart.start()

    def _beat(self) -> None:
        with httpx.stream("GET", f"{self.url}gradio_api/heartbeat/{self.session}", timeout=None) as stream:
            for _ in stream.iter_lines():
                if self._left.is_set():
                    return  # closing the stream is the page closing

    def run(self, prompt: str, tokens: int) -> str:
        data = [prompt, DEFAULT_TARGET, None, "prompt_lookup", {"prompt_lookup_num_tokens": 5}, tokens, False, 1.0,
                1.0, 0, 0, "auto", "auto", False, None]
        body = {"data": data, "fn_index": self.fn_index, "session_hash": self.session, "event_data": None,
                "trigger_id": None}
        httpx.post(f"{self.url}gradio_api/queue/join", json=body, timeout=60).raise_for_status()
        with httpx.stream("GET", f"{self.url}gradio_api/queue/data", params={"session_hash": self.session},
                          timeout=WAIT_S) as stream:
            for line in stream.iter_lines():
                if '"process_completed"' in line:
                    return "done" if 'data-kind=\\"done\\"' in line else line[:300]
        return "the stream ended early"

    def leave(self) -> None:
        self._left.set()


def rss_mb(proc: psutil.Process) -> float:
    return round(proc.memory_info().rss / 2**20, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--class-size", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=4, help="runs per visitor in all")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="playground-class-"))
    (work / "gradio").mkdir()
    port = free_port()
    server = start_app(port, work / "server.log", {"GRADIO_TEMP_DIR": str(work / "gradio"), "PLAYGROUND_PRELOAD": "1"})
    proc = psutil.Process(server.pid)
    url = f"http://127.0.0.1:{port}/"
    figures: dict[str, Any] = {"class_size": args.class_size, "rounds": args.rounds,
                               "max_new_tokens": args.max_new_tokens, "failures": []}
    try:
        fn_index = next(d["id"] for d in httpx.get(f"{url}config", timeout=60).json()["dependencies"]
                        if d.get("api_name") == "generate")
        warm = Page(url, fn_index)
        warm.run("Warm up.", 4)  # the preload finished, the first run's one-time costs paid
        warm.leave()
        time.sleep(2)
        figures["rss_before_class_mb"] = rss_mb(proc)
        prompts = list(EXAMPLES.values())
        pages = [Page(url, fn_index) for _ in range(args.class_size)]
        with ThreadPoolExecutor(args.class_size) as pool:
            for round_ in range(args.rounds):
                began = time.monotonic()
                results = list(pool.map(lambda ip: ip[1].run(prompts[ip[0] % len(prompts)], args.max_new_tokens),
                                        enumerate(pages)))
                figures["failures"] += [r for r in results if r != "done"]
                runs = (round_ + 1) * args.class_size
                figures[f"rss_after_{runs}_runs_mb"] = rss_mb(proc)
                print(f"round {round_ + 1}: {runs} runs, {time.monotonic() - began:.0f} s, rss {rss_mb(proc)} MB",
                      flush=True)
        for page in pages:
            page.leave()
        wait = LEFT_GRACE_S + 15
        print(f"the class left; waiting {wait:.0f} s (the sessions' grace)", flush=True)
        time.sleep(wait)
        figures["rss_after_class_left_mb"] = rss_mb(proc)
    finally:
        stop_app(server)
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 1 if figures["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
