"""What a draft is made of outside a model: prompt lookup's n-gram search, and why a step drafted nothing.

One search for the registry (why a prompt-lookup step drafted nothing), the engine (where each draft was copied from)
and Tune (prompt lookup replayed on a baseline run's ids): `prompt_lookup_match`. Torch-free: plain ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal, Sequence


@dataclass(frozen=True)
class EmptyDraft:
    """What is known about a step that drafted nothing, to say why (torch-free: plain ids)."""

    context: list[int]  # prompt + output before the step
    first_step: bool
    last_position: bool  # one token was left to generate: Transformers' generators draft nothing then
    params: dict[str, Any]
    eos_ids: frozenset[int]  # the run's generation-config EOS set


# Why a step drafted nothing, in the words the trace records (`Step.no_draft_reason`). The English sentence is the
# trace's language-neutral identifier: a replay shows `no_draft.<code>` of the viewer's language (`render`).
NO_DRAFT_REASONS: dict[str, str] = {
    "last_position": "only one token was left to generate, and the target's forward produces it",
    "nothing_proposed": "the drafter proposed nothing",
    "processor_forbade": "a logits processor forbade the copied tokens",
    "eos_match": "the earlier match continues with end-of-sequence, which prompt lookup never drafts",
    "no_match": "no earlier n-gram matched the last tokens",
    "needs_target_outputs": "the drafter needs the target's outputs first",
}


# Which earlier occurrence of the last n-gram prompt lookup copies from. Transformers' `PromptLookupCandidateGenerator`
# scans the context left to right and takes the first match whose continuation is allowed: the earliest, not the most
# recent (`tests/test_lecture_truth.py` runs Transformers' generator on two matches and checks this and the lectures).
PROMPT_LOOKUP_MATCH: Literal["earliest", "most_recent"] = "earliest"


def prompt_lookup_match(seq: Sequence[int], num_tokens: int, max_ngram: int, max_length: int,
                        eos_ids: frozenset[int], first: Callable[[tuple[int, ...]], int | None] | None = None
                        ) -> tuple[list[int], tuple[int, int] | None]:
    """`PromptLookupCandidateGenerator.get_candidates` for the sequence `seq` (prompt + output so far): the draft
    and where it was copied from, [start, end) of the matched n-gram in `seq` (the longest n-gram first, its earliest
    occurrence; the draft is the tokens after it); None where nothing is drafted. `first(ngram)`: the earliest
    position of an n-gram when an index of it is at hand (`tune.NgramIndex`), else the sequence is scanned."""
    length = len(seq)
    if max_length == length + 1:
        return [], None
    for size in range(min(max_ngram, length - 1), 0, -1):
        tail = tuple(seq[length - size:])
        if first is not None:
            earliest = first(tail)
            starts: Iterator[int] = iter([earliest] if earliest is not None else [])
        else:
            starts = (p for p in range(length - size + 1) if tuple(seq[p:p + size]) == tail)
        for start in starts:
            begin, end = start + size, min(start + size + num_tokens, length, max_length)
            if begin < end:
                chosen = list(seq[begin:end])
                for j, token in enumerate(chosen):
                    if token in eos_ids:
                        chosen = chosen[:j]
                        break
                return chosen, ((start, begin) if chosen else None)
            # Only the earliest occurrence matters: a later one ends later and cannot have room either.
            break
    return [], None


def prompt_lookup_empty_reason(empty: EmptyDraft) -> str | None:
    """Transformers' search, replayed on ids by the one search engine and Tune share (`prompt_lookup_match`): the
    longest n-gram first, its earliest occurrence with a continuation; a first copied token that is an EOS means the
    draft was cropped to nothing, any other means something past the search (a processor) emptied it."""
    ids, size_max = empty.context, int(empty.params.get("max_matching_ngram_size") or 2)
    # One token copied, no EOS cut and room to copy it: the match's first token alone, EOS or not, decides.
    copied, _ = prompt_lookup_match(ids, 1, size_max, len(ids) + 2, frozenset())
    if not copied:
        return NO_DRAFT_REASONS["no_match"]
    return NO_DRAFT_REASONS["eos_match" if copied[0] in empty.eos_ids else "processor_forbade"]
