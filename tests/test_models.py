"""Tests for the settings, the model catalogue/loader and the model store.

Tiny random Llama models built from configs stand in for real checkpoints; the two bundled
models are loaded for real (the Gemma conversion is cached in the default cache dir, so only
the first run on a machine pays its ~1 minute).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any

import huggingface_hub.constants
from huggingface_hub import errors as hub_errors
import pytest
import torch
from tokenizers import Tokenizer, models as tok_models, pre_tokenizers
from transformers import DistilBertConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from playground import models
from playground.errors import PlaygroundError
from playground.models import (
    CATALOGUE,
    DEFAULT_TARGET,
    DEFAULT_UNIVERSAL_ASSISTANT,
    ModelLoadError,
    ModelStore,
    converted_dir,
    describe_precision,
    ensure_converted,
    estimate_param_bytes,
    hub_reachable,
    load_model,
    resolve_dtype,
    resolve_precision,
    same_vocabulary,
)
from playground.precision import DTYPE_CHOICES, Precision, auto_reason, dtype_choices, precision_for
from playground.settings import SETTINGS_DOC, Settings, get_settings

pytestmark = pytest.mark.models  # its tests build or load models: the module stays out of the model-free tier

WORDS = ["<unk>", "<s>", "</s>", "the", "a", "cat", "dog", "sat", "on", "mat", "hello", "world"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from the defaults, whatever the developer's shell exports."""
    for name in list(os.environ):
        if name.startswith("PLAYGROUND_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("SPACE_ID", raising=False)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything opens a network connection."""
    def refuse(self: socket.socket, address: object) -> None:
        raise AssertionError(f"unexpected network connection to {address!r}")
    monkeypatch.setattr(socket.socket, "connect", refuse)


def make_tokenizer(words: list[str] = WORDS) -> PreTrainedTokenizerFast:
    backend = Tokenizer(tok_models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="</s>")


def make_tiny_model(directory: Path, *, layers: int = 2, pickle_only: bool = False) -> Path:
    """Save a random tiny Llama + tokenizer, like a real checkpoint directory."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(WORDS), hidden_size=32, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=2, intermediate_size=64,
                         bos_token_id=1, eos_token_id=2, pad_token_id=2)
    model = LlamaForCausalLM(config)
    if pickle_only:
        directory.mkdir(parents=True)
        config.save_pretrained(directory)
        torch.save(model.state_dict(), directory / "pytorch_model.bin")
    else:
        model.save_pretrained(directory)
    make_tokenizer().save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "llama")


@pytest.fixture(scope="session")
def tiny_dir_b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-b") / "llama", layers=3)


def gb(n_bytes: int) -> str:
    return repr(n_bytes / 1e9)


# --------------------------------------------------------------------------- settings


def test_settings_defaults() -> None:
    settings = get_settings()
    assert settings == Settings(
        cache_dir=Path("~/.cache/assisted-playground").expanduser(), public=False,
        trust_remote_code=False, allow_pickle=False, allowed_dirs=(), max_new_tokens=512,
        max_prompt_tokens=4096, memory_budget_gb=8.0, run_timeout_s=300.0, preload=True,
        concurrency=3, mcp=False)


def test_settings_public_by_default_inside_a_space(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPACE_ID", "someone/playground")
    assert get_settings().public is True
    monkeypatch.setenv("PLAYGROUND_PUBLIC", "off")
    assert get_settings().public is False


def test_settings_parsing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PLAYGROUND_PUBLIC", "YES")
    monkeypatch.setenv("PLAYGROUND_TRUST_REMOTE_CODE", "True")
    monkeypatch.setenv("PLAYGROUND_ALLOW_PICKLE", "1")
    monkeypatch.setenv("PLAYGROUND_ALLOWED_DIRS", os.pathsep.join(["/models", "/data/more"]))
    monkeypatch.setenv("PLAYGROUND_MAX_NEW_TOKENS", "64")
    monkeypatch.setenv("PLAYGROUND_MAX_PROMPT_TOKENS", "1024")
    monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET_GB", "2.5")
    monkeypatch.setenv("PLAYGROUND_RUN_TIMEOUT_S", "30")
    monkeypatch.setenv("PLAYGROUND_PRELOAD", "no")
    monkeypatch.setenv("PLAYGROUND_CONCURRENCY", "3")
    monkeypatch.setenv("PLAYGROUND_MCP", "on")
    monkeypatch.setenv("PLAYGROUND_TOP_K", "10")
    assert get_settings() == Settings(
        cache_dir=tmp_path, public=True, trust_remote_code=True, allow_pickle=True,
        allowed_dirs=(Path("/models"), Path("/data/more")), max_new_tokens=64,
        max_prompt_tokens=1024, memory_budget_gb=2.5, run_timeout_s=30.0, preload=False,
        concurrency=3, mcp=True, top_k=10, client_calls=2)  # public mode: the per-client bound is on


@pytest.mark.parametrize(("name", "value"), [
    ("PLAYGROUND_PUBLIC", "maybe"),
    ("PLAYGROUND_ALLOW_PICKLE", "2"),
    ("PLAYGROUND_MAX_NEW_TOKENS", "lots"),
    ("PLAYGROUND_MAX_PROMPT_TOKENS", "0"),
    ("PLAYGROUND_MEMORY_BUDGET_GB", "eight"),
    ("PLAYGROUND_RUN_TIMEOUT_S", "-1"),
    ("PLAYGROUND_CONCURRENCY", "1.5"),
    ("PLAYGROUND_TOP_K", "11"),
    ("PLAYGROUND_TOP_K", "-1"),
])
def test_settings_malformed_value_names_the_variable(monkeypatch: pytest.MonkeyPatch, name: str,
                                                      value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        get_settings()


def test_settings_doc_covers_every_setting() -> None:
    documented = {name.removeprefix("PLAYGROUND_").lower() for name, _, _ in SETTINGS_DOC}
    assert documented == set(Settings.__dataclass_fields__)
    assert all(default and meaning for _, default, meaning in SETTINGS_DOC)


# --------------------------------------------------------------------------- dtype


def _auto_here() -> str:
    """What `auto` picks on this CPU: bfloat16 only with native support and a kept measurement that found it faster
    (tests/test_precision_auto.py tests the rule itself)."""
    flags = models.hardware._cpu_bf16_flags()
    picked = auto_reason("cpu", flags, measured=models.kept_measurement() if flags else None)[0]
    assert picked is not None
    return picked


def test_resolve_dtype() -> None:
    auto = _auto_here()
    assert resolve_dtype("auto") == getattr(torch, auto)
    assert describe_precision().startswith(f"{auto}:")
    assert resolve_dtype("float32") == torch.float32
    assert resolve_dtype("bfloat16") == torch.bfloat16
    assert resolve_dtype("float16", "cpu") == torch.float16
    assert describe_precision("float32") == "float32: chosen explicitly"
    with pytest.raises(ValueError, match="unknown dtype .fp8."):  # a PlaygroundError
        resolve_dtype("fp8")


def test_precision_record_on_this_cpu() -> None:
    """`auto` follows this CPU's bfloat16 flags (AVX512-BF16 or AMX-BF16) and the measurement kept for it; the
    record is resolved once, frozen, and its sentence is the one `describe_precision` gives."""
    flags = models.hardware._cpu_bf16_flags()
    record = resolve_precision("auto", "cpu")
    if flags:
        measured = models.kept_measurement()
        assert record == precision_for("auto", "cpu", flags, measured=measured)
        assert record.reduced == (record.dtype == "bfloat16")
        assert (record.dtype == "bfloat16") == (measured is not None and measured.ratio >= 1.2)
    else:
        assert record == Precision("auto", "float32", "cpu",
                                   "float32: CPU has no native bfloat16 (AVX512-BF16 or AMX-BF16)")
        assert not record.reduced
    assert ("avx512_bf16" in Path("/proc/cpuinfo").read_text()) == ("AVX512-BF16" in flags)
    assert record.torch_dtype() == resolve_dtype("auto", "cpu")
    assert record.reason == describe_precision("auto", "cpu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.dtype = "float16"  # type: ignore[misc]


def test_precision_explicit_choices_and_unknown_ones() -> None:
    for choice in ("float32", "bfloat16", "float16"):
        record = resolve_precision(choice, "cpu")
        assert record == Precision(choice, choice, "cpu", f"{choice}: chosen explicitly")
        assert record.torch_dtype() == getattr(torch, choice)
    assert resolve_precision("float32", "cuda") == Precision("float32", "float32", "cuda", "float32: chosen explicitly")
    with pytest.raises(ValueError, match="unknown dtype 'fp8': use auto, float32, bfloat16, float16"):
        resolve_precision("fp8", "cpu")
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        precision_for("fp8", "cuda", gpu_bf16=True)


def test_precision_on_a_gpu_from_the_device_facts() -> None:
    """The rules for a GPU, as a pure function of what the device says (no GPU needed): never the CPU's words."""
    assert precision_for("auto", "cuda", gpu_bf16=True) == Precision("auto", "bfloat16", "cuda",
                                                                    "bfloat16: GPU supports bfloat16")
    assert precision_for("auto", "cuda:1", gpu_bf16=False) == Precision("auto", "float32", "cuda:1",
                                                                       "float32: GPU has no bfloat16 support")
    # CPU flags do not matter on a GPU
    assert precision_for("auto", "cuda", ("AVX512-BF16",), gpu_bf16=False).dtype == "float32"
    dtype, note = auto_reason("cuda")  # a ZeroGPU Space's page: the GPU is attached per run, not known yet
    assert dtype is None and "GPU" in note and "CPU" not in note
    with pytest.raises(ValueError, match="bfloat16 support is unknown"):
        precision_for("auto", "cuda")
    assert precision_for("auto", "mps") == Precision("auto", "float32", "mps",
                                                     "float32: no bfloat16 check for device 'mps'")


def test_the_page_describes_this_hosts_device() -> None:
    """On this CPU-only host the page's note is the CPU's; its precision choices leave out float16 (refused on CPU)
    and on a GPU include every choice."""
    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("a host with an NVIDIA driver")
    assert models.host_device() == "cpu"
    assert models.host_precision_note() == describe_precision("auto", "cpu")
    assert dtype_choices("cpu") == ("auto", "float32", "bfloat16")
    assert dtype_choices("cuda") == DTYPE_CHOICES == ("auto", "float32", "bfloat16", "float16")
    from playground.app import links, run_request

    assert run_request.DTYPES == dtype_choices("cpu") and links.DTYPES is run_request.DTYPES


# --------------------------------------------------------------------------- catalogue


def test_catalogue() -> None:
    assert CATALOGUE[DEFAULT_TARGET].source == "bundled"
    assert CATALOGUE[DEFAULT_UNIVERSAL_ASSISTANT].source == "bundled"
    for key, entry in CATALOGUE.items():
        assert entry.key == key
        assert (entry.gguf is not None or entry.derived is not None) == (entry.source == "bundled")
        if entry.source == "hub":
            assert entry.hub_id == key and models.HUB_ID_RE.match(key)
        assert all(assistant in CATALOGUE for assistant in entry.suggested_assistants)
    assert CATALOGUE["meta-llama/Llama-3.1-8B"].suggested_assistants == ("meta-llama/Llama-3.2-1B",)


# --------------------------------------------------------------------------- loading


def test_loads_at_once_in_two_threads_each_build_their_own_dtype(tmp_path: Path) -> None:
    """A visitor's float32 load beside the start-up load's bfloat16 (or two visitors' models) in one process:
    Transformers builds each model under process-wide switches (torch's default dtype, `no_tie_weights`), so two
    builds at once came out with layers of both dtypes and an untied, random lm_head (every pair, 20 of 20, on the
    old code; a run then failed "expected m1 and m2 to have the same dtype"). The builds take turns
    (`transformers_once.MODEL_BUILDS`)."""
    from tiny import build_tokenizer, save_tiny_gemma3

    path = save_tiny_gemma3(tmp_path / "gemma3", seed=0, tokenizer=build_tokenizer())  # lm_head tied to the embedding
    found = []
    for _ in range(3):
        loaded: dict[str, Any] = {}
        both = threading.Barrier(2)

        def load(dtype: str) -> None:
            both.wait()
            loaded[dtype] = load_model(str(path), dtype)

        threads = [threading.Thread(target=load, args=(dtype,)) for dtype in ("float32", "bfloat16")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for dtype, model in sorted(loaded.items()):
            dtypes = sorted({str(p.dtype) for p in model.model.parameters()})
            tied = model.model.lm_head.weight is model.model.model.embed_tokens.weight
            found.append((dtype, dtypes, tied))
    assert found == [("bfloat16", ["torch.bfloat16"], True), ("float32", ["torch.float32"], True)] * 3


def test_load_local_dir(tiny_dir: Path) -> None:
    messages: list[str] = []
    loaded = load_model(str(tiny_dir), dtype="float32", progress=messages.append)
    assert loaded.name == str(tiny_dir)
    assert loaded.source == "local"
    assert loaded.dtype == torch.float32 and loaded.device == "cpu"
    assert loaded.num_layers == 2
    assert loaded.has_chat_template is False
    assert not loaded.model.training
    assert loaded.param_bytes == sum(p.numel() * 4 for p in loaded.model.parameters())
    assert estimate_param_bytes(str(tiny_dir), "float32") == loaded.param_bytes
    assert estimate_param_bytes(str(tiny_dir), "bfloat16") == loaded.param_bytes // 2
    assert any(m.startswith("Loaded") for m in messages)
    inputs = loaded.tokenizer("the cat sat", return_tensors="pt")
    out = loaded.model.generate(**inputs, max_new_tokens=3, min_new_tokens=3, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 3


def test_store_reuses_loaded_model(tiny_dir: Path) -> None:
    store = ModelStore()
    first = store.get(str(tiny_dir), "float32")
    assert store.get(str(tiny_dir), "float32") is first
    assert store.get(str(tiny_dir), "bfloat16") is not first  # a different dtype is another model
    assert store.loaded() == [str(tiny_dir)]


def test_store_loads_once_for_concurrent_callers(tiny_dir: Path) -> None:
    store = ModelStore()
    loads: list[str] = []
    barrier = threading.Barrier(4)
    results: list[models.LoadedModel] = []

    def worker() -> None:
        barrier.wait()
        results.append(store.get(str(tiny_dir), "float32",
                                 progress=lambda m: loads.append(m) if m.startswith("Loaded") else None))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 and all(r is results[0] for r in results)
    assert len(loads) == 1


def test_store_evicts_least_recently_used(monkeypatch: pytest.MonkeyPatch, tiny_dir: Path,
                                          tiny_dir_b: Path) -> None:
    size_b = estimate_param_bytes(str(tiny_dir_b), "float32")
    assert size_b is not None
    monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET_GB", gb(int(size_b * 1.5)))  # room for one
    store = ModelStore()
    a = store.get(str(tiny_dir), "float32")
    b = store.get(str(tiny_dir_b), "float32")
    assert store.loaded() == [str(tiny_dir_b)]
    assert store.used_bytes() == b.param_bytes
    assert store.get(str(tiny_dir), "float32") is not a  # reloaded after eviction
    assert store.loaded() == [str(tiny_dir)]


def test_store_keeps_models_that_are_generating(monkeypatch: pytest.MonkeyPatch, tiny_dir: Path,
                                                tiny_dir_b: Path) -> None:
    size_b = estimate_param_bytes(str(tiny_dir_b), "float32")
    assert size_b is not None
    monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET_GB", gb(int(size_b * 1.5)))
    store = ModelStore()
    a = store.get(str(tiny_dir), "float32")
    with a.lock:
        with pytest.raises(ModelLoadError, match="can be freed while other models are generating"):
            store.get(str(tiny_dir_b), "float32")
    assert store.loaded() == [str(tiny_dir)]


def test_store_refuses_model_larger_than_budget(monkeypatch: pytest.MonkeyPatch,
                                                tiny_dir: Path) -> None:
    size = estimate_param_bytes(str(tiny_dir), "float32")
    assert size is not None
    monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET_GB", gb(size // 2))
    messages: list[str] = []
    with pytest.raises(ModelLoadError) as refused:
        ModelStore().get(str(tiny_dir), "float32", progress=messages.append)
    # A tiny model in MB with its real size (not "0.00 GB"), the budget it exceeds, the setting to change.
    shown = re.search(r"needs ([\d.]+) MB, budget is ([\d.]+) MB \(PLAYGROUND_MEMORY_BUDGET_GB\)", str(refused.value))
    assert shown, str(refused.value)
    assert float(shown[1]) == round(size / 1e6, 2) and 0 < float(shown[2]) < float(shown[1])
    assert messages == []  # refused from the safetensors headers, before loading


def test_store_copy_evict_clear(tiny_dir: Path) -> None:
    store = ModelStore()
    base = store.get(str(tiny_dir), "float32")
    copy = store.get_copy(str(tiny_dir), "float32", purpose="assistant")
    assert copy is not base and copy.model is not base.model and copy.tokenizer is not base.tokenizer
    assert copy.lock is not base.lock
    assert store.get_copy(str(tiny_dir), "float32", purpose="assistant") is copy
    for p_base, p_copy in zip(base.model.parameters(), copy.model.parameters()):
        assert torch.equal(p_base, p_copy) and p_base.data_ptr() != p_copy.data_ptr()
    assert store.used_bytes() == 2 * base.param_bytes
    store.evict(str(tiny_dir))
    assert store.loaded() == []
    store.get(str(tiny_dir), "float32")
    store.clear()
    assert store.loaded() == [] and store.used_bytes() == 0


def test_pickle_only_dir_refused_unless_allowed(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    directory = make_tiny_model(tmp_path / "pickled", pickle_only=True)
    with pytest.raises(ModelLoadError, match="PLAYGROUND_ALLOW_PICKLE"):
        load_model(str(directory), "float32")
    monkeypatch.setenv("PLAYGROUND_ALLOW_PICKLE", "1")
    assert load_model(str(directory), "float32").num_layers == 2


def test_public_mode_restricts_local_paths(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                           tiny_dir: Path) -> None:
    allowed = tmp_path / "allowed"
    inside = make_tiny_model(allowed / "model")
    (allowed / "escape").symlink_to(tiny_dir, target_is_directory=True)
    monkeypatch.setenv("PLAYGROUND_PUBLIC", "1")
    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PLAYGROUND_ALLOWED_DIRS", str(allowed))
    for refused in (tiny_dir, allowed / "escape", allowed / ".." / ".." / "nowhere"):
        with pytest.raises(ModelLoadError, match="disabled in public mode"):
            load_model(str(refused), "float32")
    assert load_model(str(inside), "float32").source == "local"
    monkeypatch.setenv("PLAYGROUND_PUBLIC", "0")
    assert load_model(str(allowed / "escape"), "float32").source == "local"


def test_public_mode_allows_the_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    inside = make_tiny_model(tmp_path / "cache" / "converted" / "mine")
    monkeypatch.setenv("PLAYGROUND_PUBLIC", "1")
    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path / "cache"))
    assert load_model(str(inside), "float32").source == "local"


@pytest.mark.parametrize("spec", [
    "owner/na me", "owner/name?x=1", "-owner/name", "owner/.hidden", "own..er/name",
    "owner/name..", "owner/", "owner/na\tme",
])
def test_bad_hub_ids_are_rejected_before_any_network(no_network: None, spec: str) -> None:
    with pytest.raises(ModelLoadError, match="invalid Hub model id"):
        load_model(spec)


@pytest.mark.parametrize(("spec", "message"), [
    ("bundled/nope", "unknown bundled model 'bundled/nope'"),
    ("gpt2", "not a catalogue key, a Hub id"),
    ("", "no model given"),
])
def test_unknown_specs(no_network: None, spec: str, message: str) -> None:
    with pytest.raises(ModelLoadError, match=message):
        load_model(spec)


def test_local_dir_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="no such directory"):
        load_model(str(tmp_path / "missing"))
    (tmp_path / "file.txt").write_text("hi")
    with pytest.raises(ModelLoadError, match="not a directory"):
        load_model(str(tmp_path / "file.txt"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="has no config.json: not a Transformers model"):
        load_model(str(tmp_path / "empty"))
    DistilBertConfig(vocab_size=10, dim=8, n_layers=1, n_heads=1,
                     hidden_dim=8).save_pretrained(tmp_path / "encoder")
    with pytest.raises(ModelLoadError, match="'distilbert' model, not a causal language model"):
        load_model(str(tmp_path / "encoder"))
    LlamaConfig().save_pretrained(tmp_path / "no-weights")
    with pytest.raises(ModelLoadError, match="no model weights"):
        load_model(str(tmp_path / "no-weights"))
    (tmp_path / "custom").mkdir()
    (tmp_path / "custom" / "config.json").write_text(json.dumps({"model_type": "mystery", "auto_map": {
        "AutoConfig": "configuration_mystery.MysteryConfig",
        "AutoModelForCausalLM": "modeling_mystery.MysteryForCausalLM"}}))
    with pytest.raises(ModelLoadError, match="PLAYGROUND_TRUST_REMOTE_CODE=1"):
        load_model(str(tmp_path / "custom"))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    (tmp_path / "broken" / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelLoadError) as error:
        load_model(str(tmp_path / "broken"))
    assert "\n" not in str(error.value) and "Traceback" not in str(error.value)


def test_the_hub_probe_forgets_its_answer_after_a_while() -> None:
    """A Space whose network comes back offers the Hub again: the probe's answer expires (a fake clock moves
    time; the probes are real HEAD requests to a local server that is down, then up)."""
    import http.server

    now = [1000.0]
    probe = models.HubProbe(clock=lambda: now[0], ttl_reachable_s=600.0, ttl_unreachable_s=60.0)
    with socket.socket() as s:  # a free port, nothing listening on it yet
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    assert probe.reachable(endpoint, 2.0) is False  # connection refused: down
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert probe.reachable(endpoint, 2.0) is False  # the network is back, but the answer is kept a minute
        now[0] += 59.0
        assert probe.reachable(endpoint, 2.0) is False
        now[0] += 2.0
        assert probe.reachable(endpoint, 2.0) is True  # expired: probed again
        server.shutdown()
        server.server_close()
        now[0] += 599.0
        assert probe.reachable(endpoint, 2.0) is True  # a positive answer is kept longer
        now[0] += 2.0
        assert probe.reachable(endpoint, 2.0) is False
    finally:
        server.shutdown()
        server.server_close()


def test_hub_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_reachable() is False
    # The Hub library reads HF_HUB_OFFLINE at import; flip its switch for the load itself.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelLoadError, match=r"could not reach the Hugging Face Hub \(offline\?\)"):
        load_model("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert estimate_param_bytes("someone/unknown-model") is None


def test_hub_errors_become_one_line_messages() -> None:
    httpx2 = pytest.importorskip("httpx2")  # the HTTP client of huggingface_hub 2.x
    response = httpx2.Response(404, request=httpx2.Request("GET", "https://huggingface.co/x/y"))
    source = models.sources._Source("hub", hub_id="x/y")
    cases = [
        (hub_errors.RepositoryNotFoundError("404", response=response), "no such model on the Hugging Face Hub: x/y"),
        (hub_errors.GatedRepoError("403", response=response), "x/y is gated on the Hugging Face Hub"),
        (hub_errors.LocalEntryNotFoundError("no cache"), "could not reach the Hugging Face Hub (offline?)"),
        (socket.gaierror(-2, "Name or service not known"), "could not reach the Hugging Face Hub (offline?)"),
    ]
    for cause, expected in cases:
        wrapped = OSError("x/y is not a local folder\nand more lines")
        wrapped.__cause__ = cause
        message = str(models.sources._load_error("x/y", wrapped, source, get_settings()))
        assert expected in message and "\n" not in message
    error = ModelLoadError("a message")
    assert isinstance(error, PlaygroundError)


def test_same_vocabulary() -> None:
    assert same_vocabulary(make_tokenizer(), make_tokenizer())
    swapped = WORDS[:3] + [WORDS[4], WORDS[3]] + WORDS[5:]  # same size, same words, other ids
    assert not same_vocabulary(make_tokenizer(), make_tokenizer(swapped))
    assert not same_vocabulary(make_tokenizer(), make_tokenizer(WORDS[:-1] + ["other"]))


def test_conversion_is_atomic(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A conversion that dies half way leaves nothing; a finished one is reused, not redone."""
    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path))
    entry = CATALOGUE[DEFAULT_TARGET]
    assert entry.gguf is not None
    calls: list[str] = []

    def crash(entry: models.ModelEntry, gguf: models.GgufSource, work: Path, report: object) -> None:
        calls.append("crash")
        (work / "out").mkdir()
        (work / "out" / "model.safetensors").write_bytes(b"half")
        raise OSError("No space left on device")

    def finish(entry: models.ModelEntry, gguf: models.GgufSource, work: Path, report: object) -> None:
        calls.append("finish")
        (work / "out").mkdir()
        (work / "out" / models.cache._MARKER).write_text(json.dumps(
            {"format": models.cache._CONVERSION_FORMAT, "gguf_sha256": gguf.sha256}))

    monkeypatch.setattr(models.gguf_convert, "_convert", crash)
    with pytest.raises(ModelLoadError, match="could not convert bundled/gemma-3-270m: No space left"):
        ensure_converted(entry)
    # Nothing but the lock files' folder (`.locks`, kept: removing a lock file races with its next holder).
    assert [p.name for p in (tmp_path / "converted").iterdir()] == [".locks"]
    monkeypatch.setattr(models.gguf_convert, "_convert", finish)
    assert ensure_converted(entry) == converted_dir(entry.key) == tmp_path / "converted" / "bundled--gemma-3-270m"
    assert ensure_converted(entry) == converted_dir(entry.key)
    assert calls == ["crash", "finish"]
    assert sorted(p.name for p in (tmp_path / "converted").iterdir()) == [".locks", "bundled--gemma-3-270m"]


def test_gguf_conversion_bar_obeys_the_progress_bar_switch(capsys: pytest.CaptureFixture[str]) -> None:
    """Transformers' GGUF loader calls tqdm directly; with progress bars off (the CLI's --quiet) it stays quiet."""
    from tqdm.auto import tqdm
    from transformers import modeling_gguf_pytorch_utils as gguf_loader
    from transformers.utils import logging as hf_logging

    def loader_bar() -> str:
        list(gguf_loader.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."))
        return capsys.readouterr().err

    was_enabled = hf_logging.is_progress_bar_enabled()
    try:
        hf_logging.disable_progress_bar()
        with models.gguf_bar_follows_transformers_switch():
            assert "de-quantizing" not in loader_bar()
        assert gguf_loader.tqdm is tqdm
        assert "de-quantizing" in loader_bar()  # the switch covers the conversion only
        hf_logging.enable_progress_bar()
        with models.gguf_bar_follows_transformers_switch():
            assert "de-quantizing" in loader_bar()  # bars on: the conversion shows its progress as before
    finally:
        (hf_logging.enable_progress_bar if was_enabled else hf_logging.disable_progress_bar)()
    assert gguf_loader.tqdm is tqdm


# --------------------------------------------------------------------------- bundled models


@pytest.fixture(scope="module")
def gemma() -> models.LoadedModel:
    """The default target, converted into the default cache dir (shared across test runs)."""
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("PLAYGROUND_")]:
            patch.delenv(name)
        return load_model(DEFAULT_TARGET, dtype="auto")


@pytest.mark.bundled
@pytest.mark.slow
def test_bundled_gemma(gemma: models.LoadedModel) -> None:
    assert gemma.source == "bundled" and gemma.num_layers == 18
    assert gemma.dtype == resolve_dtype("auto")
    marker = json.loads((converted_dir(DEFAULT_TARGET) / "playground.json").read_text())
    assert marker["key"] == DEFAULT_TARGET and marker["versions"]["transformers"]
    config = json.loads((converted_dir(DEFAULT_TARGET) / "config.json").read_text())
    assert "quantization_config" not in config

    inputs = gemma.tokenizer("The capital of France is", return_tensors="pt")
    with torch.inference_mode():
        out = gemma.model.generate(**inputs, max_new_tokens=5, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 5
    assert gemma.tokenizer.decode(out[0, inputs["input_ids"].shape[1]:]).strip()

    messages: list[str] = []
    started = time.perf_counter()
    again = load_model(DEFAULT_TARGET, dtype="auto", progress=messages.append)
    assert not any("Convert" in m for m in messages), messages  # read from the cache
    assert time.perf_counter() - started < 60  # ~3 s on an idle 2-core machine; a cold conversion is ~1 min
    for p_first, p_again in zip(gemma.model.parameters(), again.model.parameters()):
        assert torch.equal(p_first, p_again)


@pytest.mark.bundled
def test_bundled_smollm2_has_another_vocabulary(gemma: models.LoadedModel) -> None:
    smol = load_model(DEFAULT_UNIVERSAL_ASSISTANT, dtype="auto")
    assert smol.source == "bundled" and smol.has_chat_template and smol.num_layers == 30
    assert not same_vocabulary(smol.tokenizer, gemma.tokenizer)
    assert same_vocabulary(smol.tokenizer, smol.tokenizer)
    assert (converted_dir(DEFAULT_UNIVERSAL_ASSISTANT) / "playground.json").is_file()
    prompt = smol.tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}],
                                                add_generation_prompt=True, return_tensors="pt",
                                                return_dict=True)
    with torch.inference_mode():
        out = smol.model.generate(**prompt, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == prompt["input_ids"].shape[1] + 4
