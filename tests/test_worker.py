"""The generating side of a run alone (`engine.worker._Worker`), with no `LiveRun` consumer: on the tiny Llama, what
its queue carries (a run's records, then `_DONE`; `_RESTART` between two attempts after giving way; `_DONE` after an
error too) and what it exposes for the consumer (steps generated, elapsed time, the error, turns)."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pytest

from playground.engine import LiveRun, RunRequest, prepare, source_for
from playground.engine.records import _Other, _Raw, _Setup
from playground.engine.stopping import _Stop
from playground.engine.worker import _DONE, _RESTART, _Worker

pytestmark = pytest.mark.models  # it builds tiny models: the module stays out of the model-free tier

PROMPT = "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three,"
TOKENS = 12


def _prepared(store: Any, tiny_models: dict[str, str], method: str) -> Any:
    params = {"prompt_lookup_num_tokens": 3} if method == "prompt_lookup" else {}
    return prepare(RunRequest(prompt=PROMPT, target=tiny_models["target"], method=method, params=params,
                              dtype="float32", max_new_tokens=TOKENS), store)


def _drained(out: "queue.SimpleQueue[Any]") -> list[Any]:
    """Every record the worker handed over, in order: batches opened, the phase closed before a step (`_Raw.before`)
    put before it."""
    items: list[Any] = []
    while not out.empty():
        received = out.get_nowait()
        for item in received if isinstance(received, list) else [received]:
            if isinstance(item, _Raw) and item.before is not None:
                items.append(item.before)
            items.append(item)
    return items


def _run_alone(worker: _Worker) -> list[Any]:
    worker.start()
    worker.join()
    assert not worker.running
    return _drained(worker.out)


@pytest.mark.parametrize("method", ["baseline", "prompt_lookup"])
@pytest.mark.parametrize("held", [True, False], ids=["held", "live"])
def test_the_worker_alone_hands_over_a_runs_records_then_done(store, tiny_models, method, held) -> None:
    """One attempt: its setup, one `_Raw` per step (as many as `LiveRun.run` makes steps) and the phases between them,
    then `_DONE`, last and once; no `_RESTART`. A visitor's own run (it does not give way) takes turns."""
    prepared = _prepared(store, tiny_models, method)
    cancel = threading.Event()
    worker = _Worker(prepared, source_for(prepared), _Stop(cancel), queue.SimpleQueue(), cancel, batched=held)
    items = _run_alone(worker)
    assert items[-1] is _DONE and items.count(_DONE) == 1
    assert _RESTART not in items
    raws = [item for item in items if isinstance(item, _Raw)]
    assert all(isinstance(item, (_Raw, _Setup, _Other)) for item in items[:-1])
    assert isinstance(items[0], _Setup)
    expected = LiveRun(prepared).run()
    assert len(raws) == worker.generated_steps == len(expected.steps) > 1
    assert worker.error is None and worker.gave_way == 0 and not cancel.is_set()
    assert worker.elapsed > 0
    assert worker.turns is not None and worker.turns.turns >= 1  # it took turns (alone: the baton stays with it)
    assert not worker.stop.gave_way and not worker.stop.timed_out and not worker.stop.idle


class _GivesWayOnce(_Stop):
    """The boundary of a long job's run that a visitor's run asks for the models at the end of its first attempt's
    second step (the scheduler itself is not involved: a tiny run is too quick to race)."""

    calls = 0

    def __call__(self, input_ids, scores, **kwargs):
        _GivesWayOnce.calls += 1
        if _GivesWayOnce.calls == 2:
            self._gave_way = True
            return super().__call__(input_ids, scores, **kwargs) | True
        return super().__call__(input_ids, scores, **kwargs)


def test_the_worker_alone_gives_way_restarts_then_hands_over_the_whole_run(store, tiny_models) -> None:
    """A long job's run that gave way: its first attempt's records, `_RESTART`, then the second attempt's whole run
    and `_DONE`. It holds its models (no turns), counts the time it gave way, and its last attempt did not."""
    prepared = _prepared(store, tiny_models, "baseline")
    cancel, job = threading.Event(), threading.Event()
    _GivesWayOnce.calls = 0
    stop = _GivesWayOnce(cancel, job=job, gives_way=True)
    worker = _Worker(prepared, source_for(prepared), stop, queue.SimpleQueue(), cancel, batched=True)
    items = _run_alone(worker)
    assert items.count(_RESTART) == 1 and items[-1] is _DONE and items.count(_DONE) == 1
    first, second = items[:items.index(_RESTART)], items[items.index(_RESTART) + 1:-1]
    assert sum(isinstance(item, _Raw) for item in first) == 2
    expected = LiveRun(prepared).run()
    assert sum(isinstance(item, _Raw) for item in second) == worker.generated_steps == len(expected.steps)
    assert worker.gave_way == 1 and not stop.gave_way and worker.error is None
    assert worker.turns is None


def test_the_worker_alone_reports_an_error_and_still_ends_with_done(store, tiny_models, monkeypatch) -> None:
    """`generate()` raising: the error is kept for the consumer to re-raise, and `_DONE` still ends the queue."""
    prepared = _prepared(store, tiny_models, "baseline")

    def broken(**kwargs: Any) -> None:
        raise RuntimeError("generate broke")

    monkeypatch.setattr(prepared.target.model, "generate", broken)
    cancel = threading.Event()
    worker = _Worker(prepared, source_for(prepared), _Stop(cancel), queue.SimpleQueue(), cancel, batched=True)
    items = _run_alone(worker)
    assert items[-1] is _DONE and items.count(_DONE) == 1 and _RESTART not in items
    assert isinstance(worker.error, RuntimeError) and str(worker.error) == "generate broke"
    assert worker.generated_steps == 0 and worker.gave_way == 0
