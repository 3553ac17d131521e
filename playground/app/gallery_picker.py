"""The gallery picker of "Step through a run": a recorded real run of the bundled models (`playground.gallery`) opens
at once in the replay and the step microscope, with a line on what to look at, so a lesson never waits on a live run.
"""

from __future__ import annotations

from typing import Any, Callable

import html

import gradio as gr

from .. import gallery
from ..errors import PlaygroundError
from ..i18n import DEFAULT_LANGUAGE, t
from ..trace import Trace
from .guard import PRIVATE, guarded
from .language import L, language_of
from .outputs import Outputs


def look_html(key: str, lang: str = DEFAULT_LANGUAGE) -> str:
    """The line under the picker: what to look at in this recording."""
    return f'<p class="pg-gallery-look" id="pg-gallery-look-{key}">{html.escape(gallery.get_recording(key).look(lang))}</p>'


# How the replay opens a trace: replay_tab.replay_from_the_start (trace, source, lang; at step 1) -> its outputs (`opened`, its
# `Outputs`). Passed in by the replay tab, which imports this module (an import back would be a circle).
OpenTrace = Callable[[Trace, str, str], tuple[Any, ...]]
LOOK = Outputs("look")


def on_gallery_pick(open_trace: OpenTrace, opened: Outputs, key: Any,
                    request: gr.Request = None) -> tuple[Any, ...]:
    """A recording picked: `opened + LOOK` (the replay's outputs for its trace, the line on what to look at); nothing
    picked (the picker cleared): everything left as it is. A key the gallery does not hold gets our one-line message."""
    outputs = opened + LOOK
    lang = language_of(request)
    if key is None or key == "":
        return outputs.skip()
    if not isinstance(key, str) or key not in gallery.BY_KEY:
        raise PlaygroundError.keyed("error.gallery.unknown", known=", ".join(gallery.BY_KEY))
    recording = gallery.get_recording(key)
    source = t("gallery.source", lang, title=recording.title(lang))
    return outputs(opened.read(open_trace(gallery.load(key), source, lang)), look=look_html(key, lang))


def localized_choices(request: gr.Request = None) -> Any:
    """The picker's titles in the visitor's language (the page is built once, in English; this runs on load)."""
    return gr.update(choices=gallery.choices(language_of(request)))


def controls() -> tuple[gr.Dropdown, gr.HTML]:
    """The picker and its line, placed where they are called (the top of the replay tab)."""
    picker = gr.Dropdown(choices=gallery.choices(), value=None, label=L("ui.gallery.label"),
                         info=L("ui.gallery.info"), elem_id="pg-gallery")
    return picker, gr.HTML("", elem_id="pg-gallery-look")


def wire(demo: gr.Blocks, picker: gr.Dropdown, look: gr.HTML, replay_views: dict[str, Any], opened: Outputs,
         open_trace: OpenTrace) -> None:
    """A pick opens the recording in the replay's views (`replay_views` by name, `opened` filled by `open_trace`);
    the titles follow the visitor's language."""
    def on_pick(key: Any, request: gr.Request = None) -> tuple[Any, ...]:
        return on_gallery_pick(open_trace, opened, key, request)

    picker.change(guarded(on_pick), picker, (opened + LOOK).components({**replay_views, "look": look}), **PRIVATE)
    demo.load(guarded(localized_choices), None, picker, **PRIVATE)
