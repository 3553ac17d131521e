"""README stays true to the code: the settings, the methods, the modules and the commands CI runs."""

from __future__ import annotations

import re
from pathlib import Path

from playground.methods import METHODS
from playground.settings import SETTINGS_DOC

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_setting_is_documented():
    for name, default, meaning in SETTINGS_DOC:
        assert re.search(rf"^\| `{name}` \| {re.escape(default)} \|", README, re.M), name


def test_every_method_has_a_row_in_the_methods_table():
    for name in METHODS:
        assert re.search(rf"^\| `{name}` \|", README, re.M), name


def test_ci_runs_the_readme_test_command():
    blocks = re.findall(r"```bash\n(.*?)\n```", README, re.S)
    test_command = next(b for b in blocks if "pytest" in b)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    # CI runs the same steps, with quiet flags for its log.
    normalised = lambda s: re.sub(r"\s+-q\b", "", s.replace("python -m pip", "pip"))  # noqa: E731
    assert normalised(test_command).strip() in normalised(ci)
    assert any(b.strip() == "pip install -r requirements.txt && python app.py" for b in blocks)


def test_readme_lists_every_guide_preset(monkeypatch):
    from playground.presets import readme_table

    monkeypatch.delenv("PLAYGROUND_MEMORY_BUDGET_GB", raising=False)  # the table states the default budget
    assert readme_table() in README


def _architecture_rows() -> set[str]:
    """The paths named (in backticks) in the first column of README's architecture table."""
    section = README.split("\n## Architecture\n", 1)[1].split("\n## ", 1)[0]
    first_cells = re.findall(r"^\| (.+?) \|", section, re.M)
    return {name for cell in first_cells for name in re.findall(r"`([^`]+)`", cell)}


def test_every_module_has_a_row_in_the_architecture_table():
    listed = _architecture_rows()
    modules = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "playground").rglob("*.py"))
    assert modules and "playground/app/page.py" in modules
    missing = [module for module in modules if module not in listed]
    assert not missing, f"README's architecture table has no row for {missing}"
    stale = sorted(name for name in listed if name.endswith(".py") and not (ROOT / name).is_file())
    assert not stale, f"README's architecture table lists modules that do not exist: {stale}"


def test_the_quick_command_leaves_out_every_marked_kind():
    """README's second pytest block is the quick run: it deselects every marker pyproject.toml registers."""
    import tomllib

    blocks = [b for b in re.findall(r"```bash\n(.*?)\n```", README, re.S) if "pytest" in b]
    quick = blocks[1]
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    markers = [line.split(":", 1)[0] for line in options["markers"]]
    assert markers == ["browser", "server", "bundled", "slow"]
    assert quick.strip() == f'python -m pytest -q -m "{" and ".join(f"not {m}" for m in markers)}"'
