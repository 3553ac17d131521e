"""Labels that say what happened: why a step drafted nothing, and the ensemble mixture beside p and q."""

from __future__ import annotations

import pytest

from playground.engine import LiveRun, RunRequest, prepare
from playground.drafts import EmptyDraft
from playground.methods import METHODS
from playground.trace import check_invariants

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _empty(context: list[int], **kw) -> EmptyDraft:
    base = dict(first_step=False, last_position=False, params={"max_matching_ngram_size": 2}, eos_ids=frozenset({7}))
    return EmptyDraft(context=context, **{**base, **kw})


def test_prompt_lookup_says_no_match_only_when_nothing_matched() -> None:
    lookup = METHODS["prompt_lookup"]
    assert lookup.empty_draft_reason(_empty([1, 2, 3, 4])) == "no earlier n-gram matched the last tokens"
    # the last 2-gram (5, 2) occurred before, followed by EOS (7): Transformers crops that draft to nothing
    assert "end-of-sequence" in lookup.empty_draft_reason(_empty([5, 2, 7, 9, 5, 2]))
    assert "only one token was left" in lookup.empty_draft_reason(_empty([5, 2, 8, 5, 2], last_position=True))
    assert "only one token was left" in lookup.empty_draft_reason(_empty([1, 2, 3], last_position=True))


def test_mtp_style_drafters_need_the_targets_outputs_on_the_first_step_only() -> None:
    for name in ("mtp", "mtp_drafter"):
        assert "outputs first" in METHODS[name].empty_draft_reason(_empty([1], first_step=True))
        assert METHODS[name].empty_draft_reason(_empty([1, 2])) == "the drafter proposed nothing"


def test_real_runs_record_why_a_step_drafted_nothing(store, tiny_models) -> None:
    request = RunRequest(prompt="Zebra quilt", target=tiny_models["target"], method="prompt_lookup", dtype="float32",
                         max_new_tokens=6, params={"prompt_lookup_num_tokens": 3})
    trace = LiveRun(prepare(request, store)).run()
    check_invariants(trace)
    assert all(bool(s.no_draft_reason) == (not s.drafted) for s in trace.steps)
    # (the tiny target, seed 0, repeats one token: matches in between, none at first, none at the last position)
    assert trace.steps[-1].no_draft_reason.startswith("only one token was left")
    assert any(s.no_draft_reason.startswith("no earlier n-gram") for s in trace.steps)
    baseline = LiveRun(prepare(RunRequest(prompt="Zebra quilt", target=tiny_models["target"], dtype="float32",
                                          max_new_tokens=3), store)).run()
    assert all(s.no_draft_reason == "" for s in baseline.steps), "plain decoding drafts nothing by design"


def test_ensemble_runs_show_the_mixture_the_test_used(store, tiny_models) -> None:
    request = RunRequest(prompt="One, two, three, four,", target=tiny_models["target"], method="speculative",
                         assistant=tiny_models["noisy"], dtype="float32", max_new_tokens=8, sample=True, seed=2,
                         params={"num_assistant_tokens": 3, "assistant_ensemble_weight": 0.25})
    trace = LiveRun(prepare(request, store)).run()
    drafting = [s for s in trace.steps if s.drafted]
    assert drafting
    for s in drafting:
        assert s.mixture is not None and len(s.mixture) == len(s.drafted)
        assert s.p is not None and s.q is not None
        assert s.mixture == pytest.approx([0.25 * p + 0.75 * q for p, q in zip(s.p, s.q)])
    plain = LiveRun(prepare(RunRequest(**{**request.__dict__, "params": {"num_assistant_tokens": 3}}), store)).run()
    assert all(s.mixture is None for s in plain.steps)
