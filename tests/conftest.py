"""Shared fixtures: tiny real checkpoints on disk (seconds to build, no download)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from playground.models import ModelStore  # noqa: E402
from tiny import build_tokenizer, save_tiny_llama  # noqa: E402


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A tiny Llama target, a partly agreeing drafter (noisy copy), an unrelated drafter, same tokenizer."""
    root = tmp_path_factory.mktemp("tiny")
    tok = build_tokenizer()
    target = save_tiny_llama(root / "target", seed=0, tokenizer=tok)
    noisy = save_tiny_llama(root / "noisy", seed=1, tokenizer=tok, perturb_from=target, noise=0.3)
    other = save_tiny_llama(root / "other", seed=2, layers=2, hidden=32, tokenizer=tok)
    return {"target": str(target), "noisy": str(noisy), "other": str(other)}


@pytest.fixture(scope="module")
def store() -> ModelStore:
    """A model store of the test module's own: its models are loaded once and dropped with the module."""
    return ModelStore()


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models gain nothing from intra-op threads; on a busy two-core machine two threads per forward
    make their runs several times slower. Restored after the module."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
