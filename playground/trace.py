"""The trace: what was drafted, verified, kept and what each phase cost, one record per step.

Plain dataclasses with a JSON round-trip, so a trace can be saved, shared, replayed and
rendered without torch or a tokenizer. Everything the UI, the charts and the benchmark show
is derived from these records.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 2
# Version 1 lacked `other_ms`, `setup_ms` and `discarded` (its `rejected` held every draft after the first
# refused one); it still loads, converted by `_upgrade_v1`.
READABLE_VERSIONS = (1, 2)

# Token statuses used by renderers (and as `data-status` in the HTML).
ACCEPTED = "accepted"  # drafted and kept by the target
REJECTED = "rejected"  # the first drafted token the target refused
DISCARDED = "discarded"  # drafted after a refused token: dropped without being judged
CORRECTION = "correction"  # the target's own token after a rejection
BONUS = "bonus"  # the free extra token after a fully accepted draft
TARGET = "target"  # produced by the target with no draft in that step
UNVERIFIED = "unverified"  # drafted past the end of generation, never checked
STATUSES = (ACCEPTED, REJECTED, DISCARDED, CORRECTION, BONUS, TARGET, UNVERIFIED)


class TraceFormatError(ValueError):
    """A file or object that is not a playground trace (or not one this version can read)."""


@dataclass
class Step:
    """One verification step: one target forward pass (for baseline: one decoding step).

    Times (ms) partition the step: `draft_ms` is the drafter's `get_candidates` (0 for baseline); `verify_ms`
    runs from the end of drafting (baseline: the start of the target's forward) until the step's tokens are
    decided (the target forward, logits processing, acceptance, cache crop; for baseline the token choice
    and the stopping check, which Transformers runs before streaming the token); `other_ms` is the rest of
    the loop until the next step begins or `generate()` returns (candidate-strategy update, kwargs update,
    stopping criteria).
    """

    index: int
    drafted: list[int]  # ids in the target's vocabulary
    accepted: int  # how many leading drafted tokens were kept
    rejected: list[int]  # the first drafted token the target refused (at most one)
    emitted: list[int]  # tokens actually appended to the output
    unverified: list[int] = field(default_factory=list)  # drafts cut off by EOS / length
    discarded: list[int] = field(default_factory=list)  # drafts after the rejected one, never judged
    drafted_text: list[str] = field(default_factory=list)
    emitted_text: list[str] = field(default_factory=list)
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    other_ms: float = 0.0
    q: list[float] | None = None  # draft probability of each drafted token (under sampling: doubly warped)
    p: list[float] | None = None  # target probability of each drafted token
    mixture: list[float] | None = None  # ensemble verification: v = w·p + (1−w)·q, the distribution judged
    no_draft_reason: str = ""  # why a drafting method's step drafted nothing (empty where it drafted)

    @property
    def draft_len(self) -> int:
        return len(self.drafted)

    @property
    def verified_drafts(self) -> int:
        """Drafted tokens that reached verification (unverified ones are excluded; discarded ones count)."""
        return len(self.drafted) - len(self.unverified)

    @property
    def judged_drafts(self) -> int:
        """Drafted tokens the target actually judged: the accepted ones and the first refused one."""
        return self.accepted + len(self.rejected)

    @property
    def time_ms(self) -> float:
        """The whole step: draft + verify + other."""
        return self.draft_ms + self.verify_ms + self.other_ms

    def token_statuses(self) -> list[tuple[int, str, str, int | None]]:
        """Tokens in reading order as (id, text, status, index into drafted or None).

        The rejected draft and the discarded ones after it stay where they were proposed, followed by the
        target's correction.
        """
        out: list[tuple[int, str, str, int | None]] = []
        texts = self.drafted_text or [""] * len(self.drafted)
        etexts = self.emitted_text or [""] * len(self.emitted)
        for i in range(self.accepted):
            out.append((self.drafted[i], texts[i], ACCEPTED, i))
        extra = self.emitted[self.accepted :]
        if not self.drafted:
            for j, tok in enumerate(self.emitted):
                out.append((tok, etexts[j], TARGET, None))
            return out
        start = self.accepted
        if self.rejected:
            for i in range(start, start + len(self.rejected)):
                out.append((self.drafted[i], texts[i], REJECTED, i))
            for i in range(start + len(self.rejected), start + len(self.rejected) + len(self.discarded)):
                out.append((self.drafted[i], texts[i], DISCARDED, i))
        for j, tok in enumerate(extra):
            status = CORRECTION if self.rejected else BONUS
            out.append((tok, etexts[self.accepted + j], status, None))
        if self.unverified:
            first = len(self.drafted) - len(self.unverified)
            for i in range(first, len(self.drafted)):
                out.append((self.drafted[i], texts[i], UNVERIFIED, i))
        return out


@dataclass
class Summary:
    new_tokens: int = 0
    steps: int = 0
    drafted: int = 0  # drafted tokens the target verified
    accepted: int = 0
    unverified: int = 0
    acceptance_rate: float | None = None  # accepted / drafted; None when nothing was drafted
    tokens_per_step: float | None = None
    elapsed_s: float = 0.0  # generation time only (no loading, no tokenising) = setup + Σ steps' phases
    tokens_per_s: float | None = None
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    other_ms: float = 0.0
    setup_ms: float = 0.0  # the trace's setup_ms, repeated so a summary row stands alone
    rejected: int = 0  # drafted tokens judged and refused (at most one per step)
    discarded: int = 0  # drafted tokens dropped after a refusal, never judged


@dataclass
class Trace:
    method: str
    target: str
    prompt: str
    assistant: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    decoding: dict[str, Any] = field(default_factory=dict)  # sample, temperature, top_p, top_k, seed, max_new_tokens
    chat: bool = False
    lossy: bool = False
    env: dict[str, Any] = field(default_factory=dict)
    prompt_tokens: int = 0
    output_ids: list[int] = field(default_factory=list)
    output_text: str = ""
    finish_reason: str = ""  # eos | length | stopped | timeout | error
    setup_ms: float = 0.0  # time inside generate() before the first step (candidate generator, head pruning, MTP layers)
    steps: list[Step] = field(default_factory=list)
    summary: Summary = field(default_factory=Summary)
    schema_version: int = SCHEMA_VERSION

    def summarize(self, elapsed_s: float) -> Summary:
        """Recompute the summary from the steps (the single definition of every figure)."""
        self.summary = summarize_steps(self.steps, elapsed_s, self.setup_ms)
        return self.summary

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def from_dict(cls, data: Any) -> "Trace":
        if not isinstance(data, dict) or "steps" not in data or "method" not in data:
            raise TraceFormatError("not a playground trace (no 'method' and 'steps')")
        version = data.get("schema_version")
        if version not in READABLE_VERSIONS:
            raise TraceFormatError(
                f"trace schema_version {version!r} is not supported (expected one of {', '.join(map(str, READABLE_VERSIONS))})")
        if version == 1:
            data = _upgrade_v1(data)
        try:
            steps = [_build(Step, s) for s in data["steps"]]
            summary = _build(Summary, data.get("summary") or {})
            rest = {k: v for k, v in data.items() if k in _field_names(cls) and k not in ("steps", "summary")}
            trace = cls(**rest, steps=steps, summary=summary)
        except (TypeError, KeyError) as exc:
            raise TraceFormatError(f"malformed trace: {exc}") from None
        check_invariants(trace)
        return trace

    @classmethod
    def from_json(cls, text: str | bytes) -> "Trace":
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise TraceFormatError(f"not valid JSON: {exc}") from None
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> "Trace":
        return cls.from_json(Path(path).read_bytes())


def _upgrade_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A schema-1 trace in schema 2's terms: `rejected` kept only the first refused draft, the rest became
    `discarded`; the time outside draft and verify was not measured (`other_ms` and `setup_ms` are 0)."""
    steps = []
    for step in data["steps"]:
        if isinstance(step, dict) and isinstance(step.get("rejected"), list) and "discarded" not in step:
            step = {**step, "rejected": step["rejected"][:1], "discarded": step["rejected"][1:]}
        steps.append(step)
    summary = data.get("summary")
    if isinstance(summary, dict):
        summary = {k: v for k, v in summary.items() if k not in ("rejected", "discarded", "other_ms", "setup_ms")}
    return {**data, "steps": steps, "summary": summary, "schema_version": SCHEMA_VERSION}


def _field_names(cls: type) -> set[str]:
    return {f.name for f in fields(cls)}


def _build(cls: type, data: Any) -> Any:
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__} must be an object")
    return cls(**{k: v for k, v in data.items() if k in _field_names(cls)})


def summarize_steps(steps: list[Step], elapsed_s: float, setup_ms: float = 0.0) -> Summary:
    new_tokens = sum(len(s.emitted) for s in steps)
    drafted = sum(s.verified_drafts for s in steps)
    accepted = sum(s.accepted for s in steps)
    n = len(steps)
    return Summary(
        new_tokens=new_tokens,
        steps=n,
        drafted=drafted,
        accepted=accepted,
        unverified=sum(len(s.unverified) for s in steps),
        acceptance_rate=(accepted / drafted) if drafted else None,
        tokens_per_step=(new_tokens / n) if n else None,
        elapsed_s=elapsed_s,
        tokens_per_s=(new_tokens / elapsed_s) if elapsed_s > 0 else None,
        draft_ms=sum(s.draft_ms for s in steps),
        verify_ms=sum(s.verify_ms for s in steps),
        other_ms=sum(s.other_ms for s in steps),
        setup_ms=setup_ms,
        rejected=sum(len(s.rejected) for s in steps),
        discarded=sum(len(s.discarded) for s in steps),
    )


def classify_step(drafted: list[int], emitted: list[int], cut: bool) -> tuple[int, list[int], list[int], list[int]]:
    """Return (accepted, rejected, discarded, unverified) for one step from what was drafted and emitted.

    Derived by comparing ids rather than trusting the loop's match count, which is off by one
    when an accepted draft was itself the EOS that cut the step. A step normally emits
    accepted + 1 tokens; when the end of generation (`cut`: EOS or the length limit) stopped it
    right after accepted drafts, it emitted only `accepted` and the remaining drafts were never
    judged (unverified, not rejected). Only the first refused draft was judged (rejected); the target's
    probabilities after it are conditioned on a refused prefix, so the drafts after it are discarded unjudged.
    """
    accepted = 0
    for d, e in zip(drafted, emitted):
        if d != e:
            break
        accepted += 1
    if accepted == len(emitted) and emitted:
        if cut:
            return accepted, [], [], drafted[accepted:]
        # Not cut, yet every emitted token equals a draft: the token after the last match was
        # resampled to the drafted id (possible only under ensemble verification).
        accepted -= 1
    return accepted, drafted[accepted:accepted + 1], drafted[accepted + 1:], []


def check_invariants(trace: Trace) -> None:
    """Raise TraceFormatError if the trace breaks the brief's invariants."""
    joined: list[int] = []
    for i, s in enumerate(trace.steps):
        if s.emitted[: s.accepted] != s.drafted[: s.accepted]:
            raise TraceFormatError(f"step {i}: emitted[:accepted] differs from drafted[:accepted]")
        if len(s.emitted) not in (s.accepted, s.accepted + 1):
            raise TraceFormatError(f"step {i}: emitted {len(s.emitted)} tokens with {s.accepted} accepted")
        if s.accepted + len(s.rejected) + len(s.discarded) + len(s.unverified) != len(s.drafted):
            raise TraceFormatError(f"step {i}: accepted + rejected + discarded + unverified != drafted")
        if len(s.rejected) > 1 or (s.discarded and not s.rejected):
            raise TraceFormatError(f"step {i}: only the first refused draft is rejected; the ones after it are discarded")
        for name in ("draft_ms", "verify_ms", "other_ms"):
            value = getattr(s, name)
            if not isinstance(value, (int, float)) or not value >= 0:
                raise TraceFormatError(f"step {i}: {name} must be a time in ms (>= 0)")
        if len(s.emitted) == s.accepted and i != len(trace.steps) - 1 and s.emitted:
            raise TraceFormatError(f"step {i}: only the last step may be cut short")
        for name in ("q", "p", "mixture"):
            values = getattr(s, name)
            if values is not None and (
                len(values) != len(s.drafted) or any(not isinstance(v, (int, float)) or math.isnan(v) for v in values)
            ):
                raise TraceFormatError(f"step {i}: {name} must hold one probability per drafted token")
        joined.extend(s.emitted)
    if joined != trace.output_ids:
        raise TraceFormatError("emitted tokens of all steps do not concatenate to output_ids")


def acceptance_by_position(steps: list[Step]) -> list[tuple[int, int, int]]:
    """For draft position k (0-based): (times a k-th token was drafted and reached verification, times it
    survived, times it was judged).

    kept / drafted is the unconditional rate: the chance the k-th draft survives, which is what decides the
    best draft length. kept / judged is the conditional rate: the chance it is accepted given every draft
    before it was (drafts after a refused one are discarded unjudged). Drafts cut by the end of generation
    (unverified) count in neither.
    """
    counts: list[list[int]] = []
    for s in steps:
        for k in range(s.verified_drafts):
            while len(counts) <= k:
                counts.append([0, 0, 0])
            counts[k][0] += 1
            if k < s.accepted:
                counts[k][1] += 1
            if k < s.judged_drafts:
                counts[k][2] += 1
    return [(n, kept, judged) for n, kept, judged in counts]
