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
FOCUS_DARK = "#fcd34d"  # amber-300: 12:1 on the dark theme's background, 3.8:1 on a blue-600 fill (a light
# blue ring read as white around the filled Generate button and a chosen radio)


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
# - a code box's scroller (CodeMirror's) holds no control when the code is read-only: axe's scrollable-region-
#   focusable (serious); it joins the Tab order as a region named by the box's label.
# The highlighted code's colours are made to read at 4.5:1 in either theme (`ink`).
# And the tabs' row answers the arrow keys as a tab list should (WAI-ARIA's tabs pattern; Gradio's answers Tab only):
# Left and Right (mirrored on a right-to-left page) and Home and End choose the next, previous, first or last tab.
HEAD = """<script>(function () {
  function mend() {
    document.querySelectorAll("div.empty[aria-label]:not([role])").forEach(function (el) {
      el.setAttribute("role", "img"); });
    document.querySelectorAll("ul[role=listbox]:not([tabindex])").forEach(function (el) {
      el.setAttribute("tabindex", "-1"); });
    document.querySelectorAll(".cm-scroller:not([data-pg-region])").forEach(function (el) {
      el.setAttribute("data-pg-region", "true");  // CodeMirror gives it tabindex -1: out of the Tab order
      var block = el.closest(".block"), label = block && block.querySelector("[data-testid=block-info], label");
      el.setAttribute("tabindex", "0"); el.setAttribute("role", "region");
      el.setAttribute("aria-label", label ? label.textContent.trim() : "code"); });
  }
  new MutationObserver(mend).observe(document.documentElement, {childList: true, subtree: true});
  // Highlighted code: each colour of the highlighter's palette that reads below 4.5:1 on the code's background is
  // mixed toward white (a dark background) or black until it passes (per theme and highlighter look).
  var paint = document.createElement("canvas").getContext("2d", {willReadFrequently: true});
  function rgb(css) {  // any CSS colour (rgb(), oklch(), color(srgb …)) as [r, g, b, alpha]
    paint.clearRect(0, 0, 1, 1); paint.fillStyle = "#000"; paint.fillStyle = css; paint.fillRect(0, 0, 1, 1);
    var d = paint.getImageData(0, 0, 1, 1).data; return [d[0], d[1], d[2], d[3] / 255];
  }
  function lum(c) { var v = c.slice(0, 3).map(function (x) { x /= 255;
    return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); });
    return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]; }
  function ratio(a, b) { var x = lum(a), y = lum(b); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); }
  function background(el) {
    for (; el; el = el.parentElement) { var c = rgb(getComputedStyle(el).backgroundColor);
      if (c[3] > 0.5) { return c; } }
    return [255, 255, 255];
  }
  // The mixed colours are rules of one style sheet (per theme, highlighter look and token class), not styles on the
  // code's spans: CodeMirror redraws its lines (a tab shown again, the theme switched) and drops any attribute it did
  // not write, so a span's own style came back unmixed after a run in the dark theme (#434c5e on #1e293b).
  var sheet = null, done = {};
  function ink() {
    var dark = document.body && document.body.classList.contains("dark");
    document.querySelectorAll(".cm-editor").forEach(function (editor) {
      var scope = (dark ? "body.dark " : "body:not(.dark) ") + ".cm-editor" + Array.prototype.filter
        .call(editor.classList, function (c) { return c !== "cm-editor" && c !== "cm-focused"; })
        .map(function (c) { return "." + CSS.escape(c); }).join("");
      var back = null, text = null;
      editor.querySelectorAll(".cm-line span[class]").forEach(function (span) {
        var rule = scope + " .cm-line span" + Array.prototype.map.call(span.classList, function (c) {
          return "." + CSS.escape(c); }).join("");
        if (rule in done) { return; }
        if (!back) { back = background(editor); text = lum(back) < 0.18 ? [255, 255, 255] : [0, 0, 0]; }
        var c = rgb(getComputedStyle(span).color), mixed = c, t = 0;
        while (ratio(mixed, back) < 4.6 && t < 1) { t += 0.1;
          mixed = c.slice(0, 3).map(function (x, i) { return Math.round(x + (text[i] - x) * t); }); }
        done[rule] = true;
        if (!t) { return; }
        if (!sheet) { sheet = document.head.appendChild(document.createElement("style")); sheet.id = "pg-ink"; }
        sheet.sheet.insertRule(rule + " { color: rgb(" + mixed.join(", ") + ") !important; }", sheet.sheet.cssRules.length);
      });
    });
  }
  var inking = false;
  new MutationObserver(function () {
    if (inking) { return; }
    inking = true;
    requestAnimationFrame(function () { ink(); inking = false; });
  }).observe(document.documentElement, {childList: true, subtree: true, attributes: true, attributeFilter: ["class"]});
  // A radio group's arrow keys choose the next or previous choice (Gradio names each radio apart, so the browser's
  // own arrows stay on one): Down and Right (Left on a right-to-left page) forward, Up and Left back.
  document.addEventListener("keydown", function (event) {
    var radio = event.target;
    if (!(radio.matches && radio.matches("input[type=radio]")) || event.ctrlKey || event.metaKey || event.altKey) { return; }
    var rtl = getComputedStyle(radio).direction === "rtl";
    var moves = {ArrowDown: 1, ArrowUp: -1, ArrowRight: rtl ? -1 : 1, ArrowLeft: rtl ? 1 : -1};
    var group = radio.closest("[role=radiogroup], .block");
    var all = Array.prototype.slice.call(group.querySelectorAll("input[type=radio]"))
      .filter(function (e) { return !e.disabled && e.offsetParent; });
    var at = all.indexOf(radio);
    if (at < 0 || !(event.key in moves)) { return; }
    event.preventDefault();
    var next = all[(at + moves[event.key] + all.length) % all.length];
    next.focus();
    next.click();
  });
  document.addEventListener("keydown", function (event) {
    var tab = event.target.closest && event.target.closest("[role=tab]");
    if (!tab || event.ctrlKey || event.metaKey || event.altKey) { return; }
    var tabs = Array.prototype.slice.call(tab.closest("[role=tablist]").querySelectorAll("[role=tab]"))
      .filter(function (e) { return e.offsetParent && !e.disabled; });
    var at = tabs.indexOf(tab), rtl = getComputedStyle(tab).direction === "rtl";
    var moves = {ArrowRight: rtl ? -1 : 1, ArrowLeft: rtl ? 1 : -1, Home: -at, End: tabs.length - 1 - at};
    if (at < 0 || !(event.key in moves)) { return; }
    event.preventDefault();
    var next = tabs[(at + moves[event.key] + tabs.length) % tabs.length];
    next.focus();
    next.click();
  });
})();</script>"""
