"""Speculative sampling's random draw r, recorded as Transformers drew it (`playground.draw_tap`): the draw decides
each recorded step as `r <= p/q` says, recording it changes no output, and traces without it still load."""

from __future__ import annotations

import json

import pytest

from playground import draw_tap
from playground.engine import LiveRun, PreparedRun, RunRequest, plain_generate, prepare
from playground.models import ModelStore
from playground.trace import SCHEMA_VERSION, Trace, TraceFormatError

pytestmark = pytest.mark.usefixtures("one_torch_thread")
PROMPT = "The capital of France is"
TOLERANCE = 1e-4  # p and q recorded from the same logits, softmaxed row by row (the ratio may differ in its last bits)


def _prepared(store: ModelStore, tiny_models: dict[str, str], seed: int, weight: float | None = None) -> PreparedRun:
    params = {"num_assistant_tokens": 4, "assistant_confidence_threshold": 0.0}
    if weight is not None:
        params["assistant_ensemble_weight"] = weight
    return prepare(RunRequest(prompt=PROMPT, target=tiny_models["target"], assistant=tiny_models["noisy"],
                              method="speculative", params=params, max_new_tokens=24, sample=True, temperature=1.0,
                              top_k=0, seed=seed, dtype="float32", chat=False), store)


@pytest.mark.parametrize("weight", [None, 0.7], ids=["speculative", "ensemble"])
def test_the_recorded_draw_decides_every_judged_draft(store, tiny_models, weight) -> None:
    """Draft i was kept while r_i <= p_i/q_i (ensemble: v_i/q_i): the recorded draws give each step's outcome."""
    refusals = kept = 0
    for seed in (0, 1, 2):
        trace = LiveRun(_prepared(store, tiny_models, seed, weight)).run()
        assert trace.schema_version == SCHEMA_VERSION == 4
        for step in trace.steps:
            if not step.drafted:
                assert step.draws is None
                continue
            assert step.draws is not None and len(step.draws) == len(step.drafted)
            assert all(0.0 <= r < 1.0 for r in step.draws)
            judged = step.mixture if weight is not None else step.p
            assert judged is not None and step.q is not None
            for i in range(step.accepted):
                assert step.draws[i] <= judged[i] / step.q[i] * (1 + TOLERANCE), (seed, step.index, i)
                kept += 1
            if step.rejected:
                i = step.accepted
                assert step.draws[i] > judged[i] / step.q[i] * (1 - TOLERANCE), (seed, step.index, i)
                refusals += 1
        assert Trace.from_json(trace.to_json()) == trace
    assert refusals and kept, "the runs judged drafts both ways"


def test_recording_the_draw_changes_no_output(store, tiny_models) -> None:
    """The same seed gives the same tokens with the draws recorded (the engine's run) and without (plain
    generate(), no tap installed): the tap takes nothing from the random stream."""
    for seed in (0, 3):
        prepared = _prepared(store, tiny_models, seed)
        trace = LiveRun(prepared).run()
        assert any(step.draws for step in trace.steps)
        assert not draw_tap._users, "nothing stays patched after a run"
        assert trace.output_ids == plain_generate(prepared)[0]


def test_a_trace_without_draws_still_loads(store, tiny_models) -> None:
    trace = LiveRun(_prepared(store, tiny_models, 0)).run()
    data = json.loads(trace.to_json())
    for step in data["steps"]:
        step.pop("draws")
    old = Trace.from_dict({**data, "schema_version": 3})
    assert all(step.draws is None for step in old.steps) and old.output_ids == trace.output_ids
    step = next(s for s in data["steps"] if s["drafted"])
    step["draws"] = [1.5] * len(step["drafted"])
    with pytest.raises(TraceFormatError):
        Trace.from_dict(data)
    step["draws"] = [0.5]  * (len(step["drafted"]) + 1)
    with pytest.raises(TraceFormatError):
        Trace.from_dict(data)


# --------------------------------------------------------------------------- the microscope says what r did

from test_i18n_no_english import english_words  # noqa: E402

from playground import i18n, microscope, microscope_view  # noqa: E402
from playground.trace import Position, Ranked, Step  # noqa: E402

SAMPLING = {"sample": True}


def _step(draws: list[float] | None) -> Step:
    """Two judged drafts: the first with p > q (kept whatever the draw), the second with p/q = 0.2, refused."""
    return Step(index=0, drafted=[5, 6], accepted=1, rejected=[6], emitted=[5, 7], drafted_text=["a", "b"],
                emitted_text=["a", "c"], q=[0.2, 0.5], p=[0.4, 0.1], draws=draws, dists=[
                    Position(p=[Ranked(5, 0.4, "a")], p_drafted=0.4, p_emitted=0.4, q=[Ranked(5, 0.2, "a")],
                             q_drafted=0.2),
                    Position(p=[Ranked(7, 0.5, "c")], p_drafted=0.1, p_emitted=0.5, q=[Ranked(6, 0.5, "b")],
                             q_drafted=0.5)])


@pytest.mark.parametrize("lang", list(i18n.LANGUAGES))
def test_the_panel_says_kept_because_or_refused_because_r(lang) -> None:
    step = _step([0.9, 0.3])
    kept, refused = microscope.explain(step, 0, SAMPLING), microscope.explain(step, 1, SAMPLING)
    assert (kept.acceptance, kept.draw) == (1.0, 0.9) and (refused.acceptance, refused.draw) == (0.2, 0.3)
    assert [m.key for m in kept.messages] == ["microscope.sampling.kept", "microscope.draw.always"]
    assert [m.key for m in refused.messages][:2] == ["microscope.sampling.refused", "microscope.draw.refused"]
    always, because = kept.messages[1].localized(lang), refused.messages[1].localized(lang)
    assert i18n.number(0.9, lang, ".3f") in always
    assert i18n.number(0.3, lang, ".3f") in because and i18n.number(0.2, lang, ".3f") in because and ">" in because
    if lang == "en":
        assert always == "With a chance of 1 the draft is kept whatever the random draw (here r = 0.900)."
        assert because == "Refused because the random draw r = 0.300 > 0.200 (r is drawn uniformly from [0, 1) for each draft)."
    else:
        assert not english_words(always + because)
    assert not any("fell" in m for m in kept.messages + refused.messages)
    # The panel: the sentences and the draw on the unit line.
    panel = microscope_view.panel_html(_one_step_trace(step), 0, 1, lang)
    assert 'data-testid="pg-micro-draw" data-r="0.300000" data-a="0.200000" data-kept="false"' in panel
    assert microscope_view.panel_html(_one_step_trace(step), 0, 0, lang).count('data-kept="true"') == 1


@pytest.mark.parametrize("lang", list(i18n.LANGUAGES))
def test_a_kept_draft_below_a_chance_of_one_and_a_trace_without_draws(lang) -> None:
    step = _step([0.15, 0.3])
    step.p = [0.1, 0.1]
    assert step.dists is not None
    step.dists[0].p_drafted = 0.1  # p/q = 0.5 at the first draft: kept because r = 0.15 <= 0.5
    message = microscope.explain(step, 0, SAMPLING).messages[1]
    assert message.key == "microscope.draw.kept"
    assert i18n.number(0.15, lang, ".3f") in message.localized(lang) and "≤" in message.localized(lang)
    old = _step(None)
    assert [m.key for m in microscope.explain(old, 0, SAMPLING).messages][1] == "microscope.draw.always_unrecorded"
    assert [m.key for m in microscope.explain(old, 1, SAMPLING).messages][1] == "microscope.draw.unrecorded"
    assert 'pg-micro-draw"' not in microscope_view.panel_html(_one_step_trace(old), 0, 1, lang)
    if lang != "en":
        assert not english_words(" ".join(m.localized(lang) for m in microscope.explain(old, 1, SAMPLING).messages))


def test_a_draw_too_close_to_the_chance_is_written_with_enough_digits() -> None:
    step = _step([0.9, 0.20004])
    text = str(microscope.explain(step, 1, SAMPLING).messages[1])
    assert text == "Refused because the random draw r = 0.20004 > 0.20000 (r is drawn uniformly from [0, 1) for each draft)."


def _one_step_trace(step: Step):  # a one-step trace for the panel
    from playground.trace import Trace

    return Trace(method="speculative", target="t", assistant="a", params={}, prompt="x", chat=False, lossy=False,
                 env={}, output_ids=list(step.emitted), output_text="ac", steps=[step],
                 decoding={"sample": True})


def test_self_speculation_records_its_draws_too(store, tiny_models) -> None:
    """Early exit drafts with logits, so Transformers judges its drafts by the same draw: recorded, and deciding."""
    trace = LiveRun(prepare(RunRequest(
        prompt=PROMPT, target=tiny_models["target"], method="early_exit",
        params={"assistant_early_exit": 2, "num_assistant_tokens": 3, "assistant_confidence_threshold": 0.0},
        max_new_tokens=16, sample=True, temperature=1.0, top_k=0, seed=0, dtype="float32", chat=False),
        store)).run()
    judged = [(step, i) for step in trace.steps if step.drafted for i in range(step.judged_drafts)]
    assert judged and all(step.draws is not None for step, _ in judged)
    for step, i in judged:
        assert step.p is not None and step.q is not None and step.draws is not None
        ratio = step.p[i] / step.q[i]
        assert (step.draws[i] <= ratio * (1 + TOLERANCE)) if i < step.accepted else (step.draws[i] > ratio * (1 - TOLERANCE))
