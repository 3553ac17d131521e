"""The patches that make Transformers read a GGUF file once per conversion (`gguf_read_once`), dequantise it with
torch (`dequantize_with_torch`) and obey its own progress-bar switch (`gguf_bar_follows_transformers_switch`), and
the gguf reader they share (`BulkArrayGGUFReader`).

Written against Transformers 5.24.0 and gguf 0.19.0 (`WRITTEN_AGAINST`; requirements.txt pins both). For the length
of a block they replace attributes of Transformers' and gguf's modules, private ones among them:
`modeling_gguf_pytorch_utils.load_gguf_checkpoint` and its `tqdm`, `integrations.gguf.reader.read_gguf_metadata`
(and the package's and the GGUF quantiser's references to it), `gguf.GGUFReader`, `gguf.get_tensor_name_map` and
`gguf.dequantize`; the reader overrides `GGUFReader._get_field_parts`. A release that moves, renames or re-signs any
of them, or a caller that binds one at its import (where a patch cannot reach it), fails
`tests/test_gguf_patches.py::test_the_patched_internals_are_where_and_what_they_were`, which names each change.
What the patches do is checked in tests/test_startup.py (`test_conversion_parses_the_gguf_once`, the lean reader's,
the bulk reader's and the torch dequantiser's tests).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import struct
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Container, Iterator, Literal

import gguf as gguf_package
import numpy as np

# The releases whose internals the patches below were written against (a test compares the installed ones).
WRITTEN_AGAINST = {"transformers": "5.24.0", "gguf": "0.19.0"}


@contextlib.contextmanager
def gguf_bar_follows_transformers_switch(on_tensor: Callable[[int, int], None] | None = None) -> Iterator[None]:
    """Make Transformers' GGUF loader obey Transformers' own progress-bar switch.

    The loader calls tqdm directly, so `disable_progress_bar()` (what the CLI's --quiet and scripts
    use) does not reach its "Converting and de-quantizing" bar, and tqdm reads TQDM_DISABLE only at
    import. Restores the real tqdm afterwards (not whatever was there, so two overlapping
    conversions cannot leave it disabled). `on_tensor(done, total)` hears each dequantised tensor,
    so the page can say how far the conversion is.
    """
    from tqdm.auto import tqdm
    from transformers import modeling_gguf_pytorch_utils as gguf_loader
    from transformers.utils import logging as hf_logging

    disable = not hf_logging.is_progress_bar_enabled()
    if not disable and on_tensor is None:
        yield
        return

    def bar(iterable: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        items = list(iterable)
        for done, item in enumerate(tqdm(items, *args, **kwargs, disable=disable)):
            if on_tensor is not None:
                on_tensor(done, len(items))
            yield item

    gguf_loader.tqdm = bar
    try:
        yield
    finally:
        gguf_loader.tqdm = tqdm


class BulkArrayGGUFReader(gguf_package.GGUFReader):
    """The gguf package's reader, with metadata arrays parsed in one loop instead of one call per element.

    `GGUFReader._get_field_parts` parses an array element by element, each element through a
    recursive call and several numpy calls; for Gemma 3's 262,144-token vocabulary (its tokens,
    scores and token types) that took 17.5 s per parse here (two cores, load average under 2). This
    builds the very same fields (one numpy view per element, the same parts, data indices and types,
    so every user of the reader sees no difference) but walks the string lengths with `struct` and
    slices arrays of numbers from one view: 3.1 s; slicing a plain ndarray view of the file's memmap
    rather than the memmap itself took that to 0.8 s (6.7 s with memmap slices in the same run, load
    average 4.7), and Transformers' conversion of those parts to Python from 5.2 s to 1.8 s. Files in
    the other byte order and nested arrays take gguf's own path.
    """

    def _get_field_parts(self, orig_offs: int, raw_type: int) -> tuple[int, list[Any], list[int], list[Any]]:
        value_type = gguf_package.GGUFValueType
        if raw_type != value_type.ARRAY or self.byte_order != "I":
            return super()._get_field_parts(orig_offs, raw_type)
        raw_item_type = self._get(orig_offs, np.uint32)
        length = self._get(orig_offs + 4, np.uint64)
        item_type, count = value_type(raw_item_type[0]), int(length[0])
        scalar = self.gguf_scalar_to_np.get(item_type)
        if item_type != value_type.STRING and scalar is None:
            return super()._get_field_parts(orig_offs, raw_type)
        offs = orig_offs + 12
        parts: list[Any] = [raw_item_type, length]
        if item_type == value_type.STRING:
            # Slices of a plain ndarray view of the memmap: the same memory, without np.memmap's Python-level
            # __getitem__ and __array_finalize__ on each of a million slices (most of the parse's time).
            data, read_length = self.data.view(np.ndarray), struct.Struct("=Q").unpack_from
            buffer = memoryview(data)
            for _ in range(count):
                (size,) = read_length(buffer, offs)
                parts.append(data[offs:offs + 8].view(np.uint64))
                parts.append(data[offs + 8:offs + 8 + size])
                offs += 8 + size
            data_idxs = list(range(3, len(parts), 2))
        else:
            values = self._get(offs, scalar, count).view(np.ndarray)
            parts.extend(values[i:i + 1] for i in range(count))
            offs += int(values.nbytes)
            data_idxs = list(range(2, len(parts)))
        types = [value_type.ARRAY, item_type] if count else [value_type.ARRAY]
        return offs - orig_offs, parts, data_idxs, types


_gguf_loader_patch = threading.Lock()  # the patch below is process-wide: one conversion at a time


def _no_vocab_size_warning(record: logging.LogRecord) -> bool:
    return "vocab_size" not in record.getMessage()


_IMMUTABLE = (str, int, float, bool, bytes, type(None))


def copy_plain(value: Any) -> Any:
    """A deep copy of parsed GGUF metadata: every dict and list copied, the immutable values in them shared.

    `copy.deepcopy` visits each of the vocabulary's 786,432 values (tokens, scores, token types) and its memo
    dict; a list of immutable values copied with `list.copy` is the same deep copy, in C: about 1 s of CPU less
    per copy of Gemma 3's metadata. Anything else falls back to `copy.deepcopy`.
    """
    if isinstance(value, _IMMUTABLE):
        return value
    if type(value) is dict:
        return {name: copy_plain(item) for name, item in value.items()}
    if type(value) is list:
        if all(isinstance(item, _IMMUTABLE) for item in value):
            return value.copy()
        return [copy_plain(item) for item in value]
    return copy.deepcopy(value)


@contextlib.contextmanager
def gguf_read_once(path: Path) -> Iterator[None]:
    """Inside this block Transformers' GGUF loader parses `path` once, however often it asks.

    `from_pretrained(dir, gguf_file=…)` of the model and then of the tokenizer call Transformers'
    `load_gguf_checkpoint` three times (the config, the weights, the tokenizer's config); each call
    builds a new `gguf.GGUFReader` and turns every metadata value into Python again. Here one
    parsed `BulkArrayGGUFReader` serves every call, and the metadata-only calls share one result
    (each gets a deep copy, `copy_plain`: callers edit it).

    Every call walks the metadata without the vocabulary's arrays (tokens, scores, token types: 786,432
    values for Gemma 3, each turned into Python one by one, about 2 s): the weights call reads the tensors and
    the model's own keys (head counts for the tensor processors), and both metadata-only calls (the
    config's and `AutoTokenizer`'s) read only the result's config. Transformers 5's lean metadata reader
    (`integrations.gguf.read_gguf_metadata`: called by the config, `AutoTokenizer`, the GGUF quantiser's check
    and the tokenizer's build, which reads the 262,144 tokens again, 0.53 s) is answered from the same parse
    (`lean_metadata_of`). The one thing the config takes from the vocabulary, where the file gives no
    vocab_size, is its length: set here as the loader sets it (a test compares the config with the loader's
    own). The weights call also asks gguf for its tensor-name map once per submodule (313 times for Gemma 3
    270M, each built from scratch: about 2 s); inside the block it is built once per architecture and layer
    count. Its tensors are dequantised by Transformers' own torch dequantiser where it knows the type
    (`dequantize_with_torch`).
    """
    import transformers.integrations.gguf as lean_package
    from transformers import modeling_gguf_pytorch_utils as gguf_loader
    from transformers.integrations.gguf import reader as lean_reader
    from transformers.quantizers import quantizer_gguf

    path = path.resolve()

    def is_ours(file: Any) -> bool:
        return Path(file).resolve() == path

    with _gguf_loader_patch:
        real_reader, real_load = gguf_package.GGUFReader, gguf_loader.load_gguf_checkpoint
        real_name_map, real_dequantize = gguf_package.get_tensor_name_map, gguf_package.dequantize
        real_read_metadata = lean_reader.read_gguf_metadata
        reader = BulkArrayGGUFReader(path)
        without_vocabulary = copy.copy(reader)
        without_vocabulary.fields = OrderedDict(  # the tokenizer's arrays; its ids (bos, eos, …) go to the config
            (key, field) for key, field in reader.fields.items()
            if not (key.startswith("tokenizer.") and field.types[:1] == [gguf_package.GGUFValueType.ARRAY]))
        tokens = reader.fields.get("tokenizer.ggml.tokens")
        metadata: list[dict[str, Any]] = []

        def shared_reader(file: Any, mode: Literal["r", "r+", "c"] = "r") -> gguf_package.GGUFReader:
            if mode != "r" or not is_ours(file):
                return real_reader(file, mode)
            return without_vocabulary

        def load(file: Any, return_tensors: bool = False, **kwargs: Any) -> dict[str, Any]:
            if not is_ours(file):
                return real_load(file, return_tensors, **kwargs)
            if return_tensors or not metadata:
                # Without the vocabulary the loader warns that it cannot infer vocab_size: set below for the
                # config, and the weights call's tensor processors read head counts, not vocab_size.
                gguf_loader.logger.addFilter(_no_vocab_size_warning)
                try:
                    result = real_load(file, return_tensors, **kwargs)
                finally:
                    gguf_loader.logger.removeFilter(_no_vocab_size_warning)
                if return_tensors:
                    return result
                if "vocab_size" not in result["config"] and tokens is not None:
                    result["config"]["vocab_size"] = len(tokens.data)
                metadata.append(result)
            return copy_plain(metadata[0])

        lean_answer = functools.cache(lambda: lean_metadata_of(reader))  # made on the first call
        string_arrays_in_file = {key for key in reader.fields if _is_string_array(reader, key)}

        def read_metadata(file: Any, string_arrays: Container[str] = ()) -> tuple[dict[str, Any], tuple[str, ...]]:
            if is_ours(file) and (answer := lean_answer()) is not None:
                metadata, names = answer
                return {key: len(value) if key in string_arrays_in_file and key not in string_arrays
                        else copy_plain(value) for key, value in metadata.items()}, names
            return real_read_metadata(file, string_arrays)

        gguf_package.GGUFReader, gguf_loader.load_gguf_checkpoint = shared_reader, load
        gguf_package.get_tensor_name_map = functools.cache(real_name_map)  # read-only maps, same arguments
        gguf_package.dequantize = dequantize_with_torch  # the loader imports it from gguf on each call
        # Callers take it from the module, from the package (which keeps its own reference once asked) and from
        # the GGUF quantiser (imported at its import).
        lean_reader.read_gguf_metadata = lean_package.read_gguf_metadata = read_metadata
        quantizer_gguf.read_gguf_metadata = read_metadata
        try:
            yield
        finally:
            gguf_package.GGUFReader, gguf_loader.load_gguf_checkpoint = real_reader, real_load
            gguf_package.get_tensor_name_map, gguf_package.dequantize = real_name_map, real_dequantize
            lean_reader.read_gguf_metadata = lean_package.read_gguf_metadata = real_read_metadata
            quantizer_gguf.read_gguf_metadata = real_read_metadata


def _is_string_array(reader: gguf_package.GGUFReader, key: str) -> bool:
    return reader.fields[key].types[:1] == [gguf_package.GGUFValueType.ARRAY] and \
        reader.fields[key].types[-1] == gguf_package.GGUFValueType.STRING


def lean_metadata_of(reader: gguf_package.GGUFReader) -> tuple[dict[str, Any], tuple[str, ...]] | None:
    """What Transformers' lean reader (`read_gguf_metadata(path, every string array)`) returns for the file
    `reader` parsed, or None where the two could differ (then that reader reads the file itself).

    Every metadata key in file order with its Python value (strings, numbers, lists of them), and the tensor
    names in file order. A test compares it with the lean reader's own result, for each choice of arrays.
    """
    value_type = gguf_package.GGUFValueType
    version = reader.fields.get("GGUF.version")
    if reader.byte_order != "I" or version is None or int(version.parts[-1][0]) not in (2, 3):
        return None
    metadata: dict[str, Any] = {}
    for key, entry in reader.fields.items():
        if key.startswith("GGUF."):  # the header's own counts, not metadata
            continue
        if entry.types[0] == value_type.ARRAY and len(entry.types) != 2:  # empty or nested: types not known
            return None
        value = entry.contents()
        metadata[key] = list(value) if entry.types[0] == value_type.ARRAY else value
    if "general.architecture" not in metadata:
        return None
    return metadata, tuple(tensor.name for tensor in reader.tensors)


def dequantize_with_torch(data: np.ndarray, quant_type: Any) -> np.ndarray:
    """`gguf.dequantize`, by Transformers' torch dequantiser (`integrations.gguf.dequant`) for the types it knows.

    gguf dequantises in numpy, 16 rows at a time, holding the interpreter lock; torch runs each type's few
    whole-tensor operations on every core, without it. The arithmetic is the same, in float32: tests compare
    both bit for bit, on quantised tiny tensors and on every tensor of the bundled files. Gemma 3 270M's Q8_0
    token embedding (168M values) took 0.65-0.9 s in numpy and 0.4-0.5 s in torch once the process had its
    memory (3.3 s and 1.8 s the first time); `from_pretrained` of the whole file 4.4-4.8 s → 2.4-3.7 s
    (imports done, idle two-core machine). Other types (and F32/F16 tensors) go to gguf's own.
    """
    import torch
    from transformers.integrations.gguf import dequant as torch_dequant

    if data.dtype != np.uint8 or int(quant_type) not in torch_dequant.GGML_BLOCK:
        return gguf_package.quants.dequantize(data, quant_type)
    shape = gguf_package.quants.quant_shape_from_byte_shape(data.shape, quant_type)
    packed = torch.from_numpy(np.array(data))  # a copy: the file's map is read-only
    return torch_dequant.dequantize(packed.reshape(-1), int(quant_type)).reshape(shape).numpy()
