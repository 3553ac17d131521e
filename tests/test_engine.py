"""The instrumented loop on tiny real checkpoints: invariants and token-for-token equality with generate()."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from playground.engine import LiveRun, RunError, RunRequest, plain_generate, prepare
from playground.errors import PlaygroundError
from playground.trace import Trace, check_invariants

PROMPT = "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three,"


def _run(store, **kw) -> tuple[Trace, list[int]]:
    kw.setdefault("prompt", PROMPT)
    kw.setdefault("dtype", "float32")
    kw.setdefault("max_new_tokens", 24)
    prepared = prepare(RunRequest(**kw), store)
    trace = LiveRun(prepared).run()
    reference, _ = plain_generate(prepared)
    return trace, reference


def _assert_lossless(trace: Trace, reference: list[int]) -> None:
    check_invariants(trace)
    assert trace.output_ids == reference
    assert trace.summary.new_tokens == len(reference)
    for step in trace.steps[:-1]:
        assert len(step.emitted) == step.accepted + 1


def test_baseline_one_token_per_step(store, tiny_models):
    trace, reference = _run(store, target=tiny_models["target"], method="baseline")
    _assert_lossless(trace, reference)
    assert all(s.drafted == [] and len(s.emitted) == 1 for s in trace.steps)
    assert trace.summary.acceptance_rate is None
    assert trace.finish_reason in ("eos", "length")


def test_speculative_with_partly_agreeing_assistant(store, tiny_models):
    trace, reference = _run(store, target=tiny_models["target"], method="speculative",
                            assistant=tiny_models["noisy"], params={"num_assistant_tokens": 4})
    _assert_lossless(trace, reference)
    assert all(len(s.drafted) <= 4 for s in trace.steps)
    assert trace.summary.drafted > 0
    assert any(s.rejected for s in trace.steps), "a noisy assistant should be refused somewhere"
    assert all(s.q is not None and s.p is not None for s in trace.steps if s.drafted)


def test_speculative_with_itself_accepts_every_draft(store, tiny_models):
    trace, reference = _run(store, target=tiny_models["target"], method="speculative",
                            assistant=tiny_models["target"], params={"num_assistant_tokens": 3})
    _assert_lossless(trace, reference)
    assert trace.summary.accepted == trace.summary.drafted > 0


def test_speculative_with_itself_under_sampling_refuses_some_drafts(store, tiny_models):
    """Under sampling Transformers warps the draft's probabilities twice (the assistant's generate() merges the target's
    logits processors and appends its own), so q is sharper than p and a model drafting for itself is refused now
    and then: 'every draft is accepted' (the offline stand-in's note, the assistant box's help) holds only greedy."""
    trace, _ = _run(store, target=tiny_models["target"], method="speculative", assistant=tiny_models["target"],
                    params={"num_assistant_tokens": 3}, sample=True, temperature=0.5, seed=0, max_new_tokens=48)
    check_invariants(trace)
    assert trace.summary.drafted > 0 and trace.summary.accepted < trace.summary.drafted
    assert any(s.rejected for s in trace.steps)


def test_prompt_lookup(store, tiny_models):
    trace, reference = _run(store, target=tiny_models["target"], method="prompt_lookup",
                            params={"prompt_lookup_num_tokens": 5, "max_matching_ngram_size": 2})
    _assert_lossless(trace, reference)


def test_early_exit(store, tiny_models):
    trace, reference = _run(store, target=tiny_models["target"], method="early_exit",
                            params={"assistant_early_exit": 2, "num_assistant_tokens": 3})
    _assert_lossless(trace, reference)
    assert trace.summary.drafted > 0
    target = store.get(tiny_models["target"], "float32")
    assert target.model.config.num_hidden_layers == 4, "early exit must leave the layer count as it was"


def test_draft_settings_are_restored_and_heuristic_runs_repeat(store, tiny_models):
    assistant = store.get(tiny_models["noisy"], "float32")
    before = assistant.model.generation_config.num_assistant_tokens
    kw = dict(target=tiny_models["target"], method="speculative", assistant=tiny_models["noisy"],
              params={"num_assistant_tokens": 2, "num_assistant_tokens_schedule": "heuristic"})
    first, reference = _run(store, **kw)
    second, _ = _run(store, **kw)
    _assert_lossless(first, reference)
    assert [s.drafted for s in first.steps] == [s.drafted for s in second.steps]
    assert assistant.model.generation_config.num_assistant_tokens == before


def test_sampling_is_reproducible_with_a_seed(store, tiny_models):
    kw = dict(target=tiny_models["target"], method="speculative", assistant=tiny_models["noisy"], sample=True,
              temperature=0.8, seed=7)
    first, _ = _run(store, **kw)
    second, _ = _run(store, **kw)
    check_invariants(first)
    assert first.output_ids == second.output_ids


def test_trace_round_trips_through_json(store, tiny_models):
    trace, _ = _run(store, target=tiny_models["target"], method="speculative", assistant=tiny_models["noisy"])
    assert Trace.from_json(trace.to_json()) == trace


def test_stop_ends_the_run_within_a_step(store, tiny_models):
    prepared = prepare(RunRequest(prompt=PROMPT, target=tiny_models["target"], dtype="float32", max_new_tokens=200), store)
    live = LiveRun(prepared)
    seen = 0
    produced_at_stop: int | None = None
    for _ in live:
        seen += 1
        if seen == 3:
            live.stop()
            # The worker may be ahead of this consumer (on busy cores, by many steps): count the steps it had
            # produced when asked to stop, then allow the one step it was in the middle of.
            produced_at_stop = live.generated_steps
    assert live.trace.finish_reason == "stopped" and produced_at_stop is not None
    assert 3 <= len(live.trace.steps) <= produced_at_stop + 1 < 200
    assert not live.running
    assert not any(t.name == "playground-generate" and t.is_alive() for t in threading.enumerate())


def test_abandoned_iteration_ends_the_worker(store, tiny_models):
    prepared = prepare(RunRequest(prompt=PROMPT, target=tiny_models["target"], dtype="float32", max_new_tokens=200), store)
    live = LiveRun(prepared)
    it = iter(live)
    next(it)
    it.close()  # what Gradio does when a visitor leaves
    assert not live.running


@pytest.mark.parametrize("kw, message", [
    ({"prompt": "   "}, "prompt is empty"),
    ({"method": "speculative"}, "needs an assistant"),
    ({"method": "nope"}, "unknown method"),
    ({"method": "prompt_lookup", "params": {"num_assistant_tokens": 3}}, "has no parameter"),
    ({"method": "early_exit", "params": {"assistant_early_exit": 4}}, "between 1 and 3"),
    ({"method": "prompt_lookup", "params": {"prompt_lookup_num_tokens": 0}}, "between 1 and 64"),
    ({"max_new_tokens": 0}, "max new tokens"),
    ({"sample": True, "temperature": 0}, "temperature"),
    ({"method": "universal", "assistant": "SAME"}, "share a tokenizer"),
    ({"method": "mtp"}, "no multi-token-prediction"),
    ({"method": "prompt_lookup", "params": {"assistant_ensemble_weight": 0.5}}, "has no parameter"),
    ({"method": "speculative", "assistant": "SAME", "params": {"assistant_ensemble_weight": 0.0}}, "between 0.05 and 1"),
    ({"dtype": "int3"}, "int3"),
])
def test_bad_requests_get_clear_messages(store, tiny_models, kw, message):
    kw = dict(kw)
    if kw.get("assistant") == "SAME":
        kw["assistant"] = tiny_models["target"]
    kw.setdefault("prompt", PROMPT)
    kw.setdefault("target", tiny_models["target"])
    with pytest.raises(PlaygroundError, match=message):
        prepare(RunRequest(**kw), store)


def test_prompt_longer_than_context_is_refused(store, tiny_models):
    with pytest.raises(RunError, match="context"):
        prepare(RunRequest(prompt="one two three " * 200, target=tiny_models["target"], max_new_tokens=10), store)


def test_run_time_limit_ends_the_run(store, tiny_models, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_RUN_TIMEOUT_S", "0.000001")
    prepared = prepare(RunRequest(prompt=PROMPT, target=tiny_models["target"], dtype="float32", max_new_tokens=100), store)
    trace = LiveRun(prepared).run()
    assert trace.finish_reason == "timeout"
    assert 1 <= len(trace.steps) < 100
    check_invariants(trace)


def test_concurrent_runs_on_shared_models_match_their_solo_runs(store, tiny_models):
    """Early exit mutates the target's layer count and speculative the assistant's draft config while they
    run; runs sharing those models at the same time must still each give their own solo output."""
    requests = [
        RunRequest(prompt=PROMPT, target=tiny_models["target"], method="early_exit", dtype="float32",
                   max_new_tokens=20, params={"assistant_early_exit": 1, "num_assistant_tokens": 2}),
        RunRequest(prompt="The capital of France is", target=tiny_models["target"], method="speculative",
                   assistant=tiny_models["noisy"], dtype="float32", max_new_tokens=20, params={"num_assistant_tokens": 6}),
        RunRequest(prompt="def add(a, b):", target=tiny_models["noisy"], method="baseline", dtype="float32",
                   max_new_tokens=20),
    ]
    solo = [LiveRun(prepare(r, store)).run().output_ids for r in requests]
    results: list[tuple[int, list[int]]] = []

    def work(i: int) -> None:
        results.append((i, LiveRun(prepare(requests[i], store)).run().output_ids))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(requests)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 * len(requests)
    for i, output in results:
        assert output == solo[i], requests[i].method


@pytest.fixture(scope="module")
def overflowing(tiny_models, tmp_path_factory) -> str:
    from tiny import save_overflowing_llama

    return str(save_overflowing_llama(tmp_path_factory.mktemp("overflow") / "target", Path(tiny_models["target"])))


@pytest.mark.parametrize("kw", [
    {"method": "baseline"},
    {"method": "prompt_lookup"},
    {"method": "speculative", "assistant": "NOISY"},
    {"method": "speculative", "assistant": "NOISY", "sample": True, "seed": 1},  # sampling fails on NaN: our message
], ids=["baseline", "prompt_lookup", "speculative", "speculative-sampling"])
def test_non_finite_scores_end_the_run_with_the_reason(store, tiny_models, overflowing, kw):
    """A target whose scores overflow emits only padding; the run ends at once and says why, never 'done'."""
    kw = dict(kw)
    if kw.get("assistant") == "NOISY":
        kw["assistant"] = tiny_models["noisy"]
    prepared = prepare(RunRequest(prompt=PROMPT, target=overflowing, dtype="float32", max_new_tokens=24, **kw), store)
    live = LiveRun(prepared)
    with pytest.raises(RunError, match="the target's scores became NaN or infinite") as error:
        live.run()
    assert "float32: its weights may be broken" in str(error.value)
    assert live.trace.finish_reason == "error"
    # Ended within a step of the overflow (sampling fails on the NaN scores before its first step is recorded),
    # not after 24 tokens of padding.
    assert len(live.trace.steps) <= 2 and len(live.trace.output_ids) < 24


def test_on_a_gpu_a_sampled_run_on_overflowing_scores_draws_no_nan_and_still_ends_with_the_reason(
        store, tiny_models, overflowing, monkeypatch):
    """On a GPU, sampling from NaN scores is a device-side assert that leaves the server's CUDA context unusable (seen
    on an H200: every later run of that process failed). There the watch makes a bad row uniform first, so sampling
    draws a token; the run must still end within a step of the overflow, with the reason. Run here on the CPU by
    taking the GPU's branch: nothing samples from a NaN row (sampling would raise), and the message is the same."""
    import torch

    from playground.engine import stopping

    monkeypatch.setattr(stopping, "sampling_asserts_on", lambda device: True)
    sampled: list[bool] = []
    real_multinomial = torch.multinomial

    def multinomial(probs, *args, **kwargs):
        sampled.append(bool(torch.isfinite(probs).all()))
        return real_multinomial(probs, *args, **kwargs)

    monkeypatch.setattr(torch, "multinomial", multinomial)
    prepared = prepare(RunRequest(prompt=PROMPT, target=overflowing, dtype="float32", max_new_tokens=24,
                                  method="speculative", assistant=tiny_models["noisy"], sample=True, seed=1), store)
    live = LiveRun(prepared)
    with pytest.raises(RunError, match="the target's scores became NaN or infinite"):
        live.run()
    assert sampled and all(sampled), "every draw was from finite probabilities"
    assert live.trace.finish_reason == "error"
    assert len(live.trace.steps) <= 2 and len(live.trace.output_ids) < 24


def test_the_score_watch_skips_nothing_on_a_sound_model(store, tiny_models):
    """The watch changes no token: with it, runs still match plain generate() (the lossless tests check every
    method); and a sound model never trips it."""
    trace, reference = _run(store, target=tiny_models["target"], method="speculative", assistant=tiny_models["noisy"])
    _assert_lossless(trace, reference)
    assert trace.finish_reason in ("length", "eos")


def test_float16_advice_names_the_cure():
    import torch

    from playground.engine import non_finite_message

    message = non_finite_message(torch.float16, 3)
    assert "float16 overflows for this model; use bfloat16 or float32" in message


def test_the_prepared_run_carries_its_precision_and_the_trace_reads_it(store, tiny_models):
    """The request's dtype choice is resolved once, into the record the run carries; the loaded models, the trace's
    environment and every view read that record."""
    from playground.models import resolve_precision

    for choice in ("float32", "auto"):
        prepared = prepare(RunRequest(prompt=PROMPT, target=tiny_models["target"], method="speculative",
                                      assistant=tiny_models["target"], max_new_tokens=3, dtype=choice), store)
        assert prepared.precision == resolve_precision(choice, prepared.target.device)
        assert prepared.precision.choice == choice
        assert all(m.dtype == prepared.precision.torch_dtype() for m in prepared.models())
        trace = LiveRun(prepared).run()
        assert trace.env["dtype"] == prepared.precision.dtype
        assert trace.env["precision"] == prepared.precision.reason
        assert trace.env["device"] == prepared.precision.device


def test_what_differs_between_methods_is_read_from_the_registry():
    """The engine asks the registry how to observe a run and whether the assistant needs its own copy."""
    from playground.methods import METHODS, REFERENCE, is_reference, reference_method

    assert reference_method().name == REFERENCE == "baseline" and is_reference("baseline")
    assert [m.name for m in METHODS.values() if m.reference] == [REFERENCE]
    assert all(m.drafts == (m.name != REFERENCE) for m in METHODS.values())
    assert not is_reference("prompt_lookup") and not is_reference(None)
