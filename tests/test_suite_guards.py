"""The suite guards itself: a hung test fails alone within its timeout, and a test run changes no tracked file.

The timeout is pytest-timeout's (`timeout` in pyproject.toml); it is shown working on a throw-away test that sleeps
past a short timeout given on the command line, under the project's own configuration. Screenshots meant for the
documentation go through `appserver.picture_path`, which writes to artifacts/ unless the pictures are refreshed on
purpose (README: "Tests").
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import appserver
import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def test_the_suite_has_a_per_test_timeout() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    assert 0 < int(options["timeout"]) <= 1200  # long enough for a cold conversion plus a browser run, far below CI's 90 min
    assert re.search(r"^pytest-timeout==", (ROOT / "requirements-dev.txt").read_text(encoding="utf-8"), re.M)


def test_a_hung_test_fails_within_its_timeout(tmp_path: Path) -> None:
    (tmp_path / "test_hangs.py").write_text("import time\n\ndef test_hangs():\n    time.sleep(120)\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ROOT / "pyproject.toml"),
                           "--rootdir", str(tmp_path), "-o", "timeout=3", str(tmp_path / "test_hangs.py")],
                          capture_output=True, text=True, timeout=100, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Timeout" in done.stdout and "test_hangs" in done.stdout, done.stdout


def test_no_test_writes_a_screenshot_into_docs() -> None:
    """Every screenshot a test module takes goes to artifacts/ or through `picture_path` (docs/ only on purpose)."""
    offenders = []
    for path in sorted(TESTS.glob("test_*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "screenshot(" in line and "path=" in line and not re.search(r"ARTIFACTS|picture_path\(", line):
                offenders.append(f"{path.name}:{number}: {line.strip()}")
    assert offenders == []


def test_pictures_go_to_artifacts_unless_refreshed_on_purpose(monkeypatch) -> None:
    monkeypatch.delenv(appserver.REFRESH_DOCS_PICTURES, raising=False)
    assert appserver.picture_path("x.png") == appserver.ARTIFACTS / "x.png"
    monkeypatch.setenv(appserver.REFRESH_DOCS_PICTURES, "1")
    assert appserver.picture_path("x.png") == ROOT / "docs" / "x.png"


@pytest.mark.models  # its probe builds a tiny model in a fresh process
def test_the_model_free_tier_refuses_a_test_that_builds_a_model_unmarked(tmp_path: Path) -> None:
    """README's model-free tier (`-m "... and not models"`) stays model-free: a test that builds a model without the
    `models` marker fails saying so, and one using a fixture that builds models is marked at collection (left out)."""
    (tmp_path / "test_probe.py").write_text(
        "import pytest\nfrom tiny import build_tokenizer, save_tiny_llama\n\n"
        "def test_builds_unmarked(tmp_path):\n    save_tiny_llama(tmp_path / 'm', seed=0, tokenizer=build_tokenizer())\n\n"
        "@pytest.mark.models\ndef test_builds_marked(tmp_path):\n"
        "    save_tiny_llama(tmp_path / 'm', seed=0, tokenizer=build_tokenizer())\n\n"
        "def test_uses_tiny_models(tiny_models):\n    assert tiny_models\n\n"
        "def test_builds_nothing():\n    assert True\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "conftest",
                           "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), "-o", "addopts=",
                           "-o", f"pythonpath={TESTS} {ROOT}", "-m", "not models", str(tmp_path / "test_probe.py")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED test_probe.py::test_builds_unmarked - Failed: built or loaded a model" in done.stdout, done.stdout
    assert "PASSED test_probe.py::test_builds_nothing" in done.stdout, done.stdout
    assert "1 failed, 1 passed, 2 deselected" in done.stdout, done.stdout


def test_loadfile_hands_out_the_heaviest_file_left_first(tmp_path: Path) -> None:
    """README's `-n 2 --dist loadfile` with tests/file_order.py's hook (conftest.py imports it): the files start
    heaviest first by their recorded seconds, a file without a record first of all. xdist's own order (most tests
    first) would start `test_a.py`, the lightest, first."""
    import json

    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "file_weights.json").write_text(json.dumps({"test_a.py": 1, "test_b.py": 90, "test_c.py": 40}))
    (tmp_path / "conftest.py").write_text("from file_order import pytest_xdist_make_scheduler  # noqa: F401\n")
    started = tmp_path / "started.txt"
    body = (f"import os, time\n\ndef _start():\n    with open({str(started)!r}, 'a') as log:\n"
            "        log.write(os.path.basename(__file__) + '\\n')\n    time.sleep(0.3)\n")
    for name, tests in {"test_a": 4, "test_b": 2, "test_c": 3, "test_d": 1}.items():
        (tmp_path / f"{name}.py").write_text(body + "".join(f"\ndef test_{i}():\n    _start()\n" for i in range(tests)))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ROOT / "pyproject.toml"),
                           "--rootdir", str(tmp_path), "-o", "addopts=", "-o", f"pythonpath={TESTS}", "-n", "2",
                           "--dist", "loadfile", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "10 passed" in done.stdout, done.stdout
    order = list(dict.fromkeys(started.read_text().split()))  # each file where it first started
    assert set(order[:2]) == {"test_d.py", "test_b.py"} and order[2:] == ["test_c.py", "test_a.py"], order


def test_the_recorded_file_weights_name_only_test_files_that_exist() -> None:
    """tests/file_weights.json (tests/measure/file_weights.py writes it) orders README's loadfile run: a file in it
    that is gone (renamed, split, deleted) says the record is out of date, and the file that took its tests runs
    unweighed (first)."""
    from file_order import WEIGHTS, file_weights

    weights = file_weights(WEIGHTS)
    assert len(weights) > 50 and all(seconds >= 0 for seconds in weights.values())
    stale = sorted(name for name in weights if not (ROOT / name).is_file())
    assert not stale, f"tests/file_weights.json names files that do not exist: {stale}"


@pytest.mark.parametrize(("env", "cores", "expected"), [
    ({"PYTEST_XDIST_WORKER_COUNT": "2"}, 2, 1),  # README's `-n 2` on two cores: one thread each
    ({"PYTEST_XDIST_WORKER_COUNT": "2"}, 16, 8),
    ({"PYTEST_XDIST_WORKER_COUNT": "4"}, 2, 1),
    ({"PYTEST_XDIST_WORKER_COUNT": "2", "OMP_NUM_THREADS": "2"}, 2, None),  # the caller's choice stands
    ({}, 2, None),  # one process: torch's own default
])
def test_xdist_workers_share_the_cores_out(monkeypatch, env: dict[str, str], cores: int, expected: int | None) -> None:
    import conftest

    for name in ("PYTEST_XDIST_WORKER_COUNT", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(conftest.os, "cpu_count", lambda: cores)
    assert conftest._threads_per_worker() == expected


def test_this_worker_and_the_processes_it_starts_run_its_share_of_the_cores() -> None:
    """Under xdist the worker's torch and a process a test starts (as an app is started) run `WORKER_THREADS`;
    alone, torch keeps its default (the cores)."""
    import conftest
    import torch

    expected = conftest.WORKER_THREADS or torch.get_num_threads()
    assert torch.get_num_threads() == expected
    child = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                           capture_output=True, text=True, check=True, timeout=120)
    assert int(child.stdout) == expected
