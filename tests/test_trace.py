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


# --------------------------------------------------------------------------- a trace file is untrusted input

INJECTION = '1" onmouseover="alert(1)" x="'


def _good_dict():
    steps = [_step(0, [1, 2], [1, 3], q=[0.5, 0.25], p=[0.9, 0.1]), _step(1, [], [4])]
    return json.loads(_trace(steps).to_json())


def _set(data, path, value):
    """data with the field at `path` (keys and list indices) replaced by `value`."""
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


HOSTILE_FIELDS = [
    ("id that is markup", ("steps", 0, "drafted", 0), INJECTION, "steps[0].drafted[0] must be a token id"),
    ("emitted id that is markup", ("steps", 1, "emitted", 0), INJECTION, "steps[1].emitted[0] must be a token id"),
    ("id that is a bool", ("steps", 0, "drafted", 0), True, "must be a token id"),
    ("id that is a float", ("steps", 0, "drafted", 0), 1.0, "must be a token id"),
    ("negative id", ("output_ids", 0), -1, "output_ids[0] must be a token id"),
    ("id past the vocabulary", ("vocab_size",), 3, "from 0 to 2"),
    ("id beyond 64 bits", ("steps", 0, "drafted", 0), 2**70, "must be a token id"),
    ("step index that is markup", ("steps", 0, "index"), INJECTION, "steps[0].index must be a whole number"),
    ("accepted that is a bool", ("steps", 0, "accepted"), True, "steps[0].accepted must be a whole number"),
    ("text that is not a string", ("steps", 0, "drafted_text", 0), ["<script>"], "must be text"),
    ("lone surrogate", ("prompt",), "\ud800", "not valid text"),
    ("NaN time", ("steps", 0, "verify_ms"), float("nan"), "must be a finite number"),
    ("infinite time", ("steps", 0, "draft_ms"), float("inf"), "must be a finite number"),
    ("negative time", ("summary", "elapsed_s"), -1.0, "must be a finite number ≥ 0"),
    ("time that is text", ("steps", 0, "draft_ms"), "<b>1</b>", "must be a finite number"),
    ("q above 1", ("steps", 0, "q", 0), 1.5, "must be a probability"),
    ("p that is NaN", ("steps", 0, "p", 1), float("nan"), "must be a probability"),
    ("q of the wrong length", ("steps", 0, "q"), [0.5], "one probability per drafted token"),
    ("texts of the wrong length", ("steps", 0, "drafted_text"), ["a"], "one text per token"),
    ("method that is not text", ("method",), {"x": 1}, "trace.method must be text"),
    ("chat that is not a bool", ("chat",), "yes", "trace.chat must be true or false"),
    ("summary that is not an object", ("summary",), [1], "must be an object"),
    ("steps that are not a list", ("steps",), "garbage", "trace.steps must be a list"),
    ("step that is not an object", ("steps", 0), 7, "steps[0] must be an object"),
    ("missing field", ("steps", 0), {"index": 0}, "has no 'drafted'"),
    ("params nested too deep", ("params",), {"a": {"b": {"c": {"d": {"e": 1}}}}}, "nested at most"),
    ("params too large", ("params",), {str(i): i for i in range(2000)}, "more items than the limit (1000)"),
    ("params holding NaN", ("decoding",), {"temperature": float("nan")}, "must be a finite number"),
    ("vocab size that is text", ("vocab_size",), "big", "vocab_size must be a whole number"),
    ("huge string", ("output_text",), "x" * 1_000_001, "the limit is 1000000"),
    ("huge list", ("output_ids",), [1] * 100_001, "the limit is 100000"),
]


@pytest.mark.parametrize("case, path, value, message", HOSTILE_FIELDS, ids=[c[0] for c in HOSTILE_FIELDS])
def test_every_field_is_checked_when_a_trace_is_loaded(case, path, value, message):
    data = _set(_good_dict(), path, value)
    text = json.dumps(data)  # NaN and Infinity as Python's json writes them
    with pytest.raises(TraceFormatError) as info:
        Trace.from_json(text)
    assert message in str(info.value), str(info.value)
    assert "\n" not in str(info.value) and len(str(info.value)) < 300


def test_the_good_trace_used_above_loads():
    assert Trace.from_dict(_good_dict()).steps[0].q == [0.5, 0.25]
    assert Trace.from_dict({**_good_dict(), "vocab_size": 5}).vocab_size == 5


def test_too_many_steps_or_tokens_are_refused_before_building():
    from playground import trace as trace_module

    data = _good_dict()
    data["steps"] = [data["steps"][1]] * (trace_module.MAX_TRACE_STEPS + 1)
    with pytest.raises(TraceFormatError, match="at most 100000 can be replayed"):
        Trace.from_dict(data)
    many = _good_dict()
    many["steps"] = [{**many["steps"][1], "emitted": [4], "drafted": [4] * 999, "accepted": 0,
                      "rejected": [4] * 999, "drafted_text": [], "emitted_text": []}] * 1002
    with pytest.raises(TraceFormatError, match=r"more token ids than the limit \(1000000\)"):
        Trace.from_dict(many)


def test_fields_added_later_are_checked_from_their_annotations():
    """The reader has no list of field names: a new annotated field is checked by its type."""
    import dataclasses

    from playground.trace import _Reader

    @dataclasses.dataclass
    class Later:
        ids: list[int]
        other_ms: float = 0.0
        note: str | None = None

    assert _Reader(10).record(Later, {"ids": [1, 2], "other_ms": 1.5}, "x") == Later([1, 2], 1.5)
    for bad in ({"ids": [INJECTION]}, {"ids": [10]}, {"ids": [], "other_ms": float("inf")}, {"ids": [], "note": 5}):
        with pytest.raises(TraceFormatError):
            _Reader(10).record(Later, bad, "x")


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
