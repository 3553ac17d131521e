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


def _stretched(lane: RaceLane, total_ms: float) -> RaceLane:
    """The lane with every time scaled so that it ends at `total_ms` (the steps keep their recorded shares)."""
    if lane.total_ms <= 0 or total_ms <= 0:
        return lane
    k = total_ms / lane.total_ms
    points = [RacePoint(round(p.t_ms * k, 3), p.tokens, p.step, p.text) for p in lane.points]
    return RaceLane(lane.label, lane.method, points, round(total_ms, 3), lane.new_tokens)


def race_timeline(baseline_trace: Trace, method_trace: Trace,
                  totals_ms: tuple[float, float] | None = None) -> dict[str, Any]:
    """Both lanes of a race replay plus who finished first and by how much (JSON-ready). `totals_ms` (baseline's,
    the method's): the times a comparison's table reads (medians over its repeats); each lane keeps its run's
    step-by-step shares and ends there, so the race and the table tell one story."""
    lanes = [race_lane(baseline_trace, REFERENCE), race_lane(method_trace, method_trace.method)]
    if totals_ms is not None:
        lanes = [_stretched(lane, total) for lane, total in zip(lanes, totals_ms)]
    b, m = lanes
    return {
        "lanes": [asdict(lane) for lane in lanes],
        "duration_ms": max(b.total_ms, m.total_ms),
        "winner": m.label if m.total_ms < b.total_ms else b.label,
        "time_ratio": (b.total_ms / m.total_ms) if m.total_ms > 0 else None,
    }
