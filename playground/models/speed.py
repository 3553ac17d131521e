"""`auto`'s measurement on a CPU with native bfloat16: plain greedy decoding of the bundled model timed in float32 and
in bfloat16, once per machine and conversion, kept with the conversion (`cache.keep_speed`) and read back by
`hardware.kept_measurement` for every later run and page.

Why measure: AVX512-BF16 or AMX-BF16 on a CPU makes bfloat16 matmuls native, yet on some such machines bfloat16
decodes no faster than float32 (19.6 vs 18.6 tokens/s, measured), and then costs float32's agreement with plain
decoding for nothing. The rule that reads the figures is pure (`precision.measured_choice`).

Nobody waits for it: until it is kept, `auto` runs float32 (exact, so safe to choose unmeasured; the precision note
says so), and the server measures after its start-up load, in the background, yielding to runs (`busy`): it starts
only once no run has gone for `IDLE_BEFORE_S`, waits before each load and timed decode while one goes, and a decode a
run interrupts stops at its next token and is timed again later (a run's cores would have slowed it).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

from ..i18n import Message
from ..precision import SpeedMeasurement, precision_for
from .cache import keep_speed, one_process_at_a_time
from .catalogue import bundled_entry
from .gguf_convert import ensure_converted
from .hardware import SPEED_MODEL, _cpu_bf16_flags, host_device, kept_measurement, machine_identity
from .loaded import Progress, _no_progress
from .loading import load_model

SPEED_PROMPT = "The capital of France is"
SPEED_TOKENS = 16  # new tokens per timed decode: a few seconds for both precisions on two cores
SPEED_ROUNDS = 3  # timed decodes per precision, interleaved; the fastest of each counts (others' load only slows)
IDLE_BEFORE_S = 1.0  # how long no run must have gone before the measurement starts (a run asked at once goes first)
_IDLE_POLL_S = 0.1  # how often a yielding measurement looks whether runs are still going (a look costs microseconds)
_measuring = threading.Lock()
Busy = Callable[[], bool]  # whether a run waits or runs now (`engine.runs_going`): the measurement yields to it


def _never_busy() -> bool:
    return False


def _wait_until_idle(busy: Busy, idle_s: float = 0.0) -> None:
    """Return once `busy()` has said no for `idle_s` seconds on end (at once where it says no and `idle_s` is 0)."""
    quiet_since: float | None = None
    while True:
        if busy():
            quiet_since = None
        else:
            now = time.monotonic()
            quiet_since = now if quiet_since is None else quiet_since
            if now - quiet_since >= idle_s:
                return
        time.sleep(_IDLE_POLL_S)


def machine_busy() -> bool:
    """Whether other work was using the cores (load average over the last minute above their count)."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average (Windows): nothing to go by
        return False
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return load > cores


def _decode_s(loaded: Any, input_ids: Any, new_tokens: int, busy: Busy = _never_busy) -> float:
    """Seconds one plain greedy `generate()` of exactly `new_tokens` tokens takes, begun once no run goes and begun
    again whenever one starts meanwhile (the decode stops at its next token: the run's wait is one token's)."""
    import torch
    from .transformers_once import StoppingCriteria, StoppingCriteriaList

    class _RunStarted(StoppingCriteria):
        def __init__(self) -> None:
            self.stopped = False

        def __call__(self, ids: Any, scores: Any, **kwargs: Any) -> Any:
            self.stopped = self.stopped or busy()
            return torch.full((ids.shape[0],), self.stopped, dtype=torch.bool, device=ids.device)

    while True:
        _wait_until_idle(busy)
        run_started = _RunStarted()
        with torch.inference_mode():
            started = time.perf_counter()
            loaded.model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                                  max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                  pad_token_id=loaded.tokenizer.eos_token_id,
                                  stopping_criteria=StoppingCriteriaList([run_started]))
            seconds = time.perf_counter() - started
        if not run_started.stopped:
            return seconds


def measure_speed(spec: str = SPEED_MODEL, new_tokens: int = SPEED_TOKENS, rounds: int = SPEED_ROUNDS,
                  progress: Progress | None = None, busy: Busy = _never_busy) -> SpeedMeasurement:
    """Plain greedy decoding's tokens per second in float32 and in bfloat16 on this CPU: both loaded, each warmed up,
    then `rounds` timed decodes of `new_tokens` tokens taken in turn; the fastest of each precision counts. Each load
    and decode waits while `busy()` (a run goes), and a decode a run interrupts is timed again (`_decode_s`)."""
    report = progress or _no_progress
    models = {}
    for dtype in ("float32", "bfloat16"):
        _wait_until_idle(busy)
        models[dtype] = load_model(spec, precision_for(dtype, "cpu"), report)
    input_ids = models["float32"].tokenizer(SPEED_PROMPT, return_tensors="pt").input_ids
    for loaded in models.values():
        _decode_s(loaded, input_ids, 2, busy)
    best = {dtype: float("inf") for dtype in models}
    for _ in range(rounds):
        for dtype, loaded in models.items():
            best[dtype] = min(best[dtype], _decode_s(loaded, input_ids, new_tokens, busy))
    return SpeedMeasurement(float32_tps=round(new_tokens / best["float32"], 2),
                            bfloat16_tps=round(new_tokens / best["bfloat16"], 2), new_tokens=new_tokens, model=spec)


def measurement_wanted() -> bool:
    """Whether `auto` waits for a measurement on this host: a CPU with native bfloat16 and none kept yet (a file read)."""
    return host_device() == "cpu" and bool(_cpu_bf16_flags()) and kept_measurement() is None


def ensure_measured(progress: Progress | None = None, busy: Busy | None = None) -> SpeedMeasurement | None:
    """This machine's kept measurement, made now if there is none (once: one thread and one process at a time, the
    others waiting for it); None where `auto` needs none (no native bfloat16 on the CPU, or not a CPU host).
    With `busy` (the server's background measurement) it yields to runs: it begins once none has gone for
    `IDLE_BEFORE_S`, and each of its loads and timed decodes waits while one goes."""
    if host_device() != "cpu" or not _cpu_bf16_flags():
        return None
    kept = kept_measurement()
    if kept is not None:
        return kept
    if busy is not None:
        _wait_until_idle(busy, IDLE_BEFORE_S)
    report = progress or _no_progress
    directory = ensure_converted(bundled_entry(SPEED_MODEL), report)
    with _measuring, one_process_at_a_time(_speed_work(directory), f"{directory.name} (speed)", report) as report:
        kept = kept_measurement()  # another process may have measured meanwhile
        if kept is not None:
            return kept
        report(Message.keyed("load.measuring_precision"))
        # Kept whatever the machine's load: measuring again in every process of a busy machine (a test suite, a
        # Space's restarts) would cost each of them a minute. Each precision's fastest round counts, which others'
        # work only slows, and the note shows the figures `auto` decided by.
        measured = measure_speed(progress=report, busy=busy or _never_busy)
        keep_speed(directory, machine_identity(), dataclasses.asdict(measured))
    return measured


def _speed_work(directory: Path) -> Path:
    """The name the measurement's cross-process lock goes by (beside the conversion's)."""
    return directory.with_name(f"{directory.name}.speed")
