"""Every catalogue string uses the guide's term for a concept it names (`playground/locales/glossary.json`).

The glossary holds, per concept, the term of the guide's English, Russian and Arabic editions and the variants that
once crept in instead ("вспомогательное декодирование" for «ассистированное», «المجموعة» for the ensemble's
«التجميع»). A string that names the concept must use the term; no string may use a forbidden variant.
"""

from __future__ import annotations

import json
from pathlib import Path
import re
from typing import Any

import pytest

from playground import i18n
from playground.methods import METHODS, registry_english

GLOSSARY = {concept: entry for concept, entry in
            json.loads((i18n.LOCALES_DIR / "glossary.json").read_text(encoding="utf-8")).items()
            if not concept.startswith("@")}


def strings(lang: str) -> dict[str, str]:
    """Every string of `lang` as the page shows it (plural forms joined), the registry's English included."""
    catalogue = dict(registry_english()) if lang == i18n.DEFAULT_LANGUAGE else {}
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


# --------------------------------------------------------------------------- counted phrases

# The nouns the page counts, as each language spells their stems: a count field right before one of them must be a
# plural phrase (an object of CLDR categories), or "1 tokens", «последние 1 токен», «21 رمز» come back.
COUNTED_NOUNS = {
    "en": r"(tokens?|steps?|characters?|entr(y|ies)|items?|layers?|settings?|prompts?|repeats?|tensors?|drafts?)\b",
    "ru": r"(токен|шаг|символ|запис|элемент|сло[йёя]|настро|промпт|повтор|тензор|черново)",
    "ar": r"(رمز|رموز|خطو|حرف|أحرف|مدخل|عنصر|عناصر|طبق|إعداد|موجّه|موتر|مسود)",
}
# Fields that hold a whole count (floats such as τ or γ take the "other" form and read right in every language).
COUNT_FIELDS = {"n", "k", "a", "verified", "layers", "new", "context", "settings", "drafted", "accepted", "limit",
                "top", "total", "done", "repeats", "rep", "prompts_n"}


@pytest.mark.parametrize("lang", list(i18n.LANGUAGES))
def test_every_count_before_a_counted_noun_is_a_plural_phrase(lang):
    pattern = re.compile(r"\{(\w+)\}\s*" + COUNTED_NOUNS[lang])
    catalogue = dict(registry_english()) if lang == i18n.DEFAULT_LANGUAGE else {}
    catalogue.update(i18n.catalogue(lang))
    bare = [(key, value) for key, value in catalogue.items() if isinstance(value, str)
            for field, *_ in pattern.findall(value) if field in COUNT_FIELDS]
    assert not bare, f"{lang}: a count without plural forms: {bare}"


@pytest.mark.parametrize("lang", list(i18n.LANGUAGES))
def test_every_plural_phrase_has_cldrs_forms_and_formats_for_any_count(lang):
    """Each counted phrase spells out every CLDR category of its language (Babel's rules decide which one a count
    takes), and formats for 0, 1, 2, 3, 5, 11, 21, 101 with the form CLDR picks."""
    english = i18n.catalogue(i18n.DEFAULT_LANGUAGE)
    for key, value in i18n.catalogue(lang).items():
        if not isinstance(value, dict):
            continue
        assert set(value) == set(i18n.plural_categories(lang)), (lang, key)
        fields: dict[str, Any] = {name: "x" for form in english[key].values() if isinstance(english[key], dict)
                  for name in re.findall(r"\{(\w+)", form)} if isinstance(english[key], dict) else {}
        for n in (0, 1, 2, 3, 5, 11, 21, 101):
            text = i18n.t(key, lang, **{**fields, "n": n})
            assert text == value[i18n.plural_category(lang, n)].format(**{**fields, "n": n})


def test_plural_rules_come_from_cldr():
    assert [i18n.plural_category("ru", n) for n in (1, 2, 5, 21, 22, 111)] == ["one", "few", "many", "one", "few", "many"]
    assert [i18n.plural_category("ar", n) for n in (0, 1, 2, 3, 11, 100)] == ["zero", "one", "two", "few", "many", "other"]
    assert i18n.plural_categories("ru") == ("one", "few", "many", "other")
    assert i18n.t("error.trace.steps", "ru", n=21, limit=5) == "в трассе 21 шаг; воспроизвести можно не больше 5"
    assert i18n.t("narrate.all_ended", "en", n=1) == "the target accepted it; generation ended there."


@pytest.mark.parametrize("lang", list(i18n.LANGUAGES))
def test_the_diagnosis_is_headed_by_the_methods_title_in_the_pages_language(lang):
    """Not its registry id ("prompt_lookup"): the title the Methods tab shows, in the guide's terms."""
    from playground.app import theory_tab
    from playground.trace import Step, Trace

    steps = [Step(index=0, drafted=[5, 6], accepted=1, rejected=[6], emitted=[5, 7], verify_ms=10.0)]
    trace = Trace(method="prompt_lookup", target="m", prompt="p", steps=steps, output_ids=[5, 7])
    trace.summarize(0.1)
    _, body = theory_tab.theory_view(trace, None, lang)
    found = re.search(r"<p><b>([^<]*)</b>", body)
    assert found is not None, body
    heading = found.group(1)
    assert heading == METHODS["prompt_lookup"].localized(lang).title
    assert re.search(GLOSSARY["prompt_lookup_decoding"][lang], heading)


# --------------------------------------------------------------------------- the glossary catches what was once written

# Variants a reading of the page found (issue #38), each in the inflection it took: every one must match a forbidden
# pattern of its language, so none comes back in any form.
ONCE_WRITTEN = {
    "ru": ["Формула Левиафана и др.", "Левиафан и др.", "базовый метод ничего не черновит", "чекпойнтах", "чекпойнт",
           "контрольные точки", "площадка всегда задаёт его", "Песочница и площадка", "LM-голову", "отвергнутый",
           "запустите baseline с тем же промптом", "Настройка"],
    "ar": ["يولّد γ رمزًا تلقائيًا واحدًا تلو الآخر", "تحافظ عيّنات الرفض", "عينات الرفض", "كل طريقة لا تفقد شيئًا",
           "ومع ذلك لا تفقد شيئًا", "وكل قيمة أقل من 1 تفقد الدقة", "يفقد الدقة", "نقطة تفتيش", "نقاط التفتيش",
           "نقطة حفظه", "نقطة تحقق (checkpoint)", "استخدم الفك الجشع", "يواصل الملعب العمل", "من الملعب",
           "ليفياثان وزملائه", "رأس النمذجة اللغوية", "شغّل baseline بالموجّه", "مللي ث", "بنفس مُجزّئ الرموز",
           "وTransformers تحكم بـ«المُرمِّز نفسه»", "تقرأ Transformers طبقات MTP", "التحقق بالتجميع",
           # issue #45's third reading: the library's name with a feminine verb or «نفسها» once more
           "وتطابق Transformers بين المفردتين", "فمصدره Transformers نفسها", "تمرّر \u2068Transformers 5.24\u2069 معالجات"],
}


@pytest.mark.parametrize("lang", ["ru", "ar"])
def test_every_variant_once_written_is_forbidden_in_the_form_it_took(lang):
    patterns = [pattern for entry in GLOSSARY.values() for pattern in entry["forbidden"].get(lang, ())]
    caught = {text: [p for p in patterns if re.search(p, text)] for text in ONCE_WRITTEN[lang]}
    assert all(caught.values()), f"{lang}: no forbidden pattern matches {[t for t, p in caught.items() if not p]}"


def test_where_the_page_differs_from_the_guide_the_glossary_says_why():
    """`differs` holds a reason (a sentence, not a flag) in a language the entry has; the @about says what it means."""
    assert "differs" in json.loads((i18n.LOCALES_DIR / "glossary.json").read_text(encoding="utf-8"))["@about"]
    for concept, entry in GLOSSARY.items():
        for lang, why in entry.get("differs", {}).items():
            assert lang in entry and isinstance(why, str) and len(why.split()) >= 8, (concept, lang, why)


@pytest.mark.parametrize("lang", list(i18n.LANGUAGES))
def test_every_glossary_term_is_in_use(lang):
    """A term no string uses is a stale entry (or a renamed key): each concept's term appears on the page."""
    texts = " ".join(strings(lang).values())
    unused = [concept for concept, entry in GLOSSARY.items() if not re.search(entry[lang], texts)]
    assert not unused, f"{lang}: glossary terms no string uses: {unused}"


# --------------------------------------------------------------------------- the glossary against the editions

# The guide's Russian and Arabic editions, beside the project's checkout where they were read (../shared/guide/).
EDITIONS = next((d for d in (Path(__file__).resolve().parents[n] / "shared" / "guide" for n in (2, 3)) if d.is_dir()),
                None)


# Russian joins once lang-ru's glossary reading of issue 45 lands (that engineer owns the Russian entries this round).
@pytest.mark.parametrize("lang", ["ar"])
def test_a_silent_differs_means_the_edition_uses_the_term(lang: str) -> None:
    """`differs` silent claims the page uses the edition's own term: that term must then be in the edition (issue 45:
    «مع فقد» and «م‌ث» were claimed as the guide's, which has neither)."""
    if EDITIONS is None:
        pytest.skip("the guide's editions are not beside this checkout (../shared/guide/)")
    edition = (EDITIONS / f"assisted-decoding.{lang}.txt").read_text(encoding="utf-8")
    claimed = [(concept, entry[lang]) for concept, entry in GLOSSARY.items()
               if lang not in entry.get("differs", {}) and not re.search(entry[lang], edition)]
    assert not claimed, f"{lang}: terms the glossary claims from the edition, which lacks them: {claimed}"
