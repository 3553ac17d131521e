"""The trace: what was drafted, verified, kept and what each phase cost, one record per step.

Plain dataclasses with a JSON round-trip, so a trace can be saved, shared, replayed and
rendered without torch or a tokenizer. Everything the UI, the charts and the benchmark show
is derived from these records.
"""

from __future__ import annotations

import json
import math
import sys
import types
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from functools import cache
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

from .errors import PlaygroundError, shorten
from .i18n import Message
from .outside import read_bounded
from .settings import MICROSCOPE_MAX_TOP_K, get_settings

SCHEMA_VERSION = 4
# Version 1 lacked `other_ms`, `setup_ms` and `discarded` (its `rejected` held every draft after the first
# refused one); it still loads, converted by `_upgrade_v1`. Version 2 lacked the step microscope's distributions
# (`Step.dists`, `Step.lookup_source`); it loads as it is, with `dists = None` on every step. Version 3 lacked
# speculative sampling's random draws (`Step.draws`); it loads as it is, with `draws = None`.
READABLE_VERSIONS = (1, 2, 3, 4)

# A trace file is untrusted input (a visitor can upload anything, a teacher opens a student's file):
# `Trace.from_dict` checks every field against its annotation and these bounds before anything renders it.
# Real traces stay far below them (the server caps new tokens at PLAYGROUND_MAX_NEW_TOKENS, 512 by default).
MAX_TRACE_STEPS = 100_000  # verification steps in one trace
MAX_LIST_ITEMS = 100_000  # items in any one list (output ids; one step's drafts are tens)
MAX_TRACE_TOKENS = 1_000_000  # token ids in all lists of the trace together
MAX_TEXT_CHARS = 1_000_000  # characters in a string no narrower bound fits (the output text; see TEXT_LIMITS)
MAX_TOKEN_TEXT_CHARS = 512  # one token's text: the longest in real vocabularies are tens of characters
MAX_PROMPT_TEXT_CHARS = 16 * 4096  # a prompt or a system message: the page's limit before tokenising (16 characters a
# token, PLAYGROUND_MAX_PROMPT_TOKENS), at its default; a server set higher reads its own traces (`text_limit`)
MAX_NAME_TEXT_CHARS = 1024  # a model name (the request's own bound) or a path
MAX_WORD_TEXT_CHARS = 64  # a method's name, a finish reason, a free-form object's key
MAX_REASON_TEXT_CHARS = 1000  # a sentence: why a step drafted nothing
MAX_MAPPING_TEXT_CHARS = 4096  # a string in a free-form object (params, decoding, env, chat template variables)
MAX_TOKEN_ID = 2**31 - 1  # ids are below the recorded vocab_size; traces without one get this bound
MAX_COUNT = 2**53  # any other integer (counts, indices): exact in a float, as JSON readers need
MAX_MAPPING_DEPTH = 4  # nesting of the free-form objects (params, decoding, env)
MAX_MAPPING_ITEMS = 1_000  # keys and items in one free-form object, nested ones included
# fields (or lists) of values in [0, 1]
PROBABILITIES = frozenset({"q", "p", "mixture", "acceptance_rate", "prob", "p_drafted", "q_drafted", "v_drafted",
                           "p_emitted", "residual_emitted", "draws"})
TOKEN_ID_FIELDS = frozenset({"id"})  # integer fields holding a token id (other integers are counts)
LOOKUP_CONTEXT_CHARS = 160  # of the context kept on each side of prompt lookup's source (`Step.lookup_text`)
POSITION_LISTS = frozenset({"lookup_source"})  # lists of integers holding positions in the context, not token ids
MAX_TOP_K = MICROSCOPE_MAX_TOP_K  # entries in one recorded top-k list (PLAYGROUND_TOP_K is at most this)
# What each text field of a trace holds, and so how long it may be (checked on load; the refusal names the field).
# Every `str` field of the records below has an entry (`tests/test_hostile3.py` checks it), so a field added later
# gets a bound of its own; lookup_text's middle parts (an n-gram, a draft) are bounded per token in `_check_dists`.
TEXT_LIMITS: dict[str, int] = {
    "method": MAX_WORD_TEXT_CHARS, "finish_reason": MAX_WORD_TEXT_CHARS,
    "target": MAX_NAME_TEXT_CHARS, "assistant": MAX_NAME_TEXT_CHARS,
    "prompt": MAX_PROMPT_TEXT_CHARS, "system": MAX_PROMPT_TEXT_CHARS,
    "output_text": MAX_TEXT_CHARS,
    "drafted_text": MAX_TOKEN_TEXT_CHARS, "emitted_text": MAX_TOKEN_TEXT_CHARS, "text": MAX_TOKEN_TEXT_CHARS,
    "no_draft_reason": MAX_REASON_TEXT_CHARS,
    "lookup_text": MAX_PROMPT_TEXT_CHARS,
}

# Token statuses used by renderers (and as `data-status` in the HTML).
ACCEPTED = "accepted"  # drafted and kept by the target
REJECTED = "rejected"  # the first drafted token the target refused
DISCARDED = "discarded"  # drafted after a refused token: dropped without being judged
CORRECTION = "correction"  # the target's own token after a rejection
BONUS = "bonus"  # the free extra token after a fully accepted draft
TARGET = "target"  # produced by the target with no draft in that step
UNVERIFIED = "unverified"  # drafted past the end of generation, never checked
STATUSES = (ACCEPTED, REJECTED, DISCARDED, CORRECTION, BONUS, TARGET, UNVERIFIED)


# What the code view and the handout read from a trace's free-form `decoding`, and what each must be.
DECODING_FIELDS = {"sample": "error.trace.a_flag", "temperature": "error.trace.a_finite_number",
                   "top_p": "error.trace.a_finite_number", "top_k": "error.trace.a_count",
                   "seed": "error.trace.a_count", "max_new_tokens": "error.trace.a_count"}


class TraceFormatError(PlaygroundError):
    """A file or object that is not a playground trace (or not one this version can read); its reason keyed, so
    the page shows it in the visitor's language."""


@dataclass
class Ranked:
    """One entry of a recorded top-k list."""

    id: int  # token id in the target's vocabulary
    prob: float  # probability in [0, 1]
    text: str = ""  # the token's text (a trace renders without a tokenizer)


@dataclass
class Position:
    """One judged position of a verification step: one row of the target's scores, as Transformers decided with
    them (after its logits processors), with the drafter's row and what was derived from both.

    Lists are the top-k of each distribution, most probable first. `*_drafted` is the probability of the token
    drafted at this position (None where nothing was drafted: the bonus row, baseline). `q` is the drafter's row
    where the method has draft probabilities (under sampling as Transformers hands it over: `Method.q_source`); `v` is ensemble
    verification's mixture w·p + (1−w)·q; `residual` is, at the refused position under sampling with q, the
    distribution the correction was drawn from: max(0, p − q) normalised (ensemble: the same, since
    max(0, v − q) = w·max(0, p − q))."""

    p: list[Ranked]
    p_drafted: float | None = None
    p_emitted: float | None = None  # p of the token emitted at this position (kept draft, correction, bonus, target)
    q: list[Ranked] | None = None
    q_drafted: float | None = None
    v: list[Ranked] | None = None
    v_drafted: float | None = None
    residual: list[Ranked] | None = None
    residual_emitted: float | None = None  # the correction's probability under the residual


@dataclass
class Step:
    """One verification step: one target forward pass (for baseline: one decoding step).

    Times (ms) partition the step: `draft_ms` is the drafter's `get_candidates` (0 for baseline); `verify_ms`
    runs from the end of drafting (baseline: the start of the target's forward) until the step's tokens are
    decided (the target forward, logits processing, acceptance, cache crop; for baseline also the kwargs
    update and the stopping criteria, which Transformers' plain loop runs before streaming the token);
    `other_ms` is the rest of the loop until the next step begins or `generate()` returns (candidate-strategy
    update, kwargs update, stopping criteria; for baseline, preparing the next forward's inputs).
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
    q: list[float] | None = None  # draft probability of each drafted token (under sampling: see Method.q_source)
    p: list[float] | None = None  # target probability of each drafted token
    mixture: list[float] | None = None  # ensemble verification: v = w·p + (1−w)·q, the distribution judged
    no_draft_reason: str = ""  # why a drafting method's step drafted nothing (empty where it drafted)
    # The step microscope (schema 3; None in older traces and when PLAYGROUND_TOP_K is 0): dists[i] is the row of
    # the target's scores that decided emitted[i]; for i < len(drafted) and i <= accepted it also judged drafted[i].
    dists: list[Position] | None = None
    # Prompt lookup: [start, end) of the matched n-gram in the context (prompt + output before this step, token
    # positions), the draft being the tokens copied after it.
    lookup_source: list[int] | None = None
    # The same place as the text the model saw (under a chat template: the templated prompt): [up to
    # LOOKUP_CONTEXT_CHARS before, the n-gram, the tokens copied after it, up to LOOKUP_CONTEXT_CHARS after].
    # None where there is no source, and in traces recorded before it was added.
    lookup_text: list[str] | None = None
    # Speculative sampling (schema 4): the uniform draw r in [0, 1) Transformers' `_speculative_sampling` compared
    # with p/q (ensemble: v/q) for each drafted token, as it drew it (`draw_tap`); draft i was kept while
    # r_i <= that ratio. None without that rule (greedy, no q) and in older traces.
    draws: list[float] | None = None

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
    system: str | None = None  # the system message rendered with the chat template, if any
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)  # e.g. {"enable_thinking": False}
    lossy: bool = False
    env: dict[str, Any] = field(default_factory=dict)
    prompt_tokens: int = 0
    output_ids: list[int] = field(default_factory=list)
    output_text: str = ""
    finish_reason: str = ""  # eos | length | stopped | timeout | error
    setup_ms: float = 0.0  # time inside generate() before the first step (candidate generator, head pruning, MTP layers)
    # Time the run waited for other visitors' runs, which take turns with it one step at a time (before its first step
    # and between its steps): in no phase and not in the summary's elapsed_s, so the timings are the run's own work.
    waited_ms: float = 0.0
    # Time the run stood paused at its visitor's pace (stopped after a step until "Step on", or slowed): as waited_ms,
    # in no phase and not in elapsed_s.
    paused_ms: float = 0.0
    steps: list[Step] = field(default_factory=list)
    summary: Summary = field(default_factory=Summary)
    schema_version: int = SCHEMA_VERSION
    vocab_size: int | None = None  # the target's vocabulary (token ids are below it); None in older traces

    def summarize(self, elapsed_s: float) -> Summary:
        """Recompute the summary from the steps (the single definition of every figure)."""
        self.summary = summarize_steps(self.steps, elapsed_s, self.setup_ms)
        return self.summary

    def check_decoding(self) -> None:
        """Refuse (`TraceFormatError`, one line) a `decoding` field of the wrong kind: the free-form object holds
        anything a file put there, and the code view and the handout read these as a run's settings."""
        for name, expected in DECODING_FIELDS.items():
            if name not in self.decoding:
                continue
            value = self.decoding[name]
            if expected == "error.trace.a_flag":
                good = isinstance(value, bool)
            elif expected == "error.trace.a_finite_number":
                good = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            else:
                good = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT
            if not good:
                raise TraceFormatError.keyed("error.trace.must_be", where=f"trace.decoding.{shorten(name)}",
                                             expected=Message.keyed(expected, limit=MAX_COUNT), got=short_repr(value))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def from_dict(cls, data: Any) -> "Trace":
        """A trace from parsed JSON, every field checked (type, range, size) as untrusted input. Any JSON at any
        place gets a trace-format message: the checks' own, or (a shape they did not foresee) a general one."""
        try:
            return cls._from_checked_dict(data)
        except TraceFormatError:
            raise
        except (TypeError, ValueError, AttributeError, KeyError, IndexError, RecursionError, OverflowError):
            raise TraceFormatError.keyed("error.trace.malformed", reason=Message.keyed("error.trace.shape")) from None

    @classmethod
    def _from_checked_dict(cls, data: Any) -> "Trace":
        if not isinstance(data, dict) or "steps" not in data or "method" not in data:
            raise TraceFormatError.keyed("error.trace.not_a_trace")
        version = data.get("schema_version")
        if version not in READABLE_VERSIONS:
            raise TraceFormatError.keyed("error.trace.version", got=short_repr(version),
                                         known=", ".join(map(str, READABLE_VERSIONS)))
        if version == 1:
            data = _upgrade_v1(data)
        steps = data["steps"]
        if isinstance(steps, list) and len(steps) > MAX_TRACE_STEPS:
            raise TraceFormatError.keyed("error.trace.steps", n=len(steps), limit=MAX_TRACE_STEPS)
        vocab_size = _Reader(MAX_TOKEN_ID + 1).value(data.get("vocab_size"), int | None, "vocab_size")
        if vocab_size is not None and not 1 <= vocab_size <= MAX_TOKEN_ID + 1:
            raise TraceFormatError.keyed("error.trace.vocab_size", limit=MAX_TOKEN_ID + 1)
        trace = _Reader(vocab_size or MAX_TOKEN_ID + 1).record(cls, data, "trace")
        check_invariants(trace)
        return trace

    @classmethod
    def from_json(cls, text: str | bytes) -> "Trace":
        """A trace from a file's bytes: anything that is not readable JSON gets a trace-format message of ours
        (never the JSON reader's own words), as does JSON of a shape no trace has (`from_dict`)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceFormatError.keyed("error.trace.json", line=exc.lineno, column=exc.colno) from None
        except UnicodeDecodeError as exc:  # bytes that are not UTF-8 (nor UTF-16/32, which json detects)
            raise TraceFormatError.keyed("error.trace.encoding", position=exc.start) from None
        except RecursionError:  # "[[[[…" nested past Python's reader
            raise TraceFormatError.keyed("error.trace.json_depth") from None
        except ValueError:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
            raise TraceFormatError.keyed("error.trace.json_number", limit=sys.get_int_max_str_digits()) from None
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> "Trace":
        """A trace from a file, read only up to the input limit (`outside.read_bounded`: an endless file stops
        there)."""
        return cls.from_json(read_bounded(path))


def short_repr(value: Any, limit: int = 40) -> str:
    """A value for a message: its repr, cut short (a hostile file must not fill the page)."""
    return shorten(repr(value), limit)


def _upgrade_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A schema-1 trace in schema 2's terms: `rejected` kept only the first refused draft, the rest became
    `discarded`; the time outside draft and verify was not measured (`other_ms` and `setup_ms` are 0)."""
    if not isinstance(data["steps"], list):  # the reader refuses it in schema 2's words
        return {**data, "schema_version": SCHEMA_VERSION}
    steps = []
    for step in data["steps"]:
        if isinstance(step, dict) and isinstance(step.get("rejected"), list) and "discarded" not in step:
            step = {**step, "rejected": step["rejected"][:1], "discarded": step["rejected"][1:]}
        steps.append(step)
    summary = data.get("summary")
    if isinstance(summary, dict):
        summary = {k: v for k, v in summary.items() if k not in ("rejected", "discarded", "other_ms", "setup_ms")}
    return {**data, "steps": steps, "summary": summary, "schema_version": 2}


def text_limit(name: str) -> int:
    """The longest text field `name` may hold (`TEXT_LIMITS`; a prompt as long as this server accepts, if longer; a
    record's field of no entry, MAX_TEXT_CHARS: the trace's own all have one, `tests/test_hostile3.py` checks)."""
    limit = TEXT_LIMITS.get(name, MAX_TEXT_CHARS)
    if limit == MAX_PROMPT_TEXT_CHARS:
        return max(MAX_PROMPT_TEXT_CHARS, 16 * get_settings().max_prompt_tokens)
    return limit


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


class RecordReader:
    """Builds a dataclass record from parsed JSON, driven by its annotations: the one walk for every record the
    project reads back (a trace and its steps here; a benchmark row, its divergence and an aggregate in `bench`).

    Required fields (no default) must be there, a dataclass field is a nested record, `X | None` is either. A
    subclass says how a leaf value is checked (`leaf`), whether keys of no field are ignored or refused, and how
    each refusal reads (`not_an_object`, `missing`, `unknown_fields`).
    """

    refuse_unknown = False  # keys of no field: ignored (a newer schema's), or refused

    def record(self, cls: type, data: Any, where: str) -> Any:
        if not isinstance(data, dict):
            raise self.not_an_object(cls, where, data)
        if self.refuse_unknown:
            unknown = sorted(set(data) - {f.name for f in fields(cls)})
            if unknown:
                raise self.unknown_fields(where, unknown)
        values = {}
        for f in fields(cls):
            if f.name not in data:
                if f.default is MISSING and f.default_factory is MISSING:
                    raise self.missing(where, f.name)
                continue
            values[f.name] = self.value(data[f.name], _hints(cls)[f.name], self.field_where(where, f.name), f.name)
        return cls(**values)

    def value(self, value: Any, hint: Any, where: str, name: str = "") -> Any:
        origin, args = get_origin(hint), get_args(hint)
        if origin in (Union, types.UnionType):
            if value is None and type(None) in args:
                return None
            (inner,) = [a for a in args if a is not type(None)]
            return self.value(value, inner, where, name)
        if isinstance(hint, type) and is_dataclass(hint):
            return self.record(hint, value, where)
        return self.leaf(value, hint, where, name)

    def field_where(self, where: str, name: str) -> str:
        """How a field is named in messages (and in its nested record's)."""
        return f"{where}.{name}"

    def leaf(self, value: Any, hint: Any, where: str, name: str) -> Any:
        raise NotImplementedError

    def not_an_object(self, cls: type, where: str, value: Any) -> Exception:
        raise NotImplementedError

    def missing(self, where: str, name: str) -> Exception:
        raise NotImplementedError

    def unknown_fields(self, where: str, names: list[str]) -> Exception:
        raise NotImplementedError


class _Reader(RecordReader):
    """Checks a trace (untrusted input) against the dataclasses' annotations and builds the records.

    Driven by the annotations, so a field added later is checked without touching this: `int` is a
    non-negative count (not a bool), `float` a finite non-negative number ([0, 1] for PROBABILITIES),
    `str` valid text, `list[int]` token ids below the vocabulary size, `dict[str, Any]` a small JSON
    object, a dataclass a nested record, `X | None` either. Sizes are bounded by the MAX_* limits.
    Keys of no field (a newer schema's) are ignored.
    """

    def __init__(self, id_limit: int) -> None:
        self.id_limit = id_limit  # token ids must be below this
        self.tokens = 0  # token ids read so far (MAX_TRACE_TOKENS)

    def fail(self, where: str, expected: str, value: Any) -> TraceFormatError:
        """`expected`: a `Message` (translated with the refusal) or a name as it is."""
        return TraceFormatError.keyed("error.trace.must_be", where=shorten(where), expected=expected, got=short_repr(value))

    def not_an_object(self, cls: type, where: str, value: Any) -> TraceFormatError:
        return self.fail(where, Message.keyed("error.trace.an_object", name=cls.__name__), value)

    def missing(self, where: str, name: str) -> TraceFormatError:
        return TraceFormatError.keyed("error.trace.missing", where=shorten(where), name=name)

    def leaf(self, value: Any, hint: Any, where: str, name: str) -> Any:
        origin, args = get_origin(hint), get_args(hint)
        if hint is bool:
            if not isinstance(value, bool):
                raise self.fail(where, Message.keyed("error.trace.a_flag"), value)
            return value
        if hint is int and name in TOKEN_ID_FIELDS:
            return self.token_id(value, where)
        if hint is int:
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_COUNT:
                raise self.fail(where, Message.keyed("error.trace.a_count", limit=MAX_COUNT), value)
            return value
        if hint is float:
            top = 1.0 if name in PROBABILITIES else math.inf
            if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
                    or not 0 <= value <= top):
                raise self.fail(where, Message.keyed("error.trace.a_probability" if top == 1.0 else "error.trace.a_time"), value)
            return float(value)
        if hint is str:
            return self.text(value, where, text_limit(name))
        if origin is list:
            if not isinstance(value, list):
                raise self.fail(where, Message.keyed("error.trace.a_list"), value)
            if len(value) > MAX_LIST_ITEMS:
                raise TraceFormatError.keyed("error.trace.items", where=shorten(where), n=len(value), limit=MAX_LIST_ITEMS)
            (item,) = args
            if name in POSITION_LISTS:
                return [self.leaf(v, int, f"{where}[{i}]", "") for i, v in enumerate(value)]
            if item is int:  # every other list of integers in a trace holds token ids
                return [self.token_id(v, f"{where}[{i}]") for i, v in enumerate(value)]
            return [self.value(v, item, f"{where}[{i}]", name) for i, v in enumerate(value)]
        if origin is dict or hint is dict:
            return self.mapping(value, where, MAX_MAPPING_DEPTH, [0])
        raise TypeError(f"no rule for {where}: {hint!r}")  # a new kind of field: add its rule above

    def token_id(self, value: Any, where: str) -> int:
        self.tokens += 1
        if self.tokens > MAX_TRACE_TOKENS:
            raise TraceFormatError.keyed("error.trace.tokens", limit=MAX_TRACE_TOKENS)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < self.id_limit:
            raise self.fail(where, Message.keyed("error.trace.a_token_id", last=self.id_limit - 1), value)
        return value

    def text(self, value: Any, where: str, limit: int) -> str:
        """Valid text of at most `limit` characters (what the field holds: a token, a prompt, a name)."""
        if not isinstance(value, str):
            raise self.fail(where, Message.keyed("error.trace.text"), value)
        if len(value) > limit:
            raise TraceFormatError.keyed("error.trace.chars", where=shorten(where), n=len(value), limit=limit)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate ("\ud800" in JSON): not text a page can show
            raise TraceFormatError.keyed("error.trace.surrogate", where=shorten(where)) from None
        return value

    def mapping(self, value: Any, where: str, depth: int, count: list[int]) -> Any:
        """A free-form JSON value (params, decoding, env): small, shallow, finite numbers, valid text."""
        count[0] += 1
        if count[0] > MAX_MAPPING_ITEMS:
            raise TraceFormatError.keyed("error.trace.mapping_items", where=shorten(where), limit=MAX_MAPPING_ITEMS)
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int):
            if abs(value) > MAX_COUNT:
                raise self.fail(where, Message.keyed("error.trace.a_small_number", limit=MAX_COUNT), value)
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise self.fail(where, Message.keyed("error.trace.a_finite_number"), value)
            return value
        if isinstance(value, str):
            return self.text(value, where, MAX_MAPPING_TEXT_CHARS)
        if depth <= 0 or not isinstance(value, (list, dict)):
            raise self.fail(where, Message.keyed("error.trace.shallow", limit=MAX_MAPPING_DEPTH), value)
        if isinstance(value, list):
            return [self.mapping(v, f"{where}[{i}]", depth - 1, count) for i, v in enumerate(value)]
        return {self.text(k, where, MAX_WORD_TEXT_CHARS): self.mapping(v, f"{where}.{k}", depth - 1, count) for k, v in value.items()}


@dataclass
class StepTotals:
    """The sums a summary is made of, kept one step at a time: a live run's summary after every step costs the same
    at its 500th step as at its first (re-adding every step each time made a run's bookkeeping quadratic in its
    length). `summarize_steps` is built on it, so both give the same figures, bit for bit (the same additions in
    the same order)."""

    new_tokens: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    unverified: int = 0
    draft_ms: float = 0
    verify_ms: float = 0
    other_ms: float = 0
    rejected: int = 0
    discarded: int = 0

    def add(self, s: Step) -> None:
        self.new_tokens += len(s.emitted)
        self.steps += 1
        self.drafted += s.verified_drafts
        self.accepted += s.accepted
        self.unverified += len(s.unverified)
        self.draft_ms += s.draft_ms
        self.verify_ms += s.verify_ms
        self.other_ms += s.other_ms
        self.rejected += len(s.rejected)
        self.discarded += len(s.discarded)

    def summary(self, elapsed_s: float, setup_ms: float = 0.0) -> Summary:
        return Summary(
            new_tokens=self.new_tokens,
            steps=self.steps,
            drafted=self.drafted,
            accepted=self.accepted,
            unverified=self.unverified,
            acceptance_rate=(self.accepted / self.drafted) if self.drafted else None,
            tokens_per_step=(self.new_tokens / self.steps) if self.steps else None,
            elapsed_s=elapsed_s,
            tokens_per_s=(self.new_tokens / elapsed_s) if elapsed_s > 0 else None,
            draft_ms=self.draft_ms,
            verify_ms=self.verify_ms,
            other_ms=self.other_ms,
            setup_ms=setup_ms,
            rejected=self.rejected,
            discarded=self.discarded,
        )


def summarize_steps(steps: list[Step], elapsed_s: float, setup_ms: float = 0.0) -> Summary:
    totals = StepTotals()
    for s in steps:
        totals.add(s)
    return totals.summary(elapsed_s, setup_ms)


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
            raise TraceFormatError.keyed("error.trace.step.accepted_differ", i=i)
        if len(s.emitted) not in (s.accepted, s.accepted + 1):
            raise TraceFormatError.keyed("error.trace.step.emitted_count", i=i, n=len(s.emitted), accepted=s.accepted)
        if s.accepted + len(s.rejected) + len(s.discarded) + len(s.unverified) != len(s.drafted):
            raise TraceFormatError.keyed("error.trace.step.counts", i=i)
        if len(s.rejected) > 1 or (s.discarded and not s.rejected):
            raise TraceFormatError.keyed("error.trace.step.rejected", i=i)
        for name in ("draft_ms", "verify_ms", "other_ms"):
            value = getattr(s, name)
            if not isinstance(value, (int, float)) or not value >= 0:
                raise TraceFormatError.keyed("error.trace.step.time", i=i, name=name)
        if len(s.emitted) == s.accepted and i != len(trace.steps) - 1 and s.emitted:
            raise TraceFormatError.keyed("error.trace.step.cut_short", i=i)
        for name in ("q", "p", "mixture", "draws"):
            values = getattr(s, name)
            if values is not None and (
                len(values) != len(s.drafted) or any(not isinstance(v, (int, float)) or math.isnan(v) for v in values)
            ):
                raise TraceFormatError.keyed("error.trace.step.probabilities", i=i, name=name)
        for texts, ids in (("drafted_text", s.drafted), ("emitted_text", s.emitted)):
            if len(getattr(s, texts)) not in (0, len(ids)):
                raise TraceFormatError.keyed("error.trace.step.texts", i=i, name=texts)
        _check_dists(s, i)
        joined.extend(s.emitted)
    if joined != trace.output_ids:
        raise TraceFormatError.keyed("error.trace.output_ids")
    if len(trace.output_text) > MAX_TOKEN_TEXT_CHARS * len(trace.output_ids):  # a token's text for each output token
        raise TraceFormatError.keyed("error.trace.chars", where="trace.output_text", n=len(trace.output_text),
                                     limit=MAX_TOKEN_TEXT_CHARS * len(trace.output_ids))


def _check_dists(s: Step, i: int) -> None:
    """The microscope's records of step `i`: one position per emitted token, short top-k lists, a source span."""
    if s.dists is not None:
        if len(s.dists) != len(s.emitted):
            raise TraceFormatError.keyed("error.trace.step.dists", i=i)
        for position in s.dists:
            for name in ("p", "q", "v", "residual"):
                ranked = getattr(position, name)
                if ranked is not None and not 1 <= len(ranked) <= MAX_TOP_K:
                    raise TraceFormatError.keyed("error.trace.step.top_k", i=i, name=name, limit=MAX_TOP_K)
    span = s.lookup_source
    if span is not None and (len(span) != 2 or not span[0] < span[1]):
        raise TraceFormatError.keyed("error.trace.step.lookup_source", i=i)
    text = s.lookup_text
    if text is not None and (span is None or len(text) != 4 or not text[1]
                             or max(len(text[0]), len(text[3])) > LOOKUP_CONTEXT_CHARS
                             # the n-gram and the copied draft: a token's text for each of their tokens
                             or len(text[1]) > MAX_TOKEN_TEXT_CHARS * (span[1] - span[0])
                             or len(text[2]) > MAX_TOKEN_TEXT_CHARS * len(s.drafted)):
        raise TraceFormatError.keyed("error.trace.step.lookup_text", i=i, limit=LOOKUP_CONTEXT_CHARS)


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
