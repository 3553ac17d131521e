"""The replay of Transformers' assisted loop on one greedy output (torch-free): the loop's steps for any drafts,
prompt lookup's drafts from the token sequence, and a model drafter's proposals turned into steps per setting.

Pure: the proposals a model drafter makes come from the measuring part (`drafter`), which fills a `Proposals`.
"""

from __future__ import annotations

from typing import Callable, Sequence

from ..drafts import prompt_lookup_match
from ..trace import Step, classify_step

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
        if schedule != "constant":  # heuristic and heuristic_transient: the same rule within one call
            state["length"] = state["length"] + 2 if emitted - 1 == len(drafted) else max(1, state["length"] - 1)

    return replay(y, eos_ids, draft_for, after_step)
