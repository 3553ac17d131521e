"""`auto`'s precision decided by a measurement on this machine, and presets that keep their precision promises.

The rule is pure (`precision.auto_reason`, `measured_choice`): fed by hand here, so it is tested on any CPU. The kept
measurement is read back from the cache, never measured again (`models.hardware.kept_measurement`,
`models.speed.ensure_measured`). The note names the CPU's features as a list in the page's language, for every
combination of the features (issue 38: an English " and " on a machine with both).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any

import pytest
from test_i18n_no_english import english_words

from playground import i18n, models
from playground.models import cache, hardware, speed
from playground.precision import BF16_FASTER_BY, SpeedMeasurement, auto_reason, measured_choice, precision_for
from playground.presets import PRESETS, STAND_INS

FLAGS = ("AVX512-BF16", "AMX-BF16")
FASTER = SpeedMeasurement(float32_tps=10.0, bfloat16_tps=19.0, new_tokens=16, model="bundled/gemma-3-270m")
NO_FASTER = SpeedMeasurement(float32_tps=18.6, bfloat16_tps=19.6, new_tokens=16, model="bundled/gemma-3-270m")


def test_bfloat16_only_where_measured_faster() -> None:
    assert measured_choice(FASTER) == ("bfloat16", "bfloat16: measured 1.9× faster than float32 on this CPU "
                                                   "(19.0 vs 10.0 tokens/s)")
    dtype, reason = measured_choice(NO_FASTER)  # the machine: AMX and AVX512-BF16, no faster
    assert (dtype, reason) == ("float32", "float32: bfloat16 measured no faster here (19.6 vs 18.6 tokens/s: "
                                          "1.1×, below the 1.2× auto asks for)")
    edge = SpeedMeasurement(10.0, 10.0 * BF16_FASTER_BY, 16, "m")
    assert measured_choice(edge)[0] == "bfloat16"
    assert measured_choice(dataclasses.replace(edge, bfloat16_tps=10.0 * BF16_FASTER_BY - 0.01))[0] == "float32"
    assert measured_choice(SpeedMeasurement(0.0, 5.0, 16, "m"))[0] == "float32"  # nothing measured in float32


def test_auto_on_a_cpu_follows_the_features_then_the_measurement() -> None:
    # No native bfloat16: float32 whatever a measurement says (emulated bfloat16 is slower).
    assert precision_for("auto", "cpu", (), measured=FASTER).dtype == "float32"
    # Native, not measured yet: float32, saying so.
    unmeasured = precision_for("auto", "cpu", FLAGS)
    assert (unmeasured.dtype, str(unmeasured.reason)) == (
        "float32", "float32: exact, so auto runs it until bfloat16 (the CPU has AVX512-BF16 and AMX-BF16) is measured "
                   "against float32 on this machine; that measurement runs in the background while no run is going")
    assert precision_for("auto", "cpu", FLAGS, measured=FASTER).dtype == "bfloat16"
    assert precision_for("auto", "cpu", FLAGS, measured=NO_FASTER).dtype == "float32"
    # A GPU's rule does not read the CPU's measurement; an explicit choice is taken as asked.
    assert precision_for("auto", "cuda", FLAGS, gpu_bf16=True, measured=NO_FASTER).dtype == "bfloat16"
    assert precision_for("bfloat16", "cpu", FLAGS, measured=NO_FASTER).dtype == "bfloat16"


@pytest.mark.parametrize("lang", list(i18n.LANGUAGES))
@pytest.mark.parametrize("flags", [combo for n in range(len(FLAGS) + 1) for combo in itertools.permutations(FLAGS, n)])
@pytest.mark.parametrize("measured", [None, FASTER, NO_FASTER], ids=["unmeasured", "faster", "no_faster"])
def test_the_note_is_in_the_pages_language_for_any_cpu(lang: str, flags: tuple[str, ...],
                                                       measured: SpeedMeasurement | None) -> None:
    """Every combination of features, measured or not: the note is the language's own sentence, the features joined
    by its CLDR list pattern, and no English word on a Russian or Arabic page."""
    dtype, reason = auto_reason("cpu", flags, measured=measured)
    note = i18n.localize(reason, lang)
    if flags and measured is None:
        assert i18n.list_of(flags, lang) in note
    if lang != "en":
        assert not english_words(note), note
        assert " and " not in note and " or " not in note
    for flag in flags if measured is None else ():
        assert flag in note
    if measured is not None and flags:
        assert i18n.number(measured.bfloat16_tps, lang, ".1f") in note
        assert i18n.number(measured.float32_tps, lang, ".1f") in note


def test_lists_follow_cldr() -> None:
    assert i18n.list_of(FLAGS, "en") == "AVX512-BF16 and AMX-BF16"
    assert i18n.list_of(FLAGS, "ru") == "AVX512-BF16 и AMX-BF16"
    assert i18n.list_of(FLAGS, "ar") == "AVX512-BF16 وAMX-BF16"
    assert i18n.list_of(FLAGS[:1], "ar") == "AVX512-BF16"


# --------------------------------------------------------------------------- the kept measurement


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """An empty model cache with a conversion marker for the measured model (no weights: nothing loads here)."""
    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path))
    directory = cache.converted_dir(models.bundled_entry(hardware.SPEED_MODEL).key)
    directory.mkdir(parents=True)
    (directory / "playground.json").write_text(json.dumps({"format": 1, "gguf_sha256": "abc", "converted": "t1"}))
    return directory


def test_a_kept_measurement_is_read_back_not_measured_again(cache_dir) -> None:
    from conftest import BUNDLED_LOADS

    assert hardware.kept_measurement() is None
    # Figures no real measurement gives, so what comes back can only be what was kept.
    kept = SpeedMeasurement(float32_tps=1.25, bfloat16_tps=99.5, new_tokens=16, model=hardware.SPEED_MODEL)
    cache.keep_speed(cache_dir, hardware.machine_identity(), dataclasses.asdict(kept))
    assert hardware.kept_measurement() == kept
    loads = len(BUNDLED_LOADS)
    if hardware._cpu_bf16_flags() and hardware.host_device() == "cpu":
        assert speed.ensure_measured() == kept  # read back: no model loaded, no conversion
        assert models.resolve_precision("auto", "cpu").dtype == "bfloat16"
        assert "99.5" in models.host_precision_note()
    else:
        assert speed.ensure_measured() is None  # nothing for auto to decide by on this host
        assert models.resolve_precision("auto", "cpu").dtype == "float32"
    assert len(BUNDLED_LOADS) == loads


def test_a_measurement_made_is_kept_for_the_next_process(cache_dir, monkeypatch) -> None:
    """Made once, whatever the machine's load, and read back from the file after (no second measurement)."""
    if not hardware._cpu_bf16_flags() or hardware.host_device() != "cpu":
        pytest.skip("auto measures only on a CPU with native bfloat16")
    made = SpeedMeasurement(float32_tps=2.0, bfloat16_tps=1.0, new_tokens=16, model=hardware.SPEED_MODEL)
    calls: list[int] = []
    monkeypatch.setattr(speed, "measure_speed", lambda **_: calls.append(1) or made)  # the bench times the real one
    monkeypatch.setattr(speed, "ensure_converted", lambda entry, report: cache_dir)
    assert speed.ensure_measured() == made and cache.speed_file(cache_dir).exists()
    assert hardware.kept_measurement() == made  # read back from the file
    assert speed.ensure_measured() == made and calls == [1]
    assert models.resolve_precision("auto", "cpu").dtype == "float32"  # bfloat16 measured slower: not picked


def test_a_measurement_from_another_machine_or_conversion_is_not_trusted(cache_dir) -> None:
    kept = dataclasses.asdict(FASTER)
    other = {**hardware.machine_identity(), "cpu": "another CPU"}
    cache.keep_speed(cache_dir, other, kept)
    assert hardware.kept_measurement() is None
    cache.keep_speed(cache_dir, hardware.machine_identity(), kept)
    assert hardware.kept_measurement() == FASTER
    (cache_dir / "playground.json").write_text(json.dumps({"format": 1, "gguf_sha256": "abc", "converted": "t2"}))
    assert hardware.kept_measurement() is None  # converted again since: measured again
    cache.speed_file(cache_dir).write_text("not json")
    assert hardware.kept_measurement() is None


@pytest.mark.parametrize(("omp", "threads"), [(None, None), ("1", 1), ("3", 3), ("2,1", 2), ("0", None), ("x", None)])
def test_the_identity_names_the_threads_torch_runs(monkeypatch, omp: str | None, threads: int | None) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    if omp is not None:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    assert hardware.machine_identity()["threads"] == (threads or hardware.machine_identity()["cores"])


def test_a_measurement_made_with_other_threads_is_not_trusted(cache_dir, monkeypatch) -> None:
    """A test worker's one thread (tests/conftest.py) or a Space's OMP_NUM_THREADS decodes at another ratio: measured
    again under the threads that will run."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cache.keep_speed(cache_dir, hardware.machine_identity(), dataclasses.asdict(FASTER))
    assert hardware.kept_measurement() == FASTER
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert hardware.kept_measurement() is None
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert (hardware.kept_measurement() == FASTER) == (hardware.machine_identity()["cores"] == 1)


# --------------------------------------------------------------------------- nobody waits for the measurement (issue 44)


@pytest.fixture
def native_bf16(monkeypatch):
    """This host taken for a CPU with native bfloat16 (the rule under test; the measurement itself is real or absent)."""
    for module in (hardware, speed):
        monkeypatch.setattr(module, "_cpu_bf16_flags", lambda: ("AVX512-BF16",))
    monkeypatch.setattr(hardware, "host_device", lambda: "cpu")
    monkeypatch.setattr(speed, "host_device", lambda: "cpu")


def test_the_ahead_conversion_never_measures(cache_dir, native_bf16, monkeypatch) -> None:
    """`python app.py`'s second process converts and keeps auto's copy as auto stands now: with no measurement kept it
    is told float32 (so it measures nothing while the first run goes), and a missing measurement alone starts none."""
    from playground.models import gguf_convert

    started: list[list[str]] = []
    monkeypatch.setattr(gguf_convert.subprocess, "Popen", lambda command, **_: started.append(command) or "process")
    monkeypatch.setattr(gguf_convert, "host_device", lambda: "cpu")
    (cache_dir / "playground.json").unlink()  # not converted yet
    assert gguf_convert.convert_ahead(hardware.SPEED_MODEL) == "process"
    assert started[0][-4:] == [hardware.SPEED_MODEL, "--dtype", "float32", "--quiet"]
    entry = models.bundled_entry(hardware.SPEED_MODEL)
    assert entry.gguf is not None
    (cache_dir / "playground.json").write_text(json.dumps({"format": 1, "gguf_sha256": entry.gguf.sha256}))
    assert speed.measurement_wanted()
    assert gguf_convert.convert_ahead(hardware.SPEED_MODEL) is None and len(started) == 1


def _forwards_in(thread_name: str) -> tuple[list[int], Any]:
    """A count of the whole model's forward passes (one per token) made in the thread named `thread_name` (a global
    torch hook; the model that generates, not its inner base model)."""
    import threading

    import torch
    from transformers import GenerationMixin

    count = [0]

    def hook(module, _args, _output) -> None:
        if isinstance(module, GenerationMixin) and threading.current_thread().name == thread_name:
            count[0] += 1

    return count, torch.nn.modules.module.register_module_forward_hook(hook)


def test_the_measurement_yields_to_a_visitors_run(tiny_models, one_torch_thread) -> None:
    """Work nobody waits for: the measurement loads and decodes nothing while a visitor's run holds its turn (the
    engine's own count, `runs_going`), and a run that starts during a timed decode stops it at the next token; the
    decode is timed again once the run is over."""
    import threading
    import time

    from playground.engine import runs_going, turns

    visitor = turns._SCHEDULER.turn(None)
    visitor.__enter__()  # a visitor's run waits for its models or runs
    count, handle = _forwards_in("measuring")
    result: list[SpeedMeasurement] = []
    second_visitor: dict[str, Any] = {}
    leave = threading.Event()

    def visit() -> None:  # a second visitor arriving in the middle of a timed decode
        with turns._SCHEDULER.turn(None):
            second_visitor["forwards_then"] = count[0]
            leave.wait(30)

    def arrive_mid_decode(module, _args, _output) -> None:
        # The sixth forward: after the warm-ups' 2 + 2, the second token of the first timed decode.
        if threading.current_thread().name == "measuring" and count[0] == 6 and "thread" not in second_visitor:
            second_visitor["thread"] = threading.Thread(target=visit)
            second_visitor["thread"].start()
            while not runs_going() or "forwards_then" not in second_visitor:
                time.sleep(0.001)

    import torch

    busy_looks = [0]  # the measurement's looks that found a run going: it is waiting, not working, while they grow

    def busy() -> bool:
        going = runs_going()
        busy_looks[0] += going
        return going

    def waited(looks: int) -> None:  # the window passed: the measurement looked `looks` more times and found a run
        deadline, until = time.monotonic() + 60, busy_looks[0] + looks
        while busy_looks[0] < until and time.monotonic() < deadline:
            time.sleep(0.01)
        assert busy_looks[0] >= until, "the measurement never looked whether a run was going"

    arrival = torch.nn.modules.module.register_module_forward_hook(arrive_mid_decode)
    measuring = threading.Thread(name="measuring", target=lambda: result.append(
        speed.measure_speed(tiny_models["target"], new_tokens=8, rounds=2, busy=busy)))
    try:
        measuring.start()
        waited(10)  # about as long as the 1 s this waited before, on the measurement's own 0.1 s looks
        assert measuring.is_alive() and count[0] == 0  # nothing loaded or decoded while the visitor's run goes
        visitor.__exit__(None, None, None)
        deadline = time.monotonic() + 60
        while "forwards_then" not in second_visitor and time.monotonic() < deadline:
            time.sleep(0.01)
        assert second_visitor.get("forwards_then") == 6  # the second visitor came during the first timed decode
        waited(5)
        assert count[0] == 6 and measuring.is_alive()  # stopped at that token, waiting
        leave.set()
        measuring.join(60)
    finally:
        leave.set()
        handle.remove()
        arrival.remove()
    assert not measuring.is_alive() and result
    # The warm-ups' 2 + 2 forwards, the interrupted decode's 2, then 2 rounds of 8 per precision: the interrupted
    # decode was done again whole.
    assert count[0] == 2 + 2 + 2 + 2 * 2 * 8
    assert result[0].float32_tps > 0 and result[0].bfloat16_tps > 0 and result[0].new_tokens == 8


@pytest.mark.bundled
def test_the_first_run_does_not_wait_for_the_measurement(tmp_path, monkeypatch, native_bf16) -> None:
    """A cold start's first run (no measurement kept): it runs at once in float32, its trace saying so and why, with
    no measurement made for it; once the measurement is kept, `auto` follows it."""
    from playground.engine import LiveRun, prepare
    from playground.models import ModelStore
    from playground.request import new_request

    shared = models.ensure_converted(models.CATALOGUE[hardware.SPEED_MODEL])
    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path))
    directory = cache.converted_dir(models.bundled_entry(hardware.SPEED_MODEL).key)
    directory.mkdir(parents=True)
    for path in shared.iterdir():  # the conversion, without the measurement kept with it
        if path.name == "playground.json":
            (directory / path.name).write_bytes(path.read_bytes())
        elif path.name != cache.speed_file(shared).name:
            (directory / path.name).symlink_to(path)
    assert hardware.kept_measurement() is None

    def no_measuring(**_: object) -> SpeedMeasurement:
        raise AssertionError("a run waited for the measurement")

    monkeypatch.setattr(speed, "measure_speed", no_measuring)
    request = new_request("The capital of France is", target=hardware.SPEED_MODEL, method="baseline",
                          max_new_tokens=3, dtype="auto")
    trace = LiveRun(prepare(request, ModelStore())).run()
    assert trace.env["dtype"] == "float32" and len(trace.output_ids) == 3
    assert str(trace.env["precision"]) == str(auto_reason("cpu", ("AVX512-BF16",))[1])
    assert "exact" in str(trace.env["precision"]) and "background" in str(trace.env["precision"])
    assert not cache.speed_file(directory).exists()
    cache.keep_speed(directory, hardware.machine_identity(), dataclasses.asdict(FASTER))
    after = models.resolve_precision("auto", "cpu")
    assert (after.dtype, str(after.reason)) == ("bfloat16", str(measured_choice(FASTER)[1]))


# --------------------------------------------------------------------------- presets keep their promises


def test_a_preset_that_promises_float32_runs_in_float32() -> None:
    """A preset whose words (its note, or its stand-in's) promise what float32 does sets float32, and its request
    resolves to float32 on any machine; a caller's explicit choice stands; presets that promise nothing of a
    precision leave it to auto."""
    promising = {name for name, preset in PRESETS.items() if "float32" in preset.note_in("en")}
    assert "speculative-greedy-offline" in promising
    for name, preset in PRESETS.items():
        request = preset.request()
        if name in promising:
            assert preset.dtype == request.dtype == "float32", name
            assert models.resolve_precision(request.dtype, "cpu").dtype == "float32"
            assert preset.request(dtype="auto").dtype == "float32"
            assert preset.request(dtype="bfloat16").dtype == "bfloat16"
        else:
            assert preset.dtype == request.dtype == "auto", name
    assert {s.dtype for s in STAND_INS.values() if "float32" not in s.shows} == {"auto"}


def test_the_page_shows_the_presets_precision_when_left_to_auto() -> None:
    from playground.app import preset_picker

    assert preset_picker.precision_of("speculative-greedy-offline", "auto") == {"__type__": "update",
                                                                               "value": "float32"}
    skip = preset_picker.precision_of("prompt-lookup-greedy-offline", "auto")
    assert preset_picker.precision_of("speculative-greedy-offline", "bfloat16") == skip != {"__type__": "update",
                                                                                           "value": "float32"}
