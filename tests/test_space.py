"""Hugging Face Space readiness: README front matter, the gradio pin, and the ZeroGPU decorator."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

import playground.gpu as gpu_module
from playground.gpu import available, gpu

REPO = Path(__file__).resolve().parent.parent


# --- README front matter ----------------------------------------------------------------------

def _front_matter(readme: Path = REPO / "README.md") -> tuple[dict[str, Any], str]:
    """(parsed YAML front matter of README.md, its raw text)."""
    assert readme.is_file(), "README.md is missing"
    text = readme.read_text(encoding="utf-8")
    match = re.match(r"---\r?\n(.*?)\r?\n---\r?\n", text, re.S)
    assert match, "README.md must start with a YAML front matter block between '---' lines (the Space config)"
    raw = match.group(1)
    try:
        import yaml
    except ImportError:  # PyYAML comes with gradio; parse plain `key: value` lines otherwise
        data = {}
        for line in raw.splitlines():
            key, sep, value = line.partition(":")
            if sep and not line.startswith((" ", "#", "-")):
                value = value.strip()
                quoted = len(value) >= 2 and value[0] == value[-1] and value[0] in "'\""
                data[key.strip()] = value[1:-1] if quoted else value
        return data, raw
    data = yaml.safe_load(raw)
    assert isinstance(data, dict), "the front matter must be a YAML mapping"
    return data, raw


def _pinned(package: str) -> str:
    for line in (REPO / "requirements.txt").read_text().splitlines():
        match = re.match(rf"\s*{re.escape(package)}(\[[\w,\s-]*\])?\s*==\s*([^\s;#]+)", line, re.I)
        if match:  # gradio[mcp]==… pins gradio too
            return match.group(2)
    raise AssertionError(f"requirements.txt does not pin {package}==…")


def test_readme_front_matter_configures_a_gradio_space():
    meta, _ = _front_matter()
    assert meta.get("sdk") == "gradio"
    assert meta.get("app_file") == "app.py"
    assert str(meta.get("sdk_version")) == _pinned("gradio"), "the Space must run the gradio version we pin and test"


def test_python_version_is_a_quoted_string():
    """Unquoted, YAML reads 3.10 as the number 3.1; the Space config needs the text."""
    meta, _ = _front_matter()
    version = meta.get("python_version")
    assert isinstance(version, str) and re.fullmatch(r"3\.\d+(\.\d+)?", version), f"python_version: {version!r}"
    assert tuple(map(int, version.split(".")[:2])) >= (3, 10)


def test_app_file_exists():
    assert (REPO / "app.py").is_file(), "the Space runs app.py"


# --- the ZeroGPU decorator --------------------------------------------------------------------

def test_gpu_is_a_no_op_without_spaces():
    assert importlib.util.find_spec("spaces") is None, "this check is for machines without the spaces package"
    assert not available()

    def handler(x: int) -> int:
        return x + 1

    def streaming(n: int):
        yield from range(n)

    assert gpu(handler) is handler
    assert gpu(duration=120)(handler) is handler
    assert gpu(streaming) is streaming and list(gpu(streaming)(3)) == [0, 1, 2]


def test_gpu_delegates_to_spaces_gpu_where_spaces_exists(monkeypatch):
    """On a Space `spaces` exists; here a stand-in module records how `spaces.GPU` is called."""
    calls: list[tuple[Any, ...]] = []

    def GPU(fn: Any = None, **kwargs: Any) -> Any:  # noqa: N802 - the name spaces uses
        calls.append((fn, kwargs))
        return (lambda f: ("wrapped", f, kwargs)) if fn is None else ("wrapped", fn, kwargs)

    monkeypatch.setitem(sys.modules, "spaces", types.SimpleNamespace(GPU=GPU))
    module = importlib.reload(gpu_module)
    try:
        def handler() -> None:
            pass

        assert module.available()
        assert module.gpu(handler) == ("wrapped", handler, {})
        assert module.gpu(duration=90)(handler) == ("wrapped", handler, {"duration": 90})
        assert calls == [(handler, {}), (None, {"duration": 90})]
    finally:
        monkeypatch.delitem(sys.modules, "spaces")
        importlib.reload(gpu_module)
    assert not gpu_module.available()
