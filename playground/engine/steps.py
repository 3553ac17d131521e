"""The step boundary on the consumer's side, in one place (`StepBoundary`): what the worker hands over between two
steps becomes the trace's next step. A raw record (`_Raw`: the drafted and emitted ids, the phases' times, the
logits) is classified (accepted, the correction or bonus token, rejected, discarded, unverified), given its texts and
the draft's source, and committed: the trace, the run's context and the live summary take its tokens. The phases
closed between steps (`_Setup`, `_Other`) land on the trace here too, and the step's figures (q, p, the mixture, the
microscope's lists) are filled in here when the caller decides they are due.

Pure: no thread, no queue, no clock. `LiveRun` feeds it the worker's records in order; a test can feed it records
it made itself.
"""

from __future__ import annotations

from ..drafts import EmptyDraft
from ..methods import ensemble_weight, mixture
from ..trace import Position, Step, StepTotals, Trace, classify_step
from . import distributions
from .prepared import PreparedRun
from .records import _Other, _Raw, _Setup
from .sources import DraftSource
from .texts import _ContextTexts, _decode, _text_after, token_texts


class StepBoundary:
    """Builds and commits one run's steps into `trace`, in the order the worker decided them."""

    def __init__(self, prepared: PreparedRun, source: DraftSource, trace: Trace, top_k: int):
        self.prepared = prepared
        self.source = source
        self.trace = trace
        self.top_k = top_k  # the step microscope's k (0: nothing recorded)
        self.ensemble_weight = ensemble_weight(prepared.params)
        self._texts: dict[int, str] = {}  # token id -> text, for the microscope's top-k lists
        self._anchor = prepared.input_ids[0, -4:].tolist()  # the top-k texts read as they follow the prompt's end
        self._anchor_text: str | None = None
        self.restart()

    def restart(self) -> None:
        """A new attempt begins (the first, or after giving way): the trace forgets the steps of any earlier one."""
        self.trace.steps.clear()
        self.trace.output_ids.clear()
        self.trace.setup_ms = 0.0
        self.context = _ContextTexts(self.prepared.target.tokenizer, self.prepared.input_ids[0].tolist())
        self.totals = StepTotals()  # the live summary's sums (`StepTotals`)

    def closed(self, phase: _Setup | _Other) -> None:
        """A phase closed between steps: the setup before the first, or the `other` phase of the step committed
        last."""
        if isinstance(phase, _Setup):
            self.trace.setup_ms = round(phase.ms, 3)
        elif self.trace.steps:
            self.trace.steps[-1].other_ms = round(phase.ms, 3)
            self.totals.other_ms += self.trace.steps[-1].other_ms

    def build(self, raw: _Raw) -> Step:
        """Everything shown about the step but its figures (`fill_figures`); commits nothing."""
        drafted = raw.drafted.tolist() if raw.drafted is not None else []
        emitted = raw.emitted.tolist()
        prepared = self.prepared
        cut = bool(emitted) and (emitted[-1] in prepared.eos_ids
                                 or raw.total_len - prepared.input_ids.shape[1] >= prepared.request.max_new_tokens)
        accepted, rejected, discarded, unverified = classify_step(drafted, emitted, cut)
        no_draft_reason = ""
        if not drafted and prepared.method.drafts:
            prompt_len = prepared.input_ids.shape[1]
            no_draft_reason = self.source.no_draft_reason(EmptyDraft(
                context=prepared.input_ids[0].tolist() + self.trace.output_ids, first_step=not self.trace.steps,
                last_position=raw.total_len - len(emitted) + 1 == prompt_len + prepared.request.max_new_tokens,
                params=prepared.params, eos_ids=prepared.eos_ids))
        tok = prepared.target.tokenizer
        before = len(self.context.ids)
        emitted_text = self.context.span(before, before + len(emitted), emitted)
        # The accepted drafts read as the emitted tokens they are (the same tokens after the same context).
        drafted_text = emitted_text[:accepted] + token_texts(tok, (self.context.ids + drafted[:accepted])[-4:],
                                                             drafted[accepted:])
        source, source_text = self.source.copied_from(self.context, drafted)
        return Step(
            index=len(self.trace.steps), drafted=drafted, accepted=accepted, rejected=rejected, discarded=discarded,
            emitted=emitted, unverified=unverified, drafted_text=drafted_text, emitted_text=emitted_text,
            draft_ms=round(raw.draft_ms, 3), verify_ms=round(raw.verify_ms, 3),
            no_draft_reason=no_draft_reason, lookup_source=source, lookup_text=source_text,
            # One draw per drafted token (Transformers draws `candidate_length` of them); anything else is not kept.
            draws=(raw.draws.float().tolist() if raw.draws is not None and drafted
                   and raw.draws.numel() == len(drafted) else None),
        )

    def commit(self, step: Step, elapsed_s: float) -> None:
        """The step ends: the trace, the context and the live summary (at `elapsed_s`) take it."""
        self.trace.steps.append(step)
        self.trace.output_ids.extend(step.emitted)
        self.context.extend(step.emitted)
        self.totals.add(step)
        self.trace.summary = self.totals.summary(elapsed_s, self.trace.setup_ms)

    def take(self, raw: _Raw, elapsed_s: float) -> Step:
        """`build` and `commit` the step of one record (its figures still to fill in)."""
        step = self.build(raw)
        self.commit(step, elapsed_s)
        return step

    def digest(self, raw: _Raw) -> None:
        """A record's logits to figures (`distributions._digest`): by the consumer, or by the worker behind."""
        distributions._digest(raw, self.top_k, self.prepared.request.sample, self.ensemble_weight)

    def fill_figures(self, raw: _Raw, step: Step) -> None:
        """The step's figures from its logits (`digest`, unless done): the drafted tokens' q and p, ensemble
        verification's mixture, the microscope's top-k lists with their texts."""
        if not raw.digested:
            self.digest(raw)
        q, p = step.q, step.p = raw.q, raw.p
        w = self.ensemble_weight
        step.mixture = [mixture(pk, qk, w) for pk, qk in zip(p, q)] if w is not None and p and q else None
        step.dists = self._dists(raw, bool(step.rejected))

    def _token_text(self, token: int) -> str:
        """A top-k token's text as it reads after the prompt's last tokens (so a leading space shows), cached."""
        text = self._texts.get(token)
        if text is None:
            tok = self.prepared.target.tokenizer
            if self._anchor_text is None:
                self._anchor_text = _decode(tok, self._anchor)
            text = self._texts[token] = _text_after(tok, self._anchor, self._anchor_text, token)
        return text

    def _dists(self, raw: _Raw, refused: bool) -> list[Position] | None:
        """The microscope's positions of a step with their texts; the residual only where a draft was refused."""
        dists = raw.dists
        for position in dists or ():
            if not refused:
                position.residual = None
            for ranked in (position.p, position.q, position.v, position.residual):
                for entry in ranked or ():
                    entry.text = self._token_text(entry.id)
        return dists

