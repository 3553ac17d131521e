"""README's `-n 2 --dist loadfile`, the heaviest test files first (`pytest_xdist_make_scheduler`, which conftest.py
imports).

pytest-xdist's loadfile hands whole files to the workers in the order of their test counts, most first: the model-free
files with hundreds of quick cases went first and the few long ones (an axe sweep, the sampling tests, the hostile
sweep) last, so one worker could still be in a long file while the other had nothing left. Here a worker that runs
low takes the heaviest file left, by the seconds `tests/file_weights.json` (under the root directory) records for it (a quiet run's
setup + call + teardown per file; `python tests/measure/file_weights.py LOG` writes it from a `--durations=0` log);
a file it does not know yet goes first, as the heaviest (a small file first costs the end nothing). And a worker
takes its next file only when it holds one test of the last (the one it runs needs the next item to know whether to
tear the module down), not two: a file promised early to a worker busy with a long test is a file the other worker
cannot take.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

WEIGHTS = Path(__file__).with_name("file_weights.json")


def file_weights(path: Path = WEIGHTS) -> dict[str, float]:
    """Test file (its node id, e.g. `tests/test_cli.py`) -> recorded seconds; empty where the record is missing."""
    try:
        return {str(name): float(seconds) for name, seconds in json.loads(path.read_text(encoding="utf-8")).items()}
    except (OSError, ValueError):
        return {}


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: there when `-n` runs
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` hands out the heaviest file left first; the other modes are xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    return heaviest_first_scheduler(config, log, file_weights(config.rootpath / "tests" / WEIGHTS.name))


def heaviest_first_scheduler(config: Any, log: Any, weights: dict[str, float]) -> Any:
    """A loadfile scheduler that hands out the heaviest file left (see the module's docstring)."""
    from xdist.scheduler import LoadFileScheduling

    unknown = max(weights.values(), default=0.0) + 1.0

    class HeaviestFileFirst(LoadFileScheduling):
        def _assign_work_unit(self, node: Any) -> None:
            heaviest = max(self.workqueue, key=lambda scope: weights.get(scope, unknown))
            self.workqueue.move_to_end(heaviest, last=False)  # the parent pops the first unit
            super()._assign_work_unit(node)

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) <= 1:
                self._assign_work_unit(node)

    return HeaviestFileFirst(config, log)
