"""Every method of the guide shown offline with real behaviour (#47): the stand-ins built from the bundled Gemma
(`models.derived`: its first 12 layers as a same-tokenizer drafter; tiny random GLM-4.5 and Gemma 4 look-alikes for
the MTP paths) refuse drafts and correct them, greedy and sampling, and greedy equals a baseline run token for token
in float32."""

from __future__ import annotations

import json
from typing import Any

import pytest

from playground import models
from playground.presets import PRESETS, STAND_INS

# The offline stand-ins this issue built, by the guide preset they stand in for (greedy), with a sampling run of each.
BUILT = ("speculative-greedy-offline", "mtp-layers-offline", "mtp-drafter-offline")
NEW_TOKENS = 16  # enough for refusals on each (seen: 11 to 16 refusing steps of 16), short enough for the suite


def test_every_method_of_the_guide_has_an_offline_stand_in() -> None:
    """No guide preset is left without one (MTP layers and the MTP drafter had none), and every stand-in's models
    are the catalogue's bundled ones, those built at first use said to be built so in their catalogue entry."""
    assert all(stand_in.target is not None for stand_in in STAND_INS.values())
    for name in BUILT:
        preset = PRESETS[name]
        assert preset.stand_in_for and not preset.needs_hub
        assert all(models.CATALOGUE[m].source == "bundled" for m in preset.models)
        assert any(models.CATALOGUE[m].derived is not None for m in preset.models), name
        assert preset.dtype == "float32"  # its note promises float32's equality with plain greedy
    assert PRESETS["speculative-greedy-offline"].assistant == models.GEMMA_FIRST_LAYERS != models.DEFAULT_TARGET


@pytest.mark.bundled
def test_the_first_layers_drafter_is_the_bundled_gemma_cut_to_12_layers() -> None:
    """The derived drafter is Gemma's own first 12 layers (the same tensors), its final norm and tied head, and
    Gemma's very tokenizer file: nothing trained, nothing downloaded."""
    from safetensors import safe_open

    gemma = models.ensure_converted(models.CATALOGUE[models.DEFAULT_TARGET])
    drafter = models.ensure_local(models.CATALOGUE[models.GEMMA_FIRST_LAYERS])
    config = json.loads((drafter / "config.json").read_text())
    assert config["num_hidden_layers"] == 12 == len(config["layer_types"])
    assert (drafter / "tokenizer.json").read_bytes() == (gemma / "tokenizer.json").read_bytes()
    with safe_open(str(drafter / "model.safetensors"), "pt") as cut, safe_open(str(gemma / "model.safetensors"),
                                                                                "pt") as whole:
        assert set(cut.keys()) == {k for k in whole.keys() if not any(
            k.startswith(f"model.layers.{i}.") for i in range(12, 18))}
        for key in ("model.layers.11.mlp.down_proj.weight", "model.norm.weight", "model.embed_tokens.weight"):
            assert cut.get_tensor(key).equal(whole.get_tensor(key))


def _run(preset: str, **overrides: Any):
    from playground.engine import LiveRun, prepare

    return LiveRun(prepare(PRESETS[preset].request(max_new_tokens=NEW_TOKENS, **overrides))).run()


@pytest.mark.bundled
@pytest.mark.parametrize("preset", BUILT)
def test_a_built_stand_in_refuses_drafts_and_greedy_equals_baseline_in_float32(preset: str) -> None:
    trace = _run(preset)
    baseline = _run(preset, method="baseline", assistant=None, params={})
    assert trace.env["dtype"] == baseline.env["dtype"] == "float32"
    refusals = [step for step in trace.steps if step.rejected]
    assert refusals, f"{preset}: no draft refused ({trace.summary.drafted} drafted)"
    # A refusal is corrected: the step emits the target's own token where the refused draft stood.
    assert all(step.emitted[step.accepted] != step.rejected[0] for step in refusals)
    assert trace.output_ids == baseline.output_ids


@pytest.mark.bundled
@pytest.mark.parametrize("preset", BUILT)
def test_a_built_stand_in_refuses_drafts_when_sampling(preset: str) -> None:
    trace = _run(preset, sample=True, temperature=0.5, top_k=50, seed=0)
    assert trace.decoding["sample"] is True
    assert any(step.rejected for step in trace.steps), preset


@pytest.mark.bundled
def test_the_method_picker_offline_suggests_the_derived_drafter_which_is_refused(monkeypatch) -> None:
    """A student who picks "Speculative decoding" on the page offline gets Gemma's first 12 layers as the assistant
    (the catalogue's pairing, built in the background of a preloading server), and a run with the page's own
    settings shows drafts refused and corrected: not Gemma drafting for itself, every draft kept."""
    import threading

    from playground.app import generate_tab, preload as preload_module
    from playground.engine import LiveRun, prepare
    from playground.presets import GUIDE_PROMPT
    from playground.request import new_request

    preload = preload_module.Preload()
    preload.thread = threading.current_thread()  # a server that preloads, its start-up load done
    preload.done.set()
    monkeypatch.setattr(preload_module, "PRELOAD", preload)
    views = generate_tab.on_method_change("speculative", models.DEFAULT_TARGET, None)
    assistant = dict(zip(generate_tab.METHOD_VIEWS.names, views))["assistant"]
    suggested = assistant.get("value")
    assert suggested == models.GEMMA_FIRST_LAYERS, assistant
    worker = next((t for t in threading.enumerate() if t.name == "playground-convert-assistant"), None)
    if worker is not None:  # built in the background (at once where the cache has it)
        worker.join(600)
    trace = LiveRun(prepare(new_request(GUIDE_PROMPT, target=models.DEFAULT_TARGET, method="speculative",
                                        assistant=suggested, max_new_tokens=NEW_TOKENS))).run()
    assert any(step.rejected for step in trace.steps), "a refusal on the page's own settings"
