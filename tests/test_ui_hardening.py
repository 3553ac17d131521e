"""Hardening through the real server: bad input, security defaults, limits, many visitors, leaving mid-run.

One `python app.py` serves the whole module, configured like a public Space on a small machine:
public mode with one allowed model directory, caps on new tokens and prompt length, a small memory
budget, a run time limit, two generations at once (PLAYGROUND_CONCURRENCY=2; the default is 3, see
`test_queue_concurrency_default_fits_two_cores`), no preload (tiny models on disk keep it fast) and a
stand-in Hugging Face Hub on a local port (the real Hub is unreachable here), which answers 404
RepoNotFound like the real one and drops the connection for one organisation (the Hub unreachable).

Everything goes through the `generate` API endpoint with gradio_client, the way a visitor's browser
or script reaches it; Stop goes through the same HTTP call the page makes. Whether the server's
generation worker is gone is read from the operating system: the engine names its worker's OS thread
`pg-generate` (threads it starts inherit the name), so /proc/<pid>/task/*/comm shows it without any
endpoint. The CLI path of every bad-input row is in tests/test_cli.py (BAD_INPUT); docs/bad-input.md's
table lists both. Tests assert behaviour, never timings.
"""

from __future__ import annotations

import contextlib
import html
import http.server
import json
import os
import pickle
import re
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

from playground.engine import WORKER_OS_THREAD_NAME
from playground.trace import Trace, check_invariants
from appserver import LOCAL_TLS, free_port, start_app, stop_app
from tiny import build_other_tokenizer, build_tokenizer, llama_config, save_tiny_llama

gradio_client = pytest.importorskip("gradio_client")
httpx = pytest.importorskip("httpx")

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"
WAIT_S = 120  # upper bound for anything we wait for; a hang fails instead of blocking the suite

MAX_NEW_TOKENS = 100_000  # the server's cap (PLAYGROUND_MAX_NEW_TOKENS): long runs for Stop tests fit
MAX_PROMPT_TOKENS = 1000  # above the tiny models' context (512), so both limits can be hit
BUDGET_GB = 0.01  # tiny models (< 1 MB) fit, the "big" one (~15 MB in bfloat16) does not
RUN_TIMEOUT_S = 20  # every other run here takes a few seconds at most
SHORT_RUN_TIMEOUT_S = 4  # the time-limit test's own server: a long run meets it after a few seconds of computing
UNREACHABLE_ORG = "HuggingFaceTB"  # the stand-in Hub drops connections for this organisation

PROMPT = "One, two, three, four, five. One, two,"


# --------------------------------------------------------------------------- models on disk


def _save_long(path: Path, seed: int) -> Path:
    """A tiny Llama with no end-of-text token and a huge context: it generates until told to stop."""
    tok = build_tokenizer()
    config = llama_config(tok)
    config.max_position_embeddings = 1 << 20
    config.eos_token_id = None
    torch.manual_seed(seed)
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _save_big(path: Path) -> Path:
    """A real (random) Llama of ~7.7 M parameters: more than BUDGET_GB in any precision."""
    from transformers import LlamaForCausalLM

    tok = build_tokenizer()
    config = llama_config(tok, layers=1, hidden=768)
    config.intermediate_size = 3 * 768
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


class _RunsCode:
    """Unpickling this touches a marker file: proof that a pickle checkpoint was (or was not) loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, tiny_models: dict[str, str]) -> dict[str, str]:
    """Checkpoints under one allowed directory (public mode), plus paths that must stay out of reach."""
    root = tmp_path_factory.mktemp("allowed")
    outside = tmp_path_factory.mktemp("outside")
    tok = build_tokenizer()
    paths = {
        "target": save_tiny_llama(root / "target", seed=0, tokenizer=tok),
        "noisy": save_tiny_llama(root / "noisy", seed=1, tokenizer=tok, perturb_from=root / "target", noise=0.3),
        "foreign": save_tiny_llama(root / "foreign", seed=3, layers=2, hidden=32, tokenizer=build_other_tokenizer()),
        "long": _save_long(root / "long", seed=5),
        "long2": _save_long(root / "long2", seed=6),
        "big": _save_big(root / "big"),
    }
    not_a_model = root / "not-a-model"
    not_a_model.mkdir()
    (not_a_model / "notes.txt").write_text("hello")
    # Pickle-only checkpoint: a valid config, weights only as pytorch_model.bin (whose unpickling runs code).
    pickled = root / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((root / "target" / "config.json").read_text())
    (pickled / "pytorch_model.bin").write_bytes(pickle.dumps(_RunsCode(outside / "PICKLE_RAN")))
    # Custom-code checkpoint: loading it needs trust_remote_code; importing its code touches a marker.
    custom = root / "custom"
    custom.mkdir()
    (custom / "config.json").write_text(json.dumps({
        "model_type": "playground-custom", "architectures": ["CustomForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_custom.CustomConfig",
                     "AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"},
    }))
    code = (f"from pathlib import Path\nPath({str(outside / 'CODE_RAN')!r}).touch()\n"
            "from transformers import PretrainedConfig\n\n\nclass CustomConfig(PretrainedConfig):\n"
            "    model_type = 'playground-custom'\n")
    (custom / "configuration_custom.py").write_text(code)
    (custom / "modeling_custom.py").write_text(code)
    # A link inside the allowed directory to a model outside it.
    (root / "escape").symlink_to(tiny_models["other"], target_is_directory=True)
    return {
        **{name: str(path) for name, path in paths.items()},
        "root": str(root), "outside": str(outside), "not_a_model": str(not_a_model), "pickled": str(pickled),
        "custom": str(custom), "escape": str(root / "escape"), "missing": str(root / "no-such-model"),
        "outside_model": tiny_models["other"],
    }


# --------------------------------------------------------------------------- a stand-in Hub


class _HubHandler(http.server.BaseHTTPRequestHandler):
    """Answers like the Hub for a repository that does not exist; drops the connection for UNREACHABLE_ORG."""

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, body: bool) -> None:
        if UNREACHABLE_ORG in self.path:
            self.close_connection = True  # no response at all: what a dead network looks like to the client
            return
        if self.path.rstrip("/") == "":
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = b'{"error": "Repository Not Found"}'
        self.send_response(404)
        self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("X-Error-Message", "Repository not found")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._answer(True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(False)


@pytest.fixture(scope="module")
def hub() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HubHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# --------------------------------------------------------------------------- the server


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    log: Path
    fn_index: dict[str, int]  # handler name -> fn_index, for the calls the page makes (Stop, upload)
    queued: dict[str, bool]  # handler name -> whether the page sends it through the queue

    def worker_threads(self) -> int:
        """OS threads of the server named like the generation worker (it and the threads it started)."""
        count = 0
        for comm in Path(f"/proc/{self.proc.pid}/task").glob("*/comm"):
            try:
                count += comm.read_text().strip() == WORKER_OS_THREAD_NAME
            except OSError:  # the thread ended while we looked
                pass
        return count

    def wait_no_worker(self) -> int:
        """Worker threads left once the run has had time to wind down (0 unless something leaked).

        Stopping takes one step (milliseconds here); the wait ends well before the run time limit,
        which would otherwise end a leaked worker itself and hide the leak.
        """
        deadline = time.monotonic() + RUN_TIMEOUT_S / 2
        while (n := self.worker_threads()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return n

    def press_stop(self, session_hash: str) -> None:
        """What the page's Stop button sends (a private endpoint: not callable through gradio_client)."""
        response = httpx.post(f"{self.url}gradio_api/run/predict", timeout=30, json={
            "data": [], "fn_index": self.fn_index["stop"], "session_hash": session_hash, "event_data": None,
            "trigger_id": None}, verify=LOCAL_TLS)
        assert response.status_code == 200, response.text

    def upload(self, name: str, content: bytes) -> dict[str, Any] | int:
        """Upload a file as the page does; its FileData, or the HTTP status when refused."""
        response = httpx.post(f"{self.url}gradio_api/upload", files={"files": (name, content)}, timeout=60,
                              verify=LOCAL_TLS)
        if response.status_code != 200:
            return response.status_code
        (path,) = response.json()
        return {"path": path, "orig_name": name, "meta": {"_type": "gradio.FileData"}}

    def call_page_handler(self, name: str, data: list[Any]) -> list[Any]:
        """Call a handler the way the page does (through the queue or not), in a fresh session."""
        session = uuid.uuid4().hex[:11]
        body = {"data": data, "fn_index": self.fn_index[name], "session_hash": session, "event_data": None,
                "trigger_id": None}
        if not self.queued[name]:
            response = httpx.post(f"{self.url}gradio_api/run/predict", json=body, timeout=WAIT_S, verify=LOCAL_TLS)
            assert response.status_code == 200, response.text
            return response.json()["data"]
        response = httpx.post(f"{self.url}gradio_api/queue/join", json=body, timeout=30, verify=LOCAL_TLS)
        assert response.status_code == 200, response.text
        with httpx.stream("GET", f"{self.url}gradio_api/queue/data", params={"session_hash": session},
                          timeout=WAIT_S, verify=LOCAL_TLS) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:") and '"process_completed"' in line:
                    message = json.loads(line[5:])
                    assert message["success"], message
                    return message["output"]["data"]
        raise AssertionError(f"{name} never completed")

    def trace(self, outputs: tuple[Any, ...]) -> Trace:
        """Download the run's trace the way the page's download button does."""
        update = outputs[5]
        assert isinstance(update, dict) and update.get("visible") and update.get("value"), update
        value = update["value"]  # the file's description (gradio_client leaves downloading to us)
        url = value["url"] if isinstance(value, dict) else f"{self.url}gradio_api/file={value}"
        response = httpx.get(url, timeout=30, verify=LOCAL_TLS)
        assert response.status_code == 200, response.text
        return Trace.from_json(response.content)


@contextlib.contextmanager
def _serving(models: dict[str, str], hub: str, tmp_path_factory: pytest.TempPathFactory, log_name: str,
             run_timeout_s: float) -> Iterator[Server]:
    ARTIFACTS.mkdir(exist_ok=True)
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PLAYGROUND_", "HF_", "GRADIO_"))}
    extra = {
        "HF_ENDPOINT": hub, "HF_HOME": str(tmp_path_factory.mktemp("hf-home")),
        "PLAYGROUND_PRELOAD": "0", "PLAYGROUND_PUBLIC": "1", "PLAYGROUND_ALLOWED_DIRS": models["root"],
        "PLAYGROUND_CONCURRENCY": "2", "PLAYGROUND_MAX_NEW_TOKENS": str(MAX_NEW_TOKENS),
        "PLAYGROUND_MAX_PROMPT_TOKENS": str(MAX_PROMPT_TOKENS), "PLAYGROUND_MEMORY_BUDGET_GB": str(BUDGET_GB),
        "PLAYGROUND_RUN_TIMEOUT_S": str(run_timeout_s),
    }
    log = ARTIFACTS / log_name
    proc = start_app(port, log, extra, base_env=base)
    try:
        url = f"http://127.0.0.1:{port}/"
        config = httpx.get(f"{url}config", timeout=30, verify=LOCAL_TLS).json()
        named = [d for d in config["dependencies"] if d.get("api_name")]
        yield Server(url=url, proc=proc, log=log, fn_index={d["api_name"]: d["id"] for d in named},
                     queued={d["api_name"]: d.get("queue") is not False for d in named})
    finally:
        stop_app(proc)


@pytest.fixture(scope="module")
def server(models: dict[str, str], hub: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with _serving(models, hub, tmp_path_factory, "hardening-server.log", RUN_TIMEOUT_S) as served:
        yield served


def new_client(server: Server) -> Any:
    return gradio_client.Client(server.url, verbose=False, download_files=False, analytics_enabled=False)


@pytest.fixture(scope="module")
def client(server: Server) -> Any:
    return new_client(server)


def request(**kw: Any) -> dict[str, Any]:
    """The `generate` endpoint's arguments, with defaults for a short greedy float32 run."""
    args: dict[str, Any] = {"prompt": PROMPT, "target": None, "assistant": None, "method": "baseline", "params": {},
            "max_new_tokens": 8, "sample": False, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "seed": 0,
            "chat": "auto", "dtype": "float32", "check_plain": False, "preset": None}
    args.update(kw)
    return args


def status(outputs: tuple[Any, ...]) -> tuple[str, str]:
    """(kind, plain text) of the status box: kind is done / error / running / idle."""
    box = outputs[4]
    kind = re.search(r'data-kind="(\w+)"', box)
    text = html.unescape(re.sub(r"<[^>]+>", "", box))
    return (kind.group(1) if kind else "?"), text


def normal_run(client: Any, server: Server, models: dict[str, str]) -> list[int]:
    """A short greedy run that must work; its output ids (from the downloaded trace)."""
    outputs = client.predict(**request(target=models["target"]), api_name="/generate")
    kind, text = status(outputs)
    assert kind == "done" and "Done: 8 tokens" in text, text
    assert 'class="tok' in outputs[0]
    return server.trace(outputs).output_ids


def _wait_streaming(job: Any, what: str = 'class="tok') -> None:
    """Until the job's latest streamed output shows tokens (the run is generating)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        outputs = job.outputs()
        if outputs and what in str(outputs[-1][0]):
            return
        assert not job.done(), f"the run ended before it streamed: {job.outputs()[-1:]}"
        time.sleep(0.05)
    raise AssertionError("no streamed tokens")


# --------------------------------------------------------------------------- bad input: every row

# (row, arguments of the generate endpoint with {placeholders} for paths, fragment of the message)
BAD_INPUT: list[tuple[str, dict[str, Any], str]] = [
    ("empty prompt", {"prompt": ""}, "the prompt is empty"),
    ("whitespace prompt", {"prompt": " \n\t "}, "the prompt is empty"),
    ("prompt longer than the model's context", {"prompt": "one two three " * 100},
     "exceed the model's context (at most 512)"),
    ("prompt over the configured cap", {"prompt": "one two three " * 200},
     f"the limit is {MAX_PROMPT_TOKENS} (PLAYGROUND_MAX_PROMPT_TOKENS)"),
    ("unknown Hub id", {"target": "nobody-here/no-such-model"},
     "no such model on the Hugging Face Hub: nobody-here/no-such-model"),
    ("Hub unreachable", {"target": f"{UNREACHABLE_ORG}/SmolLM2-360M-Instruct"},
     "could not reach the Hugging Face Hub (offline?)"),
    ("malformed model name", {"target": "not a model"}, "is not a catalogue key, a Hub id (owner/name) or a local directory"),
    ("unknown bundled model", {"target": "bundled/nope"}, "unknown bundled model 'bundled/nope'"),
    ("missing local directory", {"target": "{missing}"}, "no such directory: {missing}"),
    ("directory that is not a model", {"target": "{not_a_model}"}, "has no config.json: not a Transformers model directory"),
    ("public mode: path outside the allowed dirs", {"target": "{outside_model}"},
     "local model paths are disabled in public mode"),
    ("public mode: path escaping with ..", {"target": "{root}/../../etc"}, "local model paths are disabled in public mode"),
    ("public mode: symlink out of an allowed dir", {"target": "{escape}"}, "local model paths are disabled in public mode"),
    ("pickle-only checkpoint", {"target": "{pickled}"}, "PLAYGROUND_ALLOW_PICKLE=1"),
    ("model with custom code", {"target": "{custom}"}, "custom model code needs PLAYGROUND_TRUST_REMOTE_CODE=1"),
    ("method needing an assistant, none given", {"method": "speculative"}, "needs an assistant model"),
    ("assistant with a different tokenizer under speculative",
     {"method": "speculative", "assistant": "{foreign}"}, "universal"),
    ("use_mtp on a model without MTP layers", {"method": "mtp"}, "no multi-token-prediction layers"),
    ("early-exit layer out of range", {"method": "early_exit", "params": {"assistant_early_exit": 9}}, "between 1 and 3"),
    ("ensemble weight outside (0, 1)",
     {"method": "speculative", "assistant": "{target}", "params": {"assistant_ensemble_weight": 1.5}},
     "between 0.05 and 1"),
    ("ensemble weight without draft logits",
     {"method": "universal", "assistant": "{foreign}", "params": {"assistant_ensemble_weight": 0.5}},
     "needs draft logits"),
    ("unknown method parameter", {"method": "prompt_lookup", "params": {"speed": 11}}, "has no parameter 'speed'"),
    ("params that are not a JSON object", {"method": "prompt_lookup", "params": "speed=11"}, "params must be a JSON object"),
    ("parameter of the wrong type", {"method": "prompt_lookup", "params": {"prompt_lookup_num_tokens": "many"}},
     "prompt_lookup_num_tokens"),
    ("model too large for the memory budget", {"target": "{big}"}, "(PLAYGROUND_MEMORY_BUDGET_GB)"),
    ("chat template on a model without one", {"target": "{foreign}", "chat": "on"}, "has no chat template"),
    # Values the page's menus and sliders cannot send: the endpoint passes them on as sent (no Gradio
    # preprocessing), so they get the engine's messages rather than Gradio's generic refusal.
    ("unknown method", {"method": "telepathy"}, "unknown method 'telepathy'; choose one of baseline, "),
    ("unknown precision", {"dtype": "int3"}, "unknown dtype 'int3': use auto, float32, bfloat16"),
    ("temperature <= 0 with sampling", {"sample": True, "temperature": 0}, "temperature must be above 0 when sampling"),
    ("max new tokens below 1", {"max_new_tokens": 0}, f"max new tokens must be between 1 and {MAX_NEW_TOKENS}"),
    ("max new tokens above the cap", {"max_new_tokens": MAX_NEW_TOKENS + 1},
     f"(PLAYGROUND_MAX_NEW_TOKENS); got {MAX_NEW_TOKENS + 1}"),
    ("max new tokens that is not a number", {"max_new_tokens": "many"}, "max_new_tokens must be a number; got 'many'"),
    ("max new tokens that is not whole", {"max_new_tokens": 2.5}, "max_new_tokens must be a whole number; got 2.5"),
    ("sample that is not true or false", {"sample": "maybe"}, "sample must be true or false; got 'maybe'"),
    ("prompt that is not text", {"prompt": 42}, "prompt must be text; got 42"),
    ("model name that is not text", {"target": ["a", "b"]}, "target must be text; got ['a', 'b']"),
    ("unknown preset", {"preset": "<b>no-such-example</b>"},
     "unknown preset '<b>no-such-example</b>'; choose one of speculative-greedy"),
]

def _fill(value: Any, models: dict[str, str]) -> Any:
    return value.format(**models) if isinstance(value, str) and "{" in value else value


@pytest.mark.server
@pytest.mark.slow
def test_a_normal_run_works_first(client: Any, models: dict[str, str], server: Server) -> None:
    assert len(normal_run(client, server, models)) == 8
    assert server.worker_threads() == 0


@pytest.mark.server
@pytest.mark.parametrize("row, kw, fragment", BAD_INPUT, ids=[row for row, _, _ in BAD_INPUT])
def test_bad_input_gets_a_clear_message_and_the_server_keeps_serving(
        row: str, kw: dict[str, Any], fragment: str, client: Any, models: dict[str, str], server: Server) -> None:
    reference = normal_run(client, server, models)
    kw = {k: _fill(v, models) for k, v in kw.items()}
    kw.setdefault("target", models["target"])
    outputs = client.predict(**request(**kw), api_name="/generate")
    kind, text = status(outputs)
    assert kind == "error", f"{row}: {text}"
    assert _fill(fragment, models) in text, f"{row}: {text}"
    assert "Traceback" not in text and "\n" not in text.strip()
    assert outputs[5].get("visible") is False, "no trace to download after a refused request"
    assert server.proc.poll() is None
    assert normal_run(client, server, models) == reference, "the same request must give the same output afterwards"
    # Nothing from the refused request reached the disk or a shell.
    assert not list(Path(models["outside"]).glob("*_RAN"))


@pytest.mark.server
def test_nothing_a_visitor_types_reaches_a_shell(client: Any, models: dict[str, str], server: Server) -> None:
    marker = Path(models["outside"]) / "SHELL_RAN"
    evil = f"$(touch {marker}); `touch {marker}` && touch {marker} | touch {marker}"
    # As a prompt it is just text: the run works and the text is the model's input.
    outputs = client.predict(**request(target=models["target"], prompt=evil), api_name="/generate")
    assert status(outputs)[0] == "done"
    assert server.trace(outputs).prompt == evil
    # As a model name, an assistant, a method or a parameter it is refused with a message.
    for kw in ({"target": evil}, {"target": f"bundled/{evil}"}, {"method": "speculative", "assistant": evil},
               {"method": evil}, {"method": "prompt_lookup", "params": {"prompt_lookup_num_tokens": evil}},
               {"dtype": evil}):
        kw.setdefault("target", models["target"])
        outputs = client.predict(**request(**kw), api_name="/generate")
        assert status(outputs)[0] == "error", kw
    assert not marker.exists()
    normal_run(client, server, models)


@pytest.mark.server
def test_loading_code_is_never_run(models: dict[str, str], client: Any, server: Server) -> None:
    """After the pickle and custom-code rows: neither the pickle nor the model's Python ever ran."""
    for target in (models["pickled"], models["custom"]):
        outputs = client.predict(**request(target=target), api_name="/generate")
        assert status(outputs)[0] == "error"
    assert not (Path(models["outside"]) / "PICKLE_RAN").exists()
    assert not (Path(models["outside"]) / "CODE_RAN").exists()


# --------------------------------------------------------------------------- trace files (replay upload)

UPLOAD_HANDLER = "on_trace_upload"


def _upload_status(server: Server, name: str, content: bytes) -> tuple[str, str]:
    data = server.upload(name, content)
    assert isinstance(data, dict), f"upload refused with HTTP {data}"
    outputs = server.call_page_handler(UPLOAD_HANDLER, [data])
    boxes = [o for o in outputs if isinstance(o, str) and 'data-testid="pg-status"' in o]
    assert len(boxes) == 1, outputs
    return status((None, None, None, None, boxes[0]))


@pytest.mark.server
def test_corrupt_or_foreign_trace_files_get_a_clear_message(server: Server, client: Any,
                                                             models: dict[str, str]) -> None:
    if UPLOAD_HANDLER not in server.fn_index:
        pytest.skip("this page has no trace upload")
    outputs = client.predict(**request(target=models["target"]), api_name="/generate")
    good = server.trace(outputs).to_json().encode()
    data = json.loads(good)
    data["steps"] = "garbage"
    cases = [
        ("not JSON", "corrupt.json", good[: len(good) // 2], "not valid JSON"),
        ("JSON that is not a trace", "foreign.json", b'{"hello": "world"}', "not a playground trace"),
        ("a trace holding nonsense", "nonsense.json", json.dumps(data).encode(), "Cannot replay nonsense.json"),
        ("not text at all", "binary.json", bytes(range(256)) * 4, "not valid JSON"),
    ]
    for case, name, content, fragment in cases:
        kind, text = _upload_status(server, name, content)
        assert kind == "error" and fragment in text, f"{case}: {text}"
    kind, text = _upload_status(server, "good.json", good)
    assert kind == "done", text
    normal_run(client, server, models)


@pytest.mark.server
def test_uploads_larger_than_a_trace_are_refused(server: Server, client: Any, models: dict[str, str]) -> None:
    from playground.app.replay_tab import MAX_TRACE_BYTES

    assert server.upload("huge.json", b" " * (MAX_TRACE_BYTES + 1)) == 413
    normal_run(client, server, models)


# --------------------------------------------------------------------------- the CLI path of rows test_cli.py lacks

# tests/test_cli.py (BAD_INPUT) has the CLI path of every row above; these need this module's fixtures.
CLI_ROWS: list[tuple[str, list[str], dict[str, str], str]] = [
    ("pickle-only checkpoint", ["--target", "{pickled}"], {}, "PLAYGROUND_ALLOW_PICKLE=1"),
    ("model with custom code", ["--target", "{custom}"], {}, "custom model code needs PLAYGROUND_TRUST_REMOTE_CODE=1"),
    ("public mode: symlink out of an allowed dir", ["--target", "{escape}"],
     {"PLAYGROUND_PUBLIC": "1", "PLAYGROUND_ALLOWED_DIRS": "{root}"}, "local model paths are disabled in public mode"),
    ("chat template on a model without one", ["--target", "{foreign}", "--chat"], {}, "has no chat template"),
]


@pytest.mark.parametrize("row, args, env, fragment", CLI_ROWS, ids=[row for row, *_ in CLI_ROWS])
def test_cli_rows(row: str, args: list[str], env: dict[str, str], fragment: str, models: dict[str, str],
                  monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from playground.cli import main

    for key, value in env.items():
        monkeypatch.setenv(key, _fill(value, models))
    code = main(["run", "--prompt", PROMPT, "--max-new-tokens", "4", *(_fill(a, models) for a in args)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and "\n" not in err, err
    assert fragment in err, err
    assert not list(Path(models["outside"]).glob("*_RAN"))


@pytest.mark.parametrize("content, fragment", [
    (b"{ not json", "not valid JSON"),
    (bytes(range(256)), "not valid JSON"),
    (b'{"method": "baseline", "steps": "garbage"}', "schema_version"),
], ids=["not JSON", "not text", "a trace holding nonsense"])
def test_cli_show_refuses_corrupt_trace_files(content: bytes, fragment: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from playground.cli import main

    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    assert main(["show", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and fragment in err, err


@pytest.mark.parametrize("target, fragment", [
    ("nobody-here/no-such-model", "error: no such model on the Hugging Face Hub: nobody-here/no-such-model"),
    (f"{UNREACHABLE_ORG}/SmolLM2-360M-Instruct", "could not reach the Hugging Face Hub (offline?)"),
], ids=["unknown Hub id", "Hub unreachable"])
@pytest.mark.models  # a model load, refused by the Hub, in a fresh process
def test_cli_hub_rows(target: str, fragment: str, hub: str, tmp_path: Path) -> None:
    """A separate process: the Hub address is read when huggingface_hub is imported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLAYGROUND_", "HF_"))}
    env.update({"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)})
    result = subprocess.run([sys.executable, "-m", "playground", "run", "--target", target, "--prompt", PROMPT],
                            capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr


# --------------------------------------------------------------------------- limits


def test_queue_concurrency_default_fits_two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three places at the cores by default (PLAYGROUND_CONCURRENCY: the queue's default, and the engine's places for
    computing generations); Generate's own limit is how many runs may exist at once, paused ones included
    (PLAYGROUND_MAX_RUNS: a paused run holds no place another visitor needs; docs/limits.md has the memory reason)."""
    from playground.app import page

    monkeypatch.delenv("PLAYGROUND_CONCURRENCY", raising=False)
    monkeypatch.delenv("PLAYGROUND_MAX_RUNS", raising=False)
    demo = page.build_ui()
    assert demo._queue.default_concurrency_limit == 3
    generate = next(fn for fn in demo.fns.values() if fn.api_name == "generate")
    assert generate.concurrency_limit == 12 and generate.queue
    monkeypatch.setenv("PLAYGROUND_MAX_RUNS", "5")
    assert next(fn for fn in page.build_ui().fns.values() if fn.api_name == "generate").concurrency_limit == 5
    # Gradio keeps a copy of each trace it serves; they must not pile up for the server's lifetime.
    frequency, age = demo.delete_cache
    assert 0 < frequency <= age
    monkeypatch.setenv("PLAYGROUND_CONCURRENCY", "1")
    assert page.build_ui()._queue.default_concurrency_limit == 1


@pytest.mark.server
@pytest.mark.slow
def test_run_time_limit_ends_a_long_run(models: dict[str, str], hub: str,
                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    """On a server of its own whose limit is SHORT_RUN_TIMEOUT_S (the module's is longer, for runs that must not meet
    it): a run longer than the limit ends at it, saying so, with what it made."""
    with _serving(models, hub, tmp_path_factory, "hardening-time-limit-server.log", SHORT_RUN_TIMEOUT_S) as server:
        outputs = new_client(server).predict(**request(target=models["long"], max_new_tokens=MAX_NEW_TOKENS),
                                             api_name="/generate")
        kind, text = status(outputs)
        assert kind == "done" and "stopped by the run time limit (PLAYGROUND_RUN_TIMEOUT_S)" in text, text
        trace = server.trace(outputs)
        assert trace.finish_reason == "timeout"
        check_invariants(trace)
        assert 0 < trace.summary.new_tokens < MAX_NEW_TOKENS
        assert server.wait_no_worker() == 0


# --------------------------------------------------------------------------- many visitors


def _solo(client: Any, server: Server, kw: dict[str, Any]) -> Trace:
    outputs = client.predict(**request(**kw), api_name="/generate")
    kind, text = status(outputs)
    assert kind == "done", text
    return server.trace(outputs)


def _own_trace(trace: Trace, kw: dict[str, Any]) -> None:
    check_invariants(trace)
    assert trace.prompt == kw["prompt"] and trace.method == kw["method"] and trace.target == kw["target"]


@pytest.mark.slow
@pytest.mark.server
def test_two_sessions_at_once_match_their_solo_runs(server: Server, models: dict[str, str]) -> None:
    """Early exit lowers the shared target's layer count and changes its draft settings while it runs; a
    plain run on the same model at the same time must still give its solo output (they take turns per step)."""
    runs = [
        dict(prompt=PROMPT, target=models["long"], method="early_exit", max_new_tokens=120,
             params={"assistant_early_exit": 1, "num_assistant_tokens": 3}),
        dict(prompt="The capital of France is", target=models["long"], method="baseline", max_new_tokens=120),
    ]
    clients = [new_client(server), new_client(server)]
    solo = [_solo(c, server, kw) for c, kw in zip(clients, runs)]
    for reference in solo:  # a solo run cut short (a stop, the time limit) is no reference: say which it was
        assert reference.finish_reason == "length" and len(reference.output_ids) == 120, (
            reference.finish_reason, len(reference.output_ids), reference.summary)
    jobs = [c.submit(**request(**kw), api_name="/generate") for c, kw in zip(clients, runs)]
    results = [job.result(timeout=WAIT_S) for job in jobs]
    for kw, outputs, reference in zip(runs, results, solo):
        kind, text = status(outputs)
        assert kind == "done", text
        trace = server.trace(outputs)
        _own_trace(trace, kw)
        assert trace.output_ids == reference.output_ids and trace.output_text == reference.output_text
        assert len(trace.output_ids) == 120
    assert server.wait_no_worker() == 0


@pytest.mark.slow
@pytest.mark.server
def test_two_sessions_generate_in_parallel_and_stay_apart(server: Server, models: dict[str, str]) -> None:
    """With PLAYGROUND_CONCURRENCY=2 two runs on different models stream at the same time; each session
    sees its own tokens, stops only its own run and downloads its own trace."""
    runs = [
        dict(prompt=PROMPT, target=models["long"], method="early_exit", max_new_tokens=MAX_NEW_TOKENS,
             params={"assistant_early_exit": 2, "num_assistant_tokens": 2}),
        dict(prompt="def add(a, b):", target=models["long2"], method="baseline", max_new_tokens=MAX_NEW_TOKENS),
    ]
    clients = [new_client(server), new_client(server)]
    solo = [_solo(c, server, {**kw, "max_new_tokens": 200}) for c, kw in zip(clients, runs)]
    jobs = [c.submit(**request(**kw), api_name="/generate") for c, kw in zip(clients, runs)]
    for job in jobs:  # both stream before either is stopped: they run at the same time
        _wait_streaming(job)
    assert not any(job.done() for job in jobs)
    assert server.worker_threads() >= 2
    server.press_stop(clients[0].session_hash)  # stops the first session's run only
    first = jobs[0].result(timeout=WAIT_S)
    assert "stopped: kept what was produced" in status(first)[1]
    assert not jobs[1].done(), "Stop in one session must not end another session's run"
    _wait_streaming(jobs[1])
    server.press_stop(clients[1].session_hash)
    second = jobs[1].result(timeout=WAIT_S)
    for kw, outputs, reference in zip(runs, (first, second), solo):
        trace = server.trace(outputs)
        _own_trace(trace, kw)
        assert trace.finish_reason == "stopped"
        n = min(len(trace.output_ids), len(reference.output_ids))
        assert n > 0 and trace.output_ids[:n] == reference.output_ids[:n], "greedy output must match the solo run"
    assert server.wait_no_worker() == 0


@pytest.mark.slow
@pytest.mark.server
def test_sampling_sessions_at_once_keep_their_seeds(server: Server, models: dict[str, str]) -> None:
    """Sampling draws from torch's global generator: runs on different models at once must each give the
    output their seed gives alone."""
    runs = [
        dict(prompt=PROMPT, target=models["long"], method="baseline", sample=True, temperature=1.5, seed=11,
             max_new_tokens=150),
        dict(prompt=PROMPT, target=models["long2"], method="speculative", assistant=models["long2"], sample=True,
             temperature=1.5, seed=12, max_new_tokens=150, params={"num_assistant_tokens": 3}),
    ]
    clients = [new_client(server), new_client(server)]
    solo = [_solo(c, server, kw) for c, kw in zip(clients, runs)]
    jobs = [c.submit(**request(**kw), api_name="/generate") for c, kw in zip(clients, runs)]
    for kw, job, reference in zip(runs, jobs, solo):
        trace = server.trace(job.result(timeout=WAIT_S))
        _own_trace(trace, kw)
        assert trace.output_ids == reference.output_ids


# --------------------------------------------------------------------------- leaving mid-run


@pytest.mark.server
def test_stop_ends_the_run_and_its_worker_thread(server: Server, models: dict[str, str]) -> None:
    client = new_client(server)
    assert server.worker_threads() == 0
    job = client.submit(**request(target=models["long"], max_new_tokens=MAX_NEW_TOKENS), api_name="/generate")
    _wait_streaming(job)
    assert server.worker_threads() >= 1, "the check must see the worker while it runs"
    server.press_stop(client.session_hash)
    outputs = job.result(timeout=WAIT_S)
    kind, text = status(outputs)
    assert kind == "done" and "stopped: kept what was produced" in text, text
    trace = server.trace(outputs)
    assert trace.finish_reason == "stopped" and 0 < trace.summary.new_tokens < MAX_NEW_TOKENS
    check_invariants(trace)
    assert server.wait_no_worker() == 0
    normal_run(client, server, models)


@pytest.mark.server
def test_cancelling_the_job_ends_the_worker_thread(server: Server, models: dict[str, str]) -> None:
    client = new_client(server)
    job = client.submit(**request(target=models["long"], max_new_tokens=MAX_NEW_TOKENS), api_name="/generate")
    _wait_streaming(job)
    assert server.worker_threads() >= 1
    job.cancel()
    assert server.wait_no_worker() == 0
    normal_run(client, server, models)


@pytest.mark.server
def test_closing_the_connection_mid_stream_ends_the_worker_thread(server: Server, models: dict[str, str]) -> None:
    """What a closed tab does: the browser's event stream goes away while tokens are streaming."""
    session = uuid.uuid4().hex[:11]
    args = request(target=models["long"], max_new_tokens=MAX_NEW_TOKENS)
    join = httpx.post(f"{server.url}gradio_api/queue/join", timeout=30, json={
        "data": list(args.values()), "fn_index": server.fn_index["generate"], "session_hash": session,
        "event_data": None, "trigger_id": None}, verify=LOCAL_TLS)
    assert join.status_code == 200, join.text
    streamed = 0
    with httpx.stream("GET", f"{server.url}gradio_api/queue/data", params={"session_hash": session},
                      timeout=WAIT_S, verify=LOCAL_TLS) as stream:
        for line in stream.iter_lines():
            if "process_generating" in line and "tok" in line:
                streamed += 1
                if streamed == 3:
                    assert server.worker_threads() >= 1
                    break  # leaving the block closes the connection
    assert streamed == 3
    assert server.wait_no_worker() == 0
    normal_run(new_client(server), server, models)


@pytest.mark.server
def test_the_server_survived_everything(server: Server, client: Any, models: dict[str, str]) -> None:
    assert server.proc.poll() is None
    normal_run(client, server, models)
    log = server.log.read_text(errors="replace")
    # The only tracebacks allowed are Gradio logging a refusal of its own (gr.Error); no thread died.
    assert log.count("Traceback (most recent call last)") == log.count("\ngradio.exceptions.Error: ")
    assert "Exception in thread" not in log
