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

import transformers
from transformers import (
    AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, StoppingCriteria, StoppingCriteriaList,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

__all__ = ["MODEL_FOR_CAUSAL_LM_MAPPING", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "AutoConfig", "AutoModelForCausalLM",
           "AutoTokenizer", "PreTrainedTokenizerFast", "StoppingCriteria", "StoppingCriteriaList",
           "tokenizer_class_from_name", "transformers"]
