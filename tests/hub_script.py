"""Run in a child process whose environment points the Hub libraries at a test cache or a fake endpoint
(HF_HOME, HF_HUB_OFFLINE, HF_ENDPOINT, HF_TOKEN are read when huggingface_hub is imported, so the parent test
process keeps its own settings). Writes its findings as JSON to the path given.

    python tests/hub_script.py presets OUT.json    # every guide preset through the Space's code path, offline
    python tests/hub_script.py endpoint OUT.json   # gated models and size estimates against a fake endpoint
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

torch.set_num_threads(1)  # tiny models; the machine is shared

from playground.engine import LiveRun, RunRequest, prepare  # noqa: E402
from playground.models import CATALOGUE, ModelLoadError, ModelStore, estimate_param_bytes, load_model  # noqa: E402
from playground.presets import GUIDE_PRESETS  # noqa: E402
from playground.snippet import cli_command, python_snippet, resolved_request  # noqa: E402


def presets() -> dict[str, Any]:
    """Each guide preset as the page runs it (catalogue entry → load by Hub id → method → trace), in float32,
    beside a baseline run of the same request; plus where each model was read from and its estimated size."""
    from huggingface_hub import hf_hub_download

    store = ModelStore()
    out: dict[str, Any] = {"presets": {}, "models": {}}
    for preset in GUIDE_PRESETS:
        request = RunRequest(**preset.request_fields(dtype="float32"))
        prepared = prepare(request, store)
        trace = LiveRun(prepared).run()
        baseline = LiveRun(prepare(replace(request, method="baseline", params={}, assistant=None), store)).run()
        out["presets"][preset.name] = {
            "trace": trace.to_dict(), "baseline_ids": baseline.output_ids, "snippet": python_snippet(prepared),
            "cli": cli_command(resolved_request(prepared)), "rendered_prompt": prepared.rendered_prompt,
        }
    for repo in {m for p in GUIDE_PRESETS for m in p.models}:
        assert CATALOGUE[repo].source == "hub"
        loaded = store.get(repo, "float32")
        out["models"][repo] = {
            "config_path": hf_hub_download(repo, "config.json"),
            "name_or_path": loaded.model.config._name_or_path,
            "estimate": estimate_param_bytes(repo, "float32"), "param_bytes": loaded.param_bytes,
        }
    return out


def endpoint() -> dict[str, Any]:
    """Against the fake endpoint: the gated-model message, and the size estimate (and budget refusal) made
    from safetensors headers before anything is downloaded."""
    out: dict[str, Any] = {}
    try:
        load_model("meta-llama/Llama-3.1-8B")
        out["gated"] = "loaded"
    except ModelLoadError as exc:
        out["gated"] = str(exc)
    out["estimate"] = estimate_param_bytes("HuggingFaceTB/SmolLM-1.7B", "float32")
    try:
        ModelStore().get("HuggingFaceTB/SmolLM-1.7B", "float32")  # PLAYGROUND_MEMORY_BUDGET_GB applies
        out["budget"] = "loaded"
    except ModelLoadError as exc:
        out["budget"] = str(exc)
    return out


if __name__ == "__main__":
    mode, path = sys.argv[1], Path(sys.argv[2])
    path.write_text(json.dumps({"presets": presets, "endpoint": endpoint}[mode]()))
