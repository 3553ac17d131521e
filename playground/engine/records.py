"""What the generating worker hands the consumer: one raw record per step (tensors, not lists) and the phases closed
between steps (`_Other`, `_Setup`); the consumer converts them outside the timing."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ..trace import Position
from .logit_ring import _Span


# --- raw records pushed by the worker ------------------------------------------------------

@dataclass
class _Raw:
    """One step as the worker saw it: tensors, not lists (the consumer converts them, outside the timing)."""

    drafted: torch.Tensor | None  # 1-D ids (None: nothing drafted)
    emitted: torch.Tensor  # 1-D ids appended this step
    total_len: int  # sequence length after the step
    draft_ms: float
    verify_ms: float
    q_logits: torch.Tensor | None  # draft logits, one row per drafted token
    p_logits: torch.Tensor | None  # the target's processed logits, rows aligned with the drafts
    draws: torch.Tensor | None = None  # speculative sampling's random draws r, one per drafted token (`draw_tap`)
    # What `_digest` makes of the logits: the drafted tokens' q and p, the microscope's top-k lists without texts
    # (by the consumer, or by the worker when the consumer fell far behind; see _Recorder).
    q: list[float] | None = None
    p: list[float] | None = None
    dists: list[Position] | None = None
    digested: bool = False
    spans: list[_Span] = dataclasses.field(default_factory=list)  # its logits' copies in a `_LogitRing` buffer
    before: "_Other | _Setup | None" = None  # the phase closed when this step began (handed over with it)

    def logits_bytes(self) -> int:
        """The memory its logits hold (what a digest lets go): a copy's own stretch, or all of a tensor it keeps."""
        copies = {id(span.view) for span in self.spans}
        return sum(t.numel() * t.element_size() if id(t) in copies else t.untyped_storage().nbytes()
                   for t in (self.q_logits, self.p_logits) if t is not None)

    def release(self) -> None:
        """Let go of its logits (digested, or never to be read): their stretches of a buffer can be taken again."""
        self.q_logits = self.p_logits = None
        for span in self.spans:
            span.owner.release(span)
        self.spans = []


@dataclass
class _Other:
    """The `other_ms` of the step pushed last, known only when the next step begins or the loop ends."""

    ms: float


@dataclass
class _Setup:
    ms: float
