"""Tools for AI agents: generate, compare and bench as plain functions returning JSON text.

With PLAYGROUND_MCP=1 the page registers them as API endpoints and launches Gradio's MCP server, which lists them as
MCP tools (name = function name, description and argument help = these docstrings). They use the engine and the
benchmark directly; bad input raises `PlaygroundError` with the same one-line messages as the page and the CLI.

A call's work ends with its agent: `end_with_agent` hands each MCP call a stop event that is set when Gradio's MCP
transport cancels the call (the agent disconnected); the call runs inside `engine.stopped_by` of that event. The same
functions called over Gradio's REST API (`/gradio_api/call/mcp_compare`, `/gradio_api/run/mcp_compare`) end with
their client's connection (`_client_connected`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import logging
import threading
import time
from typing import Any, Callable, Iterator

import anyio.from_thread
import gradio as gr

from ..bench import Aggregate, compare_on_prompt, load_prompts, parse_methods, run_bench
from ..compat import gradio_internals as internals
from ..errors import PlaygroundError, shorten
from ..gpu import gpu
from ..i18n import Message
from ..models import DEFAULT_TARGET
from ..request import DEFAULT_METHOD, MAX_NEW_TOKENS, default
from ..settings import get_settings
from .run_request import (MAX_NAME_CHARS, MAX_WORD_CHARS, build_request, check_text, max_prompt_chars,
                          parse_integer)

MAX_BENCH_PROMPTS_PER_CATEGORY = 3  # a tool call should end in minutes, not hours
MAX_TOOL_REPEATS = 5  # runs per method (and prompt), as the page's Compare slider
MAX_TOOL_METHODS_CHARS = 1_000  # the methods list as text (every method with its parameters is far shorter)
MAX_TOOL_RUNS = 200  # generations in one compare or bench call (prompts x methods x repeats), warm-ups aside
MAX_TOOL_MESSAGE_CHARS = 300  # an agent's error, as the page's toast (values in it are cut before that)
MAX_TOOL_CALLS = 3  # tool calls running at once (outside Gradio's queue: each holds a server thread while it runs)
CLIENT_WATCH_S = 0.25  # how often a REST call looks whether its client is still connected
logger = logging.getLogger(__name__)
SUMMARY_FIELDS = ("new_tokens", "steps", "drafted", "accepted", "acceptance_rate", "tokens_per_step", "elapsed_s",
                  "tokens_per_s")
AGGREGATE_FIELDS = ("label", "method", "category", "prompts", "new_tokens", "speedup", "acceptance_rate", "alpha",
                    "tokens_per_step", "tokens_per_s", "draft_ms_per_step", "verify_ms_per_step", "gamma", "c",
                    "verify_cost")


def _text(value: Any, name: str | Message, limit: int) -> str:
    """A tool's text argument checked as the page checks its own: text, at most `limit` characters, no lone
    surrogates (an agent's JSON may carry "\\ud800")."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise PlaygroundError.keyed("error.request.text", name=name, got=shorten(repr(value), 40))
    return check_text(value, name, limit)


def _bounded(value: Any, default_value: int, name: str, top: int) -> int:
    """A whole-number argument from 1 to `top` (our message names the bound)."""
    number = parse_integer(value, default_value, name)
    if not 1 <= number <= top:
        raise PlaygroundError.keyed("error.tool.between", name=name, limit=top, got=shorten(repr(value), 40))
    return number


def _job_size(runs: int) -> None:
    """A compare or bench call is refused before any work when it would make more than MAX_TOOL_RUNS generations."""
    if runs > MAX_TOOL_RUNS:
        raise PlaygroundError.keyed("error.tool.too_many_runs", n=runs, limit=MAX_TOOL_RUNS)


def _json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=1, ensure_ascii=False)


def _rows(aggregates: list[Aggregate]) -> list[dict[str, Any]]:
    return [{k: getattr(a, k) for k in AGGREGATE_FIELDS} for a in aggregates]


def generate(prompt: str = "", target: str = DEFAULT_TARGET, method: str = default("method"), assistant: str = "",
             params: str = "{}", max_new_tokens: int = MAX_NEW_TOKENS["run"], sample: bool = False,
             temperature: float = default("temperature"), seed: int = default("seed"), dtype: str = default("dtype"),
             preset: str = "") -> str:
    """Generate text with one assisted-decoding (speculative decoding) method of Hugging Face Transformers and
    report how drafting went: the text, how many drafted tokens the target accepted, tokens per verification step
    and speed.

    Args:
        prompt: The text to continue (instruct models get their chat template). Empty with a preset: the guide's prompt.
        target: The model that verifies: "bundled/gemma-3-270m" (offline default), a Hub id such as "HuggingFaceTB/SmolLM-1.7B", or a local directory.
        method: One of baseline, speculative, prompt_lookup, early_exit, mtp, mtp_drafter, universal.
        assistant: The drafting model for speculative (same tokenizer), universal (any tokenizer) or mtp_drafter; empty otherwise.
        params: The method's parameters as a JSON object under their generate() names, e.g. {"prompt_lookup_num_tokens": 5}.
        max_new_tokens: How many tokens to generate.
        sample: Sample instead of greedy decoding.
        temperature: Sampling temperature (with sample).
        seed: Random seed (with sample).
        dtype: auto, float32, bfloat16 or float16.
        preset: A Transformers guide example by name (e.g. "prompt-lookup-greedy-offline"); it sets everything but prompt and dtype.
    Returns:
        JSON with output_text, method, target, assistant, params, lossy, finish_reason and summary (new_tokens, steps, drafted, accepted, acceptance_rate, tokens_per_step, elapsed_s, tokens_per_s).
    """
    from ..engine import check_stopped, run  # torch and Transformers: imported by the first call, not with the page

    # The page's own checks (types, sizes, valid text, finite numbers), so an agent gets the page's messages.
    request = build_request(prompt=prompt, target=target or DEFAULT_TARGET, assistant=assistant or None, method=method,
                            params=params, max_new_tokens=max_new_tokens, sample=sample, temperature=temperature,
                            top_p=None, top_k=None, seed=seed, chat=None, dtype=dtype, preset=preset or None,
                            surface="run")
    trace = run(request, visitors_own=True)  # a visitor's own run: turns per step; it never gives way
    check_stopped()  # its agent left during the run: the run ended at its next step; no answer is due
    summary = {k: getattr(trace.summary, k) for k in SUMMARY_FIELDS}
    return _json({"output_text": trace.output_text, "method": trace.method, "target": trace.target,
                  "assistant": trace.assistant, "params": trace.params, "lossy": trace.lossy,
                  "finish_reason": trace.finish_reason, "summary": summary})


def compare(prompt: str, methods: str = DEFAULT_METHOD, target: str = DEFAULT_TARGET, assistant: str = "",
            max_new_tokens: int = MAX_NEW_TOKENS["compare"], repeats: int = 1, dtype: str = default("dtype")) -> str:
    """Compare drafting methods against plain decoding (baseline) on one prompt, warmed up and interleaved in the
    same process, and say which one pays off on this machine.

    Args:
        prompt: The text to continue.
        methods: Comma-separated methods with optional parameters after a colon, e.g. "prompt_lookup:prompt_lookup_num_tokens=5,universal"; baseline is always included.
        target: The model that verifies (see generate).
        assistant: The drafting model for methods that need one (speculative, universal, mtp_drafter).
        max_new_tokens: Tokens generated per run.
        repeats: Runs per method (medians are reported).
        dtype: auto, float32, bfloat16 or float16.
    Returns:
        JSON with rows (per method: speedup over baseline, acceptance_rate, tokens_per_step, tokens_per_s, draft and verify ms per step) and lossless (per method: whether its greedy output equals baseline's).
    """
    prompt = _text(prompt, Message.keyed("error.request.the_prompt"), max_prompt_chars())
    target, assistant = _text(target, "target", MAX_NAME_CHARS), _text(assistant, "assistant", MAX_NAME_CHARS)
    dtype = _text(dtype, "dtype", MAX_WORD_CHARS) or default("dtype")
    tokens = _bounded(max_new_tokens, MAX_NEW_TOKENS["compare"], "max_new_tokens", get_settings().max_new_tokens)
    reps = _bounded(repeats, 1, "repeats", MAX_TOOL_REPEATS)
    specs = parse_methods(_text(methods, "methods", MAX_TOOL_METHODS_CHARS), assistant or None)
    _job_size(len(specs) * reps)
    result = compare_on_prompt(prompt, specs, target=target or DEFAULT_TARGET, max_new_tokens=tokens,
                               dtype=dtype, repeats=reps, measure_overhead=False)
    return _json({"rows": _rows(result.aggregates),
                  "lossless": {label: check.ok for label, check in result.checks.items()}})


def bench(methods: str = DEFAULT_METHOD, categories: str = "", limit: int = 1, target: str = DEFAULT_TARGET,
          assistant: str = "", max_new_tokens: int = MAX_NEW_TOKENS["compare"], repeats: int = 1,
          dtype: str = default("dtype")) -> str:
    """Benchmark drafting methods against baseline on Spec-Bench's prompts (480 questions in 13 categories such as
    summarization, rag, qa, translation, coding) and report the speedup per category.

    Args:
        methods: Comma-separated methods with optional parameters, e.g. "prompt_lookup:prompt_lookup_num_tokens=5,universal".
        categories: Comma-separated Spec-Bench categories; empty for all 13.
        limit: Prompts per category (1 to 3, so that a call ends in minutes).
        target: The model that verifies (see generate).
        assistant: The drafting model for methods that need one.
        max_new_tokens: Tokens generated per run.
        repeats: Runs per method and prompt (medians are used).
        dtype: auto, float32, bfloat16 or float16.
    Returns:
        JSON with rows (per method and category, plus "all": speedup, acceptance_rate, tokens_per_step, tokens_per_s, the theory's alpha/gamma/c inputs) and errors (runs that failed or broke losslessness).
    """
    per_category = _bounded(limit, 1, "limit", MAX_BENCH_PROMPTS_PER_CATEGORY)
    tokens = _bounded(max_new_tokens, MAX_NEW_TOKENS["compare"], "max_new_tokens", get_settings().max_new_tokens)
    reps = _bounded(repeats, 1, "repeats", MAX_TOOL_REPEATS)
    target, assistant = _text(target, "target", MAX_NAME_CHARS), _text(assistant, "assistant", MAX_NAME_CHARS)
    dtype = _text(dtype, "dtype", MAX_WORD_CHARS) or default("dtype")
    specs = parse_methods(_text(methods, "methods", MAX_TOOL_METHODS_CHARS), assistant or None)
    chosen = [c.strip() for c in _text(categories, "categories", MAX_TOOL_METHODS_CHARS).split(",") if c.strip()]
    prompts = load_prompts("spec-bench", chosen or None, per_category)
    _job_size(len(prompts) * len(specs) * reps)
    result = run_bench(prompts, specs, target=target or DEFAULT_TARGET,
                       max_new_tokens=tokens, dtype=dtype, repeats=reps, measure_overhead=False)
    return _json({"rows": _rows(result.aggregates),
                  "errors": [{"label": r.label, "question_id": r.question_id, "error": r.error}
                             for r in result.errors]})


TOOLS = (generate, compare, bench)


class AgentGone(threading.Event):
    """Set when an MCP call's agent disconnected; `at` is when (time.monotonic)."""

    at = 0.0

    def leave(self) -> None:
        self.at = time.monotonic()
        self.set()


# The stop event of the MCP call this code runs for: set by `end_with_agent`'s handler, read in the tool's thread
# (anyio copies the context into the worker thread that runs a Gradio function).
_AGENT_GONE: contextvars.ContextVar[AgentGone | None] = contextvars.ContextVar("agent_gone", default=None)
_CALLS = threading.BoundedSemaphore(MAX_TOOL_CALLS)
_LEFT_BEHIND: set[asyncio.Future[Any]] = set()  # calls whose agent left, until their work has ended


def _client_connected() -> Callable[[], bool] | None:
    """For a call that came over Gradio's REST API, whether its client is still connected; None where nothing says
    (no Gradio call, or one Gradio cannot tie to a connection).

    Gradio 6.31 serves `/gradio_api/call/<name>` (and the raw protocol's `/queue/join`) through its queue even for a
    `queue=False` function: the POST only queues the call, its answer goes out on the client's SSE stream (`GET
    /gradio_api/call/<name>/<event_id>`), and when that connection closes Starlette cancels the stream, whose handler
    marks the queue's event no longer `alive` (`Queue.clean_events`). `/gradio_api/run/<name>` (allowed for a
    `queue=False` function) calls it in the POST's own task: that request sees its connection close
    (`Request.is_disconnected`, asked on the server's event loop)."""
    blocks, event_id, gr_request = internals.call_context()
    queue = internals.queue_of(blocks, None)
    if queue is not None and event_id:
        event = next((e for e in internals.running_events(queue) if internals.event_id(e) == event_id), None)
        if event is not None:
            return lambda: bool(event.alive)
    request = getattr(gr_request, "request", None)  # the call's HTTP request (gr.Request's)
    if request is None or not hasattr(request, "is_disconnected"):
        return None
    try:
        loop = anyio.from_thread.run_sync(asyncio.get_running_loop)  # Gradio runs the function in an anyio worker
    except RuntimeError:
        return None

    def connected() -> bool:
        try:
            return not asyncio.run_coroutine_threadsafe(request.is_disconnected(), loop).result(timeout=5)
        except Exception:  # noqa: BLE001  (a busy or closing loop says nothing about the client)
            return True

    return connected


@contextlib.contextmanager
def _stop_event() -> Iterator[tuple[AgentGone, str]]:
    """The call's stop event and who leaving sets it: the MCP call's (`end_with_agent`), else one set by a watcher
    thread once a REST call's client is no longer connected (`_client_connected`)."""
    gone = _AGENT_GONE.get()
    if gone is not None:
        yield gone, "agent"
        return
    gone = AgentGone()
    try:
        connected = _client_connected()
    except Exception:  # noqa: BLE001  (Gradio's internals moved: the call runs, held by the bounds alone)
        logger.warning("a REST call of an MCP function could not be tied to its client", exc_info=True)
        connected = None
    if connected is None:  # nothing ties it to a connection: the bounds (MAX_TOOL_RUNS, MAX_TOOL_CALLS) hold it
        yield gone, "client"
        return
    done = threading.Event()

    def watch() -> None:
        while not done.wait(CLIENT_WATCH_S):
            if not connected():
                gone.leave()
                return

    watcher = threading.Thread(target=watch, name="playground-api-client-watch", daemon=True)
    watcher.start()
    try:
        yield gone, "client"
    finally:
        done.set()  # the watcher ends at its next look (not awaited: the answer goes out now)


def _tool(fn: Callable[..., Any]) -> Callable[..., Any]:
    """An agent's tool as an endpoint: its name, docstring and signature kept; failures become one-line errors; its
    runs end when its agent leaves (`end_with_agent`), or called over the REST API, when its client's connection
    closes (`_stop_event`); at most MAX_TOOL_CALLS run at once."""
    @functools.wraps(fn)
    def tool(*args: Any, **kwargs: Any) -> Any:
        from ..engine import JobStopped, stopped_by, user_message

        if not _CALLS.acquire(blocking=False):
            raise gr.Error(str(Message.keyed("error.tool.busy", limit=MAX_TOOL_CALLS)))
        stopped = False
        with _stop_event() as (gone, who):
            try:
                with stopped_by(gone):
                    return fn(*args, **kwargs)
            except JobStopped:  # nobody reads the answer: the agent (or REST client) has gone
                stopped = True
                raise gr.Error(str(Message.keyed("error.tool.agent_left")), print_exception=False) from None
            except Exception as exc:  # our message (its values already cut), never longer than a toast's; no
                # traceback in the log for a refused input (a visitor could fill it): user_message logs a real failure's
                raise gr.Error(shorten(user_message(exc), MAX_TOOL_MESSAGE_CHARS), print_exception=False) from None
            finally:
                _CALLS.release()
                if gone.is_set():  # tests/test_hostile.py and tests/measure/hostile_sweep.py read this line
                    how = "stopped" if stopped else "finished its work"
                    logger.info("MCP %s %s %.1f s after its %s left", fn.__name__, how, time.monotonic() - gone.at,
                                who)

    return gpu(tool)


def register(page_handler: Callable[..., Any]) -> None:
    """Register the tools as API endpoints (call first inside the page's `gr.Blocks`, so they keep their plain
    names: generate, compare, bench). The page's own streaming handler stays an API endpoint but is no MCP tool
    (Gradio lists only functions whose `_mcp_type`, if set, is "tool"): its outputs are HTML for the page.

    Outside Gradio's queue (`queue=False`): Gradio 6.31's MCP server then calls the function in the MCP request's
    own task (`blocks.process_api`) instead of through a loopback queue client, so `end_with_agent` can reach it."""
    for tool in TOOLS:
        gr.api(_tool(tool), api_name=f"mcp_{tool.__name__}", queue=False)
    internals.not_an_mcp_tool(page_handler)


def end_with_agent(demo: gr.Blocks) -> bool:
    """Make every MCP tool call stop when its agent disconnects (call after `launch`, which builds the MCP server).

    When an agent's connection closes, the MCP transport cancels the call's task (mcp's `Server.run` cancels its
    in-flight handlers once the stream ends). Gradio's call awaits the function's worker thread, which a
    cancellation cannot interrupt, so this wraps the server's call-tool handler: the call runs in a task of its own
    that carries a stop event (`_AGENT_GONE`); a cancellation sets the event, and the tool's runs end at their next
    decoding step (`engine.stopped_by`). False when the page serves no MCP."""
    handlers = internals.mcp_request_handlers(demo)
    if handlers is None:
        return False
    from mcp import types

    inner = handlers[types.CallToolRequest]

    async def call_tool(request: Any) -> Any:
        gone = AgentGone()
        token = _AGENT_GONE.set(gone)
        try:
            call = asyncio.ensure_future(inner(request))  # its context (and the thread's) holds `gone`
        finally:
            _AGENT_GONE.reset(token)
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            gone.leave()
            _LEFT_BEHIND.add(call)  # kept until it ends (its runs stop at their next step); its answer is dropped
            call.add_done_callback(_forget)
            raise

    handlers[types.CallToolRequest] = call_tool
    return True


def _forget(call: asyncio.Future[Any]) -> None:
    _LEFT_BEHIND.discard(call)
    if not call.cancelled():
        call.exception()  # retrieved: its error went to nobody, on purpose
