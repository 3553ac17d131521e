"""Transformers imported by one thread at a time: import this module, not `transformers`, wherever a thread of the
server may be the first to import Transformers (the start-up load, a visitor's first run, a tab's first use).

Transformers' `__init__` ends by putting a lazy module in `sys.modules` in place of the one being executed. A second
thread that imports Transformers meanwhile waits for that import to finish but is then handed the module object it
found before waiting, the replaced one, which has none of the lazy names: `cannot import name 'AutoConfig' from
'transformers'` (seen in a warm start's log: the start-up load failed and the first run loaded the model itself).
Python's import lock on *this* module, which replaces nothing, makes every other importer wait until the imports
below have finished, and hands it this module complete. `transformers.models.auto` replaces itself the same way:
its classes are imported here too.
"""

from __future__ import annotations

import threading

import transformers
from transformers import (
    AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, StoppingCriteria, StoppingCriteriaList,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

# Models built by one thread at a time. Transformers builds a model under process-wide switches: torch's default dtype
# (`modeling_utils.local_torch_dtype`: `torch.set_default_dtype` for the build, restored after) and its
# `init.no_tie_weights()`. Two builds at once in one process (a visitor's float32 load beside the start-up load's
# bfloat16, two visitors' models) each switch them under the other: both models came out with layers of both dtypes and
# an untied, randomly initialised lm_head (tests/test_models.py; a run then failed "expected m1 and m2 to have the
# same dtype"). Every `from_pretrained` of a model, and every model built from a config, holds this lock.
MODEL_BUILDS = threading.RLock()

__all__ = ["MODEL_BUILDS", "MODEL_FOR_CAUSAL_LM_MAPPING", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "AutoConfig", "AutoModelForCausalLM",
           "AutoTokenizer", "PreTrainedTokenizerFast", "StoppingCriteria", "StoppingCriteriaList",
           "tokenizer_class_from_name", "transformers"]
