"""The house rules that a reader relies on, checked on the source: no import circles, no module with Gradio and torch.

Imports are read from every module of `playground/` with `ast`, at module level and inside functions alike (an
import made inside a function still ties the two modules together; it only hides the circle until run time).
Imports under `if TYPE_CHECKING:` are left out of the circle check: they never run.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "playground"

# Known circles still to be cut, each as the set of its modules: none (the last, bench <-> bench_charts, went
# with the benchmark package). Nothing may be added here: cut a new circle instead.
KNOWN_CYCLES: list[frozenset[str]] = []


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_blocks(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside `if TYPE_CHECKING:` blocks."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for child in node.body for n in ast.walk(child))
    return skipped


def imports_of(name: str, path: Path, known: set[str], *, type_checking: bool) -> set[str]:
    """Every module that `name` imports (anywhere in it), as dotted names; `playground` modules resolved exactly."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = set() if type_checking else _type_checking_blocks(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            found.add(origin)
            for alias in node.names:  # `from . import render`: the submodule itself
                if f"{origin}.{alias.name}" in known:
                    found.add(f"{origin}.{alias.name}")
    return found


def import_graph() -> dict[str, set[str]]:
    """playground module -> the playground modules it imports (packages' own `__init__` left out: empty of code)."""
    mods = modules()
    known = set(mods)
    graph = {}
    for name, path in mods.items():
        targets = imports_of(name, path, known, type_checking=False)
        graph[name] = {t for t in targets if t in known and t != name and not name.startswith(t + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_circle_made_inside_a_function() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert "playground.app.page" in graph and "playground.engine" in graph, "the graph covers every module"
    found = cycles(graph)
    unexpected = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert not unexpected, f"import circles in playground/ (imports inside functions count): {unexpected}"


def test_the_app_package_has_no_import_cycle_at_all() -> None:
    assert not [sorted(c) for c in cycles(import_graph()) if any(m.startswith("playground.app") for m in c)]


def test_nothing_imports_the_page_but_the_launcher() -> None:
    """The page only puts the tabs together: the tabs, the engine and the CLI never reach back into it."""
    graph = import_graph()
    importers = sorted(name for name, targets in graph.items() if "playground.app.page" in targets)
    assert importers == ["playground.app.launch"]


def test_no_module_imports_both_gradio_and_torch() -> None:
    """The engine knows nothing of Gradio; the page and the renderers know nothing of torch."""
    mods = modules()
    both = []
    for name, path in mods.items():
        roots = {m.split(".")[0] for m in imports_of(name, path, set(mods), type_checking=True)}
        if {"gradio", "torch"} <= roots:
            both.append(name)
    assert "gradio" in {m.split(".")[0] for m in imports_of("playground.app.page", mods["playground.app.page"],
                                                             set(mods), type_checking=True)}
    assert not both, f"modules importing both gradio and torch: {both}"


def _check_package_map(package: str) -> list[str]:
    """The modules `playground/<package>/__init__.py` maps, lowest first, after checking each imports (anywhere in it)
    only those listed above it and that the map lists each of the package's modules once."""
    init = PACKAGE / package / "__init__.py"
    listed = re.findall(r"^  ([a-z_]+)  ", ast.get_docstring(ast.parse(init.read_text())) or "", re.M)
    present = sorted(path.stem for path in init.parent.glob("*.py") if path.name != "__init__.py")
    assert sorted(listed) == present, f"the map lists each module of playground/{package}/ once"
    graph = import_graph()
    prefix = f"playground.{package}."
    for position, name in enumerate(listed):
        inside = {target.removeprefix(prefix) for target in graph[prefix + name] if target.startswith(prefix)}
        later = sorted(inside - set(listed[:position]))
        assert not later, f"{prefix}{name} imports {later}, listed after it"
    return listed


def test_the_model_layers_modules_import_only_those_its_map_lists_before_them() -> None:
    """playground/models/__init__.py maps its modules lowest first; each imports (anywhere in it) only those above."""
    assert _check_package_map("models")[0] == "loaded"


def test_the_engines_modules_import_only_those_its_map_lists_before_them() -> None:
    """playground/engine/__init__.py maps its modules lowest first; each imports (anywhere in it) only those above."""
    assert _check_package_map("engine")[-1] == "live"


def test_the_apps_modules_import_only_those_its_map_lists_before_them() -> None:
    """playground/app/__init__.py maps every module of the page, lowest first; each imports only those above it."""
    assert _check_package_map("app")[-2:] == ["page", "launch"]


def test_tunes_modules_import_only_those_its_map_lists_before_them() -> None:
    """playground/tune/__init__.py maps its modules lowest first, the pure part before the measuring part."""
    listed = _check_package_map("tune")
    assert listed[:4] == ["settings", "replaying", "cost", "verdict"] and listed[-1] == "several"


def _fresh_python(script: str) -> str:
    """`script`'s output, run by a fresh interpreter in the repository (so `sys.modules` shows what it imported)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_tunes_pure_part_imports_no_torch() -> None:
    """Tune's settings, replay, cost arithmetic and verdict, and the package's own names, import neither torch nor the
    engine (which imports it): the page and the report read them without seconds of imports. The measuring part's
    names are imported on first use, and bring torch then."""
    script = (
        "import sys\n"
        "from playground.tune import cost, replaying, settings, verdict\n"
        "from playground.tune import REPLAYS, Setting, TuneResult, simulate_prompt_lookup, standing_against_baseline\n"
        "print('pure', 'torch' in sys.modules, 'playground.engine' in sys.modules)\n"
        "from playground.tune import tune\n"
        "print('measuring', 'torch' in sys.modules)\n")
    stdout = _fresh_python(script)
    assert "pure False False" in stdout and "measuring True" in stdout, stdout


def test_tunes_pure_modules_import_nothing_that_imports_torch() -> None:
    """The same, read from the source: the pure modules import (anywhere in them) no torch, no engine and no module of
    Tune's measuring part, so no later change can bring torch in through a function's import either."""
    mods = modules()
    for name in ("settings", "replaying", "cost", "verdict"):
        found = imports_of(f"playground.tune.{name}", mods[f"playground.tune.{name}"], set(mods), type_checking=True)
        torchy = sorted(m for m in found if m.split(".")[0] == "torch" or m.startswith("playground.engine")
                        or m in {f"playground.tune.{n}" for n in ("calibration", "drafter", "one_prompt", "several")})
        assert not torchy, f"playground.tune.{name} imports {torchy}"


def test_a_package_map_that_lists_a_module_below_one_it_imports_fails(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The map check itself: a copy of playground/ whose engine map lists `live` above `steps` and `worker` (which it
    imports) is refused."""
    copy = tmp_path / "playground"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    init = copy / "engine" / "__init__.py"
    text = init.read_text()
    swapped = (text.replace("\n  steps  ", "\n  @  ").replace("\n  live  ", "\n  steps  ")
               .replace("\n  @  ", "\n  live  "))
    assert swapped != text
    init.write_text(swapped)
    monkeypatch.setitem(globals(), "PACKAGE", copy)
    with pytest.raises(AssertionError, match=re.escape("playground.engine.live imports ['steps', 'worker'], listed after it")):
        _check_package_map("engine")


def test_a_page_load_without_a_link_imports_no_torch() -> None:
    """torch and Transformers take seconds to import: the page is built, and a page load without a link's settings is
    answered (the link's restore, the gallery's titles), without them (a link that sets something checks it with the
    engine's validation, which imports torch: seen failing when `restore` imported it before its early return)."""
    script = (
        "import sys\n"
        "from playground.app import gallery_picker, links, page\n"
        "page.build_ui()\n"
        "assert links.restore({}, ['prompt_lookup_num_tokens']) is not None\n"
        "gallery_picker.localized_choices(None)\n"
        "print('without', 'torch' in sys.modules)\n")
    stdout = _fresh_python(script)
    assert "without False" in stdout, stdout


# --------------------------------------------------------------------------- outputs by name, rooms of a size

APP = PACKAGE / "app"


def _is_skip(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and ast.unparse(node.func) in ("gr.skip", "gradio.skip")


def counted_skips(source: str) -> list[str]:
    """Where a handler counts its outputs by hand: a list of skips multiplied (`[gr.skip()] * 14`), skips made in a
    loop (`gr.skip() for _ in range(10)`), or a literal tuple or list holding more than one skip (a 7-tuple with five
    of them). An `Outputs` declaration gives every output it is not told by name as a skip instead."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and any(
                isinstance(side, (ast.List, ast.Tuple)) and any(_is_skip(e) for e in side.elts)
                for side in (node.left, node.right)):
            found.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
        elif isinstance(node, (ast.ListComp, ast.GeneratorExp)) and _is_skip(node.elt) and not node.generators[0].ifs:
            found.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
        elif isinstance(node, (ast.Tuple, ast.List)) and sum(_is_skip(e) for e in node.elts) > 1:
            found.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_the_counted_skip_finder_finds_each_kind() -> None:
    assert len(counted_skips("a = [gr.skip()] * 14\nb = tuple(gr.skip() for _ in range(10))\n"
                             "c = (x, gr.skip(), gr.skip())\n")) == 3
    assert counted_skips("a = OUT(status=x)\nb = gr.skip() if y else z\n") == []


def test_no_handler_of_the_page_counts_its_outputs() -> None:
    """Every handler's outputs are an `Outputs` declaration (playground/app/outputs.py): no skip counted by hand."""
    found = {path.name: hits for path in sorted(APP.glob("*.py"))
             if path.name != "outputs.py" and (hits := counted_skips(path.read_text(encoding="utf-8")))}
    assert found == {}, found


MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 100


def test_no_module_is_too_long_to_read_and_no_function_longer_than_a_screen() -> None:
    """The house's size rules (#39): a module a reader can hold (800 lines), a function on one screen (100)."""
    long_modules, long_functions = {}, {}
    for name, path in modules().items():
        source = path.read_text(encoding="utf-8")
        if len(source.splitlines()) > MAX_MODULE_LINES:
            long_modules[name] = len(source.splitlines())
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long_functions[f"{name}.{node.name}"] = lines
    assert long_modules == {} and long_functions == {}, (long_modules, long_functions)
