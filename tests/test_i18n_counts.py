"""Counted phrases and numbers in prose, checked in every language of the catalogue.

- Every placeholder of every string is accounted for: the count `n` (the one the plural machinery picks a form by),
  text, or a number that is not a count, each kind of those with the reason it needs no plural forms.
- Every string that holds the count `n` is a plural form set in every language, and each form is checked at CLDR's
  sample numbers for its category: a Russian "one" form also serves 21 and 101, so a form written as if n were 1
  («один», «приняла его», no number at all) shows itself; Arabic's 3–10, 11–99 and 100+ take different nouns.
- No number placeholder that is not the count stands right before a noun that agrees with numbers.
- Numbers inside prose come from the formatter: no typed decimal («0.7», «0,4») and no Python format spec
  (``{s:.1f}``) in any Russian or Arabic string.
"""

from __future__ import annotations

import re
import string

import pytest
from test_i18n import registry_english

from playground import i18n
from playground.methods import PROSE_NUMBERS

LANGS = list(i18n.LANGUAGES)

# What each placeholder holds, apart from the count `n`. Text: words, names, quoted values, phrases already counted
# by their own plural key (``{tokens}`` is "3 tokens" from render.tokens), lists and HTML.
TEXT = {
    "advice", "assistant", "base", "choice", "choices", "device", "draft", "dtype", "error", "example", "factors",
    "failed", "filename", "flags", "formula", "got", "kind", "known", "label", "method", "methods", "misses", "model",
    "models", "name", "needs", "other", "package", "pace", "params", "prefix", "prompt", "prompts", "reason", "reasons",
    "run", "shows",
    "source", "spec", "stage", "stand_in", "steps", "tab", "target", "text", "title", "token", "tokens", "top", "answer",
    "verdict", "what", "wheel", "where", "who", "why", "customdata[0]", "customdata[1]", "customdata[2]",
}
# Numbers that are not the count a sentence's forms follow, by the reason they need no forms.
NOT_COUNTS = {
    # «шаг 21», «позиция 3», «الخطوة 3»: which one, not how many; nothing agrees with an ordinal written in digits.
    "ordinal": {"step", "i", "index", "position", "line", "column", "start", "end", "id", "rep"},
    # «не больше 64», «от 1 до 12», «الحد 64»: a bound quoted after a word that already governs it; no noun follows.
    "bound": {"limit", "last", "lo", "hi", "min", "context", "k"},
    # «длина черновика = 5», «طول المسودة = 5», "γ=5": a parameter's value after its name and "="; no noun follows.
    "assigned": {"value"},
    # «принято: 3/5», «приняла 3 из них», «قبل 3 منها»: a tally after a colon, a slash or «из»/«من»; the counted
    # noun, where there is one, is already inflected before it.
    "tally": {"accepted", "drafted", "judged", "kept", "verified", "done", "settings", "matched", "new", "repeats",
              "refused", "right", "answers"},
    # Written by i18n.number with decimals, a unit symbol (мс, с, ГБ, م‌ث) or a sign (×, %): CLDR gives a fraction the
    # "other" form, which is what a sentence uses before a noun («2,50 токена за шаг»), and unit symbols do not inflect.
    "measure": {"ms", "s", "x", "y", "tps", "tau", "gamma", "alpha", "c", "cost", "o", "v", "positions", "share",
                "setup", "verify", "theo", "ref", "measured", "predicted", "rel", "margin", "gain", "time", "change",
                "ratio", "threshold", "expected", "weight", "rest", "p", "q", "r", "a", "prob", "p_top", "v_top",
                "p_token", "size", "budget", "free", "left", "base_s", "method_s", "temperature", "temperature_squared"},
}
NUMBERS = set().union(*NOT_COUNTS.values())
# The registry prose's quoted numbers (Transformers' 0.4, the guide's 0.7): measures, named in methods.PROSE_NUMBERS.
NOT_COUNTS["measure"] |= set(PROSE_NUMBERS)
NUMBERS |= set(PROSE_NUMBERS)

# CLDR's sample numbers for each category (the integer samples of CLDR's plurals.xml; English as it has them).
SAMPLES = {
    "en": {"one": (1,), "other": (0, 2, 21, 100)},
    "ru": {"one": (1, 21, 101), "few": (2, 3, 22), "many": (0, 5, 11, 100)},
    "ar": {"zero": (0,), "one": (1,), "two": (2,), "few": (3, 10, 103), "many": (11, 99), "other": (100, 102)},
}
# Forms that cover one number only may say it in words («رمز واحد», «رمزان», "it"); every other form must show n.
SINGLE_NUMBER = {("en", "one"), ("ar", "zero"), ("ar", "one"), ("ar", "two")}

# The nouns the page counts, as each language spells their stems.
COUNTED_NOUNS = {
    "en": r"(tokens?|steps?|characters?|entr(y|ies)|items?|layers?|settings?|prompts?|repeats?|tensors?|drafts?|values?"
          r"|generations?|bits?|class(es)?|followers?)\b",
    "ru": r"(токен|шаг|символ|запис|элемент|сло[йёя]|настро|промпт|повтор|тензор|черново|значени|генерац|бит|класс|человек"
          r"|студент)",
    "ar": r"(رمز|رموز|خطو|حرف|أحرف|مدخل|عنصر|عناصر|طبق|إعداد|موجّه|موتر|مسود|قيم|توليد|بت)",
}


def catalogue(lang: str) -> dict[str, object]:
    """Every string of `lang` as its file holds it (the registry's English for English)."""
    out: dict[str, object] = dict(registry_english()) if lang == i18n.DEFAULT_LANGUAGE else {}
    out.update(i18n.catalogue(lang))
    return out


def forms(value: object) -> list[str]:
    return list(value.values()) if isinstance(value, dict) else [value]  # type: ignore[list-item]


def fields(text: str) -> list[tuple[str, str]]:
    """(name, format spec) of each placeholder; Plotly's ``%{y:.2f}`` templates are Plotly's, not ours."""
    return [(name, spec or "") for literal, name, spec, _ in string.Formatter().parse(text)
            if name is not None and not (literal or "").endswith("%")]


def sample_fields(key: str, value: object) -> dict[str, str]:
    return {name: f"<{name}>" for form in forms(value) for name, _ in fields(form) if name != "n"}


# --------------------------------------------------------------------------- what the placeholders hold


def test_every_placeholder_is_the_count_text_or_a_number_with_a_reason() -> None:
    """A new placeholder makes its author decide: the count `n`, text, or a number that needs no forms and why."""
    unknown = {(lang, key, name) for lang in LANGS for key, value in catalogue(lang).items() for form in forms(value)
               for name, _ in fields(form) if name != "n" and name not in TEXT | NUMBERS}
    assert not unknown, f"placeholders nobody classified (the count is n; else TEXT or NOT_COUNTS): {sorted(unknown)}"
    assert not TEXT & NUMBERS


@pytest.mark.parametrize("lang", LANGS)
def test_every_string_with_the_count_is_a_plural_form_set(lang: str) -> None:
    bare = [key for key, value in catalogue(lang).items() if isinstance(value, str) and "n" in dict(fields(value))]
    assert not bare, f"{lang}: counted phrases without plural forms: {bare}"


@pytest.mark.parametrize("lang", LANGS)
def test_no_number_but_the_count_stands_before_a_counted_noun(lang: str) -> None:
    """«после {tokens} токенов», "{n} verification steps" with `n` not the form's count: the noun needs the count's
    form, so the number must be the plural set's `n` (a measure such as τ is a fraction and takes "other")."""
    numbers = "|".join(re.escape(name) for name in NUMBERS - NOT_COUNTS["measure"])
    pattern = re.compile(r"\{(" + numbers + r")\}\s*" + COUNTED_NOUNS[lang])
    found = [(key, form) for key, value in catalogue(lang).items() for form in forms(value) if pattern.search(form)]
    assert not found, f"{lang}: a number before a counted noun that is not the plural's count: {found}"


def test_a_fraction_before_a_russian_noun_takes_its_genitive_singular() -> None:
    """CLDR puts 2,5 in Russian's "other": «2,5 токена», never «2,5 токенов» (a share is a percentage, «25 % шагов»:
    "of the steps", which is the genitive plural)."""
    measures = "|".join(NOT_COUNTS["measure"] - {"share"})
    pattern = re.compile(r"\{(" + measures + r")\}\s*(\w+\s)?(токенов|шагов|позиций|слоёв|символов)")
    found = [(key, form) for key, value in catalogue("ru").items() for form in forms(value) if pattern.search(form)]
    assert not found, found


# --------------------------------------------------------------------------- each form at CLDR's sample numbers


def test_the_samples_are_cldrs() -> None:
    for lang, categories in SAMPLES.items():
        assert set(categories) == set(i18n.plural_categories(lang)) - ({"other"} if lang == "ru" else set())
        for category, numbers in categories.items():
            assert all(i18n.plural_category(lang, n) == category for n in numbers), (lang, category)


@pytest.mark.parametrize("lang", LANGS)
def test_every_form_reads_right_at_cldrs_sample_numbers(lang: str) -> None:
    """Each form, formatted at every sample number of its category, shows that number (grouped as the language
    writes it) unless its category holds one number only (a Russian "one" form that says «приняла его» fails at 21)."""
    wrong = []
    for key, value in catalogue(lang).items():
        if not isinstance(value, dict):
            continue
        others = sample_fields(key, value)
        for category, numbers in SAMPLES[lang].items():
            for n in numbers:
                if "tokens" in others:  # the counted phrase the renderer puts there: "21 token", «21 токен»
                    others["tokens"] = i18n.tn("render.tokens", n, lang)
                text = i18n.t(key, lang, n=n, **others)
                assert text == value[category].format(n=i18n.count(n, lang), **others)
                if (lang, category) not in SINGLE_NUMBER and i18n.count(n, lang) not in text:
                    wrong.append((key, category, n, text))
    assert not wrong, f"{lang}: forms written for one number only: {wrong}"


# Arabic nouns as the counted forms need them: 3–10 take the plural, 11–99 the singular accusative (with its
# tanwīn alif where the noun takes one), 100+ the singular genitive; a dual after a preposition is genitive (-ين).
AR_MASCULINE = r"(رمز|موتر|حرف|مدخل|إعداد|موجّه|تكرار|عنصر|بت)"
AR_PLURALS = r"(رموز|موترات|أحرف|مدخلات|إعدادات|موجّهات|تكرارات|عناصر|بتات)"


def test_arabic_counted_nouns_take_the_case_and_number_their_count_needs() -> None:
    wrong = []
    for key, value in catalogue("ar").items():
        if not isinstance(value, dict):
            continue
        if re.search(r"\{n\} " + AR_MASCULINE + r"(?!ًا)(?=[\s،؛:).]|$)", value["many"]):
            wrong.append((key, "many: 11–99 take the singular accusative («11 رمزًا»)", value["many"]))
        if re.search(r"\{n\} " + AR_MASCULINE + "ًا", value["other"]):
            wrong.append((key, "other: 100 takes the singular genitive («100 رمز»)", value["other"]))
        if re.search(r"\{n\} " + AR_MASCULINE + r"(?=[\s،؛:).]|$)", value["few"]):
            wrong.append((key, "few: 3–10 take the plural («3 رموز»)", value["few"]))
        if re.search(r"(?:^|[\s(])(?:من|في|إلى|على|عن|بعد|قبل|بين)\s+\S+ان(?=[\s،؛:).]|$)", value["two"]):
            wrong.append((key, "two: a dual after a preposition is genitive («من رمزين»)", value["two"]))
    assert not wrong, wrong


def test_a_form_written_for_one_shows_itself() -> None:
    """The check above can fail: a Russian "one" form that hard-codes the pronoun for one token is caught at 21."""
    value = {"one": "целевая модель приняла его", "few": "приняла все {n}", "many": "приняла все {n}",
             "other": "приняла все {n}"}
    text = value["one"].format(n=21)
    assert i18n.plural_category("ru", 21) == "one" and "21" not in text


# --------------------------------------------------------------------------- numbers come from the formatter

# A decimal typed into prose: digits, a point or comma, digits; not a version ("Transformers 5.24"), a model's name
# ("Llama-3.2-1B", "GLM-4.5") or code between backticks.
TYPED_DECIMAL = re.compile(r"(?<![\w.\-])\d+[.,]\d+(?![\w.\-]*[A-Za-z])")
VERSION = re.compile(r"Transformers \d+\.\d+")


def typed_decimals(text: str) -> list[str]:
    prose = VERSION.sub("", re.sub(r"`[^`]*`", "", text))
    return TYPED_DECIMAL.findall(prose)


@pytest.mark.parametrize("lang", ["ru", "ar"])
def test_no_decimal_is_typed_into_prose(lang: str) -> None:
    # A model's label is its name ("Llama 3.2 1B", "SmolLM 1.7B"), written as its makers write it in every language.
    found = [(key, typed_decimals(form)) for key, value in catalogue(lang).items() for form in forms(value)
             if typed_decimals(form) and not re.fullmatch(r"model\..*\.label", key)]
    assert not found, f"{lang}: decimals typed, not written by the formatter: {found}"


def test_the_typed_decimal_check_finds_one() -> None:
    assert typed_decimals("при w = 0.05 смесь; начальное значение — 0,7.") == ["0.05", "0,7"]
    assert typed_decimals("Transformers 5.24, Llama-3.2-1B, GLM-4.5, `x = 0.7`") == []


@pytest.mark.parametrize("lang", LANGS)
def test_no_placeholder_carries_a_python_format_spec(lang: str) -> None:
    """``{s:.1f}`` writes "2.5" into a Russian sentence: a number field is filled by `i18n.number` (a `Number`)."""
    found = [(key, name, spec) for key, value in catalogue(lang).items() for form in forms(value)
             for name, spec in fields(form) if spec]
    assert not found, found


def test_counts_are_grouped_as_the_language_writes_them() -> None:
    assert [i18n.count(262144, lang) for lang in ("en", "ru", "ar")] == ["262144", "262\xa0144", "262,144"]
    assert i18n.tn("render.tokens", 262144, "ru") == "262\xa0144 токена"
    assert i18n.t("error.trace.steps", "ru", n=1021, limit=20000) == (
        "в трассе 1\xa0021 шаг; воспроизвести можно не больше 20\xa0000")
    assert i18n.t("error.trace.steps", "en", n=1021, limit=20000) == (
        "the trace has 1021 steps; at most 20000 can be replayed")  # the CLI's English as it always printed


def test_a_number_travels_between_processes_and_is_written_in_the_pages_language() -> None:
    import json

    line = i18n.Message.keyed("load.loaded", spec="m", s=i18n.Number(2.25, ".1f"))
    again = i18n.Message.from_dict(json.loads(json.dumps(line.to_dict())))
    assert str(again) == "Loaded m in 2.2 s" and again.localized("ru") == line.localized("ru")
    assert "2,2" in again.localized("ru")


@pytest.mark.parametrize("lang", ["ru", "ar"])
def test_the_registry_prose_numbers_are_the_ones_its_english_says(lang: str) -> None:
    """A translation writes a number of the registry's prose as a field; the English quotes the same number, and
    the page shows it in its language («0,4» in Russian)."""
    from playground.methods import METHODS

    english = registry_english()
    used = {(key, name) for key, value in i18n.catalogue(lang).items() for form in forms(value)
            for name, _ in fields(form) if name in PROSE_NUMBERS}
    assert used, "no translation uses a prose number: nothing is checked"
    for key, name in used:
        assert key in english and i18n.number(PROSE_NUMBERS[name], "en", "g") in english[key], (key, name)
    help_ru = next(p for p in METHODS["speculative"]
                   .localized("ru").params if p.name == "assistant_confidence_threshold").help
    assert "0,4" in help_ru and "{" not in help_ru


def _placeholders(value: object) -> set[str]:
    texts = value.values() if isinstance(value, dict) else [value]
    return {field for text in texts for _, field, _, _ in string.Formatter().parse(str(text)) if field}


def test_every_call_by_key_gives_exactly_its_strings_placeholders() -> None:
    """Every `keyed("key", …)`, `t("key", lang, …)` and `tn("key", n, …)` in the code names the fields its English
    string has, no fewer and no others (the count `n` may come only to pick a plural form): a field renamed in the
    catalogue but not at a call (`bits=` for `{n}`) turned a refusal into "failed inside the playground"."""
    import ast
    from pathlib import Path

    english = i18n.catalogue("en")
    root = Path(__file__).resolve().parent.parent / "playground"
    wrong, checked = [], 0
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str) and node.args[0].value in english):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name not in ("keyed", "t", "tn") or any(k.arg is None for k in node.keywords):
                continue  # another function, or fields passed as **mapping (checked where they are made)
            given = {k.arg for k in node.keywords} - {"default"} | ({"n"} if name == "tn" else set())
            if name == "t" and not given:
                continue  # the raw string, e.g. a template filled later
            need = _placeholders(english[node.args[0].value])
            checked += 1
            if need - given or given - need - {"n"}:
                wrong.append(f"{path.relative_to(root.parent)}:{node.lineno} {name}({node.args[0].value!r}): "
                             f"its string has {sorted(need)}, the call gives {sorted(given)}")  # type: ignore[type-var]
    assert checked > 300, checked
    assert not wrong, "\n".join(wrong)
