"""Fresh processes, bundled Gemma, prompt lookup, 96 new tokens, bfloat16 (a benchmark: its figures need a quiet
machine). Four kinds of process in rounds, each round in a rotated order: the CLI as it is ("cli"); the CLI whose
held run digests only past the whole budget ("cli64", as before 573d682); the CLI handing over every record as it
comes ("perrecord", before 573d682); the real CLI process, `python -m playground run` ("module", as
`overhead.py --fresh` starts it); and a plain generate() ("plain"). Prints each round's times and each kind's
median ÷ plain's, and the median of each kind's in-round ratio to plain (the machine's pace moves between rounds).

    python tests/measure/handoff_ab.py 7                       # 7 rounds of cli, cli64, perrecord, plain: about 7 minutes
    python tests/measure/handoff_ab.py 15 module cli plain     # 15 rounds of the kinds named
"""
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
import overhead  # noqa: E402


def child(variant: str, request: dict, out: str) -> None:
    """One CLI run of `variant` in this fresh process, its trace written to `out`."""
    from playground.engine import logit_ring
    if variant == "perrecord":
        logit_ring._held_batch_bytes = lambda: 0
    if variant == "cli64":
        logit_ring._digest_above = lambda: logit_ring.KEPT_LOGITS_BYTES
    from playground.cli import main as cli_main
    cli_main(overhead._cli_arguments(**request, trace_out=Path(out)))

if __name__ == "__main__" and sys.argv[1] == "child":
    child(sys.argv[2], json.loads(sys.argv[3]), sys.argv[4])
    sys.exit(0)

pairs = int(sys.argv[1])
variants = sys.argv[2:] or ["cli", "cli64", "perrecord", "plain"]
request: dict[str, Any] = {"target": "bundled/gemma-3-270m", "method": "prompt_lookup", "assistant": None,
           "params": {"prompt_lookup_num_tokens": 5}, "max_new_tokens": 96, "dtype": "bfloat16", "chat": None}
root = Path(tempfile.mkdtemp())
times: dict[str, list[float]] = {v: [] for v in variants}
for k in range(pairs):
    order = variants[k % len(variants):] + variants[:k % len(variants)]
    for v in order:
        if v == "plain":
            ids, s = overhead._plain(request)
        elif v == "module":
            r = request
            ids, s = overhead._cli(r["target"], r["method"], r["assistant"], r["params"], r["dtype"],
                                   r["max_new_tokens"], r["chat"], root / "t.json")
        else:
            out = root / "t.json"
            cmd = [sys.executable, __file__, "child", v, json.dumps(request), str(out)]
            subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
            s = json.loads(out.read_text())["summary"]["elapsed_s"]
        times[v].append(s)
    print(k, {v: round(times[v][-1], 3) for v in variants}, flush=True)
for v in variants:
    print(v, f"median {statistics.median(times[v]):.3f} s", [round(t, 3) for t in times[v]])
p = statistics.median(times["plain"])
print("median / plain's median:", {v: round(statistics.median(times[v]) / p, 3) for v in variants})
print("median of in-round ratios:", {v: round(statistics.median(a / b for a, b in zip(times[v], times["plain"])), 3)
                                     for v in variants})
