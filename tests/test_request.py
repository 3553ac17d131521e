"""One request builder, its defaults defined once: every surface builds a `RunRequest` through `new_request` and
takes the defaults `playground.request` names (a surface that differs on purpose says so with a named length)."""

from __future__ import annotations

import inspect

import pytest

from playground import request as requests_module
from playground.cli import build_parser, request_from_args
from playground.engine import RunRequest as EngineRunRequest
from playground.presets import UNSET_LENGTH, get_preset
from playground.request import DEFAULT_METHOD, MAX_NEW_TOKENS, RunRequest, Surface, default, new_request


def test_the_builder_fills_in_the_defaults() -> None:
    assert EngineRunRequest is RunRequest  # the engine takes the one request type
    built = new_request("x")
    assert built == RunRequest(prompt="x")
    assert built.max_new_tokens == MAX_NEW_TOKENS["run"] == 64
    assert (built.method, built.target, built.dtype, built.sample, built.seed, built.chat) == (
        "baseline", "bundled/gemma-3-270m", "auto", False, 0, None)
    assert default("params") == {} and default("params") is not default("params")  # a fresh dict each time


@pytest.mark.parametrize(("surface", "tokens"), [("run", 64), ("page", 64), ("compare", 32), ("bench", 48),
                                                  ("bench_warm_up", 16), ("guide", 20), ("preload_warm_up", 4)])
def test_each_surface_has_its_named_length(surface: Surface, tokens: int) -> None:
    assert new_request("x", surface=surface).max_new_tokens == MAX_NEW_TOKENS[surface] == tokens
    assert new_request("x", surface=surface, max_new_tokens=None).max_new_tokens == tokens
    assert new_request("x", surface=surface, max_new_tokens=7).max_new_tokens == 7


def test_but_copies_with_changes() -> None:
    original = new_request("x", params={"prompt_lookup_num_tokens": 3}, method="prompt_lookup")
    changed = original.but(method="baseline", params={})
    assert (changed.method, changed.params, changed.prompt) == ("baseline", {}, "x")
    assert (original.method, original.params) == ("prompt_lookup", {"prompt_lookup_num_tokens": 3})


def test_the_surfaces_read_the_defaults() -> None:
    """The CLI's flags, the API's and the agents' parameters and the page's controls start at the named defaults."""
    run = vars(build_parser().parse_args(["run", "--prompt", "x"]))
    assert run["max_new_tokens"] == MAX_NEW_TOKENS["run"] and run["method"] == default("method")
    assert request_from_args(build_parser().parse_args(["run", "--prompt", "x"])) == new_request("x")
    bench = vars(build_parser().parse_args(["bench"]))
    assert bench["max_new_tokens"] == MAX_NEW_TOKENS["bench"] and bench["dtype"] == default("dtype")

    from playground.app import compare_tab, generate_tab, mcp_tools, run_request
    from playground.bench import compare_on_prompt, run_bench

    def defaults(fn):
        return {k: p.default for k, p in inspect.signature(fn).parameters.items()}

    assert defaults(mcp_tools.generate)["max_new_tokens"] == MAX_NEW_TOKENS["run"]
    assert defaults(mcp_tools.generate)["method"] == default("method")
    assert defaults(mcp_tools.compare)["max_new_tokens"] == defaults(mcp_tools.bench)["max_new_tokens"] == 32
    assert defaults(compare_on_prompt)["max_new_tokens"] == defaults(run_bench)["max_new_tokens"] == 48
    assert defaults(generate_tab.generate)["max_new_tokens"] == MAX_NEW_TOKENS["page"]
    assert run_request.DEFAULT_METHOD == compare_tab.DEFAULT_METHOD == DEFAULT_METHOD == "prompt_lookup"

    nothing = (None,) * 11
    page = run_request.build_request("x", *nothing, None)
    assert page == new_request("x", method=DEFAULT_METHOD)  # the page starts on its own method, 64 tokens
    assert run_request.build_request("x", *nothing[:4], "", *nothing[5:], None).max_new_tokens == 64  # type: ignore[arg-type]
    compare = run_request.build_request("x", *nothing, None, surface="compare")
    assert compare.max_new_tokens == MAX_NEW_TOKENS["compare"]
    with pytest.raises(ValueError, match="max_new_tokens must be a whole number"):
        run_request.build_request("x", *nothing[:4], "2.5", *nothing[5:], None)  # type: ignore[arg-type]


def test_presets_build_through_the_builder() -> None:
    preset = get_preset("prompt-lookup-greedy-offline")
    assert preset.request("", dtype="float32") == RunRequest(**preset.request_fields(dtype="float32"))
    assert UNSET_LENGTH == MAX_NEW_TOKENS["guide"] == 20


def test_no_surface_builds_a_request_by_hand() -> None:
    """`RunRequest(` is called only by the builder: a new surface takes the defaults, not its own copy of them."""
    from pathlib import Path

    package = Path(requests_module.__file__).parent
    callers = sorted(str(p.relative_to(package)) for p in package.rglob("*.py") if "RunRequest(" in p.read_text()
                     and p.name != "request.py")
    assert callers == []


def test_the_agents_tools_document_every_precision_choice() -> None:
    """The MCP tools' argument help (a docstring: Gradio reads it as written) names exactly the choices listed in
    `precision.DTYPE_CHOICES`."""
    from playground.app import mcp_tools
    from playground.precision import DTYPE_CHOICES

    expected = ", ".join(DTYPE_CHOICES[:-1]) + " or " + DTYPE_CHOICES[-1] + "."
    for tool in mcp_tools.TOOLS:
        lines = [line.strip() for line in (tool.__doc__ or "").splitlines() if line.strip().startswith("dtype:")]
        assert lines == [f"dtype: {expected}"], tool.__name__
        assert inspect.signature(tool).parameters["dtype"].default == default("dtype")
