"""Race replay data: cumulative time -> tokens for a trace, and two traces side by side (pure; no torch).

Read by the benchmark report's race charts and the page's race replay; it only reads `Trace` records.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .methods import REFERENCE
from .trace import Trace


@dataclass
class RacePoint:
    t_ms: float  # cumulative step time when this step's tokens appeared
    tokens: int  # cumulative tokens emitted
    step: int
    text: str  # text emitted in this step


@dataclass
class RaceLane:
    label: str
    method: str
    points: list[RacePoint]
    total_ms: float
    new_tokens: int


def race_lane(trace: Trace, label: str | None = None) -> RaceLane:
    """Cumulative time -> tokens for one trace (starts at 0, 0): the set-up, then each step's draft + verify + other,
    so a lane ends at the run's elapsed time."""
    t = trace.setup_ms
    n = 0
    points = [RacePoint(0.0, 0, -1, "")]
    for s in trace.steps:
        t += s.time_ms
        n += len(s.emitted)
        points.append(RacePoint(round(t, 3), n, s.index, "".join(s.emitted_text)))
    return RaceLane(label or trace.method, trace.method, points, round(t, 3), n)


def race_timeline(baseline_trace: Trace, method_trace: Trace) -> dict[str, Any]:
    """Both lanes of a race replay plus who finished first and by how much (JSON-ready)."""
    lanes = [race_lane(baseline_trace, REFERENCE), race_lane(method_trace, method_trace.method)]
    b, m = lanes
    return {
        "lanes": [asdict(lane) for lane in lanes],
        "duration_ms": max(b.total_ms, m.total_ms),
        "winner": m.label if m.total_ms < b.total_ms else b.label,
        "time_ratio": (b.total_ms / m.total_ms) if m.total_ms > 0 else None,
    }
