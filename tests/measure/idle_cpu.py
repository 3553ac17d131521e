"""An idle server's CPU: how much of a core `python app.py` takes while nobody uses it (a benchmark).

    python tests/measure/idle_cpu.py [--seconds 20] [--before /path/to/other/checkout]

Starts this checkout's app (no start-up load, the Hub off), lets it settle 5 s, then reads the process's CPU time
over `--seconds`; with `--before`, the same for another checkout's app.py (e.g. main as `git archive`), alternately,
twice each. Prints % of one core per window and the load average (the machine may be shared). Gradio's queue loops
look for work every 1 ms and 10 ms when idle (`compat.gradio_internals.poll_less_when_free`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from appserver import free_port, start_app, stop_app  # noqa: E402

IDLE_ENV = {"PLAYGROUND_PRELOAD": "0", "HF_HUB_OFFLINE": "1"}


def idle_share(root: Path, seconds: float, log: Path) -> float:
    """% of one core the app at `root` takes, idle, over `seconds` (user + system time of its process)."""
    proc = start_app(free_port(), log, IDLE_ENV, root=root)
    try:
        time.sleep(5)
        with open(f"/proc/{proc.pid}/stat") as stat:
            before = stat.read().rsplit(")", 1)[1].split()
        began = time.monotonic()
        time.sleep(seconds)
        with open(f"/proc/{proc.pid}/stat") as stat:
            after = stat.read().rsplit(")", 1)[1].split()
        elapsed = time.monotonic() - began
    finally:
        stop_app(proc)
    ticks = os.sysconf("SC_CLK_TCK")
    used = (int(after[11]) + int(after[12]) - int(before[11]) - int(before[12])) / ticks  # utime + stime
    return 100 * used / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--before", type=Path, help="another checkout, measured alternately with this one")
    args = parser.parse_args()
    roots = [("this checkout", ROOT)] + ([("before", args.before.resolve())] if args.before else [])
    for round_ in range(2 if args.before else 1):
        for name, root in roots:
            share = idle_share(root, args.seconds, Path(f"/tmp/idle-cpu-{round_}-{name.replace(' ', '-')}.log"))
            print(f"{name}: {share:.1f} % of a core idle over {args.seconds:.0f} s (load {os.getloadavg()[0]:.1f})",
                  flush=True)


if __name__ == "__main__":
    main()
