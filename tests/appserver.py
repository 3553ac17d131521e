"""Start and stop the real `python app.py` on a free local port, for tests and scripts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 180  # importing torch + gradio on two busy cores


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_app(port: int, log_path: Path, extra_env: dict[str, str] | None = None,
              base_env: dict[str, str] | None = None) -> subprocess.Popen:
    """Launch app.py (environment: `base_env`, default ours, plus `extra_env`) and wait until it answers."""
    env = {**(os.environ if base_env is None else base_env), "GRADIO_SERVER_PORT": str(port),
           "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1",
           **(extra_env or {})}
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log_path.open("w"),
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"app.py exited with {proc.returncode}; see {log_path}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    stop_app(proc)
    raise RuntimeError(f"app.py did not answer on {url} within {START_TIMEOUT_S} s; see {log_path}")


def stop_app(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
