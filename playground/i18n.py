"""The page's languages: lookup, fallback, plurals, numbers and the visitor's language (pure: no Gradio, no torch).

Translations are data files beside this module, one per language (`playground/locales/<code>.json`):
a flat object of dotted keys to strings with `str.format` fields (``"{n} tokens"``), or, for a
count, an object of CLDR plural categories (``{"one": "…", "few": "…", "many": "…", "other": "…"}``).
Keys starting with ``@`` are notes for translators, not strings. English (`en.json`) is the reference
catalogue; the method registry and the example prompts keep their own English text (`methods.py`,
`examples.py` are their single source), so their keys (``method.<name>.title`` …) exist only in the
other languages and English falls back to the registry's text, passed as `default`.

Plural rules and number symbols come from CLDR (Babel's copy): `plural_category`, `number`.

Adding a language: copy `en.json` to `<code>.json`, translate every value (`tests/test_i18n.py` fails
on a missing key, a changed `{field}` or a value left equal to the English one), add the registry keys
the test lists, then add the code to `LANGUAGES` (and to `RTL` if it is written right to left).
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

LOCALES_DIR = Path(__file__).with_name("locales")

# code -> the language's own name (what the picker shows)
LANGUAGES: dict[str, str] = {"en": "English", "ru": "Русский", "ar": "العربية"}
DEFAULT_LANGUAGE = "en"
RTL: frozenset[str] = frozenset({"ar"})

_CLDR_ORDER = ("zero", "one", "two", "few", "many", "other")


@lru_cache(maxsize=None)
def _plural_rule(lang: str) -> Any:
    """CLDR's plural rule of a language, from Babel's copy of CLDR (a new language needs no code here)."""
    from babel import Locale

    return Locale.parse(lang).plural_form


def plural_categories(lang: str) -> tuple[str, ...]:
    """The CLDR plural categories a counted phrase of `lang` must spell out ("other" always among them)."""
    tags = _plural_rule(normalize(lang)).tags | {"other"}
    return tuple(category for category in _CLDR_ORDER if category in tags)


def plural_category(lang: str, n: float) -> str:
    """CLDR plural category of a count in `lang` (e.g. ru 21 -> "one", 22 -> "few", 25 -> "many"; ar 0 -> "zero")."""
    return _plural_rule(normalize(lang))(abs(n))


_NUMBER_SPEC = re.compile(r"^\.(\d)([fe%])$|^g$")


@lru_cache(maxsize=None)
def _number_pattern(lang: str, spec: str) -> Any:
    """Babel's pattern for `spec` in `lang`: the language's own percent pattern (ru "45 %"), no grouping."""
    from babel import Locale
    from babel.numbers import parse_pattern

    match = _NUMBER_SPEC.match(spec)
    if not match:
        raise ValueError(f"unsupported number spec {spec!r} (.Nf, .N%, .Ne or g)")
    digits, kind = match.groups()
    decimals = "." + "0" * int(digits) if digits and int(digits) else ""
    if kind == "%":
        shape = Locale.parse(lang).percent_formats[None].pattern.split(";")[0]
        return parse_pattern(re.sub(r"[#0,.]+", "0" + decimals, shape, count=1))
    if kind == "e":
        return parse_pattern(f"0{decimals}E0")
    return parse_pattern("0" + (decimals if kind == "f" else ".#####"))


def number(value: float, lang: str = DEFAULT_LANGUAGE, spec: str = ".2f") -> str:
    """A number as the visitor's language writes it, from CLDR's data (Babel): `spec` is the f-string spec it
    replaces (".2f", ".0%", ".1e", "g", "d"). Digits are Latin in every language (CLDR's "latn" numbering system and
    its symbols: ru 1,23, ar 1.23); the page isolates them left to right where it places them in right-to-left text
    (the catalogue's FSI…PDI, the microscope's <bdi>). No grouping, as the f-strings had none. A new language needs
    no code here. Code (a `generate()` call, an HTML attribute) keeps Python's own formatting."""
    code = normalize(lang)
    if spec == "d":  # a whole count (a table's tokens, steps): no decimals
        spec = ".0f"
    if not math.isfinite(value):
        return format(value, spec if spec != "g" else "g")
    exact = Decimal(value)  # the float's exact value, so rounding is Python's own (half to even)
    if spec.endswith("%"):  # Python multiplies the float by 100 before rounding; so do we (0.005 -> "0%")
        exact = Decimal(value * 100).scaleb(-2)
    elif spec == "g":
        exact = Decimal(format(value, "g"))
    return _number_pattern(code, spec).apply(exact, code, numbering_system="latn")


def count(n: int, lang: str = DEFAULT_LANGUAGE) -> str:
    """A whole count as the visitor's language groups its digits (CLDR, Latin digits: ru "262 144", ar "262,144").
    English keeps Python's own "262144": its text is what the CLI, logs and scripts have always printed."""
    code = normalize(lang)
    if code == DEFAULT_LANGUAGE:
        return str(n)
    from babel.numbers import format_decimal

    return format_decimal(n, locale=code, numbering_system="latn")




def separators(lang: str = DEFAULT_LANGUAGE) -> str:
    """Plotly's `layout.separators` for `lang` (its decimal sign, then its group sign, from CLDR's "latn" symbols), so
    a chart's axes and hover numbers write decimals as the page's sentences do."""
    from babel.numbers import get_decimal_symbol, get_group_symbol

    code = normalize(lang)
    return get_decimal_symbol(code, numbering_system="latn") + get_group_symbol(code, numbering_system="latn")


def _numbers_written(fields: Mapping[str, Any], lang: str) -> dict[str, Any]:
    """`fields` with their numbers written in `lang`: a whole number (not a bool) by `count`, so a sentence never shows
    "262144" in a language that groups digits; a `Number` by `number`; text and messages stay as they are, and so does
    `got`, the visitor's own value quoted back as it was sent."""
    return {name: count(value, lang) if isinstance(value, int) and not isinstance(value, bool) and name != "got"
            else value.localized(lang) if isinstance(value, Number) else value for name, value in fields.items()}


class Number(str):
    """A number among a `Message`'s fields: as a `str` its English text; `localize` writes it in the page's language."""

    value: float
    spec: str

    def __new__(cls, value: float, spec: str = ".2f") -> "Number":
        made = super().__new__(cls, number(value, DEFAULT_LANGUAGE, spec))
        made.value, made.spec = value, spec
        return made

    def __getnewargs__(self) -> tuple[float, str]:  # type: ignore[override]  # str's is (str,): ours rebuild a number
        """What a copy or a pickle is rebuilt from: the number, not its English text (a trace holding a `Message`
        is deep-copied when it is saved)."""
        return (self.value, self.spec)

    def localized(self, lang: str = DEFAULT_LANGUAGE) -> str:
        return number(self.value, lang, self.spec)


class Listed(str):
    """A list of names among a `Message`'s fields (e.g. a CPU's features): as a `str` the English list, and in the
    page's language joined by that language's own list pattern (CLDR's, via Babel), never by English words."""

    items: tuple[str, ...]

    def __new__(cls, items: "tuple[str, ...] | list[str]") -> "Listed":
        made = super().__new__(cls, list_of(items, DEFAULT_LANGUAGE))
        made.items = tuple(items)
        return made

    def __getnewargs__(self) -> tuple[tuple[str, ...]]:  # type: ignore[override]  # rebuilt from the items
        return (self.items,)

    def localized(self, lang: str = DEFAULT_LANGUAGE) -> str:
        return list_of(self.items, lang)


def list_of(items: "tuple[str, ...] | list[str]", lang: str = DEFAULT_LANGUAGE) -> str:
    """Names joined as `lang` writes a list ("A and B" in English, «A и B», «A وB»): CLDR's pattern via Babel."""
    from babel.lists import format_list

    return format_list(list(items), locale=normalize(lang)) if items else ""


def joined(items: "tuple[str, ...] | list[str]", lang: str = DEFAULT_LANGUAGE) -> str:
    """Phrases one after another, as `lang` separates them (`list.separator`: ", " in English, «، » in Arabic): for
    an enumeration of figures ("draft 30%, verify 50%"), where `list_of`'s "and" has no place."""
    return t("list.separator", lang).join(items)


@lru_cache(maxsize=None)
def catalogue(lang: str) -> Mapping[str, Any]:
    """The strings of one language (notes dropped); empty for an unknown code."""
    if lang not in LANGUAGES:
        return {}
    data = json.loads((LOCALES_DIR / f"{lang}.json").read_text(encoding="utf-8"))
    return {key: value for key, value in data.items() if not key.startswith("@")}


def notes(lang: str) -> dict[str, Any]:
    """The `@` entries of one language file (e.g. ``@same_as_english``: keys allowed to equal English)."""
    data = json.loads((LOCALES_DIR / f"{lang}.json").read_text(encoding="utf-8"))
    return {key: value for key, value in data.items() if key.startswith("@")}


def normalize(lang: str | None) -> str:
    """A supported code for any input ("ar-EG" -> "ar", "RU" -> "ru"); English when not supported."""
    code = (lang or "").strip().replace("_", "-").split("-")[0].lower()
    return code if code in LANGUAGES else DEFAULT_LANGUAGE


def _raw(key: str, lang: str, default: Any) -> Any:
    value = catalogue(normalize(lang)).get(key)
    if value is None:
        value = default if default is not None else catalogue(DEFAULT_LANGUAGE).get(key)
    if value is None:
        raise KeyError(f"no translation key {key!r}")
    return value


def t(key: str, lang: str = DEFAULT_LANGUAGE, default: str | None = None, **fields: Any) -> str:
    """The string for `key` in `lang`, formatted with `fields`.

    Falls back to `default` (the registry's English) and then to English; an unknown key is a bug (KeyError).
    """
    value = _raw(key, lang, default)
    if isinstance(value, dict):  # a counted phrase: its form for the count `n` (a keyed message's count), else "other"
        count = fields.get("n")
        form = value.get(plural_category(normalize(lang), count)) if isinstance(count, (int, float)) else None
        value = form or value.get("other") or next(iter(value.values()))
    return value.format(**_numbers_written(fields, lang)) if fields else value


class Message(str):
    """A sentence from the catalogue: as a `str` it is the English text (the CLI, logs, scripts see exactly that),
    and `localized(lang)` is the same sentence in the page's language. Progress callbacks carry these, so a
    model's loading lines reach the page translated while their `str` stays what it always printed. A field may
    itself be a `Message` (translated with it); any other value appears verbatim."""

    key: str
    fields: dict[str, Any]

    @classmethod
    def keyed(cls, key: str, **fields: Any) -> "Message":
        """The message whose English is `key`'s in `locales/en.json`, formatted with `fields`."""
        message = cls(t(key, DEFAULT_LANGUAGE, **fields))
        message.key, message.fields = key, dict(fields)
        return message

    @classmethod
    def registry(cls, key: str, english: str) -> "Message":
        """A phrase whose English lives in the registry, not in `en.json` (a method's title: ``method.<name>.title``),
        written as `english` (e.g. with a lower-case first letter inside a sentence) and translated as `key`."""
        message = cls(english)
        message.key, message.fields = key, {}
        return message

    def to_dict(self) -> dict[str, Any]:
        """The message as JSON data, for another process (a conversion's progress, `models`): `from_dict` reads it."""
        return {"key": self.key, "text": str.__str__(self),
                "fields": {name: value.to_dict() if isinstance(value, Message)
                           else {"number": value.value, "spec": value.spec} if isinstance(value, Number) else value
                           for name, value in self.fields.items()}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Message":
        """The message `to_dict` wrote: the same English, key and fields (messages among them rebuilt too)."""
        message = cls(str(data["text"]))
        message.key = str(data["key"])
        message.fields = {name: cls.from_dict(value) if isinstance(value, dict) and "key" in value
                          else Number(float(value["number"]), str(value["spec"]))
                          if isinstance(value, dict) and "number" in value else value
                          for name, value in dict(data.get("fields") or {}).items()}
        return message

    def localized(self, lang: str = DEFAULT_LANGUAGE) -> str:
        """The sentence in `lang` (its fields that are messages too)."""
        if normalize(lang) == DEFAULT_LANGUAGE:
            return str.__str__(self)
        return t(self.key, lang, **{name: localize(value, lang) for name, value in self.fields.items()})


def localize(text: Any, lang: str = DEFAULT_LANGUAGE) -> Any:
    """A `Message` (or one of our errors, `errors.PlaygroundError`) in `lang`; any other value as it is (text
    that carries no key stays as written)."""
    if isinstance(text, (Message, Number, Listed)):
        return text.localized(lang)
    localized = getattr(text, "localized", None) if isinstance(text, Exception) else None
    return localized(lang) if callable(localized) else text


def tn(key: str, n: float, lang: str = DEFAULT_LANGUAGE, **fields: Any) -> str:
    """A counted phrase: the plural form of `key` for `n`, formatted with `n` and `fields`."""
    code = normalize(lang)
    value = _raw(key, code, None)
    if isinstance(value, dict):
        value = value.get(plural_category(code, n)) or value["other"]
    return value.format(**_numbers_written({"n": n, **fields}, code))


_QUALITY = re.compile(r"^\s*([A-Za-z*][A-Za-z0-9*-]*)\s*(?:;\s*q\s*=\s*([0-9.]+))?\s*$")


def from_accept_language(header: str | None) -> str | None:
    """The supported language a browser prefers most (an ``Accept-Language`` header), or None."""
    choices: list[tuple[float, int, str]] = []
    for position, part in enumerate((header or "").split(",")[:32]):
        match = _QUALITY.match(part)
        if not match:
            continue
        try:
            quality = float(match.group(2)) if match.group(2) else 1.0
        except ValueError:
            continue
        code = match.group(1).split("-")[0].lower()
        if code in LANGUAGES and quality > 0:
            choices.append((-quality, position, code))
    return min(choices)[2] if choices else None


def choose_language(requested: str | None, accept_language: str | None) -> str:
    """The page's language: an explicit choice (the picker's ``?lang=``) when supported, else the browser's."""
    code = (requested or "").strip().replace("_", "-").split("-")[0].lower()
    if code in LANGUAGES:
        return code
    return from_accept_language(accept_language) or DEFAULT_LANGUAGE


def direction(lang: str) -> str:
    """"rtl" or "ltr", for the page's ``dir``."""
    return "rtl" if normalize(lang) in RTL else "ltr"


def ui_translations(prefix: str = "ui.") -> dict[str, dict[str, str]]:
    """Every language's strings under `prefix`, for Gradio's `gr.I18n(**...)` (labels the browser translates)."""
    return {lang: {key: value for key, value in catalogue(lang).items() if key.startswith(prefix)
                   and isinstance(value, str)} for lang in LANGUAGES}
