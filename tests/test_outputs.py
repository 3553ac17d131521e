"""A handler's outputs and inputs declared once by name (`playground/app/outputs.py`): what the declarations refuse,
and the page's events wired from them (each event's outputs are exactly the components its declaration names; each
handler receives its inputs by its parameters' names)."""

from __future__ import annotations

import inspect
import typing
from typing import Any

import gradio as gr
import pytest

from playground.app.outputs import PARAM, PARAM_VALUES, Inputs, Outputs

STATUS = Outputs("tokens", "status", "trace")


def test_a_return_gives_each_named_output_its_value_and_leaves_the_rest() -> None:
    assert STATUS(status="done") == (gr.skip(), "done", gr.skip())
    assert STATUS({"tokens": "a", "status": "b"}, status="c") == ("a", "c", gr.skip())  # the keyword wins
    assert STATUS.skip() == (gr.skip(),) * 3
    assert STATUS.read(("a", "b", None)) == {"tokens": "a", "status": "b", "trace": None}
    assert STATUS.read(("a", "b", None), "run.") == {"run.tokens": "a", "run.status": "b", "run.trace": None}


def test_a_name_not_declared_a_duplicate_a_missing_component_and_a_short_return_are_refused() -> None:
    with pytest.raises(KeyError, match="stauts"):
        STATUS(stauts="done")  # a typo is an error, not a value in no box
    with pytest.raises(ValueError, match="named twice"):
        Outputs("status", "status")
    with pytest.raises(ValueError, match="named twice"):
        STATUS + Outputs("status")
    with pytest.raises(KeyError, match="trace"):
        STATUS.components({"tokens": 1, "status": 2})
    with pytest.raises(ValueError, match="2 values for 3 outputs"):
        STATUS.read(("a", "b"))


def test_declarations_compose_and_parameters_have_their_own_names() -> None:
    both = Outputs("last_run") + STATUS.prefixed("replay.")
    assert both.names == ("last_run", "replay.tokens", "replay.status", "replay.trace")
    assert both.components({"last_run": 0, "replay.tokens": 1, "replay.status": 2, "replay.trace": 3}) == [0, 1, 2, 3]
    picked = Outputs("method", params=["num_assistant_tokens", "method"])  # a parameter named like a control
    assert picked.names == ("method", PARAM + "num_assistant_tokens", PARAM + "method")
    assert picked(Outputs.params_of({"method": 5}), method="x") == ("x", gr.skip(), 5)
    assert Outputs.param_components(["a", "b"], [1, 2]) == {PARAM + "a": 1, PARAM + "b": 2}


def test_every_event_of_the_page_is_wired_from_its_declaration() -> None:
    """Build the page and look at its events: each handler declared with `Outputs` writes exactly the components of
    its declaration, in its order (a handler whose outputs were counted by hand would drift from this)."""
    from playground.app import after_run, generate_tab, page, preload, replay_tab, tune_tab

    demo = page.build_ui()
    by_name = {fn.name: fn for fn in demo.fns.values()}

    def outputs_of(name: str) -> list[str]:
        return [getattr(o, "elem_id", None) or type(o).__name__ for o in by_name[name].outputs]

    for name, declared in (("generate", generate_tab.RUN), ("localize_view", generate_tab.LOCALIZED),
                           ("on_page_load", generate_tab.PAGE_LOAD), ("restore_link", generate_tab.RESTORED),
                           ("on_method_change", generate_tab.METHOD_VIEWS), ("after_run", after_run.AFTER_RUN),
                           ("poll_preload", preload.POLLED), ("localize_tabs", page.TAB_VIEWS),
                           ("on_trace_upload", replay_tab.LOADED), ("replay_play", replay_tab.PLAYING)):
        assert len(by_name[name].outputs) == len(declared), name
    assert outputs_of("generate")[:5] == ["pg-output", "pg-stats-box", "pg-chart-acceptance", "pg-chart-timing",
                                          "pg-status-box"]
    assert outputs_of("after_run")[1:4] == ["State", "pg-replay-status", "pg-replay-slider"]
    assert len(by_name["tune_page"].outputs) == len(tune_tab.TUNED)


def test_the_pages_inputs_are_wired_by_name() -> None:
    """Where several tabs read the same controls, each names them (`run_request.REQUEST_FIELDS`,
    `compare_tab.COMPARE_SETTINGS`) and its handler reads them back by name: the Code tab's settings are Generate's
    request controls and its preset, Compare's the same controls under the same names, whatever order a tab lists
    them in. The names are the handlers' own parameter names, so a handler cannot receive a value in the wrong place."""
    import inspect

    from playground.app import compare_tab, links, page
    from playground.app.run_request import REQUEST_FIELDS, build_request

    assert tuple(inspect.signature(build_request).parameters)[: len(REQUEST_FIELDS)] == REQUEST_FIELDS
    assert links.FIELDS is REQUEST_FIELDS
    for handler in (compare_tab.compare, compare_tab.quick_compare):
        assert tuple(inspect.signature(handler).parameters)[: len(compare_tab.COMPARE_SETTINGS)] == \
            compare_tab.COMPARE_SETTINGS
    demo = page.build_ui()
    by_name = {fn.name: fn for fn in demo.fns.values()}
    request_controls = dict(zip(REQUEST_FIELDS, by_name["generate"].inputs))
    preset = by_name["generate"].inputs[-1]
    assert list(by_name["show_code_for_settings"].inputs) == [*request_controls.values(), preset]
    for name in ("compare", "quick_compare"):
        assert list(by_name[name].inputs)[: len(compare_tab.COMPARE_SETTINGS)] == [
            request_controls[field] for field in compare_tab.COMPARE_SETTINGS]


def test_a_request_is_read_from_an_events_values_by_name() -> None:
    from playground.app.run_request import REQUEST_FIELDS, request_from_inputs

    values = {name: None for name in REQUEST_FIELDS} | {"prompt": "Hi", "max_new_tokens": 5, "dtype": "float32",
                                                         "method": "prompt_lookup"}
    request = request_from_inputs([values[name] for name in REQUEST_FIELDS] + [None], "preset")
    assert (request.prompt, request.max_new_tokens, request.dtype, request.method) == ("Hi", 5, "float32",
                                                                                      "prompt_lookup")


# --------------------------------------------------------------------------- inputs by name

def test_an_events_values_reach_the_handlers_parameters_by_name_as_gradio_calls_it() -> None:
    """`Inputs.into(handler)`, called the way Gradio calls it (its own `special_args` puts the request where the
    signature asks): each value lands on the parameter of its name, in whatever order the handler lists them; the
    parameter controls arrive as one mapping; the request and a keyword (`lang`) pass through."""
    from gradio.helpers import special_args

    def handler(b: Any, a: Any, param_values: Any, request: gr.Request = None, *, lang: str = "en") -> Any:
        return {"a": a, "b": b, "params": param_values, "request": request, "lang": lang}

    declared = Inputs("a", "b", params=["n", "k"])
    assert declared.parameters == ("a", "b", PARAM_VALUES)
    page_handler = declared.into(handler)
    assert page_handler.__name__ == "handler"  # Gradio's API name for the event
    request = gr.Request()
    values, *_ = special_args(page_handler, ["A", "B", 1, 2], request)
    assert page_handler(*values, lang="ru") == {"a": "A", "b": "B", "params": {"n": 1, "k": 2}, "request": request,
                                                "lang": "ru"}
    assert declared.components({"b": 2, "a": 1, PARAM + "n": 3, PARAM + "k": 4}) == [1, 2, 3, 4]

    def streaming(x: Any, request: gr.Request) -> Any:
        yield x, request

    streamer = Inputs("x").into(streaming)
    assert inspect.isgeneratorfunction(streamer)  # Gradio streams it as it streamed the handler
    assert list(streamer(*special_args(streamer, ["X"], request)[0])) == [("X", request)]
    with pytest.raises(TypeError, match="expects 1 values.*got 2"):  # a value too many is refused, not dropped
        Inputs("x").into(lambda x: x)("X", "extra")


def test_a_handler_not_taking_its_declared_inputs_is_refused_when_the_page_is_built() -> None:
    def pace(mode: Any, seconds: Any) -> Any:
        return mode, seconds

    with pytest.raises(TypeError, match=r"takes \['mode', 'seconds'\]; its inputs are named \['mode', 'secs'\]"):
        Inputs("mode", "secs").into(pace)
    with pytest.raises(TypeError, match="its inputs are named"):
        Inputs("mode").into(pace)
    with pytest.raises(TypeError, match="by position"):
        Inputs("mode").into(lambda mode, *values: mode)
    with pytest.raises(ValueError, match="an input is named twice"):
        Inputs("mode", "mode")


def _receiver(fn: Any) -> Any:
    """The `Inputs.into` handler inside a page handler (under `guarded`'s `__wrapped__`, or held by a wrapper that
    passes the request first: `with_language`, Tune's background job), or None."""
    seen: set[int] = set()
    while fn is not None and id(fn) not in seen:
        seen.add(id(fn))
        if hasattr(fn, "inputs") and hasattr(fn, "handler"):
            return fn
        inner = getattr(fn, "__wrapped__", None)
        if inner is None and inspect.isfunction(fn):
            held = inspect.getclosurevars(fn).nonlocals.values()
            inner = next((v for v in held if callable(v) and hasattr(v, "inputs")), None)
        fn = inner
    return None


def _value_parameters(fn: Any) -> list[inspect.Parameter]:
    """A handler's parameters Gradio fills from the event's inputs: positional ones, less those it fills itself
    (the request, the event's data, by annotation)."""
    from playground.app.outputs import given_by_gradio

    hints = typing.get_type_hints(fn)
    return [p for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
            and not given_by_gradio(hints.get(p.name))]


# Handler parameters that always name one of the page's main controls (Generate's input of that field). Not
# max_new_tokens (Compare has its own slider) nor params (Tune gathers its own).
MAIN_CONTROLS = {name: name for name in ("prompt", "target", "assistant", "method", "sample", "temperature", "top_p",
                                         "top_k", "seed", "chat", "dtype")} | {"method_name": "method"}


def test_every_event_of_the_page_gives_its_handler_its_inputs_by_name() -> None:
    """Build the page and read every event that runs on the server: a handler with more than one input receives
    them through its `Inputs` declaration, whose names are exactly its parameters' and whose components are the
    event's, in order (nothing counted by position); a handler with one input or none takes exactly that many
    values. The Code tab's settings are read by `request_from_inputs`, by `build_request`'s names. Each parameter
    control, and each of the page's main controls, that an event reads is the one of its name."""
    from playground.app import page
    from playground.app.run_request import REQUEST_FIELDS, build_request

    demo = page.build_ui()
    events = [block for block in demo.fns.values() if block.fn is not None]
    assert len(events) >= 70, len(events)
    generate = next(block for block in events if block.name == "generate")
    controls = dict(zip(REQUEST_FIELDS, generate.inputs))
    declared = 0
    for block in events:
        receiver, inputs = _receiver(block.fn), list(block.inputs)
        if block.name == "show_code_for_settings":  # `request_inputs(settings, "preset")`, read by name
            names = (*REQUEST_FIELDS, "preset")
            assert tuple(inspect.signature(build_request).parameters)[: len(names)] == names
            assert len(inputs) == len(names)
            continue
        if receiver is None:
            takes = _value_parameters(inspect.unwrap(block.fn))
            assert len(inputs) <= 1 and len(takes) == len(inputs) and \
                all(p.kind != p.VAR_POSITIONAL for p in takes), \
                f"{block.name}: {len(inputs)} inputs matched by position to {[p.name for p in takes]}"
            continue
        declared += 1
        names = receiver.inputs.names
        assert len(inputs) == len(names), (block.name, names)
        assert [p.name for p in _value_parameters(receiver.handler)] and \
            {p.name for p in _value_parameters(receiver.handler)} == set(receiver.inputs.parameters), \
            f"{block.name} takes {[p.name for p in _value_parameters(receiver.handler)]}; declared {names}"
        for name, component in zip(names, inputs):
            if name.startswith(PARAM):  # the control of that parameter, whatever order the page lists them in
                assert component.elem_id == "pg-param-" + name[len(PARAM):], (block.name, name, component.elem_id)
            elif name in MAIN_CONTROLS:  # the page's own control of that name (Generate's input of that field)
                assert component is controls[MAIN_CONTROLS[name]], \
                    f"{block.name}'s {name!r} is {component.elem_id or component}, not the page's {MAIN_CONTROLS[name]}"
    assert declared >= 20, declared  # every event with two inputs or more (23 when this was written)


def test_with_mcp_on_the_pages_generate_is_still_no_mcp_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    """`mcp_tools.register` marks the page's streaming `generate` as no MCP tool (its outputs are the page's HTML);
    Gradio reads that mark on the event's function, which `Inputs.into` made: the mark must be there too, or agents
    see a second tool, `generate_1` (tests/test_mcp.py saw it through a real MCP client)."""
    from playground.app import page
    from playground.compat import gradio_internals

    monkeypatch.setenv("PLAYGROUND_MCP", "1")
    demo = page.build_ui()
    pages = [block.fn for block in demo.fns.values() if block.api_name == "generate"]
    assert len(pages) == 1 and getattr(pages[0], gradio_internals.MCP_TYPE, None) == "page"
    tools = {block.api_name for block in demo.fns.values() if getattr(block.fn, gradio_internals.MCP_TYPE, "tool") == "tool"
             and block.api_name and block.api_name.startswith("mcp_")}
    assert tools == {"mcp_generate", "mcp_compare", "mcp_bench"}
