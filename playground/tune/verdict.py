"""Tune's results and verdict (torch-free): a row per setting, one prompt's and several prompts' results, the
recommendation against the default and the standing against plain decoding, and tune.json.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..i18n import Message
from ..trace import Step, acceptance_by_position, summarize_steps
from .cost import RECOMMEND_MARGIN, Calibration
from .settings import Outcome, Setting, TuneRequest, default_setting


def _fastest_first(row: Row) -> tuple[float, int]:
    """`max`'s key over rows with a prediction: the predicted speedup, then the fewer steps."""
    assert row.predicted is not None
    return (row.predicted.speedup or 0.0, -row.predicted.steps)


@dataclass
class Row:
    setting: Setting
    predicted: Outcome | None
    refused: str | None = None  # an i18n.Message when tune built it (its English as a str)
    measured: Outcome | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.setting.method, "label": self.setting.label, "params": self.setting.values,
                "predicted": asdict(self.predicted) if self.predicted else None,
                "measured": asdict(self.measured) if self.measured else None, "refused": self.refused}


@dataclass
class PromptTune:
    """Every setting's predicted outcome on one prompt."""

    prompt: str
    prompt_tokens: int
    new_tokens: int
    finish_reason: str
    baseline_s: float  # the reference every predicted speedup divides (`reference_baseline_s`)
    drafter_pass_s: float
    calibration: Calibration
    rows: list[Row]
    env: dict[str, Any] = field(default_factory=dict)
    baseline_run_s: float = 0.0  # the baseline run's own elapsed time, as measured

    def predicted(self) -> list[Row]:
        return [r for r in self.rows if r.predicted is not None]

    def best(self) -> Row | None:
        rows = self.predicted()
        return max(rows, key=_fastest_first) if rows else None

    def row(self, setting: Setting) -> Row | None:
        return next((r for r in self.rows if r.setting == setting), None)

    def to_dict(self) -> dict[str, Any]:
        best = self.best()
        return {"prompt": self.prompt, "prompt_tokens": self.prompt_tokens, "new_tokens": self.new_tokens,
                "finish_reason": self.finish_reason, "baseline_s": self.baseline_s,
                "baseline_run_s": self.baseline_run_s, "drafter_pass_s": self.drafter_pass_s, "calibration": asdict(self.calibration),
                "best": best.setting.label if best else None, "rows": [r.to_dict() for r in self.rows]}


def outcome_of(steps: list[Step], time_s: float | None, baseline_s: float | None) -> Outcome:
    summary = summarize_steps(steps, time_s or 0.0)
    speedup = baseline_s / time_s if time_s and baseline_s else None
    return Outcome(steps=summary.steps, drafted=summary.drafted, accepted=summary.accepted,
                   tokens_per_step=summary.tokens_per_step, time_s=time_s, speedup=speedup,
                   new_tokens=summary.new_tokens, unverified=summary.unverified,
                   by_position=[tuple(counts) for counts in acceptance_by_position(steps)])


def counts_exact(dtype: str, sample: bool = False) -> bool:
    """Whether tune's counts are exact for a run in `dtype`: only greedy float32 is proven token for token."""
    return dtype == "float32" and not sample


@dataclass
class TuneResult:
    """Tune over several prompts: per prompt, overall, the recommended setting and (optionally) measured runs."""

    request: TuneRequest
    prompts: list[PromptTune]
    meta: dict[str, Any] = field(default_factory=dict)
    measured: dict[Setting, Outcome] = field(default_factory=dict)  # overall, for settings run for real
    measured_baseline_s: float | None = None

    def overall(self) -> list[Row]:
        """One row per setting over all prompts: summed counts, summed predicted time, Σ baseline / Σ time."""
        total_base = sum(p.baseline_s for p in self.prompts)
        rows: list[Row] = []
        for first in self.prompts[0].rows:
            per = [p.row(first.setting) for p in self.prompts]
            if any(r is None or r.predicted is None for r in per):
                reason = next((r.refused for r in per if r is not None and r.refused), Message.keyed("tune.reason.not_every_prompt"))
                rows.append(Row(first.setting, None, reason, self.measured.get(first.setting)))
                continue
            outs = [r.predicted for r in per if r is not None and r.predicted is not None]
            rows.append(Row(first.setting, _sum_outcomes(outs, total_base), None, self.measured.get(first.setting)))
        return rows

    def best(self) -> Row | None:
        rows = [r for r in self.overall() if r.predicted is not None]
        return max(rows, key=_fastest_first) if rows else None

    def default(self) -> Setting:
        return default_setting(self.request.run.method, self.request.run.params)

    def default_row(self) -> Row | None:
        """The default setting's row over all prompts (None where the sweep has none)."""
        default = self.default()
        return next((r for r in self.overall() if r.setting == default), None)

    def margin(self) -> float:
        """How much faster than the default a setting must be predicted before tune recommends it: the typical
        error of a predicted time (RECOMMEND_MARGIN) plus the largest change of the machine's pace under the
        calibration (a pace that moved by 10 % moves every predicted time by as much)."""
        return RECOMMEND_MARGIN + max((abs(p.calibration.pace_change - 1) for p in self.prompts), default=0.0)

    def predicted_gain(self, row: Row | None = None) -> float | None:
        """How much faster `row` (default: the fastest predicted) is predicted than the default: the default's
        predicted time ÷ its own, minus 1 (None where either has no predicted time)."""
        row = row or self.best()
        default = self.default_row()
        if row is None or row.predicted is None or default is None or default.predicted is None:
            return None
        if not row.predicted.time_s or not default.predicted.time_s:
            return None
        return default.predicted.time_s / row.predicted.time_s - 1

    def recommended(self) -> Row | None:
        """The setting tune recommends: the fastest predicted one where its predicted gain over the default exceeds
        `margin()`, else the default (a gain inside the prediction's own error is not one the model can tell)."""
        best = self.best()
        gain = self.predicted_gain(best)
        if best is None or gain is None or gain > self.margin():
            return best
        return self.default_row()

    def standing(self) -> str | None:
        """Where the fastest predicted setting stands against plain decoding (`standing_against_baseline` of its
        predicted speedup and `margin()`); None where no setting has a predicted speedup."""
        best = self.best()
        speedup = best.predicted.speedup if best is not None and best.predicted is not None else None
        return standing_against_baseline(speedup, self.margin()) if speedup else None

    def clear_win(self) -> bool:
        """Whether a setting other than the default is predicted faster by more than the margin."""
        best, recommended = self.best(), self.recommended()
        return best is not None and recommended is not None and recommended.setting == best.setting \
            and best.setting != self.default()

    def losses(self) -> list[dict[str, Any]]:
        """For each prompt: its own best setting, and how much it loses with the overall best instead."""
        best = self.best()
        out = []
        for p in self.prompts:
            own = p.best()
            with_best = p.row(best.setting) if best else None
            own_speed = own.predicted.speedup if own and own.predicted else None
            best_speed = with_best.predicted.speedup if with_best and with_best.predicted else None
            loss = (1 - best_speed / own_speed) if own_speed and best_speed else None
            out.append({"prompt": p.prompt[:80], "own_best": own.setting.label if own else None,
                        "own_best_speedup": own_speed, "overall_best_speedup": best_speed, "loss": loss})
        return out

    def verified(self) -> dict[str, int]:
        """How many settings were run for real, and how many of them matched the predicted counts on every prompt."""
        matched = sum(all(r.measured is None or r.predicted is None or r.measured.counts() == r.predicted.counts()
                          for p in self.prompts for r in [p.row(s)] if r is not None)
                      for s in self.measured)
        return {"settings": len(self.measured), "matched": matched}

    def to_dict(self) -> dict[str, Any]:
        best, recommended = self.best(), self.recommended()
        return {"meta": self.meta, "verified": self.verified(),
                "recommended": recommended.setting.label if recommended else None,
                "recommended_params": recommended.setting.values if recommended else None,
                "fastest_predicted": best.setting.label if best else None,
                "predicted_gain": self.predicted_gain(best), "margin": self.margin(), "clear_win": self.clear_win(),
                "standing": self.standing(),
                "default": self.default().label, "measured_baseline_s": self.measured_baseline_s,
                "rows": [r.to_dict() for r in self.overall()], "losses": self.losses(),
                "prompts": [p.to_dict() for p in self.prompts]}


# Where the fastest predicted setting of a method stands against plain decoding (`TuneResult.standing`).
SLOWER, UNCLEAR, FASTER = "slower", "unclear", "faster"


def standing_against_baseline(speedup: float, margin: float) -> str:
    """SLOWER where a setting's predicted speedup over plain decoding is at most 1 (it takes at least the baseline's
    time), UNCLEAR where its gain (speedup − 1: the baseline's time ÷ its predicted time, minus 1) lies inside
    `margin`, FASTER beyond. The margin is the one a setting's gain over the default must exceed
    (`TuneResult.margin`): a gain over the baseline is the same ratio of times, and its error is at least the
    predicted time's (the baseline's time is measured, the setting's predicted)."""
    if speedup <= 1.0:
        return SLOWER
    return UNCLEAR if speedup - 1 <= margin else FASTER


def to_json(data: dict[str, Any]) -> str:
    """tune.json: the result as `TuneResult.to_dict` gives it."""
    return json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False)


def _sum_outcomes(outs: list[Outcome], baseline_s: float | None) -> Outcome:
    steps = sum(o.steps for o in outs)
    new_tokens = sum(o.new_tokens for o in outs)
    times = [o.time_s for o in outs]
    time_s = sum(t for t in times if t is not None) if all(t is not None for t in times) else None
    width = max((len(o.by_position) for o in outs), default=0)
    by_position = [tuple(map(sum, zip(*(o.by_position[k] for o in outs if k < len(o.by_position)))))
                   for k in range(width)]
    return Outcome(steps=steps, drafted=sum(o.drafted for o in outs), accepted=sum(o.accepted for o in outs),
                   tokens_per_step=new_tokens / steps if steps else None, time_s=time_s,
                   speedup=baseline_s / time_s if baseline_s and time_s else None, new_tokens=new_tokens,
                   unverified=sum(o.unverified for o in outs), by_position=by_position,
                   samples_s=[sum(round_s) for round_s in zip(*(o.samples_s for o in outs))])  # per round, summed
