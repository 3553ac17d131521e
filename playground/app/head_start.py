"""What `python app.py` does before it imports Gradio: on a cold cache, start converting the default model.

A conversion (seconds of CPU) and the page's imports each hold one interpreter lock; in two processes they run
on two cores. The server's start-up load then imports torch and Transformers and waits for the conversion
(`models.one_process_at_a_time`), showing its progress. Imports neither Gradio nor torch.
"""

from __future__ import annotations

import logging
import subprocess
import threading

from ..models import DEFAULT_TARGET, convert_ahead
from ..settings import get_settings

logger = logging.getLogger(__name__)


def configure_logging() -> None:
    """Our own progress lines (start-up timing, refusals: every `playground.app` module's) on stderr, not every
    library's."""
    app_logger = logging.getLogger("playground.app")
    if not app_logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
        app_logger.addHandler(handler)
        app_logger.setLevel(logging.INFO)


def convert_default_ahead() -> subprocess.Popen[bytes] | None:
    """Start the default model's conversion in a second process when the server will load it (PLAYGROUND_PRELOAD)
    and its cache lacks it; a thread reaps the process and logs how it ended. None when nothing was started."""
    if not get_settings().preload:
        return None
    configure_logging()
    try:
        process = convert_ahead(DEFAULT_TARGET)
    except Exception:  # the start-up load converts in the server instead, and reports what fails
        logger.warning("could not start converting %s ahead", DEFAULT_TARGET, exc_info=True)
        return None
    if process is None:
        return None
    logger.info("converting %s ahead in process %d while the page starts", DEFAULT_TARGET, process.pid)

    def reap() -> None:
        if process.wait() != 0:  # its error line is on stderr; the start-up load converts in the server instead
            logger.warning("converting %s ahead failed (exit status %d)", DEFAULT_TARGET, process.returncode)

    threading.Thread(target=reap, name="playground-convert-ahead", daemon=True).start()
    return process
