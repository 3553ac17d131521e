"""Trace → coloured HTML: every token a span that says what happened to it.

Pure functions over `playground.trace` records (no torch, no tokenizer, no Gradio), so a saved
trace renders exactly like a live one. Each token is
``<span class="tok" data-status="accepted" data-step="3" data-q="…" data-p="…" title="…">``
with the status names of `playground.trace`; rejected drafts stay where they were proposed,
struck through, followed by the target's correction.

Rendering is incremental: `TokenStream` renders each step once when it arrives and keeps the
pieces, so updating the page after step n costs a join of n cached strings, not a re-render of
the whole trace. Its output only ever grows at the end (the container is left open; the browser
closes it), which also lets Gradio send each streamed update as an append-only diff.

The palette is Okabe–Ito (readable with the common colour-vision deficiencies) used as
translucent tints over the page background, so it works in light and dark mode, and every
status also has a non-colour cue: strike-through (rejected), thick underline (correction), a
star (bonus), dashed outline and italics (unverified).
"""

from __future__ import annotations

import html
from typing import Iterable, Sequence

from .trace import ACCEPTED, BONUS, CORRECTION, REJECTED, TARGET, UNVERIFIED, Step, Summary, Trace

# Okabe–Ito colours, one per status (see the module docstring).
PALETTE: dict[str, str] = {
    ACCEPTED: "#009E73",  # bluish green
    REJECTED: "#D55E00",  # vermillion
    CORRECTION: "#0072B2",  # blue
    BONUS: "#CC79A7",  # reddish purple
    TARGET: "#999999",  # neutral grey
    UNVERIFIED: "#E69F00",  # orange
}

LEGEND: tuple[tuple[str, str, str], ...] = (
    (ACCEPTED, "accepted", "drafted and kept by the target"),
    (REJECTED, "rejected", "drafted, refused by the target (struck through)"),
    (CORRECTION, "correction", "the target's own token after a rejection (underlined)"),
    (BONUS, "bonus", "the free extra token after a fully accepted draft (★)"),
    (TARGET, "target", "produced by the target with no draft in that step"),
    (UNVERIFIED, "unverified", "drafted past the end of generation, never checked (dashed)"),
)

_SAMPLE_TEXT = {ACCEPTED: "the", REJECTED: "cat", CORRECTION: "dog", BONUS: "ran", TARGET: "away", UNVERIFIED: "fast"}

OPEN_TOKENS = '<div class="pg-tokens" data-testid="pg-tokens">'

# Styles for everything this module emits. The UI passes it to `launch(css=...)`;
# `render_document` inlines it for a standalone page.
CSS = """
.pg-tokens { white-space: pre-wrap; word-break: break-word; line-height: 1.9; font-size: 15px;
  font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; padding: 10px 12px;
  border-radius: 8px; border: 1px solid rgba(128,128,128,.35); min-height: 7em; }
.pg-tokens .pg-empty { opacity: .6; font-style: italic; font-family: var(--font, sans-serif); }
.pg-step { border-radius: 3px; }
.pg-step:hover { outline: 1px solid rgba(128,128,128,.8); outline-offset: 1px; }
.tok { border-radius: 3px; padding: 0 1px; }
.tok[data-status="accepted"] { background: rgba(0,158,115,.24); }
.tok[data-status="rejected"] { background: rgba(213,94,0,.22); text-decoration: line-through;
  text-decoration-color: #D55E00; text-decoration-thickness: 2px; opacity: .8; }
.tok[data-status="correction"] { background: rgba(0,114,178,.24); text-decoration: underline;
  text-decoration-color: #3d9ae0; text-decoration-thickness: 3px; text-underline-offset: 3px; }
.tok[data-status="bonus"] { background: rgba(204,121,167,.32); box-shadow: inset 0 0 0 1px rgba(204,121,167,.95); }
.tok[data-status="bonus"]::after { content: "★"; font-size: .7em; vertical-align: super; line-height: 0;
  color: #CC79A7; margin-left: 1px; user-select: none; }
.tok[data-status="target"] { }
.tok[data-status="unverified"] { outline: 1px dashed #E69F00; outline-offset: -1px; font-style: italic; opacity: .7; }
.tok .ws { opacity: .65; }
.pg-legend { display: flex; flex-wrap: wrap; gap: 6px 16px; font-size: 13px; margin: 2px 0 6px; align-items: center; }
.pg-legend .pg-key { display: inline-flex; gap: 6px; align-items: center; }
.pg-legend .tok { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.pg-legend .pg-hint { opacity: .7; }
.pg-stats { display: grid; grid-template-columns: repeat(6, minmax(0, 1fr)); gap: 8px; }
@media (max-width: 900px) { .pg-stats { grid-template-columns: repeat(3, minmax(0, 1fr)); } }
.pg-stat { border: 1px solid rgba(128,128,128,.35); border-radius: 8px; padding: 6px 10px; }
.pg-stat .pg-value { font-size: 22px; font-weight: 600; font-variant-numeric: tabular-nums; line-height: 1.2; }
.pg-stat .pg-label { font-size: 12px; opacity: .75; }
.pg-status { font-size: 14px; padding: 6px 10px; border-radius: 8px; border: 1px solid rgba(128,128,128,.35); }
.pg-status[data-kind="running"] { border-color: rgba(0,114,178,.7); }
.pg-status[data-kind="done"] { border-color: rgba(0,158,115,.7); }
.pg-status[data-kind="error"] { border: 2px solid #D55E00; background: rgba(213,94,0,.12); font-weight: 500; }
.pg-status .pg-note { opacity: .75; }
.pg-spin { display: inline-block; width: .8em; height: .8em; margin-right: .45em; vertical-align: -0.05em;
  border: 2px solid rgba(0,114,178,.35); border-top-color: #0072B2; border-radius: 50%;
  animation: pg-spin 1s steps(8) infinite; }
@keyframes pg-spin { to { transform: rotate(360deg); } }
"""


def _fmt_prob(x: float) -> str:
    return f"{x:.3f}" if x >= 0.001 or x == 0 else f"{x:.1e}"


def _visible(text: str, status: str) -> str:
    """Escaped token text; tokens not in the output show their whitespace as symbols."""
    if text == "":
        return '<span class="ws">∅</span>'
    escaped = html.escape(text, quote=False)
    if status in (REJECTED, UNVERIFIED) and not text.strip():
        # A struck-through newline or space would be invisible (and would break the line).
        marks = text.replace("\n", "↵").replace("\t", "⇥").replace(" ", "␣")
        return f'<span class="ws">{html.escape(marks, quote=False)}</span>'
    return escaped


_DESCRIBE = {
    ACCEPTED: "accepted draft",
    REJECTED: "rejected draft",
    CORRECTION: "correction by the target",
    BONUS: "bonus token from the target",
    TARGET: "target token (nothing drafted)",
    UNVERIFIED: "unverified draft (past the end)",
}


def token_span(step: Step, tok_id: int, text: str, status: str, draft_index: int | None) -> str:
    """One token as a span with its status, step and (where known) q and p."""
    attrs = [f'data-status="{status}"', f'data-step="{step.index}"', f'data-id="{tok_id}"']
    tip = [f"step {step.index + 1} · {_DESCRIBE[status]}"]
    if draft_index is not None:
        tip[0] += f" {draft_index + 1}/{len(step.drafted)}"
        q = step.q[draft_index] if step.q is not None and draft_index < len(step.q) else None
        p = step.p[draft_index] if step.p is not None and draft_index < len(step.p) else None
        if q is not None:
            attrs.append(f'data-q="{q:.4g}"')
            tip.append(f"draft q = {_fmt_prob(q)}")
        if p is not None and status != UNVERIFIED:
            attrs.append(f'data-p="{p:.4g}"')
            tip.append(f"target p = {_fmt_prob(p)}")
    tip.append(f"token {tok_id}: {text!r}")
    title = html.escape("\n".join(tip), quote=True)
    return f'<span class="tok" {" ".join(attrs)} title="{title}">{_visible(text, status)}</span>'


def render_step(step: Step, current: bool = False) -> str:
    """All tokens of one step, in reading order, wrapped in one span per step.

    `current` marks the step a replay is showing (outlined, `data-current="true"`).
    """
    spans = "".join(token_span(step, *entry) for entry in step.token_statuses())
    if current:
        return f'<span class="pg-step pg-current" data-step="{step.index}" data-current="true">{spans}</span>'
    return f'<span class="pg-step" data-step="{step.index}">{spans}</span>'


class TokenStream:
    """Incremental renderer: `add(step)` as steps arrive, `html()` whenever the page updates.

    Each step is rendered once; `html()` only joins cached pieces, and its result always extends
    the previous one (see the module docstring).
    """

    def __init__(self) -> None:
        self._parts: list[str] = [OPEN_TOKENS]
        self._steps = 0

    def add(self, step: Step) -> None:
        self._parts.append(render_step(step))
        self._steps += 1

    def extend(self, steps: Iterable[Step]) -> None:
        for step in steps:
            self.add(step)

    def __len__(self) -> int:
        """Steps rendered so far."""
        return self._steps

    def html(self) -> str:
        if not self._steps:
            return OPEN_TOKENS + '<span class="pg-empty">Waiting for the first token…</span></div>'
        text = "".join(self._parts)
        # Collapse to a single string so the next join starts from it (amortised: one big piece).
        self._parts = [text]
        return text


def render_tokens(steps: Sequence[Step], current: int | None = None) -> str:
    """The coloured output of a list of steps (one-shot version of `TokenStream`).

    `current`: position in `steps` of the step to mark (a replay's current step), if any.
    """
    if not steps:
        return empty_tokens()
    if current is None:
        stream = TokenStream()
        stream.extend(steps)
        return stream.html() + "</div>"
    body = "".join(render_step(s, current=(i == current)) for i, s in enumerate(steps))
    return f"{OPEN_TOKENS}{body}</div>"


def render_trace(trace: Trace) -> str:
    return render_tokens(trace.steps)


def empty_tokens(message: str = "Generated tokens appear here, coloured by their fate.") -> str:
    return f'{OPEN_TOKENS}<span class="pg-empty">{html.escape(message)}</span></div>'


def legend_html() -> str:
    keys = []
    for status, label, meaning in LEGEND:
        sample = f'<span class="tok" data-status="{status}">{_SAMPLE_TEXT[status]}</span>'
        keys.append(f'<span class="pg-key" title="{html.escape(meaning)}">{sample} {label}</span>')
    return (
        '<div class="pg-legend" data-testid="pg-legend">' + "".join(keys)
        + '<span class="pg-hint">· hover a token for its step and probabilities</span></div>'
    )


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.0%}"


def stats_html(summary: Summary | None) -> str:
    """The live figures: new tokens, steps, acceptance, tokens/step, tokens/s, elapsed."""
    s = summary or Summary()
    started = summary is not None and s.steps > 0
    cells = (
        ("new_tokens", f"{s.new_tokens}" if started else "–", "new tokens"),
        ("steps", f"{s.steps}" if started else "–", "steps (target forwards)"),
        ("acceptance_rate", _pct(s.acceptance_rate) if started else "–",
         f"acceptance ({s.accepted}/{s.drafted})" if started and s.drafted else "acceptance"),
        ("tokens_per_step", f"{s.tokens_per_step:.2f}" if started and s.tokens_per_step else "–", "tokens / step"),
        ("tokens_per_s", f"{s.tokens_per_s:.1f}" if started and s.tokens_per_s else "–", "tokens / s"),
        ("elapsed_s", f"{s.elapsed_s:.2f} s" if started else "–", "elapsed"),
    )
    body = "".join(
        f'<div class="pg-stat" data-stat="{key}"><div class="pg-value">{value}</div>'
        f'<div class="pg-label">{html.escape(label)}</div></div>'
        for key, value, label in cells
    )
    return f'<div class="pg-stats" data-testid="pg-stats">{body}</div>'


def status_html(message: str, kind: str = "idle", note: str = "") -> str:
    """A one-line status box; kind "error" makes it an alert (role="alert")."""
    role = ' role="alert"' if kind == "error" else ' role="status"'
    icon = {"error": "⚠ ", "done": "✓ ", "running": '<span class="pg-spin" aria-hidden="true"></span>'}.get(kind, "")
    extra = f' <span class="pg-note">{html.escape(note)}</span>' if note else ""
    return (
        f'<div class="pg-status" data-kind="{kind}" data-testid="pg-status"{role}>'
        f"{icon}{html.escape(message)}{extra}</div>"
    )


def render_document(trace: Trace, title: str = "Assisted decoding trace") -> str:
    """A standalone HTML page of a trace (styles inlined), e.g. to share a run."""
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head>"
        "<body style='font-family: system-ui, sans-serif; max-width: 60em; margin: 2em auto'>"
        f"<h1 style='font-size: 1.2em'>{html.escape(trace.method)} · {html.escape(trace.target)}</h1>"
        f"{legend_html()}{render_trace(trace)}{stats_html(trace.summary)}</body></html>"
    )
