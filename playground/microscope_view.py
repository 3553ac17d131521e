"""The step microscope's panel and per-run tables as HTML: why the target kept, refused or drew one token.

Pure functions over `playground.trace` records and `playground.microscope`'s verdicts (no torch, no Gradio), so a
saved trace opens exactly like a live run. For one judged position of one step (`Step.dists[pos]`, schema 3) the
panel shows the target's top-k p as bars, the drafter's top-k q where the method has draft probabilities, ensemble
verification's mixture v, and under sampling the residual max(0, p − q) normalised the correction was drawn from;
the drafted token is marked in each list (`data-drafted`), the token that went into the output too
(`data-chosen`); then the rule that decided, with this token's numbers (`microscope.explain`), and for prompt lookup
the n-gram the draft was copied after, highlighted in the context. Traces without distributions (schema 1 and 2, or
recorded with PLAYGROUND_TOP_K=0) get a sentence saying so, and the figures the step does hold.

Numbers sit in `<bdi dir="ltr">`, token texts in `<bdi>`: in an Arabic page they read left to right inside right-to-
left sentences, and a token's own letters keep their direction.
"""

from __future__ import annotations

import html
import re
from typing import Sequence

from . import microscope
from .i18n import DEFAULT_LANGUAGE, number, t
from .trace import LOOKUP_CONTEXT_CHARS, Position, Step, Trace



def _num(x: float, lang: str) -> str:
    """A probability as the microscope writes it in `lang`, left to right wherever it stands."""
    return f'<bdi dir="ltr" class="pg-num">{microscope.number(x, lang)}</bdi>'


def _t_html(key: str, lang: str, **fields: str) -> str:
    """A sentence of the catalogue as HTML, with `fields` already HTML (numbers, tokens) put in its escaped text."""
    return html.escape(t(key, lang), quote=False).format(**fields)


# A formula or number inside a sentence: numbers, one-letter variables, min / max and the signs between them.
_FORMULA = re.compile(
    r"(?:(?:(?<![\w])(?:min|max|[A-Za-z])(?![\w])|(?<![\w])\d[\d.]*(?:[eE]\u200e?[+-]?\d+)?(?![\w])"
    r"|[()/,=·−+*≤-]|&gt;|&lt;)[ ]?)+")


def _isolate_numbers(escaped: str) -> str:
    """An escaped sentence with each formula that holds a digit (min(1, 0.3/0.5) = 0.6, p = 0.025) in a left-to-right
    isolate, so it keeps its order inside a right-to-left sentence."""
    def isolate(match: re.Match[str]) -> str:
        run = match.group(0)
        core = run.strip(" ,=")
        while core and (core[-1] in "(,= " or core[0] in "),= "
                        or core.count("(") != core.count(")") and core[-1] in ")(" + core[0]):
            core = core[:-1] if core[-1] in "(,= " or core.count(")") > core.count("(") and core[-1] == ")" \
                else core[1:]
        if not any(c.isdigit() for c in core):
            return run
        lead = run.index(core)
        return f'{run[:lead]}<bdi dir="ltr">{core}</bdi>{run[lead + len(core):]}'
    return _FORMULA.sub(isolate, escaped)


def _token(text: str) -> str:
    """A token's text, whitespace made visible, isolated from the sentence around it."""
    return f'<bdi class="pg-micro-tok">{html.escape(microscope.visible(text))}</bdi>'


def _ranked_list(shown: microscope.Shown, drafted: int | None, drafted_text: str, lang: str) -> str:
    """One top-k list as bars (a bar's length is the probability itself, so lists compare); the drafted token marked,
    and named below the list when it is outside the top-k. Its labels are the CLI's (`microscope.shown_lists`)."""
    rows = []
    for rank, r in enumerate(shown.ranked, start=1):
        marks = []
        flags = ""
        if drafted is not None and r.id == drafted:
            flags += ' data-drafted="true"'
            marks.append(t(microscope.MARK_DRAFTED, lang))
        if shown.chosen is not None and r.id == shown.chosen:
            flags += ' data-chosen="true"'
            marks.append(t(shown.chosen_mark, lang))
        mark = f'<span class="pg-micro-mark">{html.escape(" · ".join(marks))}</span>' if marks else ""
        rows.append(
            f'<li class="pg-micro-row" data-rank="{rank}" data-id="{r.id}" data-prob="{r.prob:.6g}"{flags}>'
            f'{_token(r.text)}<span class="pg-micro-bar"><span style="width:{100 * r.prob:.1f}%"></span></span>'
            f'{_num(r.prob, lang)}{mark}</li>')
    k = f'<bdi dir="ltr">{len(shown.ranked)}</bdi>'
    outside = ""
    if drafted is not None and all(r.id != drafted for r in shown.ranked) and shown.drafted_prob is not None:
        outside = (f'<p class="pg-micro-outside" data-drafted="true" data-id="{drafted}" '
                   f'data-prob="{shown.drafted_prob:.6g}">'
                   + _t_html("microscope.outside", lang, k=k, draft=_token(drafted_text),
                             prob=_num(shown.drafted_prob, lang))
                   + "</p>")
    return (f'<section class="pg-micro-dist" data-dist="{shown.kind}"><h4>{_t_html(shown.title, lang, k=k)}</h4>'
            f'<ol>{"".join(rows)}</ol>{outside}</section>')


def _recorded_figures(step: Step, pos: int, lang: str) -> str:
    """What a step without distributions still says about a judged draft: its own q, p and v (every schema has them)."""
    figures = []
    for name, values in (("q", step.q), ("p", step.p), ("v", step.mixture)):
        if values is not None and pos < len(values) and pos <= step.accepted:
            figures.append(f"{name} = {_num(values[pos], lang)}")
    return f'<p class="pg-micro-known">{" · ".join(figures)}</p>' if figures else ""


def _draw_html(verdict: microscope.Verdict) -> str:
    """Speculative sampling's draw on the unit line, left to right in every language: the stretch [0, a] where a
    draft is kept (a = min(1, p/q)) and a mark at the recorded r (the rule's sentence says it in words; this is its
    picture, hidden from screen readers). Empty where no draw decided or none was recorded."""
    r, a = verdict.draw, verdict.acceptance
    if r is None or a is None:
        return ""
    kept = "true" if verdict.outcome == microscope.KEPT else "false"
    return (f'<div class="pg-micro-draw" data-testid="pg-micro-draw" data-r="{r:.6f}" data-a="{a:.6f}" '
            f'data-kept="{kept}" dir="ltr" aria-hidden="true"><span class="pg-micro-draw-keep" '
            f'style="width:{min(a, 1.0) * 100:.2f}%"></span><span class="pg-micro-draw-mark" '
            f'style="width:{r * 100:.2f}%"></span><span class="pg-micro-draw-end">0</span>'
            f'<span class="pg-micro-draw-end pg-micro-draw-one">1</span></div>')


def _sampled_rule_html(verdict: microscope.Verdict, row: Position, token: str, words: str, lang: str) -> str | None:
    """A sampled draft's rule in a few short lines, so a projector shows it whole (1280×720, 17 px type): the draw
    against the chance in one formula (r = 0.858 > min(1, p/q) = min(1, 0.344/0.569) = 0.605), the draw on the unit
    line, the correction's probability in the residual; the sentences (`words`, the CLI's) folded below. None where
    no recorded draw decided (a bonus, a draft without q, a trace recorded before draws were kept): those keep the
    sentences. The formula's pieces break only between themselves, left to right in every language."""
    r, a = verdict.draw, verdict.acceptance
    q = row.q_drafted
    ensemble = verdict.rule == microscope.SAMPLING_ENSEMBLE
    x = row.v_drafted if ensemble else row.p_drafted
    if (verdict.rule not in (microscope.SAMPLING, microscope.SAMPLING_ENSEMBLE) or r is None or a is None
            or x is None or not q or verdict.outcome not in (microscope.KEPT, microscope.REFUSED)):
        return None
    kept = verdict.outcome == microscope.KEPT
    written_r, written_a = microscope.draw_numbers(r, a)
    ltr = lambda written: f'<bdi dir="ltr" class="pg-num">{written.localized(lang)}</bdi>'  # noqa: E731
    pieces = [f'r = {ltr(written_r)} {"≤" if kept else "&gt;"}',
              _t_html("microscope.short.min", lang, x="v" if ensemble else "p"),
              _t_html("microscope.short.min_values", lang, x=_num(x, lang), q=_num(q, lang)), f"= {ltr(written_a)}"]
    formula = ('<span dir="ltr" class="pg-micro-formula" data-testid="pg-micro-formula">'
               + " ".join(f'<span class="pg-micro-piece">{piece}</span>' for piece in pieces) + "</span>")
    lines = [f'<p class="pg-micro-decided">'
             f'{_t_html("microscope.short.kept" if kept else "microscope.short.refused", lang, formula=formula)}</p>',
             _draw_html(verdict)]
    if not kept:
        key = "microscope.short.correction" if verdict.correction is not None else "microscope.short.correction_outside"
        sentence = _isolate_numbers(html.escape(t(key, lang), quote=False))  # max(0, p − q) on one line
        lines.append('<p class="pg-micro-corrected">'
                     + sentence.format(token=_token(token), prob=_num(verdict.correction or 0.0, lang),
                                       k=f'<bdi dir="ltr">{len(row.residual or ())}</bdi>') + "</p>")
    folded = (f'<details class="pg-micro-words"><summary>{html.escape(t("microscope.short.words", lang))}</summary>'
              f'<ul>{words}</ul></details>')
    return (f'<div class="pg-micro-rule pg-micro-rule-short" data-testid="pg-micro-rule" data-r="{r:.6f}" '
            f'data-a="{a:.6f}">{"".join(lines)}{folded}</div>')


def _common_suffix(a: str, b: str) -> int:
    """Length of the longest common suffix of two strings."""
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def _lookup_html(trace: Trace, step_no: int, span: Sequence[int], lang: str) -> str:
    """Prompt lookup: the n-gram the draft was copied after, highlighted where it stands, and the copy after it.

    The engine records that place as the text the model saw (`Step.lookup_text`, exact: under a chat template it is
    the templated prompt). Traces recorded before it fall back to finding it: a span in the output is exact (the
    output's token texts are in the trace); a span in the prompt is found by its text (the prompt as typed): the copy
    (the draft's text) follows the n-gram there, and the n-gram ends the context too (that is what lookup matched), so
    the text highlighted is the longest common ending of the prompt before the copy and the whole context.
    """
    start, end = span
    step = trace.steps[step_no]
    where = t(microscope.source_where(trace, span), lang)
    head = _t_html("microscope.source", lang, start=f'<bdi dir="ltr">{start}</bdi>',
                   end=f'<bdi dir="ltr">{end}</bdi>', where=html.escape(where))
    if step.lookup_text is not None:
        return _context_html(head, *step.lookup_text)
    output: list[str] = []
    for s in trace.steps[:step_no]:
        output.extend(s.emitted_text or [""] * len(s.emitted))
    draft = "".join(step.drafted_text)
    in_output = start >= trace.prompt_tokens
    if in_output:
        text, i, j = "".join(output), start - trace.prompt_tokens, end - trace.prompt_tokens
        gram_at, copy_at = len("".join(output[:i])), len("".join(output[:j]))
    else:
        text, context = trace.prompt, trace.prompt + "".join(output)
        gram_at = copy_at = -1
        at = text.find(draft) if draft else -1
        while at >= 0:
            length = _common_suffix(text[:at], context)
            if length:
                gram_at, copy_at = at - length, at
                break
            at = text.find(draft, at + 1)
        if gram_at < 0:
            return f'<div class="pg-micro-lookup" data-testid="pg-micro-lookup"><p>{head}</p></div>'
    copy_end = copy_at + len(draft) if text.startswith(draft, copy_at) else copy_at
    return _context_html(head, text[max(0, gram_at - LOOKUP_CONTEXT_CHARS):gram_at], text[gram_at:copy_at],
                         text[copy_at:copy_end], text[copy_end:copy_end + LOOKUP_CONTEXT_CHARS])


# The most of the n-gram and of the copy the panel shows: a real n-gram is at most 10 tokens, a copy 64 (prompt lookup's
# parameters). A trace file may claim a source spanning its whole output: the panel stays a panel (the n-gram's end
# and the copy's start, where they meet, are kept; the cut is marked "…").
LOOKUP_PART_CHARS = 320


def _context_html(head: str, before: str, ngram: str, copied: str, after: str) -> str:
    """The source sentence and the context with the n-gram highlighted and the copy after it underlined (each part
    cut to its bound)."""
    n, m = LOOKUP_CONTEXT_CHARS, LOOKUP_PART_CHARS
    before, after = before[-n:], after[:n]
    ngram = ngram if len(ngram) <= m else "…" + ngram[-m:]
    copied = copied if len(copied) <= m else copied[:m] + "…"
    context_html = (f'<div class="pg-micro-context" dir="auto">{html.escape(before)}'
                    f'<mark class="pg-micro-match" data-testid="pg-micro-match">{html.escape(ngram)}</mark>'
                    f'<mark class="pg-micro-copied">{html.escape(copied)}</mark>{html.escape(after)}</div>')
    return f'<div class="pg-micro-lookup" data-testid="pg-micro-lookup"><p>{head}</p>{context_html}</div>'


def _find_step(trace: Trace, step_index: int) -> tuple[int, Step] | None:
    """(position in trace.steps, step) of the step whose `index` is `step_index`."""
    if 0 <= step_index < len(trace.steps) and trace.steps[step_index].index == step_index:
        return step_index, trace.steps[step_index]
    for k, s in enumerate(trace.steps):
        if s.index == step_index:
            return k, s
    return None


def panel_html(trace: Trace | None, step_index: int, pos: int, lang: str = DEFAULT_LANGUAGE) -> str:
    """The microscope's panel for position `pos` of the step whose index is `step_index` (as the token spans'
    `data-step` / `data-pos` say), in `lang`. A position the trace does not have gets a sentence, not an error."""
    found = _find_step(trace, step_index) if trace is not None else None
    if trace is None or found is None or not 0 <= pos < len(found[1].emitted):
        return empty_panel(t("micro.no_such_token", lang), lang)
    k, step = found
    verdict = microscope.explain(step, pos, trace.decoding)
    drafted = verdict.drafted
    drafted_texts = step.drafted_text or [""] * len(step.drafted)
    emitted_texts = step.emitted_text or [""] * len(step.emitted)
    drafted_text = drafted_texts[pos] if drafted is not None else ""
    refused = verdict.outcome == microscope.REFUSED
    what = _t_html(microscope.heading_key(verdict), lang, draft=_token(drafted_text), token=_token(emitted_texts[pos]))
    heading = _t_html("microscope.heading", lang, step=f'<bdi dir="ltr">{step.index + 1}</bdi>',
                      i=f'<bdi dir="ltr">{pos + 1}</bdi>', what=what)
    parts = [f'<p class="pg-micro-head">{heading}</p>']
    note = microscope.self_draft_note(trace, verdict)
    # The rule with this token's numbers first (on a projector it is what the class reads), then the lists.
    lines = "".join(f"<li>{_isolate_numbers(html.escape(message.localized(lang), quote=False))}</li>"
                    for message in [*verdict.messages, *([note] if note is not None else [])])
    missing = "" if verdict.recorded else ' data-recorded="false"'
    row: Position | None = step.dists[pos] if verdict.recorded and step.dists is not None else None
    title = f'<h4 class="pg-micro-rule-title">{html.escape(t("microscope.rule", lang))}</h4>'
    short = _sampled_rule_html(verdict, row, emitted_texts[pos], lines, lang) if row is not None else None
    if short is not None:
        parts.append(title + short)
    else:
        parts.append(f'{title}<ul class="pg-micro-rule" data-testid="pg-micro-rule"{missing}>{lines}</ul>')
        parts.append(_draw_html(verdict))
    if not verdict.recorded:
        parts.append(_recorded_figures(step, pos, lang))
    if row is not None:
        lists = [_ranked_list(shown, drafted, drafted_text, lang) for shown in microscope.shown_lists(row, verdict)]
        parts.append(f'<div class="pg-micro-dists">{"".join(lists)}</div>')
    if verdict.source is not None:
        parts.append(_lookup_html(trace, k, verdict.source, lang))
    return (f'<div class="pg-micro" data-testid="pg-micro" {_region(lang)} data-step="{step.index}" data-pos="{pos}" '
            f'data-outcome="{verdict.outcome}" data-refused="{str(refused).lower()}">{"".join(parts)}</div>')


def _region(lang: str) -> str:
    """The panel's attributes as a named region the keyboard reaches (it scrolls on a projector: `presenter.CSS`)."""
    return f'role="region" tabindex="0" aria-label="{html.escape(t("micro.region", lang))}"'



def empty_panel(message: str | None = None, lang: str = DEFAULT_LANGUAGE) -> str:
    """The panel before any token is opened (or with `message`)."""
    shown = t("micro.hint", lang) if message is None else message
    return f'<div class="pg-micro" data-testid="pg-micro" data-empty="true"><p class="pg-none">{html.escape(shown)}</p></div>'


# --------------------------------------------------------------------------- per run: what the drafter gets wrong


def _header_row(columns: Sequence[str], lang: str) -> str:
    """A table's header row from its column keys (the CLI's text tables use the same)."""
    return "<tr>" + "".join(f"<th>{html.escape(t(key, lang))}</th>" for key in columns) + "</tr>"


def refusals_html(trace: Trace | None, lang: str = DEFAULT_LANGUAGE) -> str:
    """The run's most frequent (drafted → target's token) refusals, as a table."""
    pairs = microscope.refusal_pairs(trace) if trace is not None else []
    if not pairs:
        return f'<p class="pg-none" data-testid="pg-refusals">{html.escape(t("microscope.refusals.none", lang))}</p>'
    head = _header_row(microscope.REFUSALS_COLUMNS, lang)
    rows = "".join(
        f'<tr data-draft-id="{draft_id}" data-target-id="{target_id}"><td>{_token(draft_text)}</td>'
        f'<td>{_token(target_text)}</td><td><bdi dir="ltr">{count}</bdi></td></tr>'
        for draft_id, draft_text, target_id, target_text, count in pairs[:microscope.MAX_REFUSAL_ROWS])
    caption = html.escape(t(microscope.REFUSALS_CAPTION, lang))
    return (f'<table class="pg-table pg-micro-table" data-testid="pg-refusals"><caption>{caption}</caption>'
            f"{head}{rows}</table>")


def confidence_html(trace: Trace | None, lang: str = DEFAULT_LANGUAGE) -> str:
    """Acceptance by how sure the drafter was (q of the drafted token), as a table; methods without q say so."""
    rows_data = microscope.acceptance_by_confidence(trace, microscope.CONFIDENCE_BUCKETS) if trace is not None else []
    if not any(judged for _, _, judged, _ in rows_data):
        return f'<p class="pg-none" data-testid="pg-confidence">{html.escape(t("microscope.confidence.none", lang))}</p>'
    head = _header_row(microscope.CONFIDENCE_COLUMNS, lang)
    rows = "".join(
        f'<tr data-lo="{lo:g}" data-hi="{hi:g}" data-judged="{judged}" data-accepted="{accepted}">'
        f'<td><bdi dir="ltr">{number(lo, lang, ".1f")}–{number(hi, lang, ".1f")}</bdi></td>'
        f'<td><bdi dir="ltr">{judged}</bdi></td>'
        f'<td><bdi dir="ltr">{microscope.confidence_rate(judged, accepted, lang)}</bdi></td></tr>'
        for lo, hi, judged, accepted in rows_data)
    caption = html.escape(t(microscope.CONFIDENCE_CAPTION, lang))
    return (f'<table class="pg-table pg-micro-table" data-testid="pg-confidence"><caption>{caption}</caption>'
            f"{head}{rows}</table>")


def run_tables_html(trace: Trace | None, lang: str = DEFAULT_LANGUAGE) -> str:
    """Both per-run tables side by side (empty before a run)."""
    if trace is None or not trace.steps:
        return ""
    return f'<div class="pg-micro-tables">{refusals_html(trace, lang)}{confidence_html(trace, lang)}</div>'


# Clicks and Enter on a token with a position open the panel: `trigger('click', …)` is gr.HTML's own event with data
# (the handler reads it from `gr.EventData`). The listener sits on the component's element, which outlives the
# re-rendered tokens inside it.
PICK_JS = """
const TOKENS = '.tok[role=button]';
function pick(e) {
  const tok = e.target.closest(TOKENS);
  if (!tok) return;
  if (e.type === 'keydown') {
    const all = Array.from(element.querySelectorAll(TOKENS)), at = all.indexOf(tok);
    const rtl = getComputedStyle(tok).direction === 'rtl';
    const moves = {ArrowDown: 1, ArrowUp: -1, ArrowRight: rtl ? -1 : 1, ArrowLeft: rtl ? 1 : -1,
                   Home: -at, End: all.length - 1 - at};
    if (e.key in moves) {
      const next = all[Math.max(0, Math.min(all.length - 1, at + moves[e.key]))];
      e.preventDefault(); all.forEach(el => el.setAttribute('tabindex', el === next ? '0' : '-1')); next.focus();
      return;
    }
    if (e.key !== 'Enter' && e.key !== ' ') return;
    e.preventDefault();
  }
  element.querySelectorAll('.tok[data-open]').forEach(el => el.removeAttribute('data-open'));
  tok.setAttribute('data-open', 'true');
  element.querySelectorAll(TOKENS + '[tabindex="0"]').forEach(el => { if (el !== tok) el.setAttribute('tabindex', '-1'); });
  tok.setAttribute('tabindex', '0');
  const data = {step: Number(tok.dataset.step)};
  if (tok.dataset.pos !== undefined) { data.pos = Number(tok.dataset.pos); } else { data.draft = Number(tok.dataset.draft); }
  trigger('click', data);
}
// One tab stop for the whole output: the open token, else the first (the server renders every token with tabindex -1,
// and an update replaces the tokens or, diffed, sets their attributes back).
function oneStop() {
  const all = element.querySelectorAll(TOKENS);
  if (!all.length || element.querySelector(TOKENS + '[tabindex="0"]')) return;
  (element.querySelector('.tok[data-open]') || all[0]).setAttribute('tabindex', '0');
}
new MutationObserver(oneStop).observe(element, {childList: true, subtree: true, attributes: true,
                                                attributeFilter: ['tabindex']});
oneStop();
element.addEventListener('click', pick);
element.addEventListener('keydown', pick);
"""

CSS = """
.tok[role=button] { cursor: pointer; }
.tok[data-open] { outline: 2px solid #0072B2; outline-offset: 1px; }
.pg-micro { font-size: 14px; border: 1px solid rgba(128,128,128,.35); border-radius: 8px; padding: 8px 10px; }
.pg-micro-head { margin: 0 0 6px; font-weight: 600; }
.pg-micro-tok { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; white-space: pre-wrap;
  overflow-wrap: anywhere; min-width: 0; background: rgba(128,128,128,.15); border-radius: 3px; padding: 0 2px; }
.pg-micro-dists { display: grid; grid-template-columns: repeat(auto-fit, minmax(210px, 1fr)); gap: 8px; }
.pg-micro-dist h4 { margin: 0 0 4px; font-size: 12.5px; font-weight: 600; opacity: .85; }
.pg-micro-dist ol { list-style: none; margin: 0; padding: 0; }
.pg-micro-row { display: grid; grid-template-columns: minmax(3em, 7em) 1fr auto auto; gap: 6px; align-items: center;
  padding: 1px 2px; border-radius: 4px; }
.pg-micro-row[data-drafted] { box-shadow: inset 0 0 0 2px #D55E00; }
.pg-micro-row[data-chosen] { background: rgba(0,114,178,.14); }
.pg-micro-bar { height: 10px; background: rgba(128,128,128,.15); border-radius: 3px; overflow: hidden; }
.pg-micro-bar > span { display: block; height: 100%; background: #0072B2; }
.pg-micro-dist[data-dist="q"] .pg-micro-bar > span { background: #E69F00; }
.pg-micro-dist[data-dist="v"] .pg-micro-bar > span { background: #CC79A7; }
.pg-micro-dist[data-dist="residual"] .pg-micro-bar > span { background: #009E73; }
.pg-num { font-variant-numeric: tabular-nums; }
.pg-micro-mark { font-size: 11px; opacity: .85; }
.pg-micro-outside, .pg-micro-missing, .pg-micro-known { margin: 4px 0; font-size: 13px; }
.pg-micro-draw { position: relative; height: 14px; margin: 6px 1.5em 14px; border-radius: 3px;
  background: rgba(213,94,0,.25); }
.pg-micro-draw-keep { position: absolute; inset-block: 0; left: 0; background: rgba(0,158,115,.55); border-radius: 3px; }
.pg-micro-draw-mark { position: absolute; top: -3px; left: 0; height: 20px; border-right: 2px solid currentColor; }
.pg-micro-draw-end { position: absolute; top: 15px; left: 0; font-size: 11px; opacity: .8; }
.pg-micro-draw-one { left: auto; right: 0; }
.pg-micro-rule-title { margin: 8px 0 0; font-size: 12.5px; font-weight: 600; opacity: .85; }
.pg-micro-rule { margin: 2px 0 0; padding-inline-start: 1.2em; line-height: 1.5; }
.pg-micro-rule-short { padding-inline-start: 0; }
.pg-micro-rule-short p { margin: 0; }
.pg-micro-piece { white-space: nowrap; }
.pg-micro-rule-short .pg-micro-draw { height: 10px; margin: 4px 1.1em 4px; }
.pg-micro-rule-short .pg-micro-draw-mark { top: -3px; height: 16px; }
.pg-micro-rule-short .pg-micro-draw-end { top: 50%; transform: translate(-1.1em, -50%); line-height: 1; }
.pg-micro-rule-short .pg-micro-draw-one { transform: translate(1.1em, -50%); }
.pg-micro-words summary { cursor: pointer; opacity: .85; }
.pg-micro-words ul { margin: 2px 0 0; padding-inline-start: 1.2em; }
.pg-micro-context { white-space: pre-wrap; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  font-size: 13px; border-radius: 6px; padding: 4px 6px; background: rgba(128,128,128,.08); unicode-bidi: plaintext; }
.pg-micro-match { background: rgba(230,159,0,.45); color: inherit; border-radius: 2px; }
.pg-micro-copied { background: none; color: inherit; text-decoration: underline dotted; text-underline-offset: 3px; }
.pg-micro-tables { display: grid; grid-template-columns: repeat(auto-fit, minmax(260px, 1fr)); gap: 10px; }
.pg-micro-table caption { text-align: start; font-size: 12.5px; opacity: .85; padding-bottom: 2px; }
html[dir="rtl"] .pg-micro-table th, html[dir="rtl"] .pg-micro-table td { text-align: start; }
"""


def panel_for_click(trace: Trace | None, data: object, lang: str = DEFAULT_LANGUAGE) -> str:
    """The panel for a click's data as a client sent it ({"step": n, "pos": i}); anything else gets a sentence."""
    step = data.get("step") if isinstance(data, dict) else None
    pos = data.get("pos") if isinstance(data, dict) else None
    draft = data.get("draft") if isinstance(data, dict) else None
    if trace is None:
        return empty_panel(t("micro.no_run", lang), lang)
    if pos is None and _is_int(step) and _is_int(draft):
        return never_judged_panel(trace, step, draft, lang)  # type: ignore[arg-type]
    if not all(_is_int(v) for v in (step, pos)):
        return empty_panel(t("micro.no_such_token", lang), lang)
    return panel_html(trace, step, pos, lang)  # type: ignore[arg-type]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def never_judged_panel(trace: Trace, step_index: int, draft: int, lang: str = DEFAULT_LANGUAGE) -> str:
    """The panel for a draft no rule decided (discarded after a refusal, or unverified past the run's end): why there
    is nothing to show, and its q where the drafter gave one, rather than the previous token's panel left in place."""
    found = _find_step(trace, step_index)
    step = found[1] if found is not None else None
    if step is None or not 0 <= draft < len(step.drafted):
        return empty_panel(t("micro.no_such_token", lang), lang)
    status = next((st for _, _, st, i in step.token_statuses() if i == draft and st in ("discarded", "unverified")),
                  None)
    if status is None:  # a judged draft: its panel, not this one
        return empty_panel(t("micro.no_such_token", lang), lang)
    texts = step.drafted_text or [""] * len(step.drafted)
    ltr = lambda n: f'<bdi dir="ltr">{n}</bdi>'  # noqa: E731
    why = _t_html(f"micro.never_judged.{status}", lang, step=ltr(step.index + 1), i=ltr(draft + 1),
                  k=ltr(len(step.drafted)), index=ltr(step.accepted + 1), token=_token(texts[draft]))
    parts = [f'<p class="pg-micro-head">{why}</p>']
    q = step.q[draft] if step.q is not None and draft < len(step.q) else None
    if q is not None:
        parts.append(f'<p class="pg-micro-known">{_t_html("micro.never_judged.q", lang, q=_num(q, lang))}</p>')
    return (f'<div class="pg-micro" data-testid="pg-micro" {_region(lang)} data-step="{step.index}" data-draft="{draft}" '
            f'data-outcome="{status}">{"".join(parts)}</div>')
