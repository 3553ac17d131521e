"""Are a change's traces the same as before it? Run each offline method on the bundled models through the CLI of two
checkouts and compare the traces with every timing removed.

    python tests/measure/same_traces.py write DIR [--repo PATH]   # the traces of the checkout at PATH (default: .)
    python tests/measure/same_traces.py compare DIR_A DIR_B       # "identical" or "DIFFERENT", per run

e.g. `git worktree add /tmp/before <commit>`, then `write /tmp/a --repo /tmp/before`, `write /tmp/b`,
`compare /tmp/a /tmp/b`. Float32, 24 new tokens, a code-editing prompt; the sampled run has a fixed seed. A field
whose name ends in `_ms`, `elapsed_s` or `tokens_per_s` is a timing and is left out; everything else (ids, texts,
q and p, the random draws, the environment's other facts) must be equal.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

PROMPT = ("def total(items):\n    t = 0\n    for item in items:\n        t += item.price * item.quantity\n"
          "    return t\n\n# The same function with `t` renamed to `subtotal`:\n")
TARGET = "bundled/gemma-3-270m"
RUNS: dict[str, list[str]] = {
    "baseline": [],
    "prompt_lookup": ["--method", "prompt_lookup"],
    "early_exit": ["--method", "early_exit"],
    "speculative": ["--method", "speculative", "--assistant", TARGET],
    "speculative_sampled": ["--method", "speculative", "--assistant", TARGET, "--sample", "--seed", "3"],
    "universal": ["--method", "universal", "--assistant", "bundled/smollm2-135m-instruct"],
}
TIMINGS = ("_ms", "elapsed_s", "tokens_per_s")


def write(out: Path, repo: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, extra in RUNS.items():
        done = subprocess.run([sys.executable, "-m", "playground", "run", "--target", TARGET, "--prompt", PROMPT,
                               "--max-new-tokens", "24", "--dtype", "float32", "--quiet",
                               "--trace-out", str(out / f"{name}.json"), *extra],
                              cwd=repo, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(repo)})
        print(name, done.returncode, (done.stdout or done.stderr).strip()[-160:])


def without_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if not k.endswith(TIMINGS)}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def compare(a: Path, b: Path) -> bool:
    same = True
    for path in sorted(a.glob("*.json")):
        left = without_timings(json.loads(path.read_text(encoding="utf-8")))
        right = without_timings(json.loads((b / path.name).read_text(encoding="utf-8")))
        print(path.stem, "identical" if left == right else "DIFFERENT")
        same &= left == right
    return same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("out", type=Path)
    w.add_argument("--repo", type=Path, default=Path("."))
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.command == "write":
        write(args.out, args.repo.resolve())
        return 0
    return 0 if compare(args.a, args.b) else 1


if __name__ == "__main__":
    sys.exit(main())
