"""`ruff check` with the project's rules (pyproject.toml's `[tool.ruff]`) is clean: an unused or undefined name, a
redefinition, a statement error anywhere in the repository fails the model-free tier, not a reader. The pinned ruff
(requirements-dev.txt) is the one run, so a new ruff's new default rules cannot fail CI by themselves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pinned(name: str) -> str:
    for line in (ROOT / "requirements-dev.txt").read_text(encoding="utf-8").splitlines():
        requirement = line.split("#")[0].strip()
        if requirement.startswith(f"{name}=="):
            return requirement.split("==")[1]
    raise AssertionError(f"{name} is not pinned in requirements-dev.txt")


def test_the_installed_ruff_is_the_pinned_one() -> None:
    done = subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["ruff", _pinned("ruff")]


def test_ruff_check_is_clean_with_the_projects_rules() -> None:
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
