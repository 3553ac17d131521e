"""`mypy` with the project's settings (pyproject.toml's `[tool.mypy]`) finds no type error in playground/ and tests/
(tests/measure/ too): a call with an argument of the wrong type, an attribute of a value that may be None, a
`# type: ignore` no longer needed (`warn_unused_ignores`) or one without its error code fails the model-free tier. The
pinned mypy (requirements-dev.txt) is the one run, so a new mypy's new checks cannot fail CI by themselves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_lint import ROOT, _pinned


def _mypy(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=cwd, capture_output=True, text=True)


def test_the_installed_mypy_is_the_pinned_one() -> None:
    done = _mypy("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == ["mypy", _pinned("mypy")]


def test_mypy_is_clean_on_playground_and_tests(tmp_path: Path) -> None:
    """`python -m mypy` as a developer runs it (the files `[tool.mypy]` names) reads every module of both, and finds
    nothing: a module it left out would be checked by nobody."""
    done = _mypy("--cache-dir", str(tmp_path / "cache"), "--hide-error-context")
    assert done.returncode == 0, done.stdout + done.stderr
    modules = [path for folder in ("playground", "tests") for path in (ROOT / folder).rglob("*.py")]
    assert any(path.parent.name == "measure" for path in modules)
    assert done.stdout.strip().endswith(f"Success: no issues found in {len(modules)} source files"), done.stdout


def test_mypy_with_the_projects_settings_finds_a_type_error(tmp_path: Path) -> None:
    """The settings do check: a value that may be None used as a number, and a `# type: ignore` that hides
    nothing, in a module like ours, are both found."""
    module = tmp_path / "sample.py"
    module.write_text("def half(x: float | None) -> float:\n    return x / 2\n\n\n"
                      "def same(x: int) -> int:\n    return x  # type: ignore[return-value]\n", encoding="utf-8")
    done = _mypy("--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"), str(module))
    assert done.returncode == 1
    assert "[operator]" in done.stdout and "[unused-ignore]" in done.stdout, done.stdout
