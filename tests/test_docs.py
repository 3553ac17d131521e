"""README and docs/ stay true to the code: the settings, the methods, the presets, the modules, the commands CI runs,
and every link between them."""

from __future__ import annotations

import re
from pathlib import Path

from playground.methods import METHODS
from playground.settings import SETTINGS_DOC

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = ROOT / "docs"
SETTINGS_MD = (DOCS / "settings.md").read_text(encoding="utf-8")  # the settings table
PRESETS_MD = (DOCS / "presets.md").read_text(encoding="utf-8")  # the guide's examples
ARCHITECTURE_MD = (DOCS / "architecture.md").read_text(encoding="utf-8")  # the module table
# Pages other branches write (merged later): README may link them before they exist here.
WRITTEN_ELSEWHERE = {"docs/limits.md", "docs/tune.md", "docs/microscope.md"}


def test_every_setting_is_documented():
    for name, default, meaning in SETTINGS_DOC:
        assert re.search(rf"^\| `{name}` \| {re.escape(default)} \|", SETTINGS_MD, re.M), name


def test_every_method_has_a_row_in_the_methods_table():
    for name in METHODS:
        assert re.search(rf"^\| `{name}` \|", README, re.M), name


def test_the_methods_tables_greedy_and_sampling_columns_say_what_the_tests_prove():
    """Each row's greedy and sampling cells open with the registry's `proven` kind (reference, lossless, exact, lossy,
    untested): the lectures and README read the same claim, and tests/test_lecture_truth.py checks its tests."""
    for name, method in METHODS.items():
        row = re.search(rf"^\| `{name}` \|(.*)$", README, re.M)
        assert row is not None, name
        cells = [cell.strip() for cell in row.group(1).split(" | ")]
        greedy, sampling = cells[1], cells[2]
        assert greedy.strip("*").startswith(method.proven.greedy.kind), (name, greedy)
        assert sampling.strip("*").startswith(method.proven.sampling.kind), (name, sampling)


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
    assert readme_table() in PRESETS_MD


def _architecture_rows() -> set[str]:
    """The paths named (in backticks) in the first column of docs/architecture.md's table."""
    first_cells = re.findall(r"^\| (.+?) \|", ARCHITECTURE_MD, re.M)
    return {name for cell in first_cells for name in re.findall(r"`([^`]+)`", cell)}


def test_every_module_has_a_row_in_the_architecture_table():
    listed = _architecture_rows()
    modules = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "playground").rglob("*.py"))
    assert modules and "playground/app/page.py" in modules
    missing = [module for module in modules if module not in listed]
    assert not missing, f"docs/architecture.md has no row for {missing}"
    stale = sorted(name for name in listed if name.endswith(".py") and not (ROOT / name).is_file())
    assert not stale, f"docs/architecture.md lists modules that do not exist: {stale}"


def test_the_quick_command_leaves_out_every_marked_kind():
    """README's second pytest block is the quick run (every heavy kind left out), its third the model-free tier: it
    deselects every marker pyproject.toml registers."""
    import tomllib

    blocks = [b for b in re.findall(r"```bash\n(.*?)\n```", README, re.S) if "pytest" in b]
    quick, model_free = blocks[1], blocks[2]
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    markers = [line.split(":", 1)[0] for line in options["markers"]]
    assert markers == ["browser", "server", "bundled", "slow", "models"]
    assert quick.strip() == f'python -m pytest -q -m "{" and ".join(f"not {m}" for m in markers[:4])}"'
    assert model_free.strip() == f'python -m pytest -q -m "{" and ".join(f"not {m}" for m in markers)}"'


def _links(path: Path) -> list[tuple[str, str]]:
    """(target file relative to the repository, #anchor or "") of every relative Markdown link in `path`."""
    found = []
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path.resolve()
        found.append((resolved.relative_to(ROOT).as_posix(), anchor))
    return found


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_readme_stays_short_and_its_links_lead_somewhere():
    """README is for users (about 250 lines at most); the depth lives in docs/, and every link there resolves."""
    assert len(README.splitlines()) <= 260
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    for page in pages:
        for file, anchor in _links(page):
            if file in WRITTEN_ELSEWHERE and not (ROOT / file).exists():
                continue
            assert (ROOT / file).exists(), f"{page.name} links to {file}, which does not exist"
            if anchor:
                assert anchor in _anchors(ROOT / file), f"{page.name} links to {file}#{anchor}: no such heading"
    linked = {file for file, _ in _links(ROOT / "README.md")}
    orphans = [f"docs/{p.name}" for p in DOCS.glob("*.md") if f"docs/{p.name}" not in linked]
    assert not orphans, f"README links to no {orphans}"


TEST_HELPERS = {"conftest.py", "appserver.py", "tiny.py", "hub_cache.py", "hub_script.py", "classroom.py", "file_order.py"}  # imported by the tests


def test_measurement_scripts_live_in_their_own_folder_each_described():
    """tests/ holds test modules and the helpers they import; a script that measures, records or pictures lives in
    tests/measure/, whose README has a row for each one (and none for a script that is gone)."""
    stray = sorted(p.name for p in (ROOT / "tests").glob("*.py")
                   if not p.name.startswith("test_") and p.name not in TEST_HELPERS)
    assert not stray, f"scripts among the test modules (move them to tests/measure/): {stray}"
    measure = ROOT / "tests" / "measure"
    rows = set(re.findall(r"^\| `([a-z0-9_]+\.py)` \|", (measure / "README.md").read_text(encoding="utf-8"), re.M))
    scripts = {p.name for p in measure.glob("*.py")}
    assert rows == scripts, f"tests/measure/README.md rows {sorted(rows - scripts)} name no script; " \
                            f"scripts without a row: {sorted(scripts - rows)}"
