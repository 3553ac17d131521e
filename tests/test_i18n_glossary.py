"""Every catalogue string uses the guide's term for a concept it names (`playground/locales/glossary.json`).

The glossary holds, per concept, the term of the guide's English, Russian and Arabic editions and the variants that
once crept in instead ("вспомогательное декодирование" for «ассистированное», «المجموعة» for the ensemble's
«التجميع»). A string that names the concept must use the term; no string may use a forbidden variant.
"""

from __future__ import annotations

import json
import re

import pytest

from playground import i18n
from playground.methods import METHODS

GLOSSARY = {concept: entry for concept, entry in
            json.loads((i18n.LOCALES_DIR / "glossary.json").read_text(encoding="utf-8")).items()
            if not concept.startswith("@")}


def _registry_english() -> dict[str, str]:
    """The method registry's English, under the keys the other languages translate it as."""
    out: dict[str, str] = {}
    for method in METHODS.values():
        key = f"method.{method.name}"
        out[f"{key}.title"], out[f"{key}.summary"] = method.title, method.summary
        out.update({f"{key}.lecture.{part}": text for part, text in method.lecture.items()})
        for param in method.params:
            out[f"param.{param.name}.label"], out[f"param.{param.name}.help"] = param.label, param.help
    return out


def strings(lang: str) -> dict[str, str]:
    """Every string of `lang` as the page shows it (plural forms joined), the registry's English included."""
    catalogue = dict(_registry_english()) if lang == i18n.DEFAULT_LANGUAGE else {}
    for key, value in i18n.catalogue(lang).items():
        catalogue[key] = " | ".join(value.values()) if isinstance(value, dict) else value
    return catalogue


@pytest.mark.parametrize("lang", list(i18n.LANGUAGES))
def test_no_string_uses_a_variant_the_guide_does_not(lang):
    found = [(key, concept, pattern) for concept, entry in GLOSSARY.items()
             for pattern in entry["forbidden"].get(lang, ()) for key, text in strings(lang).items()
             if re.search(pattern, text)]
    assert not found, f"{lang}: not the guide's term: {found}"


@pytest.mark.parametrize("lang", list(i18n.LANGUAGES))
def test_strings_that_name_a_concept_use_the_guides_term(lang):
    texts = strings(lang)
    missing = [(concept, key, texts.get(key)) for concept, entry in GLOSSARY.items() for key in entry["keys"]
               if not re.search(entry[lang], texts.get(key, ""))]
    assert not missing, f"{lang}: the guide's term is missing: {missing}"


def test_the_glossary_covers_every_language():
    for concept, entry in GLOSSARY.items():
        assert set(i18n.LANGUAGES) <= set(entry), concept
        assert entry["keys"], concept
