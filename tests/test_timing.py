"""Timings that add up: setup + Σ(draft + verify + other) = elapsed, for every method, on real tiny runs.

A behaviour invariant of the instrumentation (the phases tile the `generate()` call), not a speed
threshold: no figure here depends on how fast the machine is.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from playground.engine import LiveRun, RunRequest, prepare
from playground.trace import Trace, check_invariants
from test_methods import PROMPT, models  # noqa: F401  (the tiny checkpoints of every method, as a fixture)

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.models]  # models built: not in the model-free tier

RUNS: dict[str, dict[str, Any]] = {
    "baseline": dict(target="target"),
    "speculative": dict(target="target", assistant="noisy", params={"num_assistant_tokens": 3}),
    "speculative-sampling": dict(target="target", assistant="noisy", params={"num_assistant_tokens": 3},
                                 sample=True, seed=3),
    "prompt_lookup": dict(target="target", params={"prompt_lookup_num_tokens": 3}),
    "early_exit": dict(target="target", params={"assistant_early_exit": 2, "num_assistant_tokens": 3}),
    "mtp": dict(target="deepseek", max_new_tokens=8),
    "mtp_drafter": dict(target="gemma4", assistant="gemma4_assistant", params={"num_assistant_tokens": 3}),
    "universal": dict(target="target", assistant="other_tok", params={"num_assistant_tokens": 3}),
    "universal-sampling": dict(target="target", assistant="other_tok", params={"num_assistant_tokens": 3},
                               sample=True, seed=1),
}


def _run(store, models, name: str, live: bool = False) -> Trace:
    """A run of RUNS[name]: `LiveRun.run()`, or with `live` its steps taken as they come (the page's way)."""
    kw = dict(RUNS[name])
    method = name.split("-")[0]
    kw["target"] = models[kw["target"]]
    if "assistant" in kw:
        kw["assistant"] = models[kw["assistant"]]
    kw.setdefault("max_new_tokens", 12)
    run = LiveRun(prepare(RunRequest(prompt=PROMPT, method=method, dtype="float32", **kw), store))
    if live:
        for _ in run:
            pass
        trace = run.trace
    else:
        trace = run.run()
    check_invariants(trace)
    return trace


@pytest.mark.parametrize("name", list(RUNS))
def test_phases_add_up_to_the_elapsed_time(store, models, name) -> None:  # noqa: F811
    trace = _run(store, models, name)
    steps, summary = trace.steps, trace.summary
    assert steps and trace.setup_ms > 0, "generate() does some work before its first step"
    assert all(s.verify_ms > 0 and s.other_ms > 0 for s in steps), "every step has a verify and an other phase"
    assert all(s.draft_ms > 0 for s in steps) == (trace.method != "baseline")
    elapsed_ms = summary.elapsed_s * 1000
    phases = trace.setup_ms + sum(s.draft_ms + s.verify_ms + s.other_ms for s in steps)
    assert phases == pytest.approx(elapsed_ms, rel=0.02)
    assert summary.setup_ms == trace.setup_ms and summary.other_ms == pytest.approx(sum(s.other_ms for s in steps))
    assert Trace.from_json(trace.to_json()) == trace


def test_a_consumer_far_behind_still_gets_q_and_p(store, models, monkeypatch) -> None:  # noqa: F811
    """Past MAX_PENDING_LOGITS queued items the worker converts logits itself (memory stays bounded): a run whose
    steps are taken as they come (a held run hands over in batches and digests past its own budget instead)."""
    from playground.engine import distributions, recorder

    usual = _run(store, models, "speculative")
    monkeypatch.setattr(recorder, "MAX_PENDING_LOGITS", -1)  # always "behind": every step takes that path
    digested_by_worker = []
    real_digest = distributions._digest

    def digest(raw, *args):
        digested_by_worker.append(threading.current_thread().name == "playground-generate")
        real_digest(raw, *args)

    monkeypatch.setattr(distributions, "_digest", digest)
    trace = _run(store, models, "speculative", live=True)
    assert digested_by_worker and all(digested_by_worker)
    assert [p for s in trace.steps for p in s.p or []] == pytest.approx([p for s in usual.steps for p in s.p or []])
    drafting = [s for s in trace.steps if s.drafted]
    assert drafting and all(s.q is not None and s.p is not None and len(s.p) == len(s.drafted) for s in drafting)
    phases = trace.setup_ms + sum(s.time_ms for s in trace.steps)
    assert phases == pytest.approx(trace.summary.elapsed_s * 1000, rel=0.02)
