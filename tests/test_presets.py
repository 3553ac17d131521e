"""The guide's examples as presets: the data, the CLI's --preset, the page's picker and the API's `preset`.

Hub presets run in tests/test_hub_offline.py (tiny checkpoints in an offline HF cache); here, their offline
stand-ins run on the bundled Gemma, and what each surface offers where the Hub is out of reach.
"""

from __future__ import annotations

from typing import Any

import pytest

from playground.app import preset_picker, run_request
from playground.cli import main
from playground.engine import RunRequest
from playground.errors import PlaygroundError
from playground.models import CATALOGUE, DEFAULT_TARGET, GEMMA_FIRST_LAYERS, TINY_GLM_MTP, hub_reachable
from playground.presets import GUIDE_PRESETS, OFFLINE_SUFFIX, PRESETS, STAND_INS, validate_presets
from playground.trace import Trace


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE=1 for this test (the playground reads it at each check)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert not hub_reachable()


def test_presets_name_catalogue_models_and_valid_parameters() -> None:
    validate_presets()
    for preset in GUIDE_PRESETS:
        assert preset.needs_hub and "the Hugging Face Hub" in preset.needs()
        assert all(CATALOGUE[m].source == "hub" for m in preset.models)
        stand_in = STAND_INS[preset.method]
        if stand_in.target is None:
            assert preset.stand_in is None
            continue
        offline = PRESETS[preset.name + OFFLINE_SUFFIX]
        assert offline.stand_in_for == preset.name and not offline.needs_hub
        assert all(CATALOGUE[m].source == "bundled" for m in offline.models)
        # A stand-in changes the models only: the method, its parameters, decoding and prompt stay the guide's.
        same = ("method", "params", "sample", "temperature", "top_k", "max_new_tokens", "prompt", "system")
        assert all(getattr(offline, f) == getattr(preset, f) for f in same)
    assert PRESETS["mtp-layers"].device_map_auto and "several GPUs" in PRESETS["mtp-layers"].needs()
    assert "HF_TOKEN" in PRESETS["speculative-pipeline"].needs()  # Llama is gated
    assert "HF_TOKEN" not in PRESETS["speculative-greedy"].needs()


def test_cli_lists_presets_and_says_why_a_hub_preset_cannot_run_offline(offline: None, capsys) -> None:
    assert main(["run", "--preset", "list"]) == 0
    listing = capsys.readouterr().out
    for name, preset in PRESETS.items():
        assert f"{name}: {preset.title}" in listing
    assert "here: Multi-token prediction layers (GLM-4.5-Air) needs the Hugging Face Hub" in listing

    assert main(["run", "--preset", "speculative-greedy"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: Speculative decoding, greedy needs the Hugging Face Hub, which is not reachable here; "
                   "stand-in on the bundled models: speculative-greedy-offline")
    assert main(["run", "--preset", "early-exit-offline", "--method", "speculative", "--seed", "3"]) == 2
    assert "drop --method, --seed" in capsys.readouterr().err
    assert main(["run", "--preset", "nope"]) == 2
    assert "unknown preset 'nope'; choose one of speculative-greedy" in capsys.readouterr().err
    assert main(["run", "--max-new-tokens", "3"]) == 2
    assert "give --prompt, --prompt-file or --preset" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.bundled
def test_cli_runs_a_stand_in_preset_on_the_bundled_model(tmp_path, capsys) -> None:
    out = tmp_path / "trace.json"
    assert main(["run", "--preset", "prompt-lookup-greedy-offline", "--dtype", "float32", "--quiet",
                 "--trace-out", str(out)]) == 0, capsys.readouterr().err
    trace, preset = Trace.load(out), PRESETS["prompt-lookup-greedy-offline"]
    assert (trace.target, trace.method, trace.prompt) == (DEFAULT_TARGET, "prompt_lookup", preset.prompt)
    assert trace.params == {"prompt_lookup_num_tokens": 5, "max_matching_ngram_size": 2}
    assert trace.summary.new_tokens == preset.max_new_tokens and trace.decoding["sample"] is False


def test_page_offers_stand_ins_where_the_hub_is_out_of_reach(offline: None) -> None:
    labels = dict((name, label) for label, name in preset_picker.choices(hub_reachable()))
    assert set(labels) == set(PRESETS)
    assert labels["speculative-greedy"].endswith("(needs the Hub: picks its offline stand-in)")
    assert labels["mtp-layers"].endswith("(needs the Hub: picks its offline stand-in)")
    assert labels["speculative-greedy-offline"] == PRESETS["speculative-greedy-offline"].title

    names = list(run_request.param_specs())
    outputs = preset_picker.picked(names)
    out = outputs.read(preset_picker.on_preset("speculative-sampling", names))
    assert out["preset"]["value"] == "speculative-sampling-offline"
    assert "needs the Hugging Face Hub, which is not reachable here" in out["preset_info"]
    assert "Does not show" in out["preset_info"]
    assert (out["target"], out["assistant"], out["method"]) == (DEFAULT_TARGET, GEMMA_FIRST_LAYERS, "speculative")
    assert [out[k] for k in ("sample", "temperature", "top_k", "chat", "max_new_tokens")] == [True, 0.5, 50, "off", 20]
    assert out["param:num_assistant_tokens"] == 20 and out["param:assistant_confidence_threshold"] == 0.4

    # MTP layers: its stand-in, the tiny GLM-4.5 look-alike built from Gemma, said to be one.
    out = outputs.read(preset_picker.on_preset("mtp-layers", names))
    assert out["preset"]["value"] == "mtp-layers-offline" and "Does not show" in out["preset_info"]
    assert (out["target"], out["assistant"], out["method"]) == (TINY_GLM_MTP, None, "mtp")
    assert "randomly initialised" in out["preset_info"]


def test_page_fills_a_hub_preset_as_the_guide_sets_it() -> None:
    names = list(run_request.param_specs())
    out = preset_picker.picked(names).read(preset_picker.on_preset("mtp-drafter", names, online=True))
    assert out["preset"]["value"] == "mtp-drafter"
    assert [out[k] for k in ("target", "assistant", "method", "chat", "max_new_tokens")] == [
        "google/gemma-4-E4B-it", "google/gemma-4-E4B-it-assistant", "mtp_drafter", "on", 256]
    assert out["prompt"] == "Write a short joke about saving RAM." and "You are a helpful assistant." in out["preset_info"]
    assert "enable_thinking=False" in out["preset_info"]
    assert out["param:num_assistant_tokens"] == 5


def _api(preset: str | None, prompt: str = "", **values) -> RunRequest:
    """run_request.build_request as the /generate endpoint calls it, the other values at their page defaults."""
    args: dict[str, Any] = dict(target=DEFAULT_TARGET, assistant=None, method="baseline", params={}, max_new_tokens=64, sample=False,
                temperature=1.0, top_p=1.0, top_k=0, seed=0, chat="auto", dtype="auto")
    args.update(values)
    return run_request.build_request(prompt, *args.values(), preset)  # type: ignore[call-arg]


def test_api_preset_sets_everything_but_prompt_and_precision(offline: None) -> None:
    preset = PRESETS["early-exit-offline"]
    request = _api("early-exit-offline", dtype="float32", method="universal", max_new_tokens=7)
    assert request == RunRequest(**preset.request_fields(dtype="float32"))
    assert request.params == dict(preset.params) and request.method == "early_exit" and request.max_new_tokens == 20
    assert _api("early-exit-offline", prompt="My own prompt").prompt == "My own prompt"
    with pytest.raises(PlaygroundError, match="needs the Hugging Face Hub, which is not reachable here; "
                                              "stand-in on the bundled models: early-exit-offline"):
        _api("early-exit")
    with pytest.raises(PlaygroundError, match="unknown preset"):
        _api("<b>not a preset</b>")
    with pytest.raises(PlaygroundError, match="preset must be text"):
        _api(42)  # type: ignore[arg-type]
    assert _api(None, prompt="x").method == "baseline" and _api("", prompt="x").method == "baseline"
