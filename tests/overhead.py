"""The instrumented engine's own cost: its run time ÷ a plain generate() with the same arguments (a benchmark).

Usage (the figures need a quiet machine):

    python tests/overhead.py [auto|float32|bfloat16]              # bundled Gemma, warm, one process
    python tests/overhead.py bfloat16 --fresh 5                     # ... and 5 alternating pairs of fresh processes
    python tests/overhead.py float32 --tiny --fresh 5               # the tiny test models instead
    python tests/overhead.py bfloat16 --fresh 5 --max-new-tokens 96  # the issue-25 setting

Warm: per method, 5 interleaved pairs after a warm-up in one process (both in worker threads); the median ratio
of the instrumented run's time to plain generate()'s, tokens/s, and whether the outputs matched. Fresh: each pair
is two new processes, alternating: the CLI (`python -m playground run --trace-out`, its generation time from the
trace) and a process that prepares the same request and times one plain generate() (its first, as the CLI's is).
Goals (issue 25): ≤ 1.03 warm and ≤ 1.05 fresh for baseline and prompt lookup on the bundled Gemma; ≤ 1.10 on the
tiny models.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

PROMPT = ("Here is a list of fruits: apple, banana, cherry, date, elderberry, fig, grape. "
          "Again, the list of fruits: apple,")
BUNDLED_CASES = [("baseline", None, {}), ("prompt_lookup", None, {"prompt_lookup_num_tokens": 5})]


def tiny_models(root: Path) -> dict[str, str]:
    """The tests' tiny target and its noisy copy (same tokenizer), saved under `root`."""
    from tiny import build_tokenizer, save_tiny_llama

    tok = build_tokenizer()
    target = save_tiny_llama(root / "target", seed=0, tokenizer=tok)
    noisy = save_tiny_llama(root / "noisy", seed=1, tokenizer=tok, perturb_from=target, noise=0.3)
    return {"target": str(target), "noisy": str(noisy)}


def warm(target: str, cases: list, dtype: str, new_tokens: int, chat: bool | None) -> None:
    from playground.engine import LiveRun, RunRequest, plain_generate, prepare

    for method, assistant, params in cases:
        prepared = prepare(RunRequest(prompt=PROMPT, target=target, method=method, assistant=assistant, params=params,
                                      max_new_tokens=new_tokens, dtype=dtype, chat=chat))
        LiveRun(prepared).run()
        plain_generate(prepared)  # warm-up
        ratios, same = [], True
        for _ in range(5):
            trace = LiveRun(prepared).run()
            ids, plain_s = plain_generate(prepared)
            same &= ids == trace.output_ids
            ratios.append(trace.summary.elapsed_s / plain_s)
        s = trace.summary
        print(f"warm {method} {trace.env.get('dtype')}: median ratio {statistics.median(ratios):.3f} "
              f"{[round(r, 3) for r in ratios]}; {s.new_tokens} tokens in {s.elapsed_s:.2f} s = "
              f"{s.tokens_per_s:.1f} tok/s, {s.tokens_per_step:.2f} tokens/step; outputs equal: {same}", flush=True)


def _cli(target: str, method: str, assistant: str | None, params: dict, dtype: str, new_tokens: int,
         chat: bool | None, trace_out: Path) -> tuple[list[int], float]:
    command = [sys.executable, "-m", "playground", "run", "--target", target, "--method", method, "--prompt", PROMPT,
               "--max-new-tokens", str(new_tokens), "--dtype", dtype, "--quiet", "--trace-out", str(trace_out)]
    command += ["--assistant", assistant] if assistant else []
    command += [arg for k, v in params.items() for arg in ("--set", f"{k}={v}")]
    command += [] if chat is None else ["--chat" if chat else "--no-chat"]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    trace = json.loads(trace_out.read_text(encoding="utf-8"))
    return trace["output_ids"], trace["summary"]["elapsed_s"]


def _plain(request: dict) -> tuple[list[int], float]:
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--plain-child", json.dumps(request)],
                         cwd=ROOT, check=True, capture_output=True, text=True)
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    return answer["ids"], answer["seconds"]


def plain_child(request: dict) -> None:
    """In a fresh process: prepare the request as the CLI does and time its first plain generate()."""
    from playground.engine import RunRequest, plain_generate, prepare

    ids, seconds = plain_generate(prepare(RunRequest(prompt=PROMPT, **request)))
    print(json.dumps({"ids": ids, "seconds": seconds}))


def fresh(target: str, cases: list, dtype: str, new_tokens: int, chat: bool | None, pairs: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        for method, assistant, params in cases:
            request = {"target": target, "method": method, "assistant": assistant, "params": params,
                       "max_new_tokens": new_tokens, "dtype": dtype, "chat": chat}
            ratios, same = [], True
            for k in range(pairs):
                order = (0, 1) if k % 2 == 0 else (1, 0)  # alternate which goes first
                got: dict[int, tuple[list[int], float]] = {}
                for which in order:
                    got[which] = (_cli(target, method, assistant, params, dtype, new_tokens, chat,
                                       Path(scratch) / "trace.json") if which == 0 else _plain(request))
                same &= got[0][0] == got[1][0]
                ratios.append(got[0][1] / got[1][1])
            print(f"fresh {method} {dtype}: median ratio {statistics.median(ratios):.3f} "
                  f"{[round(r, 3) for r in ratios]} over {pairs} pairs of processes; outputs equal: {same}",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dtype", nargs="?", default="auto")
    parser.add_argument("--tiny", action="store_true", help="the tiny test models instead of the bundled Gemma")
    parser.add_argument("--fresh", type=int, default=0, help="pairs of fresh processes (CLI, plain generate())")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--plain-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain_child:
        plain_child(json.loads(args.plain_child))
        return
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        if args.tiny:
            models = tiny_models(Path(root))
            target, chat = models["target"], False
            cases = BUNDLED_CASES + [("speculative", models["noisy"], {"num_assistant_tokens": 4})]
        else:
            target, chat, cases = "bundled/gemma-3-270m", None, BUNDLED_CASES
        warm(target, cases, args.dtype, args.max_new_tokens, chat)
        if args.fresh:
            fresh(target, cases, args.dtype, args.max_new_tokens, chat, args.fresh)
    print(f"{time.perf_counter() - started:.0f} s in all")


if __name__ == "__main__":
    main()
