"""The private names of Transformers, torch, Gradio, uvicorn and mcp that the project reaches into are still where,
and what, they were when `playground/compat/` was written (its modules' `WRITTEN_AGAINST`), and nothing outside the
room reaches into them.

Model-free: the installed packages' source and signatures are read; no model is built and no server started. What the
hooks do is checked where they run (tests/test_engine.py, tests/test_draws.py, tests/test_hostile*.py).
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import importlib.metadata
import inspect
import logging
import textwrap
from pathlib import Path
from typing import Any

import pytest

from appserver import run_coroutine_apart
from playground.compat import gradio_internals, transformers_internals

PACKAGE = Path(__file__).resolve().parent.parent / "playground"
REQUIRED = inspect.Parameter.empty


def _attribute(module: str, dotted: str) -> Any:
    value: Any = importlib.import_module(module)
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


def _names_read(function: Any) -> set[str]:
    """The global and attribute names a function's code looks up (decorators unwrapped)."""
    return set(inspect.unwrap(function).__code__.co_names)


def _assigns(cls_or_function: Any, *statements: str) -> list[str]:
    source = inspect.getsource(cls_or_function)
    return [f"{cls_or_function.__qualname__} no longer has `{s}`" for s in statements if s not in source]


# Module, attribute -> its parameters, as the hooks call or stand in for them.
TRANSFORMERS_SIGNATURES: dict[tuple[str, str], list[str]] = {
    ("transformers.generation.utils", "GenerationMixin._get_candidate_generator"): [
        "self", "generation_config", "input_ids", "inputs_tensor", "logits_processor", "model_kwargs",
        "assistant_model", "target_tokenizer", "assistant_tokenizer"],
    ("transformers.generation.utils", "GenerationMixin._get_logits_processor"): [
        "self", "generation_config", "input_ids_seq_length", "encoder_input_ids", "prefix_allowed_tokens_fn",
        "logits_processor", "device", "model_kwargs", "negative_prompt_ids", "negative_prompt_attention_mask"],
    ("transformers.generation.utils", "_speculative_sampling"): [
        "candidate_input_ids", "candidate_logits", "candidate_length", "new_logits", "assistant_ensemble_weight"],
    ("transformers.generation.candidate_generator", "CandidateGenerator.get_candidates"): ["self", "input_ids",
                                                                                            "kwargs"],
    ("transformers.generation.candidate_generator", "CandidateGenerator.update_candidate_strategy"): [
        "self", "input_ids", "scores", "num_matches"],
    ("transformers.generation.candidate_generator", "AssistantVocabTranslatorCache.get_translator"): [
        "target_tokenizer", "assistant_tokenizer", "target_vocab_size", "assistant_model", "assistant_prune_lm_head"],
    ("torch", "rand_like"): [],  # a builtin: no signature to read; its presence is what counts
}

GRADIO_SIGNATURES: dict[tuple[str, str], list[str]] = {
    ("gradio.queueing", "Queue.clean_events"): ["self", "session_hash", "event_id"],
    ("gradio.utils", "get_upload_folder"): [],
}


def signature_changes(expected: dict[tuple[str, str], list[str]]) -> list[str]:
    changes = []
    for (module, name), parameters in expected.items():
        try:
            function = _attribute(module, name)
        except (ImportError, AttributeError) as exc:
            changes.append(f"{module}.{name} is gone ({exc})")
            continue
        if not callable(function):
            changes.append(f"{module}.{name} is no longer callable")
        elif parameters and _parameters(function) != parameters:
            changes.append(f"{module}.{name} takes {_parameters(function)}, not {parameters}")
    return changes


def _prefix_tests(function: Any) -> set[tuple[str, ...]]:
    """The tuples of strings a function's code passes to `startswith`."""
    calls = (node for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(function))))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith")
    return {tuple(element.value for element in call.args[0].elts) for call in calls  # type: ignore[attr-defined]
            if call.args and isinstance(call.args[0], ast.Tuple)
            and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in call.args[0].elts)}


def transformers_changes() -> list[str]:
    import weakref

    import torch
    from transformers.generation import utils
    from transformers.generation.candidate_generator import AssistantVocabTranslatorCache

    t = transformers_internals
    changes = signature_changes(TRANSFORMERS_SIGNATURES)
    if t.SAMPLING_MODULE is not utils or t.RAND_LIKE_MODULE is not torch:
        changes.append("the modules the draw tap patches are not generation.utils and torch")
    checks = {
        "_assisted_decoding builds its generator through self._get_candidate_generator":
            t.CANDIDATE_GENERATOR_FACTORY in _names_read(utils.GenerationMixin._assisted_decoding),
        "_assisted_decoding looks _speculative_sampling up by its module-level name":
            t.SPECULATIVE_SAMPLING in _names_read(utils.GenerationMixin._assisted_decoding),
        "generate builds its processors through self._get_logits_processor":
            t.LOGITS_PROCESSOR_FACTORY in _names_read(utils.GenerationMixin.generate),
        "_speculative_sampling draws r with torch.rand_like":
            "rand_like" in _names_read(getattr(utils, t.SPECULATIVE_SAMPLING, lambda: None)),
        "AssistantVocabTranslatorCache._cache is a WeakKeyDictionary":
            isinstance(getattr(AssistantVocabTranslatorCache, "_cache", None), weakref.WeakKeyDictionary),
        "_get_candidate_generator tells a shared-KV drafter and its targets by these class-name prefixes":
            _prefix_tests(utils.GenerationMixin._get_candidate_generator) >= {t.SHARED_KV_DRAFTERS, t.SHARED_KV_TARGETS},
    }
    return changes + [f"no longer true: {claim}" for claim, holds in checks.items() if not holds]


def gradio_changes() -> list[str]:
    import gradio.mcp
    from gradio import blocks, events, queueing, state_holder
    from gradio.context import LocalContext
    from mcp.server.lowlevel import Server
    from uvicorn.protocols.http import h11_impl

    changes = signature_changes(GRADIO_SIGNATURES)
    changes += _assigns(blocks.Blocks, "self._queue = queueing.Queue(", "self.mcp_server_obj")
    changes += _assigns(queueing.Queue.__init__, "self.event_queue_per_concurrency_id", "self.active_jobs",
                        "self.max_thread_count")
    changes += _assigns(queueing.Queue.start, "self.active_jobs = [None] * self.max_thread_count")
    changes += _assigns(queueing.Queue.__init__, "self.sleep_when_free =", "self.progress_update_sleep_when_free =")
    changes += _assigns(queueing.Queue.start_processing, "await asyncio.sleep(self.sleep_when_free)")
    changes += _assigns(queueing.Queue.start_progress_updates,
                        "await asyncio.sleep(self.progress_update_sleep_when_free)")
    changes += _assigns(queueing.EventQueue.__init__, "self.queue")
    changes += _assigns(queueing.Event.__init__, "self._id =", "self.session_hash", "self.fn =", "self.alive",
                        "self.enqueue_time")
    changes += _assigns(blocks.BlockFunction.__init__, "self._id =", "self.api_name =", "self.fn =")
    changes += _assigns(events.EventData.__init__, "self._data = _data")
    changes += _assigns(gradio.mcp.GradioMCPServer.__init__, "self.mcp_server =")
    changes += _assigns(Server.__init__, "self.request_handlers")
    changes += _assigns(h11_impl.H11Protocol.__init__, "DEFAULT_MAX_INCOMPLETE_EVENT_SIZE")
    config_readers = [name for name, text in _gradio_sources().items() if "config_values" in text]
    checks = {
        "SessionState._update_value_in_config(key, value) sets config_values[key]['props']['value']":
            '["props"]["value"] = value' in inspect.getsource(state_holder.SessionState._update_value_in_config),
        "only state_holder.py reads config_values (the deep-link route through SessionState.components)":
            config_readers == ["state_holder.py"],
        "gradio/mcp.py reads a function's _mcp_type": gradio_internals.MCP_TYPE in inspect.getsource(gradio.mcp),
        "LocalContext has blocks, event_id and request": all(
            hasattr(getattr(LocalContext, name, None), "get") for name in ("blocks", "event_id", "request")),
        "h11_impl.DEFAULT_MAX_INCOMPLETE_EVENT_SIZE is an int":
            isinstance(getattr(h11_impl, "DEFAULT_MAX_INCOMPLETE_EVENT_SIZE", None), int),
    }
    return changes + [f"no longer true: {claim}" for claim, holds in checks.items() if not holds]


def _gradio_sources() -> dict[str, str]:
    import gradio

    root = Path(gradio.__file__).parent
    return {str(path.relative_to(root)): path.read_text(encoding="utf-8") for path in sorted(root.rglob("*.py"))}


def _installed(names: Any) -> dict[str, str]:
    return {name: importlib.metadata.version(name).split("+")[0] for name in names}


def test_the_transformers_internals_are_where_and_what_they_were() -> None:
    """Fails, naming each, when a Transformers or torch release moves, renames or re-signs a hooked internal: then
    playground/compat/transformers_internals.py must follow, and WRITTEN_AGAINST with it."""
    changes = transformers_changes()
    written = transformers_internals.WRITTEN_AGAINST
    assert not changes, f"written against {written}; installed {_installed(written)}. Changed:\n  " + "\n  ".join(changes)


def test_the_gradio_internals_are_where_and_what_they_were() -> None:
    """The same for Gradio's, uvicorn's and mcp's internals the page reads."""
    changes = gradio_changes()
    written = gradio_internals.WRITTEN_AGAINST
    assert not changes, f"written against {written}; installed {_installed(written)}. Changed:\n  " + "\n  ".join(changes)


@pytest.mark.parametrize("module", [transformers_internals, gradio_internals])
def test_the_installed_releases_are_those_the_room_was_written_against(module: Any) -> None:
    """WRITTEN_AGAINST and the module's docstring name what requirements.txt installs (a new release is read against
    the drift tests above before its number goes here)."""
    assert _installed(module.WRITTEN_AGAINST) == module.WRITTEN_AGAINST
    docstring = " ".join((module.__doc__ or "").split())
    for name, version in module.WRITTEN_AGAINST.items():
        assert f"{name} {version}" in docstring
    pins = (PACKAGE.parent / "requirements.txt").read_text()
    for name in ("torch", "transformers", "gradio"):
        if name in module.WRITTEN_AGAINST:
            assert f"=={module.WRITTEN_AGAINST[name]}" in pins


def test_a_moved_internal_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """The drift checks themselves: a re-signed `_speculative_sampling` and a Queue without `clean_events` are named."""
    from gradio import queueing
    from transformers.generation import utils

    monkeypatch.setattr(utils, "_speculative_sampling", lambda candidate_logits, new_logits: None)
    assert any("_speculative_sampling takes" in c for c in transformers_changes())
    monkeypatch.setattr(transformers_internals, "SHARED_KV_TARGETS", ("Gemma4",))
    assert any("class-name prefixes" in c for c in transformers_changes())
    monkeypatch.delattr(queueing.Queue, "clean_events")
    assert any("Queue.clean_events is gone" in c for c in gradio_changes())


# Private names of a dependency: read only in playground/compat/ (attributes, getattr's names, imported names).
PRIVATE_NAMES = {"_get_candidate_generator", "_get_logits_processor", "_speculative_sampling", "_cache", "_queue",
                 "_id", "_data", "_mcp_type", "clean_events", "active_jobs", "max_thread_count",
                 "event_queue_per_concurrency_id",
                 "get_upload_folder", "mcp_server_obj", "request_handlers", "DEFAULT_MAX_INCOMPLETE_EVENT_SIZE",
                 "LocalContext", "h11_impl", "_update_value_in_config", "sleep_when_free",
                 "progress_update_sleep_when_free"}


def private_reads(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root).as_posix()
        if where.startswith("compat/") or where.startswith("models/gguf_patches"):  # gguf_patches: its own room
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Attribute) and not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                names = [node.attr]  # an object's own `self._queue` is the project's
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value]
            elif isinstance(node, (ast.ImportFrom, ast.Import)):
                names = [alias.name.split(".")[-1] for alias in node.names] + [(getattr(node, "module", "") or "")
                                                                               .split(".")[-1]]
            found += [f"{where}:{node.lineno} {name}" for name in names if name in PRIVATE_NAMES]  # type: ignore[attr-defined]
    return found


def test_only_the_room_reaches_into_a_dependencys_private_names() -> None:
    assert private_reads(PACKAGE) == []
    inside = {hit.split()[-1] for hit in private_reads(PACKAGE / "compat")}  # read as a tree of its own: all found
    assert inside == PRIVATE_NAMES


def test_the_private_name_finder_finds_each_kind(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = blocks._queue\ny = getattr(evt, '_data', None)\n"
                                   "from gradio.context import LocalContext\n")
    assert len(private_reads(tmp_path)) == 3


def test_the_watcher_stops_once_and_says_so_when_gradios_queue_moved(monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """A Blocks without `_queue` (Gradio's internals moved): the unread-call watcher logs one error and ends, instead of
    a warning every WATCH_S for as long as the server runs (what it did: this waited out its 2 s)."""
    from playground.app import gate

    class Server:
        def get_blocks(self) -> object:
            return object()

    monkeypatch.setattr(gate, "WATCH_S", 0.01)
    with caplog.at_level(logging.WARNING, logger=gate.logger.name):
        run_coroutine_apart(asyncio.wait_for(gate.Gate(None).watch(Server()), 2))
    records = [r for r in caplog.records if r.name == gate.logger.name]
    assert [r.levelno for r in records] == [logging.ERROR] and "Gradio's queue moved" in records[0].getMessage()


def test_the_watcher_keeps_watching_after_one_failed_look(monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """A look that fails for another reason is logged and the watcher goes on (it stops only for a moved internal)."""
    from playground.app import gate

    looks: list[int] = []

    class Queue:
        event_queue_per_concurrency_id: dict[str, Any] = {}

        @property
        def active_jobs(self) -> list[Any]:
            looks.append(1)
            if len(looks) == 1:
                raise RuntimeError("one bad look")
            if len(looks) == 3:
                raise asyncio.CancelledError
            return []

    class Blocks:
        _queue = Queue()

    class Server:
        def get_blocks(self) -> Blocks:
            return Blocks()

    monkeypatch.setattr(gate, "WATCH_S", 0.01)
    with caplog.at_level(logging.WARNING, logger=gate.logger.name), pytest.raises(asyncio.CancelledError):
        run_coroutine_apart(asyncio.wait_for(gate.Gate(None).watch(Server()), 2))
    assert len(looks) == 3
    assert [r.levelno for r in caplog.records if r.name == gate.logger.name] == [logging.WARNING]


@pytest.mark.parametrize("poll_less", [False, True])
def test_an_idle_queue_looks_for_work_as_often_as_the_app_sets(poll_less: bool) -> None:
    """Gradio's own queue loops, run idle for 0.5 s: left as Gradio sets them they wake about every 1 ms (the queue)
    and 10 ms (progress); after `poll_less_when_free` with the app's figures, every 10 ms and 100 ms."""
    import gradio as gr

    from playground.app.launch import QUEUE_FREE_POLL_S, QUEUE_PROGRESS_POLL_S

    with gr.Blocks() as blocks:
        gr.Button().click(lambda: None)
    blocks.queue()
    queue = gradio_internals.queue_of(blocks)
    queue.active_jobs = [None] * queue.max_thread_count  # as `Queue.start` leaves them
    if poll_less:
        gradio_internals.poll_less_when_free(queue, QUEUE_FREE_POLL_S, QUEUE_PROGRESS_POLL_S)
    wakes = {"queue": 0, "progress": 0}

    async def idle() -> None:
        from gradio import queueing

        original = queueing.asyncio.sleep
        counts = {"sleep_when_free": 0, "progress_update_sleep_when_free": 0}

        async def counted(seconds: float, *args: Any) -> Any:
            for name in counts:
                if seconds == getattr(queue, name):
                    counts[name] += 1
            return await original(seconds, *args)

        queueing.asyncio.sleep = counted
        try:
            tasks = [asyncio.ensure_future(queue.start_processing()),
                     asyncio.ensure_future(queue.start_progress_updates())]
            await original(0.5)
            queue.stopped = True
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            queueing.asyncio.sleep = original
        wakes["queue"], wakes["progress"] = counts["sleep_when_free"], counts["progress_update_sleep_when_free"]

    run_coroutine_apart(idle())
    if poll_less:
        assert wakes["queue"] <= 0.5 / QUEUE_FREE_POLL_S + 2, wakes
        assert wakes["progress"] <= 0.5 / QUEUE_PROGRESS_POLL_S + 2, wakes
    else:  # Gradio's own: the loops the app slows down (a loaded machine wakes them less often than asked)
        assert wakes["queue"] > 2 * (0.5 / QUEUE_FREE_POLL_S + 2), wakes
