"""Tune over several prompts (torch): every prompt tuned, the result over all of them, and `verify`, the chosen settings
run for real between baselines.

The runs are called through `one_prompt` and the tolerance read through `cost`, so a test that patches them in the
module that owns them is seen here.
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from ..models import STORE, ModelStore
from . import cost, one_prompt
from .settings import Outcome, Progress, Setting, TuneError, TuneRequest
from .verdict import TuneResult, _sum_outcomes, counts_exact, outcome_of


def tune(request: TuneRequest, prompts: Sequence[str], store: ModelStore = STORE,
         progress: Progress | None = None) -> TuneResult:
    """Tune over several prompts (the same request with each prompt)."""
    if not prompts:
        raise TuneError.keyed("error.tune.no_prompts")
    results = []
    for k, prompt in enumerate(prompts, 1):
        if progress:
            progress(f"prompt {k}/{len(prompts)}")
        one = TuneRequest(**{**request.__dict__, "run": request.run.but(prompt=prompt)})
        results.append(one_prompt.tune_prompt(one, store, progress))
    return TuneResult(request=request, prompts=results, meta={"env": results[0].env,
                                                              "method": request.run.method,
                                                              "target": request.run.target,
                                                              "assistant": request.run.assistant,
                                                              "max_new_tokens": request.run.max_new_tokens,
                                                              "max_draft": request.max_draft,
                                                              "prompts": len(prompts),
                                                              "times_reliable": all(p.calibration.reliable
                                                                                    for p in results),
                                                              "counts_exact": counts_exact(
                                                                  results[0].env.get("dtype", ""),
                                                                  request.run.sample)})


def verify(result: TuneResult, store: ModelStore = STORE, progress: Progress | None = None,
           settings: Sequence[Setting] | None = None, repeats: int = 1) -> TuneResult:
    """Run the recommended setting, the fastest predicted one (where the margin kept the default) and the default
    for real on every prompt, between two baseline runs (warm).

    The baseline before and after give the reference (their mean) and a check that the machine kept its pace
    under the measurement: `meta["measured_reliable"]` is False where the two differ by more than PACE_TOLERANCE.
    With `repeats` > 1 every setting runs that many times in rounds (each setting once per round, a baseline between
    rounds, never one setting's runs back to back: the pace drifts over seconds), its measured time the median of its
    runs (`Outcome.samples_s` keeps them all) and the reference the median of the baselines; the check compares every
    baseline with the one before it.
    """
    picks = [r.setting for r in (result.recommended(), result.best()) if r is not None]  # the same row, or both
    chosen = list(dict.fromkeys(settings or picks + [result.default()]))
    base_total = 0.0
    changes: list[float] = []
    baselines: list[list[float]] = []
    steps: dict[Setting, list[Outcome]] = {s: [] for s in chosen}
    for p in result.prompts:
        run = result.request.run.but(prompt=p.prompt)
        if progress:
            progress(f"measuring on: {p.prompt[:40]!r}")
        bases = [one_prompt.run_baseline(run, store).summary.elapsed_s]
        traces: dict[Setting, list[Any]] = {s: [] for s in chosen}
        for _ in range(max(1, repeats)):
            for s in chosen:
                traces[s].append(one_prompt.run_setting(run, s, store))
            bases.append(one_prompt.run_baseline(run, store).summary.elapsed_s)
        changes += [after / before if before else 1.0 for before, after in zip(bases, bases[1:])]
        base_s = statistics.median(bases)
        base_total += base_s
        baselines.append(bases)
        for s, runs in traces.items():
            times = [trace.summary.elapsed_s for trace in runs]
            measured = outcome_of(runs[0].steps, statistics.median(times), base_s)
            measured.samples_s = times
            row = p.row(s)
            if row is not None:
                row.measured = measured
            steps[s].append(measured)
    result.measured_baseline_s = base_total
    result.meta["measured_baselines_s"] = baselines
    result.meta["measured_pace_change"] = max(changes, key=lambda c: abs(c - 1), default=1.0)
    result.meta["measured_reliable"] = all(abs(c - 1) <= cost.PACE_TOLERANCE for c in changes)
    for s, outs in steps.items():
        result.measured[s] = _sum_outcomes(outs, base_total)
    return result
