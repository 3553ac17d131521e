"""Hostile-visitor figures of a public server: how soon work stops once its visitor leaves, how long a visitor's short
generation waits while another's long job runs, and what the path-spelling sweep costs in memory.

Starts `python app.py` on a loopback port, configured as a public Space (public mode, one allowed folder holding a
tiny Llama made here, no preload), and talks to it as a raw client does (the queue's join and data endpoints):

1. disconnect: a Tune (9 prompts, 400 new tokens, drafts up to 16) is left once it reports; the server's log says
   how long its worker went on after Gradio closed the handler ("... ended N s after its client left"), and the
   script times the whole stop from closing the connection to that line (Gradio's detection included).
   The same for an MCP agent: a real MCP client starts a Compare (12 generations of 448 tokens) and disconnects
   once the server generates; the time from dropping the connection to the log's "MCP compare stopped" line.
   The same Compare called over the REST API (`/gradio_api/call/mcp_compare`, then its answer's SSE stream) and left
   once the server generates: the time from closing the stream to the log's "... after its client left" line.
2. fair share: a short generation (8 tokens) alone, then the same while another session's Compare at the page's
   limits (every method, 512 tokens, 5 repeats) runs, while another session's Tune (its 448-token baseline and its
   drafter pass) runs, and while another visitor's own 448-token generation streams (page generations take turns
   per step: the script also says whether that generation was still streaming when each short run's first token
   came, and how long it took in all); its wait is the time to its first streamed output.
3. memory: the server's resident memory (VmRSS) before and after generating on `--spellings` spellings of one
   directory (`dir/`, `dir//`, `dir/./`, `/proc/self/root/dir`, ...): one copy is loaded, whatever the spelling.
4. unread: a long `mcp_compare` and `mcp_bench` POSTed to `/gradio_api/call/...` whose answer streams are never
   opened: the seconds from the POST to the log's "ended ...: no answer stream" line and to the call's "MCP ...
   stopped" line, the server's CPU seconds in that time, and its CPU seconds over the 3 s after the work ended.
5. gate: each raw input Gradio answered with a 500, its generic error or by reading on (an fn_index of no handler,
   the JavaScript-only events, an unknown API name, an empty session hash, a 64 KB address, a 30 MB body, a seed
   1e300, the arity message): the status and the line each got.
6. cli: `python -m playground show|code /dev/zero`, `run --prompt-file /dev/zero`, `bench|tune --prompts /dev/zero`:
   exit status, the line on stderr and the peak resident memory.

    python tests/measure/hostile_sweep.py                 # all three, a few minutes
    python tests/measure/hostile_sweep.py --json artifacts/hostile-sweep.json
    python tests/measure/hostile_sweep.py --skip memory fair --json /tmp/disconnect.json   # only the disconnect figures
    python tests/measure/hostile_sweep.py --skip memory disconnect mcp --concurrency 1   # fair share, generations one by one
    python tests/measure/hostile_sweep.py --skip memory disconnect mcp fair   # only issue 36's parts: unread, gate, cli

Figures need a quiet machine: on shared cores the waits measure the neighbours too. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appserver import ARTIFACTS, free_port, raw_request, start_app, stop_app  # noqa: E402
from tiny import build_tokenizer, save_tiny_llama  # noqa: E402

PROMPT = "One, two, three, four, five. One, two,"
WAIT_S = 600  # no single exchange waits longer: a hang ends the script instead of holding the machine


class Client:
    """The raw queue protocol, as a hand-written client speaks it (loopback only)."""

    def __init__(self, url: str) -> None:
        self.url = url
        config = httpx.get(f"{url}config", timeout=30).json()
        self.deps = {d["api_name"]: d for d in config["dependencies"]}

    def join(self, name: str, data: list[Any]) -> str:
        session = uuid.uuid4().hex[:11]
        body = {"data": data, "fn_index": self.deps[name]["id"], "session_hash": session, "event_data": None,
                "trigger_id": None}
        response = httpx.post(f"{self.url}gradio_api/queue/join", json=body, timeout=30)
        response.raise_for_status()
        return session

    def stream(self, session: str) -> Any:
        return httpx.stream("GET", f"{self.url}gradio_api/queue/data", params={"session_hash": session},
                            timeout=WAIT_S)


def rss_mb(pid: int) -> float:
    """The process's resident memory in MB (VmRSS)."""
    text = Path(f"/proc/{pid}/status").read_text()
    hit = re.search(r"VmRSS:\s+(\d+) kB", text)
    assert hit is not None
    return int(hit.group(1)) / 1024


def generate_args(target: str, tokens: int, prompt: str = PROMPT) -> list[Any]:
    return [prompt, target, None, "baseline", {}, tokens, False, 1.0, 1.0, 0, 0, "auto", "float32", False, None]


def disconnect_stop(client: Client, target: str, log: Path) -> dict[str, Any]:
    """Leave a long Tune once it reports; the seconds until its worker ended (by the server's log)."""
    more = "\n".join(f"Prompt number {i}: one, two, three, four, five, six, seven." for i in range(8))
    data: list[Any] = [PROMPT, target, None, "prompt_lookup", {}, "float32", "auto", 400, 16, more]
    start = len(log.read_bytes())
    session = client.join("tune_page", data)
    with client.stream(session) as stream:
        for line in stream.iter_lines():
            if "Tuning" in line:
                break
    left = time.monotonic()
    while time.monotonic() - left < 120:
        found = re.search(r"playground-tune ended ([\d.]+) s after its client left",
                          log.read_bytes()[start:].decode(errors="replace"))  # `start` counts bytes
        if found:
            return {"stopped_after_leaving_s": round(time.monotonic() - left, 2),
                    "worker_after_handler_closed_s": float(found.group(1))}
        time.sleep(0.1)
    return {"stopped_after_leaving_s": None, "note": "the Tune's worker did not end within 120 s"}


def worker_threads(pid: int) -> int:
    """Generation worker threads now alive in the server (their OS name, `engine.WORKER_OS_THREAD_NAME`)."""
    count = 0
    for comm in Path(f"/proc/{pid}/task").glob("*/comm"):
        try:
            count += comm.read_text().strip() == "pg-generate"
        except OSError:
            pass
    return count


def mcp_disconnect_stop(url: str, target: str, pid: int, log: Path) -> dict[str, Any]:
    """A real MCP client starts a long Compare and disconnects once the server generates; seconds until the call's
    work ended (by the server's log line)."""
    try:
        from mcp.client.session import ClientSession
        from mcp.client.streamable_http import streamable_http_client
    except ImportError:
        return {"note": "the mcp package (gradio[mcp]) is not installed"}

    arguments = {"prompt": PROMPT, "methods": "prompt_lookup:prompt_lookup_num_tokens=3", "target": target,
                 "max_new_tokens": 448, "repeats": 5, "dtype": "float32"}

    async def call() -> None:
        async with streamable_http_client(f"{url}gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await session.call_tool("compare", arguments)

    async def call_and_leave() -> float | None:
        task = asyncio.ensure_future(call())
        began = time.monotonic()
        while worker_threads(pid) == 0:
            if task.done() or time.monotonic() - began > 120:
                return None
            await asyncio.sleep(0.05)
        task.cancel()
        left = time.monotonic()
        try:
            await task
        except BaseException:  # noqa: BLE001  (the cancellation, or the transport's error on the way out)
            pass
        return left

    start = len(log.read_bytes())
    left = asyncio.run(call_and_leave())
    if left is None:
        return {"note": "the MCP compare did not start generating within 120 s"}
    return compare_stop_logged(log, start, left, "agent", "work_after_cancel_s")


def compare_stop_logged(log: Path, start: int, left: float, who: str, work_after: str) -> dict[str, Any]:
    """Wait for the log's line (after byte `start`) saying the MCP compare's work ended after its `who` (agent,
    client) left at `left`; the seconds from leaving to that line, and the work's own figure under `work_after`."""
    while time.monotonic() - left < 120:
        found = re.search(rf"MCP compare (stopped|finished its work) ([\d.]+) s after its {who} left",
                          log.read_bytes()[start:].decode(errors="replace"))
        if found:
            return {"stopped": found.group(1) == "stopped",
                    "stopped_after_leaving_s": round(time.monotonic() - left, 2),
                    work_after: float(found.group(2))}
        time.sleep(0.1)
    return {"stopped_after_leaving_s": None, "note": f"the compare its {who} left did not end within 120 s"}


def rest_disconnect_stop(url: str, target: str, pid: int, log: Path) -> dict[str, Any]:
    """The MCP Compare called over the REST API (`/gradio_api/call/mcp_compare`); its answer's stream is closed once
    the server generates; seconds until the call's work ended (by the server's log line)."""
    import socket

    data = [PROMPT, "prompt_lookup:prompt_lookup_num_tokens=3", target, "", 448, 5, "float32"]
    queued = httpx.post(f"{url}gradio_api/call/mcp_compare", json={"data": data}, timeout=30)
    if queued.status_code != 200:
        return {"note": f"the REST call was refused: {queued.text[:200]}"}
    start = len(log.read_bytes())
    port = int(url.rstrip("/").rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:  # the answer's SSE stream, raw
        sock.sendall(f"GET /gradio_api/call/mcp_compare/{queued.json()['event_id']} HTTP/1.1\r\n"
                     f"Host: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\r\n".encode())
        began = time.monotonic()
        while worker_threads(pid) == 0:
            if time.monotonic() - began > 120:
                return {"note": "the REST compare did not start generating within 120 s"}
            time.sleep(0.05)
    left = time.monotonic()  # the socket is closed: the client has left
    return compare_stop_logged(log, start, left, "client", "work_after_noticed_s")


def short_run_s(client: Client, target: str) -> tuple[float, float]:
    """(seconds to the first streamed token output, seconds to the end) of an 8-token generation."""
    began = time.monotonic()
    session = client.join("generate", generate_args(target, 8))
    first = None
    with client.stream(session) as stream:
        for line in stream.iter_lines():
            if first is None and '"process_generating"' in line and "data-step" in line:  # a token shown
                first = time.monotonic() - began
            if '"process_completed"' in line:
                break
    end = time.monotonic() - began
    return (first if first is not None else end), end


def fair_share(client: Client, target: str) -> dict[str, Any]:
    """A short generation alone, then while another session's Compare at the page's limits runs."""
    alone = [short_run_s(client, target) for _ in range(3)]
    # prompt, target, assistant, method, dtype, chat, methods, tokens, repeats, baselines, then one value per
    # distinct method parameter (the page's order): every method the tiny model runs, near its context, 5 repeats.
    compare = [PROMPT, target, target, "prompt_lookup", "float32", "auto", ["prompt_lookup", "speculative"], 448, 5,
               None, 5, "constant", 0.0, 1.0, 10, 2, 4]
    session = client.join("compare", compare)
    during: list[tuple[float, float]] = []
    last = ""
    with client.stream(session) as stream:
        for line in stream.iter_lines():
            last = line or last
            if "rep 1/5" in line:  # the comparison measures now; a visitor's short run comes meanwhile
                during = [short_run_s(client, target) for _ in range(3)]
                break  # leaving ends the comparison
            if '"process_completed"' in line:
                alert = re.search(r"⚠[^<]*", json.loads(line[5:]).__repr__())
                return {"compare_ended_before_measuring": alert.group(0) if alert else line[-400:]}
    figures = {"short_run_alone_first_token_s": [round(a, 2) for a, _ in alone],
               "short_run_during_compare_first_token_s": [round(a, 2) for a, _ in during],
               "short_run_during_compare_total_s": [round(b, 2) for _, b in during]}
    figures.update(during_long_job(client, target, "tune_page", tune_args(target), "Tuning", "tune"))
    figures.update(during_visitor_generation(client, target, 448))
    return figures


def during_visitor_generation(client: Client, target: str, tokens: int) -> dict[str, Any]:
    """Short runs while another visitor's own `tokens`-token generation streams (read in a thread of its own): each
    short run's first-token wait and whole time, whether the long generation was still streaming when that first
    token came (with turns per step it is; served one at a time it is not), and the long generation's time in all."""
    import threading

    session = client.join("generate", generate_args(target, tokens))
    begun, done = threading.Event(), threading.Event()
    times: dict[str, float] = {}

    def follow() -> None:
        began = time.monotonic()
        with client.stream(session) as stream:
            for line in stream.iter_lines():
                if "data-step" in line:
                    begun.set()
                if '"process_completed"' in line:
                    times["failed"] = '"success": false' in line or "pg-alert" in line
                    break
        times["long_s"] = time.monotonic() - began
        done.set()
        begun.set()

    threading.Thread(target=follow, daemon=True).start()
    begun.wait(WAIT_S)
    during: list[tuple[float, float, bool]] = []
    for _ in range(3):
        first, whole = short_run_s(client, target)
        during.append((first, whole, not done.is_set()))
    done.wait(WAIT_S)
    label = f"short_run_during_another_visitors_{tokens}_token_generation"
    return {f"{label}_first_token_s": [round(a, 2) for a, _, _ in during],
            f"{label}_total_s": [round(b, 2) for _, b, _ in during],
            f"{label}_still_streaming_after_short_run": [c for _, _, c in during],
            f"another_visitors_{tokens}_token_generation_s": round(times.get("long_s", float("nan")), 2),
            f"another_visitors_{tokens}_token_generation_failed": times.get("failed")}


def tune_args(target: str) -> list[Any]:
    more = "\n".join(f"Prompt number {i}: one, two, three, four, five, six, seven." for i in range(8))
    return [PROMPT, target, None, "prompt_lookup", {}, "float32", "auto", 448, 16, more]


def during_long_job(client: Client, target: str, name: str, data: list[Any], begun: str, label: str
                    ) -> dict[str, Any]:
    """Short runs while another session's `name` runs (from the first line holding `begun`); then that session
    leaves."""
    session = client.join(name, data)
    during: list[tuple[float, float]] = []
    with client.stream(session) as stream:
        for line in stream.iter_lines():
            if begun in line:
                during = [short_run_s(client, target) for _ in range(3)]
                break  # leaving ends the other session's work
            if '"process_completed"' in line:
                return {f"short_run_during_{label}": "it ended before the short runs: " + line[-300:]}
    return {f"short_run_during_{label}_first_token_s": [round(a, 2) for a, _ in during],
            f"short_run_during_{label}_total_s": [round(b, 2) for _, b in during]}


def spelling_sweep(client: Client, target: str, pid: int, spellings: int) -> dict[str, Any]:
    """RSS before and after generating on many spellings of one directory."""
    real = str(Path(target).resolve())
    variants = [target, target + "/", target + "//", target + "/./", "/proc/self/root" + real, real]
    variants += [target + "/." * k for k in range(2, spellings)]
    variants = variants[:spellings]
    for _ in range(2):  # torch's first-call set-up and the one copy are in "before"
        short_run_s(client, target)
    before = rss_mb(pid)
    failed = 0
    for spelling in variants:
        session = client.join("generate", generate_args(spelling, 2))
        with client.stream(session) as stream:
            for line in stream.iter_lines():
                if '"process_completed"' in line:
                    failed += '"success": false' in line or "pg-alert" in line
                    break
    return {"spellings": len(variants), "failed": failed, "rss_before_mb": round(before, 1),
            "rss_after_mb": round(rss_mb(pid), 1)}


def cpu_s(pid: int) -> float:
    """The process's CPU time (user + system, all threads) in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def log_line_after(log: Path, start: int, fragment: str, within_s: float) -> tuple[float, str] | None:
    """(when, the line) of the first log line after byte `start` holding `fragment`."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        text = log.read_bytes()[start:].decode(errors="replace")
        line = next((ln for ln in text.splitlines() if fragment in ln), None)
        if line:
            return time.monotonic(), line
        time.sleep(0.05)
    return None


def long_context_copy(target: str) -> str:
    """A copy of the tiny target with a 16k context, beside it: Spec-Bench's prompts and 448 new tokens fit."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    long = Path(target).parent / "long"
    model = LlamaForCausalLM.from_pretrained(target)
    model.config.max_position_embeddings = 16384
    model.save_pretrained(long)
    AutoTokenizer.from_pretrained(target).save_pretrained(long)
    return str(long)


def unread_calls(url: str, target: str, pid: int, log: Path) -> dict[str, Any]:
    """Long MCP calls queued over REST whose answer streams are never opened: when each ends, what it cost."""
    from playground.settings import get_settings

    target = long_context_copy(target)
    calls = {"compare": ("mcp_compare", [PROMPT, "prompt_lookup:prompt_lookup_num_tokens=3", target, "", 448, 5,
                                         "float32"]),
             "bench": ("mcp_bench", ["prompt_lookup:prompt_lookup_num_tokens=3", "", 1, target, "", 448, 5,
                                     "float32"])}
    figures: dict[str, Any] = {}
    for tool, (name, data) in calls.items():
        start, cpu0 = len(log.read_bytes()), cpu_s(pid)
        posted = time.monotonic()
        queued = httpx.post(f"{url}gradio_api/call/{name}", json={"data": data}, timeout=60)
        assert queued.status_code == 200, queued.text
        ended = log_line_after(log, start, f"ended {name}: no answer stream", get_settings().stream_open_s + 60)
        stopped = log_line_after(log, start, f"MCP {tool} ", 60)
        deadline = time.monotonic() + 60
        while worker_threads(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        cpu1 = cpu_s(pid)
        time.sleep(3)
        figures[name] = {"ended_after_s": round(ended[0] - posted, 1) if ended else None,
                         "work_stopped_after_s": round(stopped[0] - posted, 1) if stopped else None,
                         "stop_line": stopped[1].split(": ", 1)[-1] if stopped else None,
                         "server_cpu_s_until_stopped": round(cpu1 - cpu0, 2),
                         "server_cpu_s_over_3_s_after": round(cpu_s(pid) - cpu1, 2)}
    return figures


def gate_answers(url: str) -> dict[str, Any]:
    """What each raw input Gradio could not place got: (status, the line)."""
    config = httpx.get(f"{url}config", timeout=30).json()
    js_only = [d["id"] for d in config["dependencies"] if not d.get("backend_fn")]
    top = max(d["id"] for d in config["dependencies"])

    def said(response: httpx.Response) -> tuple[int, str]:
        try:
            body = response.json()
            return response.status_code, str(body.get("detail") or body.get("error"))[:200]
        except ValueError:
            return response.status_code, response.text[:200]

    join = f"{url}gradio_api/queue/join"
    out: dict[str, Any] = {
        "fn_index out of range": said(httpx.post(join, json={"data": [], "fn_index": top + 1, "session_hash": "s"})),
        "empty session_hash": said(httpx.post(join, json={"data": [], "fn_index": 0, "session_hash": ""})),
        "unknown API name (call)": said(httpx.post(f"{url}gradio_api/call/nope", json={"data": []})),
        "unknown API name (run)": said(httpx.post(f"{url}gradio_api/run/nope", json={"data": []})),
        "arity message": said(httpx.post(f"{url}gradio_api/run/mcp_generate", json={"data": ["x"]})),
        "seed 1e300": said(httpx.post(f"{url}gradio_api/run/mcp_generate", timeout=60, json={
            "data": ["x", "t", "baseline", "", "{}", 4, True, 1.0, 1e300, "float32", ""]})),
    }
    for index in js_only:
        for route in ("queue/join", "run/predict"):
            out[f"JavaScript-only event {index} ({route})"] = said(httpx.post(
                f"{url}gradio_api/{route}", json={"data": [], "fn_index": index, "session_hash": "s"}))
    for path in ("/?lang=" + "x" * 65536, "/gradio_api/queue/data?session_hash=" + "x" * 65536):
        out[f"64 KB address {path[:24]}..."] = raw_request(
            url, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    for path in ("/gradio_api/mcp/", "/gradio_api/run/mcp_generate"):
        began = time.monotonic()
        status, body = raw_request(url, (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                         f"Content-Length: {30 * 1024 * 1024}\r\nConnection: close\r\n\r\n").encode())
        out[f"30 MB body announced to {path}"] = (status, body[:200], f"{time.monotonic() - began:.2f} s, 0 bytes sent")
    out["30 MB body without a length to /gradio_api/run/mcp_generate"] = said(httpx.post(
        f"{url}gradio_api/run/mcp_generate", content=(b" " * (1024 * 1024) for _ in range(30)),
        headers={"content-type": "application/json"}, timeout=60))
    return out


def cli_endless_files() -> dict[str, Any]:
    """Every file the CLI reads given /dev/zero: exit status, stderr, peak memory (MB) measured from a small parent."""
    measure = ("import resource, subprocess, sys\n"
               "r = subprocess.run([sys.executable, '-m', 'playground', *sys.argv[1:]], stdout=subprocess.DEVNULL)\n"
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)")
    root = Path(__file__).resolve().parents[2]
    out = {}
    for argv in (["show", "/dev/zero"], ["code", "/dev/zero"], ["run", "--prompt-file", "/dev/zero", "--quiet"],
                 ["bench", "--prompts", "/dev/zero", "--quiet"], ["tune", "--prompts", "/dev/zero", "--quiet"]):
        import subprocess

        began = time.monotonic()
        done = subprocess.run([sys.executable, "-c", measure, *argv], cwd=root, capture_output=True, text=True,
                              timeout=WAIT_S)
        out[" ".join(argv)] = {"exit": done.returncode, "stderr": done.stderr.strip()[-200:],
                               "peak_rss_mb": round(int(done.stdout.split()[-1]) / 1024),
                               "wall_s": round(time.monotonic() - began, 1)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spellings", type=int, default=24, help="spellings of the model directory to load")
    parser.add_argument("--skip", nargs="*", default=[], choices=["disconnect", "mcp", "fair", "memory", "unread", "gate",
                                                                     "cli"])
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--concurrency", type=int, help="the server's PLAYGROUND_CONCURRENCY (default: its own)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="pg-hostile-sweep-"))
    allowed = work / "allowed"
    target = str(save_tiny_llama(allowed / "target", seed=0, tokenizer=build_tokenizer()))
    tmp = work / "tmp"
    tmp.mkdir()
    ARTIFACTS.mkdir(exist_ok=True)
    log = ARTIFACTS / "hostile-sweep-server.log"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PLAYGROUND_", "GRADIO_"))}
    extra = {"PLAYGROUND_PRELOAD": "0", "PLAYGROUND_PUBLIC": "1", "PLAYGROUND_ALLOWED_DIRS": str(allowed),
             "PLAYGROUND_MAX_NEW_TOKENS": "512", "PLAYGROUND_MCP": "1", "TMPDIR": str(tmp),
             "GRADIO_TEMP_DIR": str(tmp / "gradio")}
    if args.concurrency:
        extra["PLAYGROUND_CONCURRENCY"] = str(args.concurrency)
    port = free_port()
    proc = start_app(port, log, extra, base_env=base)
    figures: dict[str, Any] = {"note": "figures need a quiet machine: on shared cores they measure the neighbours"}
    try:
        client = Client(f"http://127.0.0.1:{port}/")
        if "memory" not in args.skip:
            figures["memory"] = spelling_sweep(client, target, proc.pid, args.spellings)
            print("memory:", figures["memory"], flush=True)
        if "disconnect" not in args.skip:
            figures["disconnect"] = disconnect_stop(client, target, log)
            print("disconnect:", figures["disconnect"], flush=True)
        if "mcp" not in args.skip:
            figures["mcp_disconnect"] = mcp_disconnect_stop(f"http://127.0.0.1:{port}/", target, proc.pid, log)
            print("MCP disconnect:", figures["mcp_disconnect"], flush=True)
            figures["rest_disconnect"] = rest_disconnect_stop(f"http://127.0.0.1:{port}/", target, proc.pid, log)
            print("REST disconnect:", figures["rest_disconnect"], flush=True)
        if "fair" not in args.skip:
            figures["fair_share"] = fair_share(client, target)
            print("fair share:", figures["fair_share"], flush=True)
        if "unread" not in args.skip:
            figures["unread"] = unread_calls(f"http://127.0.0.1:{port}/", target, proc.pid, log)
            print("unread:", figures["unread"], flush=True)
        if "gate" not in args.skip:
            figures["gate"] = gate_answers(f"http://127.0.0.1:{port}/")
            print("gate:", json.dumps(figures["gate"], indent=1, ensure_ascii=False), flush=True)
        if "cli" not in args.skip:
            figures["cli"] = cli_endless_files()
            print("cli:", json.dumps(figures["cli"], indent=1), flush=True)
    finally:
        stop_app(proc)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
