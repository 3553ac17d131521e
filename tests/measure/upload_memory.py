"""Uploaded traces in total: does the server's memory stay bounded when many sessions each upload the largest trace?

Starts `python app.py` as a public Space would (`SYSTEM=spaces`, `SPACE_ID` set, no preload), writes a valid trace
just under the upload limit (a sampling speculative run with the microscope's top-k lists, about 19.9 MB), uploads it
once, then `--sessions` sessions each load it in the replay through Gradio's queue protocol (the page's own upload
handler, each session from its own address in X-Forwarded-For, as a Space's proxy passes it) and step once. Prints the
server's resident memory (RSS) and CPU time before, every `--every` sessions and after all, then what each session's
next step shows: its upload still held (steps shown), let go for the budget (our line), or the empty replay (the session
itself freed: no event touched it for `sessions.IDLE_SESSION_S`, 30 minutes, as the sweep frees a visitor who left: a
run over 30 minutes loses its first sessions so, and they are not uploads the budget kept), and the RSS after `--idle`
seconds more.

    python tests/measure/upload_memory.py                                  # 200 sessions, this checkout
    python tests/measure/upload_memory.py --sessions 20 --root /tmp/main   # another checkout (e.g. `git archive main`)

The file is uploaded once and its record sent by every session (the handler reads and parses it for each, which is
what costs memory; Gradio's copies of the upload on disk are not what this measures). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
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
from playground.app.sessions import IDLE_SESSION_S  # noqa: E402
from playground.outside import MAX_INPUT_BYTES  # noqa: E402
from playground.trace import Position, Ranked, Step, Trace  # noqa: E402

WAIT_S = 180  # a call whose stream the server ended (the gate: no stream open in time) sends nothing more


def largest_trace(limit: int = MAX_INPUT_BYTES) -> bytes:
    """A valid trace as JSON, as long as fits under `limit`: steps of eight drafts, seven kept, with q, p, the draws
    and five-entry top-k lists of p and q at every position."""
    rng = random.Random(0)

    def step(i: int) -> Step:
        drafted = [rng.randrange(1000, 30000) for _ in range(8)]
        emitted = drafted[:7] + [rng.randrange(1000, 30000)]
        ranked = lambda: [Ranked(rng.randrange(1000, 30000), rng.random(), f"tok{k}") for k in range(5)]  # noqa: E731
        return Step(index=i, drafted=drafted, accepted=7, rejected=drafted[7:], emitted=emitted,
                    drafted_text=[f"t{d}" for d in drafted], emitted_text=[f"t{e}" for e in emitted],
                    draft_ms=rng.random(), verify_ms=rng.random(), q=[rng.random() for _ in drafted],
                    p=[rng.random() for _ in drafted], draws=[rng.random() for _ in drafted],
                    dists=[Position(p=ranked(), p_drafted=rng.random(), p_emitted=rng.random(), q=ranked(),
                                    q_drafted=rng.random()) for _ in emitted])

    def trace(n: int) -> bytes:
        steps = [step(i) for i in range(n)]
        made = Trace(method="speculative", target="t", assistant="t", prompt="x", params={"num_assistant_tokens": 8},
                     decoding={"sample": True, "max_new_tokens": 8 * n, "temperature": 1.0},
                     output_ids=[e for s in steps for e in s.emitted], steps=steps, vocab_size=32000)
        made.summarize(1.0)
        return made.to_json().encode()

    per_step = len(trace(100)) / 100
    n = int(limit / per_step * 0.99)
    data = trace(n)
    while len(data) > limit:
        n = int(n * 0.99)
        data = trace(n)
    return data


def window_trace(n_steps: int = 512, drafts: int = 64) -> bytes:
    """A real run's longest replay window (as tests/test_hostile4.py's `_steps_of`): `n_steps` prompt-lookup steps of
    `drafts` refused drafts " word"; a move to its last step answers about 3.6 MB of text."""
    steps = [Step(index=i, drafted=[5] * drafts, accepted=0, rejected=[5], discarded=[5] * (drafts - 1), emitted=[7],
                  drafted_text=[" word"] * drafts, emitted_text=[" word"], draft_ms=1.0, verify_ms=1.0)
             for i in range(n_steps)]
    made = Trace(method="prompt_lookup", target="t", prompt="x", output_ids=[7] * n_steps, steps=steps, vocab_size=10)
    made.summarize(1.0)
    return made.to_json().encode()


def call(url: str, fn_index: int, data: list[Any], session: str, address: str) -> dict[str, Any]:
    """Join a handler in the queue as a page does and read its answer to the end (the last message). A call without
    its end says why: the server answered the stream with no session (404: the gate had ended the call, its stream not
    open in time, PLAYGROUND_STREAM_OPEN_S), the stream closed, or no end within WAIT_S; with how long the join
    took and how long after it the stream answered (a busy machine's delays, client and server together)."""
    headers = {"x-forwarded-for": address}
    body = {"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None, "trigger_id": None}
    began = time.monotonic()
    try:
        httpx.post(f"{url}gradio_api/queue/join", json=body, headers=headers, timeout=60).raise_for_status()
        joined = time.monotonic()
        deadline = joined + WAIT_S  # the stream's heartbeats go on after the server ended a call
        with httpx.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": session}, headers=headers,
                          timeout=WAIT_S) as stream:
            answered = time.monotonic()
            timing = f"join {joined - began:.1f} s, stream answered {answered - joined:.1f} s after it"
            if stream.status_code == 404:
                return {"msg": f"the call was ended before its stream opened (404; {timing})"}
            for line in stream.iter_lines():
                if line.startswith("data:") and (message := json.loads(line[5:])).get("msg") == "process_completed":
                    return message
                if time.monotonic() > deadline:
                    return {"msg": f"no end within {WAIT_S} s ({timing})"}
    except httpx.HTTPError as exc:  # counted among the failures, the measurement goes on
        return {"msg": f"{type(exc).__name__}: {exc}"}
    return {"msg": f"the stream ended early ({timing})"}


def predict(url: str, fn_index: int, data: list[Any], session: str, address: str) -> dict[str, Any]:
    """Call a handler the page calls outside the queue (the replay's slider)."""
    body = {"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None, "trigger_id": None}
    answer = httpx.post(f"{url}gradio_api/run/predict", json=body, headers={"x-forwarded-for": address},
                        timeout=WAIT_S)
    answered = answer.json() if answer.status_code == 200 else {}
    tokens = (answered.get("data") or [None])[0]
    return {"success": answer.status_code == 200 and not answered.get("error"), "text": answer.text[:300],
            "steps_shown": isinstance(tokens, str) and 'class="pg-step' in tokens}  # the empty replay shows none


def fate(stepped: dict[str, Any]) -> str:
    """What a session's step shows of its upload: "held" (its steps), "let go" (the budget's line), "freed" (the empty
    replay: the session itself is gone, its State value with it), or "other"."""
    if stepped["success"]:
        return "held" if stepped["steps_shown"] else "freed"
    return "let go" if "let go" in stepped["text"] else "other"


def figures_of(proc: psutil.Process) -> tuple[float, float]:
    """(RSS in MB, CPU seconds so far) of the server."""
    times = proc.cpu_times()
    return round(proc.memory_info().rss / 2**20, 1), round(times.user + times.system, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--idle", type=float, default=60.0, help="seconds to wait after the last session")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose app.py to serve")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server (repeatable)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--window", action="store_true",
                        help="a real run's longest replay window (512 steps) instead of the largest file, each session "
                             "moving to its last step: what Gradio keeps of the sessions' answers")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="playground-uploads-"))
    (work / "gradio").mkdir()
    trace = window_trace() if args.window else largest_trace()
    step = 512 if args.window else 1
    env = {"GRADIO_TEMP_DIR": str(work / "gradio"), "TMPDIR": str(work), "PLAYGROUND_PRELOAD": "0",
           "SYSTEM": "spaces", "SPACE_ID": "measure/upload-memory", **dict(e.split("=", 1) for e in args.env)}
    port = free_port()
    server = start_app(port, work / "server.log", env, root=args.root.resolve())
    proc = psutil.Process(server.pid)
    url = f"http://127.0.0.1:{port}/"
    figures: dict[str, Any] = {"sessions": args.sessions, "trace_bytes": len(trace), "root": str(args.root),
                               "env": args.env, "rss_mb": {}, "cpu_s": {}, "failures": []}
    try:
        deps = {d.get("api_name"): d["id"] for d in httpx.get(f"{url}config", timeout=60).json()["dependencies"]}
        uploaded = httpx.post(f"{url}gradio_api/upload", files={"files": ("largest.json", trace)}, timeout=120)
        record = {"path": uploaded.json()[0], "orig_name": "largest.json", "meta": {"_type": "gradio.FileData"}}
        time.sleep(2)
        figures["rss_mb"]["0"], figures["cpu_s"]["0"] = figures_of(proc)
        print(f"trace {len(trace):,} bytes; before: rss {figures['rss_mb']['0']} MB", flush=True)
        sessions = [(uuid.uuid4().hex[:11], f"10.{n // 250}.{n % 250}.1") for n in range(args.sessions)]

        loaded_at: dict[str, float] = {}  # session -> when its upload was loaded

        def visit(visitor: tuple[str, str]) -> str:
            session, address = visitor
            loaded = call(url, deps["on_trace_upload"], [record], session, address)
            if 'data-kind=\\"done\\"' not in json.dumps(loaded):
                return f"upload: {json.dumps(loaded)[:300]}"
            loaded_at[session] = time.monotonic()
            stepped = predict(url, deps["replay_view"], [None, step], session, address)
            return "ok" if stepped["success"] else f"step: {stepped['text']}"

        began = time.monotonic()
        with ThreadPoolExecutor(3) as pool:
            for start in range(0, args.sessions, args.every):
                results = list(pool.map(visit, sessions[start:start + args.every]))
                figures["failures"] += [r for r in results if r != "ok"]
                done = min(start + args.every, args.sessions)
                figures["rss_mb"][str(done)], figures["cpu_s"][str(done)] = figures_of(proc)
                print(f"{done} sessions: rss {figures['rss_mb'][str(done)]} MB, server cpu "
                      f"{figures['cpu_s'][str(done)]} s, {time.monotonic() - began:.0f} s", flush=True)
        fates = {"held": 0, "let go": 0, "freed": 0, "other": 0, "never loaded": 0}
        idle_old = 0  # sessions loaded more than IDLE_SESSION_S before their check: the idle sweep's, not the budget's
        for session, address in sessions:
            if session not in loaded_at:
                fates["never loaded"] += 1
                continue
            idle_old += time.monotonic() - loaded_at[session] > IDLE_SESSION_S
            fates[fate(predict(url, deps["replay_view"], [None, step], session, address))] += 1
        figures["sessions_still_stepping"] = fates["held"]
        figures["fates"], figures["loaded_over_idle_limit_before"] = fates, idle_old
        print(f"sessions still stepping through their upload: {fates['held']} of {args.sessions}; let go for the "
              f"budget {fates['let go']}; freed as idle sessions {fates['freed']} ({idle_old} loaded more than "
              f"{IDLE_SESSION_S / 60:.0f} min before their check); other {fates['other']}; never loaded "
              f"{fates['never loaded']}", flush=True)
        time.sleep(args.idle)
        figures["rss_mb"]["idle"], figures["cpu_s"]["idle"] = figures_of(proc)
        print(f"after {args.idle:.0f} s idle: rss {figures['rss_mb']['idle']} MB", flush=True)
    finally:
        stop_app(server)
    report = json.dumps(figures, indent=2)
    print(report)
    if args.json:  # beside the printed figures, for a later comparison
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(report + "\n")
    return 0 if not figures["failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
