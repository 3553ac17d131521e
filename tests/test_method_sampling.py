"""Sampling keeps the target's distribution: chi-square tests against the exact probabilities.

On a tiny model over a 16-token vocabulary, the exact probability of every short continuation is
enumerated from the target's logits (p(x1)·p(x2|x1)…). A few thousand seeded runs of the
instrumented engine are then compared with it by a chi-square goodness-of-fit test (cells with
fewer than 5 expected samples pooled). Seeds are fixed, so every test is deterministic.

The tests can fail, and some are meant to: ensemble verification (lossy by design) is rejected by
the same test, and so is the Gemma 4 drafter with sampling (Transformers drafts its argmax). (MTP
layers, with their own fault injected: test_method_sampling_mtp.py.) The three-token tests check each position's marginal; a fault that pairs q's rows with the wrong draft
positions is injected into the real loop to show that they catch it.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from playground.engine import LiveRun, PreparedRun, RunRequest, exclusive, prepare
from playground.models import ModelStore
from tiny import build_word_tokenizer, save_small_llama, save_tiny_gemma4, save_tiny_gemma4_assistant

PROMPT = "red green red green red"  # repeats, so that prompt lookup finds n-grams to copy
PASS_P = 1e-3  # a correct sampler is rejected with probability 0.001
REJECT_P = 1e-6
# The assistant's vocabulary: the target's words in another order, plus three the target lacks.
OTHER_WORDS = ("moon", "sun", "dog", "cat", "zebra", "blue", "green", "red", "tree", "rock", "owl", "fish", "star",
               "bird", "yak")


# Thousands of seeded runs per test: each takes many seconds on two busy cores.
pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("sampling")
    tok = build_word_tokenizer()
    paths = {
        "target": save_small_llama(root / "target", seed=0, tokenizer=tok, sharpness=8.0),
        # an unrelated drafter: its distributions differ a lot from the target's (total variation ≈ 0.6 on
        # two-token continuations), so a sampler that let q leak into the output would be caught
        "drafter": save_small_llama(root / "drafter", seed=5, tokenizer=tok, sharpness=8.0),
        "other_vocab": save_small_llama(root / "other_vocab", seed=5, tokenizer=build_word_tokenizer(OTHER_WORDS),
                                        sharpness=8.0),
        "gemma4": save_tiny_gemma4(root / "gemma4", seed=0, tokenizer=tok),
        "gemma4_assistant": save_tiny_gemma4_assistant(root / "gemma4_assistant", seed=1, tokenizer=tok),
    }
    return {name: str(path) for name, path in paths.items()}


def exact_distribution(prepared: PreparedRun, length: int, skip: int = 0,
                       keep: int | None = None) -> dict[tuple[int, ...], float]:
    """Exact probability of each continuation of `length` tokens (shorter when it ends with EOS) under the
    target alone; with `skip`/`keep`, of the tokens seq[skip:skip + keep] (the others marginalised out)."""
    model = prepared.target.model
    prompt = prepared.input_ids
    eos = prepared.eos_ids
    finished: dict[tuple[int, ...], float] = {}
    frontier: dict[tuple[int, ...], float] = {(): 1.0}
    with torch.inference_mode():
        for step in range(length):
            prefixes = list(frontier)
            tails = torch.tensor(prefixes, dtype=torch.long).reshape(len(prefixes), step)
            batch = torch.cat([prompt.repeat(len(prefixes), 1), tails], dim=1)
            probs = model(batch).logits[:, -1].float().softmax(-1).tolist()
            grown: dict[tuple[int, ...], float] = {}
            for prefix, row in zip(prefixes, probs):
                for token, prob in enumerate(row):
                    seq = prefix + (token,)
                    (finished if token in eos or step == length - 1 else grown)[seq] = frontier[prefix] * prob
            frontier = grown
    out: dict[tuple[int, ...], float] = {}
    for seq, prob in finished.items():
        key = seq[skip:][:keep]
        out[key] = out.get(key, 0.0) + prob
    return out


def sample_engine(prepared: PreparedRun, n: int, skip: int = 0,
                  keep: int | None = None) -> tuple[dict[tuple[int, ...], int], list]:
    """n instrumented runs with seeds 0..n-1; counts of each continuation (seq[skip:skip + keep]), the traces."""
    counts: dict[tuple[int, ...], int] = {}
    traces = []
    for seed in range(n):
        run = dataclasses.replace(prepared, request=dataclasses.replace(prepared.request, seed=seed))
        trace = LiveRun(run).run()
        key = tuple(trace.output_ids[skip:])[:keep]
        counts[key] = counts.get(key, 0) + 1
        traces.append(trace)
    return counts, traces


def generate_seeded(prepared: PreparedRun, kwargs: dict, n: int) -> list[list[int]]:
    """n plain generate() calls with these arguments, seeded 0..n-1, with the run's draft-length settings in
    place (engine.exclusive): the new tokens of each."""
    start = prepared.input_ids.shape[1]
    outputs = []
    with exclusive(prepared), torch.inference_mode():
        for seed in range(n):
            torch.manual_seed(seed)
            outputs.append(prepared.target.model.generate(**kwargs)[0, start:].tolist())
    return outputs


def chi_square_p(expected: dict[tuple[int, ...], float], counts: dict[tuple[int, ...], int]) -> float:
    assert set(counts) <= set(expected), "a continuation the target cannot produce"
    n = sum(counts.values())
    keys = sorted(expected, key=expected.__getitem__, reverse=True)
    exp = np.array([expected[k] * n for k in keys])
    obs = np.array([counts.get(k, 0) for k in keys], dtype=float)
    big = exp >= 5
    assert big.sum() >= 10, "too few cells for a meaningful test"
    if (~big).any():  # pool the rare continuations into one cell
        exp, obs = np.append(exp[big], exp[~big].sum()), np.append(obs[big], obs[~big].sum())
    return float(chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def _prepare(store: ModelStore, small: dict[str, str], length: int = 2, **kw) -> PreparedRun:
    kw.setdefault("target", small["target"])
    for key in ("target", "assistant"):
        if kw.get(key) in small:
            kw[key] = small[kw[key]]
    return prepare(RunRequest(prompt=PROMPT, dtype="float32", max_new_tokens=length, sample=True, **kw), store)


def _acceptance(traces: list) -> float:
    drafted = sum(t.summary.drafted for t in traces)
    return sum(t.summary.accepted for t in traces) / drafted


# --------------------------------------------------------------------------- lossless methods


def test_speculative_sampling_follows_the_target_distribution(store, small) -> None:
    # Two new tokens: the first step drafts one token (room for the target's own), so every outcome passes
    # through rejection sampling: accepted draft + bonus token, or a rejected draft and a resampled token.
    prepared = _prepare(store, small, method="speculative", assistant="drafter")
    counts, traces = sample_engine(prepared, 1200)
    assert 0.3 < _acceptance(traces) < 0.9, "the test needs both accepted and rejected drafts"
    assert chi_square_p(exact_distribution(prepared, 2), counts) > PASS_P
    assert not any(t.lossy for t in traces)


def test_the_same_test_rejects_ensemble_verification(store, small) -> None:
    prepared = _prepare(store, small, method="speculative", assistant="drafter",
                        params={"assistant_ensemble_weight": 0.5})
    counts, traces = sample_engine(prepared, 800)
    assert all(t.lossy for t in traces)
    assert chi_square_p(exact_distribution(prepared, 2), counts) < REJECT_P


@pytest.mark.parametrize("method, params", [
    ("prompt_lookup", {"prompt_lookup_num_tokens": 3}),
    ("early_exit", {"assistant_early_exit": 1}),
])
def test_self_drafting_sampling_follows_the_target_distribution(store, small, method, params) -> None:
    prepared = _prepare(store, small, method=method, params=params)
    counts, traces = sample_engine(prepared, 800)
    assert sum(t.summary.drafted for t in traces) > 0
    assert chi_square_p(exact_distribution(prepared, 2), counts) > PASS_P


def test_universal_sampling_follows_the_target_distribution(store, small) -> None:
    # Different vocabularies (other ids, three extra words): Transformers maps the assistant's drafts and
    # probabilities into the target's vocabulary. This passes thanks to the engine listing the dedicated
    # assistant copy's vocabulary in id order (see the next test for what happens without it).
    prepared = _prepare(store, small, method="universal", assistant="other_vocab")
    counts, traces = sample_engine(prepared, 1000)
    assert 0.3 < _acceptance(traces) < 0.95
    assert chi_square_p(exact_distribution(prepared, 2), counts) > PASS_P


def test_transformers_universal_sampling_is_biased_without_the_engine_workaround(store, small) -> None:
    """Documents why the engine lists the assistant copy's vocabulary in id order: plain generate() on a fresh
    copy with a hash-ordered vocabulary puts the draft probabilities on the wrong tokens. If this test starts
    failing, Transformers has fixed it and the workaround in engine.universal._dedicated_assistant can go."""
    prepared = _prepare(store, small, method="universal", assistant="other_vocab")
    source = store.get(small["other_vocab"], "float32")
    model, tokenizer = copy.deepcopy(source.model), copy.deepcopy(source.tokenizer)
    target_tokenizer = copy.deepcopy(prepared.target.tokenizer)
    # A fixed order that is not id order (reversed), so the demonstration does not depend on the process's
    # hash seed, which otherwise decides how scrambled the tokenizer's own listing is.
    listed = tokenizer.get_vocab
    tokenizer.get_vocab = lambda: dict(sorted(listed().items(), key=lambda item: -item[1]))
    vocab = list(tokenizer.get_vocab().values())
    assert vocab != sorted(vocab), "the bug needs a vocabulary not listed in id order"
    kwargs = {**prepared.generate_kwargs, "assistant_model": model, "tokenizer": target_tokenizer,
              "assistant_tokenizer": tokenizer}
    model.generation_config.num_assistant_tokens = 5
    model.generation_config.assistant_confidence_threshold = 0.0
    counts: dict[tuple[int, ...], int] = {}
    for ids in generate_seeded(prepared, kwargs, 500):
        counts[tuple(ids)] = counts.get(tuple(ids), 0) + 1
    assert chi_square_p(exact_distribution(prepared, 2), counts) < REJECT_P


# --------------------------------------------------------------------------- a method that is lossy when sampling


def test_mtp_drafter_sampling_does_not_follow_the_target_and_is_marked_lossy(store, small) -> None:
    """Transformers' Gemma 4 drafter proposes its argmax but verification treats it as a sample from the
    drafter's softmax. Its first step drafts nothing and its second drafts the second token, so three tokens
    are generated and the distribution of the second is tested (the first marginalised out).
    If this starts failing, Transformers has fixed it: drop Method.sampling_bias for mtp_drafter."""
    prepared = _prepare(store, small, length=3, target="gemma4", method="mtp_drafter", assistant="gemma4_assistant")
    # 200 runs: the bias is rejected at p < 1e-260 from 100 runs on, and plain sampling passes at p = 0.8 (4 Dec).
    counts, traces = sample_engine(prepared, 200, skip=1, keep=1)
    assert all(t.lossy for t in traces)
    assert all(t.steps[1].draft_len == 1 for t in traces if len(t.steps) > 1 and len(t.output_ids) == 3)
    assert chi_square_p(exact_distribution(prepared, 3, skip=1, keep=1), counts) < REJECT_P
    # The same enumeration and sample size accept plain sampling of that target: the harness is not the cause.
    baseline = _prepare(store, small, length=3, target="gemma4", method="baseline")
    base_counts, _ = sample_engine(baseline, 200, skip=1, keep=1)
    assert chi_square_p(exact_distribution(baseline, 3, skip=1, keep=1), base_counts) > PASS_P


# --------------------------------------------------------------------------- drafts of three tokens

# Four new tokens: the first step drafts three (one place is left for the target's own token), so acceptance
# chains run and q and p are paired row by row at draft positions 1 and 2, not only 0. Four-token continuations
# are too many to test jointly with a few hundred runs, so each position's marginal distribution is tested
# against its exact value (Bonferroni over the four positions).
LONG = 4
LONG_DRAFT = 3


def position_p_values(prepared: PreparedRun, outputs: list[list[int]]) -> list[float]:
    """Chi-square p-value of each position's marginal (an ended sequence counts as the empty continuation)."""
    values = []
    for position in range(LONG):
        counts: dict[tuple[int, ...], int] = {}
        for ids in outputs:
            key = tuple(ids[position:])[:1]
            counts[key] = counts.get(key, 0) + 1
        values.append(chi_square_p(exact_distribution(prepared, LONG, skip=position, keep=1), counts))
    return values


def _assert_long_drafts_judged(traces: list, with_logits: bool) -> None:
    steps = [s for t in traces for s in t.steps]
    assert sum(s.draft_len == LONG_DRAFT for s in steps) > len(traces) / 10, "three-token drafts"
    assert sum(s.accepted >= 1 for s in steps if s.draft_len >= 2) > len(traces) / 20, "position >= 1 judged"
    if with_logits:
        assert all(s.q is not None and len(s.q) == len(s.p) == s.draft_len for s in steps if s.drafted)


@pytest.mark.parametrize("method, kw, n, with_logits", [
    ("speculative", {"assistant": "drafter"}, 800, True),
    ("prompt_lookup", {"params": {"prompt_lookup_num_tokens": LONG_DRAFT}}, 400, False),
    ("early_exit", {"params": {"assistant_early_exit": 1}}, 500, True),
    ("universal", {"assistant": "other_vocab"}, 500, True),
])
def test_three_token_drafts_follow_the_target_distribution(store, small, method, kw, n, with_logits) -> None:
    kw = {**kw, "params": {"num_assistant_tokens": LONG_DRAFT, **kw.get("params", {})}}
    if method == "prompt_lookup":
        kw["params"].pop("num_assistant_tokens")
    prepared = _prepare(store, small, length=LONG, method=method, **kw)
    _, traces = sample_engine(prepared, n)
    _assert_long_drafts_judged(traces, with_logits)
    values = position_p_values(prepared, [t.output_ids for t in traces])
    assert min(values) > PASS_P / LONG, values


def test_the_three_token_test_rejects_ensemble_verification(store, small) -> None:
    prepared = _prepare(store, small, length=LONG, method="speculative", assistant="drafter",
                        params={"num_assistant_tokens": LONG_DRAFT, "assistant_ensemble_weight": 0.5})
    _, traces = sample_engine(prepared, 300)
    assert all(t.lossy for t in traces)
    assert min(position_p_values(prepared, [t.output_ids for t in traces])) < REJECT_P


def test_the_three_token_test_catches_q_rows_paired_with_the_wrong_draft_position(store, small) -> None:
    """What the three-token tests are for: a fault injected into Transformers' real loop that pairs draft
    position i >= 1 with q's row i - 1 (position 0 stays right) is rejected at a later position, while the
    first position, which the fault does not touch, still passes."""
    prepared = _prepare(store, small, length=LONG, method="speculative", assistant="drafter",
                        params={"num_assistant_tokens": LONG_DRAFT})
    model = prepared.target.model
    factory = type(model)._get_candidate_generator

    def misaligned_generator(*args, **kwargs):
        generator = factory(model, *args, **kwargs)
        get_candidates = generator.get_candidates

        def shifted(*a, **k):
            ids, logits = get_candidates(*a, **k)
            if logits is not None and logits.shape[1] > 1:
                logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
            return ids, logits

        generator.get_candidates = shifted
        return generator

    model._get_candidate_generator = misaligned_generator
    try:
        outputs = generate_seeded(prepared, prepared.generate_kwargs, 1200)
    finally:
        del model._get_candidate_generator
    values = position_p_values(prepared, outputs)
    assert values[0] > PASS_P and min(values[1:]) < REJECT_P, values
