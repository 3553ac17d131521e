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
from typing import Sequence

from . import microscope
from .i18n import DEFAULT_LANGUAGE, t
from .trace import ACCEPTED, BONUS, CORRECTION, REJECTED, TARGET, Position, Ranked, Step, Trace

# The tables' q buckets: how sure the drafter was of the token it drafted.
Q_BUCKETS: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
MAX_REFUSAL_ROWS = 10
CONTEXT_CHARS = 160  # of the output shown on each side of a prompt-lookup source


def _num(x: float) -> str:
    """A probability, left to right wherever it stands."""
    shown = f"{x:.3f}" if x >= 0.001 or x == 0 else f"{x:.1e}"
    return f'<bdi dir="ltr" class="pg-num">{shown}</bdi>'


def _t_html(key: str, lang: str, **fields: str) -> str:
    """A sentence of the catalogue as HTML, with `fields` already HTML (numbers, tokens) put in its escaped text."""
    return html.escape(t(key, lang), quote=False).format(**fields)


def _token(text: str) -> str:
    """A token's text, whitespace made visible, isolated from the sentence around it."""
    shown = text.replace("\n", "↵").replace("\t", "⇥") if text.strip() else (
        text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥") or "∅")
    return f'<bdi class="pg-micro-tok">{html.escape(shown)}</bdi>'


def position_tokens(step: Step, pos: int) -> tuple[int | None, int | None, str]:
    """(drafted id judged at `pos` or None, emitted id decided at `pos` or None, the clicked token's status).

    Position `pos` of a step is the row of the target's scores that decided `emitted[pos]`; for a drafting step it
    also judged `drafted[pos]` when pos <= accepted (the accepted drafts and the first refused one).
    """
    drafted = step.drafted[pos] if pos < len(step.drafted) and pos <= step.accepted else None
    emitted = step.emitted[pos] if pos < len(step.emitted) else None
    if not step.drafted:
        status = TARGET
    elif pos < step.accepted:
        status = ACCEPTED
    elif step.rejected and pos == step.accepted:
        status = CORRECTION
    else:
        status = BONUS
    return drafted, emitted, status


def _ranked_list(kind: str, title: str, ranked: Sequence[Ranked], drafted: int | None, drafted_prob: float | None,
                 drafted_text: str, chosen: int | None, lang: str) -> str:
    """One top-k list as bars (a bar's length is the probability itself, so lists compare); the drafted token marked,
    and named below the list when it is outside the top-k."""
    rows = []
    for rank, r in enumerate(ranked, start=1):
        marks = []
        flags = ""
        if drafted is not None and r.id == drafted:
            flags += ' data-drafted="true"'
            marks.append(t("micro.mark.drafted", lang))
        if chosen is not None and r.id == chosen:
            flags += ' data-chosen="true"'
            marks.append(t("micro.mark.chosen", lang) if kind != "residual" else t("micro.mark.drawn", lang))
        mark = f'<span class="pg-micro-mark">{html.escape(" · ".join(marks))}</span>' if marks else ""
        rows.append(
            f'<li class="pg-micro-row" data-rank="{rank}" data-id="{r.id}" data-prob="{r.prob:.6g}"{flags}>'
            f'{_token(r.text)}<span class="pg-micro-bar"><span style="width:{100 * r.prob:.1f}%"></span></span>'
            f'{_num(r.prob)}{mark}</li>')
    outside = ""
    if drafted is not None and all(r.id != drafted for r in ranked) and drafted_prob is not None:
        outside = (f'<p class="pg-micro-outside" data-drafted="true" data-id="{drafted}" '
                   f'data-prob="{drafted_prob:.6g}">'
                   + _t_html("micro.outside", lang, k=f'<bdi dir="ltr">{len(ranked)}</bdi>', token=_token(drafted_text),
                             prob=_num(drafted_prob))
                   + "</p>")
    return (f'<section class="pg-micro-dist" data-dist="{kind}"><h4>{html.escape(title)}</h4>'
            f'<ol>{"".join(rows)}</ol>{outside}</section>')


def _not_recorded(step: Step, pos: int, lang: str) -> str:
    """What a step without distributions still says about the position: the drafted token's p, q, v."""
    figures = []
    for name, values in (("q", step.q), ("p", step.p), ("v", step.mixture)):
        if values is not None and pos < len(values) and pos <= step.accepted:
            figures.append(f"{name} = {_num(values[pos])}")
    known = f'<p class="pg-micro-known">{" · ".join(figures)}</p>' if figures else ""
    return f'<p class="pg-micro-missing" data-testid="pg-micro-missing">{html.escape(t("micro.not_recorded", lang))}</p>{known}'


def _lookup_html(trace: Trace, step_no: int, span: Sequence[int], lang: str) -> str:
    """Prompt lookup: the n-gram the draft was copied after, highlighted where it stands in the context.

    Context positions past the prompt are output tokens (their texts are in the trace); inside the prompt the trace
    has the prompt's text but not its tokens, so the n-gram (the same tokens as the context's last ones, which is
    what lookup matched) is found in the prompt's text.
    """
    start, end = span
    output: list[str] = []
    for s in trace.steps[:step_no]:
        output.extend(s.emitted_text or [""] * len(s.emitted))
    context_len = trace.prompt_tokens + len(output)
    n = end - start
    tail = output[len(output) - n:] if n <= len(output) else None
    where = t("micro.lookup.in_output", lang) if start >= trace.prompt_tokens else t("micro.lookup.in_prompt", lang)
    head = _t_html("micro.lookup.source", lang, start=f'<bdi dir="ltr">{start}</bdi>', end=f'<bdi dir="ltr">{end}</bdi>',
             where=html.escape(where))
    if start >= trace.prompt_tokens and end <= context_len:
        i, j = start - trace.prompt_tokens, end - trace.prompt_tokens
        before = "".join(output[:i])[-CONTEXT_CHARS:]
        match = "".join(output[i:j])
        after = "".join(output[j:])[:CONTEXT_CHARS]
    else:
        needle = "".join(tail) if tail is not None else ""
        at = trace.prompt.find(needle) if needle else -1
        if at < 0:
            return f'<div class="pg-micro-lookup" data-testid="pg-micro-lookup"><p>{head}</p></div>'
        before, match, after = (trace.prompt[max(0, at - CONTEXT_CHARS):at], needle,
                                trace.prompt[at + len(needle):at + len(needle) + CONTEXT_CHARS])
    context = (f'<div class="pg-micro-context" dir="auto">{html.escape(before)}'
               f'<mark class="pg-micro-match" data-testid="pg-micro-match">{html.escape(match)}</mark>'
               f'{html.escape(after)}</div>')
    return f'<div class="pg-micro-lookup" data-testid="pg-micro-lookup"><p>{head}</p>{context}</div>'


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
    if found is None or not 0 <= pos < len(found[1].emitted):
        return empty_panel(t("micro.no_such_token", lang), lang)
    k, step = found
    drafted, chosen, status = position_tokens(step, pos)
    drafted_texts = step.drafted_text or [""] * len(step.drafted)
    emitted_texts = step.emitted_text or [""] * len(step.emitted)
    drafted_text = drafted_texts[pos] if drafted is not None else ""
    refused = drafted is not None and drafted != chosen
    heading = _t_html("micro.heading", lang, n=f'<bdi dir="ltr">{step.index + 1}</bdi>',
                i=f'<bdi dir="ltr">{pos + 1}</bdi>', token=_token(emitted_texts[pos]))
    if refused:
        heading += " " + _t_html("micro.heading_refused", lang, token=_token(drafted_text))
    parts = [f'<p class="pg-micro-head">{heading}</p>']
    row: Position | None = step.dists[pos] if step.dists is not None and pos < len(step.dists) else None
    if row is None:
        parts.append(_not_recorded(step, pos, lang))
    else:
        lists = [_ranked_list("p", t("micro.dist.p", lang), row.p, drafted, row.p_drafted, drafted_text, chosen, lang)]
        if row.q is not None:
            lists.append(_ranked_list("q", t("micro.dist.q", lang), row.q, drafted, row.q_drafted, drafted_text,
                                      None, lang))
        if row.v is not None:
            lists.append(_ranked_list("v", t("micro.dist.v", lang), row.v, drafted, row.v_drafted, drafted_text,
                                      chosen, lang))
        if row.residual is not None:
            lists.append(_ranked_list("residual", t("micro.dist.residual", lang), row.residual, drafted, None,
                                      drafted_text, chosen, lang))
        parts.append(f'<div class="pg-micro-dists">{"".join(lists)}</div>')
        verdict = microscope.explain(step, pos, trace.decoding)
        lines = "".join(f"<li>{html.escape(message.localized(lang))}</li>" for message in verdict.messages)
        parts.append(f'<ul class="pg-micro-rule" data-testid="pg-micro-rule">{lines}</ul>')
    if step.lookup_source is not None and drafted is not None:
        parts.append(_lookup_html(trace, k, step.lookup_source, lang))
    return (f'<div class="pg-micro" data-testid="pg-micro" data-step="{step.index}" data-pos="{pos}" '
            f'data-status="{status}" data-refused="{str(refused).lower()}">{"".join(parts)}</div>')


def empty_panel(message: str | None = None, lang: str = DEFAULT_LANGUAGE) -> str:
    """The panel before any token is opened (or with `message`)."""
    shown = t("micro.hint", lang) if message is None else message
    return f'<div class="pg-micro" data-testid="pg-micro" data-empty="true"><p class="pg-none">{html.escape(shown)}</p></div>'


# --------------------------------------------------------------------------- per run: what the drafter gets wrong


def refusals_html(trace: Trace | None, lang: str = DEFAULT_LANGUAGE) -> str:
    """The run's most frequent (drafted → target's token) refusals, as a table."""
    pairs = microscope.refusal_pairs(trace) if trace is not None else []
    if not pairs:
        return f'<p class="pg-none" data-testid="pg-refusals">{html.escape(t("micro.refusals.none", lang))}</p>'
    head = (f"<tr><th>{html.escape(t('micro.refusals.drafted', lang))}</th>"
            f"<th>{html.escape(t('micro.refusals.target', lang))}</th>"
            f"<th>{html.escape(t('micro.refusals.count', lang))}</th></tr>")
    rows = "".join(
        f'<tr data-draft-id="{draft_id}" data-target-id="{target_id}"><td>{_token(draft_text)}</td>'
        f'<td>{_token(target_text)}</td><td><bdi dir="ltr">{count}</bdi></td></tr>'
        for draft_id, draft_text, target_id, target_text, count in pairs[:MAX_REFUSAL_ROWS])
    caption = html.escape(t("micro.refusals.caption", lang))
    return (f'<table class="pg-table pg-micro-table" data-testid="pg-refusals"><caption>{caption}</caption>'
            f"{head}{rows}</table>")


def confidence_html(trace: Trace | None, lang: str = DEFAULT_LANGUAGE) -> str:
    """Acceptance by how sure the drafter was (q of the drafted token), as a table; methods without q say so."""
    rows_data = microscope.acceptance_by_confidence(trace, Q_BUCKETS) if trace is not None else []
    if not any(judged for _, _, judged, _ in rows_data):
        return f'<p class="pg-none" data-testid="pg-confidence">{html.escape(t("micro.confidence.none", lang))}</p>'
    head = (f"<tr><th>{html.escape(t('micro.confidence.q', lang))}</th>"
            f"<th>{html.escape(t('micro.confidence.judged', lang))}</th>"
            f"<th>{html.escape(t('micro.confidence.accepted', lang))}</th></tr>")
    rows = "".join(
        f'<tr data-lo="{lo:g}" data-hi="{hi:g}" data-judged="{judged}" data-accepted="{accepted}">'
        f'<td><bdi dir="ltr">{lo:.1f}–{hi:.1f}</bdi></td><td><bdi dir="ltr">{judged}</bdi></td>'
        f'<td><bdi dir="ltr">{(f"{accepted / judged:.0%}" if judged else "–")}</bdi></td></tr>'
        for lo, hi, judged, accepted in rows_data)
    caption = html.escape(t("micro.confidence.caption", lang))
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
function pick(e) {
  const tok = e.target.closest('.tok[data-pos]');
  if (!tok) return;
  if (e.type === 'keydown') { if (e.key !== 'Enter' && e.key !== ' ') return; e.preventDefault(); }
  element.querySelectorAll('.tok[data-open]').forEach(el => el.removeAttribute('data-open'));
  tok.setAttribute('data-open', 'true');
  trigger('click', {step: Number(tok.dataset.step), pos: Number(tok.dataset.pos)});
}
element.addEventListener('click', pick);
element.addEventListener('keydown', pick);
"""

CSS = """
.tok[data-pos] { cursor: pointer; }
.tok[data-pos]:focus-visible, .tok[data-open] { outline: 2px solid #0072B2; outline-offset: 1px; }
.pg-micro { font-size: 14px; border: 1px solid rgba(128,128,128,.35); border-radius: 8px; padding: 8px 10px; }
.pg-micro-head { margin: 0 0 6px; font-weight: 600; }
.pg-micro-tok { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; white-space: pre;
  background: rgba(128,128,128,.15); border-radius: 3px; padding: 0 2px; }
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
.pg-micro-rule { margin: 8px 0 0; padding-inline-start: 1.2em; line-height: 1.5; }
.pg-micro-context { white-space: pre-wrap; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  font-size: 13px; border-radius: 6px; padding: 4px 6px; background: rgba(128,128,128,.08); unicode-bidi: plaintext; }
.pg-micro-match { background: rgba(230,159,0,.45); color: inherit; border-radius: 2px; }
.pg-micro-tables { display: grid; grid-template-columns: repeat(auto-fit, minmax(260px, 1fr)); gap: 10px; }
.pg-micro-table caption { text-align: start; font-size: 12.5px; opacity: .85; padding-bottom: 2px; }
html[dir="rtl"] .pg-micro-table th, html[dir="rtl"] .pg-micro-table td { text-align: start; }
"""


def panel_for_click(trace: Trace | None, data: object, lang: str = DEFAULT_LANGUAGE) -> str:
    """The panel for a click's data as a client sent it ({"step": n, "pos": i}); anything else gets a sentence."""
    step = data.get("step") if isinstance(data, dict) else None
    pos = data.get("pos") if isinstance(data, dict) else None
    if trace is None:
        return empty_panel(t("micro.no_run", lang), lang)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (step, pos)):
        return empty_panel(t("micro.no_such_token", lang), lang)
    return panel_html(trace, step, pos, lang)  # type: ignore[arg-type]
