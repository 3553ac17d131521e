"""The page's handlers (playground/app) as plain functions (no server, no browser), on tiny models."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from playground import render
from playground.app import generate_tab, page, preload, run_request, trace_files
from playground.request import method_for
from playground.methods import METHODS
from playground.models import (CATALOGUE, DEFAULT_TARGET, DEFAULT_UNIVERSAL_ASSISTANT, GEMMA_FIRST_LAYERS,
                               TINY_GEMMA4, TINY_GEMMA4_ASSISTANT)
from playground.trace import Trace

API_PARAMETERS = ["prompt", "target", "assistant", "method", "params", "max_new_tokens", "sample", "temperature",
                  "top_p", "top_k", "seed", "chat", "dtype", "check_plain", "preset"]  # new parameters are appended


@pytest.fixture(autouse=True)
def toasts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Warning toasts the handlers raise (outside a request Gradio would turn them into warnings)."""
    shown: list[str] = []
    monkeypatch.setattr(generate_tab.gr, "Warning", lambda message, *a, **k: shown.append(message))
    return shown


@pytest.fixture(scope="module")
def demo() -> Any:
    return page.build_ui()  # building the page loads nothing (the preload starts in `main`)


def test_the_tabs_load_handler_answers_one_value_per_output_in_every_language(demo: Any) -> None:
    """The page-load handler that writes the tabs in the visitor's language returns one value per output it is wired
    to (for English, a skip each): a tab that gains an output cannot shift the others' views or break the load."""
    import gradio as gr

    from playground import i18n

    (load,) = [fn for fn in demo.fns.values() if getattr(fn.fn, "__name__", "") == "localize_tabs"]
    assert len(load.outputs) > len(page.TABS)
    for lang in i18n.LANGUAGES:
        values = load.fn(gr.Request(query_params={"lang": lang}, headers={}))
        assert len(values) == len(load.outputs), lang
        if lang == "en":
            assert all(value == gr.skip() for value in values)


def test_api_endpoint_mirrors_the_cli(demo: Any) -> None:
    info = demo.get_api_info()
    assert list(info["named_endpoints"]) == ["/generate"]  # helpers (method change, stop, …) stay private
    params = info["named_endpoints"]["/generate"]["parameters"]
    assert [p["parameter_name"] for p in params] == API_PARAMETERS
    defaults = {p["parameter_name"]: p["parameter_default"] for p in params if p["parameter_has_default"]}
    assert "prompt" not in defaults and len(defaults) == len(API_PARAMETERS) - 1
    assert defaults["target"] == DEFAULT_TARGET and defaults["method"] == "prompt_lookup"
    assert defaults["dtype"] == "auto" and defaults["sample"] is False and defaults["params"] == {}
    assert defaults["check_plain"] is False


def test_method_change_shows_exactly_the_methods_params() -> None:
    names = list(run_request.param_specs())
    for method in METHODS.values():
        out = generate_tab.METHOD_VIEWS.read(generate_tab.on_method_change(method.name, DEFAULT_TARGET, None))
        assert out["method_summary"] == method.summary
        assert all(text in out["lecture"] for text in ("What drafts", "When it fails"))
        assert out["assistant"]["visible"] is method.needs_assistant
        params = {name: out[f"param:{name}"] for name in names}
        shown = {name for name, update in params.items() if update["visible"]}
        assert shown == {p.name for p in method.params}, method.name
        for name, update in params.items():
            if update["visible"]:
                p = method_for(method.name, DEFAULT_TARGET).param(name)  # bounded by the target's layers
                assert update["label"] == p.label
                if p.kind != "choice":
                    assert (update["minimum"], update["maximum"]) == (p.minimum, p.maximum)


def test_assistant_suggestions_follow_the_assistant_kind() -> None:
    assert run_request.suggest_assistant(METHODS["universal"], DEFAULT_TARGET, None) == DEFAULT_UNIVERSAL_ASSISTANT
    # Offline, speculative decoding drafts with Gemma's own first 12 layers (a real smaller drafter that is refused
    # sometimes), as the catalogue pairs them, not with Gemma itself (every draft kept).
    assert run_request.suggest_assistant(METHODS["speculative"], DEFAULT_TARGET, None) == GEMMA_FIRST_LAYERS
    assert CATALOGUE[DEFAULT_TARGET].suggested_assistants[0] == GEMMA_FIRST_LAYERS
    # Each kind gets an assistant of its kind: the guide's universal pair is not offered for speculative decoding, and
    # a model the catalogue has no drafter for drafts for itself.
    assert run_request.suggest_assistant(METHODS["speculative"], "google/gemma-2-9b", None) == "google/gemma-2-9b"
    assert run_request.suggest_assistant(METHODS["universal"], "google/gemma-2-9b", None) == "double7/vicuna-68m"
    assert run_request.suggest_assistant(METHODS["speculative"], "my/model", None) == "my/model"
    assert run_request.suggest_assistant(METHODS["mtp_drafter"], TINY_GEMMA4, None) == TINY_GEMMA4_ASSISTANT
    assert all(CATALOGUE[a].drafts_as for entry in CATALOGUE.values() for a in entry.suggested_assistants)
    assert run_request.suggest_assistant(METHODS["speculative"], "HuggingFaceTB/SmolLM2-360M-Instruct", None) == (
        "HuggingFaceTB/SmolLM2-135M-Instruct")
    assert run_request.suggest_assistant(METHODS["universal"], DEFAULT_TARGET, "my/choice") == "my/choice"


def test_collect_params_keeps_only_the_chosen_methods_params() -> None:
    values = {name: p.default for name, p in run_request.param_specs().items()} | {"prompt_lookup_num_tokens": 7}
    assert run_request.collect_params("prompt_lookup", values) == {"prompt_lookup_num_tokens": 7, "max_matching_ngram_size": 2}
    assert run_request.collect_params("baseline", values) == {}


def test_load_progress_leaves_the_status_box_to_a_clicked_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The start-up load's poll writes the status box only until this page clicks Generate: a tick
    landing after a quick run had finished used to replace its "Done" with "Ready"."""
    loading = preload.Preload()
    loading.message, loading.thread = "Loading bundled/x…", threading.current_thread()  # started, not done
    monkeypatch.setattr(preload, "PRELOAD", loading)
    polled = preload.POLLED.read(preload.poll_preload(False))
    status, timer = polled["status"], polled["timer"]
    assert "Loading bundled/x" in status and 'data-kind="running"' in status and timer["active"] is True

    clicked = generate_tab.CLICKED.read(generate_tab.on_generate_click(
        "prompt_lookup", {name: p.default for name, p in run_request.param_specs().items()}))
    params, queued, run_started = clicked["params_json"], clicked["status"], clicked["run_started"]
    assert run_started is True and 'data-kind="running"' in queued and "prompt_lookup_num_tokens" in params
    loading.done.set()  # the load ends, the run finishes, then a late tick arrives
    polled = preload.POLLED.read(preload.poll_preload(run_started))
    status, timer = polled["status"], polled["timer"]
    assert status == generate_tab.gr.skip()  # left as the run wrote it
    assert timer["active"] is False

    polled = preload.POLLED.read(preload.poll_preload(False))  # a page that never clicked is told the model is ready
    status, timer = polled["status"], polled["timer"]
    assert 'data-kind="idle"' in status and timer["active"] is False


def test_build_request_parses_api_values() -> None:
    req = run_request.build_request("hi", None, "", "prompt_lookup", '{"prompt_lookup_num_tokens": 5}', 12.0, True, 0.7,
                           0.9, 40.0, 3.0, "on", None)
    assert req.params == {"prompt_lookup_num_tokens": 5} and req.max_new_tokens == 12 and req.top_k == 40
    assert req.target == DEFAULT_TARGET and req.assistant is None and req.chat is True and req.dtype == "auto"
    assert run_request.parse_chat("auto") is None and run_request.parse_chat("off") is False and run_request.parse_chat(None) is None
    assert run_request.parse_params({"a": 1}) == {"a": 1} and run_request.parse_params(None) == {} and run_request.parse_params("") == {}
    with pytest.raises(ValueError, match="JSON object"):
        run_request.parse_params("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        run_request.parse_params("{not json")
    with pytest.raises(ValueError, match="whole number"):
        run_request.build_request("hi", None, None, None, None, 1.5, False, 1, 1, 0, 0, "auto", "auto")


def _named(output: tuple[Any, ...]) -> dict[str, Any]:
    """One of `generate`'s updates by output name."""
    return generate_tab.RUN.read(output)


def _final(outputs: list[tuple[Any, ...]]) -> dict[str, Any]:
    assert outputs
    return _named(outputs[-1])


def test_generate_streams_and_finishes_with_a_trace(tiny_models: dict[str, str]) -> None:
    outputs = list(generate_tab.generate("One, two, three, four, five, six, seven, eight, nine, ten. One, two, three,",
                               target=tiny_models["target"], method="prompt_lookup",
                               params={"prompt_lookup_num_tokens": 4}, max_new_tokens=16, dtype="float32"))
    final = _final(outputs)
    tokens_html, stats, status, download, run_trace = (final[name] for name in ("tokens", "stats", "status",
                                                                               "trace_file", "run_trace"))
    fig_a, fig_t = final["acceptance"], final["timing"]
    assert 'data-kind="done"' in status
    assert tokens_html.count('class="tok"') >= 16 and 'data-status="' in tokens_html
    assert 'data-stat="new_tokens"><div class="pg-value">16<' in stats
    assert fig_a.data and fig_t.data
    trace = Trace.load(download["value"])
    assert trace.method == "prompt_lookup" and trace.params["prompt_lookup_num_tokens"] == 4
    # The other tabs get the run's trace in a gr.State (the last output), the very trace the file holds.
    assert isinstance(run_trace, Trace) and run_trace.to_json() == trace.to_json()
    assert _named(outputs[0])["run_trace"] is None, "a run starts by clearing the previous run's trace"
    assert trace.summary.new_tokens == 16
    # Streamed: token updates came before the last one, each extending the previous HTML. The last one, once generation
    # has ended, is the whole trace rendered again: its drafts' q and p are filled in then (`LiveRun._figures_later`).
    shown = [_named(o)["tokens"] for o in outputs]
    htmls = [tokens for tokens in shown if isinstance(tokens, str) and 'class="tok"' in tokens]
    streamed = htmls[:-1]
    assert streamed and all(b.startswith(a) for a, b in zip(streamed, streamed[1:]))
    assert tokens_html == render.render_tokens(run_trace.steps)[:-len("</div>")]
    assert 'data-p="' in tokens_html and any(step.p for step in run_trace.steps)


def test_a_token_opened_while_the_run_goes_on_shows_its_distributions(tiny_models: dict[str, str]) -> None:
    """A run shown as it comes fills in its steps' figures when generation ends (`LiveRun._figures_later`); a token
    the microscope opens before that gets its step's figures at once: the same panel as from the finished trace."""
    import gradio as gr

    from playground import microscope_view

    outputs = generate_tab.generate("One, two, three, four, five, six, seven, eight, nine, ten. One, two, three,",
                                    target=tiny_models["target"], method="prompt_lookup",
                                    params={"prompt_lookup_num_tokens": 4}, max_new_tokens=16, dtype="float32")
    click = {"step": 0, "pos": 0}
    for output in outputs:
        tokens = _named(output)["tokens"]
        if isinstance(tokens, str) and 'class="tok"' in tokens:  # the first step is shown: the run goes on
            during = generate_tab.open_token(None, gr.EventData(None, click))
            break
    final = _final(list(outputs))
    assert 'data-kind="done"' in final["status"]
    assert 'class="pg-micro-dists"' in during and 'data-recorded="false"' not in during
    assert during == microscope_view.panel_for_click(final["run_trace"], click)


def test_check_against_plain_generate(tiny_models: dict[str, str]) -> None:
    prompt = "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three,"
    kw = dict(target=tiny_models["target"], params={"prompt_lookup_num_tokens": 4}, max_new_tokens=12, dtype="float32")
    outputs = list(generate_tab.generate(prompt, method="prompt_lookup", check_plain=True, **kw))
    stats, status = _final(outputs)["stats"], _final(outputs)["status"]
    assert 'data-kind="done"' in status
    assert 'data-testid="pg-plain-check" data-identical="true"' in stats and "identical to plain generate()" in stats
    assert "× the speed of plain generate()" in stats
    assert any("Checking against plain generate()" in str(_named(o)["status"]) for o in outputs)
    unchecked = _final(list(generate_tab.generate(prompt, method="prompt_lookup", **kw)))["stats"]
    assert "pg-plain-check" not in unchecked, "off by default"
    # A lossy setting says so where the outputs part (the noisy assistant disagrees with the target).
    lossy = _final(list(generate_tab.generate(prompt, method="speculative", assistant=tiny_models["noisy"], sample=True, seed=3,
                                    check_plain="true", target=tiny_models["target"], max_new_tokens=12,
                                    dtype="float32", params={"assistant_ensemble_weight": 0.5})))["stats"]
    assert "pg-plain-check" in lossy
    assert 'data-identical="true"' in lossy or "a lossy setting (ensemble verification" in lossy
    bad = _final(list(generate_tab.generate(prompt, method="prompt_lookup", check_plain="maybe", **kw)))["status"]
    assert "check_plain must be true or false" in bad


@pytest.mark.parametrize("chart_every_s, live_charts", [(0.0, True), (60.0, False)])
def test_charts_update_live_at_their_own_cadence(tiny_models: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                                 chart_every_s: float, live_charts: bool) -> None:
    """Tokens stream on every update; the charts at most every CHART_EVERY_S, counted from the start
    of generation (not drawn with the first tokens), and always at the end."""
    monkeypatch.setattr(generate_tab, "UPDATE_EVERY_S", 0.0)
    monkeypatch.setattr(generate_tab, "CHART_EVERY_S", chart_every_s)
    outputs = list(generate_tab.generate("Hello there, hello there,", target=tiny_models["target"], method="baseline",
                               max_new_tokens=12, dtype="float32"))
    named = [_named(o) for o in outputs]
    streamed = [o for o in named if 'class="tok"' in str(o["tokens"]) and o["status"] == generate_tab.gr.skip()]
    assert len(streamed) >= 10  # one update per step
    with_charts = [o for o in streamed if o["acceptance"] != generate_tab.gr.skip()]
    assert (len(with_charts) == len(streamed)) if live_charts else not with_charts
    assert _final(outputs)["acceptance"].data  # the final charts, whatever the cadence


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompt": "  "}, "prompt is empty"),
        ({"prompt": "hi", "method": "no_such_method"}, "unknown method"),
        ({"prompt": "hi", "params": '{"prompt_lookup_num_tokens": "many"}'}, "prompt_lookup_num_tokens"),
        ({"prompt": "hi", "params": "{oops"}, "JSON object"),
        ({"prompt": "hi", "target": "bundled/nothing"}, "unknown bundled model"),
        ({"prompt": "hi", "method": "universal"}, "needs an assistant"),
        ({"prompt": "hi", "chat": "maybe"}, "chat must be"),
    ],
)
def test_errors_become_a_message_not_an_exception(kwargs: dict[str, Any], message: str, toasts: list[str]) -> None:
    final = _final(list(generate_tab.generate(**kwargs)))
    status, download = final["status"], final["trace_file"]
    assert 'role="alert"' in status and message in status
    assert toasts and message in toasts[0]
    assert download["visible"] is False


def test_stop_ends_the_run_and_keeps_the_output(tiny_models: dict[str, str]) -> None:
    request = SimpleNamespace(session_hash="stop-test")
    gen = generate_tab.generate("The quick brown fox", target=tiny_models["target"], method="baseline", max_new_tokens=400,
                      dtype="float32", request=request)
    seen_tokens = 0
    final = None
    for out in gen:
        final = _named(out)
        if isinstance(final["tokens"], str) and 'class="tok"' in final["tokens"] and seen_tokens == 0:
            seen_tokens = final["tokens"].count('class="tok"')
            threading.Thread(target=generate_tab.stop, args=(request,)).start()
    assert final is not None
    tokens_html, status, download = final["tokens"], final["status"], final["trace_file"]
    assert "stopped" in status
    trace = Trace.load(download["value"])
    assert trace.finish_reason == "stopped" and 0 < trace.summary.new_tokens < 400
    assert tokens_html.count('class="tok"') == trace.summary.new_tokens
    assert generate_tab.stop(request) is not None  # nothing running any more: a harmless no-op


def test_closing_the_stream_ends_the_worker(tiny_models: dict[str, str]) -> None:
    gen = generate_tab.generate("The quick brown fox", target=tiny_models["target"], method="baseline", max_new_tokens=400,
                      dtype="float32")
    for out in gen:
        if isinstance(_named(out)["tokens"], str) and 'class="tok"' in _named(out)["tokens"]:
            break
    gen.close()  # what Gradio does when the browser goes away
    deadline = time.monotonic() + 10
    while any(t.name == "playground-generate" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name == "playground-generate" for t in threading.enumerate())


def test_trace_files_are_json(tiny_models: dict[str, str]) -> None:
    download = _final(list(generate_tab.generate("Hello", target=tiny_models["target"], method="baseline",
                                           max_new_tokens=3, dtype="float32")))["trace_file"]
    data = json.loads(Path(download["value"]).read_text())
    assert data["method"] == "baseline" and len(data["steps"]) == 3


def test_trace_files_of_long_idle_sessions_are_removed(tiny_models: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.setattr(trace_files.tempfile, "tempdir", str(tmp_path))  # this test's own temp dir
    monkeypatch.setattr(trace_files, "_last_trace_prune", -math.inf)  # no sweep yet in this server's life
    root = tmp_path / "assisted-playground-traces"
    stale, fresh = root / "gone-session", root / "recent-session"
    for folder, age_s in ((stale, trace_files.TRACE_FILES_KEPT_S + 60), (fresh, 60)):
        folder.mkdir(parents=True)
        (folder / "trace-baseline-x.json").write_text("{}")
        for path in (folder / "trace-baseline-x.json", folder):
            os.utime(path, (time.time() - age_s,) * 2)
    download = _final(list(generate_tab.generate("Hello", target=tiny_models["target"], method="baseline",
                                           max_new_tokens=2, dtype="float32")))["trace_file"]
    assert not stale.exists()  # its file and then its folder
    assert (fresh / "trace-baseline-x.json").exists()
    assert Path(download["value"]).parent.parent == root and Path(download["value"]).is_file()


def test_a_method_the_model_cannot_do_is_explained(tiny_models: dict[str, str]) -> None:
    final = _final(list(generate_tab.generate("Hello", target=tiny_models["target"], method="mtp", dtype="float32")))
    status, run_trace = final["status"], final["run_trace"]
    assert run_trace is None, "a failed run leaves no trace for the other tabs"
    assert 'role="alert"' in status and "multi-token-prediction" in status
    status = _final(list(generate_tab.generate("Hello", target=tiny_models["target"], method="universal",
                                               assistant=tiny_models["noisy"], dtype="float32")))["status"]
    assert 'role="alert"' in status and "share a tokenizer" in status
