"""The teaching and measuring views (the tabs in playground/app + render/charts helpers): replay, theory, code, Compare, race.

Handler tests run on the tiny real checkpoints of conftest (seconds); the browser tests of the same
views on the bundled model are in `test_ui_teach_browser.py`. Tests assert behaviour, never timings.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import gradio as gr
import plotly.graph_objects as go
import pytest
from appserver import ARTIFACTS, HandlerCalls, needs_chromium
from appserver import still
from test_ui_browser import RUN_TIMEOUT_MS, set_number, wait_finished

from playground import charts, render
from playground.app import uploads
from playground.app import (after_run, code_tab, compare_tab, generate_tab, methods_tab, replay_tab, run_request,
                            theory_tab)
from playground.methods import METHODS
from playground.timeline import race_timeline
from playground.trace import Step, Trace

PROMPT = "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three, four,"
LOOKUP = {"prompt_lookup_num_tokens": 4}


@pytest.fixture(autouse=True)
def toasts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    shown: list[str] = []
    monkeypatch.setattr(generate_tab.gr, "Warning", lambda message, *a, **k: shown.append(message))
    return shown


def run_trace(target: str, method: str, params: dict | None = None, tokens: int = 12) -> Trace:
    """Run through the page's own streaming handler; the trace it hands the other tabs (its last output, a
    `gr.State`), which is the trace of the file it offers for download."""
    final = generate_tab.RUN.read(list(generate_tab.generate(PROMPT, target=target, method=method, params=params or {},
                                                             max_new_tokens=tokens, dtype="float32"))[-1])
    assert 'data-kind="done"' in final["status"], final["status"]
    assert Trace.load(final["trace_file"]["value"]).to_json() == final["run_trace"].to_json()
    return final["run_trace"]


@pytest.fixture(scope="module")
def runs(tiny_models: dict[str, str]) -> dict[str, Any]:
    """A baseline run and a prompt-lookup run on the same prompt, passed through `after_run` as the page does."""
    read = after_run.AFTER_RUN.read
    base_out = read(after_run.after_run(run_trace(tiny_models["target"], "baseline"), []))
    look_out = read(after_run.after_run(run_trace(tiny_models["target"], "prompt_lookup", LOOKUP), base_out["baselines"]))
    return {"baseline": base_out, "lookup": look_out}


def spans(html_text: str) -> list[tuple[str, str]]:
    return re.findall(r'<span class="tok" data-status="(\w+)" data-step="(\d+)"', html_text)


def hand_step() -> Step:
    return Step(index=4, drafted=[1, 2, 3, 4], accepted=2, rejected=[3], discarded=[4], emitted=[1, 2, 9],
                drafted_text=[" the", " cat", " sat", " on"], emitted_text=[" the", " cat", " lay"],
                draft_ms=3.0, verify_ms=40.0, q=[0.9, 0.8, 0.7, 0.6], p=[0.95, 0.85, 0.12, 0.3])


# --------------------------------------------------------------------------- replay


def test_narration_tells_the_step_in_words() -> None:
    text = render.narrate_step(hand_step(), "speculative")
    assert text.startswith("Step 5: the assistant drafted 4 tokens ' the cat sat on';")
    assert "accepted 2 (' the cat'), rejected ' sat'" in text and "put ' lay' in its place" in text
    assert "the 1 token after it ' on' was discarded without being judged" in text
    assert "p = 0.120" in text and "q = 0.700" in text
    bonus = Step(index=0, drafted=[1, 2], accepted=2, rejected=[], emitted=[1, 2, 3], drafted_text=["a", "b"],
                 emitted_text=["a", "b", "c"])
    assert "accepted all 2 and added the bonus token 'c'" in render.narrate_step(bonus, "prompt_lookup")
    cut = Step(index=0, drafted=[1, 2, 3], accepted=1, rejected=[], emitted=[1], unverified=[2, 3],
               drafted_text=["a", "b", "c"], emitted_text=["a"])
    assert "never verified" in render.narrate_step(cut, "early_exit")
    plain = Step(index=2, drafted=[], accepted=0, rejected=[], emitted=[5], emitted_text=["x"],
                 no_draft_reason="no earlier n-gram matched the last tokens")
    assert "no earlier n-gram matched" in render.narrate_step(plain, "prompt_lookup")
    assert "nothing is drafted in plain decoding" in render.narrate_step(plain, "baseline")


def test_step_detail_shows_draft_verify_append() -> None:
    detail = render.step_detail_html(hand_step(), "speculative")
    phases = re.findall(r'data-phase="(\d)"', detail)
    assert phases == ["1", "2", "3"]
    verify = detail.split('data-phase="2"')[1].split('data-phase="3"')[0]
    assert [s for s, _ in re.findall(r'data-status="(\w+)"()', verify)] == ["accepted", "accepted", "rejected", "discarded"]
    append = detail.split('data-phase="3"')[1]
    assert [s for s, _ in re.findall(r'data-status="(\w+)"()', append)] == ["accepted", "accepted", "correction"]
    assert "q 0.900" in detail and "p 0.120 ✗ refused" in detail


def test_replay_steps_through_the_last_run(runs: dict[str, Any]) -> None:
    out = runs["lookup"]
    last_run, trace, status, slider = (out[name] for name in ("last_run", "replay.trace", "replay.status",
                                                              "replay.slider"))
    assert isinstance(trace, Trace) and trace is last_run and trace.method == "prompt_lookup"
    n = len(trace.steps)
    assert n >= 3 and slider["maximum"] == n and slider["value"] == n
    assert "The last run" in status and 'data-kind="done"' in status
    counts = []
    for value in range(1, n + 1):
        view = replay_tab.STEP_VIEWS.read(replay_tab.replay_view(trace, value))
        tokens, detail, fig_a, fig_t, stats = (view[name] for name in ("tokens", "detail", "acceptance", "timing",
                                                                      "stats"))
        shown = spans(tokens)
        assert {int(step) for _, step in shown} == set(range(value))  # the first `value` steps, no more
        current = re.findall(r'class="pg-step pg-current" data-step="(\d+)"', tokens)
        assert current == [str(value - 1)]  # exactly one highlighted step: the current one
        assert f"Step {value}:" in detail
        for fig in (fig_a, fig_t):
            assert len(fig.data[0].x) == value  # bars of the first `value` steps
            shape = fig.layout.shapes[0]
            assert (shape.x0, shape.x1) == (value - 0.5, value + 0.5)
            assert [a.text for a in fig.layout.annotations] == [f"step {value}"]
            assert list(fig.layout.xaxis.range) == [0.4, n + 0.6]  # the axis spans the whole run
            go.Figure(fig.to_dict())
        new_tokens = sum(len(s.emitted) for s in trace.steps[:value])
        assert f'data-stat="new_tokens"><div class="pg-value">{new_tokens}<' in stats
        counts.append(len(shown))
    assert counts == sorted(counts) and counts[0] < counts[-1]
    # Previous / next move the slider within the run.
    assert replay_tab.replay_prev(trace, 1)["value"] == 1 and replay_tab.replay_prev(trace, 3)["value"] == 2
    assert replay_tab.replay_next(trace, n)["value"] == n and replay_tab.replay_next(trace, 1)["value"] == 2
    # N and a clicker's Page Down: the next step, and from the last one (where a loaded trace opens) step 1.
    assert replay_tab.replay_key(trace, n)["value"] == 1 and replay_tab.replay_key(trace, 1)["value"] == 2
    assert replay_tab.replay_key(trace, n - 1)["value"] == n


@pytest.mark.parametrize("lang", ["en", "ru", "ar"])
def test_the_settings_line_names_the_runs_settings(lang: str) -> None:
    """The presenter's one-line header: method, assistant, draft length, greedy or sampling at its temperature,
    precision, each value isolated (a model's name keeps its direction in an Arabic line)."""
    from playground.app import presenter
    from playground.i18n import t

    sampled = Trace(method="speculative", target="t", prompt="p", assistant="org/small-drafter",
                    params={"num_assistant_tokens": 7}, decoding={"sample": True, "temperature": 0.5},
                    env={"dtype": "bfloat16"})
    line = presenter.run_line_html(sampled, lang)
    text = html.unescape(re.sub(r"<[^>]+>", "", line))
    assert METHODS["speculative"].localized(lang).title in text and "<bdi>org/small-drafter</bdi>" in line
    assert METHODS["speculative"].params[0].localized(lang).label in text and "<bdi>7</bdi>" in line
    assert t("handout.decoding.sampling", lang, temperature="0,5" if lang == "ru" else "0.5") in text
    assert text.endswith("bfloat16")
    greedy = Trace(method="prompt_lookup", target="t", prompt="p", params={"prompt_lookup_num_tokens": 10},
                   decoding={"sample": False}, env={"dtype": "float32"})
    text = html.unescape(re.sub(r"<[^>]+>", "", presenter.run_line_html(greedy, lang)))
    assert t("handout.decoding.greedy", lang) in text and "10" in text and "float32" in text
    assert presenter.run_line_html(None, lang) == ""


def test_play_steps_through_the_run_and_stops_at_the_end(runs: dict[str, Any]) -> None:
    trace = runs["lookup"]["replay.trace"]
    n = len(trace.steps)

    def play(*args: Any) -> tuple[Any, ...]:
        out = replay_tab.PLAYING.read(replay_tab.replay_play(*args))
        return out["slider"], out["timer"], out["button"], out["playing"]

    def tick(*args: Any) -> tuple[Any, ...]:
        out = replay_tab.PLAYING.read(replay_tab.replay_tick(*args))
        return out["slider"], out["timer"], out["button"], out["playing"]

    # Play at the last step (where a run is loaded) starts over at step 1, with the timer on.
    slider, timer, button, playing = play(trace, n, False)
    assert slider["value"] == 1 and timer["active"] is True and button["value"] == replay_tab.PAUSE and playing is True
    value, seen = 1, [1]
    while playing:  # what the timer's ticks do, each from the slider value the page shows
        slider, timer, button, playing = tick(trace, value, playing)
        value = slider["value"]
        seen.append(value)
    assert seen == list(range(1, n + 1))  # every step once, in order, ending at the last
    assert timer["active"] is False and button["value"] == replay_tab.PLAY
    # Pause: the slider stays where it is and the timer stops; Play again continues from there.
    slider, timer, button, playing = play(trace, 2, True)
    assert slider == gr.skip() and timer["active"] is False and button["value"] == replay_tab.PLAY and playing is False
    slider, timer, _, playing = play(trace, 2, False)
    assert slider == gr.skip() and timer["active"] is True and playing is True
    # A late tick after Pause moves nothing; nothing to play without a trace.
    assert tick(trace, 2, False)[0] == gr.skip()
    assert play(None, 1, False)[3] is False


def uploaded(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The file record the page sends for a file Gradio stored in its upload folder (here: the file's folder)."""
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(path.parent.parent))
    return {"path": str(path), "orig_name": path.name, "meta": {"_type": "gradio.FileData"}}


def test_uploading_a_trace_replays_it(runs: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = runs["lookup"]["replay.trace"]
    path = tmp_path / "upload" / "shared.json"
    path.parent.mkdir()
    trace.save(path)
    out = replay_tab.LOADED.read(replay_tab.on_trace_upload(uploaded(path, monkeypatch)))
    loaded, status, slider, tokens = out["trace"], out["status"], out["slider"], out["tokens"]
    resolved = uploads.resolve(loaded)
    assert resolved is not None
    assert resolved.to_dict() == trace.to_dict()  # the state holds a ticket to the shared store
    assert "Loaded shared.json" in status and slider["maximum"] == len(trace.steps)
    assert len(spans(tokens)) == len(spans(render.render_trace(trace)))


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "not valid JSON"),
    (json.dumps({"hello": "world"}), "not a playground trace"),
    (json.dumps({"method": "baseline", "steps": [], "schema_version": 99}), "schema_version 99"),
    (json.dumps({"method": "baseline", "steps": [{"index": 0}], "schema_version": 1, "target": "t", "prompt": "p"}),
     "malformed trace"),
])
def test_a_file_that_is_not_a_trace_gets_a_clear_message(tmp_path: Path, content: str, message: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "upload" / "broken.json"
    path.parent.mkdir()
    path.write_text(content)
    out = replay_tab.LOADED.read(replay_tab.on_trace_upload(uploaded(path, monkeypatch)))
    status = out.pop("status")
    assert 'role="alert"' in status and "Cannot replay broken.json" in status and message in status
    assert all(isinstance(x, dict) and x.get("__type__") == "update" for x in out.values())  # views kept as they were


@pytest.mark.parametrize(("upload", "message"), [
    ("/etc/passwd", "expected an uploaded file; got '/etc/passwd'"),
    ({"orig_name": "x.json"}, "expected an uploaded file"),
    ({"path": "/etc/passwd"}, "expected a file uploaded to this page; got a path elsewhere on the server"),
    ({"path": "UPLOAD/../../outside.json"}, "got a path elsewhere on the server"),
    ({"path": "/tmp/\x00x"}, "got a path that is not one"),
    ({"path": "x" * 100_000}, "expected an uploaded file"),
])
def test_only_files_in_the_upload_folder_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, upload: Any,
                                                 message: str) -> None:
    """A client sends the file record: a value that is not one, or a path outside Gradio's upload folder (a trace
    file there too, which would load), is refused before any file is opened."""
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"hello": "world"}))
    folder = tmp_path / "uploads" / "abc"
    folder.mkdir(parents=True)
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "uploads"))
    if isinstance(upload, dict) and isinstance(upload.get("path"), str):
        upload = {**upload, "path": upload["path"].replace("UPLOAD", str(folder))}
    status = replay_tab.LOADED.read(replay_tab.on_trace_upload(upload))["status"]
    assert 'role="alert"' in status and message in html.unescape(status), status
    assert "not a playground trace" not in status  # the file outside was never read
    assert len(status) < 1000


# --------------------------------------------------------------------------- theory


def test_theory_figure_has_curves_and_the_measured_point() -> None:
    fig = charts.theory_figure(alpha=0.6, tau=2.1, gamma=4.3, expected_tau=2.2, label="prompt_lookup")
    go.Figure(fig.to_dict())
    names = [t.name for t in fig.data]
    assert [n for n in names if n.startswith("γ = ") and "mean" not in n] == [f"γ = {g}" for g in charts.THEORY_GAMMAS]
    curve = next(t for t in fig.data if t.name == "γ = 3")
    i = list(curve.x).index(0.5)
    assert curve.y[i] == pytest.approx((1 - 0.5 ** 4) / (1 - 0.5), abs=1e-3)  # Leviathan's E(α, γ)
    measured = next(t for t in fig.data if t.name == "prompt_lookup: measured")
    assert list(measured.x) == [0.6] and list(measured.y) == [2.1]
    assert any("4.3" in n for n in names)  # the run's own mean draft length gets its curve
    empty = charts.theory_figure()
    assert not any("measured" in t.name for t in empty.data) and "Run a drafting method" in empty.layout.annotations[0].text


def test_after_a_run_the_theory_panel_places_it_and_diagnoses_it(runs: dict[str, Any]) -> None:
    trace = runs["lookup"]["replay.trace"]
    fig, diagnosis = runs["lookup"]["theory.plot"], runs["lookup"]["theory.diagnosis"]
    from playground import theory

    est = theory.estimate(trace)
    measured = next(t for t in fig.data if t.name.endswith(": measured"))
    assert list(measured.x) == [pytest.approx(est.alpha)] and list(measured.y) == [pytest.approx(est.tau, abs=1e-4)]
    # The session's baseline on the same prompt was found, so the diagnosis compares with it.
    assert 'data-baseline="true"' in diagnosis
    baseline = runs["baseline"]["replay.trace"]
    for sentence in theory.diagnose(trace, baseline):
        assert html.escape(sentence) in diagnosis
    assert "This run was" in diagnosis
    # A baseline run is described as the yardstick; a run with no baseline says how to get one.
    assert "yardstick" in runs["baseline"]["theory.diagnosis"]
    _, alone = theory_tab.theory_view(trace, None)
    assert 'data-baseline="false"' in alone and "No baseline run on this prompt" in alone
    # where the run's time went, from the trace's phases (they add up to the elapsed time)
    shares = re.search(r"time: draft (\d+)%, verify (\d+)%, other (\d+)%, set-up (\d+)%", alone)
    assert shares and 97 <= sum(int(x) for x in shares.groups()) <= 103


def test_baselines_are_matched_on_prompt_and_settings(runs: dict[str, Any]) -> None:
    base: Trace
    base, look = runs["baseline"]["replay.trace"], runs["lookup"]["replay.trace"]
    assert theory_tab.find_baseline(look, [base]) is base
    other = Trace.from_dict({**base.to_dict(), "prompt": "something else"})
    assert theory_tab.find_baseline(look, [other]) is None
    assert len(theory_tab.remember_baseline([base], base)) == 1  # a newer run of the same settings replaces it
    assert theory_tab.remember_baseline([], look) == []  # only baselines are remembered


# --------------------------------------------------------------------------- show the code


def test_after_a_run_its_code_is_shown(runs: dict[str, Any]) -> None:
    python, cli, status = (runs["lookup"][f"code.{name}"] for name in ("python", "cli", "status"))
    assert "prompt_lookup_num_tokens=4" in python and ".generate(" in python
    compile(python, "snippet.py", "exec")
    assert cli.startswith("python -m playground run ") and "--method prompt_lookup" in cli
    assert 'data-kind="done"' in status


def test_show_code_for_settings_and_its_errors(tiny_models: dict[str, str]) -> None:
    *_, (python, cli, status) = list(code_tab.show_code_for_settings(
        PROMPT, tiny_models["target"], None, "prompt_lookup", LOOKUP, 10, False, 1.0, 1.0, 0, 0, "auto", "float32",
        None))  # the page's inputs: `REQUEST_FIELDS`, then the preset
    assert "max_new_tokens=10" in python and "--max-new-tokens 10" in cli and 'data-kind="done"' in status
    *_, (python, cli, status) = list(code_tab.show_code_for_settings(
        PROMPT, "bundled/nothing", None, "prompt_lookup", {}, 10, False, 1.0, 1.0, 0, 0, "auto", "float32", None))
    assert 'role="alert"' in status and "unknown bundled model" in status


# --------------------------------------------------------------------------- methods explained


def test_every_method_is_explained_in_five_parts_and_its_call() -> None:
    table = methods_tab.methods_table_html()
    for name, method in METHODS.items():
        assert set(method.lecture) == set(methods_tab.LECTURE_LABELS), name
        row = table.split(f'data-method="{name}"')[1].split("</tr>")[0]
        assert row.count("<td>") == 7 and "<td>–</td>" not in row  # five parts, the call, what is proven
        assert f"<td><code>{html.escape(method.generate_call())}</code></td>" in row
        assert f"<td>{methods_tab.proven_html(method)}</td>" in row
        lecture = methods_tab.lecture_html(method)
        assert all(label in lecture for label in methods_tab.LECTURE_LABELS.values())


# --------------------------------------------------------------------------- compare and race


@pytest.fixture(scope="module")
def compared(tiny_models: dict[str, str]) -> list[tuple[Any, ...]]:
    values = {name: p.default for name, p in run_request.param_specs().items()} | {"prompt_lookup_num_tokens": 4}
    return list(compare_tab.compare(PROMPT, tiny_models["target"], None, "prompt_lookup", "float32", "auto",
                              ["prompt_lookup", "mtp"], 8, 1, [], values))


def test_compare_runs_baseline_and_methods_and_shows_progress(compared: list[tuple[Any, ...]]) -> None:
    progress = [compare_tab.COMPARED.read(o)["status"] for o in compared[:-1]]
    # Progress is polled (only the latest message per poll reaches the page), so which stages show
    # depends on speed; that the page hears while it runs does not.
    assert progress and all('data-kind="running"' in p for p in progress)
    out = compare_tab.COMPARED.read(compared[-1])
    status, table, fig_speed, fig_cost, diagnosis = out["status"], out["table"], out["speedup"], out["cost"], out["diagnosis"]
    race_choice, state, baselines = out["race_method"], out["state"], out["baselines"]
    assert 'data-kind="done"' in status
    rows = re.findall(r'<tr data-method="(\w+)" data-label="([^"]+)" data-speedup="([\d.]+)"', table)
    assert [r[:2] for r in rows] == [("baseline", "baseline"), ("prompt_lookup", "prompt_lookup(prompt_lookup_num_tokens=4)")]
    assert float(rows[0][2]) == 1.0 and float(rows[1][2]) > 0
    # The reference row is marked for the page's CSS (it is dimmed), by the registry, not by its name.
    assert len(re.findall(r'<tr data-method="\w+"[^>]* data-reference[ >]', table)) == 1
    assert re.search(r'<tr data-method="baseline"[^>]* data-reference>', table)
    for header in ("speedup", "tokens/s", "α (accepted / judged)", "τ tokens/step", "draft ms/step", "verify ms/step",
                   "Leviathan et al."):
        assert f"<th>{header}</th>" in table
    # A method the target cannot do is skipped with its reason; the others still ran.
    assert 'data-label="mtp" data-skipped="true"' in table and "multi-token-prediction" in table
    assert fig_speed.data and fig_cost.data
    assert "prompt_lookup(prompt_lookup_num_tokens=4)" in diagnosis and "<li>" in diagnosis
    # The race's picker names the setting as the table does; its value stays the Compare label (the state's key).
    assert race_choice["choices"] == [("Prompt lookup decoding — tokens to copy = 4", "prompt_lookup(prompt_lookup_num_tokens=4)")]
    assert state.baseline.method == "baseline" and len(baselines) == 1


def test_compare_errors_are_messages(tiny_models: dict[str, str]) -> None:
    values = {name: p.default for name, p in run_request.param_specs().items()}
    for methods, prompt, message in ((["baseline"], PROMPT, "choose at least one method"),
                                     (["prompt_lookup"], "  ", "prompt is empty"),
                                     (["mtp"], PROMPT, "none of the chosen methods can run")):
        *_, final = list(compare_tab.compare(prompt, tiny_models["target"], None, "baseline", "float32", "auto", methods, 4,
                                       1, [], values))
        status = compare_tab.COMPARED.read(final)["status"]
        assert 'role="alert"' in status and message in status, status


def test_compare_prepares_each_method_once_and_speaks_russian(tiny_models: dict[str, str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #11: Compare prepared each method three times (the tab's check, the measuring loop, the warm-up).
    The real `engine.prepare` runs on the tiny model; the wrapper only counts its calls, by method."""
    from playground import engine

    prepared: list[str] = []
    real_prepare = engine.prepare

    def counting_prepare(req: Any, *args: Any, **kwargs: Any) -> Any:
        prepared.append(req.method)
        return real_prepare(req, *args, **kwargs)

    monkeypatch.setattr(engine, "prepare", counting_prepare)
    values = {name: p.default for name, p in run_request.param_specs().items()}
    outputs = list(compare_tab.compare(PROMPT, tiny_models["target"], None, "prompt_lookup", "float32", "auto",
                                       ["prompt_lookup", "mtp"], 4, 2, [], values, lang="ru"))
    status, table = (compare_tab.COMPARED.read(outputs[-1])[name] for name in ("status", "table"))
    assert 'data-kind="done"' in status, status
    # mtp is refused while being prepared (the tiny target has no MTP layers), and skipped; two repeats and the
    # warm-up reuse the prepared runs.
    assert sorted(prepared) == ["baseline", "mtp", "prompt_lookup"], prepared
    assert 'data-label="mtp" data-skipped="true"' in table
    # Everything the tab wrote is Russian: progress, verdict, table.
    text = html.unescape(re.sub(r"<[^>]+>", " ", " ".join(compare_tab.COMPARED.read(o)["status"] for o in outputs) + table))
    assert "Сравнение:" in text and "повтора" in text and "ускорение" in text and "пропущен" in text
    assert "много-токенового предсказания" in text  # mtp's reason for skipping, a keyed refusal of the registry
    assert "4 новых токена за запуск, 2 повтора" in text  # the done status's note, counted in Russian
    assert not re.search(r"Preparing|Comparing|warm-up|Fastest|No method|skipped|repeats|the reference", text), text


def lane_texts(frame: str) -> dict[str, tuple[int, str, str]]:
    """lane label -> (tokens shown, data-done, text of its token spans)."""
    out = {}
    for label, tokens, done, body in re.findall(
            r'<div class="pg-lane" data-lane="([^"]+)" data-tokens="(\d+)" data-done="(\w+)">.*?'
            r'<div class="pg-tokens pg-lane-text">(.*?)</div>', frame):
        text = "".join(re.findall(r'<span class="tok"[^>]*>(.*?)</span>', body))
        text = re.sub(r'<span class="ws">∅', "", text)
        out[label] = (int(tokens), done, text)
    return out


def test_race_lanes_grow_at_the_recorded_pace(compared: list[tuple[Any, ...]]) -> None:
    import html as _html

    state = compare_tab.COMPARED.read(compared[-1])["state"]
    label, method = next(iter(state.traces.items()))
    frames = list(compare_tab.race_frames(state.baseline, method, max_s=2.0, min_s=1.0, fps=30))
    assert len(frames) >= 3
    times = [t for t, _ in frames]
    play_s = times[-1]
    assert times == sorted(times) and times[0] == 0 and 1.0 <= play_s <= 2.0
    timeline = race_timeline(state.baseline, method)
    ends = {lane["label"]: [p["t_ms"] for p in lane["points"][1:]] for lane in timeline["lanes"]}
    lanes = [lane_texts(f) for _, f in frames]
    assert all(set(lane) == {"baseline", "prompt_lookup"} for lane in lanes)
    for name, trace in (("baseline", state.baseline), ("prompt_lookup", method)):
        counts = [lane[name][0] for lane in lanes]
        assert counts == sorted(counts) and counts[0] == 0 and counts[-1] == trace.summary.new_tokens
        assert len(set(counts)) >= 2  # it grew during the replay, not only at the end
        final_text = _html.unescape(lanes[-1][name][2])
        assert final_text == "".join(t for s in trace.steps for t in s.emitted_text)
        assert lanes[-1][name][1] == "true"
        # A lane shows a step once the recorded time of all steps up to it (its timeline point) has passed.
        for (t_play, _), lane in zip(frames, lanes):
            t_ms = timeline["duration_ms"] * t_play / play_s
            shown = sum(len(s.emitted) for s, end in zip(trace.steps, ends[name]) if end <= t_ms + 1e-6)
            assert lane[name][0] == shown
    assert "finished first" in frames[-1][1] and 'class="pg-verdict"' in frames[-1][1]
    assert "pg-verdict" not in frames[0][1]


def test_play_race_streams_frames(compared: list[tuple[Any, ...]]) -> None:
    state = compare_tab.COMPARED.read(compared[-1])["state"]
    frames = list(compare_tab.play_race(next(iter(state.traces)), state))
    assert len(frames) >= 3 and 'data-testid="pg-race"' in frames[-1]
    assert 'role="alert"' in next(compare_tab.play_race(None, None))


# --------------------------------------------------------------------------- in the browser (the real app)

@pytest.fixture(scope="module")
def teach_page_factory(shared_apps: Any, shared_chromium: Any) -> Any:
    """New pages on the session's real app that preloads the bundled Gemma (`appserver.SharedApps`) in the session's
    headless Chromium (a Chromium of the module's own cannot start beside it: Playwright's sync API refuses a second
    one in the main thread's running loop)."""
    url = shared_apps.url("ui-teach-server.log")
    browser = shared_chromium
    contexts = []

    def new_page() -> Any:
        context = browser.new_context(viewport={"width": 1440, "height": 1000})
        contexts.append(context)
        pg = context.new_page()
        pg.set_default_timeout(60_000)
        pg.calls = HandlerCalls(pg)  # before the page loads: its load events are handler calls too
        pg.goto(url)
        pg.wait_for_function("() => (document.querySelector('#pg-prompt textarea') || {}).value", timeout=60_000)
        return pg

    try:
        yield new_page
    finally:
        for context in contexts:
            context.close()


def replay_state(page: Any) -> dict[str, Any]:
    return page.evaluate("""() => ({
        tokens: document.querySelectorAll('#pg-replay-output .tok').length,
        current: (document.querySelector('#pg-replay-output .pg-current') || {dataset: {}}).dataset.step,
        steps: document.querySelectorAll('#pg-replay-output .pg-step').length,
        bars: document.querySelectorAll('#pg-replay-chart-acceptance .barlayer .point').length,
        narration: (document.querySelector('#pg-replay-step .pg-narration') || {}).innerText || '',
    })""")


def wait_current(page: Any, step: int) -> dict[str, Any]:
    """Wait until the replay shows `step` (0-based) as current, with its chart redrawn to match."""
    page.wait_for_function(
        """(k) => {
            const cur = document.querySelector('#pg-replay-output .pg-current');
            const marks = ['acceptance', 'timing'].map(c => Array.from(
                document.querySelectorAll(`#pg-replay-chart-${c} .annotation-text`)).map(e => e.textContent.trim()));
            return cur && cur.dataset.step === String(k)
                && marks.every(m => m.length === 1 && m[0] === 'step ' + (k + 1));
        }""", arg=step)
    return replay_state(page)


@needs_chromium
@pytest.mark.browser
@pytest.mark.server
@pytest.mark.bundled
@pytest.mark.slow
def test_replay_theory_and_code_after_a_run_in_the_browser(teach_page_factory: Any, tmp_path: Path) -> None:
    page = teach_page_factory()
    set_number(page, "pg-max-new-tokens", 40)
    page.click("#pg-generate")  # the bundled Gemma, prompt lookup, the code-editing example
    assert wait_finished(page) == "done", page.inner_text("#pg-status-box")

    # The handout: its button shows once the run is done, and gives one self-contained page of this run.
    page.wait_for_selector("#pg-handout", state="visible")
    with page.expect_download() as download:
        page.click("#pg-handout")
    handout = Path(download.value.path()).read_text(encoding="utf-8")
    assert "<h1>Speculative decoding: a handout of one run</h1>" in handout
    assert "prompt_lookup_num_tokens=10" in handout and "target model bundled/gemma-3-270m" in handout
    output = handout.split("Output, every token with its fate</h2>", 1)[1].split("</section>", 1)[0]
    tokens_in_page = page.locator("#pg-output .tok").count()
    assert output.count('<span class="tok" ') == tokens_in_page > 0, (output.count('<span class="tok" '), tokens_in_page)
    assert "<script" not in handout and "http://" not in handout and "https://" not in handout  # nothing fetched

    # Step through: the last run is loaded at its last step.
    page.get_by_role("tab", name="Step through a run").click()
    page.wait_for_selector("#pg-replay-output .pg-current")
    n = int(page.get_attribute("#pg-replay-slider input[type=range]", "max"))
    assert n >= 3
    last = wait_current(page, n - 1)
    assert last["steps"] == n and last["narration"].startswith(f"Step {n}:")
    assert "The last run" in page.inner_text("#pg-replay-status")
    assert last["tokens"] == page.locator("#pg-output .tok").count()  # the whole run, as in the main view

    # One step back: fewer tokens, the previous step highlighted, the chart redrawn with fewer bars.
    page.click("#pg-replay-prev")
    prev = wait_current(page, n - 2)
    page.wait_for_function(f"() => document.querySelectorAll('#pg-replay-chart-acceptance .barlayer .point').length < {last['bars']}")
    prev = replay_state(page)
    assert prev["steps"] == n - 1 and prev["tokens"] < last["tokens"] and prev["bars"] < last["bars"]
    assert prev["narration"].startswith(f"Step {n - 1}:")

    # The slider: to the first step.
    set_number(page, "pg-replay-slider", 1)
    first = wait_current(page, 0)
    assert first["steps"] == 1 and first["tokens"] < prev["tokens"] and first["narration"].startswith("Step 1:")
    # Forward to a step where the target refused drafts, for the picture.
    for k in range(1, n):
        if page.locator('#pg-replay-step .tok[data-status="rejected"]').count():
            break
        page.click("#pg-replay-next")
        wait_current(page, k)
    still(page)  # plotly's transition has ended
    page.locator("#pg-tab-replay").screenshot(path=str(ARTIFACTS / "replay.png"))

    # Play: from the last step it starts over at step 1 and steps forward on its own; Pause holds it.
    set_number(page, "pg-replay-slider", n)
    wait_current(page, n - 1)
    page.click("#pg-replay-play")
    wait_current(page, 0)
    wait_current(page, 1)
    assert page.inner_text("#pg-replay-play") == replay_tab.PAUSE
    page.click("#pg-replay-play")
    page.wait_for_function(f"() => document.querySelector('#pg-replay-play').innerText === {replay_tab.PLAY!r}")
    page.calls.settle()  # the Pause's answer (its timer off) and a tick already on its way have landed
    held, tick = replay_state(page)["current"], page.calls.fn_named("replay_tick")
    ticks = page.calls.sent.count(tick)
    page.calls.page_time(2.5 * replay_tab.PLAY_EVERY_S)  # two ticks, had the timer gone on, sent and answered
    assert page.calls.sent.count(tick) == ticks, "paused, yet the play's timer ticked on"
    assert replay_state(page)["current"] == held, "paused, yet the replay moved on"
    # On again at the speed control's fastest pace (its change reaches the timer while paused), to the end, where it
    # stops by itself.
    set_number(page, "pg-replay-speed", replay_tab.PLAY_SECONDS[0])
    page.calls.settle()
    page.click("#pg-replay-play")
    page.wait_for_function(
        f"""() => document.querySelector('#pg-replay-play').innerText === {replay_tab.PLAY!r}
            && (document.querySelector('#pg-replay-output .pg-current') || {{dataset: {{}}}}).dataset.step === '{n - 1}'""",
        timeout=int((n * replay_tab.PLAY_EVERY_S + 60) * 1000))
    assert wait_current(page, n - 1)["steps"] == n

    # A corrupt file: a clear message in the page, the replay left as it was.
    before = replay_state(page)
    page.set_input_files("#pg-tab-replay input[type=file]",
                         files=[{"name": "broken.json", "mimeType": "application/json", "buffer": b"{not json"}])
    alert = page.locator("#pg-replay-status [role=alert]")
    alert.wait_for()
    assert "Cannot replay broken.json" in alert.inner_text() and "not valid JSON" in alert.inner_text()
    assert replay_state(page)["tokens"] == before["tokens"]
    page.screenshot(path=str(ARTIFACTS / "replay-bad-file.png"))

    # Theory: the curves with this run's measured point, and the diagnosis in sentences.
    page.get_by_role("tab", name="Theory").click()
    page.wait_for_selector("#pg-theory-chart .js-plotly-plot .main-svg")
    legend = page.eval_on_selector_all("#pg-theory-chart .legendtext", "els => els.map(e => e.textContent)")
    assert "prompt_lookup: measured" in legend and "γ = 3" in legend
    assert page.locator("#pg-diagnosis-box li").count() >= 2
    assert "The target judged" in page.inner_text("#pg-diagnosis-box")
    still(page)
    page.locator("#pg-tab-theory").screenshot(path=str(ARTIFACTS / "theory.png"))

    # The code of the run.
    page.get_by_role("tab", name="Show the code").click()
    page.wait_for_function("() => (document.querySelector('#pg-code-python') || {}).innerText?.includes('generate(')")
    assert "prompt_lookup_num_tokens=10" in page.inner_text("#pg-code-python")
    assert "python -m playground run" in page.inner_text("#pg-code-cli")

    # Every method explained in five parts.
    page.get_by_role("tab", name="All methods explained").click()
    page.wait_for_selector("#pg-methods table")
    assert page.locator("#pg-methods tr[data-method]").count() == len(METHODS)

    # The gallery: a recording picked in the step-through tab opens there, at its first step (a lesson steps it on
    # from there), with its line.
    from playground import gallery

    recording = next(r for r in gallery.GALLERY if r.key == "prompt-lookup-greedy")
    recorded = gallery.load(recording.key)
    page.get_by_role("tab", name="Step through a run").click()
    page.click("#pg-gallery input")
    page.get_by_role("option", name=recording.title("en")).click()
    page.wait_for_function("(t) => document.querySelector('#pg-replay-status').innerText.includes(t)",
                           arg=recording.title("en"))
    page.wait_for_function("""(k) => {
        const current = document.querySelector('#pg-replay-output .pg-current');
        return current && current.dataset.step === String(k)
            && document.querySelectorAll('#pg-replay-output .pg-step').length === k + 1;
    }""", arg=0)
    opened = replay_state(page)
    assert opened["steps"] == 1 and opened["narration"].startswith("Step 1:")
    assert int(page.get_attribute("#pg-replay-slider input[type=range]", "max")) == max(len(recorded.steps), 2)
    assert recording.look("en")[:30] in page.inner_text("#pg-gallery-look")


WATCH_RACE = """() => {
  window.__lanes = {};
  const box = document.querySelector('#pg-race-box');
  const record = () => box.querySelectorAll('.pg-lane').forEach(l => {
    const seq = window.__lanes[l.dataset.lane] = window.__lanes[l.dataset.lane] || [];
    const n = Number(l.dataset.tokens);
    if (seq[seq.length - 1] !== n) seq.push(n);
  });
  new MutationObserver(record).observe(box, {childList: true, subtree: true, attributes: true});
}"""


@needs_chromium
@pytest.mark.browser
@pytest.mark.server
@pytest.mark.bundled
@pytest.mark.slow
def test_compare_and_race_in_the_browser(teach_page_factory: Any) -> None:
    page = teach_page_factory()
    page.get_by_role("tab", name="Compare methods").click()
    set_number(page, "pg-compare-tokens", 16)
    set_number(page, "pg-compare-repeats", 1)  # the table, charts and race of one repeat (repeats: the handler tests)
    page.click("#pg-compare-run")
    page.wait_for_selector("#pg-compare-status [data-kind=running]")
    page.wait_for_selector("#pg-compare-status [data-kind=done], #pg-compare-status [data-kind=error]",
                           timeout=RUN_TIMEOUT_MS)
    assert page.get_attribute("#pg-compare-status [data-testid=pg-status]", "data-kind") == "done", \
        page.inner_text("#pg-compare-status")
    methods = page.eval_on_selector_all("#pg-compare-table tr[data-method]", "els => els.map(e => e.dataset.method)")
    assert methods == ["baseline", "prompt_lookup"]
    speedup = float(page.get_attribute('#pg-compare-table tr[data-method="prompt_lookup"]', "data-speedup"))
    assert speedup > 0
    for chart in ("#pg-compare-speedup", "#pg-compare-cost"):
        page.wait_for_selector(f"{chart} .js-plotly-plot .main-svg")
        assert page.locator(f"{chart} .barlayer .point").count() >= 2
    assert page.locator("#pg-compare-diagnosis li").count() >= 2

    # The race: both lanes' text grows as recorded, and each ends with its whole output.
    page.evaluate(WATCH_RACE)
    page.click("#pg-race-play")
    page.wait_for_selector("#pg-race-box .pg-verdict", timeout=60_000)
    lanes = page.evaluate("window.__lanes")
    assert set(lanes) == {"baseline", "prompt_lookup"}
    for name, seq in lanes.items():
        assert seq == sorted(seq) and len(seq) >= 2 and seq[-1] > 0, (name, seq)
    assert lanes["baseline"][-1] >= 2 and len(lanes["baseline"]) >= 3  # one token per step: visibly growing
    done = page.eval_on_selector_all("#pg-race-box .pg-lane", "els => els.map(e => e.dataset.done)")
    assert done == ["true", "true"]
    texts = page.eval_on_selector_all("#pg-race-box .pg-lane-text", "els => els.map(e => e.textContent)")
    output = page.inner_text('#pg-compare-table tr[data-method="prompt_lookup"] td:last-child')
    if output.strip() == "= baseline":  # lossless greedy: both lanes wrote the same text
        assert texts[0] == texts[1] and texts[0].strip()
    still(page)
    page.locator("#pg-tab-compare").screenshot(path=str(ARTIFACTS / "compare.png"))
