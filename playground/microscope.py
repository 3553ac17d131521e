"""The step microscope's reading of a trace: why the target kept, refused or drew each token (pure: no torch).

A schema-3 trace records, per judged position of a verification step (`Step.dists[i]`, the row of the target's
scores that decided `emitted[i]`), the top-k of the target's p, the drafter's q, ensemble verification's mixture v
and, at a refused position under sampling, the residual the correction was drawn from. `explain` names the rule
Transformers 5.24 applied there (`_assisted_decoding` and `_speculative_sampling`) with this token's numbers, as
keyed `Message`s every surface shows in its visitor's language; `refusal_pairs` and `acceptance_by_confidence` are
the run's own answer to "why is acceptance low?". Which rule applied is read from the data (is there a q, a v, was
it sampling), never from the method's name.

The rules (Transformers 5.24):
- greedy: the draft is kept while it equals the target's top choice (ensemble verification: the top of
  v = w·p + (1−w)·q); the first token that differs is replaced by that top choice; after a fully kept draft the
  target's top choice at the next row is the bonus (ensemble too: the bonus row uses p alone).
- sampling with draft probabilities: the draft is accepted with probability min(1, p/q) (ensemble: min(1, v/q)):
  kept when the uniform draw r (recorded in schema 4, `Step.draws`) is at most p/q; at the first refusal the correction is drawn from max(0, p − q) normalised (ensemble: the same distribution,
  since max(0, v − q) = w·max(0, p − q)); after a fully accepted draft the bonus is drawn from p.
- sampling without draft probabilities (prompt lookup, universal decoding's greedy drafter): the target draws
  its own token from p at every position and the draft is kept while the draws equal it: a draft survives with
  probability p, and the first draw that differs is the correction (from p itself: there is no q to subtract).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from .i18n import DEFAULT_LANGUAGE, Message, Number, normalize, t
from .i18n import number as i18n_number
from .trace import Position, Ranked, Step, Trace

# Outcomes of one position.
KEPT = "kept"  # a draft the target accepted
REFUSED = "refused"  # the first draft the target refused; emitted[i] is its correction
BONUS = "bonus"  # the target's token after a fully accepted draft
TARGET = "target"  # no draft at this position (plain decoding, or a step that drafted nothing)

# Rules.
GREEDY = "greedy"  # compare with the target's top choice
GREEDY_ENSEMBLE = "greedy_ensemble"  # compare with the mixture's top choice
SAMPLING = "sampling"  # min(1, p/q), the residual
SAMPLING_ENSEMBLE = "sampling_ensemble"  # min(1, v/q), the residual
SAMPLING_MATCH = "sampling_match"  # no q: the target draws from p, the draft survives when the draw equals it


@dataclass
class Verdict:
    """The rule that decided one position of a step, with its numbers (`messages`, in order, keyed for i18n)."""

    outcome: str  # KEPT | REFUSED | BONUS | TARGET
    rule: str  # GREEDY | GREEDY_ENSEMBLE | SAMPLING | SAMPLING_ENSEMBLE | SAMPLING_MATCH
    drafted: int | None  # the draft judged at this position (None: bonus, target)
    chosen: int  # the token that went into the output
    messages: list[Message] = field(default_factory=list)
    recorded: bool = True  # False: the trace holds no distributions for this step (schema 1-2, PLAYGROUND_TOP_K=0)
    acceptance: float | None = None  # sampling: the chance the draft was kept (min(1, p/q), min(1, v/q) or p)
    margin: float | None = None  # greedy refusal: the top choice's probability minus the draft's
    # Greedy only: whether the recorded distributions give the outcome the run had (the top choice kept, the top
    # choice as the correction and the bonus); None under sampling, where a draw decided, and where not recorded.
    consistent: bool | None = None
    source: list[int] | None = None  # prompt lookup: [start, end) of the n-gram the draft was copied after
    draw: float | None = None  # speculative sampling: the random draw r compared with the acceptance (schema 4)
    correction: float | None = None  # a sampled refusal: the correction's probability in the residual, as recorded


def number(x: float | None, lang: str = DEFAULT_LANGUAGE) -> str:
    """A probability as the microscope writes it (three decimals, or two significant digits when tiny), in `lang`'s
    digits and decimal sign. Inside a message it is a `Number`, written in the page's language when shown."""
    if x is None:
        return "?"
    written = Number(x, ".3f" if x >= 0.001 or x == 0 else ".1e")
    return written if normalize(lang) == DEFAULT_LANGUAGE else written.localized(lang)


def numbers_apart(a: float, b: float) -> tuple[Number, Number, Number]:
    """`a`, `b` and `a − b` written with the fewest decimals (three at least, nine at most) at which `a` and `b`
    read differently: a refusal at "0.078 vs 0.078, margin 0.000" shows its digits instead."""
    spec = ".3f"
    for digits in range(3, 10):
        spec = f".{digits}f"
        if i18n_number(a, DEFAULT_LANGUAGE, spec) != i18n_number(b, DEFAULT_LANGUAGE, spec):
            break
    return Number(a, spec), Number(b, spec), Number(a - b, spec)


def visible(text: str) -> str:
    """A token's text with whitespace made visible (a bare space or newline would read as nothing)."""
    if not text:
        return "∅"
    shown = text.replace("\n", "↵").replace("\t", "⇥")
    if not text.strip():
        shown = shown.replace(" ", "␣")
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"
                   for c in shown)


def _prob_of(ranked: Sequence[Ranked] | None, token: int) -> float | None:
    for entry in ranked or ():
        if entry.id == token:
            return entry.prob
    return None


def _texts(step: Step) -> tuple[list[str], list[str]]:
    return (step.drafted_text or [""] * len(step.drafted), step.emitted_text or [""] * len(step.emitted))


def outcome_at(step: Step, i: int) -> tuple[str, int | None]:
    """(outcome, drafted id or None) of position i (0 ≤ i < len(step.emitted))."""
    if not step.drafted or i >= len(step.drafted):
        return (BONUS if step.drafted else TARGET), None
    if i < step.accepted:
        return KEPT, step.drafted[i]
    if step.rejected and i == step.accepted:
        return REFUSED, step.drafted[i]
    return BONUS, None


def rule_of(step: Step, i: int, decoding: dict[str, Any]) -> str:
    """The rule Transformers applied at position i: read from the data (sampling or not, did the step have draft
    probabilities q, an ensemble mixture v), not from the method's name."""
    sample = bool(decoding.get("sample"))
    has_q, has_v = step.q is not None, step.mixture is not None
    if not sample:
        return GREEDY_ENSEMBLE if has_v and i < len(step.drafted) else GREEDY
    if has_q or has_v:
        return SAMPLING_ENSEMBLE if has_v else SAMPLING
    return SAMPLING_MATCH


def explain(step: Step, i: int, decoding: dict[str, Any]) -> Verdict:
    """The rule that decided position `i` of `step` (the row that chose `emitted[i]`, and judged `drafted[i]` where
    there was one), with this token's numbers. Raises IndexError for a position the step does not have."""
    if not 0 <= i < len(step.emitted):
        raise IndexError(f"step {step.index} has positions 0 to {len(step.emitted) - 1}; got {i}")
    outcome, drafted = outcome_at(step, i)
    chosen = step.emitted[i]
    drafted_texts, emitted_texts = _texts(step)
    token = visible(emitted_texts[i])
    draft = visible(drafted_texts[i]) if drafted is not None else ""
    position = step.dists[i] if step.dists is not None and i < len(step.dists) else None
    rule = rule_of(step, i, decoding)
    verdict = Verdict(outcome=outcome, rule=rule, drafted=drafted, chosen=chosen, recorded=position is not None,
                      source=step.lookup_source if drafted is not None else None)
    if position is None:
        verdict.messages.append(Message.keyed("microscope.not_recorded"))
        return verdict
    says = verdict.messages.append
    p_chosen = position.p_emitted if position.p_emitted is not None else _prob_of(position.p, chosen)
    if rule in (GREEDY, GREEDY_ENSEMBLE):
        judged = position.v if rule == GREEDY_ENSEMBLE and position.v is not None else position.p
        top = judged[0]
        top_text = visible(_top_text(top, step, i))
        if outcome == TARGET:
            says(Message.keyed("microscope.greedy.target", token=token, p=number(p_chosen)))
            verdict.consistent = position.p[0].id == chosen
        elif outcome == BONUS:
            says(Message.keyed("microscope.greedy.bonus", token=token, p=number(p_chosen)))
            verdict.consistent = position.p[0].id == chosen
        elif rule == GREEDY_ENSEMBLE:
            v = position.v_drafted
            if outcome == KEPT:
                says(Message.keyed("microscope.ensemble.greedy.kept", draft=draft, v=number(v)))
                if position.p[0].id != drafted:
                    says(Message.keyed("microscope.ensemble.greedy.p_alone", top=visible(_top_text(position.p[0], step, i)),
                                       p_top=number(position.p[0].prob), p=number(position.p_drafted)))
            else:
                verdict.margin = top.prob - (v or 0.0)
                v_top, v_draft, margin = numbers_apart(top.prob, v or 0.0)
                says(Message.keyed("microscope.ensemble.greedy.refused", draft=draft, v=v_draft, top=top_text,
                                   v_top=v_top, margin=margin))
            verdict.consistent = (top.id == drafted) == (outcome == KEPT) and (outcome == KEPT or top.id == chosen)
        else:
            p = position.p_drafted
            if outcome == KEPT:
                says(Message.keyed("microscope.greedy.kept", draft=draft, p=number(p)))
            else:
                verdict.margin = top.prob - (p or 0.0)
                p_top, p_draft, margin = numbers_apart(top.prob, p or 0.0)
                says(Message.keyed("microscope.greedy.refused", draft=draft, p=p_draft, top=top_text,
                                   p_top=p_top, margin=margin))
            verdict.consistent = (top.id == drafted) == (outcome == KEPT) and (outcome == KEPT or top.id == chosen)
        return verdict
    if outcome == TARGET:
        says(Message.keyed("microscope.sampling.target", token=token, p=number(p_chosen)))
        return verdict
    if outcome == BONUS:
        says(Message.keyed("microscope.sampling.bonus", token=token, p=number(p_chosen)))
        return verdict
    p, q, v = position.p_drafted, position.q_drafted, position.v_drafted
    if rule == SAMPLING_MATCH:
        verdict.acceptance = p
        if outcome == KEPT:
            says(Message.keyed("microscope.match.kept", draft=draft, p=number(p)))
        else:
            says(Message.keyed("microscope.match.refused", draft=draft, p=number(p), token=token,
                               p_token=number(p_chosen)))
        return verdict
    verdict.draw = step.draws[i] if step.draws is not None and i < len(step.draws) else None
    if rule == SAMPLING_ENSEMBLE:
        verdict.acceptance = min(1.0, v / q) if v is not None and q else None
        alone = min(1.0, p / q) if p is not None and q else None
        key = "microscope.ensemble.sampling.kept" if outcome == KEPT else "microscope.ensemble.sampling.refused"
        says(Message.keyed(key, draft=draft, v=number(v), q=number(q), a=number(verdict.acceptance)))
        says(_draw_message(verdict))
        says(Message.keyed("microscope.ensemble.sampling.p_alone", p=number(p), q=number(q), a=number(alone)))
    else:
        verdict.acceptance = min(1.0, p / q) if p is not None and q else None
        key = "microscope.sampling.kept" if outcome == KEPT else "microscope.sampling.refused"
        says(Message.keyed(key, draft=draft, p=number(p), q=number(q), a=number(verdict.acceptance)))
        says(_draw_message(verdict))
    if outcome == REFUSED:
        r = position.residual_emitted if position.residual_emitted is not None else _prob_of(position.residual, chosen)
        verdict.correction = r
        if r is None:
            says(Message.keyed("microscope.sampling.correction_outside", token=token, k=len(position.residual or ())))
        else:
            says(Message.keyed("microscope.sampling.correction", token=token, r=number(r)))
    return verdict


def self_draft_note(trace: Trace, verdict: Verdict) -> Message | None:
    """Why q differs from p where the target drafts for itself under sampling (None elsewhere). Transformers 5.24
    hands the target's logits processors, its temperature warper included, to the drafter's own generate()
    (`AssistedCandidateGenerator._prepare_generation_args`), whose `_get_logits_processor` appends the temperature
    warper of the same generation config again: the drafter's scores are divided by T twice, so q is the model's
    distribution at T², p at T. At T = 1 no warper is added and q = p."""
    temperature = trace.decoding.get("temperature")
    if (verdict.rule not in (SAMPLING, SAMPLING_ENSEMBLE) or verdict.drafted is None or not trace.assistant
            or trace.assistant != trace.target or not temperature or temperature == 1.0):
        return None
    return Message.keyed("microscope.sampling.self_draft", temperature=Number(temperature, "g"),
                         temperature_squared=Number(temperature * temperature, "g"))


def _draw_message(verdict: Verdict) -> Message:
    """Why the draw kept or refused the draft: "kept because r ≤ a" / "refused because r > a" with the recorded r;
    where the chance a is 1, kept whatever the draw; a trace without draws says r is not recorded."""
    r, a = verdict.draw, verdict.acceptance
    if a is not None and a >= 1.0 and verdict.outcome == KEPT:
        return (Message.keyed("microscope.draw.always", r=number(r)) if r is not None
                else Message.keyed("microscope.draw.always_unrecorded"))
    if r is None or a is None:
        return Message.keyed("microscope.draw.unrecorded", a=number(a))
    written_r, written_a = draw_numbers(r, a)
    key = "microscope.draw.kept" if verdict.outcome == KEPT else "microscope.draw.refused"
    return Message.keyed(key, r=written_r, a=written_a)


def draw_numbers(r: float, a: float) -> tuple[Number, Number]:
    """The draw r and the chance a written side by side, as every surface compares them: with the decimals that tell
    them apart (`numbers_apart`); where either is under 0.001, in the exponent form `number` gives a tiny
    probability (a chance of 2.7e-4 is not written 0.000 next to the 2.7e-4 of its formula), with the digits that tell
    them apart."""
    if min(r, a) >= 0.001 or r == a:
        written_r, written_a, _ = numbers_apart(r, a)
        return written_r, written_a
    spec = ".1e"
    for digits in range(1, 9):
        spec = f".{digits}e"
        if format(r, spec) != format(a, spec):
            break
    tiny = lambda x: Number(x, spec if x < 0.001 and x != 0 else ".3f")  # noqa: E731
    return tiny(r), tiny(a)


def _top_text(entry: Ranked, step: Step, i: int) -> str:
    """A top-k entry's text (recorded with it; the step's own texts where the entry carries none)."""
    if entry.text:
        return entry.text
    drafted_texts, emitted_texts = _texts(step)
    if i < len(step.emitted) and step.emitted[i] == entry.id:
        return emitted_texts[i]
    if i < len(step.drafted) and step.drafted[i] == entry.id:
        return drafted_texts[i]
    return str(entry.id)


def refusal_pairs(trace: Trace) -> list[tuple[int, str, int, str, int]]:
    """The run's refusals as (drafted id, its text, the target's token id, its text, count), most frequent first
    (ties: the pair seen first). The target's token is what the target emitted in the draft's place."""
    counts: Counter[tuple[int, int]] = Counter()
    texts: dict[tuple[int, int], tuple[str, str]] = {}
    for step in trace.steps:
        if not step.rejected or step.accepted >= len(step.emitted):
            continue
        drafted_texts, emitted_texts = _texts(step)
        pair = (step.rejected[0], step.emitted[step.accepted])
        counts[pair] += 1
        texts.setdefault(pair, (drafted_texts[step.accepted], emitted_texts[step.accepted]))
    order = {pair: n for n, pair in enumerate(texts)}
    ranked = sorted(counts.items(), key=lambda item: (-item[1], order[item[0]]))
    return [(d, texts[(d, e)][0], e, texts[(d, e)][1], n) for (d, e), n in ranked]


def acceptance_by_confidence(trace: Trace, buckets: Sequence[float]) -> list[tuple[float, float, int, int]]:
    """Acceptance by how sure the drafter was: for each bucket [lo, hi) of q of the drafted token (the last one
    closed, [lo, hi]), (lo, hi, drafts judged, drafts accepted). Drafts never judged (discarded, unverified) and
    steps without q (prompt lookup, greedy universal decoding) count nowhere. `buckets`: ascending edges."""
    edges = list(buckets)
    rows: list[list[float]] = [[lo, hi, 0, 0] for lo, hi in zip(edges, edges[1:])]
    for step in trace.steps:
        if step.q is None:
            continue
        for k in range(min(step.judged_drafts, len(step.q))):
            q = step.q[k]
            for n, row in enumerate(rows):
                last = n == len(rows) - 1
                if row[0] <= q < row[1] or (last and q == row[1]):
                    row[2] += 1
                    row[3] += int(k < step.accepted)
                    break
    return [(float(lo), float(hi), int(judged), int(accepted)) for lo, hi, judged, accepted in rows]


# --------------------------------------------------------------------------- what both surfaces show

CONFIDENCE_BUCKETS: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # q of the drafted token
MAX_REFUSAL_ROWS = 10
# The per-run tables' captions and column labels: one set of keys for the page's HTML and the CLI's text.
REFUSALS_CAPTION = "micro.refusals.caption"
REFUSALS_COLUMNS = ("micro.refusals.drafted", "micro.refusals.target", "micro.refusals.count")
CONFIDENCE_CAPTION = "micro.confidence.caption"
CONFIDENCE_COLUMNS = ("micro.confidence.q", "micro.confidence.judged", "micro.confidence.accepted")


@dataclass
class Shown:
    """One top-k list of a position as the panel and the CLI both show it: its title's key (formatted with k), the
    entries, the drafted token's probability in this distribution (named below the list when outside the top-k),
    and the token to mark as chosen with `chosen_mark`'s label (none in the drafter's own q)."""

    kind: str  # "p" | "q" | "v" | "residual"
    title: str
    ranked: Sequence[Ranked]
    drafted_prob: float | None
    chosen: int | None
    chosen_mark: str


MARK_DRAFTED = "microscope.mark.drafted"


def shown_lists(position: Position, verdict: Verdict) -> list[Shown]:
    """The recorded top-k lists of one position, in the order both surfaces show them: p, q, v, the residual."""
    lists = [Shown("p", "microscope.list.p", position.p, position.p_drafted, verdict.chosen,
                   "microscope.mark.emitted")]
    if position.q is not None:
        lists.append(Shown("q", "microscope.list.q", position.q, position.q_drafted, None, ""))
    if position.v is not None:
        lists.append(Shown("v", "microscope.list.v", position.v, position.v_drafted, verdict.chosen,
                           "microscope.mark.emitted"))
    if position.residual is not None:
        lists.append(Shown("residual", "microscope.list.residual", position.residual, None, verdict.chosen,
                           "micro.mark.drawn"))
    return lists


def heading_key(verdict: Verdict) -> str:
    """The key of what a position holds (the draft kept, refused and replaced, a bonus, a target's own token), the
    `{what}` of `microscope.heading`."""
    return f"microscope.what.{verdict.outcome}"


def source_where(trace: Trace, source: Sequence[int]) -> str:
    """The key naming where prompt lookup's source lies: in the prompt or in the output so far."""
    return "microscope.source.output" if source[0] >= trace.prompt_tokens else "microscope.source.prompt"


def confidence_rate(judged: int, accepted: int, lang: str = DEFAULT_LANGUAGE) -> str:
    """A bucket's acceptance as both tables write it, in `lang`."""
    return i18n_number(accepted / judged, lang, ".0%") if judged else "–"


# --------------------------------------------------------------------------- as text (the CLI's `show`)


def _ranked_lines(shown: Shown, drafted: int | None, lang: str) -> list[str]:
    lines = []
    for rank, entry in enumerate(shown.ranked, start=1):
        marks = [t(MARK_DRAFTED, lang)] if entry.id == drafted else []
        if entry.id == shown.chosen:
            marks.append(t(shown.chosen_mark, lang))
        mark = f"  ← {', '.join(marks)}" if marks else ""
        text = "'" + visible(entry.text or str(entry.id)) + "'"
        lines.append(f"  {rank:>2}. {number(entry.prob, lang):>8}  {text:<14} [{entry.id}]{mark}")
    return lines


def panel_text(trace: Trace, step_no: int, token_no: int, lang: str = "en") -> str | None:
    """One position as text (`step_no`, `token_no` from 1): what was drafted and emitted there, the rule with its
    numbers, the top-k of p, q, v and the residual with the drafted and emitted tokens marked, prompt lookup's source.
    None when the trace has no such position."""
    if not 1 <= step_no <= len(trace.steps) or not 1 <= token_no <= len(trace.steps[step_no - 1].emitted):
        return None
    step, i = trace.steps[step_no - 1], token_no - 1
    verdict = explain(step, i, trace.decoding)
    drafted_texts, emitted_texts = _texts(step)
    draft = visible(drafted_texts[i]) if verdict.drafted is not None else ""
    what = t(heading_key(verdict), lang, draft=draft, token=visible(emitted_texts[i]))
    lines = [t("microscope.heading", lang, step=step_no, i=token_no, what=what)]
    # The rule with its numbers first, then the lists (as the page's panel: `microscope_view.panel_html`).
    lines.append(t("microscope.rule", lang))
    lines += [f"  {message.localized(lang)}" for message in verdict.messages]
    note = self_draft_note(trace, verdict)
    if note is not None:
        lines.append(f"  {note.localized(lang)}")
    position = step.dists[i] if step.dists is not None and i < len(step.dists) else None
    if position is not None:
        for shown in shown_lists(position, verdict):
            lines.append(t(shown.title, lang, k=len(shown.ranked)))
            lines += _ranked_lines(shown, verdict.drafted, lang)
            if (verdict.drafted is not None and shown.drafted_prob is not None
                    and all(e.id != verdict.drafted for e in shown.ranked)):
                lines.append("      " + t("microscope.outside", lang, draft=draft,
                                          prob=number(shown.drafted_prob, lang), k=len(shown.ranked)))
    if verdict.source is not None:
        start, end = verdict.source
        lines.append(t("microscope.source", lang, start=start, end=end,
                       where=t(source_where(trace, verdict.source), lang)))
        if step.lookup_text is not None:  # the n-gram in ⟦ ⟧, the copy after it in ⟨ ⟩
            before, ngram, copied, after = (part.replace("\n", "↵") for part in step.lookup_text)
            lines.append(f"  …{before}⟦{ngram}⟧⟨{copied}⟩{after}…")
    return "\n".join(lines)


def _text_table(caption: str, columns: Sequence[str], rows: Sequence[Sequence[str]], lang: str) -> list[str]:
    """A caption and its columns as aligned text lines (the page's tables, in a terminal)."""
    cells = [[t(key, lang) for key in columns], *[list(row) for row in rows]]
    widths = [max(len(row[c]) for row in cells) for c in range(len(columns))]
    return [t(caption, lang)] + ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
                                 for row in cells]


def tables_text(trace: Trace, lang: str = "en") -> str:
    """The run's tables as text: the most frequent refusals and acceptance by the drafter's confidence."""
    pairs = refusal_pairs(trace)
    if pairs:
        lines = _text_table(REFUSALS_CAPTION, REFUSALS_COLUMNS, [
            (f"'{visible(draft_text)}' [{draft_id}]", f"'{visible(target_text)}' [{target_id}]", str(count))
            for draft_id, draft_text, target_id, target_text, count in pairs[:MAX_REFUSAL_ROWS]], lang)
    else:
        lines = [t("microscope.refusals.none", lang)]
    rows = acceptance_by_confidence(trace, CONFIDENCE_BUCKETS)
    if not any(judged for _, _, judged, _ in rows):
        lines.append(t("microscope.confidence.none", lang))
        return "\n".join(lines)
    lines += _text_table(CONFIDENCE_CAPTION, CONFIDENCE_COLUMNS, [
        (f"{i18n_number(lo, lang, '.1f')}–{i18n_number(hi, lang, '.1f')}", str(judged),
         confidence_rate(judged, accepted, lang)) for lo, hi, judged, accepted in rows],
        lang)
    return "\n".join(lines)
