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
        "float32", "float32: bfloat16 (the CPU has AVX512-BF16 and AMX-BF16) is not yet measured against float32 "
                   "on this machine")
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
    assert {s.dtype for m, s in STAND_INS.items() if m != "speculative"} == {"auto"}


def test_the_page_shows_the_presets_precision_when_left_to_auto() -> None:
    from playground.app import preset_picker

    assert preset_picker.precision_of("speculative-greedy-offline", "auto") == {"__type__": "update",
                                                                               "value": "float32"}
    skip = preset_picker.precision_of("prompt-lookup-greedy-offline", "auto")
    assert preset_picker.precision_of("speculative-greedy-offline", "bfloat16") == skip != {"__type__": "update",
                                                                                           "value": "float32"}


@pytest.mark.bundled
def test_the_speculative_stand_in_accepts_every_draft_in_float32() -> None:
    """The stand-in's own promise, run: Gemma drafting for itself in float32, greedy, accepts every draft."""
    from playground.engine import LiveRun, prepare

    trace = LiveRun(prepare(PRESETS["speculative-greedy-offline"].request())).run()
    assert trace.env["dtype"] == "float32"
    assert trace.summary.drafted > 0
    assert trace.summary.accepted == trace.summary.drafted - sum(len(s.unverified) for s in trace.steps)
    assert not any(step.rejected for step in trace.steps)
