"""Tune: every draft setting's outcome from one greedy run (exact in float32); then the best one, measured.

For greedy decoding a lossless method's trajectory is fixed by two things: the target's own greedy
output y (one baseline run through the engine, the same `generate()` call a baseline run makes) and,
at each position i, what the drafter would propose after `prompt + y[:i]`. A step at position i with
draft d accepts the m leading drafts equal to y[i:], emits m + 1 tokens (fewer where the output
ends) and moves on. We replay Transformers 5.24's loop on that record for every setting at once:

* the draft length cap `min(num_assistant_tokens, max_length - cur_len - 1)` of
  `AssistedCandidateGenerator._calculate_new_tokens` (no draft at all when it is 0);
* the heuristic schedules of `update_candidate_strategy` (+2 when `n_matches` equals the draft
  length, else −1, at least 1; `heuristic` and `heuristic_transient` are the same within one
  `generate()` call, and the engine resets the persisted value after each run);
* `ConfidenceCriteria`: the drafter stops *after* the first token whose probability is below the
  threshold (0 = off); the drafter also stops after an EOS token;
* the loop's cut of the emitted tokens at the length budget and at the first EOS (drafts past the
  cut are unverified);
* prompt lookup: `PromptLookupCandidateGenerator.get_candidates` replayed on the token sequence
  (longest n-gram first, earliest occurrence whose continuation is non-empty, copy cut at the
  sequence end and at the first EOS, no draft when one token of budget is left).

The counts are exact where a drafting run's output is the baseline's token for token: greedy decoding in
float32 (tests/test_tune.py runs every setting for real). In bfloat16 or float16 a near-tie between two
tokens can fall the other way in a wider verification than in the baseline's one-token step, so there they
are a prediction from the baseline's output; `counts_exact` says which, and `verify` counts how many of the
settings run for real matched.

Universal decoding re-tokenises every draft through text and re-aligns the assistant's own prompt
each step; its proposals depend on the text of both tokenizers in ways we cannot replay exactly, so
it gets no prediction (nor do sampling, ensemble verification and the MTP methods, and the adaptive
confidence threshold Transformers switches on when scikit-learn is installed).

Cost: each step of a drafting run costs its drafting (one `get_candidates` call of the step's draft length:
Transformers' own candidate generator, its cache crop and its `assistant.generate()`, or one prompt-lookup
`get_candidates`), the target's forward at the step's verification width with the loop's work on its logits, and
the loop's own time once. A calibration on this machine at this context length times the real calls for every
width and draft length the predictions need (every figure in turn, sampled again where the samples spread wide),
a short real run of the method (at least PACE_STEPS steps after its first) gives the loop's own time (its median
`other` phase), the set-up and first step (both prefills) and the absolute level (its draft and verify phases
against the calibrated ones; without it, the baseline's pace). A short baseline after the calibration checks
that the machine kept its pace; where it did not, tune measures again once, then says its times are unreliable. The
baseline the predicted speedups divide takes its later steps at the mean pace of the two baselines (before and after
the calibration), not one run's (`reference_baseline_s`). A setting is recommended over the method's default only where its predicted gain exceeds
the prediction's margin (`TuneResult.margin`); otherwise the default is. Where even the fastest setting is not predicted
faster than plain decoding by more than that margin (`TuneResult.standing`), the verdict says so, and by how much,
and recommends nothing. Timings are predictions; `verify` runs
settings for real, between two baselines, and reports measured beside predicted. docs/tune.md describes the model and the benchmark of its accuracy.
"""

from __future__ import annotations

import contextlib
import copy
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch

from .engine import (LiveRun, RunError, RunRequest, check_stopped, give_way, in_worker_thread, model_locks, prepare,
                     redone_after_giving_way, turn)
from .i18n import Message
from .methods import METHODS, REFERENCE, Method, ensemble_weight, get_method, prompt_lookup_match
from .models import STORE, ModelStore, method_defaults
from .trace import Step, acceptance_by_position, classify_step, summarize_steps

Progress = Callable[[str], None]

SCHEDULES = ("constant", "heuristic", "heuristic_transient")


class TuneError(RunError):
    """The tune request cannot run as given; the message is for the user."""


@dataclass(frozen=True)
class Setting:
    """One draft setting: a method and its full, resolved parameters."""

    method: str
    params: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, method: str, params: dict[str, Any]) -> "Setting":
        resolved = get_method(method).resolve_params(params)
        return cls(method, tuple(sorted(resolved.items())))

    @property
    def values(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def label(self) -> str:
        return f"{self.method}({replay_of(self.method).label(self.values)})"


@dataclass
class Outcome:
    """What a run of one setting does: counts (exact for predictions) and time."""

    steps: int
    drafted: int
    accepted: int
    tokens_per_step: float | None
    time_s: float | None
    speedup: float | None
    new_tokens: int = 0
    unverified: int = 0
    by_position: list[tuple[int, ...]] = field(default_factory=list)  # trace.acceptance_by_position's counts
    samples_s: list[float] = field(default_factory=list)  # measured: each real run's time (`time_s` their median)

    def counts(self) -> tuple[int, int, int]:
        return self.steps, self.drafted, self.accepted


# --- the replay ---------------------------------------------------------------------------------

DraftFor = Callable[[int], list[int]]


def replay(y: Sequence[int], eos_ids: frozenset[int], draft_for: DraftFor,
           after_step: Callable[[list[int], int], None] | None = None) -> list[Step]:
    """The loop's steps for a run whose greedy output is `y`, given the draft proposed at each position.

    `y` ends where the run ended (EOS or the length limit), so a step that reaches its end is cut there.
    `after_step(drafted, emitted_count)` sees what `update_candidate_strategy` sees.
    """
    steps: list[Step] = []
    i, n = 0, len(y)
    while i < n:
        drafted = draft_for(i)
        matches = 0
        while matches < len(drafted) and i + matches < n and drafted[matches] == y[i + matches]:
            matches += 1
        emitted = list(y[i:min(i + matches + 1, n)])
        accepted, rejected, discarded, unverified = classify_step(drafted, emitted, i + len(emitted) == n)
        steps.append(Step(index=len(steps), drafted=list(drafted), accepted=accepted, rejected=rejected,
                          discarded=discarded, emitted=emitted, unverified=unverified))
        if after_step is not None:
            after_step(drafted, len(emitted))
        i += len(emitted)
    return steps


def prompt_lookup_draft(seq: Sequence[int], num_tokens: int, max_ngram: int, max_length: int,
                        eos_ids: frozenset[int], index: "NgramIndex | None" = None) -> list[int]:
    """`PromptLookupCandidateGenerator.get_candidates` for the sequence `seq` (prompt + output so far).

    With `index` (built over a longer sequence that starts with `seq`) the earliest occurrence is found
    in O(1) instead of by scanning.
    """
    return prompt_lookup_match(seq, num_tokens, max_ngram, max_length, eos_ids, index.first if index else None)[0]


class NgramIndex:
    """The earliest position of every n-gram (n ≤ max_n) of a token sequence."""

    def __init__(self, seq: Sequence[int], max_n: int):
        self._first: dict[tuple[int, ...], int] = {}
        for size in range(1, max_n + 1):
            for p in range(len(seq) - size + 1):
                self._first.setdefault(tuple(seq[p:p + size]), p)

    def first(self, ngram: tuple[int, ...]) -> int | None:
        return self._first.get(ngram)


def simulate_prompt_lookup(prompt_ids: Sequence[int], y: Sequence[int], max_new_tokens: int,
                           eos_ids: frozenset[int], num_tokens: int, max_ngram: int,
                           index: NgramIndex | None = None) -> list[Step]:
    """Steps of a prompt-lookup run with these settings (no model needed)."""
    seq = list(prompt_ids) + list(y)
    max_length = len(prompt_ids) + max_new_tokens
    index = index or NgramIndex(seq, max_ngram)
    base = len(prompt_ids)
    return replay(y, eos_ids, lambda i: prompt_lookup_draft(seq[:base + i], num_tokens, max_ngram, max_length,
                                                            eos_ids, index))


class Proposals:
    """What a greedy drafter proposes after `prompt + y[:i]`: tokens (stopping after an EOS) and confidences."""

    def __init__(self, extend: Callable[[int, int], None]):
        self.tokens: dict[int, list[int]] = {}
        self.confidence: dict[int, list[float]] = {}
        self._extend = extend  # extend(i, length): make tokens[i] at least `length` long (or ending in EOS)
        self.ends: set[int] = set()  # positions whose proposal ended with an EOS

    def get(self, i: int, length: int) -> tuple[list[int], list[float]]:
        if i not in self.ends and len(self.tokens.get(i, ())) < length:
            self._extend(i, length)
        return self.tokens[i][:length], self.confidence[i][:length]


def simulate_drafter(y: Sequence[int], max_new_tokens: int, eos_ids: frozenset[int], proposals: Proposals,
                     num_tokens: int, schedule: str, threshold: float) -> list[Step]:
    """Steps of a model-drafted run (speculative, early exit) with these draft-length settings."""
    state = {"length": int(num_tokens)}

    def draft_for(i: int) -> list[int]:
        limit = min(state["length"], max_new_tokens - i - 1)
        if limit <= 0:
            return []
        tokens, confidence = proposals.get(i, limit)
        out: list[int] = []
        for token, conf in zip(tokens, confidence):
            out.append(token)
            if threshold > 0 and conf < threshold:  # ConfidenceCriteria: stop after the unsure token
                break
        return out

    def after_step(drafted: list[int], emitted: int) -> None:
        if schedule in ("heuristic", "heuristic_transient"):
            state["length"] = state["length"] + 2 if emitted - 1 == len(drafted) else max(1, state["length"] - 1)

    return replay(y, eos_ids, draft_for, after_step)


# --- the drafter pass ---------------------------------------------------------------------------

class _GreedyDrafter:
    """Greedy continuations of a causal LM after each prefix `prompt + y[:i]`, sharing KV caches.

    One cache walks along y; a branch copied from it follows the drafter's own continuation, and is
    reused at the next position as long as the drafter agreed with y, so a drafter that agrees costs
    about one forward per position.
    """

    def __init__(self, model: Any, prompt_ids: list[int], y: list[int], eos_ids: frozenset[int]):
        self.model = model
        self.prompt = prompt_ids
        self.y = y
        self.eos = eos_ids
        self.proposals = Proposals(self._extend)
        self._main_cache: Any = None
        self._main_pos = -1  # y-position the main cache has consumed up to (prompt + y[:pos])
        self._main_logits: torch.Tensor | None = None
        self._branch: dict[str, Any] | None = None

    def _forward(self, ids: list[int], cache: Any) -> tuple[torch.Tensor, Any]:
        check_stopped()  # the drafter pass is one forward per token: it ends within one of its visitor leaving
        give_way()  # and gives way within one forward to a visitor's own run (the pass is then redone)
        device = self.model.device
        out = self.model(input_ids=torch.tensor([ids], device=device), cache=cache, use_cache=True)
        return out.logits[0, -1].float(), out.cache

    def _advance_main(self, i: int) -> None:
        if self._main_pos < 0:
            self._main_logits, self._main_cache = self._forward(self.prompt + self.y[:i], None)
            self._main_pos = i
        if i < self._main_pos:  # only for extensions asked for out of order: re-read the prefix
            self._main_logits, self._main_cache = self._forward(self.prompt + self.y[:i], None)
            self._main_pos = i
        while self._main_pos < i:
            self._main_logits, self._main_cache = self._forward([self.y[self._main_pos]], self._main_cache)
            self._main_pos += 1

    @staticmethod
    def _pick(logits: torch.Tensor) -> tuple[int, float]:
        token = int(torch.argmax(logits))
        return token, float(torch.softmax(logits, dim=-1)[token])

    def _branch_for(self, i: int) -> dict[str, Any]:
        b = self._branch
        if b is not None and b["start"] <= i:
            offset = i - b["start"]
            if len(b["tokens"]) >= offset and b["tokens"][:offset] == self.y[b["start"]:i]:
                return b
        self._advance_main(i)
        token, conf = self._pick(self._main_logits)
        b = {"start": i, "tokens": [token], "conf": [conf], "cache": copy.deepcopy(self._main_cache)}
        self._branch = b
        return b

    def _extend(self, i: int, length: int) -> None:
        b = self._branch_for(i)
        offset = i - b["start"]
        while len(b["tokens"]) - offset < length and b["tokens"][-1] not in self.eos:
            logits, b["cache"] = self._forward([b["tokens"][-1]], b["cache"])
            token, conf = self._pick(logits)
            b["tokens"].append(token)
            b["conf"].append(conf)
        self.proposals.tokens[i] = b["tokens"][offset:]
        self.proposals.confidence[i] = b["conf"][offset:]
        if b["tokens"][-1] in self.eos:
            self.proposals.ends.add(i)



@contextlib.contextmanager
def _at_the_models(models: Sequence[Any]) -> Iterator[None]:
    """Hold each distinct model's generation lock (a model may be its own assistant), in the engine's order."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(turn())  # a visitor's own run waiting for these models goes first
        for lock in model_locks(list(models)):
            stack.enter_context(lock)
        stack.enter_context(torch.inference_mode())
        yield


@contextlib.contextmanager
def _first_layers(model: Any, layers: int | None) -> Iterator[None]:
    """Run `model` on its first `layers` layers, as `EarlyExitCandidateGenerator.get_candidates` does."""
    if layers is None:
        yield
        return
    base = getattr(model, model.base_model_prefix)
    full = base.config.num_hidden_layers
    base.config.num_hidden_layers = layers
    try:
        yield
    finally:
        base.config.num_hidden_layers = full


# --- cost -------------------------------------------------------------------------------------

# A calibrated figure whose samples spread wider than this (max − min over the median) is sampled again, up to
# SPREAD_ROUNDS times as many samples; a baseline whose pace changed more than PACE_TOLERANCE (either way) between
# before and after the calibration makes tune measure again once, then call its times unreliable.
SPREAD_LIMIT = 0.25
SPREAD_ROUNDS = 3
PACE_TOLERANCE = 0.25
PACE_CHECK_TOKENS = 16  # the short baseline after the calibration (and the least the method's short run makes)
# The short real run of the method's default gives `scale` (the median pace of its steps after the first) and the loop's
# time: it makes at least this many steps after the first, by the default's own replay. At 16 tokens a 5-token draft
# that is all accepted makes two, whose ratios (0.936 and 1.064, bundled Gemma, summarization) set every prediction.
PACE_STEPS = 6
# Tune recommends a setting over the default only where it predicts it faster by more than this (plus the pace
# change measured under the calibration): the median absolute error of a predicted time measured by
# tests/measure/tune_accuracy.py on the bundled Gemma was 8-16 % per method (docs/tune.md), so a smaller predicted gain
# cannot be told from the prediction's own error.
RECOMMEND_MARGIN = 0.15
WARM_UP_TOKENS = 4  # a baseline's warm-up: enough decode steps to create the one-token kernels before it is timed


def calibration_points(longest: int) -> list[int]:
    """The widths (and draft lengths) calibrated for drafts up to `longest`: every one up to 16, then a sparse
    ladder to `longest` itself, so every length a prediction asks for is calibrated or lies between two that are."""
    dense = list(range(1, min(longest, 16) + 1))
    ladder = [w for w in (24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024) if w < longest]
    return sorted(set(dense + ladder + [max(1, longest)]))


def _at(table: dict[int, float], x: int) -> float:
    """`table[x]`, or a straight line between the calibrated points either side (past the last: through the
    last two, which tune avoids by calibrating up to the longest draft it predicts)."""
    if x in table:
        return table[x]
    keys = sorted(table)
    below = [k for k in keys if k < x]
    above = [k for k in keys if k > x]
    if below and above:
        a, b = below[-1], above[0]
        return table[a] + (table[b] - table[a]) * (x - a) / (b - a)
    a, b = (keys[-2], keys[-1]) if len(keys) > 1 else (keys[-1], keys[-1])
    slope = max(0.0, (table[b] - table[a]) / (b - a)) if b != a else 0.0
    return table[b] + (x - b) * slope


@dataclass
class Calibration:
    """What one drafting run spends on this machine at this context length (seconds), and how sure that is.

    A step of the drafting loop costs its drafting (one `get_candidates` call of the step's draft length: the
    drafter's cache crop and its `assistant.generate()`, or one prompt-lookup `get_candidates`), the target's forward at the step's
    verification width, and the loop's own time around them (candidate handling, cache crop, stopping checks:
    once per step, whatever the width). The calibration times the first two with the real calls (Transformers' own
    candidate generator; the forward with the loop's work on its logits). A short real run of the method, made
    right after, gives the loop's own time (its median `other` phase), the set-up and first step, and the absolute
    level: `scale` is its draft and verify phases ÷ the calibrated ones (without it, the baseline's pace).
    """

    target_prefill_s: float
    target_forward_s: dict[int, float]  # verification width -> one target forward
    drafter_prefill_s: float = 0.0  # the drafter's first call at the calibration's context (its prefill and a draft)
    drafter_call_s: dict[int, float] = field(default_factory=dict)  # draft length -> one get_candidates call
    lookup_call_s: dict[int, float] = field(default_factory=dict)  # max n-gram size -> one prompt-lookup call
    baseline_first_step_s: float = 0.0  # the baseline run's set-up and first step (prefill + first token)
    baseline_forward_s: float = 0.0  # the baseline run's median verification phase of a later step
    loop_s: float = 0.0  # the drafting loop's own time per step: a real run's median `other` phase
    # A real run of the method (its default setting): its set-up and first step (both prefills, the first draft and
    # verification), and that first step's draft length; 0 / None where there is none (the baseline's first step).
    method_first_step_s: float = 0.0
    method_first_draft: int | None = None
    # The same run's pace ÷ the calibration's (its later steps' measured draft + verify phases ÷ the calibrated
    # drafting and verification of those steps); 0 where there is none (then the baseline's pace sets `scale`).
    method_pace: float = 0.0
    method_pace_steps: list[float] = field(default_factory=list)  # its per-step ratios, `method_pace` their median
    spread: float = 0.0  # the widest spread of a calibrated figure's samples, after repeating where it was wide
    pace_change: float = 1.0  # a short baseline's step pace after the calibration ÷ the baseline's before it
    reliable: bool = True  # False: the machine's pace changed under the tune even after measuring again

    def forward(self, width: int) -> float:
        """The target's forward for `width` tokens (calibrated, or between two calibrated widths)."""
        return _at(self.target_forward_s, width)

    def drafter_call(self, length: int) -> float:
        """One `assistant.generate()` call drafting `length` tokens (0: the loop makes no call)."""
        return _at(self.drafter_call_s, length) if length and self.drafter_call_s else 0.0

    @property
    def scale(self) -> float:
        """The drafting loop's pace ÷ the calibration's: measured on a real run of the method (`method_pace`), else
        the baseline's median forward phase against a calibrated one-token forward."""
        if self.method_pace:
            return self.method_pace
        one = self.forward(1) if self.target_forward_s else 0.0
        return self.baseline_forward_s / one if self.baseline_forward_s and one else 1.0

    def drafting_s(self, step: Step, ngram: int | None = None) -> float:
        """A step's drafting at the calibration's pace (`ngram`: prompt lookup's max n-gram size; None: a drafter)."""
        return self.lookup_call_s.get(ngram, 0.0) if ngram is not None else self.drafter_call(len(step.drafted))

    def step_s(self, step: Step, first: bool, ngram: int | None = None) -> float:
        """One step: its drafting, and (after the first, whose forward is the prefill) the target's forward at
        its verification width and the loop's own time."""
        total = self.drafting_s(step, ngram) * self.scale
        if not first:
            total += self.forward(len(step.drafted) + 1) * self.scale + self.loop_s
        return total

    def first_step_s(self, step: Step | None, ngram: int | None = None) -> float:
        """The set-up and first step: a real run's (both prefills, its first draft and verification, measured in the
        loop), its draft exchanged for this step's draft (at the loop's pace, `scale`). Without such a run: the
        baseline's first step, the calibrated drafter's first call and this step's drafting."""
        if self.method_first_draft is None:
            if step is None:
                return self.baseline_first_step_s or self.target_prefill_s
            prefill = self.drafter_prefill_s * self.scale if ngram is None and step.drafted else 0.0
            return (self.baseline_first_step_s or self.target_prefill_s) + prefill + self.step_s(step, True, ngram)
        if ngram is not None or step is None:
            return self.method_first_step_s
        return self.method_first_step_s + (self.drafter_call(len(step.drafted))
                                           - self.drafter_call(self.method_first_draft)) * self.scale

    def predict_s(self, steps: list[Step], ngram: int | None = None) -> float:
        """Predicted time of a run with these steps (`ngram`: prompt lookup's max n-gram size; None: a drafter)."""
        total = self.first_step_s(steps[0] if steps else None, ngram)
        return total + sum(self.step_s(s, False, ngram) for s in steps[1:])


def _sampled_each(measures: dict[int, Callable[[], float]], repeats: int) -> tuple[dict[int, float], float]:
    """(median seconds per key, widest spread) of every `measures[key]()`, sampled in passes that take each key once
    in turn (1, 2, …, N, 1, 2, …, N, …), never one key's samples back to back. The machine's pace drifts over
    seconds: samples taken back to back share one slow or fast spell, so the median of three of them carries that
    spell into the one figure (a calibrated draft of 5 tokens came out above the one of 6, a forward of 10 tokens
    below those of 9 and 11, bundled Gemma at commit a8500a6); interleaved, a spell touches one sample of many
    figures, and each median leaves it out. Keys whose samples still spread wider than SPREAD_LIMIT get more passes
    of their own, up to SPREAD_ROUNDS times `repeats` samples."""
    samples: dict[int, list[float]] = {key: [] for key in measures}

    def passes(keys: list[int]) -> None:
        for _ in range(repeats):
            for key in keys:
                check_stopped()
                give_way()
                samples[key].append(measures[key]())

    passes(list(measures))
    for _ in range(SPREAD_ROUNDS - 1):
        wide = [key for key in measures if _spread(samples[key]) > SPREAD_LIMIT]
        if not wide:
            break
        passes(wide)
    return ({key: statistics.median(values) for key, values in samples.items()},
            max((_spread(values) for values in samples.values()), default=0.0))


def _spread(samples: list[float]) -> float:
    middle = statistics.median(samples)
    return (max(samples) - min(samples)) / middle if middle > 0 else 0.0


def _verification_work(logits: torch.Tensor, width: int) -> None:
    """What the assisted loop does with a verification's logits besides the forward (`_assisted_decoding` 2.3 and 3):
    the last `width` rows to float32, a copy of them, and the greedy pick per row."""
    new_logits = logits[:, -width:].to(dtype=torch.float32)
    new_logits.clone()
    new_logits.argmax(dim=-1)


def _time_forwards(model: Any, context: list[int], widths: Sequence[int], repeats: int
                   ) -> tuple[float, dict[int, float], float]:
    """(prefill time, median verification per width, widest spread) with a KV cache of `context`: the target's
    forward over `width` tokens and the loop's work on its logits."""
    device = model.device
    start = time.perf_counter()
    cache = model(input_ids=torch.tensor([context], device=device), use_cache=True).cache
    prefill = time.perf_counter() - start

    def forward(width: int) -> Callable[[], float]:
        ids = torch.tensor([(context * width)[:width]], device=device)

        def one() -> float:
            # A fresh copy each time: cropping back would need the past recording that sliding-window layers
            # only keep when asked before the prefill.
            scratch = copy.deepcopy(cache)
            start = time.perf_counter()
            _verification_work(model(input_ids=ids, cache=scratch, use_cache=True).logits, width)
            return time.perf_counter() - start

        return one

    times, widest = _sampled_each({width: forward(width) for width in widths}, repeats)
    return prefill, times, widest


def drafter_generator(model: Any, context: list[int], longest: int) -> Any:
    """Transformers' own `AssistedCandidateGenerator` on `model` after `context`, set up as the assisted loop sets it
    up (an assistant `generate()` with its config, its cache recording its past for the crop), drafting without EOS
    or confidence stops so that a call drafts exactly `num_assistant_tokens` tokens."""
    from transformers.generation.candidate_generator import AssistedCandidateGenerator

    config = copy.deepcopy(model.generation_config)
    config.update(max_length=len(context) + longest + 2, min_length=0, do_sample=False, eos_token_id=None,
                  return_dict_in_generate=True, output_scores=True)
    ids = torch.tensor([context], device=model.device)
    generator = AssistedCandidateGenerator(input_ids=ids, assistant_model=model, generation_config=config,
                                           model_kwargs={"attention_mask": torch.ones_like(ids), "use_cache": True})
    # No confidence stop, and no re-fit of the threshold (which keeps lists of probabilities) where scikit-learn is
    # installed: the calibration times drafts of a known length.
    generator.assistant_generation_config.assistant_confidence_threshold = 0.0
    generator.generation_config.assistant_confidence_threshold = 0.0
    generator.generation_config.eos_token_id = None
    return generator


def _time_drafter_calls(model: Any, context: list[int], lengths: Sequence[int], repeats: int
                        ) -> tuple[float, dict[int, float], float]:
    """(the first call's time, median `get_candidates` call per draft length, widest spread): the call the assisted
    loop makes each step, made by Transformers' own candidate generator. After its first call (the drafter's prefill
    of `context`) each call crops the drafter's cache to all but the last two tokens, re-reads those two and drafts
    with the assistant's `generate()`, as every step of the loop does."""
    ids = torch.tensor([context], device=model.device)
    generator = drafter_generator(model, context, max(lengths, default=1))
    generator.num_assistant_tokens = min(lengths, default=1)
    start = time.perf_counter()
    generator.get_candidates(ids)
    first = time.perf_counter() - start

    def call(length: int) -> Callable[[], float]:
        def one() -> float:
            generator.num_assistant_tokens = length
            start = time.perf_counter()
            generator.get_candidates(ids)
            return time.perf_counter() - start

        return one

    times, widest = _sampled_each({length: call(length) for length in lengths}, repeats)
    return first, times, widest


def _time_lookups(context: list[int], ngram_sizes: Sequence[int], tokens: int, eos_ids: frozenset[int],
                  vocab_size: int, repeats: int) -> tuple[dict[int, float], float]:
    """(median prompt-lookup `get_candidates` call per max n-gram size, widest spread) on `context`."""
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    ids = torch.tensor([context])
    eos = torch.tensor(sorted(eos_ids)) if eos_ids else None

    def lookup(size: int) -> Callable[[], float]:
        generator = PromptLookupCandidateGenerator(eos_token_id=eos, num_output_tokens=tokens,
                                                   max_matching_ngram_size=size, max_length=len(context) + tokens + 2,
                                                   vocab_size=vocab_size)

        def one() -> float:
            start = time.perf_counter()
            generator.get_candidates(ids)
            return time.perf_counter() - start

        return one

    return _sampled_each({size: lookup(size) for size in ngram_sizes}, repeats)


def pace_run_tokens(default_steps: Sequence[Step], max_new: int) -> int:
    """New tokens for the short real run of the method's default: enough for PACE_STEPS steps after the first by the
    default's replayed steps (`default_steps`), at least PACE_CHECK_TOKENS, at most the request's `max_new`."""
    needed = sum(len(st.emitted) for st in default_steps[:PACE_STEPS + 1])
    return min(max_new, max(PACE_CHECK_TOKENS, needed))


def step_pace_s(trace: Any, steps: int | None = None) -> float | None:
    """A run's median later step (seconds; the first `steps` steps only, when given): the pace the baseline check
    compares before and after the calibration (a median, so one step held up by another process does not decide)."""
    later = trace.steps[1:steps]
    if not later:
        return None
    return statistics.median(s.draft_ms + s.verify_ms + (s.other_ms or 0.0) for s in later) / 1000


def loop_time_s(trace: Any) -> float | None:
    """The drafting loop's own time per step in a real run: the median over its later steps of the `other` phase
    (what the loop spends outside drafting and verification). Not what is left of draft + verify once calibrated
    figures are taken off: that difference of two noisy figures, each tens of times larger than the loop's few
    milliseconds, came out 0 or 25 ms on one machine, and was then charged on every step."""
    rest = [(s.other_ms or 0.0) / 1000 for s in trace.steps[1:]]
    return statistics.median(rest) if rest else None


def pace_ratios(trace: Any, calibration: Calibration, ngram: int | None = None) -> list[float]:
    """Each later step of a real drafting run: its measured draft + verify phases ÷ the calibrated drafting and
    verification of the same step (the first step is the prefill, which the calibration does not time)."""
    ratios = []
    for st in trace.steps[1:]:
        calibrated = calibration.drafting_s(st, ngram) + calibration.forward(len(st.drafted) + 1)
        if calibrated > 0:
            ratios.append((st.draft_ms + st.verify_ms) / 1000 / calibrated)
    return ratios


def loop_pace(trace: Any, calibration: Calibration, ngram: int | None = None) -> float | None:
    """A real drafting run's pace ÷ the calibration's: the median over its later steps of the measured draft + verify
    phases ÷ the calibrated drafting and verification of the same step. The calls a prediction charges, timed in the
    loop itself, not the baseline's one-token decoding (whose pace against a single calibrated one-token forward
    was 1.36 where the loop's own forwards ran at 1.0 on one machine, summarization at commit fca2a30)."""
    ratios = pace_ratios(trace, calibration, ngram)
    return statistics.median(ratios) if ratios else None


# --- settings ---------------------------------------------------------------------------------

def sweep_settings(method: str, max_draft: int, *, ngram_sizes: Sequence[int] = (1, 2, 3, 4),
                   schedules: Sequence[str] = ("constant", "heuristic"),
                   thresholds: Sequence[float] = (0.0, 0.2, 0.4, 0.6),
                   fixed: dict[str, Any] | None = None) -> list[Setting]:
    """Every setting to predict: draft lengths 1..max_draft crossed with the method's other knobs, plus its default."""
    replay = replay_of(method)
    if max_draft < 1:
        raise TuneError.keyed("error.tune.max_draft_at_least_one", got=max_draft)
    fixed = dict(fixed or {})
    settings = replay.grid(max_draft, Grid(tuple(ngram_sizes), tuple(schedules), tuple(thresholds)),
                           lambda values: Setting.of(method, {**fixed, **values}))
    default = default_setting(method, fixed)
    if default not in settings:
        settings.append(default)
    return list(dict.fromkeys(settings))


def default_setting(method: str, fixed: dict[str, Any] | None = None) -> Setting:
    """The method's default setting in the playground (the registry's defaults, plus fixed parameters)."""
    keep = {k: v for k, v in (fixed or {}).items() if k not in _SWEPT}
    return Setting.of(method, keep)


@dataclass(frozen=True)
class Grid:
    """The values a sweep crosses with the draft lengths (each replay uses the ones its method has)."""

    ngram_sizes: tuple[int, ...]
    schedules: tuple[str, ...]
    thresholds: tuple[float, ...]


MakeSetting = Callable[[dict[str, Any]], Setting]  # swept values -> the setting (the request's fixed values added)


def _copy_grid(max_draft: int, grid: Grid, make: MakeSetting) -> list[Setting]:
    return [make({"prompt_lookup_num_tokens": tokens, "max_matching_ngram_size": size})
            for size in grid.ngram_sizes for tokens in range(1, max_draft + 1)]


def _copy_label(values: dict[str, Any]) -> str:
    return f"tokens={values['prompt_lookup_num_tokens']}, ngram={values['max_matching_ngram_size']}"


def _drafter_grid(max_draft: int, grid: Grid, make: MakeSetting) -> list[Setting]:
    out = []
    for schedule in grid.schedules:
        if schedule not in SCHEDULES:
            raise TuneError.keyed("error.tune.schedule", got=repr(schedule), known=", ".join(SCHEDULES))
        out += [make({"num_assistant_tokens": tokens, "num_assistant_tokens_schedule": schedule,
                      "assistant_confidence_threshold": threshold})
                for threshold in grid.thresholds for tokens in range(1, max_draft + 1)]
    return out


def _drafter_label(values: dict[str, Any]) -> str:
    parts = [f"γ={values['num_assistant_tokens']}"]
    if values["num_assistant_tokens_schedule"] != "constant":
        parts.append(values["num_assistant_tokens_schedule"])
    if values["assistant_confidence_threshold"]:
        parts.append(f"conf≥{values['assistant_confidence_threshold']:g}")
    return ", ".join(parts)


@dataclass(frozen=True)
class Replay:
    """How tune replays one kind of draft source (`Method.draft_replay`): what it sweeps, and with what drafter."""

    swept: tuple[str, ...]  # the parameters a sweep varies (the others stay as the request fixed them)
    grid: Callable[[int, Grid, MakeSetting], list[Setting]]  # the settings for draft lengths 1..max_draft
    label: Callable[[dict[str, Any]], str]  # a setting's swept values in a few characters
    model_pass: bool  # drafts come from a greedy pass of a model (False: from the token sequence alone)
    exit_layer_param: str | None = None  # the drafter is the target cut after this many layers
    # Transformers re-fits the confidence threshold after each step when scikit-learn is installed (only in
    # `AssistedCandidateGenerator` itself, not its early-exit subclass), which tune does not replay.
    refits_threshold: bool = False


_DRAFTER_SWEPT = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
REPLAYS: dict[str, Replay] = {
    "context_copy": Replay(("prompt_lookup_num_tokens", "max_matching_ngram_size"), _copy_grid, _copy_label,
                           model_pass=False),
    "assistant_model": Replay(_DRAFTER_SWEPT, _drafter_grid, _drafter_label, model_pass=True, refits_threshold=True),
    "early_layers": Replay(_DRAFTER_SWEPT, _drafter_grid, _drafter_label, model_pass=True,
                           exit_layer_param="assistant_early_exit"),
}
_SWEPT = tuple(dict.fromkeys(name for replay in REPLAYS.values() for name in replay.swept))


def not_tunable_reason(name: str) -> Message | None:
    """Why tune offers no prediction for the method `name` (None: it has an exact replay); English as a `str`,
    translated on the page."""
    method: Method | None = METHODS.get(name)
    if method is None:
        return Message.keyed("tune.reason.cannot_predict", name=name)
    if method.draft_replay is None:
        return method.replay_obstacle_message() or Message.keyed("tune.reason.cannot_predict", name=name)
    return None


def replay_of(name: str) -> Replay:
    """The replay of the method `name`'s drafts; TuneError with the registry's reason where it has none."""
    reason = not_tunable_reason(name)
    if reason:
        raise TuneError.saying(reason)
    return REPLAYS[METHODS[name].draft_replay]  # type: ignore[index]


def _refusal(setting: Setting) -> Message | None:
    """Why one setting of a tunable method gets no prediction (None: it gets one)."""
    values = setting.values
    if ensemble_weight(values) is not None:
        return Message.keyed("tune.reason.ensemble_lossy")
    if values.get("assistant_confidence_threshold") and replay_of(setting.method).refits_threshold:
        from transformers.utils import is_sklearn_available

        if is_sklearn_available():
            return Message.keyed("tune.reason.threshold_refit")
    return None


# --- one prompt -------------------------------------------------------------------------------

@dataclass
class Row:
    setting: Setting
    predicted: Outcome | None
    refused: str | None = None  # an i18n.Message when tune built it (its English as a str)
    measured: Outcome | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.setting.method, "label": self.setting.label, "params": self.setting.values,
                "predicted": asdict(self.predicted) if self.predicted else None,
                "measured": asdict(self.measured) if self.measured else None, "refused": self.refused}


@dataclass
class PromptTune:
    """Every setting's predicted outcome on one prompt."""

    prompt: str
    prompt_tokens: int
    new_tokens: int
    finish_reason: str
    baseline_s: float  # the reference every predicted speedup divides (`reference_baseline_s`)
    drafter_pass_s: float
    calibration: Calibration
    rows: list[Row]
    env: dict[str, Any] = field(default_factory=dict)
    baseline_run_s: float = 0.0  # the baseline run's own elapsed time, as measured

    def predicted(self) -> list[Row]:
        return [r for r in self.rows if r.predicted is not None]

    def best(self) -> Row | None:
        rows = self.predicted()
        return max(rows, key=lambda r: (r.predicted.speedup or 0.0, -r.predicted.steps)) if rows else None

    def row(self, setting: Setting) -> Row | None:
        return next((r for r in self.rows if r.setting == setting), None)

    def to_dict(self) -> dict[str, Any]:
        best = self.best()
        return {"prompt": self.prompt, "prompt_tokens": self.prompt_tokens, "new_tokens": self.new_tokens,
                "finish_reason": self.finish_reason, "baseline_s": self.baseline_s,
                "baseline_run_s": self.baseline_run_s, "drafter_pass_s": self.drafter_pass_s, "calibration": asdict(self.calibration),
                "best": best.setting.label if best else None, "rows": [r.to_dict() for r in self.rows]}


def outcome_of(steps: list[Step], time_s: float | None, baseline_s: float | None) -> Outcome:
    summary = summarize_steps(steps, time_s or 0.0)
    speedup = baseline_s / time_s if time_s and baseline_s else None
    return Outcome(steps=summary.steps, drafted=summary.drafted, accepted=summary.accepted,
                   tokens_per_step=summary.tokens_per_step, time_s=time_s, speedup=speedup,
                   new_tokens=summary.new_tokens, unverified=summary.unverified,
                   by_position=acceptance_by_position(steps))


@dataclass
class TuneRequest:
    """What to tune: a run request (greedy; its method's non-swept parameters fixed) and the sweep."""

    run: RunRequest
    max_draft: int = 8
    ngram_sizes: tuple[int, ...] = (1, 2, 3, 4)
    schedules: tuple[str, ...] = ("constant", "heuristic")
    thresholds: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6)
    calibration_repeats: int = 3

    def settings(self) -> list[Setting]:
        # The target's own defaults (the catalogue's, e.g. early exit's layer) stand where the run leaves them out,
        # as they do in a run of the playground.
        fixed = {**method_defaults(self.run.target, self.run.method), **self.run.params}
        return sweep_settings(self.run.method, self.max_draft, ngram_sizes=self.ngram_sizes,
                              schedules=self.schedules, thresholds=self.thresholds, fixed=fixed)


def _check(request: TuneRequest) -> None:
    run = request.run
    if run.sample:
        raise TuneError.keyed("error.tune.greedy_only")
    replay = replay_of(run.method)
    if not 1 <= request.max_draft <= 64:
        raise TuneError.keyed("error.tune.max_draft_range", got=request.max_draft)
    if ensemble_weight(run.params) is not None:
        raise TuneError.keyed("error.tune.ensemble_lossy")
    if "max_matching_ngram_size" in replay.swept and not all(1 <= n <= 10 for n in request.ngram_sizes):
        raise TuneError.keyed("error.tune.ngram_sizes")


def counts_exact(dtype: str, sample: bool = False) -> bool:
    """Whether tune's counts are exact for a run in `dtype`: only greedy float32 is proven token for token."""
    return dtype == "float32" and not sample


def run_baseline(run: RunRequest, store: ModelStore, progress: Progress | None = None) -> Any:
    """The target's greedy output through the engine: the same `generate()` call a baseline run makes.

    The warm-up decodes a few tokens, not one: a one-token run only prefills, so the measured run's first decode
    step would create the one-token kernels (oneDNN primitives, in bfloat16) and pay for them in its time.
    """
    base = run.but(method=REFERENCE, assistant=None, params={})
    LiveRun(prepare(base.but(max_new_tokens=min(WARM_UP_TOKENS, int(run.max_new_tokens))), store, progress)).run()
    return LiveRun(prepare(base, store, progress)).run()


def reference_baseline_s(run_s: float, first_step_s: float, pace_change: float) -> float:
    """The baseline time every predicted speedup divides: the baseline run's set-up and first step (`first_step_s`),
    and its later steps at the mean pace of the two baselines tune runs, that run (`run_s` in all) before the
    calibration and the short check after it (`pace_change` = the check's step pace ÷ the run's).

    One baseline run carries the pace of its moment: over 27 method × category figures of tests/measure/tune_accuracy.py
    (commits 64aca3b, a0bf4f9, add47be) tune's baseline ÷ the baselines measured beside the real runs had a median
    error of 6.9 % (max 19.9 %), and followed the check (correlation 0.74 with the check's pace ÷ the run's); at the
    two runs' mean pace it came to 5.1 % (max 13.5 %). The check alone did no better than the run (7.1 %): two moments
    are better than one, as `verify`'s reference is the mean of a baseline before and one after."""
    later = max(0.0, run_s - first_step_s)
    return first_step_s + later * (1 + pace_change) / 2


def forward_pace_s(trace: Any) -> float:
    """A baseline run's median verification phase over its later steps (seconds; 0 without one): the pace `scale`
    takes, a median so that a cold first decode step or one held up by another process does not set it."""
    later = [st.verify_ms for st in trace.steps[1:]]
    return statistics.median(later) / 1000 if later else 0.0


def tune_prompt(request: TuneRequest, store: ModelStore = STORE, progress: Progress | None = None) -> PromptTune:
    """One baseline pass, one drafter pass, a calibration checked against the baseline's pace; every setting's
    predicted outcome."""
    _check(request)
    run = request.run
    settings = request.settings()
    method_run = prepare(run.but(params={k: v for k, v in run.params.items() if k not in _SWEPT}), store, progress)
    if progress:
        progress("baseline pass")
    baseline = run_baseline(run, store, progress)
    if baseline.finish_reason not in ("eos", "length"):
        raise TuneError.keyed("error.tune.baseline_ended", reason=baseline.finish_reason)
    y = list(baseline.output_ids)
    prompt_ids = method_run.input_ids[0].tolist()
    target = method_run.target
    eos = method_run.eos_ids  # the set the assisted loop cuts at
    max_new = int(run.max_new_tokens)
    drafter_model = method_run.assistant.model if method_run.assistant is not None else target.model
    replay = replay_of(run.method)
    layers = int(method_run.params[replay.exit_layer_param]) if replay.exit_layer_param else None
    steps_by_setting: dict[Setting, list[Step]] = {}
    refused: dict[Setting, Message] = {}
    for s in settings:
        reason = _refusal(s)
        if reason:
            refused[s] = reason

    def drafter_pass() -> float:
        with _at_the_models(method_run.models()):
            start = time.perf_counter()
            if not replay.model_pass:
                index = NgramIndex(prompt_ids + y, max(request.ngram_sizes + (get_method(run.method).defaults()
                                                                              ["max_matching_ngram_size"],)))
                for s in settings:
                    v = s.values
                    steps_by_setting[s] = simulate_prompt_lookup(prompt_ids, y, max_new, eos,
                                                                 v["prompt_lookup_num_tokens"],
                                                                 v["max_matching_ngram_size"], index)
            else:
                with _first_layers(drafter_model, layers):
                    drafter = _GreedyDrafter(drafter_model, prompt_ids, y, eos)
                    for i in range(len(y)):
                        drafter.proposals.get(i, min(request.max_draft, max(0, max_new - i - 1)) or 1)
                    for s in settings:
                        if s in refused:
                            continue
                        v = s.values
                        steps_by_setting[s] = simulate_drafter(y, max_new, eos, drafter.proposals,
                                                               v["num_assistant_tokens"],
                                                               v["num_assistant_tokens_schedule"],
                                                               float(v["assistant_confidence_threshold"]))
            return time.perf_counter() - start

    if progress:
        progress("drafter pass")
    pass_s = in_worker_thread(lambda: redone_after_giving_way(drafter_pass), "playground-tune")
    # Calibrate every draft length a prediction asks for (a heuristic schedule can outgrow max_draft).
    longest = max((len(st.drafted) for steps in steps_by_setting.values() for st in steps), default=0)
    context = (prompt_ids + y)[: len(prompt_ids) + len(y) // 2]
    ngram_sizes = sorted({int(s.values["max_matching_ngram_size"]) for s in steps_by_setting}) if not replay.model_pass else []
    copy_tokens = max((int(s.values["prompt_lookup_num_tokens"]) for s in steps_by_setting), default=1) \
        if not replay.model_pass else 0
    vocab = int(target.model.config.get_text_config().vocab_size)

    def calibrate() -> Calibration:
        with _at_the_models(method_run.models()):
            prefill, forwards, spread = _time_forwards(target.model, context, calibration_points(longest + 1),
                                                       request.calibration_repeats)
            calibration = Calibration(target_prefill_s=prefill, target_forward_s=forwards, spread=spread)
            if replay.model_pass:
                with _first_layers(drafter_model, layers):
                    d_prefill, calls, spread = _time_drafter_calls(drafter_model, context,
                                                                   calibration_points(max(1, longest)),
                                                                   request.calibration_repeats)
                calibration.drafter_prefill_s, calibration.drafter_call_s = d_prefill, calls
            else:
                calibration.lookup_call_s, spread = _time_lookups(context, ngram_sizes, copy_tokens, eos, vocab,
                                                                  request.calibration_repeats)
            calibration.spread = max(calibration.spread, spread)
        return calibration

    short = min(PACE_CHECK_TOKENS, max_new)
    default = default_setting(run.method, run.params)
    method_tokens = pace_run_tokens(steps_by_setting.get(default, []), max_new)
    default_ngram = None if replay.model_pass else int(default.values["max_matching_ngram_size"])
    for attempt in range(2):
        if progress:
            progress("calibration" if not attempt else "the machine's pace changed: measuring again")
        if attempt:
            baseline = run_baseline(run, store)
        calibration = in_worker_thread(lambda: redone_after_giving_way(calibrate), "playground-tune")
        later = baseline.steps[1:]
        first = baseline.steps[0] if baseline.steps else None
        calibration.baseline_first_step_s = (baseline.setup_ms + first.draft_ms + first.verify_ms + first.other_ms) \
            / 1000 if first else 0.0
        calibration.baseline_forward_s = forward_pace_s(baseline)
        method_trace = run_setting(run.but(max_new_tokens=method_tokens), default, store)
        loop = loop_time_s(method_trace)
        calibration.loop_s = loop if loop is not None else (
            sum(st.other_ms for st in later) / len(later) / 1000 if later else 0.0)
        if method_trace.steps:
            head = method_trace.steps[0]
            calibration.method_first_step_s = (method_trace.setup_ms + head.draft_ms + head.verify_ms
                                               + (head.other_ms or 0.0)) / 1000
            calibration.method_first_draft = len(head.drafted)
        calibration.method_pace_steps = pace_ratios(method_trace, calibration, default_ngram)
        calibration.method_pace = loop_pace(method_trace, calibration, default_ngram) or 0.0
        before, after = step_pace_s(baseline, short), step_pace_s(run_baseline(run.but(max_new_tokens=short), store))
        calibration.pace_change = after / before if before and after else 1.0
        if abs(calibration.pace_change - 1) <= PACE_TOLERANCE:
            break
    else:
        calibration.reliable = False
    baseline_run_s = baseline.summary.elapsed_s
    baseline_s = reference_baseline_s(baseline_run_s, calibration.baseline_first_step_s, calibration.pace_change)
    rows = []
    for s in settings:
        if s in refused:
            rows.append(Row(s, None, refused[s]))
            continue
        steps = steps_by_setting[s]
        ngram = None if replay.model_pass else int(s.values["max_matching_ngram_size"])
        rows.append(Row(s, outcome_of(steps, calibration.predict_s(steps, ngram), baseline_s)))
    return PromptTune(prompt=run.prompt, prompt_tokens=len(prompt_ids), new_tokens=len(y),
                      finish_reason=baseline.finish_reason, baseline_s=baseline_s, drafter_pass_s=pass_s,
                      calibration=calibration, rows=rows, env=dict(baseline.env), baseline_run_s=baseline_run_s)


# --- several prompts, the recommendation, and measuring it ---------------------------------------

@dataclass
class TuneResult:
    """Tune over several prompts: per prompt, overall, the recommended setting and (optionally) measured runs."""

    request: TuneRequest
    prompts: list[PromptTune]
    meta: dict[str, Any] = field(default_factory=dict)
    measured: dict[Setting, Outcome] = field(default_factory=dict)  # overall, for settings run for real
    measured_baseline_s: float | None = None

    def overall(self) -> list[Row]:
        """One row per setting over all prompts: summed counts, summed predicted time, Σ baseline / Σ time."""
        total_base = sum(p.baseline_s for p in self.prompts)
        rows: list[Row] = []
        for first in self.prompts[0].rows:
            per = [p.row(first.setting) for p in self.prompts]
            if any(r is None or r.predicted is None for r in per):
                reason = next((r.refused for r in per if r is not None and r.refused), Message.keyed("tune.reason.not_every_prompt"))
                rows.append(Row(first.setting, None, reason, self.measured.get(first.setting)))
                continue
            outs = [r.predicted for r in per]  # type: ignore[union-attr]
            rows.append(Row(first.setting, _sum_outcomes(outs, total_base), None, self.measured.get(first.setting)))
        return rows

    def best(self) -> Row | None:
        rows = [r for r in self.overall() if r.predicted is not None]
        return max(rows, key=lambda r: (r.predicted.speedup or 0.0, -r.predicted.steps)) if rows else None

    def default(self) -> Setting:
        return default_setting(self.request.run.method, self.request.run.params)

    def default_row(self) -> Row | None:
        """The default setting's row over all prompts (None where the sweep has none)."""
        default = self.default()
        return next((r for r in self.overall() if r.setting == default), None)

    def margin(self) -> float:
        """How much faster than the default a setting must be predicted before tune recommends it: the typical
        error of a predicted time (RECOMMEND_MARGIN) plus the largest change of the machine's pace under the
        calibration (a pace that moved by 10 % moves every predicted time by as much)."""
        return RECOMMEND_MARGIN + max((abs(p.calibration.pace_change - 1) for p in self.prompts), default=0.0)

    def predicted_gain(self, row: Row | None = None) -> float | None:
        """How much faster `row` (default: the fastest predicted) is predicted than the default: the default's
        predicted time ÷ its own, minus 1 (None where either has no predicted time)."""
        row = row or self.best()
        default = self.default_row()
        if row is None or default is None or default.predicted is None:
            return None
        if not row.predicted.time_s or not default.predicted.time_s:
            return None
        return default.predicted.time_s / row.predicted.time_s - 1

    def recommended(self) -> Row | None:
        """The setting tune recommends: the fastest predicted one where its predicted gain over the default exceeds
        `margin()`, else the default (a gain inside the prediction's own error is not one the model can tell)."""
        best = self.best()
        gain = self.predicted_gain(best)
        if best is None or gain is None or gain > self.margin():
            return best
        return self.default_row()

    def standing(self) -> str | None:
        """Where the fastest predicted setting stands against plain decoding (`standing_against_baseline` of its
        predicted speedup and `margin()`); None where no setting has a predicted speedup."""
        best = self.best()
        speedup = best.predicted.speedup if best is not None and best.predicted is not None else None
        return standing_against_baseline(speedup, self.margin()) if speedup else None

    def clear_win(self) -> bool:
        """Whether a setting other than the default is predicted faster by more than the margin."""
        best, recommended = self.best(), self.recommended()
        return best is not None and recommended is not None and recommended.setting == best.setting \
            and best.setting != self.default()

    def losses(self) -> list[dict[str, Any]]:
        """For each prompt: its own best setting, and how much it loses with the overall best instead."""
        best = self.best()
        out = []
        for p in self.prompts:
            own = p.best()
            with_best = p.row(best.setting) if best else None
            own_speed = own.predicted.speedup if own and own.predicted else None
            best_speed = with_best.predicted.speedup if with_best and with_best.predicted else None
            loss = (1 - best_speed / own_speed) if own_speed and best_speed else None
            out.append({"prompt": p.prompt[:80], "own_best": own.setting.label if own else None,
                        "own_best_speedup": own_speed, "overall_best_speedup": best_speed, "loss": loss})
        return out

    def verified(self) -> dict[str, int]:
        """How many settings were run for real, and how many of them matched the predicted counts on every prompt."""
        matched = sum(all(r.measured is None or r.predicted is None or r.measured.counts() == r.predicted.counts()
                          for p in self.prompts for r in [p.row(s)] if r is not None)
                      for s in self.measured)
        return {"settings": len(self.measured), "matched": matched}

    def to_dict(self) -> dict[str, Any]:
        best, recommended = self.best(), self.recommended()
        return {"meta": self.meta, "verified": self.verified(),
                "recommended": recommended.setting.label if recommended else None,
                "recommended_params": recommended.setting.values if recommended else None,
                "fastest_predicted": best.setting.label if best else None,
                "predicted_gain": self.predicted_gain(best), "margin": self.margin(), "clear_win": self.clear_win(),
                "standing": self.standing(),
                "default": self.default().label, "measured_baseline_s": self.measured_baseline_s,
                "rows": [r.to_dict() for r in self.overall()], "losses": self.losses(),
                "prompts": [p.to_dict() for p in self.prompts]}


# Where the fastest predicted setting of a method stands against plain decoding (`TuneResult.standing`).
SLOWER, UNCLEAR, FASTER = "slower", "unclear", "faster"


def standing_against_baseline(speedup: float, margin: float) -> str:
    """SLOWER where a setting's predicted speedup over plain decoding is at most 1 (it takes at least the baseline's
    time), UNCLEAR where its gain (speedup − 1: the baseline's time ÷ its predicted time, minus 1) lies inside
    `margin`, FASTER beyond. The margin is the one a setting's gain over the default must exceed
    (`TuneResult.margin`): a gain over the baseline is the same ratio of times, and its error is at least the
    predicted time's (the baseline's time is measured, the setting's predicted)."""
    if speedup <= 1.0:
        return SLOWER
    return UNCLEAR if speedup - 1 <= margin else FASTER


def to_json(data: dict[str, Any]) -> str:
    """tune.json: the result as `TuneResult.to_dict` gives it."""
    return json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False)


def _sum_outcomes(outs: list[Outcome], baseline_s: float | None) -> Outcome:
    steps = sum(o.steps for o in outs)
    new_tokens = sum(o.new_tokens for o in outs)
    times = [o.time_s for o in outs]
    time_s = sum(t for t in times if t is not None) if all(t is not None for t in times) else None
    width = max((len(o.by_position) for o in outs), default=0)
    by_position = [tuple(map(sum, zip(*(o.by_position[k] for o in outs if k < len(o.by_position)))))
                   for k in range(width)]
    return Outcome(steps=steps, drafted=sum(o.drafted for o in outs), accepted=sum(o.accepted for o in outs),
                   tokens_per_step=new_tokens / steps if steps else None, time_s=time_s,
                   speedup=baseline_s / time_s if baseline_s and time_s else None, new_tokens=new_tokens,
                   unverified=sum(o.unverified for o in outs), by_position=by_position,
                   samples_s=[sum(round_s) for round_s in zip(*(o.samples_s for o in outs))])  # per round, summed


def tune(request: TuneRequest, prompts: Sequence[str], store: ModelStore = STORE,
         progress: Progress | None = None) -> TuneResult:
    """Tune over several prompts (the same request with each prompt)."""
    if not prompts:
        raise TuneError.keyed("error.tune.no_prompts")
    results = []
    for k, prompt in enumerate(prompts, 1):
        if progress:
            progress(f"prompt {k}/{len(prompts)}")
        results.append(tune_prompt(TuneRequest(**{**request.__dict__, "run": request.run.but(prompt=prompt)}),
                                   store, progress))
    return TuneResult(request=request, prompts=results, meta={"env": results[0].env,
                                                              "method": request.run.method,
                                                              "target": request.run.target,
                                                              "assistant": request.run.assistant,
                                                              "max_new_tokens": request.run.max_new_tokens,
                                                              "max_draft": request.max_draft,
                                                              "prompts": len(prompts),
                                                              "times_reliable": all(p.calibration.reliable
                                                                                    for p in results),
                                                              "counts_exact": counts_exact(
                                                                  results[0].env.get("dtype", ""),
                                                                  request.run.sample)})


def run_setting(run: RunRequest, setting: Setting, store: ModelStore = STORE,
                progress: Progress | None = None) -> Any:
    """A real run of one setting through the engine (its trace)."""
    return LiveRun(prepare(run.but(method=setting.method, params=setting.values), store, progress)).run()


def verify(result: TuneResult, store: ModelStore = STORE, progress: Progress | None = None,
           settings: Sequence[Setting] | None = None, repeats: int = 1) -> TuneResult:
    """Run the recommended setting, the fastest predicted one (where the margin kept the default) and the default
    for real on every prompt, between two baseline runs (warm).

    The baseline before and after give the reference (their mean) and a check that the machine kept its pace
    under the measurement: `meta["measured_reliable"]` is False where the two differ by more than PACE_TOLERANCE.
    With `repeats` > 1 every setting runs that many times in rounds (each setting once per round, a baseline between
    rounds, never one setting's runs back to back: the pace drifts over seconds), its measured time the median of its
    runs (`Outcome.samples_s` keeps them all) and the reference the median of the baselines; the check compares every
    baseline with the one before it.
    """
    picks = [r.setting for r in (result.recommended(), result.best()) if r is not None]  # the same row, or both
    chosen = list(dict.fromkeys(settings or picks + [result.default()]))
    base_total = 0.0
    changes: list[float] = []
    baselines: list[list[float]] = []
    steps: dict[Setting, list[Outcome]] = {s: [] for s in chosen}
    for p in result.prompts:
        run = result.request.run.but(prompt=p.prompt)
        if progress:
            progress(f"measuring on: {p.prompt[:40]!r}")
        bases = [run_baseline(run, store).summary.elapsed_s]
        traces: dict[Setting, list[Any]] = {s: [] for s in chosen}
        for _ in range(max(1, repeats)):
            for s in chosen:
                traces[s].append(run_setting(run, s, store))
            bases.append(run_baseline(run, store).summary.elapsed_s)
        changes += [after / before if before else 1.0 for before, after in zip(bases, bases[1:])]
        base_s = statistics.median(bases)
        base_total += base_s
        baselines.append(bases)
        for s, runs in traces.items():
            times = [trace.summary.elapsed_s for trace in runs]
            measured = outcome_of(runs[0].steps, statistics.median(times), base_s)
            measured.samples_s = times
            row = p.row(s)
            if row is not None:
                row.measured = measured
            steps[s].append(measured)
    result.measured_baseline_s = base_total
    result.meta["measured_baselines_s"] = baselines
    result.meta["measured_pace_change"] = max(changes, key=lambda c: abs(c - 1), default=1.0)
    result.meta["measured_reliable"] = all(abs(c - 1) <= PACE_TOLERANCE for c in changes)
    for s, outs in steps.items():
        result.measured[s] = _sum_outcomes(outs, base_total)
    return result
