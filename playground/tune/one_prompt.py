"""One prompt tuned (torch): the baseline run, the drafter pass that replays every setting, the calibration checked
against the machine's pace, and every setting's predicted outcome, each a named phase of `tune_prompt`.

`cost.step_pace_s` and `cost.PACE_TOLERANCE` are read through their module, so a test that patches them there is
seen here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..engine import LiveRun, PreparedRun, RunRequest, in_worker_thread, prepare, redone_after_giving_way
from ..i18n import Message
from ..methods import REFERENCE, get_method
from ..models import STORE, ModelStore
from ..trace import Step
from . import cost
from .calibration import _time_drafter_calls, _time_forwards, _time_lookups
from .cost import (
    PACE_CHECK_TOKENS, WARM_UP_TOKENS, Calibration, calibration_points, forward_pace_s, loop_pace, loop_time_s,
    pace_ratios, pace_run_tokens, reference_baseline_s,
)
from .drafter import _at_the_models, _first_layers, _GreedyDrafter
from .replaying import NgramIndex, simulate_drafter, simulate_prompt_lookup
from .settings import (
    _SWEPT, Progress, Replay, Setting, TuneError, TuneRequest, _check, _refusal, default_setting, replay_of,
)
from .verdict import PromptTune, Row, outcome_of


def run_baseline(run: RunRequest, store: ModelStore, progress: Progress | None = None) -> Any:
    """The target's greedy output through the engine: the same `generate()` call a baseline run makes.

    The warm-up decodes a few tokens, not one: a one-token run only prefills, so the measured run's first decode
    step would create the one-token kernels (oneDNN primitives, in bfloat16) and pay for them in its time.
    """
    base = run.but(method=REFERENCE, assistant=None, params={})
    LiveRun(prepare(base.but(max_new_tokens=min(WARM_UP_TOKENS, int(run.max_new_tokens))), store, progress)).run()
    return LiveRun(prepare(base, store, progress)).run()



def run_setting(run: RunRequest, setting: Setting, store: ModelStore = STORE,
                progress: Progress | None = None) -> Any:
    """A real run of one setting through the engine (its trace)."""
    return LiveRun(prepare(run.but(method=setting.method, params=setting.values), store, progress)).run()


@dataclass
class _Prompt:
    """What the later phases of one prompt share: the request, its prepared run, the baseline's output and the
    drafter the method's replay needs (a dataclass, not closures, so each phase is a function of its own)."""

    request: TuneRequest
    method_run: PreparedRun
    replay: Replay
    settings: list[Setting]
    refused: dict[Setting, Message]
    y: list[int]
    prompt_ids: list[int]
    drafter_model: Any
    layers: int | None

    @property
    def run(self) -> RunRequest:
        return self.request.run

    @property
    def max_new(self) -> int:
        return int(self.request.run.max_new_tokens)

    @property
    def eos(self) -> frozenset[int]:
        return self.method_run.eos_ids  # the set the assisted loop cuts at


def _baseline_phase(request: TuneRequest, store: ModelStore, progress: Progress | None) -> tuple[_Prompt, Any]:
    """The request checked, the method's run prepared, and the baseline run whose greedy output every replay follows."""
    _check(request)
    run = request.run
    settings = request.settings()
    method_run = prepare(run.but(params={k: v for k, v in run.params.items() if k not in _SWEPT}), store, progress)
    if progress:
        progress("baseline pass")
    baseline = run_baseline(run, store, progress)
    if baseline.finish_reason not in ("eos", "length"):
        raise TuneError.keyed("error.tune.baseline_ended", reason=baseline.finish_reason)
    replay = replay_of(run.method)
    refused = {s: reason for s in settings for reason in [_refusal(s)] if reason}
    drafter_model = method_run.assistant.model if method_run.assistant is not None else method_run.target.model
    layers = int(method_run.params[replay.exit_layer_param]) if replay.exit_layer_param else None
    return _Prompt(request, method_run, replay, settings, refused, list(baseline.output_ids),
                   method_run.input_ids[0].tolist(), drafter_model, layers), baseline


def _replayed_settings(p: _Prompt) -> tuple[dict[Setting, list[Step]], float]:
    """Every setting's replayed steps (refused ones left out) and the drafter pass's time: prompt lookup from the
    token sequence, a model drafter from one greedy pass along the baseline's output."""
    steps_by_setting: dict[Setting, list[Step]] = {}
    with _at_the_models(p.method_run.models()):
        start = time.perf_counter()
        if not p.replay.model_pass:
            index = NgramIndex(p.prompt_ids + p.y, max(p.request.ngram_sizes + (get_method(p.run.method).defaults()
                                                                                ["max_matching_ngram_size"],)))
            for s in p.settings:
                v = s.values
                steps_by_setting[s] = simulate_prompt_lookup(p.prompt_ids, p.y, p.max_new, p.eos,
                                                             v["prompt_lookup_num_tokens"],
                                                             v["max_matching_ngram_size"], index)
        else:
            with _first_layers(p.drafter_model, p.layers):
                drafter = _GreedyDrafter(p.drafter_model, p.prompt_ids, p.y, p.eos)
                for i in range(len(p.y)):
                    drafter.proposals.get(i, min(p.request.max_draft, max(0, p.max_new - i - 1)) or 1)
                for s in p.settings:
                    if s in p.refused:
                        continue
                    v = s.values
                    steps_by_setting[s] = simulate_drafter(p.y, p.max_new, p.eos, drafter.proposals,
                                                           v["num_assistant_tokens"],
                                                           v["num_assistant_tokens_schedule"],
                                                           float(v["assistant_confidence_threshold"]))
        return steps_by_setting, time.perf_counter() - start


def _timed_calls(p: _Prompt, steps_by_setting: dict[Setting, list[Step]]) -> Calibration:
    """The calibration's timings at half the output's context: the target's forwards for every width a prediction
    asks for (a heuristic schedule can outgrow max_draft), the drafter's calls or prompt lookup's."""
    longest = max((len(st.drafted) for steps in steps_by_setting.values() for st in steps), default=0)
    context = (p.prompt_ids + p.y)[: len(p.prompt_ids) + len(p.y) // 2]
    model_pass = p.replay.model_pass
    ngram_sizes = sorted({int(s.values["max_matching_ngram_size"]) for s in steps_by_setting}) if not model_pass else []
    copy_tokens = max((int(s.values["prompt_lookup_num_tokens"]) for s in steps_by_setting), default=1) \
        if not model_pass else 0
    target = p.method_run.target
    vocab = int(target.model.config.get_text_config().vocab_size)
    repeats = p.request.calibration_repeats
    with _at_the_models(p.method_run.models()):
        prefill, forwards, spread = _time_forwards(target.model, context, calibration_points(longest + 1), repeats)
        calibration = Calibration(target_prefill_s=prefill, target_forward_s=forwards, spread=spread)
        if model_pass:
            with _first_layers(p.drafter_model, p.layers):
                d_prefill, calls, spread = _time_drafter_calls(p.drafter_model, context,
                                                               calibration_points(max(1, longest)), repeats)
            calibration.drafter_prefill_s, calibration.drafter_call_s = d_prefill, calls
        else:
            calibration.lookup_call_s, spread = _time_lookups(context, ngram_sizes, copy_tokens, p.eos, vocab, repeats)
        calibration.spread = max(calibration.spread, spread)
    return calibration


def _paced(calibration: Calibration, baseline: Any, method_trace: Any, default_ngram: int | None) -> None:
    """The calibration completed from real runs: the baseline's first step and forward pace, and the method's short
    run's loop time, set-up and first step, and pace against the calibrated calls."""
    later = baseline.steps[1:]
    first = baseline.steps[0] if baseline.steps else None
    calibration.baseline_first_step_s = (baseline.setup_ms + first.draft_ms + first.verify_ms + first.other_ms) \
        / 1000 if first else 0.0
    calibration.baseline_forward_s = forward_pace_s(baseline)
    loop = loop_time_s(method_trace)
    calibration.loop_s = loop if loop is not None else (
        sum(st.other_ms for st in later) / len(later) / 1000 if later else 0.0)
    if method_trace.steps:
        head = method_trace.steps[0]
        calibration.method_first_step_s = (method_trace.setup_ms + head.draft_ms + head.verify_ms
                                           + (head.other_ms or 0.0)) / 1000
        calibration.method_first_draft = len(head.drafted)
    calibration.method_pace_steps = pace_ratios(method_trace, calibration, default_ngram)
    calibration.method_pace = loop_pace(method_trace, calibration, default_ngram) or 0.0


def _calibrated(p: _Prompt, steps_by_setting: dict[Setting, list[Step]], baseline: Any, store: ModelStore,
                progress: Progress | None) -> tuple[Calibration, Any]:
    """The calibration and the baseline it was checked against: timed, completed from a short real run of the
    method's default, then checked with a short baseline; where the pace moved, everything once again, then flagged."""
    run = p.run
    short = min(PACE_CHECK_TOKENS, p.max_new)
    default = default_setting(run.method, run.params)
    method_tokens = pace_run_tokens(steps_by_setting.get(default, []), p.max_new)
    default_ngram = None if p.replay.model_pass else int(default.values["max_matching_ngram_size"])
    for attempt in range(2):
        if progress:
            progress("calibration" if not attempt else "the machine's pace changed: measuring again")
        if attempt:
            baseline = run_baseline(run, store)
        calibration = in_worker_thread(lambda: redone_after_giving_way(lambda: _timed_calls(p, steps_by_setting)),
                                       "playground-tune")
        _paced(calibration, baseline, run_setting(run.but(max_new_tokens=method_tokens), default, store),
               default_ngram)
        before = cost.step_pace_s(baseline, short)
        after = cost.step_pace_s(run_baseline(run.but(max_new_tokens=short), store))
        calibration.pace_change = after / before if before and after else 1.0
        if abs(calibration.pace_change - 1) <= cost.PACE_TOLERANCE:
            break
    else:
        calibration.reliable = False
    return calibration, baseline


def tune_prompt(request: TuneRequest, store: ModelStore = STORE, progress: Progress | None = None) -> PromptTune:
    """One baseline pass, one drafter pass, a calibration checked against the baseline's pace; every setting's
    predicted outcome."""
    p, baseline = _baseline_phase(request, store, progress)
    if progress:
        progress("drafter pass")
    steps_by_setting, pass_s = in_worker_thread(lambda: redone_after_giving_way(lambda: _replayed_settings(p)),
                                                "playground-tune")
    calibration, baseline = _calibrated(p, steps_by_setting, baseline, store, progress)
    baseline_run_s = baseline.summary.elapsed_s
    baseline_s = reference_baseline_s(baseline_run_s, calibration.baseline_first_step_s, calibration.pace_change)
    rows = []
    for s in p.settings:
        if s in p.refused:
            rows.append(Row(s, None, p.refused[s]))
            continue
        steps = steps_by_setting[s]
        ngram = None if p.replay.model_pass else int(s.values["max_matching_ngram_size"])
        rows.append(Row(s, outcome_of(steps, calibration.predict_s(steps, ngram), baseline_s)))
    return PromptTune(prompt=request.run.prompt, prompt_tokens=len(p.prompt_ids), new_tokens=len(p.y),
                      finish_reason=baseline.finish_reason, baseline_s=baseline_s, drafter_pass_s=pass_s,
                      calibration=calibration, rows=rows, env=dict(baseline.env), baseline_run_s=baseline_run_s)
