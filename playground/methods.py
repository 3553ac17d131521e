"""The method registry: every drafting method described once.

The UI controls, the CLI, the benchmark, the code snippets and the docs all derive from these
entries; a method's name reaches `generate()` only through `Method.split_params` (its `generate()` arguments and
draft settings) and `Method.assistant_kwargs` (how the assistant is handed over).
Nothing here imports torch: a method is data plus two small functions (check, build kwargs).
"""

from __future__ import annotations

import dataclasses
import math

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from .drafts import NO_DRAFT_REASONS, EmptyDraft, prompt_lookup_empty_reason
from .errors import PlaygroundError
from .i18n import DEFAULT_LANGUAGE, Message, Number, t
from .proofs import Proof, Proven, equals_baseline


# Numbers the registry's English prose quotes (Transformers' defaults, the guide's advice). A translation writes each as
# a field ({confidence_default}) that the formatter fills in the page's language (ru «0,4»), never as typed digits;
# tests/test_i18n_counts.py checks that the English says the same number.
PROSE_NUMBERS: dict[str, float] = {"confidence_default": 0.4, "ensemble_start": 0.7, "ensemble_rest": 0.3,
                                   "ensemble_low": 0.05}


def prose_numbers() -> dict[str, Number]:
    """The registry prose's numbers as fields of `t` (each written in the page's language when the text is)."""
    return {name: Number(value, "g") for name, value in PROSE_NUMBERS.items()}


class MethodError(PlaygroundError):
    """The method cannot run with these models or parameters; the message is for the user."""


@dataclass(frozen=True)
class Param:
    """One method parameter, named as `generate()` (or the draft generation_config) names it."""

    name: str
    label: str
    kind: Literal["int", "float", "choice"]
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    step: float | None = None
    # "generate": passed to generate(); "draft_config": set on the generation_config that
    # Transformers reads draft length from (passed to generate() these are silently ignored).
    where: Literal["generate", "draft_config"] = "generate"
    off_value: Any = None  # a value meaning "feature off" (not passed on at all)
    # True where the range's top is the target's layer count − 1 (early exit's layer): `maximum` is only the bound
    # for a target whose layers are unknown; the control, the default and the engine's check use the target's.
    below_target_layers: bool = False

    def top(self, layers: int | None) -> float | None:
        """The range's top for a target of `layers` layers (None: not known before it loads)."""
        if self.below_target_layers and layers is not None:
            return float(layers - 1) if self.maximum is None else min(self.maximum, layers - 1)
        return self.maximum

    def for_target(self, layers: int | None, default: Any = None) -> "Param":
        """This parameter for one target: its range's top from the target's layers, its default the target's own
        (`default`, from the model catalogue; None: the registry's), clamped into the range."""
        top = self.top(layers)
        value = self.default if default is None else self.coerce(default)
        if top is not None and self.kind != "choice" and value != self.off_value:
            value = type(value)(min(max(value, self.minimum if self.minimum is not None else value), top))
        return dataclasses.replace(self, maximum=top, default=value)

    def localized(self, lang: str = DEFAULT_LANGUAGE) -> "Param":
        """This parameter with its label and help in `lang` (its name stays the `generate()` name)."""
        if lang == DEFAULT_LANGUAGE:
            return self
        return dataclasses.replace(self, label=t(f"param.{self.name}.label", lang, default=self.label),
                                   help=t(f"param.{self.name}.help", lang, default=self.help, **prose_numbers()))

    def coerce(self, value: Any) -> Any:
        """Validate and convert a user value; raise MethodError with a readable reason."""
        if self.kind == "choice":
            if value not in self.choices:
                raise MethodError.keyed("error.param.choice", name=self.name, choices=", ".join(self.choices),
                                        got=repr(value))
            return value
        try:
            if isinstance(value, bool):
                raise ValueError
            number = float(value)
            if not math.isfinite(number):  # NaN, infinities, "1e400"
                raise ValueError
            if self.kind == "int":
                if number != int(number):
                    raise ValueError
                number = int(number)
        except (TypeError, ValueError, OverflowError):  # OverflowError: an int too large for a float
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "…"
            raise MethodError.keyed("error.param.integer" if self.kind == "int" else "error.param.number",
                                    name=self.name, got=shown) from None
        if self.off_value is not None and number == self.off_value:
            return number
        lo, hi = self.minimum, self.maximum
        if (lo is not None and number < lo) or (hi is not None and number > hi):
            raise MethodError.keyed("error.param.range", name=self.name, lo=_fmt(lo), hi=_fmt(hi), got=value)
        return number


def _fmt(x: float | None) -> str:
    """A bound of a parameter's range: a whole number as it is, a fraction as the page's language writes it."""
    return "−∞" if x is None else (str(int(x)) if float(x).is_integer() else Number(float(x), "g"))


@dataclass(frozen=True)
class ModelFacts:
    """What a method needs to know about the loaded models (filled by the engine, torch-free here)."""

    target_class: str
    target_layers: int
    target_has_mtp: bool = False
    target_on_disk: bool = True
    assistant_class: str | None = None
    same_vocabulary: bool | None = None  # None when there is no assistant
    sample: bool = False
    # `config.vocab_size` of each model: Transformers decides "same tokenizer" by comparing these alone.
    target_vocab_size: int | None = None
    assistant_vocab_size: int | None = None
    # Whether the checkpoint on disk holds the MTP layers its config declares (None: unknown, e.g. a Hub id).
    target_mtp_weights: bool | None = None
    target_reads_shared_kv: bool = False  # it drafts from a target's shared KV states (a Gemma 4 assistant)
    assistant_reads_shared_kv: bool = False  # (Transformers' rule for these: `compat.transformers_internals`)
    target_shares_kv: bool = False  # it hands them to such a drafter (Gemma 4, Gemma 3n)


@dataclass(frozen=True)
class Method:
    name: str
    title: str
    summary: str  # one paragraph for the UI
    lecture: dict[str, str]  # drafts / verifies / pays_off / cost / failure
    proven: Proven  # what the tests prove of its output (shown in its lecture and README's methods table)
    params: tuple[Param, ...] = ()
    assistant: Literal["none", "same_tokenizer", "different_tokenizer", "gemma4_assistant"] = "none"
    draft_logits: Literal["never", "always", "sampling"] = "never"
    fixed_kwargs: dict[str, Any] = field(default_factory=dict)  # generate() args that select the method
    check: Callable[["Method", ModelFacts, dict[str, Any]], None] | None = None
    no_draft_logits_where: str | None = None  # a locale key naming the variant that lacks draft logits
    # Where q (the draft probabilities the acceptance test reads) comes from under sampling, in Transformers 5.24:
    # "twice": an assistant's inner generate() merges the target's logits processors and then appends its own
    # warpers (GenerationMixin._get_logits_processor merges before it appends), so temperature, top-k and top-p apply
    # twice; "once": the MTP layers' forward applies the processors once (modeling_layers.py); "raw": the MTP
    # drafter returns its raw logits and drafts by argmax (SinglePositionMultiTokenCandidateGenerator). None: no q.
    q_source: Literal["twice", "once", "raw"] | None = None
    # Why Transformers' sampling with this method does not keep the target's distribution (shown where it is lossy).
    sampling_bias: str | None = None
    # Why a step drafted nothing, where the method can tell (None: the generic reasons of `empty_draft_reason`).
    explain_empty_draft: Callable[[EmptyDraft], str | None] | None = None
    # True for the one method that drafts nothing: the reference every speedup, lossless check and comparison is
    # measured against (`reference_method`).
    reference: bool = False
    # Where the drafts come from: the name of one class in `engine/sources.py` (how a run is observed, which assistant
    # it gets, why a step drafted nothing, where a draft was copied from).
    draft_source: str = ""
    # False when the drafter reads the target's outputs of the previous verification (its hidden states or KV
    # cache): the first step has none yet and drafts nothing (`empty_draft_reason`, the replay's narration).
    first_step_drafts: bool = True
    # How `tune` replays this method's greedy drafts exactly: the name of one of `tune.REPLAYS` (which sweeps, labels and
    # charts it). None: no exact replay; `replay_obstacle` says why.
    draft_replay: str | None = None
    replay_obstacle: str | None = None
    # The parameter that sets how many tokens a step drafts (tune sweeps it and charts against it); None: fixed.
    draft_length_param: str | None = None

    @property
    def needs_assistant(self) -> bool:
        return self.assistant != "none"

    @property
    def draft_config_on_target(self) -> bool:
        """Whether the draft settings go on the target's generation_config (no assistant: early exit's `assistant_model=self`)."""
        return not self.needs_assistant

    @property
    def q_note_key(self) -> str:
        """The catalogue key of the sentence saying where q comes from (`q_source`), wherever q is shown."""
        return f"detail.q_note.{self.q_source}" if self.q_source else "detail.q_note"

    @property
    def drafts(self) -> bool:
        """Whether the method proposes drafts at all (every method but the reference)."""
        return not self.reference

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        if name == ENSEMBLE.name:
            raise MethodError.keyed("error.method.ensemble_no_parameter", method=self.name, name=repr(name),
                                    title=self.title_message(lower=True))
        raise MethodError.keyed("error.method.no_parameter", method=self.name, name=repr(name),
                                known=", ".join(p.name for p in self.params) or Message.keyed("error.method.none"))

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}

    def for_target(self, layers: int | None, defaults: dict[str, Any] | None = None) -> "Method":
        """This method for one target: each parameter's range bounded by the target's `layers` (None: unknown) and
        its default the target's own where the model catalogue names one (`defaults`, `models.method_defaults`),
        clamped into that range. What the page's controls show and what a run that leaves a parameter out uses."""
        own = defaults or {}
        return dataclasses.replace(self, params=tuple(p.for_target(layers, own.get(p.name)) for p in self.params))

    def resolve_params(self, given: dict[str, Any] | None) -> dict[str, Any]:
        """Defaults overlaid with validated user values; unknown names are refused."""
        values = self.defaults()
        for name, value in (given or {}).items():
            values[name] = self.param(name).coerce(value)
        return values

    def empty_draft_reason(self, empty: EmptyDraft) -> str:
        """Why a step of this method drafted nothing, in a few words (for the trace and the narration)."""
        if empty.last_position:
            return NO_DRAFT_REASONS["last_position"]
        if not self.first_step_drafts and empty.first_step:
            return NO_DRAFT_REASONS["needs_target_outputs"]
        specific = self.explain_empty_draft(empty) if self.explain_empty_draft else None
        return specific or NO_DRAFT_REASONS["nothing_proposed"]

    def title_message(self, lower: bool = False) -> Message:
        """The title as a field of a keyed message: translated on the page; `lower`: its English inside a sentence."""
        english = self.title[0].lower() + self.title[1:] if lower else self.title
        return Message.registry(f"method.{self.name}.title", english)

    def replay_obstacle_message(self) -> Message | None:
        """`replay_obstacle` as a message translated on the page (None when tune can replay this method)."""
        if self.replay_obstacle is None:
            return None
        return Message.registry(f"method.{self.name}.replay_obstacle", self.replay_obstacle)

    def localized(self, lang: str = DEFAULT_LANGUAGE) -> "Method":
        """This method with its title, summary, lecture and parameter labels and help in `lang` (the page's
        language); names, kwargs and checks unchanged. English returns the registry's own entry."""
        if lang == DEFAULT_LANGUAGE:
            return self
        key = f"method.{self.name}"
        return dataclasses.replace(
            self,
            title=t(f"{key}.title", lang, default=self.title),
            summary=t(f"{key}.summary", lang, default=self.summary, **prose_numbers()),
            lecture={part: t(f"{key}.lecture.{part}", lang, default=text, **prose_numbers())
                     for part, text in self.lecture.items()},
            params=tuple(param.localized(lang) for param in self.params),
        )

    def has_draft_logits(self, sample: bool) -> bool:
        return self.draft_logits == "always" or (self.draft_logits == "sampling" and sample)

    def is_lossy(self, params: dict[str, Any], sample: bool = False) -> bool:
        """Whether the output may not follow the target alone (greedy: may differ from plain greedy)."""
        return self.lossy_reason(params, sample) is not None

    def lossy_reason(self, params: dict[str, Any], sample: bool = False) -> str | None:
        """Why a run with these settings is lossy, in one sentence (English, translated on the page); None if not."""
        weight = ensemble_weight(params)
        if weight is not None:
            return Message.keyed("method.lossy.ensemble", weight=Number(weight, "g"),
                                 rest=Number(float(format(1 - weight, ".2g")), "g"))
        if sample and self.sampling_bias:
            return Message.registry(f"method.{self.name}.sampling_bias", self.sampling_bias)
        return None

    def validate(self, facts: ModelFacts, params: dict[str, Any]) -> None:
        """Refuse combinations that cannot run, with a message that says what to do instead."""
        if facts.target_reads_shared_kv:  # it drafts from a target's cache: it has none of its own
            raise MethodError.keyed("error.method.gemma4_assistant_target", model=facts.target_class)
        if self.is_lossy(params) and not self.has_draft_logits(facts.sample):
            where = Message.keyed(self.no_draft_logits_where) if self.no_draft_logits_where else self.title_message()
            if self.draft_logits == "sampling":
                raise MethodError.keyed("error.method.ensemble_needs_logits_or_sampling", where=where)
            raise MethodError.keyed("error.method.ensemble_needs_logits", where=where)
        if self.check is not None:
            self.check(self, facts, params)

    def assistant_kwargs(self) -> tuple[str, ...]:
        """The generate() arguments that hand over the assistant: its model, and both tokenizers where they differ
        (the engine passes exactly these; `generate_call` names them)."""
        if self.assistant == "none":
            return ()
        if self.assistant == "different_tokenizer":
            return ("assistant_model", "tokenizer", "assistant_tokenizer")
        return ("assistant_model",)

    def generate_call(self, params: dict[str, Any] | None = None, sample: bool = False) -> str:
        """This method's `generate()` call with `params` (the registry's defaults where None), as the guide writes
        it: the arguments that select and tune the method (draft-length settings go on a generation_config, not
        here), then the assistant's, then `do_sample=True` for a sampling call."""
        gen_args, _ = self.split_params(self.resolve_params(params or {}))
        args = ["**inputs", *(f"{k}={v!r}" for k, v in gen_args.items()),
                *(f"{k}={k}" for k in self.assistant_kwargs()), *(["do_sample=True"] if sample else [])]
        return f"model.generate({', '.join(args)})"

    def split_params(self, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(generate() kwargs, draft generation_config settings) for resolved params."""
        gen: dict[str, Any] = dict(self.fixed_kwargs)
        draft: dict[str, Any] = {}
        for p in self.params:
            value = params[p.name]
            if p.where == "draft_config":
                # Written even when "off": left unset, Transformers fills in its own default
                # (assistant_confidence_threshold 0.4), so 0 must be set to mean off.
                draft[p.name] = value
                continue
            if p.off_value is not None and value == p.off_value:
                continue
            gen[p.name] = value
        return gen, draft


# --- shared parameters -------------------------------------------------------------------

DRAFT_LENGTH = (
    Param(
        "num_assistant_tokens", "Draft length", "int", 5, minimum=1, maximum=64, step=1, where="draft_config",
        help="Tokens drafted per step (the starting value under a heuristic schedule). Transformers' default is 20.",
    ),
    Param(
        "num_assistant_tokens_schedule", "Draft length schedule", "choice", "constant", where="draft_config",
        choices=("constant", "heuristic", "heuristic_transient"),
        help="constant: fixed draft length. heuristic: +2 after a fully accepted draft, −1 otherwise, kept "
        "across runs by Transformers (reset here per run). heuristic_transient: the same, reset every call.",
    ),
    # No off_value: 0 is written to the draft generation_config like any other value. Left unset,
    # Transformers fills in its default 0.4, which cuts weak drafters to a single token.
    Param(
        "assistant_confidence_threshold", "Confidence threshold", "float", 0.0, minimum=0.0, maximum=1.0, step=0.05,
        where="draft_config",
        help="Stop drafting early when the drafter's probability for its token falls below this (0 = off). Left "
        "unset, Transformers would use 0.4, which cuts weak drafters to a single token; the playground always sets it.",
    ),
)

# w is the TARGET's share of the mixture Transformers verifies against, v = w·p + (1−w)·q (`_assisted_decoding`,
# `_speculative_sampling`), valid in the open interval (0, 1). The control reads from lossless to lossy: 1 is plain
# verification (the target's p alone, not passed to generate()), and each step down gives the draft more say.
ENSEMBLE = Param(
    "assistant_ensemble_weight", "Ensemble weight w (target's share; 1 = off)", "float", 1.0, minimum=0.05,
    maximum=1.0, step=0.05, off_value=1.0,
    help="Static ensemble verification: drafts are checked against v = w·p + (1−w)·q, the mixture of the target's "
    "distribution p (share w) and the draft's q (share 1 − w), instead of p alone. 1 = plain verification "
    "(lossless); below 1 acceptance rises and the output follows the mixture, not the target alone (lossy). The "
    "guide's recommended start is 0.7.",
)


def ensemble_weight(params: dict[str, Any]) -> float | None:
    """The run's ensemble weight when ensemble verification is on (Transformers' open interval (0, 1)), else None:
    1 (the control's "off") and a trace's older 0 both mean plain verification."""
    weight = params.get(ENSEMBLE.name)
    return float(weight) if weight is not None and 0 < weight < 1 else None


def mixture(p: Any, q: Any, weight: float) -> Any:
    """Ensemble verification's v = w·p + (1−w)·q, written once, in the precision of p and q: floats (`Step.mixture`)
    in double; float32 rows (the microscope's v) in float32 as Transformers' own v (NEP 50). Their last digits differ."""
    return weight * p + (1 - weight) * q


# --- per-method checks --------------------------------------------------------------------

def _same_size(facts: ModelFacts) -> bool:
    return facts.target_vocab_size is not None and facts.target_vocab_size == facts.assistant_vocab_size


def _check_speculative(method: Method, facts: ModelFacts, params: dict[str, Any]) -> None:
    if facts.assistant_reads_shared_kv:
        raise MethodError.keyed("error.method.gemma4_assistant")
    if facts.same_vocabulary is False:
        if _same_size(facts):
            raise MethodError.keyed("error.method.tokenizers_differ_same_size", n=facts.target_vocab_size)
        raise MethodError.keyed("error.method.tokenizers_differ")
    if facts.same_vocabulary and facts.assistant_vocab_size is not None and not _same_size(facts):
        raise MethodError.keyed("error.method.sizes_differ", target=facts.target_vocab_size,
                                assistant=facts.assistant_vocab_size)


def _check_universal(method: Method, facts: ModelFacts, params: dict[str, Any]) -> None:
    if facts.assistant_reads_shared_kv:
        raise MethodError.keyed("error.method.gemma4_assistant")
    if facts.same_vocabulary and (_same_size(facts) or facts.assistant_vocab_size is None):
        raise MethodError.keyed("error.method.same_tokenizer")
    if facts.same_vocabulary is False and _same_size(facts):
        raise MethodError.keyed("error.method.universal_same_size", n=facts.target_vocab_size)


def _check_early_exit(method: Method, facts: ModelFacts, params: dict[str, Any]) -> None:
    layer = params["assistant_early_exit"]
    if not 1 <= layer <= facts.target_layers - 1:
        raise MethodError.keyed("error.method.early_exit_range", last=facts.target_layers - 1,
                                n=facts.target_layers, got=layer)


def _check_mtp(method: Method, facts: ModelFacts, params: dict[str, Any]) -> None:
    if not facts.target_has_mtp:
        raise MethodError.keyed("error.method.no_mtp_layers", model=facts.target_class)
    if not facts.target_on_disk:
        raise MethodError.keyed("error.method.mtp_in_memory")
    if facts.target_mtp_weights is False:
        raise MethodError.keyed("error.method.no_mtp_weights", model=facts.target_class)


def _check_mtp_drafter(method: Method, facts: ModelFacts, params: dict[str, Any]) -> None:
    if not facts.assistant_reads_shared_kv:
        raise MethodError.keyed("error.method.mtp_drafter_assistant", model=facts.assistant_class)
    if not facts.target_shares_kv:
        raise MethodError.keyed("error.method.mtp_drafter_target", model=facts.target_class)


# --- the registry -------------------------------------------------------------------------

METHODS: dict[str, Method] = {}


def _register(method: Method) -> Method:
    METHODS[method.name] = method
    return method


_register(Method(
    name="baseline",
    draft_source="none",
    title="Baseline (no drafting)",
    summary=(
        "Plain decoding: the target model produces one token per forward pass. It is the reference every "
        "speedup is measured against, and its greedy output is what every lossless method must reproduce."
    ),
    lecture={
        "drafts": "Nothing.",
        "verifies": "Nothing: each forward pass of the target yields exactly one token.",
        "pays_off": "Never faster, never slower: this is the yardstick.",
        "cost": "One full target forward per token; on small models the cost is dominated by memory traffic.",
        "failure": "None; it is the definition of correct output.",
    },
    proven=Proven(greedy=equals_baseline("baseline", "reference"), sampling=Proof("reference")),
    reference=True,
    replay_obstacle="baseline drafts nothing: it is the reference every setting is compared with",
))

_register(Method(
    name="speculative",
    draft_source="draft_model",
    q_source="twice",
    title="Speculative decoding (assistant model)",
    summary=(
        "A smaller assistant model with the same tokenizer drafts a few tokens; the target checks them all in one "
        "forward pass and keeps the longest prefix it agrees with, plus one token of its own. Greedy output is "
        "identical to the target's; with sampling, rejection resampling keeps the target's distribution exactly."
    ),
    lecture={
        "drafts": "A small model sharing the target's vocabulary runs autoregressively for γ tokens.",
        "verifies": "One target forward over all γ drafts; greedy keeps drafts until the first disagreement, sampling "
        "accepts each with probability min(1, p/q) and resamples from (p − q)+ on a rejection.",
        "pays_off": "When the assistant is much cheaper than the target (10× or more) and agrees with it often: "
        "same model family, predictable text.",
        "cost": "γ assistant forwards plus one wider target forward per step, and memory for both models.",
        "failure": "A weak or slow assistant: low acceptance wastes the verification, and on CPUs a wide "
        "forward can cost as much as several narrow ones. Batched inputs are not supported: Transformers' assisted "
        "generation takes one sequence at a time (batch size 1).",
    },
    proven=Proven(greedy=equals_baseline("speculative"), sampling=Proof("exact", (
        "tests/test_method_sampling.py::test_speculative_sampling_follows_the_target_distribution",
        "tests/test_method_sampling.py::test_three_token_drafts_follow_the_target_distribution[speculative-kw0-800-True]",
    ))),
    params=DRAFT_LENGTH + (ENSEMBLE,),
    assistant="same_tokenizer",
    draft_logits="always",
    check=_check_speculative,
    draft_replay="assistant_model",
    draft_length_param="num_assistant_tokens",
))

_register(Method(
    name="prompt_lookup",
    draft_source="context_copy",
    title="Prompt lookup decoding",
    summary=(
        "No second model: the last few generated tokens are looked up in the prompt and output so far, and the "
        "tokens that followed the match are proposed as the draft. Free to draft, so it shines when the answer "
        "copies from the context: summaries, retrieval-augmented answers, code edits, repeated lists."
    ),
    lecture={
        "drafts": "The tokens that follow the earliest occurrence of the last n-gram in prompt + output: Transformers "
        "tries the longest n-gram first (n up to max_matching_ngram_size) and scans from the start of the context, so "
        "with several matches it copies after the first one, not the most recent.",
        "verifies": "One target forward over the copied tokens, keeping the matching prefix.",
        "pays_off": "When output repeats input: summarising, translation (names, numbers and terms carried over), "
        "extraction, editing, RAG. Drafting costs almost nothing.",
        "cost": "Only the wider verification forward; nothing when no n-gram matches (a plain step).",
        "failure": "Free-form writing with nothing to copy: few matches, and each wrong guess widens a forward for nothing.",
    },
    proven=Proven(greedy=equals_baseline("prompt_lookup"), sampling=Proof("exact", (
        "tests/test_method_sampling.py::test_self_drafting_sampling_follows_the_target_distribution[prompt_lookup-params0]",
        "tests/test_method_sampling.py::test_three_token_drafts_follow_the_target_distribution"
        "[prompt_lookup-kw1-400-False]",
    ))),
    params=(
        Param("prompt_lookup_num_tokens", "Tokens to copy", "int", 10, minimum=1, maximum=64, step=1,
              help="How many tokens after the matching n-gram are proposed as the draft."),
        Param("max_matching_ngram_size", "Max n-gram size", "int", 2, minimum=1, maximum=10, step=1,
              help="The longest n-gram of recent tokens searched for in the context (longest tried first)."),
    ),
    explain_empty_draft=prompt_lookup_empty_reason,
    draft_replay="context_copy",
    draft_length_param="prompt_lookup_num_tokens",
))

_register(Method(
    name="early_exit",
    draft_source="early_layers",
    q_source="twice",
    title="Early-exit self-speculation (LayerSkip)",
    summary=(
        "The target drafts for itself by running only its first N layers and applying its LM head there; the full "
        "model then verifies. No second model, but it only pays off on checkpoints trained so that early layers "
        "already predict well (LayerSkip, e.g. facebook/layerskip-llama3.2-1B). On ordinary models such as the "
        "bundled Gemma 3 270M, early-layer guesses are mostly wrong and the run is slower than baseline: here it "
        "shows what early exit is, not a speedup. Lossless all the same (greedy equals plain greedy)."
    ),
    lecture={
        "drafts": "The target's own first N layers plus its LM head (assistant_early_exit = N): Transformers drafts "
        "with the target model itself, its layer count set to N while it drafts.",
        "verifies": "The full target over the drafted tokens, as in speculative decoding.",
        "pays_off": "On LayerSkip-trained checkpoints (e.g. facebook/layerskip-llama3.2-1B), where early exits are accurate.",
        "cost": "Each draft token costs N/L of a full forward; a rejected draft wastes that work. The guide says that "
        "weights and caches are shared, so there is no extra memory. In Transformers 5.24 the weights are shared (no "
        "second model is loaded), but the cache is not: the drafter keeps a KV cache of its own for its N layers, "
        "so its first draft re-reads the whole prompt through them.",
        "failure": "On ordinary checkpoints early layers rarely agree with the last one: acceptance near zero and "
        "generation slower than baseline.",
    },
    proven=Proven(greedy=equals_baseline("early_exit"), sampling=Proof("exact", (
        "tests/test_method_sampling.py::test_self_drafting_sampling_follows_the_target_distribution[early_exit-params1]",
        "tests/test_method_sampling.py::test_three_token_drafts_follow_the_target_distribution[early_exit-kw2-500-True]",
    ))),
    params=(
        # 4 is the guide's layer for LayerSkip Llama 3.2 1B; the catalogue names each known model's own (where its
        # drafts are sometimes right), and the page bounds the control by the loaded target's layers.
        Param("assistant_early_exit", "Exit after layer", "int", 4, minimum=1, maximum=256, step=1,
              below_target_layers=True,
              help="Number of the target's layers used for drafting (1 … layers − 1)."),
    ) + DRAFT_LENGTH + (ENSEMBLE,),
    draft_logits="always",
    check=_check_early_exit,
    draft_replay="early_layers",
    draft_length_param="num_assistant_tokens",
))

_register(Method(
    name="mtp",
    draft_source="mtp_layers",
    q_source="once",
    title="Multi-token prediction layers (DeepSeek-V3 / GLM-4.5)",
    summary=(
        "Some checkpoints (DeepSeek-V3, GLM-4.5) ship extra multi-token-prediction (MTP) layers, trained with the model "
        "to predict tokens further ahead from the target's last hidden state. They reuse the target's embeddings and "
        "output head, so drafting is a small extra block of the target's own checkpoint rather than a second model."
    ),
    lecture={
        "drafts": "The checkpoint's own MTP layers, one token each: a layer takes the hidden state before it (the "
        "target's last one for the first layer) and the embedding of the next token, and its logits come from the "
        "target's output head. Transformers ties both to the target's own modules: the embeddings and the output head "
        "(lm_head) are the target's, not copies. Unlike the MTP drafter (the Gemma 4 assistant, a separate checkpoint "
        "passed as assistant_model), the MTP layers are part of the target's checkpoint.",
        "verifies": "The target's next forward pass, which also produces the hidden state for the next draft.",
        "pays_off": "On checkpoints trained with MTP (DeepSeek-V3, GLM-4.5): high acceptance at tiny draft cost.",
        "cost": "One MTP layer per drafted token, so the draft length is the checkpoint's number of MTP layers, fixed. "
        "Transformers reads it as config.num_mtp_layers; the config.json of DeepSeek-V3 and GLM-4.5 writes it "
        "num_nextn_predict_layers (their config classes map one name to the other). The first step drafts nothing "
        "(it needs the target's outputs first). Transformers rebuilds the MTP layers from the safetensors at every "
        "call.",
        "failure": "Needs a checkpoint whose safetensors hold the MTP weights (many conversions drop them), loaded "
        "from disk; other models cannot use it. Like speculative decoding, it takes no batched inputs (batch size 1).",
    },
    proven=Proven(greedy=equals_baseline("mtp"), sampling=Proof("exact", (
        "tests/test_method_sampling_mtp.py::test_mtp_sampling_follows_the_target_distribution",))),
    params=(ENSEMBLE,),
    fixed_kwargs={"use_mtp": True},
    check=_check_mtp,
    draft_logits="always",
    first_step_drafts=False,
    replay_obstacle="MTP layers draft from the target's hidden states of the previous verification; tune has no exact "
                    "replay for them",
))

_register(Method(
    name="mtp_drafter",
    draft_source="mtp_drafter",
    q_source="raw",
    title="MTP drafter reading the target's cache (Gemma 4 assistant)",
    summary=(
        "A light drafter from a separate checkpoint (the Gemma 4 assistant, passed as assistant_model) that has no cache "
        "of its own: it attends to the target's KV cache and starts from its hidden states, drafting several tokens "
        "from the last verified position."
    ),
    lecture={
        "drafts": "A separate few-layer Gemma 4 assistant. It starts from the target's last hidden state and the target's "
        "input embedding of the last token, cross-attends to the target's keys and values, and feeds its own projected "
        "hidden state back for each next token. Unlike the MTP layers of a DeepSeek-V3 or GLM-4.5 checkpoint, it is a "
        "model of its own with its own output head, and its draft length is num_assistant_tokens, not a layer count.",
        "verifies": "The target's forward, which also hands its shared KV states to the drafter.",
        "pays_off": "With a Gemma 4 target and its matching assistant: no prefill for the drafter, cheap drafts.",
        "cost": "A few small layers per drafted token; the first step drafts nothing.",
        "failure": "Works only with Gemma-4-style targets that expose their shared KV states. With sampling it is "
        "lossy in Transformers: the drafter always proposes its most likely token, yet verification treats the "
        "proposal as sampled from the drafter's distribution.",
    },
    # num_assistant_tokens is the drafter's only draft-length setting, and Transformers has no default for it
    # (unset, its generator fails on int(None)): it always goes onto the assistant's generation_config.
    proven=Proven(greedy=equals_baseline("mtp_drafter"), sampling=Proof("lossy", (
        "tests/test_method_sampling.py::test_mtp_drafter_sampling_does_not_follow_the_target_and_is_marked_lossy",
    ))),
    params=(DRAFT_LENGTH[0], ENSEMBLE),
    assistant="gemma4_assistant",
    sampling_bias=(
        "Transformers' Gemma 4 drafter proposes its argmax token even when sampling and hands on its raw logits "
        "(no temperature, top-k or top-p applied); rejection sampling takes q as the softmax of those raw logits "
        "and assumes the draft was sampled from that q, but it was picked by argmax: the output over-represents "
        "the drafter's favourites (measured here: far from the target's distribution)"
    ),
    draft_logits="always",
    check=_check_mtp_drafter,
    first_step_drafts=False,
    replay_obstacle="the Gemma 4 drafter reads the target's KV cache of the previous verification; tune has no exact "
                    "replay for it",
    draft_length_param="num_assistant_tokens",
))

_register(Method(
    name="universal",
    draft_source="retokenised",
    q_source="twice",
    title="Universal assisted decoding (different tokenizers)",
    summary=(
        "Any small model can draft, even with a different tokenizer: its draft is decoded to text and re-tokenised "
        "with the target's tokenizer before verification. Greedy output stays the target's; with sampling, the "
        "assistant's vocabulary is mapped onto the target's so rejection sampling stays exact."
    ),
    lecture={
        "drafts": "A small model from another family. Greedy: the first step re-encodes the whole prompt as text. Later "
        "steps decode the target's tokens from target_lookbehind = 10 tokens before the previous step's end, re-encode "
        "them with the assistant's tokenizer and align them with the assistant's previous tokens at the longest run of "
        "consecutive tokens both share: assistant tokens after that run that disagree are replaced, and only the new "
        "ones are appended. The draft comes back the same way (the assistant's last assistant_lookbehind = 10 tokens "
        "and its draft as text, aligned with the target's last tokens): only the target tokens after the overlap "
        "become the draft. The guide calls this the longest common subsequence; the code takes the longest unbroken "
        "run. Sampling: tokens go between the vocabularies id by id, through a map of the tokens both tokenizers spell "
        "the same (through text only for a target token with no counterpart), and the assistant's vocabulary is "
        "restricted to those tokens. Drafted tokens are shown in the target's vocabulary.",
        "verifies": "The target over the re-tokenised draft: prefix match when greedy (no draft probabilities, so no "
        "ensemble), rejection sampling against the mapped draft probabilities when sampling.",
        "pays_off": "When no same-family small model exists but a fast, agreeable one from another family does.",
        "cost": "The assistant's forwards plus decoding and re-encoding a window of text both ways every step.",
        "failure": "Tokenizers that split text very differently: drafts lose alignment and acceptance drops. "
        "Sampling prunes the assistant's LM head in place, so the playground gives it a dedicated copy.",
    },
    proven=Proven(greedy=equals_baseline("universal"), sampling=Proof("exact", (
        "tests/test_method_sampling.py::test_universal_sampling_follows_the_target_distribution",
        "tests/test_method_sampling.py::test_three_token_drafts_follow_the_target_distribution[universal-kw3-500-True]",
    ))),
    params=DRAFT_LENGTH + (ENSEMBLE,),
    assistant="different_tokenizer",
    draft_logits="sampling",
    check=_check_universal,
    no_draft_logits_where="error.method.greedy_universal",
    replay_obstacle="universal decoding re-tokenises each draft through text and re-aligns the assistant's prompt "
                    "every step; its drafts cannot be replayed exactly from one pass, so tune offers no prediction for "
                    "it",
    draft_length_param="num_assistant_tokens",
))


# --- ways of verifying that several methods offer ---------------------------------------


@dataclass(frozen=True)
class Verification:
    """A way of verifying drafts that several methods offer through one parameter, taught by a lecture of its own in
    the Methods tab beside the methods'. The methods that offer it are those whose `params` hold `param`; their
    lectures point to it. English here; `verification.<name>.title` and `verification.<name>.lecture.<part>` per
    language."""

    name: str
    title: str
    lecture: dict[str, str]  # mixture / weight / greedy / sampling
    param: Param
    proven: Proven  # what the tests prove of the output when the parameter is on
    guide_start: Any = None  # the value the guide's example passes (its call is shown with it)

    def offered_in(self, method: Method) -> bool:
        """Whether `method` offers it (by the parameter's name: a localized method's parameter has other text)."""
        return any(param.name == self.param.name for param in method.params)

    def offered_by(self) -> list[Method]:
        """The methods that offer it, in registry order."""
        return [method for method in METHODS.values() if self.offered_in(method)]

    def localized(self, lang: str = DEFAULT_LANGUAGE) -> "Verification":
        if lang == DEFAULT_LANGUAGE:
            return self
        key = f"verification.{self.name}"
        return dataclasses.replace(
            self, title=t(f"{key}.title", lang, default=self.title),
            lecture={part: t(f"{key}.lecture.{part}", lang, default=text, **prose_numbers())
                     for part, text in self.lecture.items()},
            param=self.param.localized(lang))


ENSEMBLE_VERIFICATION = Verification(
    name="ensemble",
    title="Static ensemble verification",
    lecture={
        "mixture": "Instead of checking each draft token against the target's distribution p alone, Transformers checks "
        "it against the mixture v = w·p + (1−w)·q of p and the draft's distribution q, with w = "
        "assistant_ensemble_weight. The draft gets a say: more drafts are accepted and generation is faster, and the "
        "output follows the mixture instead of the target alone.",
        "weight": "w is the target's share, in the open interval (0, 1) that Transformers accepts. 1 (the parameter not "
        "passed at all) is plain verification, lossless; every value below 1 is lossy, the more so the lower it goes: "
        "at w = 0.05 the mixture is 95 % draft. The guide's recommended start is 0.7.",
        "greedy": "Greedy: a draft token is kept while it equals the argmax of v at its position, not of p. At the first "
        "mismatch the argmax of v is taken instead; after a fully accepted draft, the next token is the target's own "
        "argmax of p.",
        "sampling": "Sampling: each draft token is accepted with probability min(1, v/q) = min(1, 1 − w + w·p/q), so "
        "even a token the target rules out (p = 0) is kept with probability 1 − w. On a rejection the replacement is "
        "drawn from (p − q)+, as in plain rejection sampling (from p itself where p and q are equal).",
    },
    param=ENSEMBLE,
    guide_start=PROSE_NUMBERS["ensemble_start"],
    proven=Proven(
        greedy=Proof("lossy", ("tests/test_methods.py::test_greedy_ensemble_verification_departs_from_a_baseline_run",)),
        sampling=Proof("lossy", ("tests/test_method_sampling.py::test_the_same_test_rejects_ensemble_verification",
                                 "tests/test_method_sampling.py::test_the_three_token_test_rejects_ensemble_verification")),
    ),
)
VERIFICATIONS: dict[str, Verification] = {ENSEMBLE_VERIFICATION.name: ENSEMBLE_VERIFICATION}


def registry_english() -> dict[str, str]:
    """Every key whose English the registry holds (not en.json), with that English: what the other languages translate."""
    out: dict[str, str] = {}
    for name, method in METHODS.items():
        out[f"method.{name}.title"], out[f"method.{name}.summary"] = method.title, method.summary
        if method.sampling_bias:
            out[f"method.{name}.sampling_bias"] = method.sampling_bias
        if method.replay_obstacle:
            out[f"method.{name}.replay_obstacle"] = method.replay_obstacle
        out.update({f"method.{name}.lecture.{part}": text for part, text in method.lecture.items()})
        for param in method.params:
            out[f"param.{param.name}.label"], out[f"param.{param.name}.help"] = param.label, param.help
    for name, verification in VERIFICATIONS.items():
        out[f"verification.{name}.title"] = verification.title
        out.update({f"verification.{name}.lecture.{part}": text for part, text in verification.lecture.items()})
    return out


def reference_method() -> Method:
    """The method that drafts nothing, which every other is compared with (exactly one is registered)."""
    (reference,) = (m for m in METHODS.values() if m.reference)
    return reference


REFERENCE = reference_method().name  # its name, for benchmark specs and traces (which name methods as data)


def is_reference(name: str | None) -> bool:
    """Whether a method named in a trace, row or request is the no-drafting reference."""
    return name == REFERENCE


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise MethodError.keyed("error.unknown_method", name=repr(name), known=", ".join(METHODS)) from None


def method_title(name: str, lang: str = DEFAULT_LANGUAGE) -> str:
    """A method as the page's pickers name it in `lang` (its title); a name the registry lacks as written."""
    return METHODS[name].localized(lang).title if name in METHODS else name


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """Parse CLI `KEY=VALUE` items; values stay strings for `Param.coerce` (choices stay text)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise MethodError(f"expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out
