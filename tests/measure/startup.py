"""Start-up benchmark: how long a cold and a warm `python app.py` take to answer and to stream a token.

    python tests/measure/startup.py [--json startup.json] [--before /path/to/other/checkout]

Measures, one after the other on this machine (a few minutes on two cores):
- the reference times: a bare `python -c "import torch, transformers"`, the same with gradio (what a warm
  start's first token is held against: the page and the model cannot come sooner than their imports), and a
  plain Transformers load of the bundled GGUF (`AutoModelForCausalLM` + `AutoTokenizer` `.from_pretrained(dir,
  gguf_file=…)`, in a fresh process, imports included: what a cold start's first token is held against);
- cold start: `python app.py` with an empty PLAYGROUND_CACHE_DIR (the conversion runs) until the page
  answers and until the first token of a Generate streams through the real server (the raw
  `/generate` API, called as soon as the page answers; 8 greedy tokens, baseline);
- warm start: the same with the cache the cold start left;
- with `--before`, the same cold and warm starts of another checkout's `app.py` (e.g. main), each right after
  this checkout's, against the same references: before and after in one run;
- the CLI's warm `run` of 8 tokens, and the same work with the dependencies alone (the Rust tokenizer,
  `from_pretrained` of the weights the CLI loads, Transformers' `generate`): what no code of ours can go under.
Then prints each against the issue's goals, with the load average: the machine may be shared.
Timings are measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from appserver import free_port, start_app, stop_app  # noqa: E402
from playground.models import CATALOGUE, DEFAULT_TARGET, dtype_copy_dir, resolve_precision  # noqa: E402
from playground.models.hardware import _cpu_bf16_flags  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "The capital of France is"
COLD_GOAL = 0.40  # cold first token, at most this share of a plain Transformers load of the same GGUF (issue 44)
WARM_GOAL = 2.0  # warm first token, at most this many times importing torch, transformers and gradio (issue 44)

PLAIN_GGUF_LOAD = """
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
folder, name = sys.argv[1], sys.argv[2]
AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
AutoTokenizer.from_pretrained(folder, gguf_file=name)
"""

# The CLI run's work done with the dependencies alone, none of the playground's code: the Rust parse of the
# converted tokenizer.json, the weights the CLI loads, and Transformers' own greedy generate of 8 tokens.
DEPENDENCIES_ALONE = """
import sys, torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM
tokenizer_file, weights, dtype, prompt = sys.argv[1:5]
tokenizer = Tokenizer.from_file(tokenizer_file)
model = AutoModelForCausalLM.from_pretrained(weights, dtype=getattr(torch, dtype))
ids = torch.tensor([tokenizer.encode(prompt).ids])
print(tokenizer.decode(model.generate(ids, max_new_tokens=8, do_sample=False)[0, ids.shape[1]:].tolist()))
"""


def timed(command: list[str], env: dict[str, str] | None = None) -> float:
    """Wall seconds of a fresh process, which must succeed."""
    started = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])}… failed:\n{result.stderr[-3000:]}")
    return seconds


def start_to_first_token(cache_dir: Path, log: Path, root: Path = ROOT) -> dict[str, float]:
    """Launch app.py, wait for the page, then Generate through the raw API: seconds from launch to each.

    The raw HTTP API (not gradio_client, whose set-up fetches and parses the API description: seconds
    on a busy machine) so the figure is the server's.
    """
    port = free_port()
    launched = time.perf_counter()
    server = start_app(port, log, {"PLAYGROUND_CACHE_DIR": str(cache_dir)}, root=root)
    page = time.perf_counter() - launched
    base = f"http://127.0.0.1:{port}/gradio_api/call/generate"
    try:
        # /generate's parameters in order: prompt, target, assistant, method, params, max_new_tokens, sample,
        # temperature, top_p, top_k, seed, chat, dtype, check_plain, preset.
        data: list[Any] = [PROMPT, DEFAULT_TARGET, None, "baseline", {}, 8, False, 1.0, 1.0, 0, 0, "auto", "auto", False, None]
        call = urllib.request.Request(base, data=json.dumps({"data": data}).encode(),
                                      headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(call, timeout=30) as response:
            event_id = json.load(response)["event_id"]
        first_token: float | None = None
        last: Any = None
        with urllib.request.urlopen(f"{base}/{event_id}", timeout=600) as stream:
            for raw in stream:  # server-sent events: "event: …" and "data: [outputs]" lines
                line = raw.decode().strip()
                if not line.startswith("data:") or line == "data: null":
                    continue
                last = json.loads(line[5:])
                tokens = last[0] if isinstance(last, list) and last else None
                if first_token is None and isinstance(tokens, str) and 'class="tok"' in tokens:
                    first_token = time.perf_counter() - launched
        if first_token is None:
            raise RuntimeError(f"no token streamed; last event: {str(last)[:500]}")
    finally:
        stop_app(server)
    return {"page_s": round(page, 1), "first_token_s": round(first_token, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--before", type=Path, help="another checkout (e.g. main) whose app.py starts are measured "
                        "beside this one's, against the same references")
    args = parser.parse_args()
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="playground-startup-"))
    logs = Path(tempfile.mkdtemp(prefix="playground-startup-logs-"))
    env = {**os.environ, "PLAYGROUND_CACHE_DIR": str(work / "cache")}
    os.environ["PLAYGROUND_CACHE_DIR"] = env["PLAYGROUND_CACHE_DIR"]  # what auto resolves to here is the server's
    figures: dict[str, Any] = {}

    print("bare import of torch and transformers…", flush=True)
    figures["import_s"] = round(timed([sys.executable, "-c", "import torch, transformers"]), 1)
    print("bare import of torch, transformers and gradio…", flush=True)
    figures["import_ui_s"] = round(timed([sys.executable, "-c", "import torch, transformers, gradio"]), 1)

    print("plain Transformers load of the bundled GGUF…", flush=True)
    source = CATALOGUE[DEFAULT_TARGET].gguf
    assert source is not None and source.module is not None
    gguf_dir = work / "gguf"
    gguf_dir.mkdir()
    importlib.import_module(source.module).assemble(gguf_dir / source.filename)
    figures["plain_gguf_load_s"] = round(timed([sys.executable, "-c", PLAIN_GGUF_LOAD, str(gguf_dir), source.filename]), 1)

    print("cold start (empty cache: the conversion runs)…", flush=True)
    figures["cold"] = start_to_first_token(work / "cache", logs / "cold.log")
    if args.before:
        print(f"cold start of {args.before}…", flush=True)
        figures["before"] = {"checkout": str(args.before),
                             "cold": start_to_first_token(work / "cache-before", logs / "cold-before.log", args.before)}
    converted = work / "cache" / "converted" / DEFAULT_TARGET.replace("/", "--")
    marker = json.loads((converted / "playground.json").read_text())
    figures["conversion_s"] = marker["conversion_s"]
    print("warm start…", flush=True)
    figures["warm"] = start_to_first_token(work / "cache", logs / "warm.log")
    if args.before:
        print(f"warm start of {args.before}…", flush=True)
        figures["before"]["warm"] = start_to_first_token(work / "cache-before", logs / "warm-before.log", args.before)
    print("CLI warm run of 8 tokens…", flush=True)
    figures["cli_run_s"] = round(timed([sys.executable, "-m", "playground", "run", "--prompt", PROMPT,
                                        "--max-new-tokens", "8", "--quiet"], env), 1)
    print("the same run with the dependencies alone…", flush=True)
    dtype = resolve_precision("auto").dtype
    weights = converted if dtype == "float32" else dtype_copy_dir(converted, dtype)
    figures["dependencies_alone_s"] = round(timed([sys.executable, "-c", DEPENDENCIES_ALONE,
                                                   str(converted / "tokenizer.json"), str(weights), dtype, PROMPT]), 1)
    figures["load_average"] = {"before": [round(x, 2) for x in load_before],
                               "after": [round(x, 2) for x in os.getloadavg()]}
    figures["machine"] = {"cpus": os.cpu_count(), "bf16": list(_cpu_bf16_flags()), "python": platform.python_version()}

    cold, warm = figures["cold"]["first_token_s"], figures["warm"]
    plain, imports = figures["plain_gguf_load_s"], figures["import_ui_s"]
    figures["cold_ratio"] = round(cold / plain, 3)
    figures["warm_ratio"] = round(warm["first_token_s"] / imports, 3)
    rows = [
        ("cold start to first token", f"{cold:.1f} s", "<= 30 s", cold <= 30),
        ("  ... against the plain GGUF load", f"{cold / plain:.2f}x of {plain:.1f} s", f"<= {COLD_GOAL:.2f}x",
         cold <= plain * COLD_GOAL),
        ("  (cold: page answered / conversion)", f"{figures['cold']['page_s']:.1f} s / {figures['conversion_s']:.1f} s",
         "", None),
        ("warm start: page answers", f"{warm['page_s']:.1f} s", "<= 5 s", warm["page_s"] <= 5),
        ("warm start: first token", f"{warm['first_token_s']:.1f} s", "<= 8 s", warm["first_token_s"] <= 8),
        ("  ... against importing torch+transformers+gradio", f"{warm['first_token_s'] / imports:.2f}x of "
         f"{imports:.1f} s", f"<= {WARM_GOAL:.0f}x", warm["first_token_s"] <= imports * WARM_GOAL),
        ("CLI warm run, 8 tokens", f"{figures['cli_run_s']:.1f} s (+{figures['cli_run_s'] - figures['import_s']:.1f} s "
         f"over the bare import, {figures['import_s']:.1f} s)", "<= +2 s",
         figures["cli_run_s"] - figures["import_s"] <= 2),
        ("  ... its work with the dependencies alone", f"{figures['dependencies_alone_s']:.1f} s "
         f"(+{figures['dependencies_alone_s'] - figures['import_s']:.1f} s over the bare import)", "", None),
    ]
    if args.before:
        before = figures["before"]
        cold_b, warm_b = before["cold"]["first_token_s"], before["warm"]["first_token_s"]
        before["cold_ratio"], before["warm_ratio"] = round(cold_b / plain, 3), round(warm_b / imports, 3)
        rows += [
            (f"before ({args.before.name}): cold first token", f"{cold_b:.1f} s: {cold_b / plain:.2f}x of {plain:.1f} s",
             f"<= {COLD_GOAL:.2f}x", cold_b <= plain * COLD_GOAL),
            (f"before ({args.before.name}): warm first token", f"{warm_b:.1f} s: {warm_b / imports:.2f}x of "
             f"{imports:.1f} s", f"<= {WARM_GOAL:.0f}x", warm_b <= imports * WARM_GOAL),
        ]
    print()
    for name, value, goal, met in rows:
        verdict = "" if met is None else ("met" if met else "NOT met")
        print(f"{name:50s} {value:44s} {goal:9s} {verdict}")
    print(f"\n{figures['machine']['cpus']} CPUs, bfloat16 hardware: {', '.join(figures['machine']['bf16']) or 'none'}; "
          f"load average before {figures['load_average']['before']}, after {figures['load_average']['after']}; "
          f"server logs in {logs}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)  # a converted model is a gigabyte
    return 0


if __name__ == "__main__":
    sys.exit(main())
