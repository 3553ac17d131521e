"""The internals of Transformers (and gguf) that `playground/models/gguf_patches.py` replaces or relies on are still
where, and what, they were when the patches were written (`gguf_patches.WRITTEN_AGAINST`).

A patch replaces a module's attribute, so it reaches a caller only where the caller looks the name up when it runs.
Besides each patched function's place and parameters, this reads every import of one of them in Transformers'
source: a new import at a module's top (bound once, when the module is imported) would keep the original, and the
file would be parsed again without any error. What the patches do is checked in tests/test_startup.py.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
import logging
from pathlib import Path
from typing import Any

import gguf
import transformers

from playground.models import gguf_patches

REQUIRED = inspect.Parameter.empty

# Module, attribute -> its parameters (name, default) as the patches call or stand in for it.
SIGNATURES: dict[tuple[str, str], list[tuple[str, Any]]] = {
    # gguf_read_once's `load` stands in for it: (file, return_tensors=False, **kwargs).
    ("transformers.modeling_gguf_pytorch_utils", "load_gguf_checkpoint"): [
        ("gguf_checkpoint_path", REQUIRED), ("return_tensors", False), ("model_to_load", None), ("torch_dtype", None)],
    # Its `read_metadata` stands in for it: (file, string_arrays=()).
    ("transformers.integrations.gguf.reader", "read_gguf_metadata"): [("gguf_path", REQUIRED), ("string_arrays", ())],
    # Its `shared_reader` stands in for the class: (file, mode="r").
    ("gguf", "GGUFReader.__init__"): [("self", REQUIRED), ("path", REQUIRED), ("mode", "r")],
    # BulkArrayGGUFReader overrides it, and calls `_get`.
    ("gguf", "GGUFReader._get_field_parts"): [("self", REQUIRED), ("orig_offs", REQUIRED), ("raw_type", REQUIRED)],
    ("gguf", "GGUFReader._get"): [("self", REQUIRED), ("offset", REQUIRED), ("dtype", REQUIRED), ("count", 1),
                                  ("override_order", None)],
    # Cached with functools.cache (hashable arguments).
    ("gguf", "get_tensor_name_map"): [("arch", REQUIRED), ("n_blocks", REQUIRED)],
    # dequantize_with_torch stands in for the first and calls the others.
    ("gguf", "dequantize"): [("data", REQUIRED), ("qtype", REQUIRED)],
    ("gguf.quants", "quant_shape_from_byte_shape"): [("shape", REQUIRED), ("quant_type", REQUIRED)],
    ("transformers.integrations.gguf.dequant", "dequantize"): [("data", REQUIRED), ("ggml_type", REQUIRED),
                                                               ("dtype", "torch.float32")],
    ("transformers.utils.logging", "is_progress_bar_enabled"): [],
}

# The names the patches replace, and the modules that bind one at their import (each of these bindings is
# replaced too). Any other binding at a module's top, in Transformers, escapes the patch.
PATCHED_NAMES = {"load_gguf_checkpoint", "read_gguf_metadata"}
PATCHED_GGUF_NAMES = {"GGUFReader", "dequantize", "get_tensor_name_map"}  # imported from the gguf package
BOUND_AT_IMPORT = {("quantizers/quantizer_gguf.py", "read_gguf_metadata"),
                   ("integrations/gguf/__init__.py", "read_gguf_metadata")}  # the lazy package's attribute


def _attribute(module: str, dotted: str) -> Any:
    value: Any = importlib.import_module(module)
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _shown(default: Any) -> Any:
    return default if isinstance(default, (str, int, float, bool, tuple, type(None))) or default is REQUIRED \
        else str(default)


def signature_changes() -> list[str]:
    changes = []
    for (module, name), expected in SIGNATURES.items():
        try:
            function = _attribute(module, name)
        except (ImportError, AttributeError) as exc:
            changes.append(f"{module}.{name} is gone ({exc})")
            continue
        found = [(p.name, _shown(p.default)) for p in inspect.signature(function).parameters.values()]
        if found != expected:
            changes.append(f"{module}.{name} takes {found}, not {expected}")
    return changes


def placement_changes() -> list[str]:
    """The references the patches replace are where they were and are the one function each."""
    import transformers.integrations.gguf as lean_package
    from tqdm.auto import tqdm
    from transformers import modeling_gguf_pytorch_utils as gguf_loader
    from transformers.integrations.gguf import reader as lean_reader
    from transformers.quantizers import quantizer_gguf

    checks = {
        "modeling_gguf_pytorch_utils.tqdm is tqdm.auto's": getattr(gguf_loader, "tqdm", None) is tqdm,
        "load_gguf_checkpoint looks `tqdm` up in its module":
            "tqdm" in gguf_loader.load_gguf_checkpoint.__code__.co_names,
        "modeling_gguf_pytorch_utils.logger is a logger": isinstance(getattr(gguf_loader, "logger", None),
                                                                     logging.Logger),
        "integrations.gguf.read_gguf_metadata is the reader's":
            getattr(lean_package, "read_gguf_metadata", None) is lean_reader.read_gguf_metadata,
        "quantizer_gguf.read_gguf_metadata is the reader's":
            getattr(quantizer_gguf, "read_gguf_metadata", None) is lean_reader.read_gguf_metadata,
        "GGUFReader._build_fields calls _get_field_parts":
            "_get_field_parts" in gguf.GGUFReader._build_fields.__code__.co_names,
        "GGUFReader.gguf_scalar_to_np is a dict": isinstance(getattr(gguf.GGUFReader, "gguf_scalar_to_np", None), dict),
        "gguf.dequantize is gguf.quants.dequantize": gguf.dequantize is gguf.quants.dequantize,
        "integrations.gguf.dequant.GGML_BLOCK is a dict": isinstance(
            getattr(importlib.import_module("transformers.integrations.gguf.dequant"), "GGML_BLOCK", None), dict),
    }
    return [f"no longer true: {claim}" for claim, holds in checks.items() if not holds]


def _functions_around(tree: ast.AST) -> dict[int, bool]:
    """id of each node -> whether it sits inside a function (where an import runs at call time)."""
    inside: dict[int, bool] = {}

    def visit(node: ast.AST, in_function: bool) -> None:
        inside[id(node)] = in_function
        nested = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, nested)

    visit(tree, False)
    return inside


def bound_at_import(root: Path) -> list[str]:
    """Every import of a patched name at a module's top in the source under `root`, but those the patches replace."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if not any(name in text for name in PATCHED_NAMES | PATCHED_GGUF_NAMES):
            continue
        tree = ast.parse(text, str(path))
        inside = _functions_around(tree)
        where = path.relative_to(root).as_posix()
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or inside[id(node)]:
                continue
            from_gguf = node.level == 0 and (node.module or "").split(".")[0] == "gguf"
            for alias in node.names:
                patched = alias.name in PATCHED_NAMES or (from_gguf and alias.name in PATCHED_GGUF_NAMES)
                if patched and (where, alias.name) not in BOUND_AT_IMPORT:
                    found.append(f"{where}:{node.lineno} binds {alias.name} at its import")
    return found


def test_the_patched_internals_are_where_and_what_they_were() -> None:
    """Fails, naming each, when a Transformers or gguf release moves, renames or re-signs what the patches replace,
    or binds it where a patch cannot reach it: then gguf_patches must follow, and WRITTEN_AGAINST with it."""
    root = Path(transformers.__file__).parent
    changes = signature_changes() + placement_changes() + bound_at_import(root)
    assert not changes, (f"gguf_patches was written against {gguf_patches.WRITTEN_AGAINST}; installed: transformers "
                         f"{transformers.__version__}, gguf {importlib.metadata.version('gguf')}. Changed:\n  "
                         + "\n  ".join(changes))


def test_the_installed_releases_are_those_the_patches_were_written_against() -> None:
    """The module's docstring and WRITTEN_AGAINST name what requirements.txt installs (a new release of either is
    read against the patches, with the test above and tests/test_startup.py's, before its number goes here), and the
    docstring names the test above."""
    installed = {"transformers": transformers.__version__, "gguf": importlib.metadata.version("gguf")}
    assert installed == gguf_patches.WRITTEN_AGAINST
    docstring = " ".join((gguf_patches.__doc__ or "").split()).lower()
    for name, version in installed.items():
        assert f"{name} {version}" in docstring
    assert f"{Path(__file__).name}::{test_the_patched_internals_are_where_and_what_they_were.__name__}" in docstring
