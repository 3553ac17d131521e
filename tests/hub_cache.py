"""A Hugging Face cache filled with tiny checkpoints under the real repo ids of the guide's presets, and a fake Hub
endpoint on 127.0.0.1, so the Hub path (catalogue → load by Hub id → method → trace) runs with no Hub.

The cache uses huggingface_hub's own layout (`models--owner--name/{blobs,snapshots/<commit>,refs/main}`, snapshot
files linked to content-addressed blobs), which is all `hf_hub_download`/`from_pretrained` read under
HF_HUB_OFFLINE=1.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tiny import (
    build_other_tokenizer, build_tokenizer, save_tiny_gemma2, save_tiny_gemma4, save_tiny_gemma4_assistant,
    save_tiny_glm4_moe, save_tiny_llama,
)

# The tiny Gemma 4 chat template renders a system turn and, like Gemma 4's, reacts to enable_thinking.
THINKING_OFF_MARK = "<no-thinking>"
GEMMA4_CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if enable_thinking is defined and not enable_thinking %}" + THINKING_OFF_MARK + "{% endif %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def build_checkpoints(root: Path) -> dict[str, Path]:
    """Tiny stand-ins for every Hub model the guide's presets load, keyed by repo id."""
    tok = build_tokenizer()
    smol = save_tiny_llama(root / "smol-1.7b", seed=0, tokenizer=tok)
    smol_small = save_tiny_llama(root / "smol-135m", seed=1, tokenizer=tok, perturb_from=smol, noise=0.3)
    gemma4_tok = build_tokenizer()
    gemma4_tok.chat_template = GEMMA4_CHAT_TEMPLATE
    return {
        # Same tokenizer: a target and a partly agreeing drafter (the SmolLM and the Llama pairs).
        "HuggingFaceTB/SmolLM-1.7B": smol,
        "HuggingFaceTB/SmolLM-135M": smol_small,
        "meta-llama/Llama-3.1-8B": smol,
        "meta-llama/Llama-3.2-1B": smol_small,
        # A Llama deep enough for the guide's exit after layer 4.
        "facebook/layerskip-llama3.2-1B": save_tiny_llama(root / "layerskip", seed=3, layers=6, tokenizer=tok),
        # GLM-4.5-Air's class with its MTP layer at model.layers.46.*.
        "zai-org/GLM-4.5-Air": save_tiny_glm4_moe(root / "glm", seed=4, tokenizer=tok),
        # Gemma 4 (text) with a Gemma 4 assistant that reads its KV cache.
        "google/gemma-4-E4B-it": save_tiny_gemma4(root / "gemma4", seed=5, tokenizer=gemma4_tok),
        "google/gemma-4-E4B-it-assistant": save_tiny_gemma4_assistant(root / "gemma4-assistant", seed=6,
                                                                       tokenizer=gemma4_tok),
        # Different tokenizers of different sizes: Gemma 2's class and a Llama drafter (vicuna-68m is a Llama).
        "google/gemma-2-9b": save_tiny_gemma2(root / "gemma2", seed=7, tokenizer=tok),
        "double7/vicuna-68m": save_tiny_llama(root / "vicuna", seed=8, layers=2, hidden=32,
                                              tokenizer=build_other_tokenizer(320)),
    }


def commit_hash(folder: Path) -> str:
    digest = hashlib.sha1()
    for file in sorted(folder.iterdir()):
        digest.update(file.name.encode() + file.read_bytes())
    return digest.hexdigest()


def place_in_cache(hub_cache: Path, repo_id: str, folder: Path) -> Path:
    """Put a checkpoint folder into the cache as the `main` snapshot of `repo_id`; returns the snapshot dir."""
    repo_dir = hub_cache / ("models--" + repo_id.replace("/", "--"))
    commit = commit_hash(folder)
    snapshot = repo_dir / "snapshots" / commit
    (repo_dir / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for file in sorted(folder.iterdir()):
        blob = repo_dir / "blobs" / hashlib.sha256(file.read_bytes()).hexdigest()
        if not blob.exists():
            shutil.copyfile(file, blob)
        link = snapshot / file.name
        if not link.exists():
            link.symlink_to(os.path.relpath(blob, snapshot))
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(commit)
    return snapshot


def fill_hub_cache(hf_home: Path, work: Path) -> dict[str, Path]:
    """Build every stand-in and place it under HF_HOME/hub; returns repo id → snapshot dir."""
    return {repo: place_in_cache(hf_home / "hub", repo, folder) for repo, folder in build_checkpoints(work).items()}


# --------------------------------------------------------------------------- a fake Hub endpoint

def safetensors_header(tensors: dict[str, tuple[str, list[int]]]) -> bytes:
    """The first bytes of a safetensors file declaring these tensors (dtype, shape); no tensor data follows."""
    itemsize = {"F32": 4, "BF16": 2, "F16": 2}
    meta: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = itemsize[dtype]
        for dim in shape:
            size *= dim
        meta[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    header = json.dumps(meta).encode()
    return struct.pack("<Q", len(header)) + header


class FakeHub:
    """A loopback HTTP server answering like the Hub for a few repos.

    `gated`: repo ids answered with 401/403 and X-Error-Code GatedRepo (as the Hub does). `headers_only`: repo id →
    the bytes of a safetensors header served as `model.safetensors` (ranged GETs only: a full download would get
    the header alone, which the test detects). Every request is recorded (method, path, range, authorization).
    """

    def __init__(self, gated: set[str], headers_only: dict[str, bytes]):
        self.gated = gated
        self.headers_only = headers_only
        self.requests: list[dict[str, str | None]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, body: bool) -> None:
                hub.requests.append({"method": self.command, "path": self.path, "range": self.headers.get("Range"),
                                     "authorization": self.headers.get("Authorization")})
                parts = self.path.split("?")[0].strip("/").split("/")
                repo = "/".join(parts[:2]) if len(parts) >= 2 else ""
                if self.path in ("/", ""):
                    self._send(200, b"fake hub", {}, body)
                elif repo in hub.gated:
                    authorised = self.headers.get("Authorization") is not None
                    message = (f"Access to model {repo} is restricted and you are not in the authorized list."
                               if authorised else f"Access to model {repo} is restricted. You must have access to it "
                               "and be authenticated to access it. Please log in.")
                    self._send(403 if authorised else 401, message.encode(),
                               {"X-Error-Code": "GatedRepo", "X-Error-Message": message}, body)
                elif repo in hub.headers_only and parts[2:4] == ["resolve", "main"] and parts[4:] == ["model.safetensors"]:
                    data = hub.headers_only[repo]
                    start, end = _range(self.headers.get("Range"), len(data))
                    self._send(206 if self.headers.get("Range") else 200, data[start:end + 1],
                               {"ETag": '"' + hashlib.sha256(data).hexdigest() + '"', "X-Repo-Commit": "0" * 40,
                                "Accept-Ranges": "bytes"}, body, length=len(data) if not body else None)
                else:
                    self._send(404, b"Entry not found", {"X-Error-Code": "EntryNotFound",
                                                         "X-Error-Message": "Entry not found"}, body)

            def _send(self, status: int, data: bytes, headers: dict[str, str], body: bool,
                      length: int | None = None) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(length if length is not None else len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def do_HEAD(self) -> None:  # noqa: N802 (http.server's naming)
                self._answer(body=False)

            def do_GET(self) -> None:  # noqa: N802
                self._answer(body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="fake-hub", daemon=True)

    def __enter__(self) -> "FakeHub":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def _range(header: str | None, size: int) -> tuple[int, int]:
    if not header or not header.startswith("bytes="):
        return 0, size - 1
    start, _, end = header.removeprefix("bytes=").partition("-")
    return int(start or 0), min(int(end) if end else size - 1, size - 1)

