"""The step microscope: what the trace records is what Transformers decided with, and the rule it shows is the one
that decided.

Real runs of tiny checkpoints (tests/tiny.py) through the engine, every value recomputed independently: p from a
forward pass of the target on the prompt + the tokens emitted before the step + the tokens before the position
(after the same logits processors, Transformers' own warper classes applied to it), q from the drafter's own forward
(speculative) or the target's first layers (early exit), the residual and the ensemble mixture from the full rows
Transformers' `_speculative_sampling` received (captured by wrapping it for the run). The greedy verdict must agree
with the kept tokens on every position of every method; prompt lookup's recorded source must be the earliest
occurrence of the longest matching n-gram. The chi-square test of the corrections against the residual (and its
rejection of p) is in test_method_sampling.py's style, marked slow.
"""

from __future__ import annotations

import copy
import dataclasses
import html
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers.generation.utils as generation_utils
from scipy.stats import chisquare
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from playground import cli, i18n, microscope
from playground.engine import LiveRun, PreparedRun, RunRequest, prepare
from playground.models import ModelStore
from playground.trace import MAX_TOP_K, Trace, TraceFormatError, check_invariants
from tiny import CLI_EXAMPLES, build_word_tokenizer, save_small_llama, write_tiny_checkpoints

PROMPT = "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three,"
NEW_TOKENS = 24
CASES = {method: (target, assistant, params) for method, target, assistant, params in CLI_EXAMPLES}
CASES["ensemble"] = ("llama", "llama_drafter", {"num_assistant_tokens": 4, "assistant_ensemble_weight": 0.5})

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.models]  # models built: not in the model-free tier


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {name: str(path) for name, path in write_tiny_checkpoints(tmp_path_factory.mktemp("microscope")).items()}


def _prepare(store: ModelStore, ckpt: dict[str, str], case: str, **decoding) -> PreparedRun:
    target, assistant, params = CASES[case]
    method = "speculative" if case == "ensemble" else case
    return prepare(RunRequest(prompt=PROMPT, target=ckpt[target], method=method,
                              assistant=ckpt[assistant] if assistant else None, params=params,
                              max_new_tokens=NEW_TOKENS, dtype="float32", chat=False, **decoding), store)


def _run(prepared: PreparedRun) -> Trace:
    trace = LiveRun(prepared).run()
    check_invariants(trace)
    assert Trace.from_json(trace.to_json()) == trace, "schema 3 round-trips through JSON"
    assert all(step.dists is not None and len(step.dists) == len(step.emitted) for step in trace.steps)
    return trace


def _rows(forward, ids: list[int], first: int, count: int, processors: LogitsProcessorList | None = None) -> torch.Tensor:
    """The next-token distributions after ids[:first], …, ids[:first + count - 1] (one forward), after `processors`."""
    device = forward.device  # the model's own (a GPU's on a GPU machine: tests/test_cuda.py); compared on the CPU
    with torch.inference_mode():
        logits = forward(torch.tensor([ids], device=device)).logits[0, first - 1: first - 1 + count].float()
        if processors:
            logits = torch.stack([processors(torch.tensor([ids[:first + i]], device=device), logits[i:i + 1])[0]
                                  for i in range(count)])
    return logits.softmax(-1).cpu()


def _assert_top(ranked, row: torch.Tensor, what: str) -> None:
    """A recorded top-k list is the row's k most probable tokens with their probabilities."""
    values, ids = row.topk(len(ranked))
    assert [r.id for r in ranked] == ids.tolist(), what
    assert [r.prob for r in ranked] == pytest.approx(values.tolist(), abs=1e-5), what


def _check_p(prepared: PreparedRun, trace: Trace, processors: LogitsProcessorList | None = None) -> int:
    """Every position's p (top-k, the drafted and the emitted token's) against an independent forward of the target."""
    context = prepared.input_ids[0].tolist()
    checked = 0
    for step in trace.steps:
        rows = _rows(prepared.target.model, context + step.emitted, len(context), len(step.emitted), processors)
        assert step.dists is not None
        for i, position in enumerate(step.dists):
            where = f"step {step.index} position {i}"
            _assert_top(position.p, rows[i], where)
            assert position.p_emitted == pytest.approx(float(rows[i, step.emitted[i]]), abs=1e-5), where
            if i < len(step.drafted):
                assert position.p_drafted == pytest.approx(float(rows[i, step.drafted[i]]), abs=1e-5), where
            checked += 1
        context += step.emitted
    return checked


# --------------------------------------------------------------------------- p, q: independent forward passes


@pytest.mark.parametrize("case", list(CASES))
def test_greedy_p_top_k_equals_an_independent_forward_and_the_verdict_agrees(store, ckpt, case) -> None:
    """Every method, greedy: the recorded top-k of p is the target's own distribution on the same prefix, and the
    rule the microscope shows (the target's top choice, or the mixture's) gives what the run kept, on every
    position of every step."""
    prepared = _prepare(store, ckpt, case)
    trace = _run(prepared)
    assert _check_p(prepared, trace) >= NEW_TOKENS - 1
    outcomes = set()
    for step in trace.steps:
        for i in range(len(step.emitted)):
            verdict = microscope.explain(step, i, trace.decoding)
            assert verdict.consistent is True, (step.index, i, [str(m) for m in verdict.messages])
            outcomes.add(verdict.outcome)
    if case == "baseline":
        assert outcomes == {microscope.TARGET}
    else:
        assert outcomes & {microscope.KEPT, microscope.REFUSED}, outcomes  # drafts were judged
    if case == "ensemble":
        assert any(p.v is not None for s in trace.steps for p in s.dists)  # type: ignore[union-attr]


@pytest.mark.parametrize("case", ["baseline", "speculative"])
def test_sampling_p_is_after_the_warpers(store, ckpt, case) -> None:
    """Under sampling the recorded p is the distribution Transformers drew from: after temperature, top-k and top-p
    (for plain decoding too, whose warpers Transformers appends after the caller's processors)."""
    decoding = dict(sample=True, temperature=0.7, top_k=6, top_p=0.9, seed=3)
    prepared = _prepare(store, ckpt, case, **decoding)
    trace = _run(prepared)
    warpers = LogitsProcessorList([TemperatureLogitsWarper(0.7), TopKLogitsWarper(6), TopPLogitsWarper(0.9)])
    assert _check_p(prepared, trace, warpers) >= NEW_TOKENS - 1
    assert all(len(p.p) <= 6 for s in trace.steps for p in s.dists), (  # type: ignore[union-attr]
        "tokens the warpers removed are not listed")


def test_speculative_q_top_k_equals_the_drafters_own_forward(store, ckpt) -> None:
    prepared = _prepare(store, ckpt, "speculative")
    trace = _run(prepared)
    context, checked = prepared.input_ids[0].tolist(), 0
    for step in trace.steps:
        if step.drafted:
            assert prepared.assistant is not None and step.dists is not None
            rows = _rows(prepared.assistant.model, context + step.drafted, len(context), step.draft_len)
            for i, position in enumerate(step.dists[:step.draft_len]):
                _assert_top(position.q, rows[i], f"step {step.index} position {i}")
                assert position.q_drafted == pytest.approx(float(rows[i, step.drafted[i]]), abs=1e-5)
                checked += 1
        context += step.emitted
    assert checked > 10


def test_early_exit_q_top_k_equals_the_targets_first_layers(store, ckpt) -> None:
    prepared = _prepare(store, ckpt, "early_exit")
    trace = _run(prepared)
    model = prepared.target.model
    layers = model.config.num_hidden_layers
    model.config.num_hidden_layers = prepared.params["assistant_early_exit"]  # as Transformers drafts
    try:
        context, checked = prepared.input_ids[0].tolist(), 0
        for step in trace.steps:
            if step.drafted:
                rows = _rows(model, context + step.drafted, len(context), step.draft_len)
                assert step.dists is not None
                for i, position in enumerate(step.dists[:step.draft_len]):
                    _assert_top(position.q, rows[i], f"step {step.index} position {i}")
                    checked += 1
            context += step.emitted
    finally:
        model.config.num_hidden_layers = layers
    assert checked > 10


# --------------------------------------------------------------------------- sampling: the rows Transformers used


@pytest.fixture()
def speculative_rows(monkeypatch: pytest.MonkeyPatch) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(candidate_logits, new_logits) of every `_speculative_sampling` call, full rows, as Transformers passed them."""
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    real = generation_utils._speculative_sampling

    def recording(candidate_input_ids, candidate_logits, candidate_length, new_logits, **kwargs):
        seen.append((candidate_logits[0].clone(), new_logits[0].clone()))
        return real(candidate_input_ids, candidate_logits, candidate_length, new_logits, **kwargs)

    monkeypatch.setattr(generation_utils, "_speculative_sampling", recording)
    return seen


@pytest.mark.parametrize("case", ["speculative", "ensemble"])
def test_sampling_q_v_and_residual_come_from_the_rows_transformers_used(store, ckpt, speculative_rows, case) -> None:
    """Under sampling q is the candidate logits Transformers received (warped twice), v = w·p + (1−w)·q, and the
    residual at a refused position is max(0, p − q) normalised, computed here from the full rows."""
    weight = CASES[case][2].get("assistant_ensemble_weight")
    refused = 0
    for seed in range(3):
        speculative_rows.clear()
        trace = _run(_prepare(store, ckpt, case, sample=True, temperature=0.8, top_k=0, top_p=1.0, seed=seed))
        drafting = [s for s in trace.steps if s.drafted]
        assert len(drafting) == len(speculative_rows)
        for step, (q_logits, p_logits) in zip(drafting, speculative_rows):
            p, q = p_logits.softmax(-1), q_logits.softmax(-1)
            assert step.dists is not None
            for i, position in enumerate(step.dists):
                where = f"seed {seed} step {step.index} position {i}"
                _assert_top(position.p, p[i], where)
                if i >= step.draft_len:
                    assert position.q is None and position.residual is None, where
                    continue
                _assert_top(position.q, q[i], where)
                assert position.q_drafted == pytest.approx(float(q[i, step.drafted[i]]), abs=1e-6)
                if weight is not None:
                    _assert_top(position.v, weight * p[i] + (1 - weight) * q[i], where)
                else:
                    assert position.v is None
                if step.rejected and i == step.accepted:
                    residual = (p[i] - q[i]).clamp(min=0)
                    residual /= residual.sum()
                    _assert_top(position.residual, residual, where)
                    assert position.residual_emitted == pytest.approx(float(residual[step.emitted[i]]), abs=1e-6)
                    refused += 1
                else:
                    assert position.residual is None, where
    assert refused >= 2


# --------------------------------------------------------------------------- prompt lookup's source


def test_prompt_lookup_source_is_the_earliest_longest_match(store, ckpt) -> None:
    prepared = _prepare(store, ckpt, "prompt_lookup")
    trace = _run(prepared)
    size_max = prepared.params["max_matching_ngram_size"]
    context, found = prepared.input_ids[0].tolist(), 0
    for step in trace.steps:
        if step.drafted:
            assert step.lookup_source is not None
            start, end = step.lookup_source
            n = end - start
            assert context[start:end] == context[len(context) - n:], "the n-gram is the context's last tokens"
            assert context[end:end + step.draft_len] == step.drafted, "the draft is what followed the n-gram"
            for longer in range(n + 1, min(size_max, len(context) - 1) + 1):  # no longer n-gram had a match
                tail = context[len(context) - longer:]
                assert not any(context[s:s + longer] == tail for s in range(len(context) - longer)), step.index
            assert not any(context[s:s + n] == context[start:end] for s in range(start)), "the earliest occurrence"
            found += 1
        else:
            assert step.lookup_source is None
        context += step.emitted
    assert found > 3


@pytest.mark.bundled
@pytest.mark.slow
def test_prompt_lookup_source_under_a_chat_template_is_shown_in_the_templated_text(store) -> None:
    """Under a chat template the context holds the template's tokens, which the prompt as typed has not: the panel
    highlights the n-gram and the copy in the text the model saw, and what it highlights is exactly the decoded text
    of the n-gram's and the copy's tokens. The bundled model with a chat template (SmolLM2 135M Instruct; the
    bundled Gemma 3 270M is a base model and has none), its own template."""
    from playground import microscope_view
    from playground.models import DEFAULT_UNIVERSAL_ASSISTANT

    prompt = "Repeat the list exactly. List: apples, pears, plums, grapes, lemons, cherries, melons."
    prepared = prepare(RunRequest(prompt=prompt, target=DEFAULT_UNIVERSAL_ASSISTANT, method="prompt_lookup", chat=True,
                                  dtype="float32", max_new_tokens=20, params={"prompt_lookup_num_tokens": 5}), store)
    trace = Trace.from_json(LiveRun(prepared).run().to_json())  # as saved and loaded again
    assert trace.chat and prepared.rendered_prompt != prompt
    tok = prepared.target.tokenizer
    context = prepared.input_ids[0].tolist() + trace.output_ids

    def text_of(a: int, b: int) -> str:
        """context[a:b] as it reads in the context: decoded prefixes, independent of the engine's token texts."""
        def decoded(n: int) -> str:
            return tok.decode(context[:n], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return decoded(b)[len(decoded(a)):]

    in_prompt = 0
    for step in (s for s in trace.steps if s.lookup_source is not None):
        assert step.lookup_source is not None
        start, end = step.lookup_source
        panel = microscope_view.panel_html(trace, step.index, 0)
        found = re.search(r'<div class="pg-micro-context"[^>]*>(.*?)<mark class="pg-micro-match"[^>]*>(.*?)</mark>'
                          r'<mark class="pg-micro-copied">(.*?)</mark>', panel, re.S)
        assert found is not None
        before, ngram, copied = (html.unescape(x) for x in found.groups())
        assert ngram == text_of(start, end)
        assert copied == text_of(end, end + len(step.drafted)) == "".join(step.drafted_text)
        assert text_of(0, end).endswith(before + ngram)
        shown = microscope.panel_text(trace, step.index + 1, 1)  # the CLI marks the same text
        assert shown is not None
        assert f"⟦{ngram}⟧⟨{copied}⟩".replace("\n", "↵") in shown
        if start < trace.prompt_tokens:  # a source in the prompt reads as the templated prompt, not the typed one
            assert before + ngram + copied in prepared.rendered_prompt
            in_prompt += (before + ngram) not in prompt
    assert in_prompt, "the list is copied from the prompt, its template's turn markers before it"


# --------------------------------------------------------------------------- the run's tables, the CLI, the setting


def test_run_tables_count_the_runs_own_refusals_and_judged_drafts(store, ckpt) -> None:
    trace = _run(_prepare(store, ckpt, "speculative", sample=True, seed=1))
    pairs = microscope.refusal_pairs(trace)
    assert sum(n for *_, n in pairs) == trace.summary.rejected > 0
    assert [n for *_, n in pairs] == sorted((n for *_, n in pairs), reverse=True)
    refused = {(s.rejected[0], s.emitted[s.accepted]) for s in trace.steps if s.rejected}
    assert {(d, e) for d, _, e, _, _ in pairs} == refused
    rows = microscope.acceptance_by_confidence(trace, microscope.CONFIDENCE_BUCKETS)
    assert sum(judged for *_, judged, _ in rows) == sum(s.judged_drafts for s in trace.steps)
    assert sum(accepted for *_, accepted in rows) == trace.summary.accepted
    for lo, hi, judged, accepted in rows:
        inside = [s.q[k] for s in trace.steps for k in range(s.judged_drafts) if lo <= s.q[k] < hi or s.q[k] == hi == 1]  # type: ignore[index]
        assert judged == len(inside) and accepted <= judged


def test_cli_show_prints_the_panel_and_the_tables(store, ckpt, tmp_path: Path, capsys) -> None:
    trace = _run(_prepare(store, ckpt, "speculative"))
    path = tmp_path / "trace.json"
    trace.save(path)
    step_no, step = next((n, s) for n, s in enumerate(trace.steps, start=1) if s.rejected)
    assert cli.main(["show", str(path), "--step", str(step_no), "--token", str(step.accepted + 1)]) == 0
    out = capsys.readouterr().out
    assert step.dists is not None
    position = step.dists[step.accepted]
    top = position.p[0]
    lines = out.splitlines()
    p_title = next(n for n, line in enumerate(lines) if line.startswith("p, the target model's"))
    assert lines.index("The rule that decided:") < p_title, "the rule comes first, as on the page"
    assert f"[{top.id}]" in lines[p_title + 1], "the target's top token comes first"
    assert "← drafted" in out and "Refused: the target model's top choice is" in out
    assert i18n.t("micro.refusals.caption") in out and i18n.t("micro.confidence.caption") in out
    assert cli.main(["show", str(path), "--step", str(step_no), "--token", "1", "--lang", "ru"]) == 0
    assert "Правило, которое решило:" in capsys.readouterr().out
    assert cli.main(["show", str(path), "--step", str(len(trace.steps) + 1)]) == 2
    assert "has no step" in capsys.readouterr().err

    older = json.loads(trace.to_json())  # the same run as schema 2 wrote it
    older["schema_version"] = 2
    for s in older["steps"]:
        del s["dists"], s["lookup_source"]
    path.write_text(json.dumps(older), encoding="utf-8")
    assert all(s.dists is None for s in Trace.load(path).steps)
    assert cli.main(["show", str(path), "--step", str(step_no), "--token", "1"]) == 0
    assert "were not recorded" in capsys.readouterr().out


def test_the_setting_sets_k_and_zero_records_nothing(store, ckpt, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLAYGROUND_TOP_K", "10")
    trace = _run(_prepare(store, ckpt, "speculative", sample=True, seed=2))
    assert trace.decoding["recorded_top_k"] == 10
    assert max(len(p.p) for s in trace.steps for p in s.dists) == MAX_TOP_K  # type: ignore[union-attr]
    monkeypatch.setenv("PLAYGROUND_TOP_K", "0")
    trace = LiveRun(_prepare(store, ckpt, "speculative")).run()
    assert all(s.dists is None for s in trace.steps) and trace.decoding["recorded_top_k"] == 0
    assert str(microscope.explain(trace.steps[0], 0, trace.decoding).messages[0]).startswith(
        "The distributions behind this decision were not recorded")


def test_a_trace_with_malformed_distributions_is_refused(store, ckpt) -> None:
    trace = _run(_prepare(store, ckpt, "speculative"))
    good = json.loads(trace.to_json())

    def broken(change) -> dict:
        data = copy.deepcopy(good)
        change(data["steps"][0])
        return data

    cases = {
        "eleven entries": lambda s: s["dists"][0]["p"].extend([s["dists"][0]["p"][0]] * (MAX_TOP_K + 1)),
        "a position short": lambda s: s["dists"].pop(),
        "an id past the vocabulary": lambda s: s["dists"][0]["p"][0].update(id=10**6),
        "a probability above 1": lambda s: s["dists"][0]["p"][0].update(prob=1.5),
        "an empty source": lambda s: s.update(lookup_source=[3, 3]),
        "a source text without a source": lambda s: s.update(lookup_source=None, lookup_text=["", "a", "b", ""]),
        "a source text of three parts": lambda s: s.update(lookup_source=[0, 1], lookup_text=["", "a", "b"]),
        "text for a number": lambda s: s["dists"][0].update(p_drafted="0.5"),
    }
    for name, change in cases.items():
        with pytest.raises(TraceFormatError):
            Trace.from_dict(broken(change))
        assert name
    Trace.from_dict(copy.deepcopy(good))


# --------------------------------------------------------------------------- the corrections follow the residual


def _chi_square_p(expected: dict[int, float], counts: dict[int, int]) -> float:
    n = sum(counts.values())
    keys = sorted(expected, key=expected.__getitem__, reverse=True)
    exp = np.array([expected[k] for k in keys], dtype=float)
    exp *= n / exp.sum()  # float32 rows sum to 1 only within rounding
    obs = np.array([counts.get(k, 0) for k in keys], dtype=float)
    assert sum(counts.get(k, 0) for k in keys) == n, "a correction the distribution cannot produce"
    big = exp >= 5
    assert big.sum() >= 3, "too few cells for a meaningful test"
    if (~big).any():
        exp, obs = np.append(exp[big], exp[~big].sum()), np.append(obs[big], obs[~big].sum())
    return float(chisquare(obs, exp).pvalue)


@pytest.mark.slow
def test_corrections_follow_the_recorded_residual_not_p(tmp_path: Path) -> None:
    """Seeded speculative sampling runs whose first step drafts one token from an unrelated drafter: the target
    refuses it often, and its correction must follow the residual max(0, p − q) normalised at that position (the
    same rows in every run: the prompt's). The recorded residual is the one the test expects (its top-k equals the
    full residual recomputed from both models), and the same counts reject the hypothesis that the corrections came
    from p itself."""
    tok = build_word_tokenizer()
    target = save_small_llama(tmp_path / "target", seed=0, tokenizer=tok, sharpness=8.0)
    drafter = save_small_llama(tmp_path / "drafter", seed=5, tokenizer=tok, sharpness=8.0)
    store = ModelStore()
    prepared = prepare(RunRequest(prompt="red green red green red", target=str(target), assistant=str(drafter),
                                  method="speculative", params={"num_assistant_tokens": 1}, max_new_tokens=2,
                                  sample=True, temperature=1.0, top_k=0, top_p=1.0, dtype="float32", chat=False),
                       store)
    ids = prepared.input_ids[0].tolist()
    p = _rows(prepared.target.model, ids, len(ids), 1)[0].double()
    assert prepared.assistant is not None
    q = _rows(prepared.assistant.model, ids, len(ids), 1)[0].double()
    residual = (p - q).clamp(min=0)
    residual /= residual.sum()
    counts: dict[int, int] = {}
    # 500 seeds: 217 corrections, the residual's p = 0.50 and p's 1.2e-27 (700 gave 298, 0.16 and 1.9e-38; 400 gave
    # 160, 0.71 and 2.6e-20), 4 Dec, suitec: the test tells the two apart with room to spare.
    for seed in range(500):
        run = dataclasses.replace(prepared, request=dataclasses.replace(prepared.request, seed=seed))
        first = LiveRun(run).run().steps[0]
        if first.rejected:
            assert first.dists is not None
            position = first.dists[0]
            _assert_top(position.residual, residual.float(), f"seed {seed}")
            counts[first.emitted[0]] = counts.get(first.emitted[0], 0) + 1
    assert sum(counts.values()) >= 150
    assert _chi_square_p(dict(enumerate(residual.tolist())), counts) > 1e-3
    assert _chi_square_p(dict(enumerate(p.tolist())), counts) < 1e-6, "the test tells the residual from p"


def test_a_step_cut_by_the_end_of_generation_shows_no_residual(store, ckpt) -> None:
    """When the end of generation cuts a sampling step right after drafts equal to what was emitted, the last
    position was accepted, not refused: no residual is shown there. Real runs reach this rarely (an EOS or the length
    limit inside a draft), so the consumer's step builder and its figures are fed that step's raw record directly,
    with logits rows of the real vocabulary; the same record not cut is ensemble verification's resample of the
    refused id itself, which does show its residual."""
    from playground.engine.records import _Raw

    prepared = _prepare(store, ckpt, "speculative", sample=True, seed=0)
    live = LiveRun(prepared)
    vocab = prepared.target.model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    q_logits, p_logits = torch.randn(2, vocab, generator=generator), torch.randn(3, vocab, generator=generator)
    drafted = torch.tensor([5, 7])
    end = prepared.input_ids.shape[1] + NEW_TOKENS

    def built(total_len: int):
        raw = _Raw(drafted, drafted.clone(), total_len, 1.0, 1.0, q_logits, p_logits)
        step = live._steps.build(raw)
        live._steps.fill_figures(raw, step)
        return step

    cut = built(end)
    assert cut.unverified == [] and cut.accepted == 2 and not cut.rejected
    assert all(position.residual is None for position in cut.dists)
    resampled = built(end - 5)
    assert resampled.rejected == [7] and resampled.dists[1].residual is not None


@pytest.mark.parametrize("case", ["baseline", "speculative"])
def test_a_consumer_far_behind_records_the_same_distributions(store, ckpt, monkeypatch, case) -> None:
    """Past MAX_PENDING_LOGITS queued records the worker computes the top-k lists itself (memory stays bounded):
    the same lists, texts and residual as the consumer computes."""
    from playground.engine import recorder

    usual = _run(_prepare(store, ckpt, case, sample=True, seed=5))
    monkeypatch.setattr(recorder, "MAX_PENDING_LOGITS", -1)  # always "behind": every step takes that path
    behind = _run(_prepare(store, ckpt, case, sample=True, seed=5))
    assert behind.output_ids == usual.output_ids
    assert [s.dists for s in behind.steps] == [s.dists for s in usual.steps]
    assert case == "baseline" or any(p.residual for s in behind.steps for p in s.dists)  # type: ignore[union-attr]


def _sorted_top(row: torch.Tensor, k: int) -> list[tuple[int, float]]:
    """The reference: the whole row sorted (stable, so ties keep the lower id first), zeros dropped after the first."""
    values, ids = row.sort(descending=True, stable=True)
    return [(i, v) for n, (v, i) in enumerate(zip(values[:k].tolist(), ids[:k].tolist())) if n == 0 or v > 0]


@pytest.mark.parametrize("width", [262_144, 262_145, 151_936, 5_000])
def test_the_top_k_of_a_vocabulary_wide_row_is_the_sorted_rows(width: int) -> None:
    """The microscope's top-k (chunk maxima, a floor, the few entries above it) lists exactly what sorting the whole
    row lists: ties to the lower id, as argmax (greedy decoding) picks them, zeros left out, a width that is not a
    multiple of the chunk (its last, shorter chunk), rows in bfloat16's coarse steps (many ties), warped rows of few
    non-zero entries, a flat row, a NaN row (overflowed scores: its first entry alone)."""
    from playground.engine.distributions import _top_rows

    generator = torch.Generator().manual_seed(width)
    rows = [(torch.randn(width, generator=generator) * scale).bfloat16().float() for scale in (0.5, 3.0, 12.0)]
    few = torch.full((width,), -float("inf"))
    few[torch.randperm(width, generator=generator)[:3]] = 1.0  # three tied survivors of a top-k warper
    rows += [few, torch.zeros(width), torch.full((width,), float("nan"))]
    probs = torch.stack(rows).softmax(dim=-1)
    tied = 0
    for k in (1, 5, 10):
        got = [[(r.id, r.prob) for r in ranked] for ranked in _top_rows(probs, k)]
        for row, ranked in zip(probs[:-1], got[:-1]):
            assert ranked == [(i, min(1.0, v)) for i, v in _sorted_top(row, k)]
            assert ranked[0][0] == int(row.argmax())
            tied += len({v for _, v in ranked}) < len(ranked)
        assert got[-1] == [(0, 0.0)]  # NaN: nothing is a probability; the first entry stands alone, read as 0
    assert tied, "the rows have ties in their top k (the tie rule is exercised)"
