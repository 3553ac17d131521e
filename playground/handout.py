"""A printable handout of one run: a self-contained HTML page (print CSS inlined) in the page's language.

What a lecturer hands out after showing a run: the run's settings and prompt, the output with every token's fate and
the legend that names the fates (in words, for a black-and-white printer), the run's figures, the acceptance rule
Transformers applied with this run's own numbers (α = kept / judged, τ = new tokens / steps), one step annotated
position by position (the first step with a refusal, else the first that drafted, else the first: the microscope's
own sentences, `microscope.explain`), and the `generate()` call that made it.

Pure over a `Trace` (no torch, no Gradio): the page and `python -m playground handout trace.json` render the same
page. The call is the one `snippet.script_for_trace` writes where the caller could load the run's models (passed in as
`script`); without it, the arguments are rebuilt from the trace by the method registry's own functions
(`Method.split_params`, `assistant_kwargs`), the ones the engine builds its call with.
"""

from __future__ import annotations

import copy
import dataclasses
import html
from typing import Any

from . import microscope, render
from .i18n import DEFAULT_LANGUAGE, Number, direction, normalize, t
from .methods import ensemble_weight, get_method
from .outside import for_terminal
from .trace import Step, Trace

# The rule's key per `microscope` rule name (`handout.rule.<rule>`), and the one for a run that drafted nothing.
RULE_KEYS = {rule: f"handout.rule.{rule}" for rule in (microscope.GREEDY, microscope.GREEDY_ENSEMBLE,
                                                        microscope.SAMPLING, microscope.SAMPLING_ENSEMBLE,
                                                        microscope.SAMPLING_MATCH)}
NO_DRAFT_RULE = "handout.rule.none"

CSS = """
body.pg-handout { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 52em; margin: 1.5em auto;
  padding: 0 1em; color: #111; background: #fff; line-height: 1.45; }
.pg-handout h1 { font-size: 1.35em; margin: 0 0 .2em; }
.pg-handout h2 { font-size: 1.05em; margin: 1.1em 0 .35em; border-bottom: 1px solid #bbb; padding-bottom: 2px; }
.pg-handout .pg-meta { margin: 0; color: #333; }
.pg-handout blockquote { margin: .3em 0; padding: .3em .7em; border-inline-start: 3px solid #999; white-space: pre-wrap;
  unicode-bidi: plaintext; }
.pg-handout dl.pg-fates { display: grid; grid-template-columns: max-content 1fr; gap: 2px 10px; margin: .3em 0; }
.pg-handout dl.pg-fates dt { margin: 0; }
.pg-handout dl.pg-fates dd { margin: 0; }
.pg-handout .pg-formula { font-family: ui-monospace, Menlo, Consolas, monospace; }
.pg-handout ol.pg-positions > li { margin: .35em 0; }
.pg-handout ol.pg-positions ul { margin: .1em 0; padding-inline-start: 1.2em; }
.pg-handout pre { white-space: pre-wrap; word-break: break-word; font-size: 12px; border: 1px solid #ccc;
  border-radius: 4px; padding: .5em .7em; direction: ltr; text-align: left; }
.pg-handout .pg-print-hint { color: #555; font-size: .9em; }
.pg-handout .pg-tokens { min-height: 0; max-height: none; overflow: visible; }
.pg-handout .pg-stats { display: flex; flex-wrap: wrap; gap: 4px 16px; }
.pg-handout section { break-inside: avoid; page-break-inside: avoid; }
@page { margin: 14mm; }
@media print {
  body.pg-handout { margin: 0; max-width: none; font-size: 11pt; }
  .pg-handout .pg-print-hint { display: none; }
  .pg-handout .tok { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  .pg-handout h2 { break-after: avoid; page-break-after: avoid; }
}
"""


def check(trace: Trace) -> None:
    """Refuse, in one line (a `PlaygroundError`), a trace the handout cannot describe truthfully: a method the
    registry does not know, parameters it would not run (`Method.resolve_params`: a value of the wrong kind, a name
    it does not take), a decoding field of the wrong kind. A loaded trace is well formed; these are its meanings."""
    method = get_method(trace.method)
    method.split_params(method.resolve_params(dict(trace.params)))
    trace.check_decoding()


def visible(value: Any) -> Any:
    """`value` (a trace, a record, a list, a mapping, a text) with every text's control, format and separator
    characters written as `\\uXXXX` (`outside.for_terminal`, the CLI's rule): a prompt, token text, model name or
    dtype holding a bidi override (U+202E), an isolate (U+2066), the Arabic letter mark (U+061C) or ESC shows it as
    such, not reordering what follows ("evil" shown as "live"). Mapping keys too (a parameter's name)."""
    if isinstance(value, str):
        return for_terminal(value)
    if isinstance(value, list):
        return [visible(item) for item in value]
    if isinstance(value, tuple):
        return tuple(visible(item) for item in value)
    if isinstance(value, dict):
        return {visible(key): visible(item) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        shown = copy.copy(value)
        for f in dataclasses.fields(value):
            object.__setattr__(shown, f.name, visible(getattr(value, f.name)))
        return shown
    return value


def annotated_step(trace: Trace) -> tuple[Step, str] | None:
    """The step the handout annotates and why it was chosen (a `handout.step.why.*` key): the first with a refusal,
    else the first that drafted, else the first; None for a trace without steps."""
    for step in trace.steps:
        if step.rejected:
            return step, "handout.step.why.refusal"
    for step in trace.steps:
        if step.drafted:
            return step, "handout.step.why.drafted"
    return (trace.steps[0], "handout.step.why.first") if trace.steps else None


def rule_key(trace: Trace) -> str:
    """Which acceptance rule the run's drafts met (read from the data, as the microscope reads it)."""
    drafting = next((step for step in trace.steps if step.drafted), None)
    if drafting is None:
        return NO_DRAFT_RULE
    return RULE_KEYS[microscope.rule_of(drafting, 0, trace.decoding)]


def run_numbers(trace: Trace) -> dict[str, Any]:
    """The run's own numbers the rule is written with: drafts kept and judged, α, new tokens, steps, τ."""
    judged = sum(step.judged_drafts for step in trace.steps)
    kept = sum(step.accepted for step in trace.steps)
    new, steps = trace.summary.new_tokens, trace.summary.steps
    return {"kept": kept, "judged": judged, "alpha": kept / judged if judged else None, "new": new, "steps": steps,
            "tau": new / steps if steps else None}


def generate_call(trace: Trace) -> str:
    """The run's `generate()` call rebuilt from the trace by the registry (the engine's own functions): the method's
    arguments, the assistant's, the length and decoding; the draft-length settings Transformers reads from a
    generation_config, set before the call; the seed before a sampling call."""
    method = get_method(trace.method)
    gen_args, draft = method.split_params(method.resolve_params(dict(trace.params)))
    decoding = trace.decoding
    args = ["**inputs", *(f"{k}={v!r}" for k, v in gen_args.items()),
            *(f"{k}={k}" for k in method.assistant_kwargs())]
    args.append(f"max_new_tokens={int(decoding.get('max_new_tokens', trace.summary.new_tokens))}")
    sample = bool(decoding.get("sample"))
    args.append(f"do_sample={sample}")
    if sample:
        args += [f"{name}={decoding[name]!r}" for name in ("temperature", "top_p", "top_k") if name in decoding]
    owner = "model" if method.draft_config_on_target else "assistant_model"
    lines = [f"{owner}.generation_config.{k} = {v!r}" for k, v in draft.items()]
    if sample:
        lines.append(f"torch.manual_seed({int(decoding.get('seed', 0))})")
    lines.append("out = model.generate(" + ", ".join(args) + ")")
    return "\n".join(lines)


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _legend(lang: str) -> str:
    """Every token fate with its sample word and its meaning in words (paper may print without colour)."""
    rows = []
    for (status, _, _), word in zip(render.LEGEND, render._sample_words(lang)):
        rows.append(f'<dt><span class="tok" data-status="{status}">{_e(word)}</span> '
                    f'{_e(t(f"render.legend.{status}.label", lang))}</dt>'
                    f'<dd>{_e(t(f"render.legend.{status}.meaning", lang))}</dd>')
    return f'<dl class="pg-fates">{"".join(rows)}</dl>'


def _rule(trace: Trace, lang: str) -> str:
    key = rule_key(trace)
    weight = ensemble_weight(trace.params)
    text = t(key, lang, weight=Number(float(weight), "g") if weight is not None else "")
    parts = [f"<p>{_e(text)}</p>"]
    n = run_numbers(trace)
    if n["alpha"] is not None:
        alpha = t("handout.numbers.alpha", lang, kept=n["kept"], judged=n["judged"],
                  alpha=microscope.number(n["alpha"], lang))
        parts.append(f'<p><span class="pg-formula">{_e(alpha)}</span></p>')
    if n["tau"] is not None:
        tau = t("handout.numbers.tau", lang, new=n["new"], steps=n["steps"],
                tau=Number(n["tau"], ".2f").localized(lang))
        parts.append(f'<p><span class="pg-formula">{_e(tau)}</span></p>')
    return "".join(parts)


def _step(trace: Trace, lang: str) -> str:
    chosen = annotated_step(trace)
    if chosen is None:
        return ""
    step, why = chosen
    title = t("handout.step.title", lang, step=step.index + 1, why=t(why, lang))
    items = []
    drafted_texts = step.drafted_text or [""] * len(step.drafted)
    emitted_texts = step.emitted_text or [""] * len(step.emitted)
    for i in range(len(step.emitted)):
        verdict = microscope.explain(step, i, trace.decoding)
        draft = microscope.visible(drafted_texts[i]) if verdict.drafted is not None else ""
        what = t(microscope.heading_key(verdict), lang, draft=draft, token=microscope.visible(emitted_texts[i]))
        said = "".join(f"<li>{_e(message.localized(lang))}</li>" for message in verdict.messages)
        items.append(f'<li data-outcome="{verdict.outcome}"><b>{_e(what)}</b><ul>{said}</ul></li>')
    return (f'<section data-testid="pg-handout-step" data-step="{step.index}"><h2>{_e(title)}</h2>'
            f'<div class="pg-tokens" dir="auto">{render.render_step(step, lang=lang)}</div>'
            f'<ol class="pg-positions">{"".join(items)}</ol></section>')


def _decoding(trace: Trace, lang: str) -> str:
    decoding = trace.decoding
    if decoding.get("sample"):
        return t("handout.decoding.sampling", lang,
                 temperature=Number(float(decoding.get("temperature", 1.0)), "g"))
    return t("handout.decoding.greedy", lang)


def handout_html(trace: Trace, lang: str = DEFAULT_LANGUAGE, script: str | None = None,
                 versions: bool = True) -> str:
    """The handout of `trace` in `lang`: one self-contained page (styles inlined, nothing fetched), ready to print.
    `script`: the reproducing script (`snippet.script_for_trace`) where the caller could make it; else the call is
    rebuilt from the trace (`generate_call`). `versions`: name the run's Transformers version (not on a public
    server, whose pages name none). A trace it cannot describe: `check`'s one-line refusal."""
    check(trace)
    trace = visible(trace)
    lang = normalize(lang)
    method = get_method(trace.method).localized(lang)
    meta = [method.title, t("handout.meta.target", lang, target=trace.target)]
    if trace.assistant:
        meta.append(t("handout.meta.assistant", lang, assistant=trace.assistant))
    meta += [_decoding(trace, lang), str(trace.env.get("dtype", ""))]
    version = trace.env.get("transformers", "") if versions else ""
    code = for_terminal(script) if script is not None else generate_call(trace)
    # The note's template escaped first, then its fields put in: the package with its version, and `inputs` (the
    # call's variable) as code.
    package = f"Transformers {version}" if version else "Transformers"
    code_note = html.escape(t("handout.code.script" if script is not None else "handout.code.call", lang),
                            quote=False).format(package=_e(package), name="<code>inputs</code>")
    sections = [
        f'<header><h1>{_e(t("handout.title", lang))}</h1>'
        f'<p class="pg-meta">{" · ".join(_e(part) for part in meta if part)}</p>'
        f'<p class="pg-print-hint">{_e(t("handout.print_hint", lang))}</p></header>',
        f'<section><h2>{_e(t("handout.prompt", lang))}</h2><blockquote dir="auto">{_e(trace.prompt)}</blockquote>'
        "</section>",
        f'<section><h2>{_e(t("handout.output", lang))}</h2>{render.render_trace(trace, lang)}</section>',
        f'<section><h2>{_e(t("handout.legend", lang))}</h2>{_legend(lang)}</section>',
        f'<section><h2>{_e(t("handout.figures", lang))}</h2>{render.stats_html(trace.summary, lang=lang)}</section>',
        f'<section data-testid="pg-handout-rule"><h2>{_e(t("handout.rule_title", lang))}</h2>{_rule(trace, lang)}'
        "</section>",
        _step(trace, lang),
        f'<section><h2>{_e(t("handout.code.title", lang))}</h2><p>{code_note}</p>'
        f"<pre><code>{_e(code)}</code></pre></section>",
    ]
    return (f'<!doctype html><html lang="{_e(lang)}" dir="{direction(lang)}"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(t('handout.title', lang))}</title><style>{render.CSS}{CSS}</style></head>"
            f'<body class="pg-handout">{"".join(sections)}</body></html>')
