"""The draft sources (`playground/engine/sources.py`) and the step boundary (`playground/engine/steps.py`).

What differs between methods in the engine lives in one class per draft source, picked by the registry's
`Method.draft_source`; the engine's other modules never compare a method's name or tags with a literal. The step
boundary is pure: fed the records a live run's worker handed over, it builds the same steps with no thread.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path
from typing import Iterator

import pytest
import torch

from playground.engine import LiveRun, RunRequest, prepare
from playground.engine.records import _Raw
from playground.engine.sources import (
    ContextCopy, DraftSource, NoDraft, Retokenised, draft_source, draft_sources, source_class, source_for,
)
from playground.engine import distributions
from playground.engine.steps import StepBoundary
from playground import handout, tune_report
from playground.methods import ENSEMBLE, METHODS, REFERENCE, Method, mixture
from playground.snippet import python_snippet
from playground.trace import Trace
from playground.tune.settings import REPLAYS, not_tunable_reason, replay_of, sweep_settings

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


def _new_method(source: str) -> Method:
    """A method of the guide's family the registry does not have: the target's first layers draft under a name of
    their own. Written as a registry entry is, naming only what a new entry must (no copy of an existing entry's
    tags): its draft source, its replay, its parameters."""
    early = METHODS["early_exit"]
    return Method(name="first_layers_test_only", title="First layers (a test's own method)", summary="Test only.",
                  lecture={}, proven=early.proven, params=early.params, draft_logits="always",
                  check=early.check, draft_source=source, draft_replay="early_layers",
                  draft_length_param="num_assistant_tokens")


@pytest.fixture
def new_method(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Method, type[DraftSource]]]:
    """The new method's one class (registered as a source) and its one registry entry, both taken away after."""

    @draft_source("test_only_first_layers")
    class FirstLayers(DraftSource):
        pass

    method = _new_method("test_only_first_layers")
    monkeypatch.setitem(METHODS, method.name, method)
    try:
        yield method, FirstLayers
    finally:
        from playground.engine import sources

        sources._SOURCES.pop("test_only_first_layers")


def test_a_new_source_is_one_class_and_one_registry_entry(new_method) -> None:
    """A source registered under a new name is what a method naming it gets, and tune, its report and the handout
    work for the new method with nothing else touched: every fact they need comes from its registry entry (its
    drafter is the target itself, so its draft settings go on the target's generation_config) or from its replay."""
    method, cls = new_method
    assert source_class(method) is cls and cls.name == "test_only_first_layers"
    # Tune: a sweep of its replay, named in English and Russian, charted, with no refusal.
    assert not_tunable_reason(method.name) is None and replay_of(method.name) is REPLAYS["early_layers"]
    settings = sweep_settings(method.name, 2, schedules=("constant",), thresholds=(0.0, 0.4),
                              fixed={"assistant_early_exit": 2})
    assert [s.label for s in settings] == [
        "first_layers_test_only(γ=1)", "first_layers_test_only(γ=2)", "first_layers_test_only(γ=1, conf≥0.4)",
        "first_layers_test_only(γ=2, conf≥0.4)", "first_layers_test_only(γ=5)"]
    assert settings[2].shown("ru") == "длина черновика = 1, порог уверенности = 0,4"
    row = {"method": method.name, "params": dict(settings[3].values)}
    assert tune_report._series_name(row, "en") == "conf≥0.4" and tune_report._draft_length(row) == 2
    # The handout: the draft length on the target's own generation_config, as for early exit.
    trace = Trace(method=method.name, target="t", prompt="p", params=dict(settings[1].values),
                  decoding={"max_new_tokens": 8, "sample": False})
    assert handout.generate_call(trace).splitlines()[:3] == [
        "model.generation_config.num_assistant_tokens = 2",
        "model.generation_config.num_assistant_tokens_schedule = 'constant'",
        "model.generation_config.assistant_confidence_threshold = 0.0"]


@pytest.mark.models
def test_the_snippet_of_a_new_method_puts_its_draft_length_where_transformers_reads_it(new_method, store,
                                                                                        tiny_models) -> None:
    """The Code tab's snippet for the new method (one class, one registry entry): its draft length on the target's
    generation_config, said so in the comment above, and its call with the target's own arguments."""
    method, _ = new_method
    prepared = prepare(RunRequest(method=method.name, target=tiny_models["target"], prompt=PROMPT, max_new_tokens=4,
                                  params={"assistant_early_exit": 2, "num_assistant_tokens": 3}, dtype="float32",
                                  chat=False), store)
    code = python_snippet(prepared)
    assert "# Draft length: Transformers reads these from the target's generation_config;" in code
    assert "model.generation_config.num_assistant_tokens = 3" in code and "assistant_model" not in code
    assert prepared.draft_config_model is prepared.target.model


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


# --------------------------------------------------------------------------- concepts written once

PACKAGE = ENGINE.parent


def _mixture_formulas(path: Path) -> list[str]:
    """Every `a * x + (1 - a) * y` (either order of the products) in a module: ensemble verification's mixture."""
    def one_minus(node: ast.AST) -> ast.AST | None:
        if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and isinstance(node.left, ast.Constant)
                and node.left.value == 1):
            return node.right
        return None

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
            continue
        sides = [node.left, node.right]
        if not all(isinstance(side, ast.BinOp) and isinstance(side.op, ast.Mult) for side in sides):
            continue
        factors = [ast.unparse(factor) for side in sides for factor in (side.left, side.right)]  # type: ignore[attr-defined]
        weights = [one_minus(factor) for side in sides for factor in (side.left, side.right)]  # type: ignore[attr-defined]
        if any(weight is not None and ast.unparse(weight) in factors for weight in weights):
            found.append(f"{path.parent.name}/{path.name}:{node.lineno}")
    return found


def test_the_ensemble_mixture_is_written_once() -> None:
    """v = w·p + (1−w)·q in one function (`methods.mixture`): the trace's per-token mixture and the microscope's rows
    both call it (they were two formulas, in `distributions.py` and the live run)."""
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in _mixture_formulas(path)]
    # theory.py's (1 − e)·… + e·… weighs the steps that draft nothing in a speedup, not two distributions.
    lines, start = inspect.getsourcelines(mixture)
    assert [hit for hit in found if not hit.startswith("playground/theory.py:")] == [
        f"playground/methods.py:{line}" for line in range(start, start + len(lines))
        if f"playground/methods.py:{line}" in found], found
    assert any(hit.startswith("playground/methods.py:") for hit in found), "the scan finds `methods.mixture` itself"


def test_the_mixture_scan_finds_each_way_of_writing_it(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("a = w * p + (1 - w) * q\nb = numpy.float32(1 - w) * q + numpy.float32(w) * p\n"
                      "c = [weight * pk + (1 - weight) * qk for pk, qk in pairs]\nd = w * p + (1 - v) * q\n",
                      encoding="utf-8")
    assert len(_mixture_formulas(sample)) == 2  # a, c: b's weight is wrapped in a call, d's weights differ


def test_the_ensemble_weight_is_read_one_way() -> None:
    """The run's ensemble weight is `methods.ensemble_weight(params)` everywhere (it was also read from
    `generate_kwargs` by the step boundary and from a trace's params by the handout): no module but the registry
    looks the parameter up by its name."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            looked_up = (node.args[0] if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                         and node.func.attr in ("get", "pop") and node.args else
                         node.slice if isinstance(node, ast.Subscript) else None)
            if isinstance(looked_up, ast.Constant) and looked_up.value == ENSEMBLE.name:
                assert isinstance(node, ast.expr)  # a call or a subscript
                found.append(f"{path.name}:{node.lineno}")
    assert found == []


@pytest.mark.parametrize("weight", [0.05, 0.25, 0.3, 0.7, 0.95, 1 / 3])
def test_one_mixture_keeps_each_callers_precision(weight: float) -> None:
    """`methods.mixture` on float32 rows (numpy's, as the microscope's `distributions._mixture` passes them, or
    torch's) is Transformers' own `w * p_probs + (1.0 - w) * q_probs` to the last bit; on Python floats (the trace's
    `Step.mixture`, from p and q as the trace keeps them) it is the same formula in double, which differs from the
    float32 one in the last digits: why one function must not round the trace's values to float32 (a first attempt
    at one function changed the traces' bytes there)."""
    generator = torch.Generator().manual_seed(round(weight * 1000))
    p = torch.rand(4, 50_000, generator=generator).softmax(-1)
    q = torch.rand(4, 50_000, generator=generator).softmax(-1)
    transformers_v = weight * p + (1.0 - weight) * q
    assert torch.equal(distributions._mixture(p, q, weight), transformers_v)
    assert torch.equal(torch.from_numpy(mixture(p.numpy(), q.numpy(), weight)), transformers_v)
    pk, qk = p[0, :2000].tolist(), q[0, :2000].tolist()
    doubles = [mixture(a, b, weight) for a, b in zip(pk, qk)]
    assert doubles == [weight * a + (1 - weight) * b for a, b in zip(pk, qk)]
    singles = transformers_v[0, :2000].tolist()
    assert any(d != s for d, s in zip(doubles, singles)), "float32 and double agree everywhere: nothing to keep apart"
    assert doubles == pytest.approx(singles, rel=1e-6, abs=0)


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


def _schedule_lists(path: Path) -> list[str]:
    """Every tuple, list or set literal in a module that names the heuristic_transient schedule: a copy of the
    draft-length schedules' names."""
    return [f"{path.parent.name}/{path.name}:{node.lineno}"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, (ast.Tuple, ast.List, ast.Set))
            and any(isinstance(item, ast.Constant) and item.value == "heuristic_transient" for item in node.elts)]


def test_the_draft_length_schedules_are_named_once() -> None:
    """The schedules' names are the registry parameter's choices (methods.py); Tune's list and its replay read them
    from there (tune/settings.py and tune/replaying.py each wrote them out)."""
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in _schedule_lists(path)]
    assert len(found) == 1 and found[0].startswith("playground/methods.py:"), found


def test_the_schedule_scan_finds_a_copy(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('A = ("constant", "heuristic", "heuristic_transient")\n'
                      'if s in ("heuristic", "heuristic_transient"):\n    pass\nB = "heuristic_transient"\n',
                      encoding="utf-8")
    assert len(_schedule_lists(sample)) == 2
