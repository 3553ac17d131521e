"""Hostile visitors, fourth sweep (issue 42): one client with many sessions, request smuggling, slow heads, the
monitoring pages, and the handout as careful as the page.

The server tests run one real `python app.py` configured as a public Space (`test_hostile.public_server`); the
handout's through the real CLI (`python -m playground handout`) and its HTML writer.
"""

from __future__ import annotations

import json
import re
import socket
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

httpx = pytest.importorskip("httpx")
from appserver import LOCAL_TLS  # noqa: E402
from test_hostile3 import long_models  # noqa: E402,F401  (the fixture: the tiny target and a long-context copy)

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- the client's address (no server)


def _scope(peer: str, forwarded: str | None = None) -> dict[str, Any]:
    headers = [(b"x-forwarded-for", forwarded.encode())] if forwarded is not None else []
    return {"type": "http", "client": (peer, 5555), "headers": headers}


def test_the_clients_address_is_the_peer_unless_a_known_proxy_sets_the_forwarded_header(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a Space the header is the client's own word (any address it likes): the socket's peer counts. Inside
    one (SYSTEM=spaces or SPACE_ID) or by PLAYGROUND_TRUST_FORWARDED, the last entry, the one the proxy added (a
    client may put anything before it)."""
    from playground.app.gate import Gate

    for name in ("SYSTEM", "SPACE_ID", "PLAYGROUND_TRUST_FORWARDED"):
        monkeypatch.delenv(name, raising=False)
    assert Gate(None).client(_scope("10.0.0.1", "1.2.3.4")) == "10.0.0.1"
    monkeypatch.setenv("SYSTEM", "spaces")
    assert Gate(None).client(_scope("10.0.0.1", "6.6.6.6, 1.2.3.4")) == "1.2.3.4"
    assert Gate(None).client(_scope("10.0.0.1")) == "10.0.0.1"
    monkeypatch.delenv("SYSTEM")
    monkeypatch.setenv("SPACE_ID", "someone/playground")
    assert Gate(None).client(_scope("10.0.0.1", "1.2.3.4")) == "1.2.3.4"
    monkeypatch.setenv("PLAYGROUND_TRUST_FORWARDED", "0")
    assert Gate(None).client(_scope("10.0.0.1", "1.2.3.4")) == "10.0.0.1"


# --------------------------------------------------------------------------- through the real server


@pytest.fixture(scope="module")
def server(long_models: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:  # noqa: F811
    from test_hostile import public_server

    # PLAYGROUND_CONCURRENCY and PLAYGROUND_CLIENT_CALLS at their defaults (3 and 2); room for two uploads of
    # `test_a_public_server_holds_its_visitors_uploads_within_its_budget` (about 1.9 MB each once read)
    with public_server(long_models, tmp_path_factory, "hostile4-server",
                       {"PLAYGROUND_MAX_NEW_TOKENS": "8000", "PLAYGROUND_UPLOADS_MB": "5"}) as served:
        yield served


def _unread_stream(url: str, session: str) -> socket.socket:
    """The queue's answer stream for `session`, opened and never read."""
    port = int(url.rstrip("/").rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(f"GET /gradio_api/queue/data?session_hash={session} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return sock


def _run_from(url: str, address: str, body: dict[str, Any], within_s: float) -> dict[str, Any]:
    """Join `body` from the local `address` and read its stream to the end: the last message (or a timeout's)."""
    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(transport=transport, timeout=within_s) as client:
        joined = client.post(f"{url}gradio_api/queue/join", json=body)
        assert joined.status_code == 200, joined.text
        deadline = time.monotonic() + within_s
        try:
            with client.stream("GET", f"{url}gradio_api/queue/data",
                               params={"session_hash": body["session_hash"]}) as stream:
                for line in stream.iter_lines():
                    if line.startswith("data:") and (message := json.loads(line[5:])).get("msg") == \
                            "process_completed":
                        return message
                    if time.monotonic() > deadline:
                        break
        except httpx.ReadTimeout:
            pass
    return {"msg": "timed out", "after_s": within_s}


@pytest.mark.server
@pytest.mark.slow
def test_one_client_with_many_sessions_holds_a_bounded_share_and_another_visitor_is_served(
        server: Any, long_models: dict[str, str]) -> None:  # noqa: F811
    """Twenty session hashes from one address (127.0.0.1), each joining a long generate (8000 tokens) and opening
    its answer stream without reading it: two are taken (PLAYGROUND_CLIENT_CALLS), the rest refused in one line
    (429); a visitor from another address (127.0.0.2) gets a place at once and its run ends while the client's runs
    still go on. (Before: all twenty queued, and the visitor waited behind them: 420 s for a hundred.)"""
    from test_hostile import _worker_threads, generate_args

    fn_index = server.deps["generate"]["id"]

    def visitors() -> dict[str, Any]:
        return {"data": generate_args({"target": long_models["target"]}, max_new_tokens=4), "fn_index": fn_index,
                "session_hash": uuid.uuid4().hex[:11], "event_data": None, "trigger_id": None}

    began = time.monotonic()  # the visitor's model loaded first: what follows times the wait for a place alone
    assert _run_from(server.url, "127.0.0.2", visitors(), within_s=120).get("success")
    print(f"the visitor's first run (its model loaded): {time.monotonic() - began:.1f} s")
    statuses, details, streams = [], [], []
    try:
        for _ in range(20):
            session = uuid.uuid4().hex[:11]
            body = {"data": generate_args({"target": long_models["long"]}, max_new_tokens=8000),
                    "fn_index": fn_index, "session_hash": session, "event_data": None, "trigger_id": None}
            joined = httpx.post(f"{server.url}gradio_api/queue/join", json=body, timeout=30, verify=LOCAL_TLS)
            statuses.append(joined.status_code)
            details.append(joined.json().get("detail"))
            if joined.status_code == 200:
                streams.append(_unread_stream(server.url, session))
        began = time.monotonic()
        done = _run_from(server.url, "127.0.0.2", visitors(), within_s=60)
        print(f"the other visitor's run: {time.monotonic() - began:.1f} s; the client's joins: {statuses}")
        assert done.get("success"), f"the other visitor was not served: {done}"
        assert _worker_threads(server) > 0, "the client's own runs are still going"
        assert statuses == [200] * 2 + [429] * 18, statuses
        assert set(details[2:]) == {"this address already has 2 calls queued or running, the most one client may "
                                    "have at once; wait for one to end, then try again"}, details
    finally:
        for sock in streams:
            sock.close()  # Gradio ends a call whose stream closes
    assert server.alive()


def _raw(url: str, request: bytes, read_s: float = 5.0) -> bytes:
    """Everything the server sends back on one connection for `request`, until it closes it or `read_s` passes."""
    port = int(url.rstrip("/").rsplit(":", 1)[1])
    data = b""
    with socket.create_connection(("127.0.0.1", port), timeout=read_s) as sock:
        sock.sendall(request)
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except TimeoutError:
            pass
    return data


@pytest.mark.server
def test_a_request_with_both_a_length_and_chunks_is_refused_and_its_connection_closed(server: Any) -> None:
    """Content-Length and Transfer-Encoding both: h11 reads the chunks, and the bytes after them ran as a second
    request on the same connection (smuggling). Now one 400 in our words, and nothing more is read."""
    smuggled = b"GET /config HTTP/1.1\r\nHost: x\r\n\r\n"
    body = b"0\r\n\r\n" + smuggled
    request = (b"POST /gradio_api/run/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
    data = _raw(server.url, request)
    assert data.count(b"HTTP/1.1 ") == 1, data[:2000]
    head, _, answer = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and b"connection: close" in head.lower(), head
    assert json.loads(answer)["detail"] == \
        "the request gives both Content-Length and Transfer-Encoding; send one of them"


@pytest.mark.server
def test_the_monitoring_pages_are_closed_in_public_mode(server: Any) -> None:
    """Gradio's /monitoring/summary showed every endpoint's request counts and timings to anyone."""
    for path in ("monitoring", "monitoring/summary", "monitoring/anything"):
        answered = httpx.get(f"{server.url}{path}", timeout=30, verify=LOCAL_TLS)
        assert answered.status_code == 404, (path, answered.text[:300])
        assert answered.json()["detail"] == "this server does not show its monitoring pages in public mode"


@pytest.mark.server
def test_the_deep_link_route_is_closed_in_public_mode(server: Any) -> None:
    """Gradio's /gradio_api/deep_link?session_hash=S saved that session's page values to a new file on disk after each
    change (a textbox's text, a replay's window), never deleted, for anyone who named the session; the page makes
    no deep links. (Before: 200 and the file's name, for any session.)"""
    for path in ("gradio_api/deep_link?session_hash=abcdefghijk", "gradio_api/deep_link/?session_hash=x"):
        answered = httpx.get(f"{server.url}{path}", timeout=30, verify=LOCAL_TLS)
        assert answered.status_code == 404, (path, answered.status_code, answered.text[:300])
        assert answered.json()["detail"] == "this server makes no deep links in public mode (the page offers none)"

@pytest.mark.server
@pytest.mark.slow
def test_connections_whose_head_trickles_in_are_closed_and_others_served(server: Any) -> None:
    """Twenty connections sending their head one byte a second (slowloris): each is closed once HEAD_TIMEOUT_S has
    passed without a whole head; meanwhile a page request is answered. (Before: all stayed open.)"""
    from playground.app.gate import HEAD_TIMEOUT_S

    port = int(server.url.rstrip("/").rsplit(":", 1)[1])
    slow = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(20)]
    head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    closed = [False] * len(slow)
    start = time.monotonic()
    try:
        for i in range(len(head)):
            if all(closed) or time.monotonic() - start > HEAD_TIMEOUT_S + 15:
                break
            for n, sock in enumerate(slow):
                if closed[n]:
                    continue
                try:
                    sock.sendall(head[i:i + 1])
                    sock.setblocking(False)
                    closed[n] = sock.recv(1024) == b""
                except BlockingIOError:
                    pass
                except OSError:
                    closed[n] = True
                finally:
                    sock.setblocking(True)
            if i == 3:
                served = httpx.get(server.url, timeout=30, verify=LOCAL_TLS).status_code
                assert served == 200, "a visitor is served meanwhile"
            time.sleep(1)
        assert all(closed), f"{closed.count(False)} of {len(slow)} slow heads still open after " \
                            f"{time.monotonic() - start:.0f} s"
    finally:
        for sock in slow:
            sock.close()
    assert server.alive()


# --------------------------------------------------------------------------- the handout, as careful as the page

# A bidi override, a left-to-right isolate, the Arabic letter mark and an escape sequence: Chromium showed "evil"
# as "live" on a handout holding them raw.
BIDI = "\u202eevil\u2066x\u061c\x1b[2J"


def _handout_trace(**changes: Any) -> dict[str, Any]:
    """A valid greedy prompt-lookup trace (test_hostile3's, with its one real parameter) with `changes` at the top."""
    from test_hostile3 import _lookup_trace

    data = _lookup_trace()
    data["params"] = {"prompt_lookup_num_tokens": 2}
    data.update(changes)
    return data


@pytest.mark.parametrize("changes, line", [
    ({"method": "nosuch"}, "unknown method 'nosuch'; choose one of baseline, speculative, prompt_lookup"),
    ({"decoding": {"sample": True, "temperature": "__import__('os').system('id')"}},
     "malformed trace: trace.decoding.temperature must be a finite number; got \"__import__('os').system('id')\""),
    ({"decoding": {"sample": "yes"}}, "malformed trace: trace.decoding.sample must be true or false; got 'yes'"),
    ({"decoding": {"sample": True, "seed": "1); import os; os.system('x'"}},
     "malformed trace: trace.decoding.seed must be a whole number"),
    ({"decoding": {"max_new_tokens": "9e9"}}, "malformed trace: trace.decoding.max_new_tokens must be a whole number"),
    ({"params": {"prompt_lookup_num_tokens": "__import__('os').system('id')"}},
     "prompt_lookup_num_tokens must be an integer; got \"__import__('os').system('id')\""),
    ({"params": {"<script>alert(1)</script>": 1}}, "prompt_lookup has no parameter '<script>alert(1)</script>'"),
    ({"params": {"prompt_lookup_num_tokens": 2, "assistant_ensemble_weight": "x"}},
     "prompt_lookup has no parameter 'assistant_ensemble_weight'"),
], ids=["unknown-method", "code-in-temperature", "sample-text", "code-in-seed", "length-text", "code-in-params",
        "markup-params-key", "ensemble-on-lookup"])
def test_a_trace_the_handout_cannot_describe_is_refused_in_one_line(tmp_path: Path, capsys, changes: dict[str, Any],
                                                                     line: str) -> None:
    """`python -m playground handout` on a crafted trace: one line naming what is wrong, exit 2, no file written
    (before: a Python traceback and exit 1)."""
    from playground import cli

    path = tmp_path / "crafted.json"
    path.write_text(json.dumps(_handout_trace(**changes)), encoding="utf-8")
    assert cli.main(["handout", str(path), "--out", str(tmp_path / "out.html")]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith(f"error: {path}: ") and line in out.err, out.err
    assert len(out.err.strip().splitlines()) == 1 and "Traceback" not in out.err
    assert not (tmp_path / "out.html").exists()


@pytest.mark.parametrize("lang", ["en", "ru", "ar"])
def test_the_handout_writes_bidi_and_control_characters_of_every_field_as_visible_escapes(tmp_path: Path, capsys,
                                                                                          lang: str) -> None:
    """Every text of the trace (prompt, token and top-k texts, output, model names, dtype, a reason) holding U+202E,
    U+2066, U+061C and ESC: the handout holds none of them raw, and shows each as `\\uXXXX`."""
    from playground import cli
    from test_hostile3 import _lookup_trace

    data = _lookup_trace(BIDI)
    data["params"] = {"prompt_lookup_num_tokens": 2}
    data["assistant"] = None
    data["env"] = {"dtype": BIDI, "transformers": BIDI}
    path = tmp_path / "bidi.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "bidi.html"
    assert cli.main(["handout", str(path), "--lang", lang, "--out", str(out)]) == 0, capsys.readouterr().err
    page = out.read_text(encoding="utf-8")
    assert not {"\u202e", "\u2066", "\u061c", "\x1b"} & set(page), "a raw bidi or control character"
    for shown in ("\\u202eevil", "\\u2066x", "\\u061c", "\\u001b[2J"):
        assert page.count(shown) >= 4, (shown, page.count(shown))  # prompt, target, dtype, token texts at least


def test_the_public_servers_handout_names_no_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The page's handout button (`make_handout`) on a public server: no Transformers version (its Code tab names
    none); locally the version is there."""
    from playground.app import handout_button
    from playground.trace import Trace

    data = _handout_trace(env={"dtype": "float32", "transformers": "5.24.0"})
    trace = Trace.from_dict(data)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the session's folder (trace_files.trace_root)
    monkeypatch.setenv("PLAYGROUND_PUBLIC", "1")
    public = Path(handout_button.make_handout(trace)["value"]).read_text(encoding="utf-8")
    monkeypatch.setenv("PLAYGROUND_PUBLIC", "0")
    local = Path(handout_button.make_handout(trace)["value"]).read_text(encoding="utf-8")
    assert "5.24.0" in local and "5.24.0" not in public


@pytest.mark.models
def test_code_on_a_trace_whose_length_is_text_says_so_in_one_line(tmp_path: Path) -> None:
    """`python -m playground code` on a trace whose decoding.max_new_tokens is "9e9": one line naming the field,
    exit 2 (before: a traceback on stderr, then "failed inside the playground", blaming itself)."""
    import subprocess
    import sys

    path = tmp_path / "long.json"
    path.write_text(json.dumps(_handout_trace(decoding={"sample": False, "max_new_tokens": "9e9"})), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "playground", "code", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.strip() == f"error: cannot show the code for {path}: malformed trace: "\
        "trace.decoding.max_new_tokens must be a whole number from 0 to 9007199254740992; got '9e9'", done.stderr


@pytest.mark.server
def test_a_link_naming_its_view_twice_follows_its_first_value_on_the_server_as_in_the_browser(server: Any) -> None:
    """`?view=presenter&view=normal`: the page's script reads the first value (URLSearchParams.get: the presenter's
    layout) and the server read the last (the switch off): one rule now, the first, for both."""
    from test_hostile import Server

    assert isinstance(server, Server)
    first = server.call("restore_view", [], query="?view=presenter&view=normal")
    assert first.success and first.data == [True], first
    last = server.call("restore_view", [], query="?view=normal&view=presenter")
    assert last.success and last.data != [True], last


@pytest.mark.server
def test_a_call_whose_stream_opens_late_on_a_busy_machine_still_gets_its_answer(server: Any,
                                                                               long_models: dict[str, str]) -> None:
    """A client that opens its answer stream 12 s after its join, as a loaded machine's clients did (up to 8 s seen
    at load 15-18; 3 uploads of 200 were ended at the old 10 s, "the stream ended early" in
    tests/measure/upload_memory.py): its run, still going, is still there and streams to it. The delay is the
    input, not a wait for something."""
    from test_hostile import generate_args

    session = uuid.uuid4().hex[:11]
    body = {"data": generate_args({"target": long_models["long"]}, max_new_tokens=8000),
            "fn_index": server.deps["generate"]["id"], "session_hash": session, "event_data": None, "trigger_id": None}
    with httpx.Client(timeout=120) as client:
        assert client.post(f"{server.url}gradio_api/queue/join", json=body).status_code == 200
        time.sleep(12.0)
        with client.stream("GET", f"{server.url}gradio_api/queue/data", params={"session_hash": session}) as stream:
            assert stream.status_code == 200, "the run was ended before its stream opened"
            opened, last = time.monotonic(), "nothing"
            for line in stream.iter_lines():  # what the run wrote meanwhile comes at once; then its new steps
                last = json.loads(line[5:]).get("msg", "?") if line.startswith("data:") else last
                late = time.monotonic() - opened > 2.0  # a run that goes on still writes 2 s after its stream opened
                if last == "process_completed" or late and last == "process_generating" or time.monotonic() > opened + 60:
                    break
    assert last == "process_generating" and time.monotonic() - opened > 2.0, f"the run's stream said {last}"


# --------------------------------------------------------------------------- views bounded by what a person reads


def _one_step_of(drafts: int) -> Any:
    """A sampling speculative trace of one step that drafted `drafts` tokens, refused the first (the rest discarded),
    q, p and a draw recorded for each (the issue's amplification trace at 99,999: 1.4 MB of JSON)."""
    from playground.trace import Position, Ranked, Step, Trace

    step = Step(index=0, drafted=[5] * drafts, accepted=0, rejected=[5], discarded=[5] * (drafts - 1), emitted=[7],
                drafted_text=["a"] * drafts, emitted_text=["b"], q=[0.5] * drafts, p=[0.4] * drafts,
                draws=[0.9] * drafts,
                dists=[Position(p=[Ranked(7, 0.9, "b")], p_drafted=0.05, p_emitted=0.9, q=[Ranked(5, 0.5, "a")],
                                q_drafted=0.5)])
    trace = Trace(method="speculative", target="t", assistant="t", prompt="x", params={"num_assistant_tokens": 5},
                  decoding={"sample": True, "max_new_tokens": 1, "temperature": 1.0}, output_ids=[7], output_text="b",
                  steps=[step], vocab_size=10)
    trace.summarize(0.01)
    return Trace.from_json(trace.to_json())  # as a file holds it, read by the upload's reader


def _answer_size(values: tuple[Any, ...]) -> int:
    return sum(len(v) if isinstance(v, str) else len(json.dumps(v, default=str)) for v in values)


def test_a_replay_move_and_the_handout_of_a_99999_draft_step_are_a_small_multiple_of_a_real_runs() -> None:
    """The replay slider's answer (tokens, the step's three phases, charts, figures), the microscope's panel and the
    handout for one step of 99,999 drafts: at most twice those of a step of 64 drafts (the longest draft a run asks
    for), every step's tokens past render.MAX_STEP_TOKENS_SHOWN counted in a note. (Before: 47 MB per slider move
    and a 54 MB handout.)"""
    from playground import handout, microscope_view, render
    from playground.app.replay_tab import replay_view

    crafted, real = _one_step_of(99_999), _one_step_of(64)
    move = replay_view(crafted, 1, lang="en")
    assert _answer_size(move) <= 2 * _answer_size(replay_view(real, 1, lang="en")), _answer_size(move)
    hidden = 99_999 + 1 - render.MAX_STEP_TOKENS_SHOWN  # the drafts and the correction, less those shown
    assert f'data-hidden="{hidden}"' in move[0] and "… 99872 more tokens of this step not shown …" in move[0]
    assert len(microscope_view.panel_html(crafted, 0, 0, "en")) <= 2 * len(microscope_view.panel_html(real, 0, 0, "en"))
    assert len(handout.handout_html(crafted, "en")) <= 2 * len(handout.handout_html(real, "en"))


def _steps_of(n_steps: int, drafts: int, text: str) -> Any:
    """A prompt-lookup trace of `n_steps` steps, each drafting `drafts` tokens of `text` and refusing the first."""
    from playground.trace import Step, Trace

    steps = [Step(index=i, drafted=[5] * drafts, accepted=0, rejected=[5], discarded=[5] * (drafts - 1), emitted=[7],
                  drafted_text=[text] * drafts, emitted_text=[text], draft_ms=1.0, verify_ms=1.0)
             for i in range(n_steps)]
    trace = Trace(method="prompt_lookup", target="t", prompt="x", output_ids=[7] * n_steps, steps=steps, vocab_size=10)
    trace.summarize(1.0)
    return Trace.from_json(trace.to_json())


@pytest.mark.slow  # two traces of 18.7 MB and 2.9 MB built and read back
def test_a_slider_move_on_a_crafted_window_answers_no_more_than_a_real_runs_longest() -> None:
    """200 steps of 128 drafts of 350 quotes each (an 18.7 MB file, under the upload limit): a slider move answers at
    most 1.5 times a real run's longest window (512 steps of 64 refused drafts), the steps left out counted in the
    note. (Before: 124 MB per move, every step of the window drawn whatever its tokens held.)"""
    from playground.app.replay_tab import replay_view

    crafted, real = _steps_of(200, 128, '"' * 350), _steps_of(512, 64, " word")
    assert len(crafted.to_json()) < 20 * 2**20
    move, usual = replay_view(crafted, 200, lang="en"), replay_view(real, 512, lang="en")
    print(f"a slider move: {_answer_size(move):,} characters on the crafted trace, {_answer_size(usual):,} on a real run")
    assert _answer_size(move) <= 1.5 * _answer_size(usual), (_answer_size(move), _answer_size(usual))
    left_out = re.search(r"(\d+) earlier steps not shown", html_text(move[0]))
    assert left_out and 150 < int(left_out.group(1)) < 200, html_text(move[0])[:300]
    assert "312 earlier steps not shown" in html_text(usual[0])  # a real run's window is whole: 200 steps


def _lookup_trace(earlier: int, text: str, ngram: int, copied: int, recorded: bool) -> Any:
    """A prompt-lookup trace: `earlier` one-token steps emitting `text` each, then a step that copied `copied` tokens
    of `text` after an n-gram of `ngram` tokens of the output, its source recorded as text (`lookup_text`) or left to
    the panel to find (older traces). Read back as a file holds it."""
    from playground.trace import Step, Trace

    steps = [Step(index=i, drafted=[], accepted=0, rejected=[], emitted=[5], emitted_text=[text])
             for i in range(earlier)]
    source = [1, 1 + ngram] if recorded else [1 + earlier - ngram - copied, 1 + earlier - copied]
    parts = ["", text * ngram, text * copied, ""] if recorded else None
    steps.append(Step(index=earlier, drafted=[5] * copied, accepted=copied, rejected=[], emitted=[5] * (copied + 1),
                      drafted_text=[text] * copied, emitted_text=[text] * (copied + 1), lookup_source=source,
                      lookup_text=parts))
    trace = Trace(method="prompt_lookup", target="t", prompt="x", prompt_tokens=1, params={},
                  decoding={"sample": False, "max_new_tokens": 1}, output_ids=[5] * (earlier + copied + 1),
                  steps=steps, vocab_size=10)
    trace.summarize(0.01)
    return Trace.from_json(trace.to_json())


@pytest.mark.parametrize("recorded", [False, True])
def test_a_microscope_click_on_a_crafted_lookup_source_answers_a_panel_not_the_file(recorded: bool) -> None:
    """A click on a copied token whose recorded source claims the whole output as its n-gram (6,000 earlier tokens of
    500 quotes each: 3.5 MB of file, each quote 6 characters once escaped) or a recorded n-gram and copy of 60,000
    characters each: the panel's context shows at most its bounds (LOOKUP_CONTEXT_CHARS each side, LOOKUP_PART_CHARS of
    the n-gram's end and of the copy's start, the cuts marked), and the panel is a small multiple of a real one's (a
    10-token n-gram and a 64-token copy). (Before: 15 MB per click from a 5.6 MB file.)"""
    from playground import microscope_view

    if recorded:
        crafted = _lookup_trace(0, '"' * 500, ngram=120, copied=120, recorded=True)
    else:
        crafted = _lookup_trace(6000, '"' * 500, ngram=5990, copied=10, recorded=False)
    real = _lookup_trace(80, " word", ngram=10, copied=64, recorded=recorded)
    clicked = microscope_view.panel_for_click(crafted, {"step": crafted.steps[-1].index, "pos": 0}, "en")
    usual = microscope_view.panel_for_click(real, {"step": real.steps[-1].index, "pos": 0}, "en")
    assert 'data-testid="pg-micro-match"' in clicked and 'data-testid="pg-micro-match"' in usual
    print(f"the crafted source's panel: {len(clicked):,} characters; a real one's: {len(usual):,}")
    # Besides the context: the clicked token's text (up to 512 characters) and the rule; a quote is 6 characters escaped.
    assert len(clicked) <= 8 * len(usual), (len(clicked), len(usual))
    context = re.search(r'<div class="pg-micro-context".*?</div>', clicked, re.S)
    shown = 2 * (microscope_view.LOOKUP_CONTEXT_CHARS + microscope_view.LOOKUP_PART_CHARS + 1)  # "…" twice
    assert context is not None
    assert context and len(html_text(context.group())) <= shown, len(html_text(context.group()))
    assert '<mark class="pg-micro-match" data-testid="pg-micro-match">…&quot;' in clicked
    assert '&quot;…</mark>' in clicked


def test_the_per_client_bound_counts_only_handlers_that_hold_a_place() -> None:
    """A follower's look at its class (a handler with no concurrency limit) is neither counted nor refused by
    PLAYGROUND_CLIENT_CALLS: a class behind one address keeps following; a run's handler is counted."""
    import gradio as gr

    from playground.app import gate

    with gr.Blocks() as blocks:
        button = gr.Button()
        button.click(lambda: None, None, None, api_name="bounded")
        button.click(lambda: None, None, None, api_name="look", concurrency_limit=None)
    by_name = {fn.api_name: index for index, fn in blocks.fns.items()}
    bounded = gate._called_fn(gate._JOIN, json.dumps({"fn_index": by_name["bounded"]}).encode(), blocks)
    look = gate._called_fn(gate._JOIN, json.dumps({"fn_index": by_name["look"]}).encode(), blocks)
    assert bounded.api_name == "bounded" and look.api_name == "look"
    assert gate._holds_a_place(bounded) and not gate._holds_a_place(look)
    assert gate._called_fn("/gradio_api/call/look", b"{}", blocks).api_name == "look"
    assert gate._holds_a_place(gate._called_fn(gate._JOIN, b"not json", blocks))  # unknown: counted


def test_the_per_client_bound_is_on_in_public_mode_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from playground.settings import get_settings

    monkeypatch.delenv("PLAYGROUND_CLIENT_CALLS", raising=False)
    monkeypatch.setenv("PLAYGROUND_PUBLIC", "1")
    assert get_settings().client_calls == 2
    monkeypatch.setenv("PLAYGROUND_PUBLIC", "0")
    assert get_settings().client_calls == 0
    monkeypatch.setenv("PLAYGROUND_CLIENT_CALLS", "5")
    assert get_settings().client_calls == 5


# --------------------------------------------------------------------------- uploaded traces, bounded in total


def _visitor(session: str, lang: str = "en") -> Any:
    """The `gr.Request` a handler gets from a visitor's page in `session` (its language from ?lang=)."""
    import gradio as gr
    from starlette.requests import Request

    scope = {"type": "http", "query_string": f"lang={lang}".encode(), "headers": []}
    return gr.Request(request=Request(scope), session_hash=session)


def _uploaded(tmp_path: Path, name: str, n_steps: int) -> dict[str, Any]:
    """A trace of `n_steps` steps written into Gradio's upload folder, as the file record a page sends."""
    from test_hostile import make_trace

    from playground.compat import gradio_internals

    folder = Path(gradio_internals.upload_folder()) / uuid.uuid4().hex
    folder.mkdir(parents=True)
    (folder / name).write_text(json.dumps(make_trace(n_steps)), encoding="utf-8")
    return {"path": str(folder / name), "orig_name": name, "meta": {"_type": "gradio.FileData"}}


def test_uploaded_traces_of_many_sessions_are_held_within_one_budget(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    """Ten sessions each upload a trace, through the page's own handlers, with room for two (PLAYGROUND_UPLOADS_MB):
    each session's state holds a ticket, not the trace; what all hold together stays within the budget; the sessions
    whose uploads were let go are told so in their language when they next step (the two latest still step); an upload
    larger than the whole budget is refused in one line; a visitor who leaves frees theirs. (Before: every session's
    state held its parsed trace, about 50 MB for a 20 MB file, with no bound but Gradio's 10,000 sessions.)"""
    import gradio as gr

    from playground.app import replay_tab, sessions
    from playground.app.guard import guarded
    from playground.i18n import t

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    upload = _uploaded(tmp_path, "t.json", 400)
    first = replay_tab.on_trace_upload(upload, _visitor("s0"))
    state = replay_tab.LOADED.read(first)["trace"]
    assert "Loaded t.json" in replay_tab.LOADED.read(first)["status"]
    view = guarded(replay_tab.replay_view)
    from playground.trace import Trace

    assert not isinstance(state, Trace), "the session's state holds the parsed trace itself"
    from playground.app import uploads

    one = uploads.footprint(uploads.resolve(state))
    assert uploads.footprint(state) < 1000 < one
    monkeypatch.setenv("PLAYGROUND_UPLOADS_MB", str(2.5 * one / 2**20))  # room for two uploads, not three
    states = {"s0": state}
    for n in range(1, 10):
        states[f"s{n}"] = replay_tab.LOADED.read(replay_tab.on_trace_upload(upload, _visitor(f"s{n}")))["trace"]
        assert uploads.held_bytes() <= 2.5 * one
    for session in ("s8", "s9"):
        assert "Step 400:" in html_text(view(states[session], 400, _visitor(session))[1])
    let_go = t("error.upload.let_go", "ru", budget="0")[:40]
    for session in ("s0", "s5", "s7"):
        with pytest.raises(gr.Error) as refused:
            view(states[session], 2, _visitor(session, "ru"))
        assert let_go in refused.value.message, refused.value.message
    # The play stops by itself instead of a toast every tick.
    assert replay_tab.replay_tick(states["s0"], 2, True, _visitor("s0"))[3] is False

    monkeypatch.setenv("PLAYGROUND_UPLOADS_MB", str(0.5 * one / 2**20))
    too_big = replay_tab.LOADED.read(replay_tab.on_trace_upload(upload, _visitor("s10", "ar")))
    assert t("error.upload.over_budget", "ar", size="0", budget="0")[:25] in html_text(too_big["status"])
    assert isinstance(too_big["trace"], type(gr.skip())) or too_big["trace"] == gr.skip()
    assert uploads.held_bytes() <= 2.5 * one  # nothing let go for a refused upload

    sessions.forget("s9")
    assert 0.99 * one <= uploads.held_bytes() <= 1.01 * one  # s8's alone
    sessions.forget("s8")
    assert uploads.held_bytes() == 0


def test_the_uploads_running_total_is_the_sum_of_what_is_held_through_replacements_lets_go_and_departures(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`hold` keeps one running total of the held uploads instead of re-adding every held upload for each one it lets
    go: after every upload (a session's first, its replacement, one letting go of others, one refused as over the
    budget) and every departure, the total is the sum of the held uploads' sizes, and each session holds at most one.
    (Before: no running total, `_total()` summed all held uploads at each pass of `hold`'s loop.)"""
    import random

    from test_hostile import make_trace

    from playground.app import uploads
    from playground.errors import PlaygroundError
    from playground.trace import Trace

    traces = [Trace.from_dict(make_trace(n)) for n in (3, 10, 40)]
    sizes = [uploads.footprint(trace) for trace in traces]
    monkeypatch.setenv("PLAYGROUND_UPLOADS_MB", str(2.2 * sizes[-1] / 2**20))  # room for two of the largest
    rng, names = random.Random(7), [f"total-{n}" for n in range(12)]
    refused, live, let_go = 0, set(), 0
    try:
        for turn in range(400):
            session = rng.choice(names)
            if turn % 97 == 0:  # larger than the whole budget: refused, nothing let go
                monkeypatch.setenv("PLAYGROUND_UPLOADS_MB", str(0.5 * sizes[0] / 2**20))
                with pytest.raises(PlaygroundError):
                    uploads.hold(traces[0], session)
                refused += 1
                monkeypatch.setenv("PLAYGROUND_UPLOADS_MB", str(2.2 * sizes[-1] / 2**20))
            elif rng.random() < 0.2:
                uploads.drop_session(session)
                live.discard(session)
            else:
                uploads.hold(rng.choice(traces), session)
                live.add(session)
            held = list(uploads._HELD.values())
            let_go += len(held) < len(live)
            assert uploads.held_bytes() == uploads._TOTAL == sum(upload.size for upload in held), turn
            assert uploads._TOTAL <= uploads.budget_bytes()
            assert len({upload.session for upload in held}) == len(held) == len(uploads._BY_SESSION)
        assert refused == 5 and let_go > 100  # uploads were let go to make room, often
    finally:
        for session in names:
            uploads.drop_session(session)
    assert uploads.held_bytes() == sum(upload.size for upload in uploads._HELD.values())


def html_text(markup: str) -> str:
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", markup))


@pytest.mark.server
def test_a_public_server_holds_its_visitors_uploads_within_its_budget(server: Any) -> None:
    """Four sessions upload a 2,000-step trace to a server with room for two (PLAYGROUND_UPLOADS_MB=5): the two
    latest step through theirs; the first two are told, in one line, that theirs was let go; a trace larger than the
    whole budget is refused in one line; the server keeps serving. (Before: every session kept its trace.)"""
    from test_hostile import make_trace

    from playground.i18n import t

    content = json.dumps(make_trace(2000)).encode()
    sessions = [uuid.uuid4().hex[:11] for _ in range(4)]
    for session in sessions:
        loaded = server.call("on_trace_upload", [server.upload("t.json", content)], session)
        assert loaded.success and "Loaded t.json" in loaded.text(), loaded
    for session in sessions[2:]:
        stepped = server.call("replay_view", [None, 5], session)
        assert stepped.success and "Step 5:" in stepped.text(), stepped
    for session in sessions[:2]:
        stepped = server.call("replay_view", [None, 5], session)
        assert not stepped.success, f"the first sessions' uploads are still held: {stepped.text()[:200]}"
        assert t("error.upload.let_go", "en", budget="5") in html_text(stepped.error or ""), stepped
    big = server.call("on_trace_upload", [server.upload("big.json", json.dumps(make_trace(8000)).encode())])
    assert "more than the 5 MB it keeps for all visitors' uploaded traces together" in (big.alert() or ""), big
    assert server.alive()


# --------------------------------------------------------------------------- the guard: our faults are ours


def _fails_with(fault: Exception) -> Any:
    def handler(value: Any, request: Any = None) -> Any:
        raise fault

    return handler


def _streams_then_fails_with(fault: Exception) -> Any:
    def handler(value: Any, request: Any = None) -> Any:
        yield "first"
        raise fault

    return handler


@pytest.mark.parametrize("fault", [NameError("name '_session_key' is not defined"),
                                   AttributeError("'Trace' object has no attribute 'session_key'")])
@pytest.mark.parametrize("make", [_fails_with, _streams_then_fails_with])
def test_a_fault_in_our_own_handler_is_answered_as_ours_with_its_traceback_logged(
        fault: Exception, make: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A NameError or AttributeError in a handler of ours (the removed `_session_key` alias of the first full run) is
    the playground's failure: one line saying so in the visitor's language, the traceback in the log. (Before: "one of
    its values is not what the page's controls send", blaming the visitor, and the log had one line without it.)"""
    import html
    import logging

    import gradio as gr

    from playground.app.guard import guarded
    from playground.i18n import t

    handler = guarded(make(fault))
    for lang in ("en", "ru", "ar"):
        caplog.clear()
        with caplog.at_level(logging.ERROR), pytest.raises(gr.Error) as answered:
            answer = handler(1, _visitor("s", lang))
            list(answer) if make is _streams_then_fails_with else answer
        assert html.escape(t("error.not_from_the_page", lang), quote=False) != answered.value.message
        ours = t("error.internal", lang, failed=t("error.what.request", lang))
        assert answered.value.message == html.escape(ours, quote=False), answered.value.message
        logged = [r for r in caplog.records if r.exc_info is not None and r.exc_info[1] is fault]
        assert logged and "Traceback" in caplog.text and type(fault).__name__ in caplog.text, caplog.text


@pytest.mark.parametrize("bad", [[], {"a": 1}, "x" * 5, None])
def test_a_visitors_bad_value_keeps_its_message(bad: Any) -> None:
    """A value no control sends, failing deep in a handler (a TypeError, KeyError, ValueError): still "one of its
    values is not what the page's controls send", in the visitor's language."""
    import html

    import gradio as gr

    from playground.app.guard import guarded
    from playground.i18n import t

    handler = guarded(lambda value, request=None: {"a": 1, 2: "b"}[value] + int(value))  # type: ignore[operator]
    for lang in ("en", "ru", "ar"):
        with pytest.raises(gr.Error) as answered:
            handler(bad, _visitor("s", lang))
        assert answered.value.message == html.escape(t("error.not_from_the_page", lang), quote=False)


def test_a_session_keeps_no_copy_of_its_last_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gradio's own call path (`Blocks.process_api` with a session) for a handler that reads a long text and answers a
    replay-sized window (3.6 MB of text, a real 512-step run's longest): with the playground's setting
    (`gradio_internals.keep_no_last_values`, as `launch` applies it) the session's state holds neither, and the
    deep-link route, the only reader, has nothing of them to save. (Before: Gradio copied both into the session's
    `config_values`, 7.2 MB of memory a session kept until it went, up to 300 sessions.)"""
    import gradio as gr
    from appserver import run_coroutine_apart
    from gradio import state_holder

    from playground.app import uploads
    from playground.compat import gradio_internals

    monkeypatch.setattr(state_holder.SessionState, "_update_value_in_config",
                        state_holder.SessionState._update_value_in_config)  # given back after the test
    window = "… word" * 600_000
    with gr.Blocks() as demo:
        asked, answered = gr.Textbox(), gr.HTML()
        asked.submit(lambda text: text + window, asked, answered)

    def kept_after_one_answer() -> int:
        state = state_holder.SessionState(demo)
        answer = run_coroutine_apart(demo.process_api(0, ["x" * 100_000], state=state, session_hash="s"))
        assert len(answer["data"][0]) == 100_000 + len(window)
        return uploads.footprint(list(state.components))

    before = kept_after_one_answer()
    assert before > 2 * len(window), before  # what Gradio keeps on its own: the window in UCS-2, and the question
    gradio_internals.keep_no_last_values()
    assert kept_after_one_answer() < 20_000
