"""Where the bundled model cannot do an example's task in a language, the page says so under the examples and names
examples of that page that it does well."""

from __future__ import annotations

import re

import pytest

from playground.app import generate_tab
from playground.examples import EXAMPLES, localized_examples
from playground.i18n import LANGUAGES, t


def test_the_note_shows_only_on_the_page_of_the_language_the_model_fails():
    free = [e.name for e in EXAMPLES].index("Free writing")
    arabic = localized_examples("ar")[free]
    assert arabic.note and generate_tab.example_note_html(arabic.name).startswith('<p class="pg-example-note"')
    assert all(not e.note for lang in ("en", "ru") for e in localized_examples(lang))
    assert generate_tab.example_note_html(localized_examples("en")[free].name) == ""
    assert generate_tab.example_note_html(None) == ""


@pytest.mark.parametrize("lang", LANGUAGES)
def test_a_note_names_that_pages_own_examples(lang):
    """The English of a note (the registry's) and its translations quote example names: each must be a name of the
    examples in the note's language, else the visitor is sent to an example that is not on the page."""
    names = {e.name for e in localized_examples(lang)}
    for example in EXAMPLES:
        for weak_lang, english in example.weak_in:
            text = english if lang == "en" else t(f"example.{example.question_id}.weak.{weak_lang}", lang)
            quoted = re.findall(r"[«“]([^»”]+)[»”]", text)
            assert quoted and set(quoted) <= names, (lang, quoted)
