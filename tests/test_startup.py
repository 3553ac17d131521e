"""Cold start: the GGUF is parsed once per conversion, the page is served before torch is imported.

A tiny random Llama GGUF written with the gguf package's own writer stands in for the bundled
files (same kinds of metadata arrays, milliseconds to convert). Timings live in tests/startup.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers import modeling_gguf_pytorch_utils as gguf_loader

from playground import models
from tiny import save_tiny_llama_gguf

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


def test_conversion_parses_the_gguf_once(tiny_gguf: Path, tmp_path: Path, parses: list[str]) -> None:
    """Plain Transformers parses the file for the config, the weights and the tokenizer; the
    conversion parses it once and still builds the same model and tokenizer."""
    plain_model = AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name, dtype=torch.float32)
    plain_tokenizer = AutoTokenizer.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name)
    assert len(parses) > 1  # the counter sees Transformers' own reads
    parses.clear()

    models.convert_gguf(tiny_gguf, tmp_path / "out")

    assert parses == ["BulkArrayGGUFReader"]
    assert gguf.GGUFReader is not None and gguf.GGUFReader.__name__ == "GGUFReader"  # patches undone
    assert gguf_loader.load_gguf_checkpoint.__module__ == gguf_loader.__name__
    assert gguf.get_tensor_name_map is gguf.tensor_mapping.get_tensor_name_map
    converted = AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype=torch.float32)
    expected = plain_model.state_dict()
    assert converted.state_dict().keys() == expected.keys()
    assert all(torch.equal(tensor, expected[name]) for name, tensor in converted.state_dict().items())
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert tokenizer.get_vocab() == plain_tokenizer.get_vocab()
    text = "red cat, blue moon"
    assert tokenizer(text).input_ids == plain_tokenizer(text).input_ids


def test_conversion_says_how_far_it_is_and_how_long_is_left(tiny_gguf: Path, tmp_path: Path) -> None:
    messages: list[str] = []
    models.convert_gguf(tiny_gguf, tmp_path / "out", models._ConversionProgress("Tiny", messages.append))
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


def test_a_bundled_assistant_is_converted_in_the_background_after_the_start_up_load(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_gguf: Path) -> None:
    """Choosing a method that needs a bundled assistant converts it in the background once the target's
    load is done (a run that needs it then waits for that conversion instead of starting its own)."""
    from playground.app import generate_tab
    from playground.app import preload as preload_module

    monkeypatch.setenv("PLAYGROUND_CACHE_DIR", str(tmp_path))
    source = models.GgufSource(filename="tiny.gguf", sha256=models._sha256(tiny_gguf), requirement="tiny",
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
    time.sleep(0.5)
    assert not models._cache_is_valid(models.converted_dir(entry.key), source)  # waits for the target's load
    assert preload.background_message() == preload.message
    preload.done.set()
    worker = next(t for t in threading.enumerate() if t.name == "playground-convert-assistant")
    worker.join(120)
    assert models._cache_is_valid(models.converted_dir(entry.key), source)
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


def assert_same_tokenizer(ours: object, theirs: object) -> None:
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


@pytest.mark.parametrize("key", [models.DEFAULT_TARGET, models.DEFAULT_UNIVERSAL_ASSISTANT])
def test_bundled_tokenizers_load_as_auto_tokenizer_loads_them(key: str) -> None:
    """The Rust-parsed tokenizer of a conversion is the tokenizer AutoTokenizer builds from the same folder
    (for Gemma, AutoTokenizer rebuilds the backend from the vocabulary and merges instead)."""
    directory = models.ensure_converted(models.CATALOGUE[key])
    assert_same_tokenizer(models.load_saved_tokenizer(directory), AutoTokenizer.from_pretrained(directory))


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
    source = models.GgufSource(filename="tiny.gguf", sha256=models._sha256(tiny_gguf), requirement="tiny",
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
    with models.safe_open(str(copy_dir / "model.safetensors"), framework="pt") as handle:
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


def test_the_bundled_gemma_copy_equals_its_cast() -> None:
    """The real thing: Gemma 3 270M's bfloat16 copy holds exactly what a bfloat16 load of its conversion casts."""
    directory = models.ensure_converted(models.CATALOGUE[models.DEFAULT_TARGET])
    copy_dir = models.ensure_dtype_copy(directory, "bfloat16")
    assert copy_dir is not None
    expected = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16).state_dict()
    with models.safe_open(str(copy_dir / "model.safetensors"), framework="pt") as handle:
        assert set(handle.keys()) <= set(expected)
        assert all(torch.equal(handle.get_tensor(name), expected[name]) for name in handle.keys())

