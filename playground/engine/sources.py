"""Where a method's drafts come from: one small class per draft source, on the model of Transformers'
`CandidateGenerator` (one class per strategy behind `get_candidates` / `update_candidate_strategy`).

The engine does not draft: Transformers' `generate()` does. What differs between sources is what the engine does
around it, and each class answers exactly that, behind four methods:
  `load_assistant`   which assistant a run gets (universal decoding with sampling: a dedicated copy it may adapt)
  `observe`          how a run is watched: the patches on the target for one attempt, and the `generate()`
                     arguments they need (plain decoding: a streamer; assisted decoding: the candidate generator)
  `no_draft_reason`  why a step drafted nothing
  `copied_from`      where a step's draft was copied from in the context (prompt lookup only)
The registry names each method's source (`Method.draft_source`); `source_for` picks its class. A new source is one
class here with `@draft_source("name")` and one registry entry naming it; the engine has no `if method == ...`.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ClassVar, TypeVar

from .. import draw_tap
from ..drafts import EmptyDraft, prompt_lookup_match
from ..methods import Method
from ..models import LoadedModel, ModelStore, Precision
from ..request import RunRequest
from .prepared import ID_ORDERED_VOCABULARY, PRUNED_BEFORE_SEEDING, PreparedRun
from .recorder import _instrumented, _Recorder, _step_starts_at_forward
from .texts import _ContextTexts, lookup_text
from .universal import _dedicated_assistant


class DraftSource:
    """A draft source: drafting in Transformers' assisted loop, observed through the candidate generator it builds
    (`get_candidates` shows the draft and q, `update_candidate_strategy` what the target kept and p), with the random
    draw r of each step tapped under sampling. The subclasses change only what differs."""

    name: ClassVar[str] = ""

    def __init__(self, prepared: PreparedRun):
        self.prepared = prepared
        self.method: Method = prepared.method

    @classmethod
    def load_assistant(cls, store: ModelStore, req: RunRequest, precision: Precision, target: LoadedModel,
                       progress: Callable[[str], None] | None) -> tuple[LoadedModel, tuple[str, ...]]:
        """The run's assistant and what was done to it beyond loading (`prepared.ASSISTANT_ADAPTATIONS`)."""
        assert req.assistant is not None
        return store.get(req.assistant, precision, progress), ()

    def observe(self, model: Any, recorder: _Recorder) -> list[contextlib.AbstractContextManager[Any]]:
        """The patches that watch one attempt of the run on `model` (entered per attempt, or per turn)."""
        managers: list[contextlib.AbstractContextManager[Any]] = [_instrumented(model, recorder)]
        if self.prepared.request.sample:
            managers.append(draw_tap.observing(recorder.take_draws))  # the random draw r of each step
        return managers

    def generate_kwargs(self, recorder: _Recorder) -> dict[str, Any]:
        """`generate()` arguments the observation needs beyond the run's own (none for assisted decoding)."""
        return {}

    def no_draft_reason(self, empty: EmptyDraft) -> str:
        """Why a step drafted nothing, in the trace's words (the registry's reasons for this method)."""
        return self.method.empty_draft_reason(empty)

    def copied_from(self, context: _ContextTexts, drafted: list[int]) -> tuple[list[int] | None, list[str] | None]:
        """Where a draft was copied from in the context: [start, end) of the matched n-gram and that place as text
        (`Step.lookup_source`, `Step.lookup_text`); (None, None) for a source that does not copy."""
        return None, None


_SOURCES: dict[str, type[DraftSource]] = {}
_S = TypeVar("_S", bound=type[DraftSource])


def draft_source(name: str) -> Callable[[_S], _S]:
    """Register a class as the draft source `name` (what `Method.draft_source` names)."""
    def register(cls: _S) -> _S:
        cls.name = name
        _SOURCES[name] = cls
        return cls
    return register


def source_class(method: Method) -> type[DraftSource]:
    """The class of the source the registry names for `method`."""
    try:
        return _SOURCES[method.draft_source]
    except KeyError:
        raise LookupError(f"method {method.name!r} names the draft source {method.draft_source!r}, which the engine "
                          f"does not have (known: {', '.join(_SOURCES)})") from None


def source_for(prepared: PreparedRun) -> DraftSource:
    """The draft source of one prepared run."""
    return source_class(prepared.method)(prepared)


def draft_sources() -> dict[str, type[DraftSource]]:
    """Every source the engine has, by name."""
    return dict(_SOURCES)


@draft_source("none")
class NoDraft(DraftSource):
    """Plain decoding, the reference: no candidate generator to watch. Each target forward begins a step (a forward
    pre-hook) and the streamer sees its token; the processor list hands over the scores it was picked from."""

    def observe(self, model: Any, recorder: _Recorder) -> list[contextlib.AbstractContextManager[Any]]:
        return [_step_starts_at_forward(model, recorder)]

    def generate_kwargs(self, recorder: _Recorder) -> dict[str, Any]:
        return {"streamer": recorder.streamer(self.prepared.input_ids.shape[1])}


@draft_source("draft_model")
class DraftModel(DraftSource):
    """A smaller model with the target's tokenizer drafts (`AssistedCandidateGenerator`)."""


@draft_source("context_copy")
class ContextCopy(DraftSource):
    """Prompt lookup: n-grams copied from the context (`PromptLookupCandidateGenerator`), whose source is shown."""

    def copied_from(self, context: _ContextTexts, drafted: list[int]) -> tuple[list[int] | None, list[str] | None]:
        """Replays Transformers' rule (the longest n-gram first, its earliest occurrence) on the context before the
        step; the place is the text the model saw (the templated prompt under a chat template). (None, None) unless
        the replay drafts exactly what the run drafted."""
        if not drafted:
            return None, None
        prepared, params = self.prepared, self.prepared.params
        ids = context.ids  # prompt + output before this step
        draft, span = prompt_lookup_match(
            ids, int(params["prompt_lookup_num_tokens"]), int(params["max_matching_ngram_size"]),
            prepared.input_ids.shape[1] + prepared.request.max_new_tokens, prepared.eos_ids)
        if span is None or draft != drafted:
            return None, None
        return list(span), lookup_text(prepared.target.tokenizer, ids, span[0], span[1], span[1] + len(drafted),
                                       context.span)


@draft_source("early_layers")
class EarlyLayers(DraftSource):
    """Early exit: the target's own first layers draft (`EarlyExitCandidateGenerator`)."""


@draft_source("mtp_layers")
class MtpLayers(DraftSource):
    """The checkpoint's multi-token-prediction layers draft from the target's last hidden state."""


@draft_source("mtp_drafter")
class MtpDrafter(DraftSource):
    """A Gemma 4 assistant drafts from the target's KV cache and hidden states."""


@draft_source("retokenised")
class Retokenised(DraftSource):
    """Universal decoding: a model with another tokenizer drafts, its drafts re-tokenised
    (`UniversalSpeculativeDecodingGenerator` under sampling, `AssistedCandidateGeneratorDifferentTokenizers` greedy).
    Under sampling Transformers prunes and remaps the assistant in place: the run gets a dedicated copy."""

    @classmethod
    def load_assistant(cls, store: ModelStore, req: RunRequest, precision: Precision, target: LoadedModel,
                       progress: Callable[[str], None] | None) -> tuple[LoadedModel, tuple[str, ...]]:
        if not req.sample:
            return super().load_assistant(store, req, precision, target, progress)
        return (_dedicated_assistant(store, req, precision, target, progress),
                (ID_ORDERED_VOCABULARY, PRUNED_BEFORE_SEEDING))
