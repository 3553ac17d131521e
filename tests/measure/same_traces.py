"""Are a change's traces the same as before it? Run every method through the CLI of two checkouts, greedy and sampled
(fixed seeds), on the tests' tiny random checkpoints and on the bundled models, and compare the traces with every
timing removed.

    python tests/measure/same_traces.py write DIR [--repo PATH] [--models DIR] [--only tiny|bundled]
    python tests/measure/same_traces.py compare DIR_A DIR_B       # "identical" or "DIFFERENT", per run

e.g. `mkdir /tmp/before && git archive main | tar -x -C /tmp/before`, then
`write /tmp/a --repo /tmp/before --models /tmp/tiny`, `write /tmp/b --models /tmp/tiny`, `compare /tmp/a /tmp/b`.
`--models` is where the tiny checkpoints are written (`tests/tiny.py`'s `write_tiny_checkpoints`, once, by this
checkout): both checkouts must read the very same files. Float32, 24 new tokens; sampled runs have a fixed seed. A
field whose name ends in `_ms`, `elapsed_s` or `tokens_per_s` is a timing and is left out; everything else (ids,
texts, q and p, the random draws, the microscope's lists, the environment's other facts) must be equal.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the tiny checkpoints' builder

PROMPT = ("def total(items):\n    t = 0\n    for item in items:\n        t += item.price * item.quantity\n"
          "    return t\n\n# The same function with `t` renamed to `subtotal`:\n")
TARGET = "bundled/gemma-3-270m"
SAMPLED = ["--sample", "--seed", "3"]
BUNDLED: dict[str, list[str]] = {
    "baseline": [],
    "baseline_sampled": SAMPLED,
    "prompt_lookup": ["--method", "prompt_lookup"],
    "prompt_lookup_sampled": ["--method", "prompt_lookup", *SAMPLED],
    "early_exit": ["--method", "early_exit"],
    "early_exit_sampled": ["--method", "early_exit", *SAMPLED],
    "speculative": ["--method", "speculative", "--assistant", TARGET],
    "speculative_sampled": ["--method", "speculative", "--assistant", TARGET, *SAMPLED],
    "speculative_ensemble_sampled": ["--method", "speculative", "--assistant", TARGET, "--set",
                                     "assistant_ensemble_weight=0.7", *SAMPLED],
    "universal": ["--method", "universal", "--assistant", "bundled/smollm2-135m-instruct"],
    "universal_sampled": ["--method", "universal", "--assistant", "bundled/smollm2-135m-instruct", *SAMPLED],
}
# Beyond one command per method (`tiny.CLI_EXAMPLES`, each greedy and sampled): the parameters that change a step.
TINY_EXTRA: list[tuple[str, str, str, str | None, dict[str, Any]]] = [
    ("speculative_heuristic", "speculative", "llama", "llama_drafter",
     {"num_assistant_tokens": 3, "num_assistant_tokens_schedule": "heuristic"}),
    ("speculative_confidence", "speculative", "llama", "llama_drafter",
     {"num_assistant_tokens": 4, "assistant_confidence_threshold": 0.3}),
    ("early_exit_ensemble", "early_exit", "gemma3", None,
     {"assistant_early_exit": 2, "num_assistant_tokens": 4, "assistant_ensemble_weight": 0.7}),
    ("mtp_drafter_ensemble", "mtp_drafter", "gemma4", "gemma4_assistant",
     {"num_assistant_tokens": 3, "assistant_ensemble_weight": 0.7}),
    ("prompt_lookup_ngram", "prompt_lookup", "llama", None,
     {"prompt_lookup_num_tokens": 3, "max_matching_ngram_size": 1}),
]
TIMINGS = ("_ms", "elapsed_s", "tokens_per_s")


def tiny_runs(models: Path) -> dict[str, list[str]]:
    """Every method on the tiny checkpoints under `models` (written there first if missing), greedy and sampled."""
    import tiny

    marker = models / "paths.json"
    if not marker.exists():
        models.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({k: str(v) for k, v in tiny.write_tiny_checkpoints(models).items()}))
    paths = {k: Path(v) for k, v in json.loads(marker.read_text()).items()}
    runs: dict[str, list[str]] = {}
    cases: list[tuple[Any, ...]] = [(method, *rest) for method, *rest in tiny.CLI_EXAMPLES] + [case[1:] for case in TINY_EXTRA]
    names = [method for method, *_ in tiny.CLI_EXAMPLES] + [case[0] for case in TINY_EXTRA]
    for name, (method, target, assistant, params) in zip(names, cases):
        args = tiny.cli_example_args(paths, method, target, assistant, params)
        runs[f"tiny_{name}"] = args
        runs[f"tiny_{name}_sampled"] = [*args, *SAMPLED]
    return runs


def write(out: Path, repo: Path, models: Path, only: str | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[str]] = {}
    if only in (None, "tiny"):
        runs.update(tiny_runs(models))
    if only in (None, "bundled"):
        runs.update({name: ["--target", TARGET, "--prompt", PROMPT, "--max-new-tokens", "24", "--dtype", "float32",
                            *extra] for name, extra in BUNDLED.items()})
    for name, args in runs.items():
        done = subprocess.run([sys.executable, "-m", "playground", "run", *args, "--quiet",
                               "--trace-out", str(out / f"{name}.json")],
                              cwd=repo, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"})
        print(name, done.returncode, (done.stdout or done.stderr).strip()[-160:], flush=True)


def without_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if not k.endswith(TIMINGS)}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def compare(a: Path, b: Path) -> bool:
    same = True
    for path in sorted(a.glob("*.json")):
        other = b / path.name
        if not other.exists():
            print(path.stem, "MISSING in", b)
            same = False
            continue
        left = without_timings(json.loads(path.read_text(encoding="utf-8")))
        right = without_timings(json.loads(other.read_text(encoding="utf-8")))
        steps = len(left.get("steps", []))
        print(path.stem, f"identical ({steps} steps)" if left == right else "DIFFERENT")
        same &= left == right
    return same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("out", type=Path)
    w.add_argument("--repo", type=Path, default=Path("."))
    w.add_argument("--models", type=Path, default=Path("/tmp/same-traces-tiny"))
    w.add_argument("--only", choices=("tiny", "bundled"))
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.command == "write":
        write(args.out, args.repo.resolve(), args.models.resolve(), args.only)
        return 0
    return 0 if compare(args.a, args.b) else 1


if __name__ == "__main__":
    sys.exit(main())
