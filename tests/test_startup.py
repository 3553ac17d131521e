"""Cold start: the GGUF is parsed once per conversion, the page is served before torch is imported.

A tiny random Llama GGUF written with the gguf package's own writer stands in for the bundled
files (same kinds of metadata arrays, milliseconds to convert). Timings live in tests/measure/startup.py.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers import modeling_gguf_pytorch_utils as gguf_loader
from transformers.integrations.gguf import reader as lean_reader

from playground import i18n, models
from tiny import save_tiny_llama_gguf

pytestmark = pytest.mark.models  # its tests build or load models: the module stays out of the model-free tier

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_llama_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every metadata parse of a GGUF file (`GGUFReader._build_fields`, whichever reader class runs it)."""
    seen: list[str] = []
    real = gguf.GGUFReader._build_fields

    def counting(reader: gguf.GGUFReader, offs: int, count: int) -> int:
        seen.append(type(reader).__name__)
        return real(reader, offs, count)

    monkeypatch.setattr(gguf.GGUFReader, "_build_fields", counting)
    return seen


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every walk of Transformers' lean reader through a GGUF file's metadata (`reader._read_metadata`)."""
    seen: list[str] = []
    real = lean_reader._read_metadata

    def counting(blob: np.ndarray, gguf_path: str, *args: Any) -> Any:
        seen.append(gguf_path)
        return real(blob, gguf_path, *args)

    monkeypatch.setattr(lean_reader, "_read_metadata", counting)
    return seen


def test_bulk_array_reader_reads_what_gguf_reads(tiny_gguf: Path) -> None:
    """Same fields (offsets, parts, data indices, types) and tensors as the gguf package's reader."""
    ours, theirs = models.BulkArrayGGUFReader(tiny_gguf), gguf.GGUFReader(tiny_gguf)
    assert list(ours.fields) == list(theirs.fields)
    assert {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
            "tiny.flags"} <= set(ours.fields)
    for name, field in theirs.fields.items():
        mine = ours.fields[name]
        assert (mine.offset, mine.data, mine.types) == (field.offset, field.data, field.types), name
        assert len(mine.parts) == len(field.parts), name
        for a, b in zip(mine.parts, field.parts):
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), name
        assert mine.contents() == field.contents(), name
    assert ours.data_offset == theirs.data_offset
    assert [(t.name, t.tensor_type) for t in ours.tensors] == [(t.name, t.tensor_type) for t in theirs.tensors]
    assert all(np.array_equal(a.data, b.data) for a, b in zip(ours.tensors, theirs.tensors))


def test_conversion_parses_the_gguf_once(tiny_gguf: Path, tmp_path: Path, parses: list[str],
                                        walks: list[str]) -> None:
    """Plain Transformers parses the file for the config, the weights and the tokenizer (with gguf's reader and
    its own lean one); the conversion parses it once and still builds the same model and tokenizer."""
    plain_model = AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name, dtype=torch.float32)
    plain_tokenizer = AutoTokenizer.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name)
    assert len(parses) > 1 and len(walks) > 1  # the counters see Transformers' own reads
    parses.clear()
    walks.clear()

    models.convert_gguf(tiny_gguf, tmp_path / "out")

    assert parses == ["BulkArrayGGUFReader"] and walks == []
    assert gguf.GGUFReader is not None and gguf.GGUFReader.__name__ == "GGUFReader"  # patches undone
    assert gguf_loader.load_gguf_checkpoint.__module__ == gguf_loader.__name__
    assert gguf.get_tensor_name_map is gguf.tensor_mapping.get_tensor_name_map
    assert lean_reader.read_gguf_metadata.__module__ == lean_reader.__name__
    converted = AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype=torch.float32)
    expected = plain_model.state_dict()
    assert converted.state_dict().keys() == expected.keys()
    assert all(torch.equal(tensor, expected[name]) for name, tensor in converted.state_dict().items())
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert tokenizer.get_vocab() == plain_tokenizer.get_vocab()
    text = "red cat, blue moon"
    assert tokenizer(text).input_ids == plain_tokenizer(text).input_ids


STRING_ARRAY_CHOICES = [(), ("tokenizer.ggml.tokens",), ("tokenizer.ggml.tokens", "tokenizer.ggml.merges")]


def _typed(result: tuple[dict, tuple[str, ...]]) -> tuple[list[tuple[str, Any, type]], tuple[str, ...]]:
    """The metadata with each value's type beside it (1 == 1.0 == True in a plain comparison)."""
    metadata, names = result
    return [(key, value, type(value)) for key, value in metadata.items()], names


@pytest.mark.parametrize("vocab_size", [True, False], ids=["vocab_size_given", "vocab_size_from_the_tokens"])
def test_the_lean_readers_reads_are_answered_from_the_one_parse(
        tmp_path: Path, walks: list[str], vocab_size: bool) -> None:
    """Transformers' lean metadata reader (the config's, AutoTokenizer's and the tokenizer build's) gives inside
    the block what it reads from the file itself, through the module and the package, without reading it."""
    import transformers.integrations.gguf as lean_package
    from transformers.quantizers import quantizer_gguf

    path = save_tiny_llama_gguf(tmp_path / "tiny.gguf", vocab_size=vocab_size)
    real = lean_reader.read_gguf_metadata
    expected = {arrays: _typed(real(str(path), arrays)) for arrays in STRING_ARRAY_CHOICES}
    assert len(walks) == len(STRING_ARRAY_CHOICES)  # the counter sees the reader's own walks
    walks.clear()
    with models.gguf_read_once(path):
        for arrays in STRING_ARRAY_CHOICES:
            for holder in (lean_reader, lean_package, quantizer_gguf):
                assert _typed(holder.read_gguf_metadata(str(path), arrays)) == expected[arrays]
    assert walks == []
    assert all(holder.read_gguf_metadata is real for holder in (lean_reader, lean_package, quantizer_gguf))
    assert expected[()][0][[key for key, *_ in expected[()][0]].index("tokenizer.ggml.tokens")][1] > 256  # a count


@pytest.mark.parametrize("vocab_size", [True, False], ids=["vocab_size_given", "vocab_size_from_the_tokens"])
def test_the_metadata_reads_give_the_loaders_own_config_without_walking_the_vocabulary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vocab_size: bool) -> None:
    """The config and AutoTokenizer's metadata reads see the same config as Transformers' own read (its
    vocab_size taken from the token list where the file gives none, as Gemma 3's), and the vocabulary's
    values are not turned into Python one by one."""
    path = save_tiny_llama_gguf(tmp_path / "tiny.gguf", vocab_size=vocab_size)
    values: list[int] = []
    real_parse = gguf_loader._gguf_parse_value
    monkeypatch.setattr(gguf_loader, "_gguf_parse_value", lambda *args: values.append(1) or real_parse(*args))
    expected = gguf_loader.load_gguf_checkpoint(str(path))
    plain_values = len(values)
    values.clear()
    with models.gguf_read_once(path):
        first = gguf_loader.load_gguf_checkpoint(str(path))
        first["config"]["edited"] = True  # a caller edits its copy; the next caller gets the original
        second = gguf_loader.load_gguf_checkpoint(str(path))
    tokens = len(expected["tokenizer"]["tokens"])
    assert expected["config"]["vocab_size"] == tokens > 256
    assert second["config"] == expected["config"] and first["config"] == {**expected["config"], "edited": True}
    assert plain_values > 3 * tokens and len(values) < 100  # tokens, scores and token types: left alone


def test_copy_plain_is_a_deep_copy() -> None:
    original = {"config": {"ids": [1, 2], "rope": {"factor": 8.0}, "nested": [[1], {"x": "y"}], "none": None},
                "tokenizer": {"tokens": ["<s>", "▁a"], "scores": [0.0, -1.5], "flags": [True, False]}}
    before = copy.deepcopy(original)
    copied = models.copy_plain(original)
    assert copied == before
    copied["config"]["ids"].append(3)
    copied["config"]["rope"]["factor"] = 1.0
    copied["config"]["nested"][0].append(2)
    copied["config"]["nested"][1]["x"] = "z"
    copied["tokenizer"]["tokens"][0] = "<bos>"
    assert original == before


def test_conversion_says_how_far_it_is_and_how_long_is_left(tiny_gguf: Path, tmp_path: Path) -> None:
    messages: list[str] = []
    models.convert_gguf(tiny_gguf, tmp_path / "out", models.gguf_convert._ConversionProgress("Tiny", messages.append))
    assert all(m.startswith("Converting Tiny to safetensors") for m in messages)
    shares = [int(m.rsplit(": ", 1)[1].split("%")[0]) for m in messages]
    assert shares == sorted(shares) and shares[0] == 0
    assert any("dequantising weights (" in m for m in messages)
    assert any("building the tokenizer" in m for m in messages) and "saving safetensors" in messages[-1]
    assert "s left" in messages[-1]


def test_the_page_is_built_without_importing_torch() -> None:
    """The server answers (and shows the load's progress) while the start-up load imports torch."""
    code = ("import sys; from playground.app import page; page.build_ui(); "
            "print(sorted(m for m in ('torch', 'transformers', 'playground.engine') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            check=True)
    assert result.stdout.strip().splitlines()[-1] == "[]"


# The warm start's race (docs/startup.md): the first run imports the engine (and so Transformers) while the start-up
# load imports Transformers for its load. The second thread starts the moment the first has put Transformers in
# sys.modules, while its __init__ still runs (most of a second): on the code before models.transformers_once it got
# the module Transformers then swaps out, and `import_modeling` failed on it (`... has no attribute
# 'Gemma3ForCausalLM'`), as load_model's `from transformers import AutoConfig` did in the log.
RACE = """
import sys, threading, time, traceback
from playground import models
failures = []
def first_run():
    from playground.engine import prepare
def start_up_load():
    while "transformers" not in sys.modules:
        time.sleep(0.0005)
    try:
        models.loading.import_modeling(models.DEFAULT_TARGET)
    except Exception:
        failures.append(traceback.format_exc())
threads = [threading.Thread(target=start_up_load), threading.Thread(target=first_run)]
[thread.start() for thread in threads]
[thread.join() for thread in threads]
print("FAILED", *failures) if failures else print("imported")
"""


@pytest.mark.slow  # a fresh process importing torch and Transformers: seconds on two busy cores
def test_the_start_up_load_and_a_first_run_import_transformers_at_once() -> None:
    result = subprocess.run([sys.executable, "-c", RACE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "imported", result.stdout[-3000:]


def _waiting_on_an_event(thread: threading.Thread) -> bool:
    """Whether `thread` is inside `threading.Event.wait` now (blocked until the event is set)."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code is threading.Event.wait.__code__:
            return True
        frame = frame.f_back
    return False


def test_a_bundled_assistant_is_converted_in_the_background_after_the_start_up_load(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_gguf: Path) -> None:
    """Choosing a method that needs a bundled assistant converts it in the background once the target's
    load is done (a run that needs it then waits for that conversion instead of starting its own)."""
    from playground.app import generate_tab
    from playground.app import preload as preload_module

    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path))
    source = models.GgufSource(filename="tiny.gguf", sha256=models.gguf_convert._sha256(tiny_gguf), requirement="tiny",
                               module="tiny")
    entry = models.ModelEntry(key="bundled/tiny", label="Tiny", description="", source="bundled", gguf=source)
    monkeypatch.setitem(models.CATALOGUE, entry.key, entry)
    monkeypatch.setitem(preload_module.CATALOGUE, entry.key, entry)
    preload = preload_module.Preload()
    monkeypatch.setattr(preload_module, "PRELOAD", preload)

    generate_tab.on_method_change("universal", models.DEFAULT_TARGET, entry.key)
    assert not any(t.name == "playground-convert-assistant" for t in threading.enumerate())  # no start-up load

    preload.thread = threading.current_thread()  # a start-up load is running
    generate_tab.on_method_change("universal", models.DEFAULT_TARGET, entry.key)
    # The conversion's worker is seen waiting for the target's load (an event, not a fixed wait a slow machine makes
    # too short to show a worker that went on): nothing converted meanwhile.
    deadline = time.monotonic() + 120
    while not any(_waiting_on_an_event(t) for t in threading.enumerate() if t.name == "playground-convert-assistant"):
        assert time.monotonic() < deadline, "the conversion's worker never waited for the target's load"
        time.sleep(0.01)
    assert not models.cache._cache_is_valid(models.converted_dir(entry.key), source)  # waits for the target's load
    assert preload.background_message() == preload.message
    preload.done.set()
    worker = next(t for t in threading.enumerate() if t.name == "playground-convert-assistant")
    worker.join(120)
    assert models.cache._cache_is_valid(models.converted_dir(entry.key), source)
    assert preload.background_message() is None
    generate_tab.on_method_change("universal", models.DEFAULT_TARGET, entry.key)  # once only
    assert not any(t.name == "playground-convert-assistant" for t in threading.enumerate())


def test_the_start_up_status_says_what_it_does_and_for_how_long(monkeypatch: pytest.MonkeyPatch) -> None:
    from playground.app import preload as preload_module

    preload = preload_module.Preload()
    preload.thread, preload.started = threading.current_thread(), time.monotonic() - 12
    preload.message = "Converting Tiny to safetensors (one time only): dequantising weights (3/12 tensors): 56% done, about 9 s left"
    monkeypatch.setattr(preload_module, "PRELOAD", preload)
    status = preload_module.initial_status()
    assert "56% done, about 9 s left" in status and "12 s since start-up" in status and 'data-kind="running"' in status


# --------------------------------------------------------------------------- warm start: the tokenizer

TOKENIZER_TEXTS = [
    "The capital of France is", "", "   leading and trailing spaces   ", "tabs\tand\nnew\n\nlines\n\n\n",
    "مرحبا بالعالم، كيف حالك اليوم؟", "Привет, мир! Как дела? Ёлка, съешь же ещё этих булок.",
    "def f(x: int) -> int:\n    return x ** 2  # square\n\tif x: print(f'{x!r}')",
    "中文测试，日本語のテキスト、한국어 문장", "emoji 😀👩‍💻 and accents: naïve café",
    "<bos>special<eos> <start_of_turn>user\nhi<end_of_turn> <|im_start|>system\nhi<|im_end|> <pad><mask><unk>",
    "<unused3>[multimodal]</s><s>", "numbers 1234567890 3.14159 -42 1e-9",
]


def assert_same_tokenizer(ours: Any, theirs: Any) -> None:
    """Same ids, tokens and text back for every test text, same special tokens, template and backend."""
    for text in TOKENIZER_TEXTS:
        ids = theirs(text).input_ids
        assert ours(text).input_ids == ids, text
        assert ours(text, add_special_tokens=False).input_ids == theirs(text, add_special_tokens=False).input_ids
        assert ours.convert_ids_to_tokens(ids) == theirs.convert_ids_to_tokens(ids), text
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(ids, skip_special_tokens=skip)
    for name in ("special_tokens_map", "all_special_ids", "chat_template", "padding_side", "truncation_side",
                 "model_input_names", "model_max_length", "bos_token_id", "eos_token_id", "pad_token_id",
                 "unk_token_id", "clean_up_tokenization_spaces", "split_special_tokens"):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.added_tokens_decoder == theirs.added_tokens_decoder
    assert ours.get_vocab() == theirs.get_vocab()
    assert ours.backend_tokenizer.to_str() == theirs.backend_tokenizer.to_str()
    if theirs.chat_template:
        chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Привет! مرحبا"}]
        assert (ours.apply_chat_template(chat, add_generation_prompt=True)
                == theirs.apply_chat_template(chat, add_generation_prompt=True))


@pytest.mark.bundled
@pytest.mark.parametrize("key", [models.DEFAULT_TARGET, models.DEFAULT_UNIVERSAL_ASSISTANT])
def test_bundled_tokenizers_load_as_auto_tokenizer_loads_them(key: str) -> None:
    """The Rust-parsed tokenizer of a conversion is the tokenizer AutoTokenizer builds from the same folder
    (for Gemma, AutoTokenizer rebuilds the backend from the vocabulary and merges instead)."""
    directory = models.ensure_converted(models.CATALOGUE[key])
    assert_same_tokenizer(models.load_saved_tokenizer(directory), AutoTokenizer.from_pretrained(directory))
    # The catalogue's model_type (what `import_modeling` imports ahead) is the conversion's own.
    gguf_source = models.CATALOGUE[key].gguf
    assert gguf_source is not None
    assert gguf_source.model_type == json.loads((directory / "config.json").read_text())["model_type"]


def test_a_converted_gguf_tokenizer_loads_as_auto_tokenizer_loads_it(tiny_gguf: Path, tmp_path: Path) -> None:
    models.convert_gguf(tiny_gguf, tmp_path / "out")
    assert_same_tokenizer(models.load_saved_tokenizer(tmp_path / "out"), AutoTokenizer.from_pretrained(tmp_path / "out"))


def test_a_tokenizer_class_with_methods_of_its_own_goes_through_auto_tokenizer(tiny_gguf: Path, tmp_path: Path) -> None:
    """A class that changes more than how the backend is built (CodeLlama's infilling) keeps its own class."""
    from transformers import CodeLlamaTokenizer

    models.convert_gguf(tiny_gguf, tmp_path / "out")
    config_file = tmp_path / "out" / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "tokenizer_class": "CodeLlamaTokenizer"}))
    assert isinstance(models.load_saved_tokenizer(tmp_path / "out"), CodeLlamaTokenizer)


# --------------------------------------------------------------------------- warm start: weights in the loaded dtype


@pytest.fixture
def tiny_bundled(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_gguf: Path) -> models.ModelEntry:
    """The tiny GGUF as a bundled catalogue entry, converted into a cache of the test's own."""
    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path))
    source = models.GgufSource(filename="tiny.gguf", sha256=models.gguf_convert._sha256(tiny_gguf), requirement="tiny",
                               module="tiny")
    entry = models.ModelEntry(key="bundled/tiny", label="Tiny", description="", source="bundled", gguf=source)
    monkeypatch.setitem(models.CATALOGUE, entry.key, entry)
    models.ensure_converted(entry)
    return entry


def test_a_bfloat16_load_keeps_a_copy_equal_to_the_cast_and_loads_it(tiny_bundled: models.ModelEntry) -> None:
    directory = models.converted_dir(tiny_bundled.key)
    cast = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16)  # what every load did before

    messages: list[str] = []
    first = models.load_model(tiny_bundled.key, "bfloat16", messages.append)
    assert any("Keeping a bfloat16 copy" in m for m in messages)
    copy_dir = models.valid_dtype_copy(directory, "bfloat16")
    assert copy_dir == models.dtype_copy_dir(directory, "bfloat16")
    with safe_open(str(copy_dir / "model.safetensors"), framework="pt") as handle:
        kept = {name: handle.get_tensor(name) for name in handle.keys()}
    expected = cast.state_dict()
    assert kept and all(tensor.dtype == torch.bfloat16 and torch.equal(tensor, expected[name])
                        for name, tensor in kept.items())

    messages.clear()
    second = models.load_model(tiny_bundled.key, "bfloat16", messages.append)
    assert not any("Keeping" in m for m in messages)  # made once
    assert first.model.name_or_path == second.model.name_or_path == str(copy_dir)  # loaded from the copy
    assert second.model.state_dict().keys() == expected.keys()
    assert all(torch.equal(tensor, expected[name]) for name, tensor in second.model.state_dict().items())
    assert second.model.generation_config.to_dict() == cast.generation_config.to_dict()
    prompt = second.tokenizer("red cat, blue moon", return_tensors="pt")
    with torch.inference_mode():
        assert torch.equal(second.model.generate(**prompt, max_new_tokens=6, do_sample=False),
                           cast.generate(**prompt, max_new_tokens=6, do_sample=False))


def test_float32_loads_the_conversion_itself(tiny_bundled: models.ModelEntry) -> None:
    directory = models.converted_dir(tiny_bundled.key)
    loaded = models.load_model(tiny_bundled.key, "float32")
    assert loaded.model.name_or_path == str(directory)
    assert not any(path.name.startswith(directory.name + ".") for path in directory.parent.iterdir())


def test_a_copy_of_an_earlier_conversion_is_refused_and_made_again(tiny_bundled: models.ModelEntry) -> None:
    directory = models.converted_dir(tiny_bundled.key)
    copy_dir = models.write_dtype_copy(directory, "bfloat16")
    assert models.valid_dtype_copy(directory, "bfloat16") == copy_dir
    marker = json.loads((directory / "playground.json").read_text())
    (directory / "playground.json").write_text(json.dumps({**marker, "converted_at": "a later conversion"}))
    assert models.valid_dtype_copy(directory, "bfloat16") is None
    copied_at = (copy_dir / "model.safetensors").stat().st_mtime_ns
    loaded = models.load_model(tiny_bundled.key, "bfloat16")
    assert (copy_dir / "model.safetensors").stat().st_mtime_ns != copied_at  # made again, then loaded
    assert loaded.model.name_or_path == str(copy_dir)
    assert models.valid_dtype_copy(directory, "bfloat16") == copy_dir
    assert json.loads((copy_dir / "playground.json").read_text())["source"]["converted_at"] == "a later conversion"


def test_a_disk_that_takes_no_copy_loads_the_cast(tiny_bundled: models.ModelEntry, monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A full or read-only cache costs the copy, not the load."""
    import safetensors.torch

    def full_disk(*_args: object, **_kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", full_disk)
    directory = models.converted_dir(tiny_bundled.key)
    loaded = models.load_model(tiny_bundled.key, "bfloat16")
    assert loaded.model.name_or_path == str(directory) and loaded.dtype == torch.bfloat16
    assert models.valid_dtype_copy(directory, "bfloat16") is None
    assert "No space left on device" in caplog.text
    assert not any(path.name.startswith(f".{directory.name}.") for path in directory.parent.iterdir())


@pytest.mark.bundled
def test_the_bundled_gemma_copy_equals_its_cast() -> None:
    """The real thing: Gemma 3 270M's bfloat16 copy holds exactly what a bfloat16 load of its conversion casts."""
    directory = models.ensure_converted(models.CATALOGUE[models.DEFAULT_TARGET])
    copy_dir = models.ensure_dtype_copy(directory, "bfloat16")
    assert copy_dir is not None
    expected = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16).state_dict()
    with safe_open(str(copy_dir / "model.safetensors"), framework="pt") as handle:
        assert set(handle.keys()) <= set(expected)
        assert all(torch.equal(handle.get_tensor(name), expected[name]) for name in handle.keys())



# --------------------------------------------------------------------------- one conversion at a time, across processes

CONVERT_ELSEWHERE = """
import sys, time
from pathlib import Path
sys.path[:0] = sys.argv[1:3]  # the project and tests/ (the tiny model's `assemble`)
from playground import i18n, models
source = models.GgufSource(filename="tiny.gguf", sha256=sys.argv[3], requirement="tiny", module="tiny")
entry = models.ModelEntry(key="bundled/tiny", label="Tiny", description="", source="bundled", gguf=source)
models.CATALOGUE[entry.key] = entry
said = []

def progress(message):
    if not said:  # the lock is held and the first line published: tell the test, then keep it until the waiting
        said.append(message)  # process has relayed that line (it touches argv[4]), or 120 s
        print("converting:", message, flush=True)
        deadline = time.monotonic() + 120
        while not Path(sys.argv[4]).exists() and time.monotonic() < deadline:
            time.sleep(0.01)

models.ensure_converted(entry, progress)
print("converted", flush=True)
"""


def test_a_second_process_waits_for_a_conversion_under_way_and_shows_its_progress(
        tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server converts the default model in a second process while its page starts (`convert_ahead`): a load
    meanwhile (the start-up load, a click, a CLI run) waits for that conversion, reports its progress, and then
    loads what it wrote instead of converting the model again."""
    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path))
    source = models.GgufSource(filename="tiny.gguf", sha256=models.gguf_convert._sha256(tiny_gguf), requirement="tiny",
                               module="tiny")
    entry = models.ModelEntry(key="bundled/tiny", label="Tiny", description="", source="bundled", gguf=source)
    monkeypatch.setitem(models.CATALOGUE, entry.key, entry)
    relayed = tmp_path / "relayed"  # the other process holds its lock until this process has relayed its first line
    other = subprocess.Popen([sys.executable, "-c", CONVERT_ELSEWHERE, str(ROOT), str(ROOT / "tests"), source.sha256,
                              str(relayed)],
                             env={**os.environ, "PLAYGROUND_CACHE_DIR": str(tmp_path)}, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None
        first_line = other.stdout.readline()
        assert first_line.startswith("converting: Assembling tiny.gguf"), first_line

        def no_conversion_here(*_args: object) -> None:
            raise AssertionError("converted again in the waiting process")

        monkeypatch.setattr(models.gguf_convert, "_convert_into", no_conversion_here)
        messages: list[str] = []

        def relay(message: str) -> None:
            messages.append(message)
            relayed.touch()

        directory = models.ensure_converted(entry, relay)
        assert other.wait(timeout=120) == 0 and other.stdout.read().strip() == "converted"
    finally:
        other.kill()
    assert messages and messages[0] == first_line.removeprefix("converting: ").strip()  # its words, relayed
    assert isinstance(messages[0], i18n.Message) and messages[0].key == "load.assembling"  # still translatable
    assert models.cache._cache_is_valid(directory, source)
    assert not models.cache._lock_file(directory, "progress.json").exists()


def test_a_process_that_finds_another_holding_the_lock_says_it_waits(tmp_path: Path) -> None:
    import fcntl

    work = tmp_path / "converted" / "bundled--tiny"
    lock = models.cache._lock_file(work, "lock")
    messages: list[str] = []
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        released = threading.Timer(1.0, fcntl.flock, (held, fcntl.LOCK_UN))
        released.start()
        with models.one_process_at_a_time(work, "Tiny", messages.append) as report:
            report(i18n.Message.keyed("load.dtype_copy", dtype="bfloat16"))
        released.join()
    assert messages[0] == "Waiting for another process that is converting Tiny…"
    assert isinstance(messages[0], i18n.Message)
    assert messages[0].localized("ru") == "Жду другой процесс, который преобразует Tiny…"
    assert messages[1:] == ["Keeping a bfloat16 copy of the weights (one time only)…"]


def test_the_convert_command_refuses_what_is_not_bundled() -> None:
    for spec, reason in (("bundled/nope", "unknown bundled model 'bundled/nope' (bundled: bundled/gemma-3-270m, "),
                         ("HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct is not a bundled model")):
        result = subprocess.run([sys.executable, "-m", "playground", "convert", spec], cwd=ROOT, capture_output=True,
                                text=True, timeout=300)
        assert result.returncode == 2 and result.stdout == ""
        assert result.stderr.strip().splitlines()[-1].startswith(f"error: {reason}"), result.stderr


@pytest.mark.bundled
@pytest.mark.slow
def test_a_cold_start_converts_gemma_ahead_and_the_load_waits_for_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The real thing: `convert_ahead` converts Gemma 3 270M in a second process (and keeps the copy `auto` loads);
    a load in this process meanwhile waits, relays its progress, converts nothing itself, and the files it then
    loads are byte for byte those of a conversion in this process."""
    entry = models.CATALOGUE[models.DEFAULT_TARGET]
    reference = models.ensure_converted(entry)  # the shared cache, converted here
    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path))
    ahead = models.convert_ahead(models.DEFAULT_TARGET)
    assert ahead is not None
    try:
        directory = models.converted_dir(entry.key)
        published = models.cache._lock_file(directory, "progress.json")
        deadline = time.monotonic() + 120
        while not published.exists() and ahead.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # until the second process holds the lock
        assert published.exists(), "the second process published no progress"

        def no_conversion_here(*_args: object) -> None:
            raise AssertionError("converted again in the waiting process")

        monkeypatch.setattr(models.gguf_convert, "_convert_into", no_conversion_here)
        messages: list[str] = []
        loaded = models.load_model(models.DEFAULT_TARGET, "float32", messages.append)
        assert ahead.wait(timeout=600) == 0
    finally:
        ahead.kill()
    assert any(m.startswith("Converting Gemma 3 270M (bundled) to safetensors") for m in messages), messages
    assert loaded.model.name_or_path == str(directory)
    for name in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (directory / name).read_bytes() == (reference / name).read_bytes(), name
    # The second process measured nothing (the first runs go in float32 meanwhile; the server measures after them, in
    # the background) and so kept no bfloat16 copy: `auto` is float32 until the measurement is kept.
    assert models.kept_measurement() is None
    assert models.valid_dtype_copy(directory, "bfloat16") is None
    assert models.resolve_precision("auto", "cpu").dtype == "float32"
    assert models.convert_ahead(models.DEFAULT_TARGET) is None  # nothing left to do


@pytest.mark.server
@pytest.mark.bundled
@pytest.mark.slow
def test_python_app_py_converts_ahead_on_a_cold_cache_and_preloads_that_conversion(tmp_path: Path) -> None:
    """`python app.py` on an empty cache: the conversion starts in a second process before the page imports
    Gradio, the page answers while it runs, and the start-up load loads what that process wrote."""
    from appserver import free_port, start_app, stop_app

    log = tmp_path / "app.log"
    cache = tmp_path / "cache"
    server = start_app(free_port(), log, {"PLAYGROUND_CACHE_DIR": str(cache), "PLAYGROUND_PRELOAD": "1"})
    try:
        answered = log.read_text()
        ahead = re.search(r"converting bundled/gemma-3-270m ahead in process (\d+) while the page starts", answered)
        assert ahead, answered
        deadline = time.monotonic() + 600
        while "preloaded bundled/gemma-3-270m" not in log.read_text() and time.monotonic() < deadline:
            assert server.poll() is None
            time.sleep(0.05)  # a finer poll ends the wait as the line lands, not up to half a second after
        text = log.read_text()
    finally:
        stop_app(server)
    assert "preloaded bundled/gemma-3-270m" in text and "converting bundled/gemma-3-270m ahead failed" not in text
    assert not Path(f"/proc/{ahead.group(1)}").exists()  # it ended, and the server reaped it
    entry = models.CATALOGUE[models.DEFAULT_TARGET]
    assert entry.gguf is not None
    assert models.cache._cache_is_valid(cache / "converted" / "bundled--gemma-3-270m", entry.gguf)


@pytest.fixture(scope="module")
def quantised_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_llama_gguf(tmp_path_factory.mktemp("gguf") / "quantised.gguf", hidden=32, ffn=64,
                                quantised=True)


def _same_bits(got: np.ndarray, expected: np.ndarray) -> bool:
    return got.dtype == expected.dtype == np.float32 and got.shape == expected.shape and np.array_equal(
        got.view(np.uint32), expected.view(np.uint32))


def test_torch_dequantisation_gives_ggufs_values_bit_for_bit(quantised_gguf: Path) -> None:
    kinds = set()
    for tensor in gguf.GGUFReader(quantised_gguf).tensors:
        expected = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        assert _same_bits(models.dequantize_with_torch(tensor.data, tensor.tensor_type), expected), tensor.name
        kinds.add(tensor.tensor_type.name)
    assert kinds == {"F32", "Q8_0", "Q4_0", "Q4_1", "Q5_0"}


def test_a_quantised_gguf_converts_to_the_weights_transformers_loads(
        quantised_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The conversion dequantises with torch where it can (Q8_0, Q4_0, Q4_1 here; Q5_0 through gguf) and
    writes the very weights a plain Transformers load gives."""
    from transformers.integrations.gguf import dequant as torch_dequant

    plain = AutoModelForCausalLM.from_pretrained(quantised_gguf.parent, gguf_file=quantised_gguf.name,
                                                 dtype=torch.float32).state_dict()
    by_torch: list[int] = []
    real = torch_dequant.dequantize
    monkeypatch.setattr(torch_dequant, "dequantize", lambda data, kind, *a: by_torch.append(kind) or real(data, kind, *a))
    models.convert_gguf(quantised_gguf, tmp_path / "out")
    assert gguf.dequantize is gguf.quants.dequantize  # the patch is undone
    kinds = gguf.GGMLQuantizationType
    assert set(by_torch) == {kinds.Q8_0, kinds.Q4_0, kinds.Q4_1}
    converted = AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype=torch.float32).state_dict()
    assert converted.keys() == plain.keys()
    assert all(torch.equal(tensor, plain[name]) for name, tensor in converted.items())


@pytest.mark.bundled
@pytest.mark.slow
@pytest.mark.parametrize("key", ["bundled/gemma-3-270m", "bundled/smollm2-135m-instruct"])
def test_each_bundled_file_dequantises_and_reads_as_transformers_does(key: str, tmp_path: Path) -> None:
    """Every tensor of each bundled file (Gemma's Q8_0, Q4_K, Q6_K, Q5_0 and F32 tensors; SmolLM2's Q4_1 file)
    dequantises bit for bit as gguf does it, and the metadata read from the one parse is the lean reader's."""
    source = models.bundled_entry(key).gguf
    assert source is not None
    path = models.gguf_convert._fetch_gguf(source, tmp_path, lambda _message: None)
    reader = models.BulkArrayGGUFReader(path)
    every_string_array = [key for key in reader.fields if models.gguf_patches._is_string_array(reader, key)]
    assert "tokenizer.ggml.tokens" in every_string_array
    lean = models.lean_metadata_of(reader)
    assert lean is not None
    assert _typed(lean) == _typed(lean_reader.read_gguf_metadata(str(path), every_string_array))
    for tensor in reader.tensors:
        expected = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        assert _same_bits(models.dequantize_with_torch(tensor.data, tensor.tensor_type), expected), tensor.name
