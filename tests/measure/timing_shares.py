"""Where a run's time goes: each method's draft / verify / other / setup shares of the elapsed time.

A measurement script, not a test (timings are never pass/fail). It runs every method that works on the
bundled models (Gemma 3 270M; SmolLM2 135M Instruct as the universal assistant) in the precision asked
(`auto` by default), one warm-up run each, then REPEATS measured runs, and prints the median shares.
"unaccounted" is what the phases do not explain: elapsed − setup − Σ(draft + verify + other). It also runs
on traces of schema 1 (before `other_ms` and `setup_ms` existed), where everything outside draft and
verify is unaccounted.

    python tests/measure/timing_shares.py [--dtype auto] [--tokens 48] [--repeats 3] [--threads N] [--methods a,b]

To compare with the code before a change, run it from a checkout of that code (it imports the
`playground` package of the current directory): cd OLD_CHECKOUT && python NEW/tests/measure/timing_shares.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))  # the checkout the command runs in (before/after comparisons)

from playground.engine import LiveRun, RunRequest, prepare  # noqa: E402
from playground.models import DEFAULT_TARGET, DEFAULT_UNIVERSAL_ASSISTANT, ModelStore  # noqa: E402

PROMPT = "Write a Python function that returns the n-th Fibonacci number.\n\ndef fibonacci(n):"
RUNS = [
    ("baseline", None, {}),
    ("prompt_lookup", None, {"prompt_lookup_num_tokens": 5}),
    ("speculative", DEFAULT_TARGET, {"num_assistant_tokens": 5}),
    ("early_exit", None, {"assistant_early_exit": 12, "num_assistant_tokens": 3}),
    ("universal", DEFAULT_UNIVERSAL_ASSISTANT, {"num_assistant_tokens": 5}),
]


def shares(trace) -> dict[str, float]:
    """Each phase's share of the elapsed time (setup and other are 0 on schema-1 traces)."""
    elapsed_ms = trace.summary.elapsed_s * 1000
    draft = sum(s.draft_ms for s in trace.steps)
    verify = sum(s.verify_ms for s in trace.steps)
    other = sum(getattr(s, "other_ms", 0.0) for s in trace.steps)
    setup = getattr(trace, "setup_ms", 0.0)
    parts = {"draft": draft, "verify": verify, "other": other, "setup": setup}
    parts["unaccounted"] = elapsed_ms - sum(parts.values())
    return {k: v / elapsed_ms for k, v in parts.items()} | {"elapsed_s": trace.summary.elapsed_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--methods", default="", help="comma-separated subset of the methods (default: all)")
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    wanted = set(filter(None, args.methods.split(",")))
    store = ModelStore()
    print(f"schema in this checkout: {__import__('playground.trace', fromlist=['x']).SCHEMA_VERSION}; "
          f"dtype {args.dtype}; {args.tokens} new tokens; median of {args.repeats} runs after one warm-up")
    print(f"{'method':14} {'elapsed s':>9} {'draft':>7} {'verify':>7} {'other':>7} {'setup':>7} {'unacc.':>7}")
    for method, assistant, params in RUNS:
        if wanted and method not in wanted:
            continue
        req = RunRequest(prompt=PROMPT, method=method, assistant=assistant, params=params,
                         max_new_tokens=args.tokens, dtype=args.dtype, target=DEFAULT_TARGET)
        LiveRun(prepare(req, store)).run()  # warm-up
        measured = [shares(LiveRun(prepare(req, store)).run()) for _ in range(args.repeats)]
        med = {k: statistics.median(m[k] for m in measured) for k in measured[0]}
        print(f"{method:14} {med['elapsed_s']:9.2f} " + " ".join(
            f"{med[k] * 100:6.1f}%" for k in ("draft", "verify", "other", "setup", "unaccounted")), flush=True)


if __name__ == "__main__":
    main()
