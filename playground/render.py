"""Trace → coloured HTML: every token a span that says what happened to it.

Pure functions over `playground.trace` records (no torch, no tokenizer, no Gradio), so a saved
trace renders exactly like a live one. Each token is
``<span class="tok" data-status="accepted" data-step="3" data-q="…" data-p="…" title="…">``
with the status names of `playground.trace`; the rejected draft (the first one the target refused)
and the discarded drafts after it (never judged) stay where they were proposed, struck through,
followed by the target's correction.

Rendering is incremental: `TokenStream` renders each step once when it arrives and keeps the
pieces, so updating the page after step n costs a join of n cached strings, not a re-render of
the whole trace. Its output only ever grows at the end (the container is left open; the browser
closes it), which also lets Gradio send each streamed update as an append-only diff.

The palette is Okabe–Ito (readable with the common colour-vision deficiencies) used as
translucent tints over the page background, so it works in light and dark mode, and every
status also has a non-colour cue: strike-through (rejected), dotted strike-through (discarded),
thick underline (correction), a star (bonus), dashed outline and italics (unverified).
"""

from __future__ import annotations

import html
from typing import Iterable, Sequence

from .i18n import DEFAULT_LANGUAGE, count, direction, joined, number, t, tn
from .drafts import NO_DRAFT_REASONS
from .methods import METHODS, is_reference
from .trace import ACCEPTED, BONUS, CORRECTION, DISCARDED, REJECTED, TARGET, UNVERIFIED, Step, Summary, Trace

# Okabe–Ito colours, one per status (see the module docstring).
PALETTE: dict[str, str] = {
    ACCEPTED: "#009E73",  # bluish green
    REJECTED: "#D55E00",  # vermillion
    DISCARDED: "#F0E442",  # yellow
    CORRECTION: "#0072B2",  # blue
    BONUS: "#CC79A7",  # reddish purple
    TARGET: "#999999",  # neutral grey
    UNVERIFIED: "#E69F00",  # orange
}

# (status, label, meaning) in English; the words live in `locales/en.json` (`render.legend.*`) like every language's.
LEGEND: tuple[tuple[str, str, str], ...] = tuple(
    (status, t(f"render.legend.{status}.label"), t(f"render.legend.{status}.meaning"))
    for status in (ACCEPTED, REJECTED, DISCARDED, CORRECTION, BONUS, TARGET, UNVERIFIED)
)


# The legend's sample words, one per status in LEGEND's order: a story in `lang` (`render.legend.sample`) in which a
# draft's word is rejected and the target's correction follows ("the [cat sat] dog ran away fast").
def _sample_words(lang: str) -> list[str]:
    words = t("render.legend.sample", lang).split()
    return words if len(words) == len(LEGEND) else t("render.legend.sample").split()


OPEN_TOKENS = '<div class="pg-tokens" data-testid="pg-tokens">'
# The same container for a page in another language: `dir="auto"` plus the CSS's `unicode-bidi: plaintext` give
# every paragraph of the output its own direction from its first strong letter (an Arabic line reads right to
# left, a line of code left to right), whatever the page's direction; the token spans inside stay plain inline
# boxes, so the browser's bidi algorithm orders them like the letters they hold.
_OPEN_TOKENS_AUTO = '<div class="pg-tokens" data-testid="pg-tokens" dir="auto">'


def open_tokens(lang: str = DEFAULT_LANGUAGE) -> str:
    """The token container's opening tag (English keeps the historical one, byte for byte)."""
    return OPEN_TOKENS if lang == DEFAULT_LANGUAGE else _OPEN_TOKENS_AUTO

# Styles for everything this module emits. The UI passes it to `launch(css=...)`;
# `render_document` inlines it for a standalone page.
CSS = """
.pg-tokens { white-space: pre-wrap; word-break: break-word; line-height: 1.9; font-size: 15px; unicode-bidi: plaintext;
  text-align: start;
  font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; padding: 10px 12px;
  border-radius: 8px; border: 1px solid rgba(128,128,128,.35); min-height: 7em; }
.pg-tokens .pg-empty { opacity: .8; font-style: italic; font-family: var(--font, sans-serif); }
.pg-step { border-radius: 3px; }
.pg-step:hover { outline: 1px solid rgba(128,128,128,.8); outline-offset: 1px; }
.tok { border-radius: 3px; padding: 0 1px; }
.tok[data-status="accepted"] { background: rgba(0,158,115,.24); }
.tok[data-status="rejected"] { background: rgba(213,94,0,.22); text-decoration: line-through;
  text-decoration-color: #D55E00; text-decoration-thickness: 2px; opacity: .8; }
.tok[data-status="discarded"] { background: rgba(240,228,66,.22); text-decoration: line-through dotted;
  text-decoration-color: #B8A800; text-decoration-thickness: 2px; opacity: .8; }
.tok[data-status="correction"] { background: rgba(0,114,178,.24); text-decoration: underline;
  text-decoration-color: #3d9ae0; text-decoration-thickness: 3px; text-underline-offset: 3px; }
.tok[data-status="bonus"] { background: rgba(204,121,167,.32); box-shadow: inset 0 0 0 1px rgba(204,121,167,.95); }
.tok[data-status="bonus"]::after { content: "★"; font-size: .7em; vertical-align: super; line-height: 0;
  color: #CC79A7; margin-inline-start: 1px; user-select: none; }
.tok[data-status="target"] { }
.tok[data-status="unverified"] { outline: 1px dashed #E69F00; outline-offset: -1px; font-style: italic; opacity: .8; }
.tok .ws { opacity: .65; }
.pg-legend { display: flex; flex-wrap: wrap; gap: 6px 16px; font-size: 13px; margin: 2px 0 6px; align-items: center; }
.pg-legend .pg-key { display: inline-flex; gap: 6px; align-items: center; }
.pg-legend .tok { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.pg-legend .pg-hint { opacity: .8; }
.pg-stats { display: grid; grid-template-columns: repeat(6, minmax(0, 1fr)); gap: 8px; }
@media (max-width: 900px) { .pg-stats { grid-template-columns: repeat(3, minmax(0, 1fr)); } }
.pg-stats.pg-stats-empty { display: block; font-size: 13px; opacity: .8; font-style: italic; }
.pg-plain-check { font-size: 13.5px; margin-top: 6px; padding: 4px 10px; border-radius: 8px;
  border: 1px solid rgba(128,128,128,.35); }
.pg-plain-check[data-identical="true"] { border-color: rgba(0,158,115,.7); }
.pg-plain-check[data-identical="false"] { border-color: rgba(213,94,0,.7); }
.pg-stat { border: 1px solid rgba(128,128,128,.35); border-radius: 8px; padding: 6px 10px; }
.pg-stat .pg-value { font-size: 22px; font-weight: 600; font-variant-numeric: tabular-nums; line-height: 1.2; }
.pg-stat .pg-label { font-size: 12px; opacity: .8; }
.pg-status { font-size: 14px; padding: 6px 10px; border-radius: 8px; border: 1px solid rgba(128,128,128,.35); }
.pg-status[data-kind="running"] { border-color: rgba(0,114,178,.7); }
.pg-status[data-kind="done"] { border-color: rgba(0,158,115,.7); }
.pg-status[data-kind="error"] { border: 2px solid #D55E00; background: rgba(213,94,0,.12); font-weight: 500; }
.pg-status .pg-note { opacity: .8; }
.pg-spin { display: inline-block; width: .8em; height: .8em; margin-right: .45em; vertical-align: -0.05em;
  border: 2px solid rgba(0,114,178,.35); border-top-color: #0072B2; border-radius: 50%;
  animation: pg-spin 1s steps(8) infinite; }
@keyframes pg-spin { to { transform: rotate(360deg); } }
"""


# "Final text only" (a token view's toggle): the drafts that never reached the output are hidden, so the view reads as
# the output text; the rest keep their colours. A class on the view's element switches it (`app.presenter`).
FINAL_HIDDEN: tuple[str, ...] = (REJECTED, DISCARDED, UNVERIFIED)
FINAL_ONLY_CSS = ", ".join(f'.pg-final-only .tok[data-status="{status}"]' for status in FINAL_HIDDEN) + \
    " { display: none; }\n"


def _attr(value: object) -> str:
    """Any value placed inside an HTML attribute, escaped (quotes included)."""
    return html.escape(str(value), quote=True)


def _fmt_prob(x: float, lang: str) -> str:
    """A probability in `lang`: three decimals, or two significant digits when tiny (as the microscope writes it)."""
    return number(x, lang, ".3f" if x >= 0.001 or x == 0 else ".1e")


def _visible(text: str, status: str) -> str:
    """Escaped token text; tokens not in the output show their whitespace as symbols."""
    if text == "":
        return '<span class="ws">∅</span>'
    escaped = html.escape(text, quote=False)
    if status in (REJECTED, DISCARDED, UNVERIFIED) and not text.strip():
        # A struck-through newline or space would be invisible (and would break the line).
        marks = text.replace("\n", "↵").replace("\t", "⇥").replace(" ", "␣")
        return f'<span class="ws">{html.escape(marks, quote=False)}</span>'
    return escaped


def _spoken(text: str) -> str:
    """A token's text as a screen reader gets it: whitespace named by the symbols the page shows for it."""
    if not text.strip():
        return text.replace("\n", "↵").replace("\t", "⇥").replace(" ", "␣") or "∅"
    return text


def token_span(step: Step, tok_id: int, text: str, status: str, draft_index: int | None,
               lang: str = DEFAULT_LANGUAGE, pos: int | None = None) -> str:
    """One token as a span with its status, step and (where known) q and p; the tooltip in `lang`.

    `pos`: the row of the step's verification that judged or chose this token (`Step.dists[pos]`), for the tokens
    the microscope opens (`data-pos`, focusable); None for drafts never judged.
    """
    attrs = [f'data-status="{_attr(status)}"', f'data-step="{_attr(step.index)}"', f'data-id="{_attr(tok_id)}"']
    if pos is not None:
        attrs.append(f'data-pos="{_attr(pos)}"')
    elif draft_index is not None:  # never judged (discarded, unverified): the microscope says why there is no rule
        attrs.append(f'data-draft="{_attr(draft_index)}"')
    what = t(f"render.describe.{status}", lang)
    # Every token opens the microscope: a button whose name is its text and its fate, in the page's language (a
    # screen reader tells the fates apart without the colours); one tab stop for the whole output, arrows between
    # tokens (microscope_view.PICK_JS gives the first or the open token tabindex 0).
    attrs += ['role="button"', 'tabindex="-1"',
              f'aria-label="{_attr(t("render.aria.token", lang, text=_spoken(text), what=what))}"']
    tip = [t("render.tip.step", lang, step=step.index + 1, what=what)]
    if draft_index is not None:
        tip[0] += f" {draft_index + 1}/{len(step.drafted)}"
        if status == DISCARDED:
            tip.append(t("render.tip.never_judged", lang))
        q = step.q[draft_index] if step.q is not None and draft_index < len(step.q) else None
        p = step.p[draft_index] if step.p is not None and draft_index < len(step.p) else None
        if q is not None:
            attrs.append(f'data-q="{_attr(format(q, ".4g"))}"')
            tip.append(t("render.tip.q", lang, q=_fmt_prob(q, lang)))
        if p is not None and status not in (UNVERIFIED, DISCARDED):
            attrs.append(f'data-p="{_attr(format(p, ".4g"))}"')
            tip.append(t("render.tip.p", lang, p=_fmt_prob(p, lang)))
        mix = step.mixture[draft_index] if step.mixture is not None and draft_index < len(step.mixture) else None
        if mix is not None and status not in (UNVERIFIED, DISCARDED):
            attrs.append(f'data-v="{_attr(format(mix, ".4g"))}"')
            tip.append(t("render.tip.v", lang, v=_fmt_prob(mix, lang)))
    tip.append(t("render.tip.token", lang, id=str(tok_id), text=repr(text)))
    title = html.escape("\n".join(tip), quote=True)
    return f'<span class="tok" {" ".join(attrs)} title="{title}">{_visible(text, status)}</span>'


def token_positions(step: Step) -> list[int | None]:
    """For each token of `step.token_statuses()`, the position of the step's verification that decided it: a
    drafted token judged at i (accepted, or the refused one) is i, the target's own token (correction, bonus,
    baseline) is its index in `emitted`; drafts never judged (discarded, unverified) have none."""
    positions: list[int | None] = []
    emitted = step.accepted  # the target's own tokens follow the accepted drafts in `emitted`
    for _, _, status, draft_index in step.token_statuses():
        if status in (ACCEPTED, REJECTED):
            positions.append(draft_index)
        elif status in (CORRECTION, BONUS):
            positions.append(emitted)
            emitted += 1
        elif status == TARGET:
            positions.append(len(positions))
        else:
            positions.append(None)
    return positions


# A view shows at most this many tokens of one step: twice the longest draft a run asks for (a draft length of at
# most 64), so every real step is shown whole. A crafted trace's step of 99,999 drafts made a 62 MB answer per replay
# slider move; past the bound a note counts what is left out (docs/limits.md).
MAX_STEP_TOKENS_SHOWN = 128


def more_tokens(hidden: int, lang: str = DEFAULT_LANGUAGE) -> str:
    """The note for a step's tokens left out of a view (nothing when none is)."""
    if hidden <= 0:
        return ""
    return f'<span class="pg-empty" data-hidden="{hidden}">{html.escape(tn("render.more_tokens", hidden, lang))}</span>'


def render_step(step: Step, current: bool = False, lang: str = DEFAULT_LANGUAGE) -> str:
    """All tokens of one step (at most MAX_STEP_TOKENS_SHOWN, the rest counted), in reading order, wrapped in one
    span per step.

    `current` marks the step a replay is showing (outlined, `data-current="true"`).
    """
    entries = list(zip(step.token_statuses(), token_positions(step)))
    spans = "".join(token_span(step, *entry, lang=lang, pos=pos) for entry, pos in entries[:MAX_STEP_TOKENS_SHOWN])
    spans += more_tokens(len(entries) - MAX_STEP_TOKENS_SHOWN, lang)
    if current:
        return f'<span class="pg-step pg-current" data-step="{_attr(step.index)}" data-current="true">{spans}</span>'
    return f'<span class="pg-step" data-step="{_attr(step.index)}">{spans}</span>'


class TokenStream:
    """Incremental renderer: `add(step)` as steps arrive, `html()` whenever the page updates.

    Each step is rendered once; `html()` only joins cached pieces, and its result always extends
    the previous one (see the module docstring).
    """

    def __init__(self, lang: str = DEFAULT_LANGUAGE) -> None:
        self.lang = lang
        self._parts: list[str] = [open_tokens(lang)]
        self._steps = 0

    def add(self, step: Step) -> None:
        self._parts.append(render_step(step, lang=self.lang))
        self._steps += 1

    def extend(self, steps: Iterable[Step]) -> None:
        for step in steps:
            self.add(step)

    def __len__(self) -> int:
        """Steps rendered so far."""
        return self._steps

    def html(self) -> str:
        if not self._steps:
            return (open_tokens(self.lang) + f'<span class="pg-empty">{html.escape(t("render.waiting", self.lang))}'
                    '</span></div>')
        text = "".join(self._parts)
        # Collapse to a single string so the next join starts from it (amortised: one big piece).
        self._parts = [text]
        return text


def render_tokens(steps: Sequence[Step], current: int | None = None, earlier: int = 0,
                  lang: str = DEFAULT_LANGUAGE) -> str:
    """The coloured output of a list of steps (one-shot version of `TokenStream`).

    `current`: position in `steps` of the step to mark (a replay's current step), if any.
    `earlier`: steps before `steps` left out (a replay of a long trace shows a window), said in a note.
    """
    if not steps:
        return empty_tokens(lang=lang)
    if current is None and not earlier:
        stream = TokenStream(lang)
        stream.extend(steps)
        return stream.html() + "</div>"
    note = (f'<span class="pg-empty">{html.escape(tn("render.earlier_steps", earlier, lang))}</span> '
            if earlier else "")
    body = "".join(render_step(s, current=(i == current), lang=lang) for i, s in enumerate(steps))
    return f"{open_tokens(lang)}{note}{body}</div>"


def render_trace(trace: Trace, lang: str = DEFAULT_LANGUAGE) -> str:
    return render_tokens(trace.steps, lang=lang)


def empty_tokens(message: str | None = None, lang: str = DEFAULT_LANGUAGE) -> str:
    """The empty token box with a message (default: what will appear there, in `lang`)."""
    shown = t("render.empty", lang) if message is None else message
    return f'{open_tokens(lang)}<span class="pg-empty">{html.escape(shown)}</span></div>'


def legend_html(lang: str = DEFAULT_LANGUAGE) -> str:
    """The colour key; sample words, labels, meanings and hints in `lang`."""
    keys = []
    for (status, _, _), word in zip(LEGEND, _sample_words(lang)):
        sample = f'<span class="tok" data-status="{status}">{html.escape(word)}</span>'
        label, meaning = t(f"render.legend.{status}.label", lang), t(f"render.legend.{status}.meaning", lang)
        keys.append(f'<span class="pg-key" title="{html.escape(meaning)}">{sample} {html.escape(label)}</span>')
    return (
        '<div class="pg-legend" data-testid="pg-legend">' + "".join(keys)
        + f'<span class="pg-hint">{html.escape(t("render.legend.hover", lang))}</span>'
        + f'<span class="pg-hint" title="{html.escape(t("render.q_note", lang))}">'
        + f'{html.escape(t("render.legend.about_q", lang))}</span></div>'
    )


def _pct(x: float | None, lang: str) -> str:
    return "–" if x is None else number(x, lang, ".0%")


def stats_html(summary: Summary | None, plain: tuple[float | None, bool, str] | None = None,
               lang: str = DEFAULT_LANGUAGE) -> str:
    """The live figures: new tokens, steps, acceptance, tokens/step, tokens/s, elapsed; and, when the run was
    checked against plain generate(), `plain` = (measured speedup, identical, verdict) as one more line. Before the
    first step there is no figure to show: one line says what will appear (not a row of dashes)."""
    s = summary or Summary()
    started = summary is not None and s.steps > 0
    if not started and plain is None:
        return (f'<div class="pg-stats pg-stats-empty" data-testid="pg-stats">'
                f'<div class="pg-hint">{html.escape(t("render.stats.empty", lang))}</div></div>')
    cells = (
        ("new_tokens", count(s.new_tokens, lang) if started else "–", t("render.stat.new_tokens", lang)),
        ("steps", count(s.steps, lang) if started else "–", t("render.stat.steps", lang)),
        ("acceptance_rate", _pct(s.acceptance_rate, lang) if started else "–",
         t("render.stat.acceptance_of", lang, accepted=s.accepted, drafted=s.drafted) if started and s.drafted
         else t("render.stat.acceptance", lang)),
        ("tokens_per_step", number(s.tokens_per_step, lang) if started and s.tokens_per_step else "–",
         t("render.stat.tokens_per_step", lang)),
        ("tokens_per_s", number(s.tokens_per_s, lang, ".1f") if started and s.tokens_per_s else "–",
         t("render.stat.tokens_per_s", lang)),
        ("elapsed_s", t("render.stat.seconds", lang, s=number(s.elapsed_s, lang)) if started else "–",
         t("render.stat.elapsed", lang)),
    )
    body = "".join(
        f'<div class="pg-stat" data-stat="{_attr(key)}"><div class="pg-value">{html.escape(value)}</div>'
        f'<div class="pg-label">{html.escape(label)}</div></div>'
        for key, value, label in cells
    )
    check = ""
    if plain is not None:
        speedup, identical, verdict = plain
        measured = (t("render.plain.speed", lang, x=number(speedup, lang)) if speedup
                    else t("render.plain.not_measured", lang))
        check = (f'<div class="pg-plain-check" data-testid="pg-plain-check" data-identical="{str(identical).lower()}">'
                 f'{"✓" if identical else "≠"} {html.escape(measured)} {html.escape(t("render.plain.once", lang))} · '
                 f'{html.escape(verdict)}</div>')
    return f'<div class="pg-stats" data-testid="pg-stats">{body}</div>{check}'


def status_html(message: str, kind: str = "idle", note: str = "") -> str:
    """A one-line status box; kind "error" makes it an alert (role="alert")."""
    role = ' role="alert"' if kind == "error" else ' role="status"'
    icon = {"error": "⚠ ", "done": "✓ ", "running": '<span class="pg-spin" aria-hidden="true"></span>'}.get(kind, "")
    extra = f' <span class="pg-note">{html.escape(note)}</span>' if note else ""
    return (
        f'<div class="pg-status" data-kind="{_attr(kind)}" data-testid="pg-status"{role}>'
        f"{icon}{html.escape(message)}{extra}</div>"
    )


def render_document(trace: Trace, title: str | None = None, lang: str = DEFAULT_LANGUAGE) -> str:
    """A standalone HTML page of a trace (styles inlined), e.g. to share a run; in `lang`, right to left where
    that language is written so."""
    title = t("render.document_title", lang) if title is None else title
    return (
        f"<!doctype html><html lang='{_attr(lang)}' dir='{direction(lang)}'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head>"
        "<body style='font-family: system-ui, sans-serif; max-width: 60em; margin: 2em auto'>"
        f"<h1 style='font-size: 1.2em'>{html.escape(trace.method)} · {html.escape(trace.target)}</h1>"
        f"{legend_html(lang)}{render_trace(trace, lang)}{stats_html(trace.summary, lang=lang)}</body></html>"
    )


# --------------------------------------------------------------------------- replay: one step in words and pictures

# Who drafts, per method, for the narration ("Step 5: the assistant drafted 4 tokens …"): `render.drafter.<method>`.
DRAFTER: dict[str, str] = {name: t(f"render.drafter.{name}") for name, method in METHODS.items() if method.drafts}

# Why a first step drafted nothing, for traces that do not say (schema 1), for the methods whose drafter needs the
# target's outputs first (`Method.first_step_drafts`): `render.no_draft.<method>`.
_NO_DRAFT: frozenset[str] = frozenset(name for name, method in METHODS.items() if not method.first_step_drafts)

# Reasons the engine records in `Step.no_draft_reason` (English, from the method registry), and their keys: a
# trace keeps the English sentence as its language-neutral identifier, and a replay shows it in the viewer's
# language (`methods.NO_DRAFT_REASONS` is the list; an unknown reason is shown as recorded).
def _reason(text: str, lang: str) -> str:
    for code, english in NO_DRAFT_REASONS.items():
        if english == text:
            return t(f"no_draft.{code}", lang, default=english)
    return text


# A narration is read aloud from a projector: each quote in it at most this many characters (whole tokens, then an
# ellipsis), so the step in words stays a few lines above the fold at 1280×720 even when 64 drafts are refused.
NARRATION_QUOTE_CHARS = 60


def _quote(texts: Sequence[str], lang: str = DEFAULT_LANGUAGE) -> str:
    """Token texts as one quoted string, whitespace made visible (bidi-isolated inside other languages' prose); past
    NARRATION_QUOTE_CHARS characters (whole tokens; a first token longer than that cut), an ellipsis."""
    shown: list[str] = []
    used, cut = 0, len(texts) > MAX_STEP_TOKENS_SHOWN
    for piece in texts[:MAX_STEP_TOKENS_SHOWN]:
        if used + len(piece) > NARRATION_QUOTE_CHARS:
            shown.append(piece[:NARRATION_QUOTE_CHARS] if not shown else "")
            cut = True
            break
        shown.append(piece)
        used += len(piece)
    more = "…" if cut else ""
    text = ("".join(shown) + more).replace("\n", "↵").replace("\t", "⇥")
    return t("narrate.quote", lang, text=text)  # each language's own quotes (« … » in Russian and Arabic)


def _tokens_word(n: int, lang: str = DEFAULT_LANGUAGE) -> str:
    return tn("render.tokens", n, lang)


def narrate_step(step: Step, method: str = "", position: int | None = None, lang: str = DEFAULT_LANGUAGE) -> str:
    """One step in plain words (plain text, in `lang`): what was drafted, kept, refused and put in its place.

    `position`: the step's 0-based position in the trace (defaults to `step.index`).
    """
    n = (step.index if position is None else position) + 1
    drafted_text = step.drafted_text or [""] * len(step.drafted)
    emitted_text = step.emitted_text or [""] * len(step.emitted)

    def q(texts: Sequence[str]) -> str:
        return _quote(texts, lang)

    other = t("narrate.other_time", lang, ms=number(step.other_ms, lang, ".1f")) if step.other_ms else ""
    timing = t("narrate.timing", lang, draft=number(step.draft_ms, lang, ".1f"), verify=number(step.verify_ms, lang, ".1f"), other=other)
    if not step.drafted:
        if not method or is_reference(method):
            took = t("narrate.took", lang, ms=number(step.verify_ms, lang, ".1f"),
                     prompt=t("narrate.reads_prompt", lang) if n == 1 else "",
                     other=t("narrate.other_time_end", lang, ms=number(step.other_ms, lang, ".1f")) if step.other_ms
                     else t("narrate.period", lang))
            return t("narrate.plain", lang, step=n, text=q(emitted_text)) + took
        if step.no_draft_reason:
            why = _reason(step.no_draft_reason, lang)
        elif n == 1 and method in _NO_DRAFT:
            why = t(f"render.no_draft.{method}", lang)
        else:
            why = t("no_draft.nothing_proposed", lang)
        return t("narrate.no_draft", lang, step=n, why=why, text=q(emitted_text)) + timing
    who = t(f"render.drafter.{method}", lang) if method in DRAFTER else t("render.drafter.other", lang)
    k = len(step.drafted)
    text = t("narrate.drafted", lang, step=n, who=who, tokens=_tokens_word(k, lang), text=q(drafted_text))
    a = step.accepted
    extra = emitted_text[a:]
    if step.rejected:
        r0 = a  # index of the first rejected draft
        probs = []
        if step.p is not None and r0 < len(step.p):
            probs.append(t("narrate.target_gave", lang, text=q([drafted_text[r0]]), p=_fmt_prob(step.p[r0], lang)))
        if step.q is not None and r0 < len(step.q):
            probs.append(t("narrate.draft_q", lang, q=_fmt_prob(step.q[r0], lang)))
        why = f" ({joined(probs, lang)})" if probs else ""
        rejected_text = drafted_text[a:a + len(step.rejected)]
        if a == 0:
            text += t("narrate.rejected_first", lang, text=q(rejected_text), why=why)
        else:
            text += t("narrate.accepted_rejected", lang, accepted=a, kept=q(drafted_text[:a]), text=q(rejected_text),
                      why=why)
        text += t("narrate.in_its_place", lang, text=q(extra)) if extra else ""
        if step.discarded:
            gone = drafted_text[a + len(step.rejected):a + len(step.rejected) + len(step.discarded)]
            text += tn("narrate.discarded", len(step.discarded), lang, tokens=_tokens_word(len(step.discarded), lang),
                       text=q(gone))
        text += t("narrate.period", lang)
    elif step.unverified:
        verified = k - len(step.unverified)
        text += t("narrate.unverified", lang, n=len(step.unverified), verified=verified, tokens=_tokens_word(len(step.unverified), lang),
                  text=q(drafted_text[verified:]))
        if extra:
            text = text[:-1] + t("narrate.added_first", lang, text=q(extra))
    elif extra:
        text += t("narrate.all_bonus", lang, n=k, text=q(extra))
    else:
        text += t("narrate.all_ended", lang, n=k)
    return text + timing


def _chip(status: str, text: str, label: str = "", extra_class: str = "") -> str:
    sub = f'<span class="pg-chip-sub">{html.escape(label)}</span>' if label else ""
    cls = f"pg-chip {extra_class}".strip()
    # A lone space or newline would be an empty-looking chip: show whitespace as symbols here.
    shown = _visible(text, UNVERIFIED if text and not text.strip() else status)
    return f'<span class="{_attr(cls)}"><span class="tok" data-status="{_attr(status)}">{shown}</span>{sub}</span>'



def step_detail_html(step: Step, method: str = "", position: int | None = None,
                     lang: str = DEFAULT_LANGUAGE) -> str:
    """The step as three phases: draft (with q) → verify (p, kept or not) → append (what the output got)."""
    n = (step.index if position is None else position) + 1
    drafted_text = step.drafted_text or [""] * len(step.drafted)
    statuses = {i: status for _, _, status, i in step.token_statuses() if i is not None}
    draft_chips = []
    verify_chips = []
    for i, text in enumerate(drafted_text[:MAX_STEP_TOKENS_SHOWN]):
        q = step.q[i] if step.q is not None and i < len(step.q) else None
        p = step.p[i] if step.p is not None and i < len(step.p) else None
        draft_chips.append(_chip("draft", text, f"q {_fmt_prob(q, lang)}" if q is not None else ""))
        mix = step.mixture[i] if step.mixture is not None and i < len(step.mixture) else None
        status = statuses.get(i, REJECTED)
        mark = t(f"detail.mark.{status}", lang)
        judged = status not in (UNVERIFIED, DISCARDED)
        label = ((f"p {_fmt_prob(p, lang)} " if p is not None and judged else "")
                 + (f"v {_fmt_prob(mix, lang)} " if mix is not None and judged else "") + mark)
        verify_chips.append(_chip(status, text, label))
    appended = [(text, status) for _, text, status, i in step.token_statuses()
                if status in (ACCEPTED, CORRECTION, BONUS, TARGET)]
    append_chips = [_chip(status, text) for text, status in appended[:MAX_STEP_TOKENS_SHOWN]]
    append_chips.append(more_tokens(len(appended) - MAX_STEP_TOKENS_SHOWN, lang))
    more_drafts = more_tokens(len(drafted_text) - MAX_STEP_TOKENS_SHOWN, lang)
    if not step.drafted:
        draft_body = f'<span class="pg-none">{html.escape(t("detail.nothing_drafted", lang))}</span>'
        verify_body = f'<span class="pg-none">{html.escape(t("detail.plain_forward", lang))}</span>'
    else:
        draft_body = "".join(draft_chips) + more_drafts
        verify_body = "".join(verify_chips) + more_drafts
    phases = [
        (t("detail.phase.draft", lang), t("render.stat.ms", lang, ms=number(step.draft_ms, lang, ".1f")), draft_body),
        (t("detail.phase.verify", lang), t("render.stat.ms", lang, ms=number(step.verify_ms, lang, ".1f")), verify_body),
        (t("detail.phase.append", lang), t("detail.append_cost", lang, tokens=_tokens_word(len(step.emitted), lang),
                                           ms=number(step.other_ms, lang, ".1f")),
         "".join(append_chips) or f'<span class="pg-none">{html.escape(t("detail.nothing", lang))}</span>'),
    ]
    boxes = '<span class="pg-arrow" aria-hidden="true">→</span>'.join(
        f'<div class="pg-phase" data-phase="{i}"><div class="pg-phase-title">{html.escape(title)}'
        f' <span class="pg-phase-cost">{html.escape(cost)}</span></div><div class="pg-chips">{body}</div></div>'
        for i, (title, cost, body) in enumerate(phases, start=1)
    )
    narration = html.escape(narrate_step(step, method, position, lang))
    q_note_key = METHODS[method].q_note_key if method in METHODS else "detail.q_note"  # where q comes from
    q_note = (f'<p class="pg-note" title="{html.escape(t("render.q_note", lang))}">'
              + html.escape(t(q_note_key, lang)
                            + (t("detail.v_note", lang) if step.mixture else "")
                            + t("narrate.period", lang), quote=False)
              + '</p>') if step.q is not None else ""
    return (f'<div class="pg-replay-step" data-testid="pg-replay-step" data-step="{_attr(n)}">'
            f'<p class="pg-narration">{narration}</p><div class="pg-flow">{boxes}</div>{q_note}</div>')


def emitted_spans(steps: Sequence[Step]) -> str:
    """Only what reached the output, each token coloured by how it got there (no rejected or unverified drafts)."""
    parts = []
    for step in steps:
        texts = step.emitted_text or [""] * len(step.emitted)
        for j, (tok, text) in enumerate(zip(step.emitted, texts)):
            if not step.drafted:
                status = TARGET
            elif j < step.accepted:
                status = ACCEPTED
            else:
                status = CORRECTION if step.rejected else BONUS
            parts.append(f'<span class="tok" data-status="{_attr(status)}" data-step="{_attr(step.index)}">'
                         f"{_visible(text, status)}</span>")
    return "".join(parts)


def race_html(lanes: Sequence[dict], clock_s: float, speed: float, verdict: str = "",
              lang: str = DEFAULT_LANGUAGE) -> str:
    """Two (or more) race lanes side by side; `speed`: replay speed over the recorded one (1 = as recorded).

    Each lane: label (its id, in `data-lane`), name (shown; the label where absent), steps (the steps shown so far),
    total_tokens, finish_s (recorded time of its last step).
    """
    rows = []
    lane_dir = "" if lang == DEFAULT_LANGUAGE else ' dir="auto"'
    for lane in lanes:
        shown = lane["steps"]
        tokens = sum(len(s.emitted) for s in shown)
        total = max(1, lane["total_tokens"])
        done = tokens >= lane["total_tokens"] and len(shown) == lane.get("total_steps", len(shown))
        finished = t("race.finished", lang, s=number(lane['finish_s'], lang))
        finish = (f'<span class="pg-lane-done">{html.escape(finished)}</span>' if done else
                  f'<span class="pg-lane-run">{html.escape(tn("race.steps", len(shown), lang))}</span>')
        rows.append(
            f'<div class="pg-lane" data-lane="{_attr(lane["label"])}" data-tokens="{_attr(tokens)}" '
            f'data-done="{str(done).lower()}">'
            f'<div class="pg-lane-head"><b>{html.escape(str(lane.get("name") or lane["label"]))}</b>'
            f'<span>{html.escape(t("race.tokens", lang, done=tokens, n=lane["total_tokens"]))}</span>{finish}</div>'
            f'<div class="pg-bar"><div style="width:{100 * tokens / total:.1f}%"></div></div>'
            f'<div class="pg-tokens pg-lane-text"{lane_dir}>{emitted_spans(shown)}</div></div>'
        )
    if abs(speed - 1) < 0.05:
        pace = t("race.pace.recorded", lang)
    elif speed < 1:
        pace = t("race.pace.slower", lang, x=number(1 / speed, lang, ".1f"))
    else:
        pace = t("race.pace.faster", lang, x=number(speed, lang, ".1f"))
    clock = (f'<div class="pg-clock">{html.escape(t("race.recorded_time", lang))} <b>{html.escape(t("render.stat.seconds", lang, s=number(clock_s, lang)))}</b> '
             f'<span class="pg-note">{html.escape(t("race.clock_note", lang, pace=pace), quote=False)}</span></div>')
    tail = f'<div class="pg-verdict">{html.escape(verdict)}</div>' if verdict else ""
    return f'<div class="pg-race" data-testid="pg-race">{clock}<div class="pg-lanes">{"".join(rows)}</div>{tail}</div>'


CSS += """
.pg-step.pg-current { outline: 2px solid #0072B2; outline-offset: 2px; border-radius: 4px;
  background: rgba(0,114,178,.07); }
.pg-replay-step { font-size: 14px; }
.pg-narration { margin: 2px 0 8px; line-height: 1.5; }
.pg-flow { display: flex; align-items: stretch; gap: 6px; flex-wrap: wrap; }
.pg-phase { flex: 1 1 200px; border: 1px solid rgba(128,128,128,.35); border-radius: 8px; padding: 6px 8px; }
.pg-phase-title { font-size: 12px; font-weight: 600; opacity: .85; margin-bottom: 4px; text-transform: uppercase;
  letter-spacing: .03em; }
.pg-phase-cost { font-weight: 400; opacity: .8; text-transform: none; }
.pg-arrow { align-self: center; font-size: 20px; opacity: .8; }
.pg-chips { display: flex; flex-wrap: wrap; gap: 4px 6px; }
.pg-chip { display: inline-flex; flex-direction: column; align-items: center; }
.pg-chip .tok { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; white-space: pre; }
.pg-chip .tok[data-status="draft"] { background: rgba(128,128,128,.18); }
.pg-chip-sub { font-size: 10.5px; opacity: .8; font-variant-numeric: tabular-nums; }
.pg-none { opacity: .8; font-style: italic; }
.pg-race { display: flex; flex-direction: column; gap: 8px; }
.pg-clock { font-size: 14px; font-variant-numeric: tabular-nums; }
.pg-lanes { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 10px; }
@media (max-width: 900px) { .pg-lanes { grid-template-columns: 1fr; } }
.pg-lane { border: 1px solid rgba(128,128,128,.35); border-radius: 8px; padding: 8px; }
.pg-lane[data-done="true"] { border-color: rgba(0,158,115,.8); }
.pg-lane-head { display: flex; gap: 12px; align-items: baseline; font-size: 14px; margin-bottom: 4px;
  font-variant-numeric: tabular-nums; }
.pg-lane-done { color: #009E73; font-weight: 600; }
.pg-lane-run { opacity: .7; }
.pg-bar { height: 6px; border-radius: 3px; background: rgba(128,128,128,.2); overflow: hidden; margin-bottom: 6px; }
.pg-bar > div { height: 100%; background: #0072B2; }
.pg-lane-text { min-height: 9em; font-size: 13.5px; }
.pg-verdict { font-size: 15px; font-weight: 600; }
.pg-table { border-collapse: collapse; font-size: 13.5px; width: 100%; font-variant-numeric: tabular-nums; }
.pg-table th, .pg-table td { border-bottom: 1px solid rgba(128,128,128,.3); padding: 4px 8px; text-align: right; }
.pg-table th:first-child, .pg-table td:first-child { text-align: left; }
.pg-table th { font-weight: 600; font-size: 12.5px; opacity: .85; }
.pg-table tr[data-reference] td { opacity: .8; }
.pg-diagnosis { margin: 4px 0 0 0; padding-left: 1.2em; line-height: 1.5; font-size: 14px; }
.pg-diagnosis li { margin-bottom: 3px; }
.pg-methods-table { border-collapse: collapse; font-size: 13.5px; width: 100%; }
.pg-methods-table th, .pg-methods-table td { border: 1px solid rgba(128,128,128,.3); padding: 6px 8px;
  vertical-align: top; text-align: left; }
.pg-methods-table th { font-weight: 600; }
"""
