"""Write tests/file_weights.json from a full run's `--durations=0` log: each test file's seconds (setup + call +
teardown of its tests), which README's `-n 2 --dist loadfile` uses to hand out the heaviest files first
(tests/file_order.py). Take the log on a quiet machine, from README's command:

    python -m pytest -q -rs -n 2 --dist loadfile --durations=0 -p no:cacheprovider 2>&1 | tee /tmp/durations.log
    python tests/measure/file_weights.py /tmp/durations.log
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from file_order import WEIGHTS  # noqa: E402

LINE = re.compile(r"^\s*([\d.]+)s (setup|call|teardown)\s+(\S+?\.py)(?:::|\s|$)")


def per_file(log: str) -> dict[str, float]:
    """Seconds per test file in a durations table (the lines pytest prints as `12.34s call     tests/x.py::test`)."""
    seconds: dict[str, float] = defaultdict(float)
    for line in log.splitlines():
        match = LINE.match(line)
        if match:
            seconds[match.group(3)] += float(match.group(1))
    return dict(seconds)


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    seconds = per_file(Path(sys.argv[1]).read_text(encoding="utf-8", errors="replace"))
    if not seconds:
        sys.exit(f"no durations in {sys.argv[1]} (run pytest with --durations=0)")
    ordered = dict(sorted(((name, round(value, 1)) for name, value in seconds.items()), key=lambda kv: -kv[1]))
    WEIGHTS.write_text(json.dumps(ordered, indent=0) + "\n", encoding="utf-8")
    total = sum(ordered.values())
    print(f"{len(ordered)} files, {total:.0f} s in all (a perfect split over two workers: {total / 2:.0f} s each); "
          f"the heaviest: " + ", ".join(f"{name} {value:.0f} s" for name, value in list(ordered.items())[:8]))
    print(f"written to {WEIGHTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
