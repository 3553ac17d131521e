"""Numbers in the visitor's language: every number the page shows goes through `i18n.number`, which writes it with
CLDR's symbols for the language (Babel's data, Latin digits): a decimal comma in Russian, a decimal point with Latin
digits in Arabic, which the page keeps left to right where it places them in right-to-left text.

The renderers are checked by what they write (a Russian page has decimal commas where the English one has points)
and by their source (no f-string or `format()` writes a decimal into text the page shows; HTML attributes, CSS and
code keep Python's point)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from test_render import mixed_steps
from test_theory import baseline_trace, method_trace

from playground import charts, i18n, microscope_view, render, theory, tune_report
from playground.trace import Trace

ROOT = Path(__file__).resolve().parents[1] / "playground"
POINT = re.compile(r"\d\.\d")  # a decimal written with a point
COMMA = re.compile(r"\d,\d")  # ... with a comma
NON_LATIN_DIGITS = re.compile(r"[\u0660-\u0669\u06f0-\u06f9]")  # Arabic-Indic and Eastern Arabic-Indic digits


# --------------------------------------------------------------------------- the one function


@pytest.mark.parametrize("value, spec, en, ru, ar", [
    (1.2345, ".2f", "1.23", "1,23", "1.23"),
    (0.61, ".2f", "0.61", "0,61", "0.61"),
    (12.0, ".1f", "12.0", "12,0", "12.0"),
    (1234.5, ".1f", "1234.5", "1234,5", "1234.5"),  # no grouping, as the f-strings had none
    (0.456, ".0%", "46%", "46\xa0%", "46%"),  # CLDR's percent pattern: Russian puts a no-break space before %
    (0.4567, ".1%", "45.7%", "45,7\xa0%", "45.7%"),
    (0.7, "g", "0.7", "0,7", "0.7"),
])
def test_numbers_follow_cldr_for_each_language(value, spec, en, ru, ar) -> None:
    assert [i18n.number(value, lang, spec) for lang in ("en", "ru", "ar")] == [en, ru, ar]


def test_english_is_what_the_f_strings_wrote() -> None:
    """English output is unchanged by routing numbers through Babel: the same digits, rounded the same way (half to
    even on the float's exact value, e.g. 2.675 -> 2.67)."""
    values = [0.0, 0.005, 0.015, 0.125, 0.3333, 0.5, 0.999, 1.005, 2.675, 7.25, 12.5, 99.95, 1234.5678, 1 / 3]
    for value in values:
        for spec in (".0f", ".1f", ".2f", ".3f", ".4f", ".0%", ".1%"):
            assert i18n.number(value, "en", spec) == format(value, spec), (value, spec)
    for count in (0, 7, 120, 4096):  # whole counts in a table (the benchmark report's tokens and steps)
        assert [i18n.number(count, lang, "d") for lang in ("en", "ru", "ar")] == [format(count, "d")] * 3


def test_arabic_keeps_latin_digits() -> None:
    for value in (0.0, 0.61, 1.23, 12.5, 1234.5, 0.000123):
        for spec in (".2f", ".1f", ".0%", "g", ".1e"):
            written = i18n.number(value, "ar", spec)
            assert not NON_LATIN_DIGITS.search(written) and re.search(r"[0-9]", written), (value, spec, written)


def test_a_new_language_needs_no_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """The symbols come from CLDR by the language's code: a language added to LANGUAGES writes its own."""
    monkeypatch.setitem(i18n.LANGUAGES, "de", "Deutsch")
    monkeypatch.setitem(i18n.LANGUAGES, "fr", "Français")
    assert i18n.number(1.25, "de") == "1,25" and i18n.number(0.5, "de", ".0%") == "50\xa0%"
    assert i18n.number(1.25, "fr") == "1,25"
    assert i18n.separators("de") == ",."


def test_a_number_in_a_message_is_written_in_the_pages_language() -> None:
    message = i18n.Message.keyed("method.lossy.ensemble", weight=i18n.Number(0.7, "g"), rest=i18n.Number(0.3, "g"))
    assert "0.7" in message and "0.3" in message  # its str: the English the CLI prints
    assert "0,7" in message.localized("ru") and "0.7" not in message.localized("ru")


def test_a_message_with_numbers_survives_a_copy_and_a_pickle() -> None:
    """A trace holding such a message is deep-copied when it is saved (`dataclasses.asdict`): the copy is rebuilt
    from the number, not from its English text (which failed: "must be real number, not str")."""
    import copy
    import pickle

    message = i18n.Message.keyed("method.lossy.ensemble", weight=i18n.Number(0.7, "g"), rest=i18n.Number(0.25, ".2f"))
    features = i18n.Listed(["avx512_bf16", "amx"])
    for made in (copy.deepcopy(message), pickle.loads(pickle.dumps(message))):
        assert made == message and made.localized("ru") == message.localized("ru")
        assert "0,25" in made.localized("ru")
    for made in (copy.deepcopy(features), pickle.loads(pickle.dumps(features))):
        assert made.items == ("avx512_bf16", "amx") and made.localized("ru") == "avx512_bf16 и amx"


# --------------------------------------------------------------------------- what the renderers write


def _visible(html_text: str) -> str:
    """The text of an HTML fragment: tags (and the attributes and CSS inside them) dropped."""
    return re.sub(r"<[^>]*>", " ", html_text)


def _tune_data() -> dict:
    predicted = {"steps": 9, "drafted": 20, "accepted": 15, "tokens_per_step": 2.35, "time_s": 1.25, "speedup": 1.42}
    rows = [{"label": "n=3", "method": "prompt_lookup", "params": {"prompt_lookup_num_tokens": 3, "max_matching_ngram_size": 2},
             "predicted": predicted, "measured": {**predicted, "speedup": 1.37, "time_s": 1.31}},
            {"label": "n=5", "method": "prompt_lookup", "params": {"prompt_lookup_num_tokens": 5, "max_matching_ngram_size": 2},
             "predicted": {**predicted, "speedup": 1.51}}]
    return {"rows": rows, "recommended": "n=3", "default": "n=5", "fastest_predicted": "n=5", "predicted_gain": 0.063,
            "margin": 0.125, "losses": [{"prompt": "a", "own_best": "n=3", "own_best_speedup": 1.5,
                                         "overall_best_speedup": 1.25, "loss": 0.125}],
            "meta": {"prompts": 2, "counts_exact": True, "measured_reliable": False, "measured_pace_change": 1.25}}


def _sample_trace() -> Trace:
    trace = Trace(method="speculative", target="t", prompt="p", env={"dtype": "float32"}, decoding={"sample": False},
                  steps=mixed_steps(), output_ids=[tok for s in mixed_steps() for tok in s.emitted])
    trace.summarize(0.2345)
    return trace


def rendered_texts(lang: str) -> dict[str, str]:
    """The visible text of each renderer that writes numbers, in `lang`."""
    trace, steps = _sample_trace(), mixed_steps()
    run, base = method_trace(), baseline_trace()
    est = theory.estimate(run, base)
    gap_figures = {"speedup": 1.1, "theoretical_speedup": 1.6, "with_verify_cost": 1.3, "with_empty_steps": 1.25,
                   "refined_speedup": 1.2, "tokens_per_step": 2.5, "expected_tokens_per_step": 3.25, "verify_cost": 1.35,
                   "other_cost": 0.15, "c": 0.25, "gamma": 4.0, "empty_draft_fraction": 0.25, "prefill_share": 0.15,
                   "prefill_ratio": 1.25, "acceptance_rate": 0.5}
    figure = charts.theory_figure(est.alpha, est.tau, 2.5, est.expected_tau, lang=lang)
    data = _tune_data()
    return {
        "diagnosis": " ".join(theory.diagnose(run, base, lang)),
        "gap": theory.explain_gap(gap_figures, lang=lang),
        "stats": _visible(render.stats_html(trace.summary, (1.37, True, "ok"), lang)),
        "narration": " ".join(render.narrate_step(s, "speculative", lang=lang) for s in steps),
        "step_detail": _visible("".join(render.step_detail_html(s, "speculative", lang=lang) for s in steps)),
        "tooltips": " ".join(re.findall(r'title="([^"]*)"', render.render_trace(trace, lang))),  # read on hover
        "race": _visible(render.race_html([{"label": "a", "steps": steps, "total_tokens": 9, "finish_s": 1.25}],
                                          1.75, 1.5, lang=lang)),
        "microscope": _visible(microscope_view.panel_html(trace, 0, 0, lang)),
        "chart_text": " ".join(str(tr.text or "") + " " + str(tr.name or "") for tr in figure.data),
        "tune_verdict": tune_report.verdict(data, lang),
        # where no setting is predicted clearly faster than plain decoding: speedup, time, cost, gain and margin
        "tune_verdict_slower": tune_report.verdict({**data, "standing": "slower"}, lang),
        "tune_verdict_unclear": tune_report.verdict({**data, "standing": "unclear"}, lang),
        "tune_table": " ".join(" ".join(row) for row in tune_report.table_rows(data, lang=lang)),
        "tune_losses": " ".join(" ".join(row) for row in tune_report.losses_rows(data, lang)),
    }


@pytest.fixture(scope="module")
def english() -> dict[str, str]:
    return rendered_texts("en")


@pytest.mark.parametrize("part", list(rendered_texts("en")))
def test_a_russian_renderer_writes_a_decimal_comma_where_english_writes_a_point(english, part) -> None:
    russian = rendered_texts("ru")[part]
    assert POINT.search(english[part]), f"{part}: the English sample holds no decimal, so nothing is checked"
    assert not POINT.search(russian), (part, POINT.search(russian), russian)
    assert COMMA.search(russian), (part, russian)


@pytest.mark.parametrize("part", list(rendered_texts("en")))
def test_an_arabic_renderer_writes_latin_digits_with_a_point(part) -> None:
    arabic = rendered_texts("ar")[part]
    assert POINT.search(arabic) and not NON_LATIN_DIGITS.search(arabic), (part, arabic)


def test_the_microscopes_numbers_stay_left_to_right_in_arabic() -> None:
    """Each probability of the microscope sits in a left-to-right isolate (<bdi dir="ltr">), written with Latin
    digits and a point; Russian's are there too, with a comma."""
    for lang, decimal in (("ar", r"0\.\d{3}"), ("ru", r"0,\d{3}")):
        panel = microscope_view.panel_html(_sample_trace(), 0, 0, lang)
        numbers = re.findall(r'<bdi dir="ltr" class="pg-num">([^<]*)</bdi>', panel)
        assert numbers and all(re.fullmatch(decimal, n) for n in numbers), (lang, numbers)


def test_charts_take_the_languages_decimal_sign() -> None:
    """Plotly formats the axes and the hover templates' %{y:.2f} itself: the layout's separators tell it the sign."""
    assert charts.theory_figure(lang="ru").layout.separators == ",\xa0"
    assert charts.theory_figure(lang="ar").layout.separators == ".,"
    assert tune_report.speedup_figure(_tune_data(), "ru").layout.separators == ",\xa0"


# --------------------------------------------------------------------------- no renderer goes back to an f-string

# The modules that write what the page shows (the CLI and the benchmark's English report are not among them).
RENDERERS = ["render.py", "theory.py", "charts.py", "microscope.py", "microscope_view.py", "tune_report.py",
             "report_html.py", "presets.py", "methods.py", "bench/measure.py",  # Compare's progress lines on the page
             *(f"app/{p.name}" for p in (ROOT / "app").glob("*.py"))]
DECIMAL_SPEC = re.compile(r"\.?\d*[eEfFgG%]$")
# Where Python's own formatting is right: data for scripts and CSS inside a tag (`data-prob="…"`, `width:…%`).
CODE_BEFORE = re.compile(r'(data-[\w-]+="|width:)$')
# Functions whose text is English by design: the benchmark's cost sentence (the CLI's English report) and the
# many-prompt benchmark's progress (the CLI's `bench` and the MCP `bench` tool, neither on the page).
ENGLISH_ONLY = {("theory.py", "cost_sentence"), ("bench/measure.py", "run_bench")}


def f_string_decimals(path: Path, root: Path = ROOT) -> list[str]:
    """Each place in `path` where an f-string or `format()` writes a float into text: file:line and the code."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel = path.relative_to(root).as_posix()
    found = []
    skip = {id(node) for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef) and (rel, fn.name) in ENGLISH_ONLY
            for node in ast.walk(fn)}
    before: ast.expr | str
    for node in ast.walk(tree):  # what a tag's attribute or CSS holds is code, wherever it is computed
        if isinstance(node, ast.JoinedStr):
            for before, part in zip(node.values, node.values[1:]):
                if isinstance(before, ast.Constant) and CODE_BEFORE.search(str(before.value)):
                    skip |= {id(inner) for inner in ast.walk(part)}
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.JoinedStr):
            before = ""
            for part in node.values:
                if isinstance(part, ast.Constant):
                    before = str(part.value)
                    continue
                assert isinstance(part, ast.FormattedValue)
                spec = part.format_spec
                text = "".join(str(v.value) for v in spec.values if isinstance(v, ast.Constant)) if spec else ""  # type: ignore[attr-defined]  # a format spec is a JoinedStr
                if DECIMAL_SPEC.search(text) and not CODE_BEFORE.search(before):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(part)}")
                before = ""
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "format"
              and len(node.args) == 2 and isinstance(node.args[1], ast.Constant)
              and DECIMAL_SPEC.search(str(node.args[1].value)) and not _inside_float_call(tree, node)):
            found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return found


def _inside_float_call(tree: ast.AST, call: ast.Call) -> bool:
    """`float(format(x, ".2g"))` rounds a number; it writes no text."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "float" and call in n.args
               for n in ast.walk(tree))


def test_no_renderer_writes_a_decimal_with_an_f_string() -> None:
    found = [hit for name in RENDERERS for hit in f_string_decimals(ROOT / name)]
    assert not found, "decimals written with Python's formatting (use i18n.number):\n" + "\n".join(found)


def test_the_source_check_finds_an_f_string_decimal(tmp_path: Path) -> None:
    """The check above can fail: a renderer written the old way is caught, its attribute and CSS numbers are not."""
    source = ('def stats(s, lang):\n    return f"<b>{s.tokens_per_step:.2f}</b> {s.share:.0%}" + format(s.x, ".1f")\n'
              'def attr(p):\n    return f\'<li data-prob="{p:.6g}" style="width:{p:.1f}%">\'\n')
    copy = tmp_path / "playground" / "render.py"
    copy.parent.mkdir()
    copy.write_text(source, encoding="utf-8")
    found = f_string_decimals(copy, copy.parent)
    assert len(found) == 3 and all("render.py:2" in hit for hit in found), found
