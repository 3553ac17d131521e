"""Tune's predictions are exact: every predicted step count, drafted and accepted count equals a real run's.

Float32, greedy, real tiny models (a target, a noisy copy as same-tokenizer drafter, and variants whose
EOS is a token the target emits mid-way), and the bundled Gemma 3 270M in the `bundled` tests. Timing
predictions are never asserted.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import statistics
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import is_sklearn_available

from playground.engine import LiveRun, RunRequest, prepare
from playground.i18n import number, t
from playground.methods import METHODS
from playground.models import DEFAULT_TARGET, DEFAULT_UNIVERSAL_ASSISTANT
from playground.trace import Step
from playground.tune import (
    PACE_CHECK_TOKENS, PACE_STEPS, RECOMMEND_MARGIN, REPLAYS, SPREAD_ROUNDS, Calibration, Outcome, PromptTune, Row, TuneResult, forward_pace_s, calibration_points, pace_run_tokens, NgramIndex, Setting, TuneError, TuneRequest, prompt_lookup_draft,
    run_baseline, run_setting, simulate_drafter, sweep_settings, tune, tune_prompt, verify,
)
from playground.tune import calibration as tune_calibration, cost as tune_cost
from playground.tune.calibration import _sampled_each
from playground.tune.drafter import _first_layers, _GreedyDrafter

PROMPTS = ("def add(a, b):", "The quick brown fox jumps")


@pytest.fixture(scope="module")
def eos_models(tiny_models, store, one_torch_thread, tmp_path_factory) -> dict[str, str]:
    """The tiny target and drafter with an extra EOS: a token the target's greedy output first emits mid-way."""
    base = run_baseline(RunRequest(prompt=PROMPTS[0], target=tiny_models["target"], max_new_tokens=40,
                                   dtype="float32", chat=False), store)
    y = base.output_ids
    firsts = [i for i, t in enumerate(y) if t not in y[:i] and 6 <= i <= 30]
    assert firsts, "the tiny target's output should hold a token first emitted mid-way"
    stop = y[firsts[-1]]
    root = tmp_path_factory.mktemp("eos")
    out = {}
    for name in ("target", "noisy"):
        model = AutoModelForCausalLM.from_pretrained(tiny_models[name])
        tokenizer = AutoTokenizer.from_pretrained(tiny_models[name])
        model.generation_config.eos_token_id = [stop, tokenizer.eos_token_id]
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        out[name] = str(root / name)
    return out


def _request(target: str, method: str, prompt: str, assistant: str | None = None, params: dict | None = None,
             max_new_tokens: int = 40, **sweep) -> TuneRequest:
    run = RunRequest(prompt=prompt, target=target, method=method, assistant=assistant, params=params or {},
                     max_new_tokens=max_new_tokens, dtype="float32", chat=False)
    return TuneRequest(run=run, calibration_repeats=1, **sweep)


def _assert_exact(request: TuneRequest, store, settings: list[Setting] | None = None) -> int:
    """Run settings for real and compare (steps, drafted, accepted) with the prediction; return how many.

    Tune's calibration is timed once here: no time is compared, and what a noisy machine makes it do again (the
    whole calibration after a pace change, more passes for a widely spread figure: a busy worker took both often)
    has tests of its own (test_tune_calibrates_every_width_it_predicts_and_checks_the_machine_s_pace and the
    `_sampled_each` tests)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tune_cost, "PACE_TOLERANCE", math.inf)
        patch.setattr(tune_calibration, "SPREAD_LIMIT", math.inf)
        result = tune_prompt(request, store)
    rows = [r for r in result.rows if settings is None or r.setting in settings]
    assert rows
    for row in rows:
        assert row.predicted is not None, row.refused
        trace = run_setting(request.run, row.setting, store)
        assert trace.output_ids == result_output(request, store)
        measured = (trace.summary.steps, trace.summary.drafted, trace.summary.accepted)
        assert measured == row.predicted.counts(), row.setting.label
        assert row.predicted.new_tokens == trace.summary.new_tokens
    return len(rows)


_BASELINES: dict[tuple, list[int]] = {}


def result_output(request: TuneRequest, store) -> list[int]:
    key = (request.run.target, request.run.prompt, request.run.max_new_tokens)
    if key not in _BASELINES:  # a plain run's output (no warm-up: nothing here is timed)
        base = request.run.but(method="baseline", assistant=None, params={})
        _BASELINES[key] = LiveRun(prepare(base, store)).run().output_ids
    return _BASELINES[key]


@pytest.mark.parametrize("which", ["tiny", "eos"])
def test_prompt_lookup_predictions_equal_real_runs(which, tiny_models, eos_models, store, one_torch_thread) -> None:
    target = (tiny_models if which == "tiny" else eos_models)["target"]
    for prompt in PROMPTS:
        request = _request(target, "prompt_lookup", prompt, max_draft=6, ngram_sizes=(1, 2, 3))
        assert _assert_exact(request, store) == 6 * 3 + 1  # every swept pair, plus the default (10 tokens, n=2)


@pytest.mark.parametrize("which", ["tiny", "eos"])
def test_speculative_predictions_equal_real_runs(which, tiny_models, eos_models, store, one_torch_thread) -> None:
    models = tiny_models if which == "tiny" else eos_models
    request = _request(models["target"], "speculative", PROMPTS[0], assistant=models["noisy"], max_draft=5,
                       schedules=("constant", "heuristic"), thresholds=(0.0, 0.5))
    assert _assert_exact(request, store) == 2 * 2 * 5  # the default (γ=5, constant, no threshold) is among them


@pytest.mark.slow
def test_early_exit_predictions_equal_real_runs(tiny_models, eos_models, store, one_torch_thread) -> None:
    for target in (tiny_models["target"], eos_models["target"]):
        request = _request(target, "early_exit", PROMPTS[1], params={"assistant_early_exit": 2}, max_draft=4,
                           schedules=("constant", "heuristic"), thresholds=(0.0, 0.3))
        assert _assert_exact(request, store) == 2 * 2 * 4 + 1


@pytest.mark.parametrize("method", ["speculative", "early_exit"])
def test_the_confidence_threshold_stops_after_the_unsure_token(method, tiny_models, store, one_torch_thread) -> None:
    """A threshold between the drafter's own confidences, so drafts run several tokens and the threshold cuts them
    mid-draft: stopping before the unsure token instead of after it would give other counts."""
    if method == "speculative" and is_sklearn_available():
        pytest.skip("with scikit-learn Transformers re-fits the threshold; tune refuses such settings")
    params = {"assistant_early_exit": 2} if method == "early_exit" else {}
    assistant = tiny_models["noisy"] if method == "speculative" else None
    gamma = 5
    probe = _request(tiny_models["target"], method, PROMPTS[0], assistant=assistant, params=params)
    prepared = prepare(probe.run, store)
    y = result_output(probe, store)
    drafter = prepared.assistant.model if prepared.assistant is not None else prepared.target.model
    with _first_layers(drafter, params.get("assistant_early_exit")), torch.inference_mode():
        greedy = _GreedyDrafter(drafter, prepared.input_ids[0].tolist(), y, prepared.eos_ids)
        for i in range(len(y)):
            greedy.proposals.get(i, gamma)
    confidences = sorted(c for i in range(len(y)) for c in greedy.proposals.confidence[i][:gamma])
    threshold = round(confidences[len(confidences) * 3 // 10], 4)  # about 3 in 10 drafted tokens are unsure
    steps = simulate_drafter(y, probe.run.max_new_tokens, prepared.eos_ids, greedy.proposals, gamma, "constant",
                             threshold)
    assert any(2 <= len(s.drafted) < gamma for s in steps), "drafts should run several tokens and stop mid-draft"
    request = _request(tiny_models["target"], method, PROMPTS[0], assistant=assistant, params=params,
                       max_draft=gamma, schedules=("constant", "heuristic"), thresholds=(threshold,))
    chosen = [s for s in request.settings() if s.values["assistant_confidence_threshold"] == threshold
              and s.values["num_assistant_tokens"] in (3, gamma)]
    assert _assert_exact(request, store, chosen) == 4


def test_a_short_budget_cuts_drafts_as_the_loop_does(tiny_models, store, one_torch_thread) -> None:
    """With 3 new tokens the draft cap (budget − 1) and the cut at the length limit decide every step."""
    for method, assistant in (("speculative", tiny_models["noisy"]), ("prompt_lookup", None)):
        request = _request(tiny_models["target"], method, PROMPTS[1], assistant=assistant, max_new_tokens=3,
                           max_draft=4, schedules=("heuristic",), thresholds=(0.0,), ngram_sizes=(1,))
        _assert_exact(request, store)


def test_prompt_lookup_draft_follows_transformers_rules() -> None:
    eos = frozenset({99})
    seq = [5, 6, 7, 8, 5, 6]
    # the longest n-gram first ([5, 6]), its earliest occurrence, copy up to num_tokens and the sequence end
    assert prompt_lookup_draft(seq, 3, 2, 100, eos) == [7, 8, 5]
    assert prompt_lookup_draft(seq, 3, 2, 100, eos, NgramIndex(seq + [1, 2], 2)) == [7, 8, 5]
    assert prompt_lookup_draft([5, 6, 99, 4, 5, 6], 3, 2, 100, eos) == []  # EOS first: cut to nothing
    assert prompt_lookup_draft([5, 6, 7, 99, 5, 6], 3, 2, 100, eos) == [7]
    assert prompt_lookup_draft(seq, 3, 2, len(seq) + 1, eos) == []  # one token of budget left: no draft
    assert prompt_lookup_draft([1, 2, 3], 3, 2, 100, eos) == []  # nothing matches
    # two different continuations of the same n-gram: the earliest is copied, not the latest
    twice = [5, 6, 7, 1, 5, 6, 8, 2, 5, 6]
    assert prompt_lookup_draft(twice, 3, 2, 100, eos) == [7, 1, 5]
    assert prompt_lookup_draft(twice, 3, 2, 100, eos, NgramIndex(twice + [3], 2)) == [7, 1, 5]
    assert prompt_lookup_draft(twice[:-1], 2, 2, 100, eos) == [6, 7]  # no 2-gram match; 1-gram [5]: the earliest


def test_several_prompts_give_an_overall_best_and_each_prompt_s_loss(tiny_models, store, one_torch_thread) -> None:
    request = _request(tiny_models["target"], "prompt_lookup", PROMPTS[0], max_draft=4, ngram_sizes=(1, 2))
    result = tune(request, list(PROMPTS), store)
    best = result.best()
    assert best is not None and best.predicted is not None and best.predicted.speedup is not None
    losses = result.losses()
    assert len(losses) == 2
    for loss, prompt in zip(losses, result.prompts):
        own_best = prompt.best()
        assert own_best is not None
        assert loss["own_best"] == own_best.setting.label
        assert loss["loss"] is not None and 0 <= loss["loss"] < 1
    overall = {r.setting: r for r in result.overall()}
    for setting, row in overall.items():
        assert row.predicted is not None
        assert row.predicted.steps == sum(p.row(setting).predicted.steps  # type: ignore[union-attr, misc]
                                          for p in result.prompts)
    verify(result, store)
    for setting in (best.setting, result.default()):
        measured = result.measured[setting]
        predicted = overall[setting].predicted
        assert predicted is not None
        assert measured.counts() == predicted.counts()
        assert measured.time_s and measured.speedup
    data = result.to_dict()
    recommended = result.recommended()
    assert recommended is not None
    assert data["recommended"] == recommended.setting.label and data["fastest_predicted"] == best.setting.label
    assert {"method", "params", "predicted", "measured"} <= set(data["rows"][0])
    assert set(data["rows"][0]["predicted"]) >= {"steps", "drafted", "accepted", "tokens_per_step", "time_s", "speedup"}


def test_methods_without_an_exact_replay_are_refused(tiny_models, store) -> None:
    with pytest.raises(TuneError, match="re-tokenises"):
        tune_prompt(_request(tiny_models["target"], "universal", PROMPTS[0], assistant=tiny_models["other"]), store)
    with pytest.raises(TuneError, match="greedy"):
        request = _request(tiny_models["target"], "prompt_lookup", PROMPTS[0])
        request.run.sample = True
        tune_prompt(request, store)
    with pytest.raises(TuneError, match="lossy"):
        tune_prompt(_request(tiny_models["target"], "speculative", PROMPTS[0], assistant=tiny_models["noisy"],
                             params={"assistant_ensemble_weight": 0.5}), store)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_verdict_says_exact_only_in_float32(dtype, tiny_models, store, one_torch_thread) -> None:
    """In float32 the counts are exact (the other tests prove it); in bfloat16 the verdict says they are predicted
    from the baseline's output, and how many settings run for real matched them, in every language."""
    from playground import tune_report

    request = _request(tiny_models["target"], "speculative", PROMPTS[0], assistant=tiny_models["noisy"],
                       max_new_tokens=24, max_draft=2, schedules=("constant",), thresholds=(0.0,))
    request.run.dtype = dtype
    result = verify(tune(request, [PROMPTS[0]], store), store)
    data = result.to_dict()
    exact = dtype == "float32"
    assert data["meta"]["counts_exact"] is exact
    rows = [r for r in result.prompts[0].rows if r.measured is not None]
    matched = sum(r.measured.counts() == r.predicted.counts() for r in rows)  # type: ignore[union-attr]
    assert data["verified"] == {"settings": len(rows), "matched": matched} and rows
    if exact:
        assert matched == len(rows)
    for lang in ("en", "ru", "ar"):
        text = tune_report.verdict(data, lang)
        claim = t("tune.verdict.exact", lang)
        hedge = t("tune.verdict.predicted", lang, dtype=dtype)
        assert (claim in text, hedge in text) == (exact, not exact), lang
        assert t("tune.verdict.matched", lang, settings=len(rows), matched=matched) in text
        titles = [f.layout.title.text for f in tune_report.figures(data, lang).values()]
        suffix = "" if exact else "_predicted"
        assert t("tune.chart.tau.title" + suffix, lang) in titles
        assert t("tune.chart.positions.title" + suffix, lang) in titles
    assert ("exact in float32" in t("tune.chart.tau.title", "en")
            and "exact" not in t("tune.chart.tau.title_predicted", "en"))


# --- the cost model (its structure; timings are never asserted) --------------------------------------

def _step(drafted: int) -> Step:
    return Step(index=0, drafted=list(range(drafted)), accepted=0, rejected=[], emitted=[0])


def test_the_cost_model_charges_a_generate_call_per_draft_and_the_loop_once_per_step() -> None:
    calibration = Calibration(target_prefill_s=9.0, target_forward_s={1: 0.10, 2: 0.12, 4: 0.20},
                              drafter_prefill_s=0.05, drafter_call_s={1: 0.03, 3: 0.05},
                              baseline_first_step_s=1.0, baseline_forward_s=0.2, loop_s=0.01)
    assert calibration.scale == pytest.approx(2.0)  # the baseline's forward phase ÷ the calibrated one-token forward
    steps = [_step(3), _step(1), _step(2), _step(0)]
    expected = (1.0 + 0.05 * 2  # the baseline's first step, the drafter's prefill once
                + 0.05 * 2  # step 0: a generate() call of 3 tokens; its forward is the prefill
                + (0.03 + 0.12) * 2 + 0.01  # a call of 1 token, a forward of width 2, the loop once
                + (0.04 + 0.16) * 2 + 0.01  # between calibrated points: a call of 2, a forward of width 3
                + 0.10 * 2 + 0.01)  # no draft: no call, a one-token forward
    assert calibration.predict_s(steps) == pytest.approx(expected)
    # the loop's time does not grow with the verification width
    wide, narrow = calibration.step_s(_step(3), first=False), calibration.step_s(_step(1), first=False)
    assert wide - narrow == pytest.approx((0.05 - 0.03 + 0.20 - 0.12) * 2)


def test_the_cost_model_charges_prompt_lookup_its_lookup_every_step() -> None:
    calibration = Calibration(target_prefill_s=9.0, target_forward_s={1: 0.10, 2: 0.12, 3: 0.14},
                              lookup_call_s={1: 0.001, 2: 0.002}, baseline_first_step_s=1.0,
                              baseline_forward_s=0.1, loop_s=0.01)
    steps = [_step(2), _step(0), _step(1)]
    expected = 1.0 + 0.002 + (0.002 + 0.10 + 0.01) + (0.002 + 0.12 + 0.01)  # no drafter prefill; a lookup each step
    assert calibration.predict_s(steps, ngram=2) == pytest.approx(expected)


def test_the_first_step_is_a_real_run_s_first_step_with_its_draft_exchanged() -> None:
    # The real run of the method's default (5 tokens drafted in its first step) measured its set-up and first step
    # (both prefills, that draft, the verification): a setting drafting 1 token first is charged that, less the
    # difference of the two draft calls; the calibration's cold first call (drafter_prefill_s) is not added.
    calibration = Calibration(target_prefill_s=9.0, target_forward_s={1: 0.10, 2: 0.12, 6: 0.2},
                              drafter_prefill_s=5.0, drafter_call_s={1: 0.03, 5: 0.11},
                              baseline_first_step_s=7.0, baseline_forward_s=0.2, loop_s=0.01,
                              method_first_step_s=1.5, method_first_draft=5)
    assert calibration.scale == pytest.approx(2.0)
    steps = [_step(1), _step(1)]
    expected = 1.5 + (0.03 - 0.11) * 2 + (0.03 + 0.12) * 2 + 0.01
    assert calibration.predict_s(steps) == pytest.approx(expected)
    assert calibration.predict_s([_step(5)]) == pytest.approx(1.5)  # the default's own first step, as measured
    lookup = Calibration(target_prefill_s=9.0, target_forward_s={1: 0.1, 3: 0.14}, lookup_call_s={2: 0.002},
                         baseline_first_step_s=7.0, baseline_forward_s=0.1, method_first_step_s=0.4,
                         method_first_draft=2, loop_s=0.01)
    assert lookup.predict_s([_step(2), _step(2)], ngram=2) == pytest.approx(0.4 + 0.002 + 0.14 + 0.01)


def test_the_loop_is_charged_a_real_run_s_other_phase() -> None:
    # The loop's own time per step is what the trace records outside drafting and verification (`other`), its median
    # over the later steps: not what is left of draft + verify once calibrated figures are taken off (that
    # difference of two noisy figures came out 0 or 25 ms on one machine, where `other` was 2-3 ms).
    from playground.tune import loop_time_s

    steps = [Step(index=k, drafted=[1] * 5, accepted=5, rejected=[], emitted=[0] * 6, draft_ms=300.0, verify_ms=v,
                  other_ms=o) for k, (v, o) in enumerate([(900.0, 40.0), (80.0, 2.0), (75.0, 3.0), (95.0, 2.5)])]
    assert loop_time_s(SimpleNamespace(steps=steps)) == pytest.approx(0.0025)
    assert loop_time_s(SimpleNamespace(steps=steps[:1])) is None


def test_the_scale_is_the_drafting_loop_s_own_pace_where_a_real_run_measured_it() -> None:
    # The baseline decodes one token a step; its pace against one calibrated one-token forward set every predicted
    # draft and verification (1.36 on one machine, where the loop's own calls ran at 1.0). A real run of the method
    # times the very calls a prediction charges: its later steps' draft + verify ÷ their calibrated figures.
    from playground.tune import loop_pace

    calibration = Calibration(target_prefill_s=1.0, target_forward_s={1: 0.05, 2: 0.06, 6: 0.08},
                              drafter_call_s={1: 0.06, 5: 0.30}, baseline_forward_s=0.10, loop_s=0.002)
    assert calibration.scale == pytest.approx(2.0)  # no real run: the baseline's pace
    steps = [Step(index=k, drafted=[1] * n, accepted=n, rejected=[], emitted=[0] * (n + 1), draft_ms=d, verify_ms=v)
             for k, (n, d, v) in enumerate([(5, 900.0, 900.0), (5, 330.0, 88.0), (1, 60.0, 60.0), (5, 400.0, 100.0)])]
    pace = loop_pace(SimpleNamespace(steps=steps), calibration)
    assert pace == pytest.approx(1.1)  # the median of 418/380, 120/120 and 500/380 (the first step is the prefill)
    assert pace is not None
    calibration.method_pace = pace
    assert calibration.scale == pytest.approx(1.1)
    assert calibration.step_s(_step(1), first=False) == pytest.approx((0.06 + 0.06) * 1.1 + 0.002)
    assert loop_pace(SimpleNamespace(steps=steps[:1]), calibration) is None


def test_the_method_s_short_run_makes_enough_steps_for_the_scale() -> None:
    # `scale` is the median pace of the short real run's steps after the first: at 16 tokens a 5-token draft that is
    # all accepted makes two, so the run is made as long as the default's replay needs for PACE_STEPS of them.
    def steps(emitted: int, count: int) -> list[Step]:
        return [Step(index=k, drafted=[0] * (emitted - 1), accepted=emitted - 1, rejected=[], emitted=[0] * emitted)
                for k in range(count)]

    assert pace_run_tokens(steps(6, 11), 64) == 6 * (PACE_STEPS + 1)
    assert pace_run_tokens(steps(6, 11), 30) == 30  # never past the request's budget
    assert pace_run_tokens(steps(1, 64), 64) == PACE_CHECK_TOKENS  # short steps: the pace check's 16 tokens suffice
    assert pace_run_tokens([], 64) == PACE_CHECK_TOKENS  # no replay of the default (refused): the pace check's length


def test_tune_takes_the_scale_from_enough_steps_of_a_real_run(tiny_models, store, one_torch_thread) -> None:
    # The tiny target drafting for itself accepts every draft: the default's 5-token drafts emit 6 tokens a step.
    request = _request(tiny_models["target"], "speculative", PROMPTS[1], assistant=tiny_models["target"],
                       max_new_tokens=48, max_draft=2, schedules=("constant",), thresholds=(0.0,))
    calibration = tune_prompt(request, store).calibration
    assert len(calibration.method_pace_steps) >= PACE_STEPS
    assert calibration.method_pace == pytest.approx(statistics.median(calibration.method_pace_steps))


def test_the_drafter_call_is_calibrated_as_the_loop_makes_it(tiny_models, one_torch_thread) -> None:
    # Each step of the assisted loop crops the drafter's cache to all but the last two tokens, re-reads those two and
    # drafts the rest one token at a time (`AssistedCandidateGenerator.get_candidates`): forwards of widths 2, 1, 1
    # for a draft of 3. A bare generate() on a cache holding all but the newest token reads 1, 1, 1 and costs less.
    from playground.tune.calibration import _time_drafter_calls

    model = AutoModelForCausalLM.from_pretrained(tiny_models["target"]).eval()
    context = list(range(5, 25))
    widths: list[int] = []
    handle = model.register_forward_pre_hook(lambda module, args, kwargs: widths.append(kwargs["input_ids"].shape[1]),
                                             with_kwargs=True)
    try:
        with torch.inference_mode():
            first, times, _ = _time_drafter_calls(model, context, [3], repeats=2)
    finally:
        handle.remove()
    assert set(times) == {3} and first > 0
    assert widths[0] == len(context)  # the generator's first call: the drafter's prefill of the context
    timed = widths[3:]
    assert timed == [2, 1, 1] * (len(timed) // 3) and len(timed) >= 6, widths


def test_the_verification_is_calibrated_with_the_loop_s_work_on_its_logits(tiny_models, monkeypatch,
                                                                          one_torch_thread) -> None:
    # The loop turns the verified rows to float32, copies them and picks each row's argmax: part of the verify phase.
    from playground.tune import calibration as tune_module  # the module that owns and calls it

    seen: list[tuple[int, int]] = []
    real = tune_module._verification_work
    monkeypatch.setattr(tune_module, "_verification_work",
                        lambda logits, width: (seen.append((logits.shape[1], width)), real(logits, width))[1])
    model = AutoModelForCausalLM.from_pretrained(tiny_models["target"]).eval()
    with torch.inference_mode():
        _, times, _ = tune_module._time_forwards(model, list(range(5, 15)), [1, 3], repeats=1)
    assert set(times) == {1, 3}
    assert (1, 1) in seen and (3, 3) in seen


def test_the_baseline_pace_is_a_median_a_cold_first_decode_step_does_not_set() -> None:
    # a baseline's first decode step (right after the prefill) can create kernels and run several times slower
    cold = [Step(index=k, drafted=[], accepted=0, rejected=[], emitted=[0], verify_ms=ms)
            for k, ms in enumerate([900.0, 400.0, 100.0, 100.0, 100.0, 100.0, 100.0])]
    assert forward_pace_s(SimpleNamespace(steps=cold)) == pytest.approx(0.1)
    assert forward_pace_s(SimpleNamespace(steps=cold[:1])) == 0.0  # no later step: no pace


def test_the_predicted_speedups_divide_the_baseline_at_the_mean_pace_of_its_two_runs(tiny_models, store, monkeypatch,
                                                                                     one_torch_thread) -> None:
    # One baseline run carries its moment's pace, and every predicted speedup of a category divides it: tune's
    # baseline ÷ the ones measured beside the real runs was off by 6.9 % (median, max 19.9 %) over 27 figures of
    # tests/measure/tune_accuracy.py, 5.1 % (max 13.5 %) at the mean pace of the run and the check after the calibration.
    from playground.tune import cost as tune_module  # tune_prompt reads step_pace_s through it

    paces = iter([0.100, 0.090] * 4)  # the run's step pace, then the check's: the check ran 10 % faster
    monkeypatch.setattr(tune_module, "step_pace_s", lambda trace, steps=None: next(paces))
    request = _request(tiny_models["target"], "prompt_lookup", PROMPTS[0], max_new_tokens=24, max_draft=2,
                       ngram_sizes=(1,))
    result = tune_prompt(request, store)
    c = result.calibration
    assert c.pace_change == pytest.approx(0.9)
    first, run_s = c.baseline_first_step_s, result.baseline_run_s
    assert 0 < first < run_s
    assert result.baseline_s == pytest.approx(first + (run_s - first) * 0.95)  # the later steps at the mean pace
    assert tune_module.reference_baseline_s(run_s, first, 1.0) == pytest.approx(run_s)  # a steady pace: the run
    for row in result.predicted():
        assert row.predicted is not None and row.predicted.time_s is not None
        assert row.predicted.speedup == pytest.approx(result.baseline_s / row.predicted.time_s)
    assert result.to_dict()["baseline_run_s"] == run_s


def test_verify_repeats_each_setting_in_rounds_and_takes_the_median(tiny_models, store, monkeypatch,
                                                                   one_torch_thread) -> None:
    from playground.tune import one_prompt as tune_module  # verify calls the runs through it

    request = _request(tiny_models["target"], "prompt_lookup", PROMPTS[0], max_new_tokens=16, max_draft=2,
                       ngram_sizes=(1,))
    result = tune(request, [PROMPTS[0]], store)
    chosen = [r.setting for r in result.overall()[:2]]
    order: list[str] = []
    real_setting, real_baseline = tune_module.run_setting, tune_module.run_baseline

    def setting_run(run, setting, store=store, progress=None):
        order.append(setting.label)
        return real_setting(run, setting, store, progress)

    def baseline_run(run, store=store, progress=None):
        order.append("baseline")
        return real_baseline(run, store, progress)

    monkeypatch.setattr(tune_module, "run_setting", setting_run)
    monkeypatch.setattr(tune_module, "run_baseline", baseline_run)
    verify(result, store, settings=chosen, repeats=3)
    a, b = (s.label for s in chosen)
    assert order == ["baseline", a, b, "baseline", a, b, "baseline", a, b, "baseline"]  # in rounds, never back to back
    bases = result.meta["measured_baselines_s"][0]
    assert len(bases) == 4 and result.measured_baseline_s == pytest.approx(statistics.median(bases))
    for s in chosen:
        row = result.prompts[0].row(s)
        assert row is not None and row.measured is not None and row.predicted is not None
        assert len(row.measured.samples_s) == 3
        assert row.measured.time_s == pytest.approx(statistics.median(row.measured.samples_s))
        assert row.measured.speedup == pytest.approx(statistics.median(bases) / row.measured.time_s)
        assert row.measured.counts() == row.predicted.counts()  # float32: every run the same


def _two_settings(default_s: float, other_s: float, pace_change: float = 1.0,
                  baseline_s: float = 1.0) -> tuple[TuneResult, Setting]:
    """A tune result built by hand: the default and one other setting with these predicted times, and the baseline's
    time (1 prompt)."""
    run = RunRequest(prompt="p", target="tiny", method="prompt_lookup", max_new_tokens=8, dtype="float32", chat=False)
    result = TuneResult(request=TuneRequest(run=run, max_draft=2), prompts=[])
    other = Setting.of("prompt_lookup", {"prompt_lookup_num_tokens": 2, "max_matching_ngram_size": 1})
    assert other != result.default()
    rows = [Row(s, Outcome(steps=4, drafted=6, accepted=4, tokens_per_step=2.0, time_s=t, speedup=baseline_s / t,
                           new_tokens=8)) for s, t in ((result.default(), default_s), (other, other_s))]
    calibration = Calibration(target_prefill_s=0.1, target_forward_s={1: 0.1}, pace_change=pace_change)
    result.prompts.append(PromptTune(prompt="p", prompt_tokens=3, new_tokens=8, finish_reason="length",
                                     baseline_s=baseline_s, drafter_pass_s=0.0, calibration=calibration, rows=rows))
    return result, other


@pytest.mark.parametrize("default_s, other_s, pace_change, picks_other", [
    (1.0, 0.90, 1.0, False),  # predicted 11 % faster: inside the 15 % margin, the default stays
    (1.0, 0.80, 1.0, True),  # predicted 25 % faster: outside it, the setting is recommended
    (1.0, 0.80, 1.2, False),  # the pace moved 20 % under the calibration: the margin is 35 %
    (1.0, 0.70, 0.8, True),  # predicted 43 % faster: beyond 35 %
])
def test_a_setting_is_recommended_over_the_default_only_beyond_the_prediction_s_margin(
        default_s: float, other_s: float, pace_change: float, picks_other: bool) -> None:
    from playground import tune_report

    result, other = _two_settings(default_s, other_s, pace_change, baseline_s=2.0)  # both clearly beat the baseline
    best = result.best()
    assert best is not None
    assert best.setting == other  # the fastest predicted, whatever the margin
    assert result.margin() == pytest.approx(RECOMMEND_MARGIN + abs(pace_change - 1))
    assert result.predicted_gain() == pytest.approx(default_s / other_s - 1)
    recommended = result.recommended()
    assert recommended is not None
    assert recommended.setting == (other if picks_other else result.default())
    assert result.clear_win() is picks_other
    data = result.to_dict()
    assert data["recommended"] == (other.label if picks_other else result.default().label)
    assert data["fastest_predicted"] == other.label
    for lang in ("en", "ru", "ar"):
        said = t("tune.verdict.no_clear_win", lang, label=other.shown(lang), gain=number(data['predicted_gain'], lang, ".0%"),
                 margin=number(data['margin'], lang, ".0%"))
        assert (said in tune_report.verdict(data, lang)) is not picks_other


# --- where no setting is predicted faster than plain decoding ---------------------------------------

def _opening(data: dict, lang: str) -> str:
    """The verdict's first sentence as tune_report must write it in `lang`: the recommended setting where a setting is
    predicted clearly faster than plain decoding; else that none is, of the fastest predicted one, and by how much."""
    from playground import tune_report

    rows = {r["label"]: r for r in data["rows"]}
    standing = data["standing"]
    row = rows[data["recommended"] if standing == "faster" else data["fastest_predicted"]]
    p = row["predicted"]
    x, tau = p["speedup"], p["tokens_per_step"]
    fields = dict(label=tune_report.shown_label(row["label"], data, lang), x=number(x, lang), tau=number(tau, lang),
                  accepted=p["accepted"],
                  drafted=p["drafted"], prompts=tune_report.tn_prompts(data["meta"].get("prompts", 1), lang))
    if standing == "faster":
        return t("tune.verdict.recommended", lang, **fields)
    if standing == "slower":
        return t("tune.verdict.slower", lang, time=number(1 / x, lang), cost=number(tau / x, lang), **fields)
    return t("tune.verdict.unclear", lang, gain=number(x - 1, lang, ".0%"), margin=number(data["margin"], lang, ".0%"),
             **fields)


def _mark(data: dict, lang: str) -> str:
    """The table's first cell of the setting the verdict opens with: ★ on a recommendation, else what it is."""
    from playground import tune_report

    if data["standing"] == "faster":
        return tune_report.shown_label(data["recommended"], data, lang) + " ★"
    return tune_report.shown_label(data["fastest_predicted"], data, lang) + t(f"tune.mark.{data['standing']}", lang)


def html_text(fragment: str) -> str:
    """An HTML fragment's text (tags dropped, entities read)."""
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


@pytest.mark.parametrize("default_s, other_s, pace_change, standing", [
    (1.0, 0.80, 1.0, "faster"),  # 1.25× baseline: a gain beyond the 15 % margin
    (1.25, 0.95, 1.0, "unclear"),  # 1.05× baseline (and 32 % faster than the default): inside the margin
    (1.0, 0.87, 1.2, "unclear"),  # 1.15× baseline, but the pace moved 20 % under the calibration: margin 35 %
    (2.0, 1.90, 1.0, "slower"),  # 0.53× baseline, and only 5 % faster than the default: the default stays
    (1.25, 1.0, 1.0, "slower"),  # exactly the baseline's time is no win
])
def test_the_verdict_says_where_no_setting_is_predicted_to_beat_plain_decoding(
        default_s: float, other_s: float, pace_change: float, standing: str) -> None:
    from playground import tune_report

    result, other = _two_settings(default_s, other_s, pace_change)
    data = result.to_dict()
    assert result.standing() == data["standing"] == standing and data["fastest_predicted"] == other.label
    for lang in ("en", "ru", "ar"):
        text = tune_report.verdict(data, lang)
        cells = [row[0] for row in tune_report.table_rows(data, lang=lang)]
        assert text.startswith(_opening(data, lang)), (lang, text)
        assert _mark(data, lang) in cells and (standing == "faster") is any("★" in c for c in cells), cells
        if standing != "faster":  # and where the margin kept the default, it says so without recommending it
            kept = t("tune.verdict.default_within_margin", lang, gain=number(data["predicted_gain"], lang, ".0%"),
                     margin=number(data["margin"], lang, ".0%"))
            assert (kept in text) is (data["recommended"] != other.label), lang
    assert ("Recommended" in tune_report.verdict(data)) is (standing == "faster")


@pytest.mark.parametrize("measured_speedup", [0.8, 1.0, 1.3])
def test_a_setting_measured_slower_than_plain_decoding_is_called_so(measured_speedup: float) -> None:
    from playground import tune_report

    result, other = _two_settings(1.0, 0.8)  # predicted 1.25×
    result.measured[other] = Outcome(steps=4, drafted=6, accepted=4, tokens_per_step=2.0, time_s=1 / measured_speedup,
                                     speedup=measured_speedup, new_tokens=8)
    data = result.to_dict()
    for lang in ("en", "ru", "ar"):
        text = tune_report.verdict(data, lang)
        fields = dict(label=other.shown(lang), x=number(measured_speedup, lang), predicted=number(1.25, lang))
        assert (t("tune.verdict.measured_slower", lang, **fields) in text) is (measured_speedup < 1), lang
        assert (t("tune.verdict.measured", lang, **fields) in text) is (measured_speedup >= 1), lang


@pytest.fixture(scope="module")
def contrary_drafter(
tiny_models, tmp_path_factory) -> str:
    """The tiny target with its output head shifted by one row: its greedy pick after any prefix is the token next to
    the target's, never the target's own, so every draft it makes is rejected. Twelve more layers that add nothing
    (their attention and MLP outputs zero: each passes the residual stream on as it came) make each of its forwards
    cost about four of the target's, so that every setting is slower than plain decoding by a margin no noisy
    calibration on a busy machine crosses (with the target's own cost, a busy worker once predicted one setting
    faster)."""
    target = AutoModelForCausalLM.from_pretrained(tiny_models["target"])
    layers = target.config.num_hidden_layers
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = layers + 12
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        missing = model.load_state_dict(target.state_dict(), strict=False).missing_keys
        assert all(key.startswith("model.layers.") and int(key.split(".")[2]) >= layers for key in missing), missing
        for layer in model.model.layers[layers:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight.copy_(torch.roll(target.lm_head.weight, shifts=-1, dims=0))
    path = tmp_path_factory.mktemp("contrary") / "drafter"
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny_models["target"]).save_pretrained(path)
    return str(path)


def test_where_every_setting_is_slower_than_plain_decoding_tune_says_so_everywhere(
        tiny_models, contrary_drafter, tmp_path, capsys, one_torch_thread) -> None:
    """A drafter that is never right: each step emits the one token a baseline step emits, and costs a drafter's
    generate() call and a wider verification besides, so every setting is predicted slower than plain decoding. The
    page (status, verdict, table), the CLI and its HTML report say so, in every language the page speaks, and
    recommend nothing."""
    from playground import tune_report
    from playground.app import tune_tab
    from playground.cli import main

    out = tune_tab.TUNED.read(tune_tab.run_tune(PROMPTS[0], tiny_models["target"], contrary_drafter, "speculative",
                                                {}, "float32", "off", 16, 2, ""))
    status, table, result = out["status"], out["table"], out["result"]
    data = result.to_dict()
    assert all(r["predicted"]["accepted"] == 0 and r["predicted"]["speedup"] < 1 for r in data["rows"]), \
        [(r["label"], r["predicted"]["accepted"], r["predicted"]["speedup"]) for r in data["rows"]]
    assert data["standing"] == "slower"
    assert html_text(table).startswith(_opening(data, "en")) and _mark(data, "en") in html_text(table)
    assert "★" not in table and "recommended" not in html_text(status)
    for lang in ("en", "ru", "ar"):
        assert html_text(tune_tab.result_html(data, lang)).startswith(_opening(data, lang))
        assert _mark(data, lang) in html_text(tune_tab.result_html(data, lang))
        assert tune_tab.tuned_status(result, lang).endswith(t("tune.status.slower", lang,
                                                              label=tune_report.shown_label(
                                                                  data["fastest_predicted"], data, lang)))
    assert html_text(tune_report.render_report(data)).count(_opening(data, "en")) == 1
    code = main(["tune", "--target", tiny_models["target"], "--method", "speculative", "--assistant", contrary_drafter,
                 "--prompt", PROMPTS[0], "--max-new-tokens", "16", "--max-draft", "2", "--schedules", "constant",
                 "--thresholds", "0", "--dtype", "float32", "--no-chat", "--quiet", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    data = json.loads((tmp_path / "tune.json").read_text(encoding="utf-8"))
    assert data["standing"] == "slower" and out.startswith(_opening(data, "en"))
    assert _opening(data, "en") in html_text((tmp_path / "tune.html").read_text(encoding="utf-8"))


# The tiny target copies the count it is given: prompt lookup drafts it, and it is accepted (2.9× predicted, τ 3.7).
WIN_PROMPT = "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three,"


def test_where_a_setting_wins_clearly_tune_recommends_it(tiny_models, one_torch_thread) -> None:
    """Prompt lookup where the tiny target copies the count in its prompt: drafting is a lookup, the copies are
    accepted, and the fastest setting is predicted faster than plain decoding beyond the margin; the verdict recommends
    it."""
    from playground import tune_report
    from playground.app import tune_tab

    out = tune_tab.TUNED.read(tune_tab.run_tune(WIN_PROMPT, tiny_models["target"], None, "prompt_lookup",
                                                {}, "float32", "off", 48, 8, ""))
    status, table, result = out["status"], out["table"], out["result"]
    data = result.to_dict()
    assert data["standing"] == "faster", [(r["label"], r["predicted"]["speedup"]) for r in data["rows"]]
    for lang in ("en", "ru", "ar"):
        assert tune_report.verdict(data, lang).startswith(_opening(data, lang))
        assert _mark(data, lang) in html_text(tune_tab.result_html(data, lang))
        assert tune_tab.tuned_status(result, lang).endswith(t("tune.status.recommended", lang,
                                                              label=tune_report.shown_label(
                                                                  data["recommended"], data, lang)))
    assert html_text(table).startswith(_opening(data, "en")) and "recommended" in html_text(status)


def test_calibration_covers_every_length_and_repeats_where_the_spread_is_wide() -> None:
    assert calibration_points(5) == [1, 2, 3, 4, 5]
    points = calibration_points(40)
    assert points[:16] == list(range(1, 17)) and points[-1] == 40 and 33 not in points
    samples = iter([1.0, 3.0] + [1.0] * 10)
    calls = []

    def wide() -> float:
        calls.append(1)
        return next(samples)

    medians, spread = _sampled_each({1: wide}, 2)
    assert len(calls) == SPREAD_ROUNDS * 2 and medians == {1: 1.0} and spread == pytest.approx(2.0)
    steady = iter([1.0, 1.1, 9.0])
    medians, spread = _sampled_each({1: lambda: next(steady)}, 2)
    assert medians == {1: pytest.approx(1.05)} and spread == pytest.approx(0.1 / 1.05)


def test_calibration_samples_every_figure_in_turn_so_a_slow_spell_sets_none() -> None:
    # The machine's pace drifts over seconds. Three samples of one figure taken back to back share a slow spell and
    # their median keeps it (a calibrated draft of 5 tokens came out above the one of 6 on the bundled Gemma); taken
    # in turn with the other figures, the spell touches one sample of each, and every median leaves it out.
    order: list[int] = []
    slow_spell = {0, 1, 2}  # the first three samples, whichever figures they belong to, take 10 s instead of 1 s

    def figure(key: int):
        def measure() -> float:
            order.append(key)
            return 10.0 if len(order) - 1 in slow_spell else 1.0
        return measure

    medians, _ = _sampled_each({1: figure(1), 2: figure(2), 3: figure(3)}, 3)
    assert order[:9] == [1, 2, 3] * 3  # one pass over every figure, then the next
    assert medians == {1: 1.0, 2: 1.0, 3: 1.0}
    # each figure's samples spread 10 → 1: every figure had more passes, still in turn
    assert order[9:] == [1, 2, 3] * 3 * (SPREAD_ROUNDS - 1)


def test_tune_calibrates_every_width_it_predicts_and_checks_the_machine_s_pace(tiny_models, store, monkeypatch,
                                                                              one_torch_thread) -> None:
    from playground.tune import cost as tune_module  # tune_prompt and verify read PACE_TOLERANCE through it

    request = _request(tiny_models["target"], "speculative", PROMPTS[0], assistant=tiny_models["noisy"],
                       max_new_tokens=24, max_draft=3, schedules=("heuristic",), thresholds=(0.0,))
    result: PromptTune | TuneResult  # a prompt's tune, then a whole tune's
    result = tune_prompt(request, store)
    calibration = result.calibration
    longest = max(len(r.predicted.by_position) for r in result.rows if r.predicted)  # the longest draft predicted
    assert longest > 3  # the heuristic schedule grew past max_draft ...
    assert set(range(1, longest + 2)) <= set(calibration.target_forward_s)  # ... and every width is calibrated
    assert set(range(1, longest + 1)) <= set(calibration.drafter_call_s)
    assert calibration.loop_s >= 0 and calibration.pace_change > 0
    # reliable unless the pace check failed twice (the last check's figure is kept)
    assert calibration.reliable == (abs(calibration.pace_change - 1) <= tune_module.PACE_TOLERANCE)
    monkeypatch.setattr(tune_module, "PACE_TOLERANCE", -1.0)  # every pace check fails: measured again, then flagged
    result = tune(request, [PROMPTS[0]], store)
    assert not result.prompts[0].calibration.reliable
    from playground import tune_report

    verify(result, store)  # its baselines before and after the measured runs: the same check
    data = result.to_dict()
    meta = data["meta"]
    assert meta["times_reliable"] is False and meta["measured_reliable"] is False
    for lang in ("en", "ru", "ar"):
        text = tune_report.verdict(data, lang)
        assert t("tune.verdict.unreliable", lang) in text
        assert t("tune.verdict.measured_unreliable", lang, change=number(meta['measured_pace_change'], lang)) in text


# --- the CLI and the page's Tune view ------------------------------------------------------------

def test_cli_tune_writes_json_and_report_and_verifies(tiny_models, tmp_path, capsys, one_torch_thread) -> None:
    from playground.cli import main

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"question_id": i, "category": c, "turns": [p]})
                                 for i, (c, p) in enumerate([("code", PROMPTS[0]), ("story", PROMPTS[1]),
                                                             ("code", "def mul(a, b):")])), encoding="utf-8")
    out = tmp_path / "out"
    code = main(["tune", "--target", tiny_models["target"], "--method", "prompt_lookup", "--prompts", str(prompts),
                 "--categories", "code", "--max-new-tokens", "20", "--max-draft", "3", "--ngram-sizes", "1,2",
                 "--dtype", "float32", "--no-chat", "--verify", "--quiet", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    data = json.loads((out / "tune.json").read_text(encoding="utf-8"))
    assert data["meta"]["prompts"] == 2  # the two "code" prompts
    assert len(data["rows"]) == 3 * 2 + 1
    measured = [r for r in data["rows"] if r["measured"]]
    assert {r["label"] for r in measured} == {data["recommended"], data["fastest_predicted"], data["default"]}
    for row in measured:
        assert {k: row["measured"][k] for k in ("steps", "drafted", "accepted")} == \
            {k: row["predicted"][k] for k in ("steps", "drafted", "accepted")}
    report = (out / "tune.html").read_text(encoding="utf-8")
    assert "Predicted speedup per setting" in report and data["recommended"] in report
    # "Recommended: …", or (timings on a tiny model vary) that no setting is predicted clearly faster than the baseline
    assert capsys.readouterr().out.startswith(_opening(data, "en"))


def test_cli_tune_refuses_bad_input_with_one_line(tiny_models, tmp_path, capsys) -> None:
    from playground.cli import main

    assert main(["tune", "--target", tiny_models["target"], "--method", "universal", "--assistant",
                 tiny_models["other"], "--prompt", "x", "--out", str(tmp_path)]) == 2
    assert "re-tokenises" in capsys.readouterr().err
    assert main(["tune", "--method", "prompt_lookup", "--out", str(tmp_path)]) == 2
    assert "give --prompt" in capsys.readouterr().err
    assert main(["tune", "--method", "prompt_lookup", "--prompt", "x", "--ngram-sizes", "two", "--out", str(tmp_path)]) == 2
    assert "--ngram-sizes takes comma-separated numbers" in capsys.readouterr().err
    assert not (tmp_path / "tune.json").exists()


def test_tune_tab_handlers_run_a_tiny_tune_and_measure_it(tiny_models, one_torch_thread) -> None:
    from playground.app import tune_tab

    params = {"prompt_lookup_num_tokens": 10, "max_matching_ngram_size": 2}
    out = tune_tab.TUNED.read(tune_tab.run_tune(
        PROMPTS[0], tiny_models["target"], None, "prompt_lookup", params, "float32", "off", 20, 3,
        PROMPTS[1] + "\n"))
    status, table, speed, per_step = out["status"], out["table"], out["speedup"], out["tokens_per_step"]
    positions, result = out["positions"], out["result"]
    assert 'data-kind="done"' in status and tune_tab.tuned_status(result) in html_text(status)  # recommended, or not
    assert len(result.prompts) == 2 and _mark(result.to_dict(), "en") in html_text(table)  # ★, or what it is instead
    assert 'data-testid="pg-tune-losses"' in table
    assert speed.data and per_step.data and positions.data
    out = tune_tab.TUNED.read(tune_tab.run_verify(result))
    status, table, again = out["status"], out["table"], out["result"]
    assert 'data-kind="done"' in status and again is result
    assert "Measured " in table and result.measured


def test_tune_tab_handlers_say_what_is_wrong(tiny_models) -> None:
    from playground.app import tune_tab

    status = tune_tab.TUNED.read(tune_tab.run_tune(PROMPTS[0], tiny_models["target"], tiny_models["other"],
                                                   "universal", {}, "float32", "off", 20, 3, ""))["status"]
    assert 'data-kind="error"' in status and "re-tokenises" in status
    status = tune_tab.TUNED.read(tune_tab.run_tune(PROMPTS[0], tiny_models["target"], None, "prompt_lookup", {},
                                                   "float32", "off", 20, 3, "\n".join(["more"] * 9)))["status"]
    assert 'data-kind="error"' in status and "at most 8" in status
    status = tune_tab.TUNED.read(tune_tab.run_verify(None))["status"]
    assert 'data-kind="error"' in status and "press Tune first" in status


def test_the_page_has_a_private_tune_tab() -> None:
    from playground.app import page

    demo = page.build_ui()
    assert list(demo.get_api_info()["named_endpoints"]) == ["/generate"]
    config = demo.get_config_file()
    assert any(c.get("props", {}).get("elem_id") == "pg-tab-tune" for c in config["components"])


# --- the bundled Gemma 3 270M ---------------------------------------------------------------------

LIST_PROMPT = ("Repeat the list exactly. List: apples, pears, plums, grapes, lemons, cherries, melons. "
               "Repeated list: apples, pears,")


@pytest.mark.bundled
@pytest.mark.slow
def test_tune_bundled_prompt_lookup_and_self_speculation(store) -> None:
    """Gemma 3 270M: prompt lookup, Gemma as its own assistant (every draft accepted) and early exit at layer 12."""
    request = _request(DEFAULT_TARGET, "prompt_lookup", LIST_PROMPT, max_new_tokens=12, max_draft=3,
                       ngram_sizes=(1, 3))
    _assert_exact(request, store, [Setting.of("prompt_lookup", {"prompt_lookup_num_tokens": 3,
                                                                "max_matching_ngram_size": 3}),
                                   Setting.of("prompt_lookup", {})])
    request = _request(DEFAULT_TARGET, "speculative", LIST_PROMPT, assistant=DEFAULT_TARGET, max_new_tokens=10,
                       max_draft=3, schedules=("heuristic",), thresholds=(0.9,))
    _assert_exact(request, store, [Setting.of("speculative", {"num_assistant_tokens": 2,
                                                              "num_assistant_tokens_schedule": "heuristic",
                                                              "assistant_confidence_threshold": 0.9})])
    request = _request(DEFAULT_TARGET, "early_exit", LIST_PROMPT, params={"assistant_early_exit": 12},
                       max_new_tokens=8, max_draft=3, schedules=("constant",), thresholds=(0.3,))
    _assert_exact(request, store, [Setting.of("early_exit", {"assistant_early_exit": 12, "num_assistant_tokens": 3,
                                                             "assistant_confidence_threshold": 0.3})])


def test_tune_bundled_universal_is_refused(store) -> None:
    with pytest.raises(TuneError, match="re-tokenises"):
        tune_prompt(_request(DEFAULT_TARGET, "universal", LIST_PROMPT, assistant=DEFAULT_UNIVERSAL_ASSISTANT), store)


def test_tune_refuses_a_bad_draft_range() -> None:
    with pytest.raises(TuneError, match="between 1 and 64"):
        tune_prompt(TuneRequest(run=RunRequest(prompt="x", method="prompt_lookup"), max_draft=0))


def test_tunes_draft_range_is_the_methods_own(monkeypatch) -> None:
    """The largest draft length tune takes is bounded by the method's draft-length control in the registry (one
    definition, not a copy): a prompt lookup that copies at most 32 tokens refuses 40, naming its range (a copied 64
    let it through to the next check, the ensemble's refusal, reached here before any model loads)."""
    lookup = METHODS["prompt_lookup"]
    params = tuple(dataclasses.replace(p, maximum=32) if p.name == "prompt_lookup_num_tokens" else p
                   for p in lookup.params)
    monkeypatch.setitem(METHODS, "prompt_lookup", dataclasses.replace(lookup, params=params))
    run = RunRequest(prompt="x", method="prompt_lookup", params={"assistant_ensemble_weight": 0.5})
    with pytest.raises(TuneError, match="between 1 and 32; got 40"):
        tune_prompt(TuneRequest(run=run, max_draft=40))



# --- the registry decides what tune replays ---------------------------------------------------------

# The refusals tune gave when they were keyed by method name; the registry's `replay_obstacle` now carries them.
OBSTACLES = {
    "baseline": "baseline drafts nothing: it is the reference every setting is compared with",
    "mtp": "MTP layers draft from the target's hidden states of the previous verification; tune has no exact replay "
           "for them",
    "mtp_drafter": "the Gemma 4 drafter reads the target's KV cache of the previous verification; tune has no exact "
                   "replay for it",
    "universal": "universal decoding re-tokenises each draft through text and re-aligns the assistant's prompt "
                 "every step; its drafts cannot be replayed exactly from one pass, so tune offers no prediction for it",
}


@pytest.mark.parametrize("name", list(METHODS))
def test_the_registry_says_whether_tune_replays_a_method(name: str) -> None:
    method = METHODS[name]
    assert (method.draft_replay is None) == (method.replay_obstacle is not None), name
    if method.draft_replay is None:
        assert method.replay_obstacle == OBSTACLES[name]
        with pytest.raises(TuneError, match=f"^{re.escape(OBSTACLES[name])}$"):
            sweep_settings(name, 2)
        with pytest.raises(TuneError, match=f"^{re.escape(OBSTACLES[name])}$"):
            tune_prompt(TuneRequest(run=RunRequest(prompt="x", method=name)))  # refused before any model loads
        return
    replay = REPLAYS[method.draft_replay]
    assert method.draft_length_param in replay.swept and set(replay.swept) <= {p.name for p in method.params}
    settings = sweep_settings(name, 3, ngram_sizes=(1, 2), schedules=("constant",), thresholds=(0.0,))
    lengths = {s.values[method.draft_length_param] for s in settings}
    assert {1, 2, 3} <= lengths and all(s.label.startswith(f"{name}(") for s in settings)


def test_the_replay_follows_the_registry_attribute_not_the_name(monkeypatch) -> None:
    """A method's entry, not its name, decides: without a replay speculative is refused, with one universal sweeps."""
    speculative, universal = METHODS["speculative"], METHODS["universal"]
    monkeypatch.setitem(METHODS, "speculative", dataclasses.replace(speculative, draft_replay=None,
                                                                    replay_obstacle="no replay here"))
    with pytest.raises(TuneError, match="^no replay here$"):
        sweep_settings("speculative", 2)
    monkeypatch.setitem(METHODS, "universal", dataclasses.replace(universal, draft_replay="assistant_model",
                                                                  replay_obstacle=None))
    labels = [s.label for s in sweep_settings("universal", 2, schedules=("constant",), thresholds=(0.0,))]
    assert labels == ["universal(γ=1)", "universal(γ=2)", "universal(γ=5)"]  # the sweep, then the default


def test_setting_labels_and_sweeps_keep_their_shape() -> None:
    lookup = sweep_settings("prompt_lookup", 2, ngram_sizes=(1, 3))
    assert [s.label for s in lookup] == ["prompt_lookup(tokens=1, ngram=1)", "prompt_lookup(tokens=2, ngram=1)",
                                         "prompt_lookup(tokens=1, ngram=3)", "prompt_lookup(tokens=2, ngram=3)",
                                         "prompt_lookup(tokens=10, ngram=2)"]
    early = sweep_settings("early_exit", 1, schedules=("heuristic", "constant"), thresholds=(0.0, 0.5),
                           fixed={"assistant_early_exit": 3})
    assert [s.label for s in early] == ["early_exit(γ=1, heuristic)", "early_exit(γ=1, heuristic, conf≥0.5)",
                                        "early_exit(γ=1)", "early_exit(γ=1, conf≥0.5)", "early_exit(γ=5)"]
    assert all(s.values["assistant_early_exit"] == 3 for s in early)
    with pytest.raises(TuneError, match="unknown schedule 'bogus'"):
        sweep_settings("speculative", 2, schedules=("bogus",))
