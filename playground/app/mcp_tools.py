"""Tools for AI agents: generate, compare and bench as plain functions returning JSON text.

With PLAYGROUND_MCP=1 the page registers them as API endpoints and launches Gradio's MCP server, which lists them as
MCP tools (name = function name, description and argument help = these docstrings). They use the engine and the
benchmark directly; bad input raises `PlaygroundError` with the same one-line messages as the page and the CLI.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Callable

import gradio as gr

from ..bench import Aggregate, BenchError, compare_on_prompt, load_prompts, parse_methods, run_bench
from ..errors import PlaygroundError
from ..gpu import gpu
from ..models import DEFAULT_TARGET
from ..presets import get_preset
from ..request import DEFAULT_METHOD, MAX_NEW_TOKENS, default, new_request
from ..settings import get_settings

MAX_BENCH_PROMPTS_PER_CATEGORY = 3  # a tool call should end in minutes, not hours
SUMMARY_FIELDS = ("new_tokens", "steps", "drafted", "accepted", "acceptance_rate", "tokens_per_step", "elapsed_s",
                  "tokens_per_s")
AGGREGATE_FIELDS = ("label", "method", "category", "prompts", "new_tokens", "speedup", "acceptance_rate",
                    "tokens_per_step", "tokens_per_s", "draft_ms_per_step", "verify_ms_per_step", "gamma", "c",
                    "verify_cost")


def _params(params: str) -> dict[str, Any]:
    try:
        value = json.loads(params or "{}")
    except json.JSONDecodeError as exc:
        raise PlaygroundError(f"params must be a JSON object, e.g. {{\"prompt_lookup_num_tokens\": 5}}: {exc}") from None
    if not isinstance(value, dict):
        raise PlaygroundError("params must be a JSON object, e.g. {\"prompt_lookup_num_tokens\": 5}")
    return value


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
    from ..engine import run  # torch and Transformers: imported by the first call, not with the page

    if preset:
        request = get_preset(preset).request(prompt, dtype=dtype)
    else:
        request = new_request(prompt, target=target or DEFAULT_TARGET, method=method, assistant=assistant or None,
                              params=_params(params), max_new_tokens=int(max_new_tokens), sample=bool(sample),
                              temperature=float(temperature), seed=int(seed), dtype=dtype)
    trace = run(request)
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
    specs = parse_methods(methods, assistant or None)
    result = compare_on_prompt(prompt, specs, target=target or DEFAULT_TARGET, max_new_tokens=int(max_new_tokens),
                               dtype=dtype, repeats=int(repeats), measure_overhead=False)
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
    if not 1 <= int(limit) <= MAX_BENCH_PROMPTS_PER_CATEGORY:
        raise BenchError(f"limit must be between 1 and {MAX_BENCH_PROMPTS_PER_CATEGORY} prompts per category; got {limit}")
    if not 1 <= int(max_new_tokens) <= get_settings().max_new_tokens:
        raise BenchError(f"max_new_tokens must be between 1 and {get_settings().max_new_tokens}; got {max_new_tokens}")
    chosen = [c.strip() for c in categories.split(",") if c.strip()] or None
    prompts = load_prompts("spec-bench", chosen, int(limit))
    result = run_bench(prompts, parse_methods(methods, assistant or None), target=target or DEFAULT_TARGET,
                       max_new_tokens=int(max_new_tokens), dtype=dtype, repeats=int(repeats), measure_overhead=False)
    return _json({"rows": _rows(result.aggregates),
                  "errors": [{"label": r.label, "question_id": r.question_id, "error": r.error}
                             for r in result.errors]})


TOOLS = (generate, compare, bench)


def _tool(fn: Callable[..., Any]) -> Callable[..., Any]:
    """An agent's tool as an endpoint: its name, docstring and signature kept; failures become one-line errors."""
    @functools.wraps(fn)
    def tool(*args: Any, **kwargs: Any) -> Any:
        from ..engine import user_message

        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise gr.Error(user_message(exc)) from exc

    return gpu(tool)


def register(page_handler: Callable[..., Any]) -> None:
    """Register the tools as API endpoints (call first inside the page's `gr.Blocks`, so they keep their plain
    names: generate, compare, bench). The page's own streaming handler stays an API endpoint but is no MCP tool
    (Gradio lists only functions whose `_mcp_type`, if set, is "tool"): its outputs are HTML for the page."""
    for tool in TOOLS:
        gr.api(_tool(tool), api_name=f"mcp_{tool.__name__}")
    page_handler._mcp_type = "page"  # type: ignore[attr-defined]
