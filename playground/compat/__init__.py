"""The compatibility room: every private name of a dependency the project reaches into, in one place.

Each module names the releases it was written against (`WRITTEN_AGAINST`, what requirements.txt pins) and, for each
internal, what it is and what the project uses it for. `tests/test_compat.py` reads the installed packages' source and
signatures, with no model built and no server started, and fails, naming each change, when a release moves one of
them or the installed version is not the pinned one. The GGUF loader's patches keep their own pin and drift test
(`models/gguf_patches.py`, `tests/test_gguf_patches.py`).

Its modules (the engine imports the first, the page the second: no module imports both torch and Gradio):
  transformers_internals  Transformers' (and torch's) internals the engine hooks: the candidate-generator and
                          logits-processor factories, `_speculative_sampling` and `torch.rand_like`, the translator cache,
                          the class-name prefixes Transformers tells a Gemma 4 assistant and its targets by
  gradio_internals        Gradio's (and uvicorn's, mcp's) internals the page reads: the queue, its events and their ids,
                          `clean_events`, an event's raw data, the call's context, the MCP tool marker and handlers
"""
