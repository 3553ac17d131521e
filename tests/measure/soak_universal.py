"""Soak for universal decoding with sampling: does memory stay flat when the target is reloaded between runs?

Each cycle runs universal decoding with sampling (the bundled Gemma 3 270M drafted for by SmolLM2 135M
Instruct, 2 new tokens), then evicts the target from the model store, as the budget or a dtype switch
would: the next cycle reloads it, which brings a new tokenizer object and so a new dedicated assistant
copy. After each cycle it prints what the store holds, how many of Transformers' universal translators
are alive (`AssistantVocabTranslatorCache`) with the embedding bytes they hold, and the process's RSS.

    python tests/measure/soak_universal.py --cycles 5 --dtype bfloat16

In-process (no server), so the figures are the engine's and the store's alone; tests/measure/soak.py
--universal-sampling --alternate-dtypes does the same through a real server. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from playground.engine import LiveRun, RunRequest, prepare  # noqa: E402
from playground.models import DEFAULT_TARGET, DEFAULT_UNIVERSAL_ASSISTANT, ModelStore  # noqa: E402


def translators_alive() -> tuple[int, int]:
    """(translators Transformers still caches, bytes of the assistant embeddings they hold)."""
    from transformers.generation.candidate_generator import AssistantVocabTranslatorCache

    translators = [t for pairs in AssistantVocabTranslatorCache._cache.values() for t in pairs.values()]
    held = sum(t.map_input_embeddings.weight.numel() * t.map_input_embeddings.weight.element_size()
               for t in translators if hasattr(t, "map_input_embeddings"))
    return len(translators), held


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--malloc-trim", action="store_true",
                        help="return freed heap to the OS after each cycle (glibc): tells a leak from allocator reuse")
    args = parser.parse_args()
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    store = ModelStore()
    process = psutil.Process()
    rss: list[float] = []
    for cycle in range(args.cycles):
        started = time.perf_counter()
        request = RunRequest(prompt="The capital of France is", target=DEFAULT_TARGET, method="universal",
                             assistant=DEFAULT_UNIVERSAL_ASSISTANT, sample=True, seed=1, max_new_tokens=2,
                             dtype=args.dtype)
        LiveRun(prepare(request, store)).run()
        store.evict(DEFAULT_TARGET)  # the next cycle reloads it: a new tokenizer object, a new assistant copy
        gc.collect()
        if args.malloc_trim:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        count, held = translators_alive()
        rss.append(process.memory_info().rss / 2**20)
        print(f"cycle {cycle + 1}: store holds {len(store.loaded())} model(s), {store.used_bytes() / 1e6:.0f} MB; "
              f"translators alive {count} holding {held / 1e6:.0f} MB of embeddings; rss {rss[-1]:.0f} MB "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
    print(f"RSS after cycle 1: {rss[0]:.0f} MB, after cycle {len(rss)}: {rss[-1]:.0f} MB ({rss[-1] - rss[0]:+.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
