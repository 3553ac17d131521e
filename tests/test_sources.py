"""The draft sources (`playground/engine/sources.py`) and the step boundary (`playground/engine/steps.py`).

What differs between methods in the engine lives in one class per draft source, picked by the registry's
`Method.draft_source`; the engine's other modules never compare a method's name or tags with a literal. The step
boundary is pure: fed the records a live run's worker handed over, it builds the same steps with no thread.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import torch

from playground.engine import LiveRun, RunRequest, prepare
from playground.engine.records import _Raw
from playground.engine.sources import (
    ContextCopy, DraftSource, NoDraft, Retokenised, draft_source, draft_sources, source_class, source_for,
)
from playground.engine.steps import StepBoundary
from playground.methods import METHODS, REFERENCE
from playground.trace import Trace

ENGINE = Path(__file__).resolve().parents[1] / "playground" / "engine"


def test_every_method_names_a_source_the_engine_has_and_every_source_is_named() -> None:
    named = {name: source_class(method) for name, method in METHODS.items()}
    assert set(named.values()) == set(draft_sources().values()), "a source no method names is dead code"
    assert len(set(named.values())) == len(named), "one source per method: two methods with one source are one"
    assert named[REFERENCE] is NoDraft
    assert named["prompt_lookup"] is ContextCopy and named["universal"] is Retokenised
    # What a source changes is what its class overrides, nothing else: only plain decoding is watched by a streamer,
    # only prompt lookup says where a draft was copied from, only universal decoding loads its assistant its own way.
    overriding = {name: {attr for attr in ("observe", "generate_kwargs", "copied_from", "load_assistant",
                                           "no_draft_reason") if attr in vars(cls)} for name, cls in named.items()}
    assert overriding == {REFERENCE: {"observe", "generate_kwargs"}, "speculative": set(),
                          "prompt_lookup": {"copied_from"}, "early_exit": set(), "mtp": set(), "mtp_drafter": set(),
                          "universal": {"load_assistant"}}


def test_a_method_naming_a_source_the_engine_lacks_is_refused_by_name() -> None:
    stray = dataclasses.replace(METHODS["speculative"], name="stray", draft_source="nowhere")
    with pytest.raises(LookupError, match="'stray' names the draft source 'nowhere'"):
        source_class(stray)


def test_a_new_source_is_one_class_and_one_registry_entry() -> None:
    """A source registered under a new name is what a method naming it gets, with nothing else to touch."""

    @draft_source("test_only_echo")
    class Echo(DraftSource):
        pass

    try:
        method = dataclasses.replace(METHODS["speculative"], name="echo", draft_source="test_only_echo")
        assert source_class(method) is Echo and Echo.name == "test_only_echo"
    finally:
        from playground.engine import sources

        sources._SOURCES.pop("test_only_echo")


def _literal_comparisons_of_methods(path: Path) -> list[str]:
    """`<...>.method.<attr> == "literal"` (or !=, in, not in) and `<...>.method.name` compared with anything."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Compare):
            continue
        for side in (node.left, *node.comparators):
            if isinstance(side, ast.Attribute) and isinstance(side.value, ast.Attribute) and side.value.attr == "method":
                others = [n for n in (node.left, *node.comparators) if n is not side]
                if side.attr == "name" or any(isinstance(n, ast.Constant) and isinstance(n.value, str)
                                              for n in others):
                    found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    return found


def test_the_engine_never_branches_on_a_methods_name_or_tag() -> None:
    """What differs between methods is asked of their draft source (or read from the registry as data), never
    compared with a literal in the engine (the old `method.observed_by == "streamer"`,
    `method.draft_replay != "context_copy"`)."""
    found = [hit for path in sorted(ENGINE.glob("*.py")) for hit in _literal_comparisons_of_methods(path)]
    assert found == []


def test_the_scan_finds_a_branch_on_a_tag(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('if prepared.method.observed_by == "streamer":\n    pass\n'
                      'ok = run.method.name in names\n', encoding="utf-8")
    assert len(_literal_comparisons_of_methods(sample)) == 2


# --------------------------------------------------------------------------- the step boundary, with models


PROMPT = "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three,"


@pytest.mark.models
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("method, assistant, params, sample", [
    ("baseline", None, {}, False),
    ("speculative", "noisy", {"num_assistant_tokens": 3}, True),
    ("prompt_lookup", None, {"prompt_lookup_num_tokens": 3, "max_matching_ngram_size": 2}, False),
])
def test_the_step_boundary_rebuilds_a_live_runs_steps_without_a_thread(store, tiny_models, method, assistant, params,
                                                                        sample) -> None:
    """Each step of a live run, rebuilt by a fresh `StepBoundary` from a record made of its ids alone (no worker, no
    queue, no clock), comes out the same: classification, texts, the reason for an empty draft, prompt lookup's
    source; and the boundary's trace ends with the run's output."""
    prepared = prepare(RunRequest(method=method, target=tiny_models["target"], prompt=PROMPT, max_new_tokens=16,
                                  assistant=tiny_models[assistant] if assistant else None, params=params, sample=sample,
                                  seed=5, dtype="float32", chat=False), store)
    live = LiveRun(prepared).run()
    rebuilt = Trace(method=live.method, target=live.target, prompt=live.prompt)
    boundary = StepBoundary(prepared, source_for(prepared), rebuilt, top_k=0)
    total = prepared.input_ids.shape[1]
    for step in live.steps:
        total += len(step.emitted)
        raw = _Raw(torch.tensor(step.drafted) if prepared.method.drafts else None, torch.tensor(step.emitted), total,
                   step.draft_ms, step.verify_ms, None, None,
                   torch.tensor(step.draws) if step.draws is not None else None)
        again = boundary.take(raw, elapsed_s=1.0)
        assert dataclasses.asdict(again) == {**dataclasses.asdict(step), "other_ms": again.other_ms, "q": None,
                                             "p": None, "mixture": None, "dists": None}
    assert rebuilt.output_ids == live.output_ids and len(rebuilt.steps) == len(live.steps)
    assert boundary.totals.accepted == live.summary.accepted and boundary.totals.drafted == live.summary.drafted
    if method == "prompt_lookup":
        assert any(step.lookup_source for step in rebuilt.steps), "the tiny run copies at least once"
