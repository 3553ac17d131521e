"""Instrumentation overhead and baseline speed on the bundled Gemma, in one process.

Usage: python tests/overhead.py [auto|float32|bfloat16]
Per method: the median ratio of instrumented run time to plain generate() time with the same
arguments (5 interleaved pairs after a warm-up, both in worker threads), tokens/s, and whether
the outputs matched.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playground.engine import LiveRun, RunRequest, plain_generate, prepare  # noqa: E402
from playground.models import STORE  # noqa: E402

PROMPT = ("Here is a list of fruits: apple, banana, cherry, date, elderberry, fig, grape. "
          "Again, the list of fruits: apple,")


def main(dtype: str) -> None:
    start = time.perf_counter()
    STORE.get("bundled/gemma-3-270m", dtype)
    print(f"warm load {time.perf_counter() - start:.2f} s")
    for method, params in [("baseline", {}), ("prompt_lookup", {"prompt_lookup_num_tokens": 5})]:
        prepared = prepare(RunRequest(prompt=PROMPT, method=method, params=params, max_new_tokens=48, dtype=dtype))
        LiveRun(prepared).run()
        plain_generate(prepared)  # warm-up
        ratios, same = [], True
        for _ in range(5):
            trace = LiveRun(prepared).run()
            ids, plain_s = plain_generate(prepared)
            same &= ids == trace.output_ids
            ratios.append(trace.summary.elapsed_s / plain_s)
        s = trace.summary
        print(f"{method} {dtype}: median ratio {statistics.median(ratios):.3f} {[round(r, 3) for r in ratios]}; "
              f"{s.new_tokens} tokens in {s.elapsed_s:.2f} s = {s.tokens_per_s:.1f} tok/s, "
              f"{s.tokens_per_step:.2f} tokens/step; outputs equal: {same}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "auto")
