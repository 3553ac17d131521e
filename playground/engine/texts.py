"""Token texts as they read in context (a leading space kept), the run's context decoded once per token, and the text
around prompt lookup's source."""

from __future__ import annotations

from typing import Any, Callable

from ..trace import LOOKUP_CONTEXT_CHARS


LOOKUP_CONTEXT_TOKENS = 48  # tokens decoded on each side of prompt lookup's source (then cut to LOOKUP_CONTEXT_CHARS)


def lookup_text(tokenizer: Any, context: list[int], start: int, end: int, copy_end: int,
                span_texts: Callable[[int, int], list[str]] | None = None) -> list[str]:
    """The text around prompt lookup's source in `context` (token ids, as the model saw them): [before, the n-gram
    context[start:end], the copy context[end:copy_end], after], each token read as it follows the ones before it
    (`token_texts`), with at most LOOKUP_CONTEXT_CHARS of text on each side. `span_texts(a, b)`: those texts of
    context[a:b] where they are at hand (`_ContextTexts.span`)."""
    first = max(0, start - LOOKUP_CONTEXT_TOKENS)
    last = min(len(context), copy_end + LOOKUP_CONTEXT_TOKENS)
    texts = (span_texts(first, last) if span_texts is not None
             else token_texts(tokenizer, context[max(0, first - 4):first], context[first:last]))

    def joined(a: int, b: int) -> str:
        return "".join(texts[a - first:b - first])

    return [joined(first, start)[-LOOKUP_CONTEXT_CHARS:], joined(start, end), joined(end, copy_end),
            joined(copy_end, last)[:LOOKUP_CONTEXT_CHARS]]


def token_texts(tokenizer: Any, context: list[int], ids: list[int]) -> list[str]:
    """Text of each token as it reads after `context` and the tokens before it.

    Decoding a token alone loses leading spaces in SentencePiece-style tokenizers; decoding it
    behind a few tokens of context and taking the difference keeps them.
    """
    texts: list[str] = []
    ctx = list(context[-4:])
    for tid in ids:
        texts.append(_text_after(tokenizer, ctx, _decode(tokenizer, ctx), tid))
        ctx = (ctx + [tid])[-4:]
    return texts


def _decode(tokenizer: Any, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _text_after(tokenizer: Any, ctx: list[int], ctx_text: str, tid: int) -> str:
    """`token_texts` of one token after `ctx`, whose own text (`_decode`) is `ctx_text`."""
    after = _decode(tokenizer, ctx + [tid])
    if after.startswith(ctx_text):
        return after[len(ctx_text):]
    return tokenizer.decode([tid], skip_special_tokens=False)


class _ContextTexts:
    """The run's context (prompt + output so far) and the text of each of its tokens as it reads after the up to 4
    tokens before it (`token_texts`), each decoded once: a step's emitted tokens and prompt lookup's source (about a
    hundred tokens around it, every step) read from here instead of being decoded again."""

    def __init__(self, tokenizer: Any, prompt_ids: list[int]):
        self.tokenizer = tokenizer
        self.ids = prompt_ids
        self._texts: dict[int, str] = {}  # position -> text

    def extend(self, ids: list[int]) -> None:
        self.ids.extend(ids)

    def span(self, start: int, end: int, ahead: list[int] | None = None) -> list[str]:
        """Texts of the tokens at positions [start, end); `ahead`: the tokens from len(ids) on, not yet added."""
        ids = self.ids if not ahead else self.ids + ahead
        out = []
        for j in range(start, end):
            text = self._texts.get(j)
            if text is None:
                text = self._texts[j] = token_texts(self.tokenizer, ids[max(0, j - 4):j], [ids[j]])[0]
            out.append(text)
        return out
