"""Visitors of a real server speaking Gradio's own protocol (no browser): the page's handlers called by name as the page
calls them, in a session of the visitor's own. For the class tests (`test_follow_server.py`) and the class-load
benchmark (`measure/class_load.py`); the public server both class tests start (`public_server`)."""

from __future__ import annotations

import json
import os
import re
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import httpx
from gradio_client.utils import apply_diff
from appserver import ARTIFACTS, free_port, start_app, stop_app

from appserver import LOCAL_TLS

WAIT_S = 300.0
STEP_SPAN = re.compile(r'class="pg-step[ "]')
CODE_IN_LINK = re.compile(r"follow=([A-Za-z0-9_-]{16})")


@contextmanager
def public_server(models: dict[str, str], log_name: str, extra: dict[str, str] | None = None) -> Iterator[str]:
    """A real server in public mode (as a Space runs it; no start-up load), the tiny `models`' folder allowed as a
    Space allows one; its address. Its log is ARTIFACTS/`log_name`."""
    ARTIFACTS.mkdir(exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PLAYGROUND_", "GRADIO_"))}
    env = {"PLAYGROUND_PRELOAD": "0", "PLAYGROUND_PUBLIC": "1",
           "PLAYGROUND_ALLOWED_DIRS": str(Path(models["target"]).resolve().parent), **(extra or {})}
    port = free_port()
    proc = start_app(port, ARTIFACTS / log_name, env, base_env=base)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        stop_app(proc)


def handlers(url: str) -> dict[str, dict[str, Any]]:
    """The page's event handlers by name (Gradio's api_name; private ones too), as its config lists them."""
    config = httpx.get(f"{url}config", timeout=60, verify=LOCAL_TLS).json()
    return {d["api_name"]: d for d in config["dependencies"] if d.get("api_name")}


def text_of(html_text: Any) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html_text if isinstance(html_text, str) else "")).strip()


def steps_in(tokens_html: Any) -> int:
    """The verification steps a token view shows."""
    return len(STEP_SPAN.findall(tokens_html)) if isinstance(tokens_html, str) else 0


def shown_after(before: list[Any], outputs: list[Any]) -> list[Any]:
    """What a page shows after a handler's outputs: a value replaces what was there, an update with a value sets it,
    a skip (an update without one) leaves it."""
    shown = list(before) + [None] * max(0, len(outputs) - len(before))
    for i, value in enumerate(outputs):
        if isinstance(value, dict) and value.get("__type__") == "update":
            if "value" in value:
                shown[i] = value["value"]
        else:
            shown[i] = value
    return shown


class Visitor:
    """One visitor's session: `call` for the page's quick handlers (outside the queue), `stream` for queued ones.
    `query` is the page's address query (``?follow=…&lang=ru``): Gradio hands it to the handlers as the page's."""

    def __init__(self, url: str, deps: dict[str, dict[str, Any]], query: str = "", client: httpx.Client | None = None):
        self.url, self.deps, self.query = url, deps, query
        self.session = uuid.uuid4().hex[:11]
        self.http = client or httpx.Client(timeout=WAIT_S)
        self.received = 0  # characters of the streams' messages read so far (what the server wrote to this visitor)

    def _body(self, name: str, data: list[Any], event_data: Any = None) -> dict[str, Any]:
        return {"data": data, "fn_index": self.deps[name]["id"], "session_hash": self.session,
                "event_data": event_data, "trigger_id": None, "simple_format": True}

    def outputs(self, name: str, answer: list[Any]) -> dict[int, Any]:
        """A handler's answer by output component id."""
        return dict(zip(self.deps[name]["outputs"], answer))

    def call(self, name: str, data: list[Any] | None = None, event_data: Any = None) -> list[Any]:
        """A handler outside the queue; its outputs (an error's message raises)."""
        response = self.http.post(f"{self.url}gradio_api/run/predict{self.query}",
                                  json=self._body(name, data or [], event_data))
        answer = response.json()
        if response.status_code != 200 or "error" in answer and answer["error"]:
            raise RuntimeError(f"{name}: {answer.get('error', response.text)}")
        return answer["data"]

    def stream(self, name: str, data: list[Any] | None = None, diffs: bool = False) -> Iterator[list[Any]]:
        """A queued handler: each of its outputs as it comes; an error raises. The server sends whole values, or with
        `diffs` Gradio's edits to the last values as it sends a browser (applied here: whole values come out)."""
        body = self._body(name, data or [])
        body["simple_format"] = not diffs
        response = self.http.post(f"{self.url}gradio_api/queue/join{self.query}", json=body)
        held: list[Any] | None = None
        assert response.status_code == 200, response.text
        with self.http.stream("GET", f"{self.url}gradio_api/queue/data",
                              params={"session_hash": self.session}) as events:
            for line in events.iter_lines():
                self.received += len(line)
                if not line.startswith("data:"):
                    continue
                message = json.loads(line[5:])
                kind = message.get("msg")
                if kind == "process_generating" and message.get("output", {}).get("data") is not None:
                    got = message["output"]["data"]
                    if diffs:  # the first message whole, then each output's edits
                        held = got if held is None else [apply_diff(value, edits) for value, edits in zip(held, got)]
                        got = held
                    yield got
                elif kind == "process_completed":
                    if not message.get("success"):
                        raise RuntimeError(f"{name}: {(message.get('output') or {}).get('error')}")
                    return

    def close(self) -> None:
        self.http.close()
