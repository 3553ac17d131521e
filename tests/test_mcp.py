"""PLAYGROUND_MCP=1: the real app also serves MCP; a real MCP client lists the tools and calls one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from appserver import free_port, run_coroutine_apart, start_app, stop_app

mcp = pytest.importorskip("mcp", reason="the gradio[mcp] extra (requirements.txt) is not installed")
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

PROMPT = "One, two, three, four, five. One, two, three,"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    port = free_port()
    log = tmp_path_factory.mktemp("mcp") / "server.log"
    proc = start_app(port, log, {"PLAYGROUND_MCP": "1", "PLAYGROUND_PRELOAD": "0"})
    yield f"http://127.0.0.1:{port}/gradio_api/mcp/"
    stop_app(proc)


async def _session(url: str, work: Any) -> Any:
    async with streamable_http_client(url) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await work(session)


@pytest.mark.server
@pytest.mark.slow
def test_mcp_lists_generate_compare_bench_and_runs_generate(server: str, tiny_models: dict[str, str]) -> None:
    async def work(session: ClientSession) -> Any:
        tools = (await session.list_tools()).tools
        called = await session.call_tool("generate", {
            "prompt": PROMPT, "target": tiny_models["target"], "method": "prompt_lookup",
            "params": '{"prompt_lookup_num_tokens": 3}', "max_new_tokens": 8, "dtype": "float32"})
        refused = await session.call_tool("generate", {"prompt": "", "target": tiny_models["target"]})
        return tools, called, refused

    tools, called, refused = run_coroutine_apart(_session(server, work))
    by_name = {tool.name: tool for tool in tools}
    assert set(by_name) == {"generate", "compare", "bench"}  # the page's HTML-streaming handler is not a tool
    assert "assisted-decoding" in by_name["generate"].description
    assert "Spec-Bench" in by_name["bench"].description and "baseline" in by_name["compare"].description
    schema = by_name["generate"].inputSchema["properties"]
    assert {"prompt", "target", "method", "assistant", "params", "preset"} <= set(schema)
    assert "prompt_lookup_num_tokens" in schema["params"]["description"]

    assert not called.isError, called.content
    result = json.loads("".join(getattr(part, "text", "") for part in called.content))
    assert result["method"] == "prompt_lookup" and result["params"]["prompt_lookup_num_tokens"] == 3
    assert result["summary"]["new_tokens"] == 8 and result["finish_reason"] == "length"
    assert refused.isError
    assert "the prompt is empty" in "".join(getattr(part, "text", "") for part in refused.content)


def test_mcp_is_off_by_default(tmp_path: Path) -> None:
    from playground.app import page

    demo = page.build_ui()
    assert list(demo.get_api_info()["named_endpoints"]) == ["/generate"]


def test_compare_and_bench_tools_report_speedups(tiny_models: dict[str, str]) -> None:
    from playground.app import mcp_tools
    from playground.errors import PlaygroundError

    compared = json.loads(mcp_tools.compare(PROMPT, "prompt_lookup:prompt_lookup_num_tokens=3", tiny_models["target"],
                                            max_new_tokens=6, dtype="float32"))
    labels = {row["label"] for row in compared["rows"]}
    assert labels == {"baseline", "prompt_lookup(prompt_lookup_num_tokens=3)"}
    assert compared["lossless"]["prompt_lookup(prompt_lookup_num_tokens=3)"] is True
    benched = json.loads(mcp_tools.bench("prompt_lookup", "qa", 1, tiny_models["target"],
                                         max_new_tokens=4, dtype="float32"))
    assert {(row["label"], row["category"]) for row in benched["rows"]} == {
        ("baseline", "qa"), ("prompt_lookup", "qa")}
    assert benched["errors"] == []
    with pytest.raises(PlaygroundError, match="limit must be a whole number from 1 to 3"):
        mcp_tools.bench("prompt_lookup", limit=50)
