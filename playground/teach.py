"""The page's teaching and measuring views: step-through replay, theory, the code, Compare and the race.

Handlers as plain functions (the UI in `ui.py` wires them to components); everything that draws
is in `render` and `charts`, every figure comes from a `Trace`, so a saved trace replays exactly
like the run that made it.

- Replay: `load_trace_file` (a clear `TraceFormatError` message for anything that is not a trace),
  `replay_view(trace, k)`: the coloured text of steps[:k+1] with step k outlined, the step told in
  words (draft → verify → append), the charts of the first k+1 steps with step k marked, the figures.
- Theory: `theory_view(trace, baseline)`: E(α, γ) curves with the run's measured (α, τ) and
  `theory.diagnose` in sentences. A baseline is any baseline run of this session on the same prompt
  and settings (from the main view or from Compare).
- Code: `code_view(request)`: `snippet.show_code` as (python, command) or a message.
- Compare: `compare(...)` runs `bench.compare_on_prompt` (warm-up, interleaved, same prompt) in a
  worker thread, streaming its progress; `compare_table_html` and the `bench_charts` figures show it.
- Race: `race_frames(baseline, method)` yields (seconds into the replay, HTML) frames in which both
  lanes' text grows at the pace the traces recorded (the set-up, then each step's draft + verify + other), scaled to at most
  `RACE_MAX_S` seconds; `play_race` sleeps between them.
"""

from __future__ import annotations

import html
import math
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import gradio as gr
from gradio import utils as gradio_utils

from . import bench, bench_charts, charts, render, theory
from .errors import PlaygroundError
from .gpu import gpu
from .methods import METHODS, get_method
from .settings import get_settings
from .trace import Trace, TraceFormatError, short_repr, summarize_steps

if TYPE_CHECKING:  # the engine and snippet (torch, Transformers) are imported by the handlers that use them
    from .engine import RunRequest

MAX_TRACE_BYTES = 20 * 1024 * 1024
REPLAY_WINDOW_STEPS = 200  # steps drawn around the replay's current one (text and charts)
MAX_NAME_SHOWN = 60  # characters of a visitor's file or model name echoed in a message
COMPARE_TOKENS = 32  # new tokens per run when the request names none
MAX_COMPARE_REPEATS = 5  # as the page's slider
MAX_BASELINES = 8  # baseline traces remembered per session (for diagnoses of later runs)
RACE_MAX_S = 10.0  # a race replay lasts at most this long …
RACE_MIN_S = 2.5  # … and at least this long (shorter races are slowed down, and say so)
RACE_FPS = 12
POLL_S = 0.1

LECTURE_LABELS = {"drafts": "What drafts", "verifies": "How it is verified", "pays_off": "When it pays off",
                  "cost": "What it costs", "failure": "When it fails"}


# --------------------------------------------------------------------------- replay


def load_trace_file(path: str | Path | None) -> Trace:
    """A trace from an uploaded file; `TraceFormatError` with a message for the page otherwise."""
    if not path:
        raise TraceFormatError("no file was uploaded")
    p = Path(path)
    size = p.stat().st_size
    if size > MAX_TRACE_BYTES:
        raise TraceFormatError(f"the file is {size / 1e6:.1f} MB; a trace file is at most {MAX_TRACE_BYTES // 10**6} MB")
    data = p.read_bytes()  # an OSError here: the caller says the file could not be read
    try:
        return Trace.from_json(data)
    except TraceFormatError:
        raise
    except Exception as exc:  # a JSON document shaped like a trace but holding nonsense
        raise TraceFormatError(f"malformed trace: {exc}") from None


def describe_trace(trace: Trace, source: str) -> str:
    s = trace.summary
    assistant = f" with {trace.assistant}" if trace.assistant else ""
    return (f"{source}: {trace.method} on {trace.target}{assistant} · {s.new_tokens} tokens in {s.steps} verification "
            f"steps · move the slider or use ◀ ▶ to step through it")


def step_number(value: Any, n: int) -> int:
    """The slider's step (1-based) as sent by a client: a whole number, clamped to 1 … n; else our message."""
    if value is None or value == "":
        return n
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PlaygroundError(f"the step must be a number from 1 to {n}; got {short_repr(value, MAX_NAME_SHOWN)}")
    return min(max(int(value), 1), n)


def replay_view(trace: Trace | None, value: Any) -> tuple[Any, ...]:
    """(coloured text, step in words, acceptance chart, timing chart, figures) for slider position `value`
    (1-based: the first `value` steps, the last of them outlined).

    Text and charts show at most REPLAY_WINDOW_STEPS steps up to the current one, so one move of the
    slider costs the same on a trace of any length; the figures count every step up to it.
    """
    if trace is None or not trace.steps:
        empty = render.empty_tokens("Generate something, or load a trace file, to step through it here.")
        return (empty, "", *charts.figures([]), render.stats_html(None))
    n = len(trace.steps)
    k = step_number(value, n) - 1
    first = max(0, k + 1 - REPLAY_WINDOW_STEPS)
    window = trace.steps[first: k + 1]
    tokens = render.render_tokens(window, current=k - first, earlier=first)
    detail = render.step_detail_html(trace.steps[k], trace.method, k)
    fig_a, fig_t = charts.figures(window, current=k, total_steps=n if not first else None)
    shown = trace.steps[: k + 1]
    elapsed = (trace.setup_ms + sum(s.time_ms for s in shown)) / 1000.0
    stats = render.stats_html(summarize_steps(shown, elapsed, trace.setup_ms))
    return tokens, detail, fig_a, fig_t, stats


def slider_for(trace: Trace | None) -> Any:
    """The replay slider for a trace: 1 … its steps. Gradio refuses a slider whose minimum is its maximum, so a
    one-step trace (a one-token run) gets 1 … 2, fixed at 1 and not movable (the handlers clamp to the steps)."""
    n = len(trace.steps) if trace is not None and trace.steps else 1
    return gr.update(minimum=1, maximum=max(n, 2), value=n, step=1, interactive=n > 1)


def _steps_in(trace: Trace | None) -> int:
    return len(trace.steps) if trace is not None and trace.steps else 1


def replay_prev(trace: Trace | None, value: Any) -> Any:
    return gr.update(value=max(1, step_number(value, _steps_in(trace)) - 1))


def replay_next(trace: Trace | None, value: Any) -> Any:
    n = _steps_in(trace)
    return gr.update(value=min(n, step_number(value, n) + 1))


PLAY_EVERY_S = 1.0  # one verification step per second: time to read the sentence under the text
PLAY, PAUSE = "▶ Play", "⏸ Pause"


def replay_play(trace: Trace | None, value: Any, playing: bool) -> tuple[Any, Any, Any, bool]:
    """Play / Pause: (slider, timer, button, playing). Playing from the last step starts over at step 1."""
    if playing is True or trace is None or len(trace.steps) < 2:
        return gr.skip(), gr.update(active=False), gr.update(value=PLAY), False
    at_end = step_number(value, len(trace.steps)) >= len(trace.steps)
    return (gr.update(value=1) if at_end else gr.skip()), gr.update(active=True), gr.update(value=PAUSE), True


def replay_tick(trace: Trace | None, value: Any, playing: bool) -> tuple[Any, Any, Any, bool]:
    """One step forward while playing; at the last step the play ends by itself."""
    if playing is not True or trace is None or not trace.steps:
        return gr.skip(), gr.update(active=False), gr.update(value=PLAY), False
    n = len(trace.steps)
    step = min(n, step_number(value, n) + 1)
    if step >= n:
        return gr.update(value=step), gr.update(active=False), gr.update(value=PLAY), False
    return gr.update(value=step), gr.skip(), gr.skip(), True


def replay_load(trace: Trace | None, source: str) -> tuple[Any, ...]:
    """(trace state, status, slider, *replay_view) for a freshly loaded trace, at its last step."""
    if trace is None:
        return (None, render.status_html("Nothing to replay yet: generate something first.", "idle"),
                slider_for(None), *replay_view(None, 1))
    return (trace, render.status_html(describe_trace(trace, source), "done"), slider_for(trace),
            *replay_view(trace, len(trace.steps)))


def replay_last(trace: Trace | None) -> tuple[Any, ...]:
    return replay_load(trace, "The last run")


class TraceUpload(gr.UploadButton):
    """The trace upload button, whose value reaches `on_trace_upload` as the client sent it: Gradio's own check of
    the file model would refuse a value that is not an upload with its generic "Error"; ours says why. Gradio still
    refuses, before any handler runs, a file record that names a path outside its upload folder."""

    is_template = True  # Gradio's mark for a subclass of a built-in component: the page draws an UploadButton

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.data_model = None


MAX_UPLOAD_PATH_CHARS = 4096  # longer than any path Gradio's upload folder makes


def uploaded_path(upload: Any) -> Path:
    """Where Gradio stored a trace upload, from the value a client sent (a file record). Only a file inside Gradio's
    upload folder is ever read: text, a record without a path, or a path elsewhere (/etc/passwd) is refused first."""
    if isinstance(upload, list) and len(upload) == 1:  # the page's upload button sends its one file in a list
        upload = upload[0]
    path = upload.get("path") if isinstance(upload, dict) else None
    if not isinstance(path, str) or not path or len(path) > MAX_UPLOAD_PATH_CHARS:
        raise TraceFormatError(f"expected an uploaded file; got {short_repr(upload, MAX_NAME_SHOWN)}")
    try:
        folder = Path(gradio_utils.get_upload_folder()).resolve()
        resolved = Path(path).resolve()
    except (ValueError, OSError):  # a NUL byte, a lone surrogate, a loop of links
        raise TraceFormatError("expected an uploaded file; got a path that is not one") from None
    if folder not in resolved.parents:
        raise TraceFormatError("expected a file uploaded to this page; got a path elsewhere on the server")
    if not resolved.is_file():
        raise TraceFormatError("expected an uploaded file; got a path in the upload folder that is not a file")
    return resolved


def on_trace_upload(upload: Any) -> tuple[Any, ...]:
    """Load an uploaded trace; a file that is not one gets a clear message (and the replay is left as it was).

    `upload` is the file record as the client sent it (`TraceUpload`, no preprocessing): only a file in Gradio's
    upload folder is read (`uploaded_path`), and its content is untrusted, checked field by field by
    `Trace.from_dict`.
    """
    from .engine import user_message

    name = "the file"
    try:
        path = uploaded_path(upload)
        name = path.name if len(path.name) <= MAX_NAME_SHOWN else path.name[:MAX_NAME_SHOWN] + "…"
        trace = load_trace_file(path)
        return replay_load(trace, f"Loaded {name}")
    except Exception as exc:  # TraceFormatError, OSError, or anything else: one line, never a traceback
        reason = (str(exc) if isinstance(exc, TraceFormatError) else "the file could not be read"
                  if isinstance(exc, OSError) else user_message(exc, "reading the trace"))
        message = f"Cannot replay {name}: {reason}. Load a trace JSON saved by this playground (Download trace)."
        return (gr.skip(), render.status_html(message, "error"), *([gr.skip()] * 6))


# --------------------------------------------------------------------------- baselines of this session


def _same_run_settings(a: Trace, b: Trace) -> bool:
    keys = ("sample", "max_new_tokens", "temperature", "top_p", "top_k", "seed")
    return (a.prompt == b.prompt and a.target == b.target and a.chat == b.chat
            and a.env.get("dtype") == b.env.get("dtype")
            and all(a.decoding.get(k) == b.decoding.get(k) for k in keys))


def find_baseline(trace: Trace, baselines: Sequence[Trace] | None) -> Trace | None:
    """The most recent baseline of this session run on the same prompt and settings as `trace`."""
    for b in reversed(list(baselines or [])):
        if b is not trace and _same_run_settings(trace, b):
            return b
    return None


def remember_baseline(baselines: Sequence[Trace] | None, trace: Trace | None) -> list[Trace]:
    out = list(baselines or [])
    if trace is not None and trace.method == "baseline" and trace.steps:
        out = [b for b in out if not _same_run_settings(b, trace)] + [trace]
    return out[-MAX_BASELINES:]


# --------------------------------------------------------------------------- theory

THEORY_TEXT = """
**Why tokens per step follow these curves.** In one verification step the target checks γ drafted tokens
with a single forward pass. If each drafted token survives with probability α, independently, the step keeps
the accepted prefix plus one token of the target's own (the correction after a rejection, or the bonus after a
fully accepted draft): on average 1 + α + α² + … + α^γ = (1 − α^(γ+1)) / (1 − α) tokens (Leviathan et al., 2023).
Only the first refused draft is *rejected*; the drafts after it are *discarded* without being judged, since the
target's view of them rests on a refused prefix.
A longer draft only helps while α is high: the k-th draft token adds α^k, so at α = 50 % anything past γ ≈ 3 adds
almost nothing. Tokens per step are not yet a speedup: a step also costs γ·c for drafting (c = one draft token's
cost in baseline steps), the wide verification forward (v), which on a GPU costs about one baseline step but on a
CPU often several, and the rest of the loop (o: strategy update, stopping checks). Speedup ≈ tokens per step /
(γ·c + v + o), with the set-up and the first step (prefill) not sped up. The trace times every step as draft,
verify and other, and the set-up before the first step: together they are the run's elapsed time.
The red diamond is this run's measured point (α, τ); the hollow circle is what the formula expects from its α and
mean γ. A diamond above the circle means early draft positions were accepted more often than later ones.
"""


def theory_view(trace: Trace | None, baseline: Trace | None = None) -> tuple[Any, str]:
    """(E(α, γ) figure with the run's measured point, HTML: figures in words and `theory.diagnose`)."""
    if trace is None:
        return charts.theory_figure(), render.status_html("Run a method to see where it lands on these curves.", "idle")
    est = theory.estimate(trace, baseline)
    fig = charts.theory_figure(est.alpha, est.tau, est.gamma, est.expected_tau, label=trace.method)
    sentences = theory.diagnose(trace, baseline)
    facts = []
    if est.alpha is not None:
        facts.append(f"α = {est.alpha:.0%} ({est.accepted} of {est.drafted} drafted tokens kept)")
    if est.gamma is not None:
        facts.append(f"mean draft γ = {est.gamma:.1f}")
    if est.tau is not None:
        facts.append(f"measured τ = {est.tau:.2f} tokens per step")
    if est.expected_tau is not None:
        facts.append(f"expected from α, γ: {est.expected_tau:.2f}")
    summary = trace.summary
    if summary.elapsed_s > 0:
        shares = [(summary.draft_ms, "draft"), (summary.verify_ms, "verify"), (summary.other_ms, "other"),
                  (summary.setup_ms, "set-up")]
        facts.append("time: " + ", ".join(f"{name} {ms / (summary.elapsed_s * 1000):.0%}" for ms, name in shares))
    source = ("Compared with a baseline run of this session on the same prompt and settings."
              if baseline is not None else "")
    items = "".join(f"<li>{html.escape(s)}</li>" for s in sentences)
    body = (f'<div class="pg-theory" data-testid="pg-diagnosis" data-baseline="{str(baseline is not None).lower()}">'
            f'<p><b>{html.escape(trace.method)}</b> · {html.escape(" · ".join(facts))}</p>'
            f'<ul class="pg-diagnosis">{items}</ul>'
            + (f'<p class="pg-note">{html.escape(source)}</p>' if source else "") + "</div>")
    return fig, body


# --------------------------------------------------------------------------- show the code


def code_view(request: RunRequest, note: str = "") -> tuple[str, str, str]:
    """(python script, CLI command, status HTML) for a request; a message instead where it cannot be shown."""
    from .engine import user_message
    from .snippet import show_code

    try:
        view = show_code(request)
    except Exception as exc:
        return gr.skip(), gr.skip(), render.status_html(f"Cannot show the code: {user_message(exc)}", "error")
    message = note or f"The code for {request.method} on {request.target}."
    return view.python, view.cli, render.status_html(message, "done")


class ClientGone(BaseException):
    """Raised inside work run by `in_thread` once its handler's client has gone (not an `Exception`, so the
    work's own error handling, which keeps measuring other methods, does not swallow it)."""


def in_thread(work: Callable[[Callable[[str], None]], Any], name: str,
              idle_message: Callable[[], str | None] | None = None) -> Iterator[tuple[str, Any]]:
    """Run `work(progress)` in a thread; yield ("progress", message) while it runs, then ("done", result).

    `idle_message` supplies a message when the work reports nothing new (e.g. a start-up load it waits on).
    When this generator is closed (Gradio does so when the client disconnects) the work's next call of
    `progress` raises `ClientGone`: a Compare run stops between its generations, as generation stops.
    """
    messages: "queue.Queue[str]" = queue.Queue()
    box: dict[str, Any] = {}
    gone = threading.Event()  # the handler was closed (its client left): the work ends at its next report

    def progress(message: str) -> None:
        if gone.is_set():
            raise ClientGone(f"{name}: the client went away")
        messages.put(message)

    def run() -> None:
        try:
            box["result"] = work(progress)
        except BaseException as exc:  # re-raised in the handler's thread
            box["error"] = exc

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    last = ""
    try:
        while thread.is_alive():
            thread.join(POLL_S)
            latest = None
            while not messages.empty():
                latest = messages.get_nowait()
            if latest is None and idle_message is not None:
                latest = idle_message()
            if latest and latest != last:
                last = latest
                yield "progress", latest
    finally:  # also when Gradio closes this generator because the client disconnected
        gone.set()
    if "error" in box:
        raise box["error"]
    yield "done", box.get("result")


def show_code_for_settings(*inputs: Any) -> Iterator[tuple[Any, Any, str]]:
    """The code for the page's current settings (inputs as `ui.generate`'s); loads models if needed."""
    from . import ui
    from .engine import prepare, user_message
    from .snippet import show_code

    try:
        request = ui.build_request(*inputs)
        yield gr.skip(), gr.skip(), render.status_html(f"Preparing {request.target} to spell out the run…", "running")
        view = None
        for kind, value in in_thread(lambda progress: show_code(prepare(request, progress=progress)), "playground-code"):
            if kind == "progress":
                yield gr.skip(), gr.skip(), render.status_html(value, "running")
            else:
                view = value
        yield view.python, view.cli, render.status_html(
            f"The code for these settings: {request.method} on {request.target}.", "done")
    except Exception as exc:
        yield gr.skip(), gr.skip(), render.status_html(f"Cannot show the code: {user_message(exc)}", "error")


# --------------------------------------------------------------------------- after a run


def on_run_done(trace_file: Any, baselines: list[Trace] | None) -> tuple[Any, ...]:
    """After each run: replay it, place it on the theory curves with its diagnosis, show its code.

    Outputs: (last-run state, replay trace state, replay status, slider, *replay_view (5), theory figure,
    diagnosis HTML, baselines state, python code, CLI command, code status).
    """
    from .snippet import request_from_trace

    path = trace_file.get("path") if isinstance(trace_file, dict) else trace_file  # a path, or a FileData dict
    if not path:  # the run failed: leave every view as it was
        return tuple([gr.skip()] * 15)
    try:
        trace = Trace.load(path)
    except Exception as exc:  # should not happen: the file was just written by the run
        return (gr.skip(), gr.skip(), render.status_html(f"Cannot replay the last run: {exc}", "error"),
                *([gr.skip()] * 12))
    baseline = find_baseline(trace, baselines)
    baselines = remember_baseline(baselines, trace)
    fig, diagnosis = theory_view(trace, baseline)
    python, cli, code_status = code_view(request_from_trace(trace), f"The code that reproduces the last run "
                                                                    f"({trace.method} on {trace.target}).")
    return (trace, *replay_load(trace, "The last run"), fig, diagnosis, baselines, python, cli, code_status)


# --------------------------------------------------------------------------- compare


@dataclass
class CompareState:
    """What the race needs from the last comparison: baseline and method traces by label."""

    baseline: Trace | None = None
    traces: dict[str, Trace] = field(default_factory=dict)


def _spec_label(name: str, params: dict[str, Any]) -> str:
    """The method's name plus only the parameters that differ from the registry's defaults."""
    method = get_method(name)
    changed = {k: v for k, v in params.items() if method.param(k).default != v}
    if not changed:
        return name
    return f"{name}(" + ", ".join(f"{k}={v}" for k, v in changed.items()) + ")"


def compare_specs(methods: Sequence[str], target: str, assistant: str | None, current_method: str | None,
                  *param_values: Any) -> list[bench.MethodSpec]:
    """Specs for the chosen methods with the page's parameter values (baseline first, always)."""
    from . import ui

    chosen = [m for m in dict.fromkeys(methods or []) if m != "baseline"]
    if not chosen:
        raise PlaygroundError("choose at least one method to compare with baseline")
    current = METHODS.get(current_method or "")
    specs = [bench.make_spec("baseline")]
    for name in chosen:
        method = get_method(name)
        params = ui.collect_params(name, *param_values)
        helper = None
        if method.needs_assistant:
            # The page's assistant field belongs to the method chosen there; others get their usual one.
            same_kind = current is not None and current.needs_assistant and current.assistant == method.assistant
            helper = ui.suggest_assistant(method, target, assistant if same_kind else None)
        specs.append(bench.make_spec(name, params, helper, label=_spec_label(name, params)))
    return specs


def _fmt(x: Any, spec: str, suffix: str = "") -> str:
    return "–" if x is None else f"{x:{spec}}{suffix}"


def compare_table_html(result: bench.CompareResult, skipped: Sequence[tuple[str, str]] = ()) -> str:
    """One row per method: speedup, tokens/s, α, τ, draft vs verify ms per step, predicted speedups, output check."""
    aggs = {a["label"]: a for a in result.aggregates}
    head = ("<tr><th>method</th><th>speedup</th><th>tokens/s</th><th>acceptance α</th><th>τ tokens/step</th>"
            "<th>draft ms/step</th><th>verify ms/step</th><th>Leviathan et al.</th><th>refined prediction</th>"
            "<th>output</th></tr>")
    rows = []
    for row in result.rows:
        label = row["label"]
        a = aggs.get(label, {})
        if row.get("error"):
            rows.append(f'<tr data-method="{html.escape(row["method"])}" data-label="{html.escape(label)}">'
                        f'<td>{html.escape(label)}</td><td colspan="9">⚠ {html.escape(row["error"])}</td></tr>')
            continue
        if row["method"] == "baseline":
            check = "the reference"
        elif row.get("lossless_ok") is True:
            check = "= baseline"
        elif row.get("lossless_ok") is False:
            note = html.escape(row.get("lossless_note") or "", quote=True)
            check = f'<span title="{note}">differs at token {html.escape(str(row.get("first_divergence")))}</span>'
        else:
            check = html.escape(row.get("lossless_note") or "–")
        speed = a.get("speedup", row.get("speedup"))
        cells = [
            f"<b>{_fmt(speed, '.2f', '×')}</b>",
            _fmt(a.get("tokens_per_s"), ".1f"),
            _fmt(a.get("acceptance_rate"), ".0%"),
            _fmt(a.get("tokens_per_step"), ".2f"),
            _fmt(a.get("draft_ms_per_step"), ".1f"),
            _fmt(a.get("verify_ms_per_step"), ".1f"),
            _fmt(a.get("theoretical_speedup"), ".2f", "×") if row["method"] != "baseline" else "",
            _fmt(a.get("refined_speedup"), ".2f", "×") if row["method"] != "baseline" else "",
            check,  # HTML, escaped above
        ]
        rows.append(f'<tr data-method="{html.escape(row["method"])}" data-label="{html.escape(label)}" '
                    f'data-speedup="{_fmt(speed, ".4f")}"><td>{html.escape(label)}</td>'
                    + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    for label, reason in skipped:
        rows.append(f'<tr data-label="{html.escape(label)}" data-skipped="true"><td>{html.escape(label)}</td>'
                    f'<td colspan="9">skipped: {html.escape(reason)}</td></tr>')
    n = (result.rows[0].get("repeats") or 1) if result.rows else 1
    caption = (f"Same prompt, same run: every method warmed up, then run interleaved with baseline "
               f"({n} repeat{'s' if n != 1 else ''}, medians). Speedup = tokens/s over baseline's.")
    return (f'<table class="pg-table" data-testid="pg-compare-table"><caption style="caption-side: bottom; '
            f'text-align: left; opacity: .75; font-size: 12.5px; padding-top: 4px">{html.escape(caption)}</caption>'
            f"{head}{''.join(rows)}</table>")


def compare_verdict(result: bench.CompareResult) -> str:
    rows = [a for a in result.aggregates if a["method"] != "baseline" and a.get("speedup") is not None]
    if not rows:
        return "No method produced a measurement."
    best = max(rows, key=lambda a: a["speedup"])
    if best["speedup"] >= 1.05:
        return f"Fastest here: {best['label']}, {best['speedup']:.2f}× baseline."
    return (f"No method beat baseline here (best: {best['label']}, {best['speedup']:.2f}×). That is common for small "
            "models on a CPU: see the diagnosis below for why (acceptance, draft length, draft vs verify cost).")


def diagnoses_html(result: bench.CompareResult) -> str:
    parts = []
    for label, sentences in result.diagnoses.items():
        if label == "baseline" or not sentences:
            continue
        explanation = next((a.get("explanation") for a in result.aggregates if a["label"] == label), "")
        items = "".join(f"<li>{html.escape(s)}</li>" for s in sentences)
        extra = f'<p class="pg-note">{html.escape(explanation)}</p>' if explanation else ""
        parts.append(f'<div data-label="{html.escape(label)}"><h4 style="margin: 8px 0 2px">{html.escape(label)}</h4>'
                     f'<ul class="pg-diagnosis">{items}</ul>{extra}</div>')
    return f'<div data-testid="pg-compare-diagnosis">{"".join(parts)}</div>'


def _compare_outputs(status: str, table: Any = None, fig_s: Any = None, fig_c: Any = None, diag: Any = None,
                     race_choice: Any = None, state: Any = None, baselines: Any = None) -> tuple[Any, ...]:
    skip = gr.skip()
    return (status, *(skip if v is None else v for v in (table, fig_s, fig_c, diag, race_choice, state, baselines)))


@gpu(duration=120)  # several warmed-up generations: longer than ZeroGPU's 60 s default
def compare(prompt: str, target: str | None, assistant: str | None, method: str | None, dtype: str | None,
            chat: Any, methods: Sequence[str] | None, max_new_tokens: float | None, repeats: float | None,
            baselines: list[Trace] | None, *param_values: Any) -> Iterator[tuple[Any, ...]]:
    """Run baseline and the chosen methods on the page's prompt (warm-up, interleaved, same prompt).

    Outputs: (status, table HTML, speedup figure, step-cost figure, diagnoses HTML, race method
    dropdown, compare state, baselines state). Streams progress in the status; errors end up there too.
    """
    from . import ui
    from .engine import RunRequest, prepare, user_message

    try:
        # The page's own checks (`ui.build_request`) on the shared settings: types, sizes, finite numbers, text.
        request = ui.build_request(prompt, target, assistant, method, None, max_new_tokens or COMPARE_TOKENS, False,
                                   None, None, None, None, chat, dtype)
        if not request.prompt.strip():
            raise PlaygroundError("the prompt is empty: type something for the model to continue")
        if not isinstance(methods, list) or not all(isinstance(m, str) for m in methods):
            raise PlaygroundError(f"methods must be a list of method names; got {short_repr(methods, MAX_NAME_SHOWN)}")
        prompt, target, dtype, chat_value = request.prompt, request.target, request.dtype, request.chat
        tokens = request.max_new_tokens
        if not 2 <= tokens <= get_settings().max_new_tokens:
            raise PlaygroundError(f"new tokens per run must be between 2 and {get_settings().max_new_tokens}; got {tokens}")
        reps = ui.parse_integer(repeats, 1, "repeats")
        if not 1 <= reps <= MAX_COMPARE_REPEATS:
            raise PlaygroundError(f"repeats must be between 1 and {MAX_COMPARE_REPEATS}; got {reps}")
        specs = compare_specs(methods, target, request.assistant, request.method, *param_values)
        yield _compare_outputs(render.status_html(f"Preparing {target}…", "running"))

        def work(progress: Callable[[str], None]) -> tuple[bench.CompareResult, list[tuple[str, str]]]:
            ok, skipped = [], []
            for spec in specs:  # a method the model cannot do is skipped with its reason, not fatal
                progress(f"Preparing {spec.label}…")
                try:
                    prepare(RunRequest(prompt=prompt, target=target, method=spec.method, assistant=spec.assistant,
                                       params=dict(spec.params), max_new_tokens=tokens, dtype=dtype, chat=chat_value),
                            progress=progress)
                    ok.append(spec)
                except Exception as exc:
                    if spec.method == "baseline":
                        raise
                    skipped.append((spec.label, user_message(exc)))
            if len(ok) < 2:
                raise PlaygroundError("none of the chosen methods can run with this target: "
                                 + "; ".join(f"{label}: {why}" for label, why in skipped))
            result = bench.compare_on_prompt(prompt, ok, target=target, max_new_tokens=tokens, dtype=dtype,
                                             chat=chat_value, repeats=reps, warmup=True, measure_overhead=False,
                                             progress=progress)
            return result, skipped

        outcome = None
        for kind, value in in_thread(work, "playground-compare"):
            if kind == "progress":
                yield _compare_outputs(render.status_html(f"Comparing: {value}", "running"))
            else:
                outcome = value
        result, skipped = outcome
        figs = bench_charts.compare_figures(result)
        state = CompareState(baseline=result.traces.get("baseline"),
                             traces={k: v for k, v in result.traces.items() if k != "baseline"})
        choices = list(state.traces)
        best = max((a for a in result.aggregates if a["label"] in state.traces and a.get("speedup") is not None),
                   key=lambda a: a["speedup"], default=None)
        race_choice = gr.update(choices=choices, value=(best or {}).get("label") or (choices[0] if choices else None),
                                interactive=bool(choices))
        status = render.status_html(compare_verdict(result), "done",
                                    f"{tokens} new tokens per run, {reps} repeat{'s' if reps != 1 else ''}, "
                                    "after a warm-up of every method")
        yield _compare_outputs(status, compare_table_html(result, skipped), figs["speedup_vs_theory"],
                               figs["step_cost"], diagnoses_html(result), race_choice, state,
                               remember_baseline(baselines, state.baseline))
    except Exception as exc:
        yield _compare_outputs(render.status_html(user_message(exc, "the comparison"), "error"))


# --------------------------------------------------------------------------- race


def race_frames(baseline: Trace, method: Trace, max_s: float = RACE_MAX_S, min_s: float = RACE_MIN_S,
                fps: float = RACE_FPS) -> Iterator[tuple[float, str]]:
    """(seconds into the replay, race HTML) frames: each lane shows the steps whose recorded end time
    (cumulative draft + verify ms, `bench.race_timeline`) has passed; one frame per change, at most
    `fps` a second; the replay lasts the recorded time, clamped to [min_s, max_s]."""
    timeline = bench.race_timeline(baseline, method)
    traces = (baseline, method)
    duration_s = max(timeline["duration_ms"] / 1000.0, 1e-6)
    play_s = min(max(duration_s, min_s), max_s)
    replay_speed = duration_s / play_s  # 1: as recorded; below 1: slowed down
    ends = [[p["t_ms"] for p in lane["points"][1:]] for lane in timeline["lanes"]]

    def lanes_at(t_ms: float) -> list[dict]:
        out = []
        for lane, trace, lane_ends in zip(timeline["lanes"], traces, ends):
            shown = sum(1 for e in lane_ends if e <= t_ms + 1e-9)
            out.append({"label": lane["label"], "steps": trace.steps[:shown], "total_tokens": lane["new_tokens"],
                        "total_steps": len(trace.steps), "finish_s": lane["total_ms"] / 1000.0})
        return out

    b, m = timeline["lanes"]
    ratio = timeline.get("time_ratio")
    if ratio and ratio >= 1.0:
        verdict = (f"{m['label']} finished first: {m['total_ms'] / 1000:.2f} s against baseline's "
                   f"{b['total_ms'] / 1000:.2f} s ({ratio:.2f}× faster).")
    elif ratio:
        verdict = (f"Baseline finished first: {b['total_ms'] / 1000:.2f} s against {m['label']}'s "
                   f"{m['total_ms'] / 1000:.2f} s ({m['label']} ran at {ratio:.2f}× baseline's speed).")
    else:
        verdict = ""
    slots = max(1, int(play_s * fps))
    last: tuple[int, ...] | None = None
    for i in range(slots + 1):
        t_play = play_s * i / slots
        t_ms = duration_s * 1000.0 * i / slots
        lanes = lanes_at(t_ms)
        counts = tuple(len(lane["steps"]) for lane in lanes)
        if counts == last and i != slots:
            continue
        last = counts
        yield t_play, render.race_html(lanes, t_ms / 1000.0, replay_speed, verdict if i == slots else "")


def play_race(choice: str | None, state: CompareState | None) -> Iterator[str]:
    """Stream the race of baseline against the chosen method at the recorded pace."""
    if state is None or state.baseline is None or not state.traces:
        yield render.status_html("Run a comparison first: the race replays its baseline and method traces.", "error")
        return
    method = state.traces.get(choice if isinstance(choice, str) else "") or next(iter(state.traces.values()))
    start = time.monotonic()
    for t_play, frame in race_frames(state.baseline, method):
        delay = start + t_play - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield frame


def race_placeholder() -> str:
    return render.status_html("Run a comparison, then press Play race: baseline and the chosen method write their "
                              "text side by side at the pace their traces recorded.", "idle")


# --------------------------------------------------------------------------- the methods, for a lecture


def methods_table_html() -> str:
    """Every method's five lecture parts side by side."""
    head = "<tr><th>method</th>" + "".join(f"<th>{html.escape(v)}</th>" for v in LECTURE_LABELS.values()) + "</tr>"
    rows = []
    for name, method in METHODS.items():
        cells = "".join(f"<td>{html.escape(method.lecture.get(key, '–'))}</td>" for key in LECTURE_LABELS)
        rows.append(f'<tr data-method="{html.escape(name)}"><th>{html.escape(method.title)}</th>{cells}</tr>')
    return f'<table class="pg-methods-table" data-testid="pg-methods-table">{head}{"".join(rows)}</table>'
