"""The models the offline stand-ins derive from the bundled Gemma (`models.derived`: its first 12 layers, the tiny
Gemma 4 and its assistant, the tiny GLM with an MTP layer) given hostile choices on a real public server (`SYSTEM=spaces`
and `SPACE_ID` set, as a Space runs): each gets one line that says what to do, in the visitor's language, and the
server keeps serving. The other hostile values these presets' methods take are refused before any model loads
(tests/test_hostile.py); what only the derived models' own classes can refuse is here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest
from appserver import ARTIFACTS, free_port, start_app, stop_app
from classroom import Visitor, handlers, text_of

pytestmark = [pytest.mark.server, pytest.mark.bundled]

GEMMA4_ASSISTANT, FIRST_12 = "bundled/tiny-gemma-4-assistant", "bundled/gemma-3-270m-first-12"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    ARTIFACTS.mkdir(exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PLAYGROUND_", "GRADIO_"))}
    env = {"PLAYGROUND_PRELOAD": "0", "SYSTEM": "spaces", "SPACE_ID": "tests/derived-hostile",
           "TMPDIR": str(tmp_path_factory.mktemp("derived-hostile"))}
    port = free_port()
    proc = start_app(port, ARTIFACTS / "derived-hostile.log", env, base_env=base)
    try:
        url = f"http://127.0.0.1:{port}/"
        yield url, handlers(url)
    finally:
        stop_app(proc)


def run_status(server: tuple[str, dict[str, Any]], target: str, method: str, params: dict[str, Any],
               lang: str = "en") -> str:
    """The status line a run of `method` on `target` (4 tokens, greedy, float32) ends with."""
    url, deps = server
    visitor = Visitor(url, deps, f"?lang={lang}")
    last: list[Any] = []
    for outputs in visitor.stream("generate", ["one two three", target, None, method, params, 4, False, 1.0, 1.0, 0,
                                               0, "off", "float32", False, None]):
        last = outputs
    return next(text_of(v) for v in last if isinstance(v, str) and "pg-status" in v)


@pytest.mark.parametrize("method, lang, words", [
    ("baseline", "en", "is a Gemma 4 assistant: it drafts from a Gemma 4 target's KV cache"),
    ("prompt_lookup", "en", "choose it as the assistant of the 'mtp_drafter' method"),
    ("baseline", "ar", "مساعد Gemma 4: يصوغ مسودته"),
])
def test_the_derived_gemma4_assistant_as_a_target_is_refused_in_words(server: tuple[str, dict[str, Any]], method: str,
                                                                      lang: str, words: str) -> None:
    """Before: "the run failed inside the playground, not because of your input" (Transformers' ValueError from a
    cache of linear-attention layers only), a fault blamed on the playground for what the visitor chose."""
    status = run_status(server, GEMMA4_ASSISTANT, method, {}, lang).replace("&#x27;", "'")
    assert words in status and "Gemma4AssistantForCausalLM" in status, status
    # ... and the server keeps serving: the next hostile choice gets its own line.
    status = run_status(server, FIRST_12, "early_exit", {"assistant_early_exit": 12})
    assert "assistant_early_exit must be between 1 and 11; got 12" in status, status


def test_a_log_names_no_traceback_for_the_refusal(server: tuple[str, dict[str, Any]]) -> None:
    """The refusal is the visitor's: the server's log holds no "failed unexpectedly" traceback for it."""
    run_status(server, GEMMA4_ASSISTANT, "baseline", {})
    log = Path(ARTIFACTS / "derived-hostile.log").read_text()
    assert "failed unexpectedly" not in log
