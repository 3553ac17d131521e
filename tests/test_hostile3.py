"""Hostile visitors, third sweep (issue 36): bounded reads everywhere, text fields of the size they hold, no raw
control character on the terminal, no work for a client that never reads, and our answer (a 4xx) where Gradio's was
a bare 500 or its generic error.

The CLI and the trace reader run in-process or as a subprocess (its peak memory read from `os.wait4`); the rest goes
through one real `python app.py` configured as a public Space with its MCP tools on (`test_hostile.public_server`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import typing
import unicodedata
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from playground import cli
from playground.outside import MAX_INPUT_BYTES, MAX_INPUT_MB, for_terminal, read_bounded
from playground.trace import (MAX_TOKEN_TEXT_CHARS, TEXT_LIMITS, Position, Ranked, Step, Trace, TraceFormatError,
                              text_limit)

ROOT = Path(__file__).resolve().parents[1]
# What a file may hold to drive or fool a terminal: a screen clear, a title set (OSC ... BEL), right-to-left override,
# a left-to-right isolate, a zero-width space, NUL, a line separator, a C1 control.
EVIL = "\x1b[2J\x1b]0;pwn\x07\u202egnp.exe\u2066\u200b\x00\u2028\x9b"
SIZE_LINE = f"the file is over {MAX_INPUT_MB} MB"
STREAM_OPEN_S = 8  # the server's PLAYGROUND_STREAM_OPEN_S (default 30)


def _unsafe_characters(text: str) -> set[str]:
    """Every control or format character (Unicode Cc, Cf) and line or paragraph separator in `text`, but newline."""
    return {f"U+{ord(ch):04X}" for ch in text
            if ch != "\n" and unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")}


# --------------------------------------------------------------------------- bounded reads


# Runs `python -m playground ARGS` and prints its peak resident memory (kB): measured from a small interpreter of its
# own, because a child forked straight from this test process would count this process's pages (Linux keeps the
# high-water mark across exec).
MEASURE = """import resource, subprocess, sys
code = subprocess.run([sys.executable, "-m", "playground", *sys.argv[1:]], stdout=subprocess.DEVNULL).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(code)"""


def _peak_rss_mb(argv: list[str]) -> tuple[int, str, float]:
    """(exit status, stderr, peak resident memory in MB) of `python -m playground ...`."""
    done = subprocess.run([sys.executable, "-c", MEASURE, *argv], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    return done.returncode, done.stderr, int(done.stdout.split()[-1]) / 1024  # kB on Linux


@pytest.mark.slow
@pytest.mark.parametrize("argv, bound_mb", [
    (["show", "/dev/zero"], 300),
    (["code", "/dev/zero"], 900),  # Transformers is imported first
    (["run", "--prompt-file", "/dev/zero", "--quiet"], 1200),  # torch and Transformers first
    (["bench", "--prompts", "/dev/zero", "--quiet"], 1200),
    (["tune", "--prompts", "/dev/zero", "--quiet"], 1200),
], ids=["show", "code", "run-prompt-file", "bench-prompts", "tune-prompts"])
def test_the_cli_stops_an_endless_file_at_the_limit_in_bounded_memory(argv: list[str], bound_mb: int) -> None:
    """`/dev/zero` as every file the CLI reads: one line naming the limit, exit status 2, and a peak memory of the
    interpreter and its imports plus at most the limit (an unbounded read grew to 6.4 GB in 12 s)."""
    code, err, peak = _peak_rss_mb(argv)
    assert code == 2, err
    assert SIZE_LINE in err and len(err.strip().splitlines()) == 1, err
    assert peak < bound_mb, f"{argv}: peak resident memory {peak:.0f} MB"


def test_read_bounded_reads_the_limit_and_refuses_one_byte_more(tmp_path: Path) -> None:
    exact, over = tmp_path / "exact", tmp_path / "over"
    exact.write_bytes(b"x" * 1000)
    over.write_bytes(b"x" * 1001)
    assert read_bounded(exact, 1000) == b"x" * 1000
    with pytest.raises(Exception, match=SIZE_LINE):
        read_bounded(over, 1000)


def test_the_pages_upload_reader_refuses_an_endless_file_in_the_clis_words() -> None:
    from playground.app.replay_tab import MAX_TRACE_BYTES, load_trace_file

    assert MAX_TRACE_BYTES == MAX_INPUT_BYTES  # Gradio's upload limit (launch) is the reader's
    with pytest.raises(Exception) as refused:
        load_trace_file("/dev/zero")
    assert str(refused.value) == f"{SIZE_LINE}; a file the playground reads (a trace, a prompt, a prompt set) is " \
                                 f"at most {MAX_INPUT_MB} MB"


# --------------------------------------------------------------------------- text fields of the size they hold


def _text_fields() -> set[str]:
    """The name of every field of the trace's records that holds text (str, list[str], str | None ...)."""
    names = set()
    for record in (Trace, Step, Position, Ranked):
        for f in dataclasses.fields(record):
            hint = typing.get_type_hints(record)[f.name]
            if typing.get_origin(hint) is dict:  # a free-form object: its strings have their own bound
                continue
            if str in (hint, *typing.get_args(hint), *(a for arg in typing.get_args(hint) for a in typing.get_args(arg))):
                names.add(f.name)
    return names


def test_every_text_field_of_a_trace_has_a_bound_of_its_own() -> None:
    assert _text_fields() == set(TEXT_LIMITS)
    assert TEXT_LIMITS["drafted_text"] == TEXT_LIMITS["emitted_text"] == TEXT_LIMITS["text"] == MAX_TOKEN_TEXT_CHARS
    assert MAX_TOKEN_TEXT_CHARS <= 512 and TEXT_LIMITS["method"] <= 64 and TEXT_LIMITS["target"] <= 1024


def _lookup_trace(text: str = "a") -> dict[str, Any]:
    """A valid prompt-lookup trace of two steps with its microscope records; every text is `text`."""
    steps = [
        Step(index=0, drafted=[5, 6], accepted=1, rejected=[6], emitted=[5, 7], drafted_text=[text, text],
             emitted_text=[text, text], draft_ms=1.0, verify_ms=2.0,
             dists=[Position(p=[Ranked(5, 0.9, text), Ranked(7, 0.1, text)], p_drafted=0.9, p_emitted=0.9),
                    Position(p=[Ranked(7, 0.6, text), Ranked(6, 0.3, text)], p_drafted=0.3, p_emitted=0.6)],
             lookup_source=[0, 1], lookup_text=[text, text, text, text]),
        Step(index=1, drafted=[], accepted=0, rejected=[], emitted=[8], emitted_text=[text], no_draft_reason=text,
             dists=[Position(p=[Ranked(8, 1.0, text)], p_emitted=1.0)]),
    ]
    trace = Trace(method="prompt_lookup", target=text, prompt=text, params={"prompt_lookup_num_tokens": 2, "k": text},
                  decoding={"sample": False, "recorded_top_k": 2}, env={"dtype": text}, output_ids=[5, 7, 8],
                  output_text=text * 3, steps=steps, finish_reason="eos", vocab_size=10)
    trace.summarize(0.01)
    return json.loads(trace.to_json())


def _at(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(data))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


@pytest.mark.parametrize("path, where", [
    (("steps", 0, "drafted_text", 1), "trace.steps[0].drafted_text[1]"),
    (("steps", 0, "emitted_text", 0), "trace.steps[0].emitted_text[0]"),
    (("steps", 0, "dists", 0, "p", 1, "text"), "trace.steps[0].dists[0].p[1].text"),
    (("method",), "trace.method"),
    (("finish_reason",), "trace.finish_reason"),
    (("target",), "trace.target"),
    (("prompt",), "trace.prompt"),
    (("steps", 1, "no_draft_reason"), "trace.steps[1].no_draft_reason"),
    (("env", "dtype"), "trace.env.dtype"),
])
def test_a_text_longer_than_its_field_holds_is_refused_naming_the_field(path: tuple[Any, ...], where: str) -> None:
    """At its bound a field loads; one character more is refused with the field named and the bound given."""
    good = _lookup_trace()
    name = next(p for p in reversed(path) if isinstance(p, str))
    limit = text_limit(name) if name in TEXT_LIMITS else 4096
    Trace.from_dict(_at(good, path, "x" * limit))
    with pytest.raises(TraceFormatError) as refused:
        Trace.from_dict(_at(good, path, "x" * (limit + 1)))
    assert str(refused.value) == f"malformed trace: {where} has {limit + 1} characters; the limit is {limit}"


def test_a_200_000_character_token_text_is_refused_and_the_outputs_text_is_bounded_per_token() -> None:
    good = _lookup_trace()
    with pytest.raises(TraceFormatError, match=r"steps\[0\]\.drafted_text\[0\] has 200000 characters"):
        Trace.from_dict(_at(good, ("steps", 0, "drafted_text", 0), "x" * 200_000))
    with pytest.raises(TraceFormatError, match="output_text has"):
        Trace.from_dict(_at(good, ("output_text",), "x" * (3 * MAX_TOKEN_TEXT_CHARS + 1)))
    with pytest.raises(TraceFormatError, match="lookup_text must be four texts"):  # the copy: one token drafted
        Trace.from_dict(_at(good, ("steps", 0, "lookup_text", 2), "x" * (2 * MAX_TOKEN_TEXT_CHARS + 1)))


# --------------------------------------------------------------------------- nothing raw on the terminal


def test_for_terminal_writes_every_control_and_format_character_visibly() -> None:
    shown = for_terminal(EVIL + "\nok\tok é ✓ ع")
    assert _unsafe_characters(shown) == {"U+0009"}  # the tab is kept, as the newline
    assert "\\u202e" in shown and "\\u001b" in shown and "\\u009b" in shown and shown.endswith("\nok\tok é ✓ ع")


def test_show_and_code_put_no_raw_control_or_bidi_character_on_the_terminal(tmp_path: Path, capsys) -> None:
    """A trace whose every text (names, prompt, token texts, top-k texts, prompt lookup's source, a reason, the env)
    holds terminal controls and bidi overrides: `show` (summary, every token's panel, the tables) and `code` (which
    fails to load the model it names, and says so) print none of them raw."""
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(_lookup_trace(EVIL)), encoding="utf-8")
    printed = []
    for argv in (["show", str(path)], ["show", str(path), "--step", "1", "--token", "1"],
                 ["show", str(path), "--step", "1", "--token", "2"], ["show", str(path), "--step", "2"],
                 ["code", str(path)]):
        cli.main(argv)
        out = capsys.readouterr()
        printed.append(out.out + out.err)
        assert _unsafe_characters(out.out + out.err) == set(), (argv, (out.out + out.err)[:500])
    assert "\\u202egnp.exe" in printed[1], "the lookup source's text is shown, escaped"


# --------------------------------------------------------------------------- through the real server

httpx = pytest.importorskip("httpx")
from appserver import LOCAL_TLS, raw_request  # noqa: E402


@pytest.fixture(scope="module")
def long_models(tmp_path_factory: pytest.TempPathFactory, tiny_models: dict[str, str]) -> dict[str, str]:
    """The allowed folder (public mode) holding a link to the tiny target and a copy of it with a 16k context: runs
    that outlast the wait for an answer stream, on a tiny model. The copy has no EOS: a greedy run on the tiny model
    reached it after 1,150 tokens (3.4 s alone), and on a machine whose float kernels round otherwise a run may reach
    it sooner still, ending before the wait is over (CI failed so: mcp_generate done before it could be ended)."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    root = tmp_path_factory.mktemp("hostile3-allowed")
    (root / "target").symlink_to(tiny_models["target"], target_is_directory=True)
    model = LlamaForCausalLM.from_pretrained(tiny_models["target"])
    model.config.max_position_embeddings = 16384
    model.generation_config.eos_token_id = None
    model.save_pretrained(root / "long")
    AutoTokenizer.from_pretrained(tiny_models["target"]).save_pretrained(root / "long")
    return {"root": str(root), "target": str(root / "target"), "long": str(root / "long")}


@pytest.fixture(scope="module")
def server(long_models: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from test_hostile import public_server

    # Four calls from this one client at once (the never-read ones): over PLAYGROUND_CLIENT_CALLS' default of 2, which
    # tests/test_hostile4.py checks; here the watcher that ends them is the subject.
    # PLAYGROUND_STREAM_OPEN_S shorter than its 30 s default: the never-read calls' test waits it out (its calls
    # computing meanwhile); every other call here opens its stream at once or is refused before it is queued.
    with public_server(long_models, tmp_path_factory, "hostile3-server",
                       {"PLAYGROUND_MCP": "1", "PLAYGROUND_MAX_NEW_TOKENS": "8000",
                        "PLAYGROUND_CLIENT_CALLS": "8", "PLAYGROUND_STREAM_OPEN_S": str(STREAM_OPEN_S)}) as served:
        yield served


def _detail(response: Any) -> str:
    return response.json()["detail"]


@pytest.mark.server
def test_gradio_level_inputs_get_one_line_of_ours_and_a_4xx(server: Any, long_models: dict[str, str]) -> None:
    url = server.url
    config = httpx.get(f"{url}config", timeout=30, verify=LOCAL_TLS).json()
    js_only = [d["id"] for d in config["dependencies"] if not d.get("backend_fn")]
    assert js_only, "the page has JavaScript-only events"
    url_line = "characters long; this server reads at most 32768"
    for path in ("/?lang=" + "x" * 65536, "/gradio_api/queue/data?session_hash=" + "x" * 65536):
        status, body = raw_request(url, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        assert status == 414 and url_line in body, (status, body[:300])
    # the same head in two parts a moment apart (as a loaded machine reads it): still ours, not uvicorn's 400 or a reset
    request = f"GET /?lang={'x' * 65536} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    status, body = raw_request(url, request, pause_after=20_000)
    assert status == 414 and url_line in body, (status, body[:300])
    join = f"{url}gradio_api/queue/join"
    for fn_index in (10_000, -1, max(d["id"] for d in config["dependencies"]) + 1):
        answered = httpx.post(join, json={"data": [], "fn_index": fn_index, "session_hash": "abc"}, timeout=30,
                              verify=LOCAL_TLS)
        assert answered.status_code == 404 and _detail(answered) == \
            f"no event handler has the number {fn_index}; the page's config (/config) lists them", answered.text
    for fn_index in js_only:
        for route in ("queue/join", "run/predict"):
            answered = httpx.post(f"{url}gradio_api/{route}", json={"data": [], "fn_index": fn_index,
                                                                    "session_hash": "abc"}, timeout=30,
                                  verify=LOCAL_TLS)
            assert answered.status_code == 422 and _detail(answered) == \
                f"event {fn_index} runs in the browser only: the server has nothing to run for it", answered.text
    answered = httpx.post(join, json={"data": [], "fn_index": 0, "session_hash": ""}, timeout=30, verify=LOCAL_TLS)
    assert answered.status_code == 422 and _detail(answered) == \
        "session_hash must be text, neither empty nor longer than the limit (128); got ''", answered.text
    answered = httpx.get(f"{url}gradio_api/queue/data", params={"session_hash": ""}, timeout=30, verify=LOCAL_TLS)
    assert answered.status_code == 422 and "session_hash must be text" in _detail(answered)
    for route in ("call", "run"):
        answered = httpx.post(f"{url}gradio_api/{route}/no_such_thing", json={"data": []}, timeout=30, verify=LOCAL_TLS)
        assert answered.status_code == 404 and _detail(answered) == \
            "this server has no endpoint named no_such_thing; its API page (?view=api) lists them", answered.text
    # 30 MB to the MCP server and to a REST endpoint: refused by the length it announces, before a byte is read
    for path in ("/gradio_api/mcp/", "/gradio_api/run/mcp_generate"):
        status, body = raw_request(url, (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                  f"Content-Length: {30 * 1024 * 1024}\r\nConnection: close\r\n\r\n").encode())
        assert status == 413 and f"the request is over {MAX_INPUT_MB} MB" in body, (status, body)

    def chunks() -> Iterator[bytes]:
        for _ in range(30):
            yield b" " * (1024 * 1024)

    for path in ("run/mcp_generate", "component_server"):  # a handler's call (read, then checked); any other route
        answered = httpx.post(f"{url}gradio_api/{path}", content=chunks(), headers={"content-type": "application/json"},
                              timeout=60, verify=LOCAL_TLS)
        assert answered.status_code == 413 and f"the request is over {MAX_INPUT_MB} MB" in _detail(answered), \
            (path, answered.text[:300])
    # the arity message, in plain text: no HTML entity; a seed of 1e300 named by its size, not echoed in 301 digits
    answered = httpx.post(f"{url}gradio_api/run/mcp_generate", json={"data": ["x"]}, timeout=30, verify=LOCAL_TLS)
    assert "the page's config lists them" in answered.json()["error"] and "&#x27;" not in answered.text
    start = len(server.log.read_bytes())
    answered = httpx.post(f"{url}gradio_api/run/mcp_generate",
                          json={"data": ["x", "t", "baseline", "", "{}", 4, True, 1.0, 1e300, "float32", ""]},
                          timeout=60, verify=LOCAL_TLS)
    assert answered.json()["error"] == "seed is far too large; got a number of 997 bits", answered.text
    # Nothing the refusal left behind writes a traceback later: the log is read after a line the server writes after
    # it (a REST call of the MCP generate whose client leaves once it generates: the server logs when its run stopped).
    from test_hostile import PROMPT, _http_request, _wait_for_log, _workers_once

    sock = _http_request(url, "POST", "/gradio_api/run/mcp_generate",
                         {"data": [PROMPT, long_models["long"], "baseline", "", "{}", 8000, False, 1.0, 0, "float32", ""]})
    try:  # its generation has begun
        assert _workers_once(server, going=True, within_s=120), "the MCP generate never started generating"
    finally:
        sock.close()
    line = _wait_for_log(server, "MCP generate ", start, within_s=60)
    assert line is not None and "MCP generate stopped" in line and "after its client left" in line, line
    assert "Traceback" not in server.log.read_bytes()[start:].decode(errors="replace"), "a refusal filled the log"
    left = _workers_once(server, going=False, within_s=60)  # the run's worker ends at its next step
    assert server.alive() and left == 0


def _cpu_s(pid: int) -> float:
    """The process's CPU time (user + system, all its threads) in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.server
@pytest.mark.slow
def test_calls_whose_answer_stream_is_never_opened_end_and_their_work_stops(server: Any,
                                                                            long_models: dict[str, str]) -> None:
    """Four long calls queued and never read (REST `call/` for the three MCP functions, the page's own generate by
    the raw queue protocol), all at once: each is ended once STREAM_OPEN_S passes without its answer stream (the log
    names it), the MCP functions' runs stop (their log line), and afterwards the server's CPU time stands still."""
    from test_hostile import PROMPT, _wait_for_log, _workers_once, generate_args

    target = long_models["long"]
    start = len(server.log.read_bytes())
    calls = {
        "mcp_compare": [PROMPT, "prompt_lookup:prompt_lookup_num_tokens=3", target, "", 8000, 5, "float32"],
        "mcp_bench": ["prompt_lookup:prompt_lookup_num_tokens=3", "", 1, target, "", 8000, 5, "float32"],
        "mcp_generate": [PROMPT, target, "baseline", "", "{}", 8000, False, 1.0, 0, "float32", ""],
    }
    for name, data in calls.items():
        queued = httpx.post(f"{server.url}gradio_api/call/{name}", json={"data": data}, timeout=30, verify=LOCAL_TLS)
        assert queued.status_code == 200, queued.text
    body = {"data": generate_args({"target": target}, max_new_tokens=8000), "fn_index": server.deps["generate"]["id"],
            "session_hash": uuid.uuid4().hex[:11], "event_data": None, "trigger_id": None}
    assert httpx.post(f"{server.url}gradio_api/queue/join", json=body, timeout=30, verify=LOCAL_TLS).status_code == 200
    for name in (*calls, "generate"):
        line = _wait_for_log(server, f"ended {name}: no answer stream", start, within_s=STREAM_OPEN_S + 60)
        assert line is not None, f"{name} went on with no one to read its answer"
        assert f"open for {STREAM_OPEN_S} s" in line, line  # the server's own bound, not the default
    for tool in ("compare", "bench", "generate"):
        line = _wait_for_log(server, f"MCP {tool} ", start, within_s=60)
        assert line is not None and f"MCP {tool} stopped" in line, line
    assert _workers_once(server, going=False, within_s=60) == 0
    before = _cpu_s(server.proc.pid)
    time.sleep(3)
    assert _cpu_s(server.proc.pid) - before < 0.3, "the server kept computing for calls nobody reads"
    answered = httpx.post(f"{server.url}gradio_api/run/mcp_generate",
                          json={"data": [PROMPT, target, "baseline", "", "{}", 4, False, 1.0, 0, "float32", ""]},
                          timeout=120, verify=LOCAL_TLS)
    assert json.loads(answered.json()["data"][0])["summary"]["new_tokens"] == 4


@pytest.mark.models
def test_run_puts_no_raw_bidi_character_of_the_models_output_on_the_terminal(tmp_path: Path, capsys) -> None:
    """A model can write any character: one whose every token is a bidi override (U+202E) or isolate (U+2066), and
    `run` prints its output and summary with none of them raw (an error names a typed model name escaped too)."""
    import torch
    from transformers import LlamaForCausalLM

    from tiny import build_tokenizer, llama_config

    tokenizer = build_tokenizer()
    tokenizer.add_tokens(["\u202e", "\u2066"])
    override, isolate = tokenizer.convert_tokens_to_ids(["\u202e", "\u2066"])
    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config(tokenizer, layers=1, hidden=32))
    with torch.no_grad():  # logits: +/-100 × the normed state's first dimension for the two tokens, 0 for every other
        model.model.norm.weight.zero_()
        model.model.norm.weight[0] = 1.0
        model.lm_head.weight.zero_()
        model.lm_head.weight[override, 0], model.lm_head.weight[isolate, 0] = 100.0, -100.0
    model.generation_config.eos_token_id = None
    model.save_pretrained(tmp_path / "bidi")
    tokenizer.save_pretrained(tmp_path / "bidi")
    assert cli.main(["run", "--target", str(tmp_path / "bidi"), "--prompt", "hello", "--max-new-tokens", "6",
                     "--dtype", "float32"]) == 0
    out = capsys.readouterr()
    assert out.out.count("\\u202e") + out.out.count("\\u2066") == 6, out.out  # the six tokens, shown escaped
    assert _unsafe_characters(out.out + out.err) == set(), (out.out + out.err)[:500]
    assert cli.main(["run", "--target", "bundled/\u202eevil", "--prompt", "hi"]) == 2
    out = capsys.readouterr()
    assert "error:" in out.err and _unsafe_characters(out.out + out.err) == set(), out.err


def test_a_bug_in_the_trace_reader_is_not_blamed_on_the_visitors_file(tmp_path, monkeypatch) -> None:
    """Every shape of JSON gets the reader's own trace-format message (`Trace.from_dict`); a bug of ours inside the
    reader (here a NameError) reaches the page's guard as one, not as "the file is malformed" (the upload's
    catch-all turned every exception into the visitor's fault and hid the bug)."""
    from playground.app.replay_tab import load_trace_file
    from playground.trace import Trace, TraceFormatError

    path = tmp_path / "trace.json"
    path.write_text('{"method": "baseline", "steps": []}', encoding="utf-8")

    def buggy(cls, data):
        raise NameError("name 'shape' is not defined")  # what a typo in the reader raises

    monkeypatch.setattr(Trace, "_from_checked_dict", classmethod(buggy))
    with pytest.raises(NameError):
        load_trace_file(str(path))
    monkeypatch.undo()
    path.write_text('{"method": "baseline", "steps": [1, 2]}', encoding="utf-8")
    with pytest.raises(TraceFormatError):  # a file of the wrong shape is still the file's fault, in our words
        load_trace_file(str(path))
