"""The guide's own examples as named presets: one source for the page's picker, the CLI's `--preset`, the API's
`preset` parameter and the table in docs/presets.md.

Each preset sets what the code in Transformers' assisted-decoding guide sets (models, method, decoding, the
arguments of its `generate()` call, written out in `guide_call`) and says what it needs to run (the Hub, a token
for gated models, memory). Where a preset cannot run without the Hub, its offline stand-in (`NAME-offline`, on the
bundled models) is a preset too, with a line on what the stand-in shows and what it does not.

The guide's calls leave some settings to Transformers' defaults; the playground always states them, with the
values those defaults have (GenerationConfig's): draft length 20 with a constant schedule and a confidence
threshold of 0.4, top-k 50 when sampling. Its code sets no length limit where generate()'s default applies
(max_length=20, prompt included); a preset asks for 20 new tokens there.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping

from .errors import PlaygroundError
from .i18n import DEFAULT_LANGUAGE, number, t
from .methods import get_method, prose_numbers
from .models import (
    CATALOGUE, DEFAULT_TARGET, DEFAULT_UNIVERSAL_ASSISTANT, GEMMA_FIRST_LAYERS, TINY_GEMMA4, TINY_GEMMA4_ASSISTANT,
    TINY_GLM_MTP,
)
from .request import MAX_NEW_TOKENS, RunRequest, new_request
from .settings import get_settings
from .trace import short_repr

GUIDE_URL = "https://huggingface.co/docs/transformers/main/en/assisted_decoding"
GUIDE_PROMPT = "Hugging Face is an open-source company"
OFFLINE_SUFFIX = "-offline"

# What generate() uses where the guide's code sets nothing (transformers' GenerationConfig defaults).
TRANSFORMERS_DRAFT_DEFAULTS: Mapping[str, Any] = MappingProxyType({
    "num_assistant_tokens": 20, "num_assistant_tokens_schedule": "constant", "assistant_confidence_threshold": 0.4,
})
TRANSFORMERS_TOP_K = 50
UNSET_LENGTH = MAX_NEW_TOKENS["guide"]  # new tokens where the guide's code leaves the length to generate()'s default


@dataclass(frozen=True)
class StandIn:
    """How a method is shown on the bundled models when its guide models are out of reach."""

    target: str | None  # None: no bundled model can run this method
    assistant: str | None
    shows: str
    misses: str
    # The precision the stand-in runs in where `shows` promises what that precision does ("auto": none promised).
    dtype: str = "auto"


# One stand-in per method: the bundled Gemma 3 270M (a base model), SmolLM2 135M Instruct (another tokenizer) and the
# models built from Gemma at first use (`models.derived`: its first 12 layers, tiny random MTP look-alikes).
STAND_INS: dict[str, StandIn] = {
    "speculative": StandIn(
        DEFAULT_TARGET, GEMMA_FIRST_LAYERS,
        shows="the draft → verify → accept loop with a real smaller drafter of the same tokenizer: Gemma's own first "
              "12 of 18 layers, saved at first use as a model of their own (not a trained assistant: it drafts what "
              "early exit at layer 12 drafts, from a cache of its own), so drafts are kept, refused and corrected; "
              "greedy output in float32 equals plain greedy decoding",
        misses="a trained assistant's acceptance rate and any speedup: the derived drafter costs two thirds of the "
               "target per token, and no trained smaller model shares Gemma's tokenizer offline",
        dtype="float32"),  # what `shows` promises holds in float32; bfloat16's batched verification can flip a near-tie
    "prompt_lookup": StandIn(
        DEFAULT_TARGET, None,
        shows="the method exactly as the guide calls it, n-grams copied from the prompt",
        misses="SmolLM 1.7B's own text (another, smaller target)"),
    "early_exit": StandIn(
        DEFAULT_TARGET, None,
        shows="drafting with the first 4 of Gemma's 18 layers and verifying with all of them",
        misses="LayerSkip training: Gemma's early layers were not trained to predict, so few drafts are accepted "
               "and it runs slower than baseline; the stand-in keeps the guide's layer 4, while the method picker "
               "starts Gemma at layer 12, the first whose drafts Gemma sometimes keeps (on five examples, at most 5 % "
               "of first drafts kept from layers 1 to 11, 51 % from layer 12)"),
    "universal": StandIn(
        DEFAULT_TARGET, DEFAULT_UNIVERSAL_ASSISTANT,
        shows="drafts re-tokenised between two different tokenizers (SmolLM2's 49k entries into Gemma's 262k); a "
              "first draft of <bos> is Transformers' own: it decodes SmolLM2's tokens to text and encodes that text "
              "with Gemma's tokenizer with add_special_tokens=True, which puts Gemma's <bos> in front, and where "
              "that re-encoded window does not line up with the context, the <bos> stays among the drafts; Gemma "
              "refuses it",
        misses="the guide's 9B target: next to Gemma 270M, SmolLM2 135M is not cheap enough to pay off"),
    "mtp": StandIn(
        TINY_GLM_MTP, None,
        shows="Transformers' use_mtp path for real: GLM-4.5-Air's class with its multi-token-prediction layer, loaded "
              "from disk, drafting from the target's last hidden state; the model is tiny and randomly initialised "
              "at first use (with Gemma's tokenizer), so its words mean nothing; its layers are damped so that the "
              "next token depends mostly on the last one, and its MTP layer predicts that way too: most drafts are "
              "kept, the rest refused and corrected; greedy output in float32 equals plain greedy decoding",
        misses="real text and a real acceptance rate: GLM-4.5-Air's weights are ~212 GB, far beyond one GPU or a "
               "laptop",
        dtype="float32"),
    "mtp_drafter": StandIn(
        TINY_GEMMA4, TINY_GEMMA4_ASSISTANT,
        shows="Transformers' Gemma 4 assistant path for real: a separate drafter that reads the target's KV cache "
              "and hidden states, with the guide's chat messages in Gemma's turn format; both models are tiny and "
              "randomly initialised at first use (with Gemma's tokenizer), so their words mean nothing and nearly "
              "every draft is refused and corrected; greedy output in float32 equals plain greedy decoding",
        misses="real text, kept drafts and a real acceptance rate: no Gemma 4 model is bundled",
        dtype="float32"),
}


def _stand_in_text(method: str, part: str, lang: str) -> str:
    """A stand-in's `shows` or `misses` in `lang` (English is STAND_INS'; the others `preset.stand_in.<method>.*`)."""
    return t(f"preset.stand_in.{method}.{part}", lang, default=getattr(STAND_INS[method], part), **prose_numbers())


@dataclass(frozen=True)
class Preset:
    """One example of the guide: what its code sets, and what running it takes."""

    name: str
    title: str
    section: str  # the guide's section
    guide_call: str  # the guide's generate() call (or pipeline call), as written there
    method: str
    target: str
    assistant: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    max_new_tokens: int = UNSET_LENGTH
    prompt: str = GUIDE_PROMPT
    system: str | None = None
    chat: bool = False
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    device_map_auto: bool = False  # the guide loads the model with device_map="auto"
    # Settings the playground must state where the guide's code leaves them to the checkpoint (declared, so the
    # snippet test can tell a declared difference from drift).
    playground_sets: tuple[str, ...] = ()
    note: str = ""
    stand_in_for: str | None = None  # for an offline stand-in: the guide preset it stands in for
    # The precision it runs in when the caller leaves it to the playground ("auto" or unset; an explicit choice
    # stands): a preset whose note promises float32's behaviour runs in float32.
    dtype: str = "auto"

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(m for m in (self.target, self.assistant) if m)

    @property
    def needs_hub(self) -> bool:
        return any(CATALOGUE[m].source == "hub" for m in self.models)

    @property
    def gated(self) -> tuple[str, ...]:
        return tuple(m for m in dict.fromkeys(self.models) if CATALOGUE[m].gated)

    @property
    def params_b(self) -> float | None:
        """Parameters of the models it loads, in billions (known sizes from the catalogue); None if unknown."""
        sizes = [CATALOGUE[m].params_b for m in dict.fromkeys(self.models)]
        return None if None in sizes else sum(sizes)  # type: ignore[arg-type]

    @property
    def stand_in(self) -> str | None:
        """The name of this preset's offline stand-in, if it needs the Hub and one exists."""
        if not self.needs_hub or STAND_INS[self.method].target is None:
            return None
        return self.name + OFFLINE_SUFFIX

    def title_in(self, lang: str = DEFAULT_LANGUAGE) -> str:
        """The title in `lang` (English is this module's own; the others are `preset.<name>.title` in the locales)."""
        if self.stand_in_for:
            return t("preset.offline_title", lang, title=PRESETS[self.stand_in_for].title_in(lang))
        return t(f"preset.{self.name}.title", lang, default=self.title)

    def section_in(self, lang: str = DEFAULT_LANGUAGE) -> str:
        """The guide's section, named as the guide's edition in `lang` names it."""
        return t(f"preset.{self.stand_in_for or self.name}.section", lang, default=self.section)

    def note_in(self, lang: str = DEFAULT_LANGUAGE) -> str:
        """The note in `lang` (a stand-in's note is what it shows and does not)."""
        if self.stand_in_for:
            return self.stand_in_text(lang)
        return t(f"preset.{self.name}.note", lang, default=self.note, **prose_numbers()) if self.note else ""

    def needs(self, lang: str = DEFAULT_LANGUAGE) -> str:
        """What running it takes, in one line (for the docs table, the listing and the page)."""
        parts = [t("preset.needs.hub" if self.needs_hub else "preset.needs.offline", lang)]
        if self.gated:
            parts.append(t("preset.needs.token", lang, models=", ".join(self.gated)))
        if self.params_b is not None and self.needs_hub:
            if self.params_b >= 0.5:
                parts.append(t("preset.needs.weights_gb", lang, size=number(self.params_b * 2, lang, ".0f")))
            else:
                parts.append(t("preset.needs.weights_mb", lang, size=number(self.params_b * 2000, lang, ".0f")))
        budget = get_settings().memory_budget_gb
        if self.params_b is not None and self.needs_hub and self.params_b * 2 > budget:
            parts.append(t("preset.needs.budget", lang, budget=number(budget, lang, "g")))
        if self.device_map_auto:
            parts.append(t("preset.needs.gpus", lang))
        return "; ".join(parts)

    def unavailable(self, online: bool, lang: str = DEFAULT_LANGUAGE) -> str | None:
        """Why it cannot run here, in one line (None when it can), with its stand-in."""
        if not self.needs_hub or online:
            return None
        if self.stand_in:
            return t("preset.unavailable.stand_in", lang, title=self.title_in(lang), stand_in=self.stand_in)
        return t("preset.unavailable.none", lang, title=self.title_in(lang), misses=_stand_in_text(self.method,
                                                                                                    "misses", lang))

    def stand_in_text(self, lang: str = DEFAULT_LANGUAGE) -> str:
        """What a stand-in shows and does not (for a stand-in preset or the guide preset it stands in for)."""
        misses = _stand_in_text(self.method, "misses", lang)
        if STAND_INS[self.method].target is None:
            return misses
        return t("preset.stand_in_text", lang, shows=_stand_in_text(self.method, "shows", lang), misses=misses)

    def request_fields(self, prompt: str | None = None, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments for `engine.RunRequest`: the guide's settings, the prompt replaced if one is given."""
        fields = {
            "prompt": prompt if prompt and prompt.strip() else self.prompt,
            "target": self.target, "assistant": self.assistant, "method": self.method, "params": dict(self.params),
            "max_new_tokens": self.max_new_tokens, "sample": self.sample, "temperature": self.temperature,
            "top_p": 1.0, "top_k": self.top_k, "seed": 0, "chat": self.chat, "system": self.system,
            "chat_template_kwargs": dict(self.chat_template_kwargs), "dtype": self.dtype,
        }
        if overrides.get("dtype") in (None, "auto"):  # left to the playground: the preset's own precision
            overrides.pop("dtype", None)
        return {**fields, **overrides}

    def request(self, prompt: str | None = None, **overrides: Any) -> RunRequest:
        """The engine request for this example (`request_fields`, built by the one request builder)."""
        fields = self.request_fields(prompt, **overrides)
        return new_request(fields.pop("prompt"), surface="guide", **fields)

    def offline(self) -> Preset:
        """The same example on the bundled models (check `stand_in` first: not every method has one)."""
        stand_in = STAND_INS[self.method]
        assert stand_in.target is not None, f"{self.method} has no offline stand-in"
        return replace(self, name=self.name + OFFLINE_SUFFIX, title=t("preset.offline_title", title=self.title),
                       target=stand_in.target, assistant=stand_in.assistant, device_map_auto=False,
                       note=self.stand_in_text(), stand_in_for=self.name, dtype=stand_in.dtype)


_DRAFT_DEFAULTS = dict(TRANSFORMERS_DRAFT_DEFAULTS)
_SMOL: dict[str, Any] = dict(target="HuggingFaceTB/SmolLM-1.7B", assistant="HuggingFaceTB/SmolLM-135M")
# The section of the presets that no edition of the guide shows (said so on the page, not offered as the guide's).
_NOT_IN_GUIDE = "Not in the guide: the assistant's draft-length settings (Transformers' generation_config)"
_SAMPLING: dict[str, Any] = dict(sample=True, temperature=0.5, top_k=TRANSFORMERS_TOP_K)

GUIDE_PRESETS: tuple[Preset, ...] = (
    Preset("speculative-greedy", "Speculative decoding, greedy", "Speculative decoding (greedy search)",
           "model.generate(**inputs, assistant_model=assistant_model)",
           method="speculative", params=_DRAFT_DEFAULTS, **_SMOL),
    Preset("speculative-pipeline", "Speculative decoding through the pipeline", "Speculative decoding (Pipeline)",
           'pipeline("Hugging Face is an open-source company", max_new_tokens=50, do_sample=False)',
           method="speculative", target="meta-llama/Llama-3.1-8B", assistant="meta-llama/Llama-3.2-1B",
           params=_DRAFT_DEFAULTS, max_new_tokens=50,
           note="pipeline(..., assistant_model=...) makes the same generate() call as the model does"),
    Preset("speculative-sampling", "Speculative sampling", "Speculative decoding (sampling)",
           "model.generate(**inputs, assistant_model=assistant_model, do_sample=True, temperature=0.5)",
           method="speculative", params=_DRAFT_DEFAULTS, **_SMOL, **_SAMPLING),
    Preset("prompt-lookup-greedy", "Prompt lookup, greedy", "Prompt lookup decoding (greedy decoding)",
           "model.generate(**inputs, prompt_lookup_num_tokens=5)",
           method="prompt_lookup", target=_SMOL["target"], params={"prompt_lookup_num_tokens": 5,
                                                                   "max_matching_ngram_size": 2}),
    Preset("prompt-lookup-sampling", "Prompt lookup, sampling", "Prompt lookup decoding (sampling)",
           "model.generate(**inputs, prompt_lookup_num_tokens=5, do_sample=True, temperature=0.5)",
           method="prompt_lookup", target=_SMOL["target"],
           params={"prompt_lookup_num_tokens": 5, "max_matching_ngram_size": 2}, **_SAMPLING),
    Preset("early-exit", "Self-speculative decoding (early exit)", "Self-speculative decoding",
           "model.generate(**inputs, assistant_early_exit=4, do_sample=False, max_new_tokens=20)",
           method="early_exit", target="facebook/layerskip-llama3.2-1B",
           params={"assistant_early_exit": 4, **_DRAFT_DEFAULTS}, max_new_tokens=20),
    Preset("mtp-layers", "Multi-token prediction layers (GLM-4.5-Air)", "Multi-token prediction (MTP)",
           "model.generate(**inputs, use_mtp=True, do_sample=False, max_new_tokens=50)",
           method="mtp", target="zai-org/GLM-4.5-Air", max_new_tokens=50, device_map_auto=True,
           note='the guide loads GLM-4.5-Air with device_map="auto": ~212 GB of weights, far beyond one GPU or a '
                "laptop"),
    Preset("mtp-drafter", "MTP drafter (Gemma 4 assistant)", "Multi-token prediction (MTP drafter)",
           "model.generate(**inputs, assistant_model=assistant_model, max_new_tokens=256)",
           method="mtp_drafter", target="google/gemma-4-E4B-it", assistant="google/gemma-4-E4B-it-assistant",
           prompt="Write a short joke about saving RAM.", system="You are a helpful assistant.", chat=True,
           chat_template_kwargs={"enable_thinking": False}, max_new_tokens=256, playground_sets=("num_assistant_tokens",),
           note="chat messages with a system message, thinking off (enable_thinking=False); the playground sets "
                "the drafter's draft length (5), which the guide leaves to the assistant checkpoint"),
    Preset("universal", "Universal assisted decoding", "Universal assisted decoding",
           "model.generate(**inputs, assistant_model=assistant_model, tokenizer=tokenizer, "
           "assistant_tokenizer=assistant_tokenizer)",
           method="universal", target="google/gemma-2-9b", assistant="double7/vicuna-68m", params=_DRAFT_DEFAULTS),
    Preset("static-ensemble", "Static ensemble verification", "Static ensemble verification",
           "model.generate(**inputs, assistant_model=assistant_model, assistant_ensemble_weight=0.7, do_sample=True)",
           method="speculative", params={**_DRAFT_DEFAULTS, "assistant_ensemble_weight": 0.7}, sample=True,
           top_k=TRANSFORMERS_TOP_K, **_SMOL,
           note="lossy by design: drafts are verified against 0.7·target + 0.3·draft"),
    # Not in the guide (neither its Russian nor its Arabic edition shows draft length): Transformers' dynamic
    # draft-length settings, on the guide's speculative pair, marked so in their title and section. Transformers reads
    # them from the assistant's generation_config (passed to generate() they are ignored).
    Preset("draft-length-heuristic", "Draft length: heuristic schedule (not in the guide)", _NOT_IN_GUIDE,
           'assistant_model.generation_config.num_assistant_tokens_schedule = "heuristic"',
           method="speculative", params={**_DRAFT_DEFAULTS, "num_assistant_tokens_schedule": "heuristic"}, **_SMOL,
           note="starts at 20 drafted tokens, +2 after a fully accepted draft, −1 otherwise (the default confidence "
                "threshold of 0.4 still ends a draft early)"),
    Preset("draft-length-confidence", "Draft length: confidence threshold (not in the guide)", _NOT_IN_GUIDE,
           "assistant_model.generation_config.assistant_confidence_threshold = 0.4",
           method="speculative", params=_DRAFT_DEFAULTS, **_SMOL,
           note="the assistant stops drafting when its own probability for a token falls below 0.4 "
                "(Transformers' default; up to 20 tokens); with scikit-learn installed, Transformers re-fits the "
                "threshold after each step from the drafts' probabilities and outcomes (an ROC curve)"),
)


def _all_presets() -> dict[str, Preset]:
    presets: dict[str, Preset] = {}
    for preset in GUIDE_PRESETS:
        presets[preset.name] = preset
        if preset.stand_in:
            presets[preset.stand_in] = preset.offline()
    return presets


PRESETS: dict[str, Preset] = _all_presets()


def get_preset(name: str) -> Preset:
    """The preset of that name; a PlaygroundError naming the known ones otherwise."""
    try:
        return PRESETS[name]
    except (KeyError, TypeError):
        raise PlaygroundError.keyed("error.preset", got=short_repr(name), known=", ".join(PRESETS)) from None


def runnable(name: str, online: bool) -> Preset:
    """The preset to run for `name` here: itself, or its offline stand-in where it needs the unreachable Hub."""
    preset = get_preset(name)
    if preset.needs_hub and not online and preset.stand_in:
        return PRESETS[preset.stand_in]
    return preset


def listing(online: bool) -> str:
    """Every preset, one block each: name, title, what it needs, and why it cannot run here (for the CLI)."""
    lines = []
    for preset in PRESETS.values():
        lines.append(f"{preset.name}: {preset.title} [{preset.method}]")
        lines.append(f"    guide: {preset.guide_call}")
        lines.append(f"    needs: {preset.needs()}")
        if preset.stand_in_for:
            lines.append(f"    stands in for {preset.stand_in_for}: {preset.note}")
        elif preset.note:
            lines.append(f"    note: {preset.note}")
        reason = preset.unavailable(online)
        if reason:
            lines.append(f"    here: {reason}")
    return "\n".join(lines)


def validate_presets() -> None:
    """Every preset names catalogue models and a registry method whose parameters accept its values."""
    for preset in PRESETS.values():
        for model in preset.models:
            assert model in CATALOGUE, f"{preset.name}: {model} is not in the catalogue"
        get_method(preset.method).resolve_params(dict(preset.params))


def readme_table() -> str:
    """docs/presets.md's table (tests/test_docs.py checks that docs/presets.md holds exactly this)."""
    rows = ["| preset | guide example (`generate()` call) | models | needs | offline stand-in |",
            "|---|---|---|---|---|"]
    for preset in GUIDE_PRESETS:
        models = " + ".join(f"`{m}`" for m in preset.models)
        stand_in = f"`{preset.stand_in}`: {preset.offline().note}" if preset.stand_in else \
            f"none: {STAND_INS[preset.method].misses}"
        rows.append(f"| `{preset.name}` | {preset.title}: `{preset.guide_call}` | {models} | {preset.needs()} | "
                    f"{stand_in} |")
    return "\n".join(rows)
