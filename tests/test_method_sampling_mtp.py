"""Sampling with a checkpoint's own MTP layer keeps the target's distribution: the chi-square test of
test_method_sampling.py (its enumeration, seeded runs and pooling), and the fault it must catch injected into
Transformers' real MTP generator. A file of its own: its two tests are among the slowest of the sampling tests, and
README's `-n 2 --dist loadfile` hands whole files to its workers.

The checkpoint is a tiny random Mellum (2 main layers, its MTP layer at `mtp.*`). Transformers' MTP path is the same
for every architecture (MTPCandidateGenerator, MtpModel rebuilt from the safetensors at each call, rejection sampling
in the assisted loop); only the MTP block's layer class and where its weights lie differ. A DeepSeek-V3 checkpoint
must have 61 main layers (Transformers finds its MTP weights by the key pattern `model.layers.61.*` and renames
`layers.{num_hidden_layers}.*`), and 61 layers per forward made these 1,200 runs about three times slower
(tests/test_methods.py keeps DeepSeek-V3's MTP layer: greedy equal to a baseline run, sampling seeded).
"""

from __future__ import annotations

import pytest

from playground.engine import PreparedRun, RunRequest, prepare
from test_method_sampling import PASS_P, PROMPT, REJECT_P, _acceptance, chi_square_p, exact_distribution, sample_engine
from tiny import build_word_tokenizer, save_tiny_mellum

# Hundreds of seeded runs per test.
pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]


# Three new tokens: the first step only runs the target (the MTP layers need its hidden states first) and gives
# token 1; the second drafts one token with the checkpoint's one MTP layer, so token 2 passes through rejection
# sampling and token 3 is the bonus or nothing. The pair (token 2, token 3) is tested, token 1 marginalised out.
MTP_LENGTH = 3
# 600 runs each: the pair's distribution then has 21 cells of 5+ expected samples (chi_square_p asks for ten); the
# correct sampler passes at p = 0.65 and the same 600 seeds reject the injected argmax fault at p = 2e-60, far below
# REJECT_P (measured on 4 Dec; on the 61-layer DeepSeek-V3 before it, 2e-39).
MTP_RUNS = 600


@pytest.fixture(scope="module")
def mtp_target(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random Mellum over the word vocabulary, its MTP layer's weights on disk (tests/tiny.py)."""
    return str(save_tiny_mellum(tmp_path_factory.mktemp("mtp") / "mellum_mtp", seed=0,
                                tokenizer=build_word_tokenizer()))


def _mtp_prepared(store, mtp_target: str) -> PreparedRun:
    return prepare(RunRequest(prompt=PROMPT, dtype="float32", max_new_tokens=MTP_LENGTH, sample=True,
                              target=mtp_target, method="mtp"), store)


def test_mtp_sampling_follows_the_target_distribution(store, mtp_target) -> None:
    prepared = _mtp_prepared(store, mtp_target)
    counts, traces = sample_engine(prepared, MTP_RUNS, skip=1, keep=2)
    full = [t for t in traces if len(t.output_ids) == MTP_LENGTH and len(t.steps) > 1]
    assert all(t.steps[1].draft_len == 1 for t in full), "the MTP layer drafts token 2"
    assert 0.2 < _acceptance(traces) < 0.9, "the test needs both accepted and rejected drafts"
    assert not any(t.lossy for t in traces)
    assert chi_square_p(exact_distribution(prepared, MTP_LENGTH, skip=1, keep=2), counts) > PASS_P


def test_the_mtp_test_rejects_argmax_drafts_judged_as_samples(store, mtp_target, monkeypatch) -> None:
    """What the MTP test can catch: the MTP layer drafting its most likely token while verification still treats
    the draft as a sample from its softmax (the Gemma 4 drafter's fault, injected into Transformers' real MTP
    generator). The same runs, enumeration and sample size reject it."""
    from transformers.generation.candidate_generator import MTPCandidateGenerator

    build = MTPCandidateGenerator.__init__

    def argmax_drafts(generator, *args, **kwargs) -> None:
        build(generator, *args, **kwargs)
        assert generator.do_sample
        generator.do_sample = False  # MtpModel then drafts the argmax, and still returns its logits as q

    monkeypatch.setattr(MTPCandidateGenerator, "__init__", argmax_drafts)
    prepared = _mtp_prepared(store, mtp_target)
    counts, traces = sample_engine(prepared, MTP_RUNS, skip=1, keep=2)
    assert sum(t.summary.drafted for t in traces) > MTP_RUNS / 2
    assert chi_square_p(exact_distribution(prepared, MTP_LENGTH, skip=1, keep=2), counts) < REJECT_P
