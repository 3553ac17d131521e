"""The CUDA paths on a GPU: placement, bfloat16, the timer that waits for the GPU, the random state under turn-taking.

CI has no GPU: every test here that runs a model is skipped there, with its reason (`-rs`); the two that check the
score watch's GPU branch on plain tensors run everywhere. On a GPU machine run
`python -m pytest -q -rs tests/test_cuda.py tests/test_turns.py tests/test_lossless.py tests/test_methods.py`: the
other three files run on `default_device()`, the GPU there, and the first test here checks that it is. The last
test shows that the turn-taking test can fail on a GPU: without the CUDA generator's state saved and given back at
each turn, two seeded sampling runs that take turns no longer give what each gives alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from playground.engine import LiveRun, plain_generate, prepare
from playground.engine import turns as turns_module
from playground.engine.stopping import _ScoreWatch, neutralize, sampling_asserts_on
from playground.models import default_device
from playground.models.placement import _free_device_bytes, choose_device_map
from playground.trace import check_invariants
from test_methods import models  # noqa: F401  (the tiny checkpoints of every method, as a fixture)
from test_turns import SHORT_TOKENS, _assert_tiles, _interleave, _request, _turns_of

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: it checks the CUDA paths")


def _devices(model: Any) -> set[str]:
    return {p.device.type for p in model.parameters()}


@needs_gpu
@pytest.mark.models
def test_runs_are_placed_on_the_gpu_and_their_traces_say_so(store, models) -> None:  # noqa: F811
    assert default_device() == "cuda", "on a GPU machine every run of the other files runs on the GPU"
    free = _free_device_bytes("cuda")
    assert len(free) == torch.cuda.device_count() and all(b > 0 for b in free)
    assert choose_device_map(10**6, "cuda", free) == "cuda"  # a tiny model fits on the first GPU

    prepared = prepare(_request(models, "speculative", 12), store)
    assert prepared.assistant is not None
    assert _devices(prepared.target.model) == _devices(prepared.assistant.model) == {"cuda"}
    assert prepared.target.device.startswith("cuda") and prepared.generate_kwargs["input_ids"].is_cuda
    trace = LiveRun(prepared).run()
    check_invariants(trace)
    _assert_tiles(trace)  # the recorder's clock waits for the GPU (`torch.cuda.synchronize`): phases still tile
    assert trace.env["device"].startswith("cuda") and trace.env["dtype"] == "float32"
    baseline = prepare(_request(models, "baseline", 12), store)
    assert trace.output_ids == plain_generate(baseline)[0], "float32 greedy drafting on the GPU equals a baseline run"


@needs_gpu
@pytest.mark.models
@pytest.mark.parametrize("name", ["baseline", "speculative", "prompt_lookup", "early_exit-sampling", "universal"])
def test_auto_precision_on_the_gpu_is_bfloat16_and_the_run_is_plain_generate(store, models, name) -> None:  # noqa: F811
    """`auto` on a GPU that computes bfloat16 picks it (no measurement: a GPU's bfloat16 is native); the run loads in
    it, records it with its reason, and equals plain `generate()` with the same arguments, sampled ones included."""
    assert torch.cuda.is_bf16_supported()
    prepared = prepare(dataclasses.replace(_request(models, name, 16), dtype="auto"), store)
    assert prepared.precision.dtype == "bfloat16" and prepared.target.model.dtype == torch.bfloat16
    assert _devices(prepared.target.model) == {"cuda"}
    trace = LiveRun(prepared).run()
    check_invariants(trace)
    assert trace.env["dtype"] == "bfloat16" and trace.env["precision"] == prepared.precision.reason
    assert trace.output_ids == plain_generate(prepared)[0], "the instrumentation changes nothing in bfloat16 either"


@needs_gpu
@pytest.mark.models
@pytest.mark.parametrize("name", ["baseline-sampling", "speculative-sampling", "universal-sampling"])
def test_seeded_sampling_runs_taking_turns_on_the_gpu_give_what_each_gives_alone(store, models, name) -> None:  # noqa: F811
    alone_long = LiveRun(prepare(_request(models, name, 120), store)).run()
    alone_short = LiveRun(prepare(_request(models, name, SHORT_TOKENS, prompt="def add(a, b):"), store)).run()
    long_trace, short_trace, _, _, short_run = _interleave(store, models, name, name)
    assert short_run.prepared.generate_kwargs["input_ids"].is_cuda
    short_turns = _turns_of(short_run)
    assert short_turns is not None
    assert short_turns.turns == len(short_trace.steps) > 1, "the runs took turns step by step"
    assert short_trace.output_ids == alone_short.output_ids and long_trace.output_ids == alone_long.output_ids


@needs_gpu
@pytest.mark.models
def test_without_the_cuda_state_given_back_turn_taking_runs_diverge(store, models, monkeypatch) -> None:  # noqa: F811
    """The test above able to fail: the turns keep the CPU generator's state only (as if the target were on the
    CPU), so each run's next turn draws from where the other run left the GPU's generator."""
    original = turns_module._Turns.__init__

    def cpu_state_only(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._cuda = False

    name = "baseline-sampling"
    alone_long = LiveRun(prepare(_request(models, name, 120), store)).run()
    alone_short = LiveRun(prepare(_request(models, name, SHORT_TOKENS, prompt="def add(a, b):"), store)).run()
    monkeypatch.setattr(turns_module._Turns, "__init__", cpu_state_only)
    long_trace, short_trace, _, _, short_run = _interleave(store, models, name, name)
    short_turns = _turns_of(short_run)
    assert short_turns is not None
    assert short_turns._cuda is False and short_turns.turns > 1
    assert (short_trace.output_ids, long_trace.output_ids) != (alone_short.output_ids, alone_long.output_ids)


def test_sampling_asserts_on_every_device_but_the_cpu() -> None:
    assert not sampling_asserts_on(torch.device("cpu"))
    assert sampling_asserts_on(torch.device("cuda")) and sampling_asserts_on(torch.device("cuda", 1))
    assert sampling_asserts_on(torch.device("meta"))


def test_the_watch_makes_bad_rows_uniform_and_leaves_sound_rows_bit_for_bit(monkeypatch) -> None:
    """The GPU branch of `_ScoreWatch.observe`, on CPU tensors: rows with NaN, +inf, or no finite score become all
    zeros (uniform; sampling draws from them without failing), a sound row (one -inf in it included) is untouched,
    the target's bad rows trip the watch, and the drafter's never do."""
    import playground.engine.stopping as stopping

    class Output:
        def __init__(self, logits: torch.Tensor) -> None:
            self.logits = logits

    sound = torch.tensor([1.0, -2.0, float("-inf"), 0.5])
    rows = torch.stack([sound, torch.tensor([1.0, float("nan"), 0.0, 2.0]), torch.tensor([0.0, float("inf"), 1.0, 1.0]),
                        torch.full((4,), float("-inf"))]).unsqueeze(0)
    with pytest.raises(RuntimeError):
        torch.multinomial(rows[0].softmax(-1), 1)  # what the CPU does with such rows: an error, which the run reports
    monkeypatch.setattr(stopping, "sampling_asserts_on", lambda device: True)
    for drafting in (False, True):
        watch, logits = _ScoreWatch(), rows.clone()
        watch.drafting = drafting
        watch.observe(None, (), Output(logits))
        assert torch.equal(logits[0, 0], sound), "a sound row is untouched"
        assert torch.equal(logits[0, 1:], torch.zeros(3, 4)), "each bad row is uniform"
        assert torch.multinomial(logits[0].softmax(-1), 1).shape == (4, 1)
        assert watch.tripped() is not drafting, "only the target's own scores trip the watch"
    watch, logits = _ScoreWatch(), sound.clone().unsqueeze(0)
    watch.observe(None, (), Output(logits))
    assert not watch.tripped() and torch.equal(logits[0], sound)
    ones = torch.ones(1, 3)
    neutralize(ones, torch.tensor([[False]]))
    assert torch.equal(ones, torch.ones(1, 3))
