"""A handler's outputs declared once by name (`playground/app/outputs.py`): what the declaration refuses, and the
page's events wired from the declarations (each event's outputs are exactly the components its declaration names)."""

from __future__ import annotations

import gradio as gr
import pytest

from playground.app.outputs import PARAM, Outputs

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
