"""`auto`'s precision on this machine (a benchmark, not a test): plain greedy decoding of the bundled Gemma timed in
float32 and in bfloat16, printed beside what `auto` picks with those figures, and what it picks now (the measurement
kept with the conversion, `playground.models.speed`).

Usage:

    python tests/measure/precision_bench.py                 # measure now (3 rounds of 16 tokens each), print the comparison
    python tests/measure/precision_bench.py --rounds 5 --tokens 32
    python tests/measure/precision_bench.py --keep          # ... and keep this measurement for `auto` (replacing the kept one)

The fastest of the rounds counts for each precision (another process's load only ever slows a round). `auto` keeps
the first measurement it makes, busy machine or not; this script says how busy the machine was (measure on a quiet
one, and `--keep` it, to replace a measurement made under load).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from playground.models import (  # noqa: E402
    SPEED_MODEL, bundled_entry, converted_dir, ensure_converted, keep_speed, kept_measurement, machine_identity,
    measure_speed,
)
from playground.models.hardware import _cpu_bf16_flags  # noqa: E402
from playground.models.speed import machine_busy  # noqa: E402
from playground.precision import BF16_FASTER_BY, auto_reason  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16, help="new tokens per timed decode")
    parser.add_argument("--rounds", type=int, default=3, help="timed decodes per precision, interleaved")
    parser.add_argument("--keep", action="store_true", help="keep this measurement for auto")
    args = parser.parse_args(argv)
    logging.disable(logging.INFO)
    flags = _cpu_bf16_flags()
    machine = machine_identity()
    print(f"machine: {machine['cpu'] or 'unknown CPU'}, {machine['cores']} cores, torch {machine['torch']}, "
          f"native bfloat16: {', '.join(flags) or 'none'}")
    kept = kept_measurement()
    print(f"auto now: {auto_reason('cpu', flags, measured=kept)[1]}")
    busy_before = machine_busy()
    measured = measure_speed(SPEED_MODEL, args.tokens, args.rounds)
    busy = busy_before or machine_busy()
    print(f"load average {os.getloadavg()[0]:.1f} on {machine['cores']} cores: "
          + ("busy: these figures say as much about the other work as about the precisions" if busy else "quiet"))
    print(f"{SPEED_MODEL}, plain greedy decoding, {args.tokens} new tokens, best of {args.rounds} rounds:")
    print(f"  float32   {measured.float32_tps:7.2f} tokens/s")
    print(f"  bfloat16  {measured.bfloat16_tps:7.2f} tokens/s   ({measured.ratio:.2f}x float32; auto asks for "
          f"{BF16_FASTER_BY:.1f}x)")
    dtype, reason = auto_reason("cpu", flags, measured=measured)
    print(f"auto with these figures: {dtype} ({reason})")
    if args.keep:
        directory = ensure_converted(bundled_entry(SPEED_MODEL))
        keep_speed(directory, machine, dataclasses.asdict(measured))
        print(f"kept in {converted_dir(bundled_entry(SPEED_MODEL).key)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
