"""The playground page: one `gr.Blocks`, handlers as plain functions.

The UI knows the engine only through its public surface (`RunRequest`, `prepare`, `LiveRun`,
`user_message`) and the method registry; it builds the method controls from `METHODS` (one
component per distinct parameter name, shown when the chosen method has it) and renders traces
with `render` and `charts`.

The streaming handler `generate` is also the API endpoint ``/generate``; its parameter names
mirror the CLI (`prompt`, `target`, `assistant`, `method`, `params`, `max_new_tokens`, `sample`,
`temperature`, `top_p`, `top_k`, `seed`, `chat`, `dtype`, then `check_plain` and `preset`, appended so older
clients keep working) and its first output is the coloured HTML. With `check_plain`, the same settings then
run without drafting and the stats say how much faster the run was and whether its output is
identical to plain `generate()` (if not: where, and why). A `preset` (a guide example's name) sets everything
but the prompt and the precision. The guide-example picker lives in `ui_presets`, shareable links in `ui_links`,
the MCP tools (PLAYGROUND_MCP=1) in `mcp_tools`. In the page, a click first gathers the visible method controls into the hidden `params`
JSON, then runs `generate`.
"""

from __future__ import annotations

import contextlib
import functools
import html
import inspect
import json
import logging
import math
import os
import secrets
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import gradio as gr

from . import bench, charts, mcp_tools, render, teach, tune_tab, ui_links, ui_presets
from .examples import EXAMPLES as EXAMPLE_SET
from .errors import PlaygroundError
from .gpu import gpu
from .methods import METHODS, Method, Param, get_method
from .models import (CATALOGUE, DEFAULT_TARGET, DEFAULT_UNIVERSAL_ASSISTANT, STORE, describe_precision, ensure_converted,
                     hub_reachable)
from .presets import get_preset
from .settings import get_settings
from .trace import TraceFormatError

# The engine imports torch and Transformers (seconds): handlers import it when they run, so the
# page is served while the start-up load imports them.
if TYPE_CHECKING:
    from .engine import LiveRun, RunRequest

logger = logging.getLogger(__name__)

TITLE = "Assisted-decoding playground"
DEFAULT_METHOD = "prompt_lookup"
DTYPES = ("auto", "float32", "bfloat16")
CHAT_CHOICES = ("auto", "on", "off")

# Page updates while streaming: tokens and figures after every step, but at most every
# UPDATE_EVERY_S (steps of real models on CPU take longer; tiny models would flood the browser),
# the charts at most every CHART_EVERY_S (a Plotly figure is re-sent whole), and always once at
# the end, so the final state is never lost. The first chart update waits CHART_EVERY_S too: the
# browser redraws a Plotly chart in about 0.1 s of CPU, and drawing two with the first tokens held
# those tokens back and took that CPU from the model sharing the machine (a local run).
UPDATE_EVERY_S = 0.04
CHART_EVERY_S = 1.5
POLL_S = 0.1  # how often the loading status is refreshed while models load

EXAMPLES: dict[str, str] = {e.name: e.text for e in EXAMPLE_SET}
DEFAULT_EXAMPLE = "Edit code"

# Styles of the page itself (the token/legend/stat styles live in render.CSS).
PAGE_CSS = """
#pg-header h1 { margin-bottom: 0; }
#pg-header p { margin-top: 4px; opacity: .8; }
#pg-method-summary { font-size: 14px; }
#pg-method-summary p { margin: 0; }
.pg-lecture dt { font-weight: 600; margin-top: 4px; }
.pg-lecture dd { margin: 0 0 4px 0; }
"""


# --------------------------------------------------------------------------- controls from the registry


def param_specs() -> dict[str, Param]:
    """One `Param` per distinct parameter name across the registry (first definition wins)."""
    specs: dict[str, Param] = {}
    for method in METHODS.values():
        for p in method.params:
            specs.setdefault(p.name, p)
    return specs


def _param_update(p: Param | None) -> dict[str, Any]:
    """Show a control with this method's definition of the parameter, or hide it."""
    if p is None:
        return gr.update(visible=False)
    update: dict[str, Any] = {"visible": True, "label": p.label, "info": p.help}
    if p.kind == "choice":
        update["choices"] = list(p.choices)
    else:
        update.update(minimum=p.minimum, maximum=p.maximum, step=p.step or (1 if p.kind == "int" else 0.01))
    return gr.update(**update)


def _param_component(p: Param, visible: bool) -> gr.components.Component:
    common = dict(label=p.label, info=p.help, visible=visible, interactive=True, elem_id=f"pg-param-{p.name}")
    if p.kind == "choice":
        return gr.Dropdown(choices=list(p.choices), value=p.default, **common)
    if p.minimum is not None and p.maximum is not None:
        return gr.Slider(minimum=p.minimum, maximum=p.maximum, value=p.default,
                         step=p.step or (1 if p.kind == "int" else 0.01), **common)
    return gr.Number(value=p.default, precision=0 if p.kind == "int" else None, **common)


def suggest_assistant(method: Method, target: str | None, current: str | None) -> str | None:
    """A sensible assistant for the method's kind of assistant, keeping the user's choice."""
    if not method.needs_assistant:
        return current
    if current:
        return current
    entry = CATALOGUE.get(target or "")
    if method.assistant == "different_tokenizer":
        return DEFAULT_UNIVERSAL_ASSISTANT
    if method.assistant == "same_tokenizer":
        # Hub pairs name their assistant; offline there is no same-tokenizer pair, so the
        # target drafts for itself (every draft accepted: a sanity check).
        if entry is not None and entry.source == "hub" and entry.suggested_assistants:
            return entry.suggested_assistants[0]
        return target
    return None


_ASSISTANT_INFO = {
    "same_tokenizer": "A smaller model with the same tokenizer as the target. Offline, pick the target itself: "
                      "every draft is accepted (a sanity check).",
    "different_tokenizer": "Any small model; its drafts are re-tokenised. Offline pair: SmolLM2 135M Instruct.",
    "gemma4_assistant": "A Gemma 4 assistant checkpoint that reads the target's cache.",
}


def lecture_html(method: Method) -> str:
    labels = {"drafts": "What drafts", "verifies": "How it is verified", "pays_off": "When it pays off",
              "cost": "What it costs", "failure": "When it fails"}
    import html as _html

    items = "".join(
        f"<dt>{_html.escape(labels.get(key, key))}</dt><dd>{_html.escape(text)}</dd>"
        for key, text in method.lecture.items()
    )
    return f'<dl class="pg-lecture">{items}</dl>'


def on_method_change(method_name: str, target: str | None, assistant: str | None) -> list[Any]:
    """Explanation, assistant field and parameter controls for the chosen method."""
    method = get_method(method_name)
    by_name = {p.name: p for p in method.params}
    updates: list[Any] = [method.summary, lecture_html(method)]
    if method.needs_assistant:
        suggested = suggest_assistant(method, target, assistant)
        PRELOAD.convert_assistant(suggested)  # a bundled one is converted while the user sets up the run
        updates.append(gr.update(visible=True, value=suggested, info=_ASSISTANT_INFO.get(method.assistant, "")))
    else:
        updates.append(gr.update(visible=False))
    updates.extend(_param_update(by_name.get(name)) for name in param_specs())
    return updates


def collect_params(method_name: str, *values: Any) -> dict[str, Any]:
    """The chosen method's parameters (only those), named as `generate()` names them."""
    method = get_method(method_name)
    by_name = dict(zip(param_specs(), values))
    return parse_params({p.name: by_name.get(p.name) for p in method.params})  # the client's values, checked


def on_generate_click(method_name: str, *values: Any) -> tuple[dict[str, Any], str, bool]:
    """Runs at once on a click (outside the queue): gather the parameters, say the run is queued,
    and mark the status box as the run's (so the start-up load's poll stops writing to it)."""
    return collect_params(method_name, *values), render.status_html(
        "Queued: waiting for a free generation slot…", "running"), True


def on_sample_change(sample: bool) -> list[Any]:
    return [gr.update(visible=bool(sample)) for _ in range(3)]


def on_example(name: str | None) -> Any:
    return EXAMPLES.get(name or "", gr.skip())


# --------------------------------------------------------------------------- refusals


def refusal(exc: BaseException) -> str:
    """One line for a visitor whose request was refused: our message (cut short), never an exception's text."""
    if isinstance(exc, (PlaygroundError, TraceFormatError)):
        message = str(exc)
    else:  # a value no control of the page sends; the log keeps the details
        logger.warning("refused a request: %s: %s", type(exc).__name__, str(exc)[:200])
        message = "this request cannot be handled: one of its values is not what the page's controls send"
    return message if len(message) <= 300 else message[:300] + "…"


def guarded(handler: Callable[..., Any]) -> Callable[..., Any]:
    """The page handler, answering any refusal or failure with our one-line message in a toast (`gr.Error`,
    escaped: toasts render HTML) instead of Gradio's generic "Error" or a Python exception's text."""
    if inspect.isgeneratorfunction(handler):
        @functools.wraps(handler)
        def streaming(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from handler(*args, **kwargs)
            except gr.Error:
                raise
            except Exception as exc:
                raise gr.Error(html.escape(refusal(exc)), print_exception=False) from None
        return streaming

    @functools.wraps(handler)
    def plain(*args: Any, **kwargs: Any) -> Any:
        try:
            return handler(*args, **kwargs)
        except gr.Error:
            raise
        except Exception as exc:
            raise gr.Error(html.escape(refusal(exc)), print_exception=False) from None
    return plain


# --------------------------------------------------------------------------- requests


# Bounds on what a client sends (the API and the queue reach every handler with any JSON): refused with
# our message before any work, and never echoed in full.
MAX_NAME_CHARS = 1024  # a model name: a Hub id is under 100 characters, a local path rarely near this
MAX_WORD_CHARS = 64  # a method, a precision, a chat setting, a parameter name
MAX_PARAMS = 32  # method parameters in `params` (a method has at most a handful)
MAX_PARAM_VALUE_CHARS = 100  # a parameter's value given as text
MAX_PARAMS_JSON_CHARS = 10_000  # `params` given as a JSON string


def _short(value: Any, limit: int = 40) -> str:
    """A visitor's value for a message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def check_text(value: str, name: str, limit: int) -> str:
    """A string from a client: at most `limit` characters and valid text (no lone surrogates)."""
    if len(value) > limit:
        raise PlaygroundError(f"{name} is {len(value)} characters long; at most {limit} are accepted")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PlaygroundError(f"{name} is not valid text (it holds a lone surrogate)") from None
    return value


def parse_params(params: Any) -> dict[str, Any]:
    """`params` as given to the API: a flat JSON object of method parameters, or a string holding one."""
    if params is None or params == "":
        return {}
    example = 'params must be a JSON object, e.g. {"prompt_lookup_num_tokens": 5}'
    if isinstance(params, str):
        check_text(params, "params", MAX_PARAMS_JSON_CHARS)
        try:
            params = json.loads(params)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, too many digits, nested too deep
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deep or numbers too long"
            raise PlaygroundError(f"{example}: {reason}") from None
    if not isinstance(params, dict):
        raise PlaygroundError(example)
    if len(params) > MAX_PARAMS:
        raise PlaygroundError(f"params has {len(params)} entries; a method takes at most {MAX_PARAMS}")
    for key, value in params.items():
        check_text(key, "a parameter name", MAX_WORD_CHARS)
        if isinstance(value, str):
            check_text(value, key, MAX_PARAM_VALUE_CHARS)
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**63:
            raise PlaygroundError(f"{key} is far too large; got a number of {value.bit_length()} bits")
        elif isinstance(value, float) and not math.isfinite(value):
            raise PlaygroundError(f"{key} must be a finite number; got {value}")
        elif value is not None and not isinstance(value, (str, int, float)):
            raise PlaygroundError(f"{key} must be a number or a word; got {_short(value)}")
    return params


def parse_chat(chat: Any) -> bool | None:
    """"auto" (the model decides) / "on" / "off"; booleans and None are accepted too."""
    if chat is None or isinstance(chat, bool):
        return chat
    if not isinstance(chat, str):
        raise PlaygroundError(f"chat must be auto, on or off; got {_short(chat)}")
    value = check_text(chat, "chat", MAX_WORD_CHARS).strip().lower()
    if value in ("auto", ""):
        return None
    if value in ("on", "true", "yes", "1"):
        return True
    if value in ("off", "false", "no", "0"):
        return False
    raise PlaygroundError(f"chat must be auto, on or off; got {_short(chat)}")


def parse_number(value: Any, default: float, name: str) -> float:
    """A number from a client: finite, not absurdly large, our message otherwise."""
    if value is None or value == "":
        return default
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**64:
        raise PlaygroundError(f"{name} is far too large; got a number of {value.bit_length()} bits")
    if isinstance(value, bool):
        raise PlaygroundError(f"{name} must be a number; got {value}")
    try:
        x = float(check_text(value, name, MAX_WORD_CHARS) if isinstance(value, str) else value)
    except (TypeError, ValueError, OverflowError):
        raise PlaygroundError(f"{name} must be a number; got {_short(value)}") from None
    if not math.isfinite(x):  # NaN and infinities, also "1e400"
        raise PlaygroundError(f"{name} must be a finite number; got {_short(value)}")
    return x


def parse_integer(value: Any, default: int, name: str) -> int:
    """A whole number from a client (ints stay exact: a 64-bit seed must not be rounded)."""
    if isinstance(value, int) and not isinstance(value, bool):
        parse_number(value, default, name)  # the size check
        return value  # exact (a float would round a 64-bit seed)
    x = parse_number(value, default, name)
    if x != int(x):
        raise PlaygroundError(f"{name} must be a whole number; got {_short(value)}")
    return int(x)


def max_prompt_chars() -> int:
    """Characters a prompt may have before it is tokenised at all (a token is rarely over 16 characters)."""
    return 16 * get_settings().max_prompt_tokens


def parse_flag(value: Any, name: str) -> bool:
    """A boolean from the API: true/false, or the strings "true"/"false"; None means false."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise PlaygroundError(f"{name} must be true or false; got {_short(value)}")


def build_request(prompt: str, target: str | None, assistant: str | None, method: str | None, params: Any,
                  max_new_tokens: float | None, sample: bool | None, temperature: float | None,
                  top_p: float | None, top_k: float | None, seed: float | None, chat: Any,
                  dtype: str | None, preset: Any = None) -> RunRequest:
    """The engine request for the API's (or the page's) values, checked; a `preset` (a guide example's name)
    sets everything but the prompt (an empty one: the guide's) and the precision."""
    from .engine import RunRequest

    def text(value: Any, default: str, name: str, limit: int = MAX_WORD_CHARS) -> str:
        if value is None:
            return default
        if not isinstance(value, str):
            raise PlaygroundError(f"{name} must be text; got {_short(value)}")
        return check_text(value, name, limit).strip() or default

    if prompt is not None and not isinstance(prompt, str):
        raise PlaygroundError(f"prompt must be text; got {_short(prompt)}")
    check_text(prompt or "", "the prompt", max_prompt_chars())
    if preset is not None and preset != "":
        chosen = get_preset(text(preset, "", "preset"))
        reason = chosen.unavailable(hub_reachable())
        if reason:
            raise PlaygroundError(reason)
        return RunRequest(**chosen.request_fields(prompt, dtype=text(dtype, "auto", "dtype")))
    return RunRequest(
        prompt=prompt or "",
        target=text(target, DEFAULT_TARGET, "target", MAX_NAME_CHARS),
        method=text(method, DEFAULT_METHOD, "method"),
        assistant=text(assistant, "", "assistant", MAX_NAME_CHARS) or None,
        params=parse_params(params),
        max_new_tokens=parse_integer(max_new_tokens, 64, "max_new_tokens"),
        sample=parse_flag(sample, "sample"),
        temperature=parse_number(temperature, 1.0, "temperature"),
        top_p=parse_number(top_p, 1.0, "top_p"),
        top_k=parse_integer(top_k, 0, "top_k"),
        seed=parse_integer(seed, 0, "seed"),
        chat=parse_chat(chat),
        dtype=text(dtype, "auto", "dtype"),
    )


# --------------------------------------------------------------------------- sessions (for Stop)


@dataclass
class _Session:
    stop: threading.Event = field(default_factory=threading.Event)
    live: LiveRun | None = None


_SESSIONS: dict[str, _Session] = {}
_SESSIONS_LOCK = threading.Lock()


def _session_key(request: gr.Request | None) -> str:
    return (getattr(request, "session_hash", None) or "default") if request is not None else "default"


def stop(request: gr.Request = None) -> str:  # type: ignore[assignment]
    """Ask this session's run to end after the current step (what was produced is kept)."""
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(_session_key(request))
    if session is None:
        return render.status_html("Nothing is running.", "idle")
    session.stop.set()
    if session.live is not None:
        session.live.stop()
    return gr.skip()


# --------------------------------------------------------------------------- preload


class Preload:
    """Loads the default model in the background at start-up and remembers how far it got.

    Bundled assistants are converted in the background too, but only once a chosen method needs
    one, and after the target's load (two conversions at once would only slow both down).
    """

    def __init__(self) -> None:
        self.message = ""
        self.error: str | None = None
        self.done = threading.Event()
        self.thread: threading.Thread | None = None
        self.started: float | None = None  # time.monotonic() when the load began
        self.seconds: float | None = None  # how long loading and warming up took
        self.assistant_message: str | None = None  # a background assistant conversion's progress
        self._assistants: set[str] = set()
        self._assistants_lock = threading.Lock()

    def start(self, target: str = DEFAULT_TARGET, dtype: str = "auto") -> None:
        if self.thread is not None:
            return

        def work() -> None:
            started = time.perf_counter()
            try:
                # The first seconds of a start: the server is already up while these import.
                from .engine import user_message

                self.message = f"Loading {target}…"
                STORE.get(target, dtype, self._report)
                loaded = time.perf_counter()
                self.message = f"Warming up {target}…"
                self._warm_up(target, dtype)
                self.message = f"{target} is loaded and ready."
                self.seconds = time.perf_counter() - started
                logger.info("preloaded %s in %.1f s (load %.1f s, warm-up %.1f s)", target, self.seconds,
                            loaded - started, self.seconds - (loaded - started))
            except Exception as exc:  # shown in the page; a click will retry and report it again
                self.error = user_message(exc)
                self.message = f"Preloading {target} failed: {self.error}"
            finally:
                self.done.set()

        self.message = f"Loading {target} in the background: importing torch and Transformers…"
        self.started = time.monotonic()
        self.thread = threading.Thread(target=work, name="playground-preload", daemon=True)
        self.thread.start()

    def _report(self, message: str) -> None:
        self.message = message

    def convert_assistant(self, spec: str | None) -> None:
        """Convert a bundled assistant in the background (once), after the start-up load of the target.

        Only in a server that preloads: elsewhere the run that needs the assistant converts it. A run
        that needs it meanwhile waits for this conversion (`ensure_converted` holds a lock) instead of
        starting its own.
        """
        entry = CATALOGUE.get(spec or "")
        if self.thread is None or entry is None or entry.gguf is None:
            return
        with self._assistants_lock:
            if entry.key in self._assistants:
                return
            self._assistants.add(entry.key)

        def work() -> None:
            self.done.wait()
            try:
                ensure_converted(entry, self._report_assistant)
            except Exception:  # the run that needs it reports the error itself
                logger.warning("converting %s in the background failed", entry.key, exc_info=True)
            finally:
                self.assistant_message = None

        threading.Thread(target=work, name="playground-convert-assistant", daemon=True).start()

    def _report_assistant(self, message: str) -> None:
        self.assistant_message = message

    def background_message(self) -> str | None:
        """What the background work is doing now, or None when it is idle."""
        return self.message if self.running else self.assistant_message

    @staticmethod
    def _warm_up(target: str, dtype: str) -> None:
        """One tiny drafted run, so the first click does not pay for first-call kernel set-up."""
        from .engine import LiveRun, RunRequest, prepare

        request = RunRequest(prompt="one two three, one two three, one two", target=target, method=DEFAULT_METHOD,
                             params={"prompt_lookup_num_tokens": 3}, max_new_tokens=4, dtype=dtype)
        LiveRun(prepare(request)).run()

    @property
    def running(self) -> bool:
        return self.thread is not None and not self.done.is_set()


PRELOAD = Preload()


def initial_status() -> str:
    if PRELOAD.running:
        elapsed = time.monotonic() - (PRELOAD.started or time.monotonic())
        return render.status_html(PRELOAD.message, "running",
                                  f"({elapsed:.0f} s since start-up; you can click Generate now, it waits for the load)")
    if PRELOAD.error:
        return render.status_html(PRELOAD.message, "error")
    loaded = STORE.loaded()
    if loaded:
        return render.status_html(f"Ready. Loaded: {', '.join(loaded)}.", "idle")
    return render.status_html("Ready. The first run loads its models.", "idle")


def poll_preload(run_started: bool = False) -> tuple[Any, Any]:
    """The timer's tick while the start-up load runs: show its progress in the status box.

    Once this page has clicked Generate, the box belongs to the run: a tick that lands after the run
    finished would otherwise replace "Done" with "Ready" (the run waits for the load, so it can end
    within a tick of it). The session's state is read when the tick is handled, so no late tick wins.
    """
    if run_started:
        return gr.skip(), gr.update(active=False)
    return initial_status(), gr.update(active=PRELOAD.running)


def on_page_load() -> tuple[Any, ...]:
    """Fill in the default example (here rather than as the textbox's initial value, so the API's
    `prompt` stays a required parameter) and show the loading state."""
    return EXAMPLES[DEFAULT_EXAMPLE], DEFAULT_EXAMPLE, initial_status(), gr.update(active=PRELOAD.running)


def restore_link(request: gr.Request) -> list[Any]:
    """The settings of a shareable link (the page's URL query), validated as the API's values are."""
    query = dict(request.query_params) if request is not None else {}
    return ui_links.restore(query, build_request, list(param_specs()))


# --------------------------------------------------------------------------- the streaming handler


def _prepare_in_thread(request: RunRequest, session: _Session) -> Iterator[tuple[str, Any]]:
    """Run `prepare` in a thread; yield ("progress", message) while it loads, then ("ready", prepared)."""
    from .engine import prepare

    work = lambda progress: prepare(request, progress=progress)  # noqa: E731
    # While the run waits for the start-up load or a background conversion, say how that is going.
    for kind, value in teach.in_thread(work, "playground-prepare", PRELOAD.background_message):
        yield ("ready" if kind == "done" else kind), value


TRACE_FILES_KEPT_S = 7200  # as long as Gradio keeps its own copies (`delete_cache` below)
TRACE_PRUNE_EVERY_S = 600  # the sweep reads every session's folder: not at the end of every run
_TRACE_FILES_LOCK = threading.Lock()  # pruning never removes a folder another run is writing into
_last_trace_prune = -math.inf  # time.monotonic() of the last sweep (none yet)
# Session key -> the name of its trace folder. The key is the client's session hash, which a client
# chooses freely (`../../x`, an absolute path): it is only ever a dictionary key here, never part of a
# path. Folder names are random and made by the server.
_TRACE_FOLDERS: dict[str, str] = {}


def trace_root() -> Path:
    """The one directory the server writes trace files under (one folder per session inside it)."""
    return Path(tempfile.gettempdir()) / "assisted-playground-traces"


def _save_trace(live: LiveRun, key: str) -> str:
    """Write the run's trace for the Download button: one file per session (the previous one is
    replaced), and sessions idle for longer than TRACE_FILES_KEPT_S lose theirs (swept at most every
    TRACE_PRUNE_EVERY_S), so a long-lived server's temp dir does not fill up with every visitor's traces.
    Every path is the server's own: `trace_root()`, a random folder name, the registry's method name."""
    root = trace_root()
    global _last_trace_prune
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with _TRACE_FILES_LOCK:
        if time.monotonic() - _last_trace_prune >= TRACE_PRUNE_EVERY_S:
            _last_trace_prune = time.monotonic()
            _prune_trace_files(root, TRACE_FILES_KEPT_S)
        folder = root / _TRACE_FOLDERS.setdefault(key, secrets.token_hex(16))
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("trace-*.json"):
            old.unlink(missing_ok=True)
        path = folder / f"trace-{get_method(live.trace.method).name}-{stamp}.json"
        live.trace.save(path)
    return str(path)


def _drop_session_trace(key: str) -> None:
    """A new run starts: the session's previous trace file goes (its Download button is hidden now)."""
    with _TRACE_FILES_LOCK:
        name = _TRACE_FOLDERS.get(key)
        for old in (trace_root() / name).glob("trace-*.json") if name else ():
            old.unlink(missing_ok=True)


def session_trace(key: str) -> Path | None:
    """The trace file of the session's last run, if that run finished and the file is still there."""
    with _TRACE_FILES_LOCK:
        name = _TRACE_FOLDERS.get(key)
        files = sorted((trace_root() / name).glob("trace-*.json")) if name else []
    return files[-1] if files else None


def _prune_trace_files(root: Path, max_age_s: float) -> None:
    """Remove the folders of sessions whose newest trace is older than `max_age_s` (and forget them)."""
    now = time.time()
    for folder in (root.iterdir() if root.is_dir() else ()):
        with contextlib.suppress(OSError):  # gone already, or not ours to remove
            files = list(folder.glob("trace-*.json"))
            newest = max((f.stat().st_mtime for f in files), default=folder.stat().st_mtime)
            if now - newest > max_age_s:
                for f in files:
                    f.unlink(missing_ok=True)
                folder.rmdir()
    for key, name in list(_TRACE_FOLDERS.items()):
        if not (root / name).is_dir():
            del _TRACE_FOLDERS[key]


def _done_message(live: LiveRun) -> tuple[str, str]:
    trace = live.trace
    s = trace.summary
    reasons = {
        "eos": "the model ended its text",
        "length": "reached max new tokens",
        "stopped": "stopped: kept what was produced",
        "timeout": "stopped by the run time limit (PLAYGROUND_RUN_TIMEOUT_S)",
    }
    message = f"Done: {s.new_tokens} tokens in {s.steps} steps, {s.elapsed_s:.2f} s ({reasons.get(trace.finish_reason, trace.finish_reason)})."
    note = f"{trace.env.get('precision', trace.env.get('dtype', ''))}"
    if trace.lossy:
        reason = get_method(trace.method).lossy_reason(trace.params, bool(trace.decoding.get("sample")))
        note += f" · lossy: {reason or 'the output is not the target alone'}"
    return message, note


def _tool(fn: Callable[..., Any]) -> Callable[..., Any]:
    """An agent's tool as an endpoint: its name, docstring and signature kept; failures become one-line errors."""
    @functools.wraps(fn)
    def tool(*args: Any, **kwargs: Any) -> Any:
        from .engine import user_message

        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise gr.Error(user_message(exc)) from exc

    return gpu(tool)


@gpu
def generate(
    prompt: str,
    target: str = DEFAULT_TARGET,
    assistant: str | None = None,
    method: str = DEFAULT_METHOD,
    params: Any = None,
    max_new_tokens: float = 64,
    sample: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: float = 0,
    seed: float = 0,
    chat: str = "auto",
    dtype: str = "auto",
    check_plain: Any = False,
    preset: str | None = None,
    request: gr.Request = None,  # type: ignore[assignment]
) -> Iterator[tuple[Any, ...]]:
    """Stream one generation: (tokens HTML, figures, acceptance chart, timing chart, status, trace file).

    Not an MCP tool (its outputs are the page's HTML): agents get `mcp_tools.generate`.

    Every failure becomes a message in the page (and a warning toast); the server keeps serving.
    """
    from .engine import LiveRun, user_message

    key = _session_key(request)
    session = _Session()
    with _SESSIONS_LOCK:
        _SESSIONS[key] = session
    _drop_session_trace(key)
    stream = render.TokenStream()
    live: LiveRun | None = None
    no_file = gr.update(value=None, visible=False)

    def error_outputs(exc: BaseException) -> tuple[Any, ...]:
        message = user_message(exc, "the run")
        gr.Warning(html.escape(message))  # toasts render HTML: the visitor's input must stay text, as in the status box
        steps = live.trace.steps if live is not None else []
        tokens = stream.html() if len(stream) else render.empty_tokens("No output.")
        fig_a, fig_t = charts.figures(steps)
        stats = render.stats_html(live.trace.summary if live is not None else None)
        return tokens, stats, fig_a, fig_t, render.status_html(message, "error"), no_file

    try:
        run_request = build_request(prompt, target, assistant, method, params, max_new_tokens, sample,
                                    temperature, top_p, top_k, seed, chat, dtype, preset)
        check = parse_flag(check_plain, "check_plain")
        yield (render.empty_tokens("Preparing…"), render.stats_html(None), *charts.figures([]),
               render.status_html(f"Preparing {run_request.target}…", "running"), no_file)
        prepared = None
        for kind, value in _prepare_in_thread(run_request, session):
            if kind == "progress":
                yield (gr.skip(), gr.skip(), gr.skip(), gr.skip(), render.status_html(value, "running"), gr.skip())
            else:
                prepared = value
        assert prepared is not None
        if session.stop.is_set():
            yield (render.empty_tokens("Stopped before generation started."), gr.skip(), gr.skip(), gr.skip(),
                   render.status_html("Stopped before generation started.", "idle"), no_file)
            return
        live = LiveRun(prepared)
        session.live = live
        status = render.status_html(
            f"Generating with {prepared.method.title} on {run_request.target}…", "running",
            describe_precision(run_request.dtype, prepared.target.device))
        yield (render.empty_tokens("Waiting for the first token…"), gr.skip(), gr.skip(), gr.skip(), status, gr.skip())
        last_update, last_chart = 0.0, time.perf_counter()
        with contextlib.closing(iter(live)) as steps:  # closing it (client gone) ends the worker
            for step in steps:
                stream.add(step)
                now = time.perf_counter()
                if now - last_update < UPDATE_EVERY_S:
                    continue
                last_update = now
                if now - last_chart >= CHART_EVERY_S:
                    last_chart = now
                    fig_a, fig_t = charts.figures(live.trace.steps)
                else:
                    fig_a = fig_t = gr.skip()
                yield stream.html(), render.stats_html(live.trace.summary), fig_a, fig_t, gr.skip(), gr.skip()
        message, note = _done_message(live)
        path = _save_trace(live, key)
        plain = None
        if check and prepared.method.name != "baseline" and live.trace.finish_reason in ("eos", "length"):
            yield (stream.html(), render.stats_html(live.trace.summary), gr.skip(), gr.skip(),
                   render.status_html("Checking against plain generate() (the same settings without drafting)…",
                                      "running"), gr.skip())
            result = bench.check_against_plain(prepared, live.trace)
            plain = (result.speedup, result.identical, result.verdict)
        yield (stream.html(), render.stats_html(live.trace.summary, plain), *charts.figures(live.trace.steps),
               render.status_html(message, "done", note),
               gr.update(value=path, visible=True, label=f"Download trace ({Path(path).name})"))
    except Exception as exc:  # one clear message in the page; the server keeps serving
        yield error_outputs(exc)
    finally:
        with _SESSIONS_LOCK:
            if _SESSIONS.get(key) is session:
                del _SESSIONS[key]


def after_run(baselines: list | None, request: gr.Request = None) -> tuple[Any, ...]:  # type: ignore[assignment]
    """After each run: `teach.on_run_done` on the trace file this server wrote for the session's last run
    (none if it failed). It takes nothing from the client but the session: no client value is a path."""
    path = session_trace(_session_key(request))
    return teach.on_run_done(str(path) if path else None, baselines)


# --------------------------------------------------------------------------- the page


def _target_choices() -> list[tuple[str, str]]:
    online = hub_reachable()
    choices = []
    for key, entry in CATALOGUE.items():
        label = entry.label if entry.source == "bundled" or online else f"{entry.label} (needs the Hub)"
        choices.append((label, key))
    return choices


def build_ui() -> gr.Blocks:
    settings = get_settings()
    specs = param_specs()
    default_method = METHODS[DEFAULT_METHOD]
    model_choices = _target_choices()

    # Gradio keeps a copy of every file it serves (each run's trace): without this they pile up for the
    # server's lifetime. Every 30 minutes, copies older than 2 hours are deleted.
    with gr.Blocks(title=TITLE, delete_cache=(1800, TRACE_FILES_KEPT_S)) as demo:
        if settings.mcp:  # registered first, so the agents' tools keep their plain names (generate, compare, bench)
            for tool in mcp_tools.TOOLS:
                gr.api(_tool(tool), api_name=f"mcp_{tool.__name__}")
            # The page's streaming handler stays an API endpoint but is no MCP tool (Gradio lists only functions
            # whose `_mcp_type`, if set, is "tool"): its outputs are HTML for the page.
            generate._mcp_type = "page"  # type: ignore[attr-defined]
        gr.Markdown(
            f"# {TITLE}\n"
            "Pick a target model and a drafting method, type a prompt and watch each token's fate as the target "
            "verifies the drafts: accepted, rejected (struck through), discarded after a rejection, corrected, bonus.",
            elem_id="pg-header",
        )
        with gr.Row(equal_height=False):
            with gr.Column(scale=2, min_width=320):
                preset = ui_presets.picker(hub_reachable())
                preset_info = gr.HTML("", elem_id="pg-preset-info")
                target = gr.Dropdown(
                    choices=model_choices, value=DEFAULT_TARGET, label="Target model", allow_custom_value=True,
                    info="A catalogue model, a Hub id (owner/name) or a local directory.", elem_id="pg-target",
                )
                method = gr.Dropdown(
                    choices=[(m.title, name) for name, m in METHODS.items()], value=DEFAULT_METHOD,
                    label="Drafting method", elem_id="pg-method",
                )
                method_summary = gr.Markdown(default_method.summary, elem_id="pg-method-summary")
                with gr.Accordion("How it works", open=False):
                    lecture = gr.HTML(lecture_html(default_method))
                assistant = gr.Dropdown(
                    choices=model_choices, value=None, label="Assistant model", allow_custom_value=True,
                    visible=default_method.needs_assistant, elem_id="pg-assistant",
                )
                default_params = {p.name for p in default_method.params}
                param_components = [_param_component(p, name in default_params) for name, p in specs.items()]
                with gr.Accordion("Decoding", open=False):
                    sample = gr.Checkbox(value=False, label="Sample (instead of greedy)", elem_id="pg-sample")
                    temperature = gr.Slider(0.05, 2.0, value=1.0, step=0.05, label="Temperature", visible=False)
                    top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p", visible=False)
                    top_k = gr.Slider(0, 200, value=0, step=1, label="Top-k", info="0 = off", visible=False)
                    seed = gr.Number(value=0, precision=0, label="Seed")
                    chat = gr.Radio(list(CHAT_CHOICES), value="auto", label="Chat template",
                                    info="auto: applied for instruct models, not for base models.")
                dtype = gr.Radio(list(DTYPES), value="auto", label="Precision",
                                 info=f"auto here: {describe_precision('auto')}", elem_id="pg-dtype")
                max_new_tokens = gr.Slider(1, settings.max_new_tokens, value=64, step=1, label="Max new tokens",
                                           elem_id="pg-max-new-tokens")
                params_json = gr.JSON(value={}, visible=False, label="params")

            with gr.Column(scale=3, min_width=420):
                prompt = gr.Textbox(value=None, label="Prompt", lines=7, max_lines=20, elem_id="pg-prompt",
                                    placeholder="Type a prompt, or pick an example below.")
                examples = gr.Radio(list(EXAMPLES), value=None, label="Example prompts", elem_id="pg-examples")
                with gr.Row():
                    generate_btn = gr.Button("Generate", variant="primary", elem_id="pg-generate")
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="pg-stop")
                    link_btn = gr.Button("Link to these settings", size="sm", elem_id="pg-link-make")
                check_plain = gr.Checkbox(
                    value=False, label="Check against plain generate()", elem_id="pg-check-plain",
                    info="After the run, the same settings without drafting: measured speedup, and whether the "
                         "output is identical (if not, where and why).")
                link_box = gr.Textbox(label="Shareable link (opening it restores these settings)", interactive=False,
                                      buttons=["copy"], elem_id="pg-link", visible=True, lines=1)
                link_status = gr.HTML("", elem_id="pg-link-status")
                status = gr.HTML(initial_status(), elem_id="pg-status-box")
                stats = gr.HTML(render.stats_html(None), elem_id="pg-stats-box")
                gr.HTML(render.legend_html(), elem_id="pg-legend-box")
                tokens = gr.HTML(render.empty_tokens(), elem_id="pg-output", max_height=560, autoscroll=True)
                with gr.Row():
                    acceptance_plot = gr.Plot(charts.acceptance_figure([]), show_label=False, elem_id="pg-chart-acceptance")
                    timing_plot = gr.Plot(charts.timing_figure([]), show_label=False, elem_id="pg-chart-timing")
                trace_file = gr.DownloadButton("Download trace (JSON)", value=None, visible=False,
                                               elem_id="pg-download", size="sm")

        # Teaching and measuring views (handlers in teach.py): replay, theory, compare + race, code, methods.
        last_run = gr.State(None)
        replay_trace = gr.State(None)
        baselines = gr.State([])
        compare_state = gr.State(None)
        run_started = gr.State(False)  # set by the first click: from then on the status box is the run's
        with gr.Tabs(elem_id="pg-tabs"):
            with gr.Tab("Step through a run", id="replay", elem_id="pg-tab-replay"):
                with gr.Row():
                    with gr.Column(scale=3):
                        replay_status = gr.HTML(teach.replay_load(None, "")[1], elem_id="pg-replay-status")
                    with gr.Column(scale=1, min_width=200):
                        replay_last_btn = gr.Button("Replay the last run", size="sm", elem_id="pg-replay-last")
                        replay_upload = teach.TraceUpload("Load a trace file (JSON)…", file_types=[".json"],
                                                          type="filepath", size="sm", elem_id="pg-replay-upload")
                replay_slider = gr.Slider(1, 2, value=1, step=1, label="Verification step", interactive=False,
                                          elem_id="pg-replay-slider")
                with gr.Row():
                    replay_prev_btn = gr.Button("◀ Previous step", size="sm", elem_id="pg-replay-prev")
                    replay_next_btn = gr.Button("Next step ▶", size="sm", elem_id="pg-replay-next")
                    replay_play_btn = gr.Button(teach.PLAY, size="sm", variant="primary", elem_id="pg-replay-play")
                replay_timer = gr.Timer(teach.PLAY_EVERY_S, active=False)
                replay_detail = gr.HTML("", elem_id="pg-replay-step")
                replay_tokens = gr.HTML(teach.replay_view(None, 1)[0], elem_id="pg-replay-output", max_height=420)
                replay_stats = gr.HTML(render.stats_html(None), elem_id="pg-replay-stats")
                with gr.Row():
                    replay_acceptance = gr.Plot(charts.acceptance_figure([]), show_label=False,
                                                elem_id="pg-replay-chart-acceptance")
                    replay_timing = gr.Plot(charts.timing_figure([]), show_label=False, elem_id="pg-replay-chart-timing")
            with gr.Tab("Theory", id="theory", elem_id="pg-tab-theory"):
                with gr.Row():
                    with gr.Column(scale=3):
                        theory_plot = gr.Plot(charts.theory_figure(), show_label=False, elem_id="pg-theory-chart")
                    with gr.Column(scale=2):
                        gr.Markdown(teach.THEORY_TEXT, elem_id="pg-theory-text")
                diagnosis = gr.HTML(teach.theory_view(None)[1], elem_id="pg-diagnosis-box")
            with gr.Tab("Compare methods", id="compare", elem_id="pg-tab-compare"):
                gr.Markdown(
                    "Baseline and the chosen methods on the prompt above, with the target, precision and parameters "
                    "set on the left. Every method is warmed up first, then all run interleaved on the same prompt; "
                    "speedups are tokens/s over baseline's in the same run.")
                with gr.Row():
                    compare_methods = gr.CheckboxGroup(
                        [(m.title, name) for name, m in METHODS.items() if name != "baseline"], value=[DEFAULT_METHOD],
                        label="Methods to compare with baseline", elem_id="pg-compare-methods", scale=3)
                    with gr.Column(scale=1, min_width=220):
                        compare_tokens = gr.Slider(2, settings.max_new_tokens, value=min(32, settings.max_new_tokens),
                                                   step=1, label="New tokens per run", elem_id="pg-compare-tokens")
                        compare_repeats = gr.Slider(1, 5, value=1, step=1, label="Repeats (medians are shown)",
                                                    elem_id="pg-compare-repeats")
                compare_btn = gr.Button("Compare", variant="primary", elem_id="pg-compare-run")
                compare_status = gr.HTML(render.status_html("Choose methods and press Compare.", "idle"),
                                         elem_id="pg-compare-status")
                compare_table = gr.HTML("", elem_id="pg-compare-table")
                with gr.Row():
                    compare_speed = gr.Plot(show_label=False, elem_id="pg-compare-speedup")
                    compare_cost = gr.Plot(show_label=False, elem_id="pg-compare-cost")
                compare_diag = gr.HTML("", elem_id="pg-compare-diagnosis")
                with gr.Row():
                    race_method = gr.Dropdown(choices=[], value=None, label="Race replay: baseline against",
                                              interactive=False, elem_id="pg-race-method", scale=3)
                    race_btn = gr.Button("▶ Play race", elem_id="pg-race-play", scale=1)
                race = gr.HTML(teach.race_placeholder(), elem_id="pg-race-box")
            with gr.Tab("Show the code", id="code", elem_id="pg-tab-code"):
                code_status = gr.HTML(render.status_html(
                    "After each run the code that reproduces it appears here; or press the button for the current "
                    "settings (this loads their models).", "idle"), elem_id="pg-code-status")
                code_btn = gr.Button("Show code for these settings", size="sm", elem_id="pg-code-show")
                code_python = gr.Code("", language="python", label="Transformers script", interactive=False,
                                      buttons=["copy"], elem_id="pg-code-python")
                code_cli = gr.Code("", language="shell", label="The same run from the command line", lines=2,
                                   interactive=False, buttons=["copy"], wrap_lines=True, elem_id="pg-code-cli")
            with gr.Tab("All methods explained", id="methods", elem_id="pg-tab-methods"):
                gr.HTML(teach.methods_table_html(), elem_id="pg-methods")
            tune_tab.build_tune_tab(dict(prompt=prompt, target=target, assistant=assistant, method=method, dtype=dtype,
                                         chat=chat, max_new_tokens=max_new_tokens, param_components=param_components),
                                    guarded(collect_params), build_request, guarded)

        # Every handler below is reachable by fn_index with any JSON, not only what its controls send. Values
        # reach the handlers as sent (`preprocess=False`: no generic refusal by Gradio first), which check them
        # and answer a bad one with our message (`guarded`: a toast; the heavy ones: their status box).
        private = dict(queue=False, api_visibility="private", show_progress="hidden", preprocess=False)
        method.change(guarded(on_method_change), [method, target, assistant],
                      [method_summary, lecture, assistant, *param_components], **private)
        sample.change(guarded(on_sample_change), sample, [temperature, top_p, top_k], **private)
        examples.change(guarded(on_example), examples, prompt, **private)
        api_inputs = [prompt, target, assistant, method, params_json, max_new_tokens, sample, temperature, top_p,
                      top_k, seed, chat, dtype]
        controls = [target, assistant, method, sample, temperature, top_p, top_k, seed, chat, max_new_tokens]
        ui_presets.wire(preset, preset_info, controls, prompt, param_components, list(specs), guarded)
        ui_links.wire(link_btn, link_box, preset, prompt, controls, dtype, param_components, guarded(collect_params),
                      guarded)
        outputs = [tokens, stats, acceptance_plot, timing_plot, status, trace_file]
        run_event = generate_btn.click(guarded(on_generate_click), [method, *param_components], [params_json, status, run_started],
                                       **private).then(
            generate, [*api_inputs, check_plain, preset], outputs, api_name="generate", show_progress="minimal", show_progress_on=[status],
            # The values reach `build_request` and the engine's checks as sent, so a bad one from the API
            # (a word for a number, a value off a slider's range) gets the same clear message in the
            # status as in the CLI, not Gradio's generic refusal.
            preprocess=False,
        )
        # After each run: replay it, place it on the theory curves with its diagnosis, show its code.
        replay_views = [replay_tokens, replay_detail, replay_acceptance, replay_timing, replay_stats]
        replay_outputs = [replay_trace, replay_status, replay_slider, *replay_views]
        teach_private = dict(api_visibility="private", show_progress="hidden", preprocess=False)
        run_event.then(after_run, baselines,
                       [last_run, *replay_outputs, theory_plot, diagnosis, baselines, code_python, code_cli, code_status],
                       **teach_private)
        replay_slider.change(guarded(teach.replay_view), [replay_trace, replay_slider], replay_views, **private)
        replay_prev_btn.click(guarded(teach.replay_prev), [replay_trace, replay_slider], replay_slider, **private)
        replay_next_btn.click(guarded(teach.replay_next), [replay_trace, replay_slider], replay_slider, **private)
        replay_playing = gr.State(False)
        play_outputs = [replay_slider, replay_timer, replay_play_btn, replay_playing]
        replay_play_btn.click(guarded(teach.replay_play), [replay_trace, replay_slider, replay_playing], play_outputs, **private)
        replay_timer.tick(guarded(teach.replay_tick), [replay_trace, replay_slider, replay_playing], play_outputs, **private)
        replay_last_btn.click(teach.replay_last, last_run, replay_outputs, **private)
        # In the queue: parsing and checking a trace of up to MAX_TRACE_BYTES is the heaviest thing a click here does.
        replay_upload.upload(teach.on_trace_upload, replay_upload, replay_outputs, api_visibility="private",
                             show_progress="hidden", preprocess=False)
        compare_btn.click(
            teach.compare, [prompt, target, assistant, method, dtype, chat, compare_methods, compare_tokens,
                            compare_repeats, baselines, *param_components],
            [compare_status, compare_table, compare_speed, compare_cost, compare_diag, race_method, compare_state,
             baselines], api_visibility="private", show_progress="minimal", show_progress_on=[compare_status],
            preprocess=False,
            concurrency_limit=1,
        )
        race_btn.click(guarded(teach.play_race), [race_method, compare_state], race, **teach_private)
        code_btn.click(guarded(collect_params), [method, *param_components], params_json, **private).then(
            teach.show_code_for_settings, [*api_inputs, preset], [code_python, code_cli, code_status], **teach_private)
        stop_btn.click(stop, None, status, **private)

        timer = gr.Timer(1.0, active=PRELOAD.running)
        timer.tick(guarded(poll_preload), run_started, [status, timer], **private)
        # Fill the prompt after the page loads, so the API's `prompt` stays required.
        # Then a shareable link's settings, checked by the API's request builder (ui_links.restore).
        demo.load(on_page_load, None, [prompt, examples, status, timer], **private).then(
            guarded(restore_link), None, [preset, preset_info, *controls, prompt, dtype, link_status, *param_components],
            **private)
    demo.queue(default_concurrency_limit=settings.concurrency)
    return demo


def launch_kwargs() -> dict[str, Any]:
    """What `launch()` needs besides the server address: styles, title and the upload limit."""
    return {"css": render.CSS + PAGE_CSS, "theme": gr.themes.Soft(primary_hue="blue", neutral_hue="slate"),
            # The only upload is a trace file: refuse anything larger before it reaches the disk.
            "max_file_size": teach.MAX_TRACE_BYTES}


def start_preload() -> None:
    if get_settings().preload:
        PRELOAD.start(DEFAULT_TARGET, "auto")


def main() -> None:
    if not logger.handlers:  # our own progress lines (preload timing) on stderr, not every library's
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    demo = build_ui()
    # Serve first, then load: the page answers (and shows the load's progress) while the start-up
    # load imports torch and Transformers; both compete for the same interpreter lock otherwise.
    demo.launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        prevent_thread_lock=True,
        mcp_server=get_settings().mcp,
        **launch_kwargs(),
    )
    start_preload()
    demo.block_thread()
