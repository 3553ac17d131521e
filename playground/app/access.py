"""A page everyone can use: the theme's colours at WCAG 2.1 AA contrast, a visible focus ring on every control, and
right to left for the sliders' fill, in light and dark.

Gradio's Soft theme writes help text, slider bounds and the footer in slate-400 (#94a3b8: 2.6:1 on white), labels in
blue-500 on blue-100 (3.0:1), and white on blue-500 (3.7:1) for primary buttons and chosen radios; its range inputs
set `outline: none`, and its focus cue on radios and text boxes is a faint shadow. `THEME` darkens those colours in
the light theme (the dark theme already passes), `CSS` draws one focus ring (3 px, at least 3:1 against either
theme's background) on whatever the keyboard reaches, and fills a slider from the right on a right-to-left page, as
its thumb and scale run (Gradio's track gradient always grows "to right"). tests/test_a11y_browser.py checks the page
with axe-core in Chromium.
"""

from __future__ import annotations

import gradio as gr

__all__ = ["CSS", "FOCUS_DARK", "FOCUS_LIGHT", "HEAD", "theme"]

FOCUS_LIGHT = "#1d4ed8"  # blue-700: 6.7:1 on white, 6.4:1 on the page's slate-50
FOCUS_DARK = "#93c5fd"  # blue-300: 10:1 on the dark theme's background


def theme() -> gr.themes.Base:
    """The page's theme: Soft (blue, slate), its low-contrast colours replaced (light theme; dark already passes)."""
    return gr.themes.Soft(primary_hue="blue", neutral_hue="slate").set(
        body_text_color_subdued="*neutral_600",  # slider bounds, footer, a dropdown's hint: 7.2:1
        body_text_color_subdued_dark="*neutral_300",
        block_info_text_color="*neutral_600",  # help text under a label
        block_info_text_color_dark="*neutral_300",
        block_title_text_color="*primary_700",  # a control's label on its blue-100 tab: 5.8:1
        block_label_text_color="*primary_700",
        button_primary_background_fill="*primary_600",  # white on blue-600: 5.2:1
        button_primary_background_fill_hover="*primary_700",
        checkbox_label_background_fill_selected="*primary_600",
        color_accent="*primary_700",  # the selected tab's name (blue-500 was 3.5:1 on slate-50)
        input_placeholder_color="*neutral_500",
        input_placeholder_color_dark="*neutral_400",
    )


CSS = """
:root { --pg-focus: %(light)s; }
/* The accent (the selected tab's name) has no dark variant in a theme: blue-700 there is 2.8:1, blue-400 7:1. */
.dark { --pg-focus: %(dark)s; --color-accent: var(--primary-400) !important; }
/* One focus ring for everything the keyboard reaches (Gradio's own cues are faint or removed). */
.gradio-container :is(button, a, input, textarea, select, summary, [role=button], [role=tab], [tabindex]):focus-visible {
  outline: 3px solid var(--pg-focus) !important; outline-offset: 2px !important; }
/* A radio or checkbox: the ring goes round its whole label (a chosen radio's label is filled with the accent colour,
   against which a ring on the small circle itself would not show). */
.gradio-container label:has(> input:is([type=radio], [type=checkbox]):focus-visible) {
  outline: 3px solid var(--pg-focus) !important; outline-offset: 2px !important; }
.gradio-container label > input:is([type=radio], [type=checkbox]):focus-visible { outline: none !important; }
/* A text box's ring hugs its own border (the box fills its block). */
.gradio-container :is(textarea, input[type=text], input[type=number], input[role=combobox]):focus-visible {
  outline-offset: 0 !important; }
/* Right to left, a slider's filled part grows from the right, where its thumb starts. */
html[dir="rtl"] input[type=range]::-webkit-slider-runnable-track {
  background: linear-gradient(to left, var(--slider-color) var(--range_progress), var(--neutral-200)
  var(--range_progress)) !important; }
""" % {"light": FOCUS_LIGHT, "dark": FOCUS_DARK}

# Two fixes of Gradio 6.31's markup, applied as it renders:
# - its empty plot is a <div aria-label="Empty value"> without a role (axe: aria-prohibited-attr, serious): an
#   aria-label names only elements with a role, so the box gets role="img", which the label then names;
# - a dropdown's open list, when long enough to scroll, is a focusable scroller in Chromium: Tab from the dropdown
#   landed on the list, which then closed, and the focus fell to the page's top (the guide-example picker). The list
#   is reached with the arrow keys from its box, so it leaves the Tab order.
HEAD = """<script>(function () {
  function mend() {
    document.querySelectorAll("div.empty[aria-label]:not([role])").forEach(function (el) {
      el.setAttribute("role", "img"); });
    document.querySelectorAll("ul[role=listbox]:not([tabindex])").forEach(function (el) {
      el.setAttribute("tabindex", "-1"); });
  }
  new MutationObserver(mend).observe(document.documentElement, {childList: true, subtree: true});
})();</script>"""
