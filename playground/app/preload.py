"""The start-up load: the default model loaded (and warmed up) in the background while the page is served.

`PRELOAD` remembers how far it got; the status box shows it (`initial_status`, refreshed by `poll_preload` on a
timer) until the visitor's first click makes the box the run's. Bundled assistants are converted here too, once a
chosen method needs one.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import gradio as gr

from .. import render
from ..errors import PlaygroundError
from ..i18n import Message, list_of, localize, number, t
from ..models import (CATALOGUE, DEFAULT_TARGET, SPEED_MODEL, STORE, ensure_local, ensure_measured,
                      gc_paused, measurement_wanted, model_label)
from ..request import DEFAULT_METHOD, new_request
from .language import language_of
from .outputs import Outputs

logger = logging.getLogger(__name__)


class Preload:
    """Loads the default model in the background at start-up and remembers how far it got.

    Bundled assistants are converted in the background too, but only once a chosen method needs
    one, and after the target's load (two conversions at once would only slow both down).
    """

    def __init__(self) -> None:
        self.message = ""  # a `Message` (English as a str; the page shows it in the visitor's language)
        self.error: str | None = None
        self.done = threading.Event()
        self.thread: threading.Thread | None = None
        self.started: float | None = None  # time.monotonic() when the load began
        self.seconds: float | None = None  # how long loading and warming up took
        self.assistant_message: str | None = None  # a background assistant conversion's progress
        self.measuring: threading.Thread | None = None  # `auto`'s measurement in the background, once started
        self._assistants: set[str] = set()
        self._assistants_lock = threading.Lock()

    def start(self, target: str = DEFAULT_TARGET, dtype: str = "auto") -> None:
        if self.thread is not None:
            return

        def work() -> None:
            started = time.perf_counter()
            try:
                # The first seconds of a start: the server is already up while these import.
                with gc_paused():
                    from ..errors import user_message

                self.message = Message.keyed("load.preload.loading", target=target)
                STORE.get(target, dtype, self._report)  # `auto` unmeasured: float32 (exact), measured after
                loaded = time.perf_counter()
                self.message = Message.keyed("load.preload.warming", target=target)
                self._warm_up(target, dtype)
                self.message = Message.keyed("load.preload.ready", target=target)
                self.seconds = time.perf_counter() - started
                logger.info("preloaded %s in %.1f s (load %.1f s, warm-up %.1f s)", target, self.seconds,
                            loaded - started, self.seconds - (loaded - started))
                if dtype == "auto" and target == SPEED_MODEL:
                    self.measure_in_background()
            except Exception as exc:  # shown in the page; a click will retry and report it again
                self.error = user_message(exc)
                # Our own refusal travels as itself, so the page shows it in the visitor's language too.
                error = exc if isinstance(exc, PlaygroundError) else self.error
                self.message = Message.keyed("load.preload.failed", target=target, error=error)
            finally:
                self.done.set()

        self.message = Message.keyed("load.preload.importing", target=target)
        self.started = time.monotonic()
        self.thread = threading.Thread(target=work, name="playground-preload", daemon=True)
        self.thread.start()

    def _report(self, message: str) -> None:
        self.message = message

    def measure_in_background(self) -> threading.Thread | None:
        """`auto`'s measurement (`models.speed`), made once the page is ready and the default model loaded, where
        nobody waits for it: it starts once no run has gone for a moment and yields to every run (a visitor's, a
        long job's) that starts meanwhile. Runs go in float32 until it is kept, then `auto` follows it. None (no
        thread) where there is nothing to measure."""
        if not measurement_wanted():
            return None
        from ..engine import runs_going

        def work() -> None:
            started = time.perf_counter()
            try:
                measured = ensure_measured(busy=runs_going)
            except Exception:  # runs stay in float32, which is exact; the next start measures again
                logger.warning("measuring bfloat16 against float32 in the background failed", exc_info=True)
                return
            if measured is not None:
                logger.info("measured bfloat16 against float32 in the background (%.1f s, yielding to runs): "
                            "%.2f vs %.2f tokens/s", time.perf_counter() - started, measured.bfloat16_tps,
                            measured.float32_tps)

        self.measuring = threading.Thread(target=work, name="playground-measure-precision", daemon=True)
        self.measuring.start()
        return self.measuring

    def convert_assistant(self, spec: str | None) -> None:
        """Convert (or, for one derived from the bundled Gemma, build) a bundled assistant in the background (once),
        after the start-up load of the target.

        Only in a server that preloads: elsewhere the run that needs the assistant converts it. A run
        that needs it meanwhile waits for this conversion (`ensure_local` holds the conversion's lock) instead of
        starting its own.
        """
        entry = CATALOGUE.get(spec or "")
        if self.thread is None or entry is None or entry.source != "bundled":
            return
        with self._assistants_lock:
            if entry.key in self._assistants:
                return
            self._assistants.add(entry.key)

        def work() -> None:
            self.done.wait()
            try:
                ensure_local(entry, self._report_assistant)
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
        from ..engine import LiveRun, prepare

        request = new_request("one two three, one two three, one two", surface="preload_warm_up", target=target,
                              method=DEFAULT_METHOD, params={"prompt_lookup_num_tokens": 3}, dtype=dtype)
        LiveRun(prepare(request)).run()

    @property
    def running(self) -> bool:
        return self.thread is not None and not self.done.is_set()


PRELOAD = Preload()


def initial_status(lang: str = "en") -> str:
    """The status box while the page opens: the start-up load's progress, or ready (in the page's language)."""
    if PRELOAD.running:
        elapsed = time.monotonic() - (PRELOAD.started or time.monotonic())
        return render.status_html(localize(PRELOAD.message, lang), "running",
                                  t("status.preload_note", lang, s=number(elapsed, lang, ".0f")))
    if PRELOAD.error:
        return render.status_html(localize(PRELOAD.message, lang), "error")
    # Only the catalogue's own models, by their labels: a directory or Hub id another visitor typed is theirs
    # (and a path is the server's), so the page never lists it; each by its name in the page's language, listed as
    # that language lists (CLDR's pattern: «A и B», «A وB»).
    loaded = [model_label(key, lang) for key in STORE.loaded() if key in CATALOGUE]
    if loaded:
        return render.status_html(t("status.ready_loaded", lang, models=list_of(loaded, lang)), "idle")
    return render.status_html(t("status.ready", lang), "idle")


POLLED = Outputs("status", "timer")  # what the start-up load's poll writes (`outputs.Outputs`)


def poll_preload(run_started: bool = False, request: gr.Request = None) -> tuple[Any, ...]:
    """The timer's tick while the start-up load runs: show its progress in the status box.

    Once this page has clicked Generate, the box belongs to the run: a tick that lands after the run
    finished would otherwise replace "Done" with "Ready" (the run waits for the load, so it can end
    within a tick of it). The session's state is read when the tick is handled, so no late tick wins.
    """
    if run_started:
        return POLLED(timer=gr.update(active=False))
    return POLLED(status=initial_status(language_of(request)), timer=gr.update(active=PRELOAD.running))
