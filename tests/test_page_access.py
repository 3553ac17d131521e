"""What a screen reader and a keyboard get from the page's own HTML, and the small things a class notices: every token
a button named by its text and its fate (in the page's language), a draft never judged opening a panel that says why,
the example picker cleared when the prompt is no longer its example, the Arabic step arrows mirrored, the theme's
colours at WCAG AA contrast. (tests/test_a11y_browser.py checks the page itself in Chromium.)
"""

from __future__ import annotations

import re

import gradio as gr
import pytest

from playground import i18n, microscope_view, render
from playground.app import access, generate_tab
from playground.trace import Step, Trace


def _trace(steps: list[Step]) -> Trace:
    return Trace(method="prompt_lookup", target="t", prompt="p", steps=steps)


# step 0: drafts a b c d, the target keeps a, refuses b (c, d discarded), corrects with X.
REFUSED = Step(index=0, drafted=[1, 2, 3, 4], accepted=1, rejected=[2], discarded=[3, 4], emitted=[1, 9],
               drafted_text=["a", "b", " ", "d"], emitted_text=["a", "X"], q=[0.9, 0.5, 0.25, 0.125])
# step 1: drafts e f, the run ends after e (f unverified).
CUT = Step(index=1, drafted=[5, 6], accepted=1, rejected=[], emitted=[5], unverified=[6], drafted_text=["e", "f"],
           emitted_text=["e"])


@pytest.mark.parametrize("lang", ["en", "ru", "ar"])
def test_every_token_is_a_button_named_by_its_fate(lang: str) -> None:
    html = render.render_step(REFUSED, lang=lang) + render.render_step(CUT, lang=lang)
    spans = re.findall(r'<span class="tok" ([^>]*)>', html)
    attrs = [dict(re.findall(r'([\w-]+)="([^"]*)"', s)) for s in spans]
    assert [a["data-status"] for a in attrs] == ["accepted", "rejected", "discarded", "discarded", "correction",
                                                  "accepted", "unverified"]
    assert all(a["role"] == "button" and a["tabindex"] == "-1" for a in attrs)
    names = [a["aria-label"] for a in attrs]
    for a, name in zip(attrs, names):
        assert name.endswith(": " + i18n.t(f"render.describe.{a['data-status']}", lang)), name
    assert names[0].startswith("a: ") and names[2].startswith("␣: ")  # a blank token's text is named, not silent
    # judged tokens carry their row (data-pos), never-judged ones their place in the draft (data-draft)
    assert [a.get("data-pos") for a in attrs] == ["0", "1", None, None, "1", "0", None]
    assert [a.get("data-draft") for a in attrs] == [None, None, "2", "3", None, None, "1"]


@pytest.mark.parametrize("lang", ["en", "ru", "ar"])
def test_a_draft_never_judged_opens_a_panel_that_says_why(lang: str) -> None:
    trace = _trace([REFUSED, CUT])
    panel = microscope_view.panel_for_click(trace, {"step": 0, "draft": 3}, lang)
    assert 'data-outcome="discarded"' in panel and 'data-draft="3"' in panel
    text = re.sub(r"<[^>]+>", "", panel)
    head = i18n.t("micro.never_judged.discarded", lang).split("{token}")[1][:25]
    assert head in text
    # draft 4 of 4, after draft 2 (the refused one) of step 1, with its q
    assert re.search(r"4\D+4", text) and "2" in text
    assert i18n.number(0.125, lang, ".3f") in text or "0.125" in text
    cut = microscope_view.panel_for_click(trace, {"step": 1, "draft": 1}, lang)
    assert 'data-outcome="unverified"' in cut
    assert i18n.t("micro.never_judged.unverified", lang).split("{token}")[1][:25] in re.sub(r"<[^>]+>", "", cut)
    # a judged draft is not "never judged"; nor is a draft the step does not have
    for data in ({"step": 0, "draft": 1}, {"step": 0, "draft": 9}, {"step": 5, "draft": 0}):
        assert i18n.t("micro.no_such_token", lang) in microscope_view.panel_for_click(trace, data, lang)


def test_a_long_token_wraps_in_the_panel() -> None:
    hit = re.search(r"\.pg-micro-tok \{[^}]*\}", microscope_view.CSS)
    assert hit is not None
    rule = hit.group(0)
    assert "white-space: pre-wrap" in rule and "overflow-wrap: anywhere" in rule


def test_the_example_picker_clears_when_the_prompt_is_not_its_example() -> None:
    name = generate_tab.DEFAULT_EXAMPLE
    text = generate_tab.EXAMPLES[name]
    assert generate_tab.example_after_prompt("Hugging Face is an open-source company", name) is None
    assert isinstance(generate_tab.example_after_prompt(text, name), type(gr.skip()))  # still its example
    assert isinstance(generate_tab.example_after_prompt("anything", None), type(gr.skip()))  # nothing to clear
    russian = generate_tab.example_names("ru")[0]
    assert generate_tab.example_after_prompt(generate_tab.EXAMPLES[russian], russian) != None  # noqa: E711


def test_arabic_step_arrows_point_the_way_the_steps_run() -> None:
    """Right to left, "previous" points right and "next" left, in the buttons and in the sentence that names them."""
    assert i18n.t("ui.replay.prev", "ar").startswith("▶") and i18n.t("ui.replay.next", "ar").endswith("◀")
    assert i18n.t("ui.replay.prev", "en").startswith("◀") and i18n.t("ui.replay.next", "en").endswith("▶")
    assert "▶ ◀" in i18n.t("replay.describe", "ar") and "◀ ▶" in i18n.t("replay.describe", "en")


def _contrast(a: str, b: str) -> float:
    def lum(hex_colour: str) -> float:
        rgb = [int(hex_colour.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4)]
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_the_themes_text_colours_meet_wcag_aa() -> None:
    theme = access.theme()
    blue, slate = gr.themes.colors.blue, gr.themes.colors.slate

    def colour(value: str) -> str:  # "*primary_700" -> the hue's shade
        hue, shade = value.lstrip("*").split("_")
        return getattr({"primary": blue, "neutral": slate}[hue], f"c{shade}")

    white, page = "#ffffff", slate.c50
    assert _contrast(colour(theme.block_info_text_color), white) >= 4.5
    assert _contrast(colour(theme.body_text_color_subdued), page) >= 4.5
    assert _contrast(colour(theme.block_title_text_color), blue.c100) >= 4.5  # a label on its tinted tab
    assert _contrast(white, colour(theme.button_primary_background_fill)) >= 4.5
    assert _contrast(white, colour(theme.checkbox_label_background_fill_selected)) >= 4.5
    assert _contrast(colour(theme.color_accent), page) >= 4.5  # the selected tab's name
    assert "--color-accent: var(--primary-400)" in access.CSS and _contrast(blue.c400, "#0b0f19") >= 4.5  # dark
    assert _contrast(access.FOCUS_LIGHT, white) >= 3 and _contrast(access.FOCUS_LIGHT, page) >= 3
    assert _contrast(access.FOCUS_DARK, slate.c950) >= 3 and _contrast(access.FOCUS_DARK, "#0b0f19") >= 3
