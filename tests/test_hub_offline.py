"""The Hub path, proven without the Hub.

A Hugging Face cache (HF_HOME in a temporary directory, huggingface_hub's own layout) holds tiny checkpoints under
the real repo ids of the guide's presets; a child process with HF_HUB_OFFLINE=1 runs every preset through the code a
Space runs (catalogue → load by Hub id → method → trace) in float32, beside a baseline run. A fake Hub endpoint on
127.0.0.1 answers for gated models and serves safetensors headers. The Hub libraries read HF_HOME, HF_ENDPOINT,
HF_HUB_OFFLINE and HF_TOKEN at import, so these runs happen in child processes and this process keeps its settings.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from transformers import GenerationConfig
from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

from hub_cache import THINKING_OFF_MARK, FakeHub, fill_hub_cache, safetensors_header
from playground.methods import get_method
from playground.models import DEVICE_HEADROOM, choose_device_map
from playground.presets import GUIDE_PRESETS, PRESETS, TRANSFORMERS_DRAFT_DEFAULTS, UNSET_LENGTH
from playground.trace import Trace

SCRIPT = Path(__file__).with_name("hub_script.py")
RUN_TIMEOUT_S = 900


def _child_env(**settings: str | Path) -> dict[str, str]:
    """Our environment without any Hugging Face or playground settings, plus `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE_", "PLAYGROUND_"))
           and k != "TRANSFORMERS_OFFLINE"}
    env.update(HF_HUB_DISABLE_TELEMETRY="1", **{k: str(v) for k, v in settings.items()})
    return env


def _run_script(mode: str, out: Path, env: dict[str, str]) -> dict[str, Any]:
    result = subprocess.run([sys.executable, str(SCRIPT), mode, str(out)], env=env, capture_output=True, text=True,
                            timeout=RUN_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def offline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("hub-cache")
    snapshots = fill_hub_cache(root / "hf", root / "work")
    env = _child_env(HF_HOME=root / "hf", HF_HUB_OFFLINE="1", PLAYGROUND_CACHE_DIR=root / "playground")
    found = _run_script("presets", root / "out.json", env)
    found["hf_home"] = str(root / "hf")
    found["snapshots"] = {repo: str(path) for repo, path in snapshots.items()}
    return found


@pytest.mark.slow
def test_every_preset_model_loads_by_hub_id_from_the_cache(offline: dict[str, Any]) -> None:
    models = offline["models"]
    assert set(models) == {m for p in GUIDE_PRESETS for m in p.models}
    for repo, found in models.items():
        # hf_hub_download resolved refs/main to the snapshot we placed, and the model keeps its Hub id.
        assert Path(found["config_path"]).parent == Path(offline["snapshots"][repo]), repo
        assert found["name_or_path"] == repo
        # Offline, the size estimate comes from the cached safetensors headers (GLM's file also holds its MTP layer,
        # which is not loaded with the model).
        assert found["param_bytes"] <= found["estimate"] <= 1.1 * found["param_bytes"], repo


def _generate_kwargs(code: str) -> dict[str, str]:
    """The keyword arguments of the `model.generate(...)` call in a script, as source text."""
    calls = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and n.func.attr == "generate"]
    assert len(calls) == 1
    return {kw.arg: ast.unparse(kw.value) for kw in calls[0].keywords if kw.arg}


def _config_settings(code: str) -> dict[str, str]:
    """`X.generation_config.NAME = VALUE` lines of a script."""
    out = {}
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute) and \
                ast.unparse(node.targets[0]).split(".")[-2:-1] == ["generation_config"]:
            out[node.targets[0].attr] = ast.unparse(node.value)
    return out


def _guide_arguments(call: str) -> tuple[dict[str, str], dict[str, str]]:
    """(generate()/pipeline keyword arguments, generation_config settings) of a preset's `guide_call`."""
    node = ast.parse(call).body[0]
    if isinstance(node, ast.Assign):
        return {}, _config_settings(call)
    assert isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
    return {kw.arg: ast.unparse(kw.value) for kw in node.value.keywords if kw.arg}, {}


def _same(a: str, b: str) -> bool:
    try:
        return ast.literal_eval(a) == ast.literal_eval(b)
    except ValueError:  # names such as assistant_model
        return a == b


# What generate() does where the guide's code sets nothing: Transformers' own defaults.
TRANSFORMERS_DEFAULTS = {
    **GenerationConfig._get_default_generation_params(), **TRANSFORMERS_DRAFT_DEFAULTS,
    "max_matching_ngram_size": inspect.signature(PromptLookupCandidateGenerator).parameters[
        "max_matching_ngram_size"].default,
}
PLUMBING = {"input_ids", "attention_mask", "pad_token_id"}  # the guide's **inputs; the pad id generate() would pick


@pytest.mark.slow
@pytest.mark.parametrize("name", [p.name for p in GUIDE_PRESETS])
def test_guide_preset_runs_offline_as_the_guide_does(offline: dict[str, Any], name: str) -> None:
    preset, found = PRESETS[name], offline["presets"][name]
    trace = Trace.from_dict(found["trace"])  # checks the trace's invariants too
    assert (trace.method, trace.target, trace.assistant) == (preset.method, preset.target, preset.assistant)
    assert trace.params == get_method(preset.method).resolve_params(dict(preset.params))
    assert trace.decoding["sample"] == preset.sample and trace.summary.new_tokens == preset.max_new_tokens
    assert trace.summary.drafted > 0, "the method drafted nothing"
    if not preset.sample:
        assert trace.output_ids == found["baseline_ids"], "greedy output differs from plain greedy (float32)"
    assert trace.lossy == ("assistant_ensemble_weight" in preset.params)

    # Show the code: the guide's example, parameter for parameter.
    code = found["snippet"]
    assert f"from_pretrained({preset.target!r}" in code
    kwargs, settings = _generate_kwargs(code), _config_settings(code)
    guide_kwargs, guide_settings = _guide_arguments(preset.guide_call)
    for key, value in guide_kwargs.items():
        assert key in kwargs and _same(kwargs[key], value), (key, value, kwargs.get(key))
    for key, value in guide_settings.items():
        assert _same(settings[key], value), (key, value, settings.get(key))
    for key, value in kwargs.items():
        if key in guide_kwargs or key in PLUMBING:
            continue
        if key == "assistant_model" and value == key and ".generate(" not in preset.guide_call:
            # The pipeline example names the assistant in pipeline(); the draft-length ones set its config.
            assert preset.assistant
            continue
        if key == "max_new_tokens":  # the guide leaves the length to generate()'s max_length=20 (prompt included)
            assert ast.literal_eval(value) == UNSET_LENGTH
            continue
        assert _same(value, repr(TRANSFORMERS_DEFAULTS[key])), f"{key}={value} is neither the guide's nor the default"
    for key, value in settings.items():
        if key not in guide_settings and key not in preset.playground_sets:
            assert _same(value, repr(TRANSFORMERS_DEFAULTS[key])), f"{key}={value} is neither the guide's nor the default"


@pytest.mark.slow
def test_mtp_drafter_preset_renders_its_chat_as_the_guide(offline: dict[str, Any]) -> None:
    preset, found = PRESETS["mtp-drafter"], offline["presets"]["mtp-drafter"]
    rendered = found["rendered_prompt"]
    assert f"system: {preset.system}" in rendered and f"user: {preset.prompt}" in rendered
    assert THINKING_OFF_MARK in rendered  # enable_thinking=False reached the chat template
    trace = Trace.from_dict(found["trace"])
    assert trace.chat and trace.system == preset.system and trace.chat_template_kwargs == {"enable_thinking": False}
    assert "enable_thinking=False" in found["snippet"] and repr(preset.system) in found["snippet"]
    assert "--chat-template-kwarg enable_thinking=false" in found["cli"]


# --------------------------------------------------------------------------- a fake endpoint on loopback

SMOL_HEADER = {"model.embed_tokens.weight": ("BF16", [49152, 2048]), "lm_head.weight": ("BF16", [49152, 2048])}


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("fake-hub")
    found: dict[str, Any] = {}
    with FakeHub({"meta-llama/Llama-3.1-8B"}, {"HuggingFaceTB/SmolLM-1.7B": safetensors_header(SMOL_HEADER)}) as hub:
        for token in (None, "hf_not_a_real_token"):
            home = root / f"home-{bool(token)}"
            env = _child_env(HF_HOME=home, HF_ENDPOINT=hub.url, HF_HUB_ETAG_TIMEOUT="5",
                             PLAYGROUND_CACHE_DIR=root / "playground", PLAYGROUND_MEMORY_BUDGET_GB="0.5",
                             **({"HF_TOKEN": token} if token else {}))
            before = len(hub.requests)
            found[token or "no token"] = _run_script("endpoint", root / "out.json", env)
            found[token or "no token"]["requests"] = hub.requests[before:]
            found[token or "no token"]["home"] = home
    return found


@pytest.mark.slow
def test_gated_model_message_with_and_without_hf_token(endpoint: dict[str, Any]) -> None:
    without, with_token = endpoint["no token"], endpoint["hf_not_a_real_token"]
    assert without["gated"].startswith("meta-llama/Llama-3.1-8B is gated on the Hugging Face Hub")
    assert "set HF_TOKEN" in without["gated"] and "has no access" not in without["gated"]
    assert "the token in HF_TOKEN has no access to it" in with_token["gated"]
    # The fake Hub saw the token only when it was set.
    assert all(r["authorization"] is None for r in without["requests"])
    assert any(r["authorization"] == "Bearer hf_not_a_real_token" for r in with_token["requests"])


@pytest.mark.slow
def test_memory_estimate_comes_from_safetensors_headers_before_any_download(endpoint: dict[str, Any]) -> None:
    params = sum(shape[0] * shape[1] for _, shape in SMOL_HEADER.values())
    for found in (endpoint["no token"], endpoint["hf_not_a_real_token"]):
        assert found["estimate"] == params * 4  # float32
        # Over the 0.5 GB budget: refused from the headers alone.
        assert found["budget"] == "HuggingFaceTB/SmolLM-1.7B needs 0.81 GB, budget is 0.50 GB (PLAYGROUND_MEMORY_BUDGET_GB)"
        weights = [r for r in found["requests"] if r["path"].endswith("model.safetensors") and r["method"] == "GET"]
        assert weights and all(r["range"] == "bytes=0-100000" for r in weights)  # header ranges only
        assert not list(Path(found["home"]).glob("**/blobs/*"))  # nothing downloaded into the cache


def test_device_map_is_auto_only_where_the_model_exceeds_one_device() -> None:
    gib = 1 << 30
    assert choose_device_map(100 * gib, "cpu", []) is None  # CPU: no device map at all
    assert choose_device_map(int(DEVICE_HEADROOM * 80 * gib), "cuda", [80 * gib, 80 * gib]) == "cuda"
    assert choose_device_map(212 * 10**9, "cuda", [80 * gib] * 4) == "auto"  # GLM-4.5-Air on 80 GB GPUs
    assert choose_device_map(79 * gib, "cuda", [80 * gib]) == "auto"  # no room left for the KV cache
    assert choose_device_map(None, "cuda", [80 * gib]) == "auto"  # unknown size: let Accelerate place it


def test_the_free_memory_of_each_gpu_is_read_from_torch() -> None:
    """What a GPU load's device map is decided on: one figure per GPU torch sees (none on a host without one)."""
    import torch

    from playground.models.placement import _free_device_bytes

    assert _free_device_bytes("cpu") == []
    free = _free_device_bytes("cuda")
    assert len(free) == torch.cuda.device_count() and all(isinstance(b, int) and b > 0 for b in free)
