"""Per-target defaults and bounds: early exit's layer bounded by the target's layers (page, engine) and its default the
catalogue's own for a model where the registry's would not teach.
"""

from __future__ import annotations

import json

import pytest

from playground.app.generate_tab import METHOD_VIEWS, on_method_change
from playground.app.outputs import PARAM
from playground.app.run_request import on_target_change, on_target_pick, param_specs, target_param_specs
from playground.engine import prepare
from playground.methods import MethodError, get_method
from playground.models import CATALOGUE, DEFAULT_TARGET, converted_dir, known_layers, method_defaults
from playground.request import RunRequest, method_for

LAYER = "assistant_early_exit"
NAMES = list(param_specs())
LAYERSKIP = "facebook/layerskip-llama3.2-1B"


def _update(updates: list, name: str) -> dict:
    return updates[NAMES.index(name)]


def _method_change(target: str, name: str) -> dict:
    """The update `on_method_change` gives early exit's control `name` (by its output name)."""
    return METHOD_VIEWS.read(on_method_change("early_exit", target, None))[PARAM + name]


def test_the_bundled_gemma_has_its_own_early_exit_layer_within_its_layers():
    registry = get_method("early_exit").param(LAYER)
    own = method_defaults(DEFAULT_TARGET, "early_exit")[LAYER]
    assert own != registry.default  # the registry's 4 (the guide's, for LayerSkip) is not the bundled model's
    gemma = method_for("early_exit", DEFAULT_TARGET).param(LAYER)
    assert (gemma.default, gemma.maximum) == (own, 17)
    # A model without its own default keeps the registry's, bounded by its layers.
    layerskip = method_for("early_exit", LAYERSKIP).param(LAYER)
    assert (layerskip.default, layerskip.maximum) == (registry.default, 15)
    # Unknown layers (a model the catalogue does not list): the registry's bound until the model loads.
    assert method_for("early_exit", "someone/unknown").param(LAYER).maximum == registry.maximum


def test_a_default_past_the_last_layer_is_clamped_and_a_value_past_it_refused():
    tiny = method_for("early_exit", "local/tiny", layers=3)
    assert tiny.defaults()[LAYER] == 2
    with pytest.raises(MethodError, match="between 1 and 2"):
        tiny.resolve_params({LAYER: 3})
    # Parameters that do not depend on the target are untouched.
    assert {k: v for k, v in tiny.defaults().items() if k != LAYER} == {
        k: v for k, v in get_method("early_exit").defaults().items() if k != LAYER}


@pytest.mark.bundled
def test_catalogue_layer_counts_match_the_converted_bundled_models():
    checked = 0
    for entry in CATALOGUE.values():
        config = converted_dir(entry.key) / "config.json" if entry.gguf is not None else None
        if config is None or not config.is_file():
            continue
        data = json.loads(config.read_text())
        assert entry.layers == data.get("num_hidden_layers", data.get("text_config", {}).get("num_hidden_layers"))
        checked += 1
    assert checked >= 1, "no bundled model is converted: run `python -m playground convert` first"


def test_the_page_builds_the_layer_control_for_the_default_target():
    p = target_param_specs(DEFAULT_TARGET)[LAYER]
    layers = known_layers(DEFAULT_TARGET)
    assert layers is not None
    assert (p.default, p.maximum) == (method_defaults(DEFAULT_TARGET, "early_exit")[LAYER], layers - 1)


def test_choosing_early_exit_bounds_the_slider_by_the_targets_layers():
    update = _method_change(DEFAULT_TARGET, LAYER)
    assert update["maximum"] == 17 and update["visible"] is True
    assert _method_change(LAYERSKIP, LAYER)["maximum"] == 15


def test_picking_a_target_sets_its_own_layer_and_range():
    gemma = _update(on_target_pick(DEFAULT_TARGET), LAYER)
    assert (gemma["value"], gemma["maximum"]) == (method_defaults(DEFAULT_TARGET, "early_exit")[LAYER], 17)
    vicuna = _update(on_target_pick("double7/vicuna-68m"), LAYER)  # two layers: only layer 1 can draft
    assert (vicuna["value"], vicuna["maximum"]) == (1, 1)
    # Controls that do not depend on the target are left as the visitor set them.
    assert _update(on_target_pick(DEFAULT_TARGET), "num_assistant_tokens")["__type__"] == "update"
    assert "value" not in _update(on_target_pick(DEFAULT_TARGET), "num_assistant_tokens")


def test_a_target_set_by_a_link_keeps_its_value_unless_past_the_top():
    values = {name: p.default for name, p in param_specs().items()}
    kept = _update(on_target_change(LAYERSKIP, {**values, LAYER: 6}), LAYER)
    assert kept["maximum"] == 15 and "value" not in kept
    lowered = _update(on_target_change(LAYERSKIP, {**values, LAYER: 40}), LAYER)
    assert (lowered["maximum"], lowered["value"]) == (15, 15)


@pytest.mark.slow
def test_the_engine_clamps_the_default_and_refuses_a_layer_past_the_top(store, tiny_models):
    # The tiny target has 4 layers: the registry's default 4 would be no early exit at all.
    prepared = prepare(RunRequest(prompt="one two three", target=tiny_models["target"], method="early_exit"), store)
    assert prepared.params[LAYER] == 3 and prepared.generate_kwargs[LAYER] == 3
    with pytest.raises(MethodError, match="between 1 and 3"):
        prepare(RunRequest(prompt="one two three", target=tiny_models["target"], method="early_exit",
                           params={LAYER: 4}), store)
