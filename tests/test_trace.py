"""The trace records: classification of a step, invariants, summary figures, JSON round-trip."""

import json

import pytest

from playground.trace import (
    ACCEPTED, BONUS, CORRECTION, DISCARDED, REJECTED, TARGET, UNVERIFIED, Step, Trace, TraceFormatError,
    acceptance_by_position, check_invariants, classify_step, summarize_steps,
)


def test_classify_partial_acceptance_then_correction():
    # only the first refused draft was judged; the one after it is discarded unjudged
    assert classify_step([5, 6, 7, 8], [5, 6, 9], cut=False) == (2, [7], [8], [])


def test_classify_full_acceptance_with_bonus():
    assert classify_step([5, 6], [5, 6, 1], cut=False) == (2, [], [], [])


def test_classify_cut_by_accepted_eos_marks_rest_unverified():
    # EOS (2) was itself an accepted draft: the loop's n_matches would say 1, the truth is 2.
    assert classify_step([5, 2, 7, 8], [5, 2], cut=True) == (2, [], [], [7, 8])


def test_classify_no_draft():
    assert classify_step([], [4], cut=False) == (0, [], [], [])


def test_classify_resampled_to_draft_is_a_correction_when_not_cut():
    assert classify_step([5, 6, 7], [5, 6], cut=False) == (1, [6], [7], [])


def _step(i, drafted, emitted, cut=False, **kw):
    a, r, d, u = classify_step(drafted, emitted, cut)
    return Step(index=i, drafted=drafted, accepted=a, rejected=r, discarded=d, emitted=emitted, unverified=u,
                drafted_text=[f"d{t}" for t in drafted], emitted_text=[f"e{t}" for t in emitted], **kw)


def _trace(steps):
    t = Trace(method="speculative", target="t", prompt="p", output_ids=[x for s in steps for x in s.emitted], steps=steps)
    t.summarize(2.0)
    return t


def test_token_statuses_keep_rejected_drafts_in_place():
    s = _step(0, [5, 6, 7], [5, 9])
    assert [(tok, st) for tok, _, st, _ in s.token_statuses()] == [(5, ACCEPTED), (6, REJECTED), (7, DISCARDED), (9, CORRECTION)]
    bonus = _step(1, [5], [5, 8])
    assert [st for *_, st, _ in bonus.token_statuses()] == [ACCEPTED, BONUS]
    plain = _step(2, [], [3])
    assert [st for *_, st, _ in plain.token_statuses()] == [TARGET]
    cut = _step(3, [4, 2, 6], [4, 2], cut=True)
    assert [st for *_, st, _ in cut.token_statuses()] == [ACCEPTED, ACCEPTED, UNVERIFIED]


def test_summary_figures():
    steps = [_step(0, [1, 2, 3], [1, 2, 4]), _step(1, [5, 6], [5, 6, 7]), _step(2, [], [8]), _step(3, [9, 2, 3], [9, 2], cut=True)]
    s = summarize_steps(steps, 2.0)
    assert s.new_tokens == 3 + 3 + 1 + 2
    assert s.steps == 4
    assert s.drafted == 3 + 2 + 0 + 2  # the unverified draft is not counted as judged
    assert s.accepted == 2 + 2 + 0 + 2
    assert s.unverified == 1
    assert s.acceptance_rate == pytest.approx(6 / 7)
    assert s.tokens_per_step == pytest.approx(9 / 4)
    assert s.tokens_per_s == pytest.approx(4.5)
    assert s.rejected == 1 and s.discarded == 0
    # (reached verification, kept, judged) per position
    assert acceptance_by_position(steps) == [(3, 3, 3), (3, 3, 3), (1, 0, 1)]
    refused_early = [_step(0, [1, 2, 3], [7]), _step(1, [1, 2, 3], [1, 2, 3, 4])]
    assert acceptance_by_position(refused_early) == [(2, 1, 2), (2, 1, 1), (2, 1, 1)]
    assert summarize_steps(refused_early, 1.0).discarded == 2


def test_json_round_trip_restores_equal_objects():
    steps = [_step(0, [1, 2], [1, 3], q=[0.5, 0.25], p=[0.9, 0.1]), _step(1, [], [4])]
    t = _trace(steps)
    back = Trace.from_json(t.to_json())
    assert back == t
    assert isinstance(back.steps[0], Step)


@pytest.mark.parametrize("text, message", [
    ("{not json", "not valid JSON"),
    (json.dumps({"hello": 1}), "not a playground trace"),
    (json.dumps([1, 2]), "not a playground trace"),
    (json.dumps({"method": "x", "steps": [], "schema_version": 99}), "schema_version"),
])
def test_foreign_or_corrupt_files_are_refused(text, message):
    with pytest.raises(TraceFormatError, match=message):
        Trace.from_json(text)


def test_invariant_violations_are_detected():
    t = _trace([_step(0, [1, 2], [1, 3])])
    t.output_ids = [1]
    with pytest.raises(TraceFormatError, match="concatenate"):
        check_invariants(t)
    bad = _trace([_step(0, [1, 2], [1, 3])])
    bad.steps[0].accepted = 2
    with pytest.raises(TraceFormatError):
        check_invariants(bad)


def test_schema_1_traces_still_load_with_rejected_split_and_no_other_time():
    old = _trace([_step(0, [1, 2, 3], [1, 9], draft_ms=2.0, verify_ms=5.0), _step(1, [], [4], verify_ms=3.0)]).to_dict()
    old["schema_version"] = 1
    for step in old["steps"]:  # schema 1 had no other_ms / discarded; rejected held every draft after the refusal
        step["rejected"] = step["rejected"] + step.pop("discarded")
        del step["other_ms"], step["mixture"]
    del old["setup_ms"], old["summary"]["other_ms"], old["summary"]["setup_ms"]
    assert old["steps"][0]["rejected"] == [2, 3]
    back = Trace.from_dict(old)
    assert back.schema_version == 2
    assert back.steps[0].rejected == [2] and back.steps[0].discarded == [3]
    assert back.setup_ms == 0 and all(s.other_ms == 0 for s in back.steps)
    assert [st for *_, st, _ in back.steps[0].token_statuses()] == [ACCEPTED, REJECTED, DISCARDED, CORRECTION]


def test_only_the_first_refused_draft_may_be_rejected():
    t = _trace([_step(0, [1, 2, 3], [1, 9])])
    t.steps[0].rejected, t.steps[0].discarded = [2, 3], []
    with pytest.raises(TraceFormatError, match="first refused"):
        check_invariants(t)
