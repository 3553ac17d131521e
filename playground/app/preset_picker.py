"""The page's guide-example picker: choosing a preset fills the controls with the guide's settings.

Kept apart from the page: the picker's handlers only read `presets` and the method registry. A preset that needs
the Hub, picked where the Hub is out of reach, fills in its offline stand-in instead and says why. Editing any
control the preset set (other than the prompt and precision) clears the picker, so a run then follows the controls;
an edited prompt stays (the picker losing focus does not apply its example again: see `wire`).
"""

from __future__ import annotations

import html
from typing import Any

import gradio as gr

from ..compat import gradio_internals
from ..errors import PlaygroundError
from ..i18n import DEFAULT_LANGUAGE, t
from ..request import method_for
from ..models import hub_reachable
from ..presets import GUIDE_URL, PRESETS, Preset, get_preset, runnable
from .guard import PRIVATE, guarded
from .language import L, language_of
from .outputs import Inputs, Outputs

CHAT_VALUE = {True: "on", False: "off", None: "auto"}
# The page's run controls an example sets (and a link, and whose edit clears the picker), by output name.
CONTROLS = ("target", "assistant", "method", "sample", "temperature", "top_p", "top_k", "seed", "chat",
            "max_new_tokens")


APPLIED = Outputs("applied")  # the example whose settings the controls were last given (a `gr.State`)
CLEARED = Outputs("preset", "preset_info") + APPLIED  # what an edit of a control the example set clears
PICKED = Inputs("name", "applied_name")  # `pick_preset`'s: the picker's choice, the example applied last
PRECISION = Inputs("name", "current")  # `precision_of`'s: the example applied, the precision control


def picked(param_names: list[str]) -> Outputs:
    """What a pick fills: the picker, its info, the controls, the prompt, the method's parameter controls."""
    return Outputs("preset", "preset_info", *CONTROLS, "prompt", params=param_names)


def choices(online: bool, lang: str = DEFAULT_LANGUAGE) -> list[tuple[str, str]]:
    """(label, name) for the picker in `lang`; Hub presets say so where the Hub is out of reach."""
    out = []
    for preset in PRESETS.values():
        label = preset.title_in(lang)
        if preset.needs_hub and not online:
            label = t("preset.choice.stand_in" if preset.stand_in else "preset.choice.hub", lang, title=label)
        out.append((label, preset.name))
    return out


def describe(preset: Preset, reason: str | None = None, lang: str = DEFAULT_LANGUAGE) -> str:
    """The picker's info box in `lang`: the guide's call, what it needs, what a stand-in shows (markup from our data
    only). The guide link is the English page (the only edition whose address the project knows); its text says
    so in the other languages."""
    lines = []
    if reason:
        lines.append(f"<p class='pg-preset-reason'>{html.escape(reason)}</p>")
    lines.append(f"<p><b>{html.escape(preset.title_in(lang))}</b> — <a href='{GUIDE_URL}' target='_blank' "
                 f"rel='noopener'>{html.escape(t('preset.guide_link', lang))}</a>, "
                 f"{html.escape(preset.section_in(lang))}: <code>{html.escape(preset.guide_call)}</code></p>")
    if preset.system or preset.chat_template_kwargs:  # model input and code: shown as code
        extras = ", ".join(f"{k}={v!r}" for k, v in preset.chat_template_kwargs.items())
        lines.append(f"<p>{html.escape(t('preset.chat', lang))} <code>{html.escape(repr(preset.system or ''))}</code>"
                     f"{', <code>' + html.escape(extras) + '</code>' if extras else ''}.</p>")
    lines.append(f"<p>{html.escape(t('preset.needs_line', lang, needs=preset.needs(lang)))}</p>")
    if preset.note:
        lines.append(f"<p>{html.escape(preset.note_in(lang))}</p>")
    return "".join(lines)


def on_preset(name: str | None, param_names: list[str], online: bool | None = None,
              lang: str = DEFAULT_LANGUAGE) -> tuple[Any, ...]:
    """`picked(param_names)` when a preset is picked (the info in `lang`)."""
    outputs = picked(param_names)
    if not name:
        return outputs(preset_info="")
    requested = get_preset(name)
    online = hub_reachable() if online is None else online
    chosen = runnable(name, online)
    reason = requested.unavailable(online, lang)
    if reason and chosen is requested:  # no stand-in: leave the controls as they are
        return outputs(preset=gr.update(value=None), preset_info=describe(requested, reason, lang))
    f = chosen.request_fields()
    values = method_for(chosen.method, f["target"]).resolve_params(f["params"])
    return outputs({name: f[name] for name in CONTROLS if name != "chat"},
                   Outputs.params_of({p: values[p] for p in param_names if p in values}),
                   preset=gr.update(value=chosen.name), preset_info=describe(chosen, reason, lang),
                   chat=CHAT_VALUE[f["chat"]], prompt=f["prompt"])


def localized_choices(request: gr.Request) -> Any:
    """The picker's list in the visitor's language (the page is built once, in English; this runs on load)."""
    return gr.update(choices=choices(hub_reachable(), language_of(request)))


def applied_after(picker_update: Any) -> Any:
    """What the picker holds after `picker_update` (a handler's first output: a value, or an update of its value), as
    the `applied` state records it; a skip for an update that leaves the picker as it is."""
    if isinstance(picker_update, dict):
        return picker_update["value"] if "value" in picker_update else gr.skip()
    return picker_update


def wire(views: dict[str, Any], param_names: list[str]) -> gr.State:
    """Connect the picker: picking fills `picked(param_names)` (the page's components by name in `views`): the
    controls (target … max_new_tokens), the prompt and the parameters;
    a user's edit of a control or parameter clears it. A value no control sends gets our one-line message
    (`guarded`). Returns `applied`, the example whose settings the controls were last given (a link that restores
    one sets it too).

    Gradio 6's Dropdown fires `input` not only when a choice is made but on every blur, with the value it still
    holds: an example still chosen would be applied again each time the picker loses focus, over a prompt the
    visitor has edited since. So `input` applies only a choice other than `applied` (a keyboard choice arrives this
    way: Enter fires no `select`), and `select` (a click on an option, the one already applied included) always.

    `input` runs "always_last": Gradio's default for it ("once") drops a trigger while the event's last call is still
    on its way, and a click on an option fires `input` (then its blur another): a keyboard choice made before that
    answer came back was lost (the picker showed it, nothing applied it). Now it runs once the pending call is done,
    with the picker's value at that moment."""
    applied = gr.State(None)
    filled = picked(param_names)
    outputs = filled + APPLIED
    with_applied = {**views, "applied": applied}

    def apply(name: Any, lang: str) -> tuple[Any, ...]:
        if name is not None and not isinstance(name, str):
            raise PlaygroundError.keyed("error.preset_not_text")
        updates = filled.read(on_preset(name, param_names, lang=lang))
        return outputs(updates, applied=applied_after(updates["preset"]))

    def pick_preset(request: gr.Request, name: Any, applied_name: Any) -> tuple[Any, ...]:
        if name == applied_name:  # the blur's repeat of a choice already applied
            return outputs.skip()
        return apply(name, language_of(request))

    def choose_preset(request: gr.Request, evt: gr.EventData) -> tuple[Any, ...]:
        data = gradio_internals.event_data(evt)  # {"index": …, "value": name, "selected": …} as the client sent it
        return apply(data.get("value") if isinstance(data, dict) else data, language_of(request))

    def clear_preset() -> tuple[Any, ...]:
        return CLEARED(preset=None, preset_info="", applied=None)

    picker, components, cleared = views["preset"], outputs.components(with_applied), CLEARED.components(with_applied)
    picking = PICKED.components({"name": picker, "applied_name": applied})
    picker.input(guarded(PICKED.into(pick_preset)), picking, components, trigger_mode="always_last", **PRIVATE)
    picker.select(guarded(choose_preset), None, components, **PRIVATE)
    for name in filled.names:
        if name not in ("preset", "preset_info", "prompt"):  # the controls and parameters the example set
            views[name].input(guarded(clear_preset), None, cleared, **PRIVATE)
    return applied


def precision_of(name: Any, current: Any) -> Any:
    """The precision control once an example is applied: the example's own precision where it sets one and the
    control is left to the playground ("auto"), so the page shows what the run will use; otherwise unchanged (an
    explicit choice stands, as it does in the request: `Preset.request_fields`)."""
    preset = PRESETS.get(name) if isinstance(name, str) else None
    if preset is None or preset.dtype == "auto" or current != "auto":
        return gr.skip()
    return gr.update(value=preset.dtype)


def wire_precision(applied: gr.State, dtype: Any) -> None:
    """Show an applied example's own precision in the precision control (its own event: the picker's handlers keep
    their outputs)."""
    applied.change(guarded(PRECISION.into(precision_of)), PRECISION.components({"name": applied, "current": dtype}),
                   dtype, **PRIVATE)


def picker(online: bool) -> gr.Dropdown:
    return gr.Dropdown(choices=choices(online), value=None, label=L("ui.preset.label"), elem_id="pg-preset",
                       info=L("ui.preset.info"))


def known(name: Any) -> str | None:
    """A preset name from an untrusted source, if it names one (for links); None otherwise."""
    return name if isinstance(name, str) and name in PRESETS else None
