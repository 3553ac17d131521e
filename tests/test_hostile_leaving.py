"""Work ends with its visitor, and a long job gives way: an MCP call whose agent disconnects, or an MCP function
called over REST whose client leaves, stops on the public server (`test_hostile`'s configuration with its MCP tools
on); inside the engine, a stopped job starts nothing more and a long job's run makes room for a visitor's.

Split from `test_hostile.py` (the hostile inputs, every endpoint), whose helpers it reads.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterator

import pytest

from appserver import LOCAL_TLS
from test_hostile import PROMPT, WAIT_S, Server, _http_request, _wait_for_log, _worker_threads
from test_hostile import models  # noqa: F401  (the module's allowed directory, as test_hostile's server has it)
from test_hostile import public_server

httpx = pytest.importorskip("httpx")
pytestmark = pytest.mark.server  # one real app with MCP on; the engine's tests load the tiny models


@pytest.fixture(scope="module")
def mcp_server(models: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The same public server with its MCP tools on (PLAYGROUND_MCP=1)."""
    with public_server(models, tmp_path_factory, "hostile-mcp-server", {"PLAYGROUND_MCP": "1"}) as served:
        yield served


async def _call_and_leave(url: str, tool: str, arguments: dict[str, Any], server: Server) -> None:
    """Call an MCP tool from a real MCP client and, once the server generates, drop the connection."""
    import asyncio

    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def call() -> None:
        async with streamable_http_client(url) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await session.call_tool(tool, arguments)

    task = asyncio.ensure_future(call())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while _worker_threads(server) == 0:  # the call's first generation has begun
        assert not task.done(), f"the {tool} call ended before it generated: {task.exception()!r}"
        assert loop.time() < deadline, f"the {tool} call never started generating"
        await asyncio.sleep(0.05)
    task.cancel()  # the client goes away: its HTTP connection closes
    try:
        await task
    except BaseException:  # noqa: BLE001  (the cancellation, or the transport's own error on the way out)
        pass


def _run_apart(coroutine: Any) -> Any:
    """`asyncio.run(coroutine)` in a thread of its own: a test earlier in the session (Playwright's sync API) can leave
    an event loop running in the main thread, where asyncio.run refuses to start."""
    import asyncio
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


@pytest.mark.slow
@pytest.mark.parametrize("tool, arguments", [
    ("compare", {"prompt": PROMPT, "methods": "prompt_lookup:prompt_lookup_num_tokens=3", "max_new_tokens": 448,
                 "repeats": 5, "dtype": "float32"}),
    ("generate", {"prompt": PROMPT, "method": "baseline", "max_new_tokens": 448, "dtype": "float32"}),
], ids=["compare", "generate"])
def test_an_mcp_call_stops_when_its_agent_disconnects(mcp_server: Server, models: dict[str, str], tool: str,
                                                      arguments: dict[str, Any]) -> None:
    """A real MCP client starts a long tool call (Compare: 12 generations of 448 tokens; generate: 448 tokens) and
    disconnects once the server generates: the call stops (the server logs that the work ended, cut short, after
    its agent left), its generation threads end, and the next call is answered."""
    import time

    pytest.importorskip("mcp", reason="the gradio[mcp] extra (requirements.txt) is not installed")
    url = f"{mcp_server.url}gradio_api/mcp/"
    start = len(mcp_server.log.read_bytes())
    _run_apart(_call_and_leave(url, tool, {**arguments, "target": models["target"]}, mcp_server))
    line = _wait_for_log(mcp_server, f"MCP {tool} ", start, within_s=WAIT_S)
    assert line is not None, f"the {tool} call kept its work going after its agent left"
    assert f"MCP {tool} stopped" in line, line  # cut short, not run to its end
    # The tool's thread logs as JobStopped reaches it; the generation's worker ends at its next step, a moment later
    # on a busy machine (CI once counted 2 still there): wait for it as the REST client's test does.
    deadline = time.monotonic() + 30
    while _worker_threads(mcp_server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _worker_threads(mcp_server) == 0

    async def short_call() -> Any:
        from mcp.client.session import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        async with streamable_http_client(url) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await session.call_tool("generate", {"prompt": PROMPT, "target": models["target"],
                                                            "max_new_tokens": 4, "dtype": "float32"})

    answered = _run_apart(short_call())
    assert not answered.isError, answered.content
    assert json.loads(answered.content[0].text)["summary"]["new_tokens"] == 4


@pytest.mark.slow
@pytest.mark.parametrize("route", ["call", "run", "join"])
def test_an_mcp_function_called_over_rest_stops_when_its_client_leaves(mcp_server: Server, models: dict[str, str],
                                                                       route: str) -> None:
    """The MCP functions are REST endpoints too. A long compare (12 generations of 448 tokens) started over the REST
    API, as `/gradio_api/call/mcp_compare` (POST, then the SSE stream of its answer), `/gradio_api/run/mcp_compare`
    (one POST) or the raw protocol's queue (join, then the session's data stream), stops once its client drops the
    connection: the server logs the call cut short after its client
    left, its generation threads end, and the next call is answered."""
    import time

    url = mcp_server.url
    data = [PROMPT, "prompt_lookup:prompt_lookup_num_tokens=3", models["target"], "", 448, 5, "float32"]
    start = len(mcp_server.log.read_bytes())
    if route == "call":
        queued = httpx.post(f"{url}gradio_api/call/mcp_compare", json={"data": data}, timeout=30, verify=LOCAL_TLS)
        assert queued.status_code == 200, queued.text
        sock = _http_request(url, "GET", f"/gradio_api/call/mcp_compare/{queued.json()['event_id']}")
    elif route == "run":
        sock = _http_request(url, "POST", "/gradio_api/run/mcp_compare", {"data": data})
    else:
        session = uuid.uuid4().hex[:11]
        body = {"data": data, "fn_index": mcp_server.deps["mcp_compare"]["id"], "session_hash": session,
                "event_data": None, "trigger_id": None}
        assert httpx.post(f"{url}gradio_api/queue/join", json=body, timeout=30, verify=LOCAL_TLS).status_code == 200
        sock = _http_request(url, "GET", f"/gradio_api/queue/data?session_hash={session}")
    try:
        deadline = time.monotonic() + WAIT_S
        while _worker_threads(mcp_server) == 0:  # the call's first generation has begun
            assert time.monotonic() < deadline, "the compare never started generating"
            time.sleep(0.05)
    finally:
        sock.close()  # the client leaves
    line = _wait_for_log(mcp_server, "MCP compare ", start, within_s=30)
    assert line is not None, "the compare kept its work going after its REST client left"
    assert "MCP compare stopped" in line and "after its client left" in line, line
    deadline = time.monotonic() + 30
    while _worker_threads(mcp_server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _worker_threads(mcp_server) == 0
    answered = httpx.post(f"{url}gradio_api/run/mcp_generate",
                          json={"data": [PROMPT, models["target"], "baseline", "", "{}", 4, False, 1.0, 0, "float32", ""]},
                          timeout=WAIT_S, verify=LOCAL_TLS)
    assert answered.status_code == 200, answered.text
    assert json.loads(answered.json()["data"][0])["summary"]["new_tokens"] == 4


def test_a_stopped_job_ends_its_runs_and_starts_no_more(tiny_models: dict[str, str]) -> None:
    """The engine's side of leaving: inside a stopped job, the plain check's `generate()` ends at its first step
    and says so, and no further run starts (what the page's handlers rely on once Gradio closes them)."""
    import threading

    from playground.engine import JobStopped, LiveRun, plain_generate, prepare, stopped_by
    from playground.request import new_request

    prepared = prepare(new_request(PROMPT, target=tiny_models["target"], method="prompt_lookup", max_new_tokens=64,
                                   dtype="float32"))
    left = threading.Event()
    with stopped_by(left):
        assert len(plain_generate(prepared)[0]) == 64  # a job whose visitor stays runs in full
        live = LiveRun(prepared)
        for _ in live:  # the visitor leaves during the run: it ends at its next step
            left.set()
        assert live.trace.finish_reason == "stopped" and len(live.trace.output_ids) < 64, live.trace.finish_reason
        with pytest.raises(JobStopped):
            plain_generate(prepared)
        with pytest.raises(JobStopped):
            LiveRun(prepared).run()
    assert LiveRun(prepared).run().finish_reason in ("eos", "length")  # outside the job: untouched


def test_a_visitors_run_goes_before_a_long_jobs_next_run() -> None:
    """Fair share: while a visitor's own run waits for (or holds) its models, a long job's next run does not start;
    it starts once that run is done, and a job whose visitor left stops waiting."""
    import threading

    from playground.engine import JobStopped
    from playground.engine.turns import _SCHEDULER

    job, started, release, holding = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    outcome: list[str] = []

    def long_jobs_next_run() -> None:
        try:
            with _SCHEDULER.turn(job):
                started.set()
                outcome.append("ran")
        except JobStopped:
            outcome.append("stopped")

    def visitors_run() -> None:
        with _SCHEDULER.turn(None):
            holding.set()
            release.wait(30)

    visitor = threading.Thread(target=visitors_run)
    visitor.start()
    assert holding.wait(30)
    background = threading.Thread(target=long_jobs_next_run)
    background.start()
    assert not started.wait(1.0), "a long job's run started while a visitor's run held its turn"
    release.set()
    visitor.join(30)
    background.join(30)
    assert outcome == ["ran"]
    # The same wait, left: the job stops waiting instead of running.
    release.clear()
    holding.clear()
    visitor = threading.Thread(target=visitors_run)
    visitor.start()
    assert holding.wait(30)
    outcome.clear()
    job.set()
    background = threading.Thread(target=long_jobs_next_run)
    background.start()
    background.join(30)
    release.set()
    visitor.join(30)
    assert outcome == ["stopped"]


def test_a_visitors_short_run_goes_between_the_steps_of_a_long_jobs_run(tiny_models: dict[str, str]) -> None:
    """Fair share inside a generation: a long job's 448-token run (a Compare's, a Tune's baseline) that has begun
    gives way at its next step to a visitor's short run, which streams its tokens before the long run ends; the long
    run then starts again and its output is the undisturbed run's, token for token."""
    import threading

    from playground.engine import LiveRun, prepare, stopped_by
    from playground.request import new_request

    long_run = prepare(new_request(PROMPT, target=tiny_models["target"], method="prompt_lookup", max_new_tokens=448,
                                   dtype="float32"))
    short_run = prepare(new_request(PROMPT, target=tiny_models["target"], max_new_tokens=8, dtype="float32"))
    undisturbed = LiveRun(long_run).run().output_ids
    assert len(undisturbed) > 100  # long enough that the visitor's run comes while it generates
    events: list[str] = []
    box: dict[str, Any] = {}
    began = threading.Event()

    def long_job() -> None:
        with stopped_by(threading.Event()):  # a long job's run, as Compare's and Tune's are
            box["live"] = live = LiveRun(long_run)
            began.set()
            box["trace"] = live.run()
            events.append("long run ended")

    worker = threading.Thread(target=long_job)
    worker.start()
    assert began.wait(WAIT_S)
    while not box["live"].generated_steps:  # its first step is done: the long run is generating
        assert worker.is_alive(), "the long run ended before it was seen generating"
        threading.Event().wait(0.001)
    for _ in LiveRun(short_run):
        events.append("short step")
    events.append("short run ended")
    worker.join(WAIT_S)
    assert events.index("short step") < events.index("long run ended"), events[:3]
    assert box["live"].gave_way >= 1
    assert box["trace"].output_ids == undisturbed and box["trace"].finish_reason == "length"
    assert len(box["trace"].steps) == len(LiveRun(long_run).run().steps)  # no step of the void attempt kept


def test_a_long_jobs_pass_gives_way_within_one_forward_and_is_redone(tiny_models: dict[str, str]) -> None:
    """Tune's passes (one forward a token, holding the models) give way within one forward to a visitor's run and
    are redone after it: the visitor's run streams before the pass ends, the pass's result is its undisturbed one."""
    import threading

    import torch

    from playground.engine import LiveRun, give_way, prepare, redone_after_giving_way, stopped_by, turn
    from playground.request import new_request

    short_run = prepare(new_request(PROMPT, target=tiny_models["target"], max_new_tokens=8, dtype="float32"))
    model = short_run.target.model
    events: list[str] = []
    attempts: list[int] = []
    forwarding = threading.Event()

    def one_pass() -> list[int]:  # greedy, one forward a token without a cache: Tune's drafter pass, simplified
        attempts.append(len(attempts))
        ids = short_run.input_ids[0].tolist()
        with turn(), short_run.target.lock, torch.inference_mode():
            for _ in range(200):
                give_way()
                logits = model(input_ids=torch.tensor([ids])).logits
                ids.append(int(logits[0, -1].argmax()))
                forwarding.set()
        return ids

    def long_job() -> None:
        with stopped_by(threading.Event()):
            box.append(redone_after_giving_way(one_pass))
            events.append("pass ended")

    box: list[list[int]] = []
    worker = threading.Thread(target=long_job)
    worker.start()
    assert forwarding.wait(WAIT_S)
    for _ in LiveRun(short_run):
        events.append("short step")
    worker.join(WAIT_S)
    assert events.index("short step") < events.index("pass ended"), events[:3]
    assert len(attempts) >= 2  # it gave way and was redone
    with torch.inference_mode():
        ids = short_run.input_ids[0].tolist()
        for _ in range(200):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    assert box == [ids]
