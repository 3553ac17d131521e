"""Formulas inside Arabic sentences read left to right: each is wrapped in Unicode isolates (FSI … PDI), and headless
Chromium lays its operands out left to right inside the right-to-left line.

Without the isolates a bidirectional line moves a formula's pieces ("1 +" of "1 + α + …" ends up at the far end).
"""

from __future__ import annotations

import html
import re
from typing import Callable

import pytest
from appserver import browser_fixture, needs_chromium
from bidi import get_display

from playground import i18n

FSI, PDI = "\u2068", "\u2069"
# An operator between two left-to-right operands (a Latin or Greek letter, a digit, a field, a bracket): a formula.
# "·" counts only written tight (w·p); " · " is the page's separator.
FORMULA = re.compile(r"[A-Za-zα-ωΑ-Ω0-9})\]²](\s*[+−=^≈≤≥]\s*|·)[A-Za-zα-ωΑ-Ω0-9{(\[]")


def arabic_strings() -> dict[str, str]:
    """The Arabic strings the page teaches with (example prompts are model input, sent as written)."""
    out = {}
    for key, value in i18n.catalogue("ar").items():
        if key.startswith("example."):
            continue
        for form, text in (value.items() if isinstance(value, dict) else [("", value)]):
            out[f"{key}{'.' + form if form else ''}"] = text
    return out


def _outside_isolates(text: str) -> str:
    return re.sub(f"{FSI}[^{PDI}]*{PDI}", " ", text)


def test_every_formula_in_an_arabic_sentence_is_isolated():
    bare = {key: found.group() for key, text in arabic_strings().items()
            if (found := FORMULA.search(_outside_isolates(text)))}
    assert not bare, f"formulas outside FSI…PDI in Arabic strings: {bare}"
    assert all(text.count(FSI) == text.count(PDI) for text in arabic_strings().values())


# Latin text inside an Arabic line, run by run (a run: no space, no Arabic letter, no Arabic punctuation), the way a
# reader checks it: each must read on screen as written. A run that begins or ends in neutral characters (the "()" of
# "generate()", the ".*" of "model.layers.61.*", the quote of device_map="auto") takes the Arabic line's direction
# at that edge and is drawn with its ends swapped («()generate») unless it is isolated (FSI … PDI).
ARABIC = "\u0600-\u06ff\u0750-\u077f\ufb50-\ufdff\ufe70-\ufeff"
LATIN_RUN = re.compile(f"[^{ARABIC}\\s«»،؛\u200f\u200e]*[A-Za-z][^{ARABIC}\\s«»،؛\u200f\u200e]*")
BIDI_MARKS = re.compile("[\u2066-\u2069\u200e\u200f\u061c\u202a-\u202e]")


def _trimmed(run: str) -> str:
    """A Latin run without the sentence's punctuation around it: a full stop, a colon, the sentence's own brackets
    (an unpaired one, or a pair holding the whole run); the brackets of a call (`generate()`) stay."""
    while True:
        cut = run.strip().strip(".,:;!?…").rstrip("([").lstrip(")]")
        if cut.startswith("(") and cut.count("(") > cut.count(")"):
            cut = cut[1:]
        if cut.endswith(")") and cut.count(")") > cut.count("("):
            cut = cut[:-1]
        if cut[:1] in "([" and cut[-1:] in ")]" and cut[1:-1].count("(") == cut[1:-1].count(")"):
            cut = cut[1:-1]
        if cut == run:
            return run
        run = cut


def _filled(text: str) -> str:
    """The string with its fields filled as the page fills them: a decimal for each `{field}` and each Plotly
    `%{…}` (Plotly writes the number in the browser)."""
    number = i18n.number(0.61, "ar")
    text = re.sub(r"%\{\{[^{}]*\}\}|%\{[^{}]*\}", number, text)
    return re.sub(r"\{(\w*)[^{}]*\}", number, text.replace("{{", "(").replace("}}", ")"))


def _runs_laid_out_backwards(text: str, pattern: re.Pattern[str], judged: Callable[[str], bool]) -> list[str]:
    """Each run of `text` matching `pattern` (and `judged` worth checking) that the Unicode bidi algorithm
    (python-bidi, right-to-left paragraph; each line its own paragraph) does not lay out as written."""
    backwards = []
    for line in text.split("\n"):
        shown = BIDI_MARKS.sub("", get_display(line, base_dir="R"))
        for match in pattern.finditer(line):
            run = _trimmed(BIDI_MARKS.sub("", match.group()))
            if run and judged(run) and run not in shown:
                backwards.append(run)
    return backwards


def latin_runs_laid_out_backwards(text: str) -> list[str]:
    """Each Latin run of `text` that an Arabic page shows reversed or with its ends swapped."""
    return _runs_laid_out_backwards(text, LATIN_RUN, lambda run: True)


def test_the_layout_check_sees_a_run_laid_out_backwards():
    """The control: the issue's own cases without their isolates are found, and with them are not."""
    assert latin_runs_laid_out_backwards("قارن مع generate() العادي") == ["generate()"]
    assert latin_runs_laid_out_backwards("في model.layers.61.*؛ لا شيء") == ["model.layers.61.*"]
    assert latin_runs_laid_out_backwards("الملفات (*.safetensors) مفقودة") == ["*.safetensors"]
    assert latin_runs_laid_out_backwards('مع device_map="auto" على عدة وحدات') == ['device_map="auto"']
    assert not latin_runs_laid_out_backwards(f"قارن مع {FSI}generate(){PDI} العادي")
    assert not latin_runs_laid_out_backwards(f"الملفات ({FSI}*.safetensors{PDI}) مفقودة")
    assert not latin_runs_laid_out_backwards("نموذج Gemma 3 270M المضمَّن")


# A number with a sign or a factor mark ("3.00×", "+2"): no Latin letter, so `LATIN_RUN` does not see it, yet its
# neutral edge takes the Arabic line's direction and is drawn at the wrong end («×3.00») unless it is isolated.
MARKED_NUMBER = re.compile(f"[^{ARABIC}\\s«»،؛\u200f\u200e]*[0-9][^{ARABIC}\\s«»،؛\u200f\u200e]*")


def marked_numbers_laid_out_backwards(text: str) -> list[str]:
    """Each number of `text` written with "×" or a leading sign that the bidi algorithm (right-to-left paragraph)
    does not lay out as written. (Percentages are left to the formatter's own marks: CLDR's Arabic pattern.)"""
    return _runs_laid_out_backwards(text, MARKED_NUMBER, lambda run: "×" in run or run[:1] in "+−")


@pytest.mark.parametrize("laid_out_backwards", [latin_runs_laid_out_backwards, marked_numbers_laid_out_backwards],
                         ids=["latin-runs", "factors-and-signed-numbers"])
def test_every_arabic_string_reads_as_written(laid_out_backwards: Callable[[str], list[str]]) -> None:
    """Every Latin run, and every number with "×" or a sign, in every Arabic string, filled as the page fills it."""
    backwards = {key: runs for key, text in arabic_strings().items() if (runs := laid_out_backwards(_filled(text)))}
    assert not backwards, f"what an Arabic page lays out backwards: {backwards}"


def test_the_layout_check_sees_a_factor_laid_out_backwards():
    """The control: the race verdict's factor as main wrote it is found; isolated, it is not."""
    assert marked_numbers_laid_out_backwards("(أسرع بـ3.00×).") == ["3.00×"]
    assert marked_numbers_laid_out_backwards("، ×3.00 مقابل الأساس") == ["×3.00"]
    assert marked_numbers_laid_out_backwards("+2 · غير ذلك") == ["+2"]
    assert not marked_numbers_laid_out_backwards(f"(أسرع بـ{FSI}3.00×{PDI}).")


def _isolates(text: str) -> list[str]:
    """The outermost FSI … PDI spans of `text` (an isolate may hold another)."""
    spans, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == FSI:
            start, depth = (i + 1, 1) if depth == 0 else (start, depth + 1)
        elif char == PDI and depth:
            depth -= 1
            if depth == 0:
                spans.append(text[start:i])
    return spans


def test_no_isolate_holds_an_arabic_word():
    """An isolate is for a formula or a number read left to right. FSI takes its direction from its first strong
    letter: an Arabic word inside turns the whole span right to left ("(0.61 مقابل 0.61 رمز/ث)" laid out
    backwards), so the words go outside and each number is isolated on its own."""
    arabic = re.compile(r"[\u0600-\u06ff]")
    worded = {key: span for key, text in arabic_strings().items() for span in _isolates(text)
              if arabic.search(re.sub(r"<[^>]*>", "", span))}
    assert not worded, f"isolates holding Arabic words: {worded}"


def isolated_formulas() -> list[tuple[str, str]]:
    """(key, text with the fields filled) of every Arabic string holding an isolated formula."""
    out = []
    for key, text in arabic_strings().items():
        if FSI in text and "%{" not in text:  # plotly hover templates are filled by plotly, not here
            # each field filled with a decimal as the Arabic page writes it (i18n.number), so the layout is checked
            # with the numbers the page shows
            out.append((key, re.sub(r"\{(\w*)[^{}]*\}", lambda m: i18n.number(0.61, "ar"), text)))
    return out


browser = browser_fixture()

# Each isolated formula of the line, rendered in an RTL paragraph: the x of its first and last visible characters.
LAYOUT = """(text) => {
  const p = document.createElement('p'); p.dir = 'rtl'; p.style.cssText = 'font: 16px sans-serif; width: 4000px';
  p.textContent = text; document.body.replaceChildren(p);
  const node = p.firstChild, out = [];
  const box = (i) => { const r = document.createRange(); r.setStart(node, i); r.setEnd(node, i + 1);
                       const b = r.getBoundingClientRect(); return [b.left, b.right, b.top]; };
  let i = text.indexOf('\u2068');
  while (i >= 0) {
    const end = text.indexOf('\u2069', i);
    const visible = []; for (let j = i + 1; j < end; j++) if (text[j].trim()) visible.push(j);
    out.push({formula: text.slice(i + 1, end), first: box(visible[0]), last: box(visible[visible.length - 1])});
    i = text.indexOf('\u2068', end);
  }
  return out;
}"""


@needs_chromium
@pytest.mark.browser
def test_chromium_lays_each_isolated_formula_out_left_to_right(browser):
    page = browser.new_context(locale="ar").new_page()
    page.set_content('<html lang="ar" dir="rtl"><body></body></html>')
    checked = 0
    for key, text in isolated_formulas():
        line = html.unescape(text).replace("\n", " ")
        for formula in page.evaluate(LAYOUT, line):
            first, last = formula["first"], formula["last"]
            if abs(first[2] - last[2]) > 2:  # wrapped onto two lines: no left/right order to compare
                continue
            assert first[0] < last[0], (key, formula["formula"], first, last)
            checked += 1
    assert checked >= 15
    # The control: the same line with its isolates replaced by a neutral zero-width space flips a formula, so the
    # check above can fail (the formula's "1 +" lands at the far end of the Arabic line).
    theory = i18n.t("ui.theory.text", "ar").replace("\n", " ")
    bare = page.evaluate(LAYOUT.replace("p.textContent = text;",
                                        "p.textContent = text.replace(/[\\u2068\\u2069]/g, '\\u200b');"), theory)
    assert any(f["first"][0] > f["last"][0] for f in bare if abs(f["first"][2] - f["last"][2]) <= 2)
    page.context.close()


def test_text_the_code_puts_together_reads_as_written_in_arabic():
    """Model names in the pickers and the status line, a narrated step's quoted tokens: made in code, not in the
    catalogue, so the catalogue check above does not see them."""
    from playground import render
    from playground.models import CATALOGUE, model_label
    from playground.trace import Step

    made = [model_label(key, "ar", offline=offline) for key in CATALOGUE for offline in (False, True)]
    step = Step(index=0, drafted=[1, 2], accepted=1, rejected=[2], emitted=[1, 3], drafted_text=[" def", "()"],
                emitted_text=[" def", " x.y"], q=[0.5, 0.4], p=[0.6, 0.1])
    made.append(render.narrate_step(step, "speculative", lang="ar"))
    # The race's verdict, with the factor the comparison measured («أسرع بـ3.00×»).
    from playground import gallery
    from playground.app import compare_tab

    for totals in ((9000.0, 3000.0), (3000.0, 9000.0)):
        *_, (_, last) = compare_tab.race_frames(gallery.load("baseline-greedy"), gallery.load("prompt-lookup-greedy"),
                                                totals_ms=totals, lang="ar")
        verdict = re.search(r'<div class="pg-verdict">(.*?)</div>', last, re.S)
        assert verdict is not None, last
        made.append(html.unescape(verdict.group(1)))
    assert "3" in made[-1] and "×" in made[-1]
    backwards = {text: runs for text in made
                 if (runs := latin_runs_laid_out_backwards(text) + marked_numbers_laid_out_backwards(text))}
    assert not backwards, backwards
