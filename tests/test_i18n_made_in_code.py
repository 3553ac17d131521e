"""Text the code puts together reaches a Russian or Arabic page in that language (issue 45): a tune setting's label
(«tokens=5, conf≥0.4» was built in code, in English, inside Russian and Arabic verdicts) and the race's verdict and
lanes (the registry's id, "prompt_lookup", where the page's pickers name the method by its title).

English is unchanged: tune.json, the CLI and the report know a setting by its English label.
"""

from __future__ import annotations

import copy
import html
import re

import pytest

from playground import gallery, i18n, tune_report
from playground.app import compare_tab, tune_tab
from playground.methods import METHODS
from playground.tune.settings import REPLAYS, Setting, sweep_settings

OTHER_LANGUAGES = ("ru", "ar")
TUNABLE = [name for name, method in METHODS.items() if method.draft_replay]
# What the English labels are made of: none of it belongs on a Russian or Arabic page.
ENGLISH_LABEL = re.compile(r"tokens=|ngram=|γ=|conf≥|\b(?:" + "|".join(METHODS) + r")\(")


def _page_name(name: str, lang: str) -> str:
    """A parameter's name as the page's control labels it in `lang`, as it reads inside a phrase (lower case first)."""
    label = i18n.t(f"param.{name}.label", lang)
    return label[0].lower() + label[1:]


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_each_swept_parameter_is_named_as_the_pages_control_names_it(lang: str) -> None:
    for name in sorted({swept for replay in REPLAYS.values() for swept in replay.swept}):
        assert i18n.t(f"tune.label.{name}", lang, value="X").startswith(_page_name(name, lang) + " = "), (lang, name)


def test_the_english_labels_are_tune_jsons_as_before() -> None:
    lookup = Setting.of("prompt_lookup", {"prompt_lookup_num_tokens": 5, "max_matching_ngram_size": 2})
    drafter = Setting.of("speculative", {"num_assistant_tokens": 4, "num_assistant_tokens_schedule": "heuristic",
                                         "assistant_confidence_threshold": 0.4})
    assert (lookup.label, drafter.label) == ("prompt_lookup(tokens=5, ngram=2)", "speculative(γ=4, heuristic, conf≥0.4)")
    assert (lookup.shown("en"), drafter.shown("en")) == (lookup.label, drafter.label)


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_every_swept_setting_is_named_in_the_page_language(lang: str) -> None:
    decimal = i18n.separators(lang)[0]
    for method in TUNABLE:
        for setting in sweep_settings(method, 3, thresholds=(0.0, 0.45)):
            shown = setting.shown(lang)
            assert not ENGLISH_LABEL.search(shown), (lang, setting.label, shown)
            values = setting.values
            replay = METHODS[method].draft_replay
            assert replay is not None
            for name in REPLAYS[replay].swept:
                value = values[name]
                if name == "num_assistant_tokens_schedule" and value == "constant":
                    continue  # the default schedule is left unsaid, as in English
                if name == "assistant_confidence_threshold" and not value:
                    continue  # off: left unsaid
                written = i18n.number(value, lang, "g") if isinstance(value, float) else str(value)
                assert _page_name(name, lang) in shown and written in shown, (lang, setting.label, shown)
            assert "0.45" not in shown or decimal == "."  # a fraction with the language's decimal sign


def _tune_data() -> dict:
    """tune.json's shape, from real settings: the recommended, the default, one measured, one refused."""
    made = [Setting.of("prompt_lookup", {"prompt_lookup_num_tokens": n, "max_matching_ngram_size": 2}) for n in (3, 5, 10)]
    outcome = dict(steps=5, drafted=12, accepted=7, tokens_per_step=2.2, time_s=0.5, speedup=1.4,
                   by_position=[[5, 4], [4, 2], [2, 1]])
    rows = [dict(method=s.method, label=s.label, params=s.values, predicted={**outcome, "speedup": 1.0 + i / 10},
                 measured=None, refused=None) for i, s in enumerate(made)]
    rows[1]["measured"] = {**outcome, "speedup": 1.1}
    return dict(meta={"prompts": 2, "method": "prompt_lookup"}, rows=rows, recommended=made[2].label,
                default=made[1].label, fastest_predicted=made[2].label, predicted_gain=0.2, margin=0.05,
                losses=[dict(prompt="a", own_best=made[2].label, own_best_speedup=1.3, overall_best_speedup=1.3, loss=0.0),
                        dict(prompt="b", own_best=made[0].label, own_best_speedup=1.2, overall_best_speedup=1.1,
                             loss=0.08)])


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_the_tune_view_names_settings_in_the_page_language(lang: str) -> None:
    data = _tune_data()
    english = tune_tab.result_html(data)
    assert "prompt_lookup(tokens=10, ngram=2)" in english and tune_report.verdict(data).startswith(
        "Recommended: prompt_lookup(tokens=10, ngram=2), predicted 1.20× baseline")
    page = html.unescape(tune_tab.result_html(data, lang) + " ".join(
        trace.get("name") or "" for figure in tune_report.figures(data, lang).values()
        for trace in figure.to_dict()["data"]))
    leaks = sorted(set(m.group() for m in ENGLISH_LABEL.finditer(page)))
    assert not leaks, f"English setting labels on the {lang} Tune view: {leaks}"
    recommended = Setting.of("prompt_lookup", {"prompt_lookup_num_tokens": 10, "max_matching_ngram_size": 2})
    opening = i18n.catalogue(lang)["tune.verdict.recommended"].split("{label}")[0]
    assert opening + recommended.shown(lang) + ", " in page or opening + recommended.shown(lang) + "، " in page
    assert recommended.shown(lang) + " ★" in page  # the table's mark on the recommended row, and the losses' own best
    assert page.count(recommended.shown(lang)) >= 3


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_the_race_names_the_method_as_the_pages_pickers_do(lang: str) -> None:
    method, base = gallery.load("prompt-lookup-greedy"), gallery.load("baseline-greedy")
    for totals in ((9000.0, 3000.0), (3000.0, 9000.0)):  # the method first; baseline first
        *_, (_, last) = compare_tab.race_frames(base, method, totals_ms=totals, lang=lang)
        hit = re.search(r'<div class="pg-verdict">(.*?)</div>', last, re.S)
        assert hit is not None
        verdict = html.unescape(hit.group(1))
        heads = [html.unescape(h) for h in re.findall(r'<div class="pg-lane-head"><b>(.*?)</b>', last)]
        title, reference = (METHODS[name].localized(lang).title for name in ("prompt_lookup", "baseline"))
        assert title in verdict and "prompt_lookup" not in verdict, verdict
        assert heads == [reference, title], heads
        assert 'data-lane="baseline"' in last and 'data-lane="prompt_lookup"' in last  # the markup keeps the ids


def test_a_race_lane_is_named_by_its_methods_title() -> None:
    """A lane is labelled by its trace's method (`timeline.race_lane`), so the race names the method, as before."""
    lane = {"method": "prompt_lookup", "label": "prompt_lookup"}
    assert compare_tab.race_name(lane, "ru") == "Декодирование с поиском по промпту"
    assert compare_tab.race_name({"method": "nonesuch", "label": "x"}, "ru") == "x"


def _control_name(name: str, lang: str) -> str:
    """A parameter's control label in `lang` without its aside ("Ensemble weight w (target's share; 1 = off)"), as it
    reads inside a phrase (lower case first)."""
    param = next(p for m in METHODS.values() for p in m.params if p.name == name)
    label = param.label if lang == "en" else i18n.t(f"param.{name}.label", lang)
    label = re.split(r" w | w$| \(", label)[0]
    return label[0].lower() + label[1:]


@pytest.mark.parametrize("lang", ("en", *OTHER_LANGUAGES))
def test_compare_names_each_parameter_as_its_control_does(lang: str) -> None:
    for name in sorted({p.name for m in METHODS.values() for p in m.params}):
        assert i18n.t(f"compare.param.{name}", lang, value="X").startswith(_control_name(name, lang) + " = "), name


# Compare's setting as the page names it, and as main named it (the registry id and `generate()`'s arguments).
COMPARE_NAMED = {"en": "Prompt lookup decoding — tokens to copy = 4, max n-gram size = 3",
                 "ru": "Декодирование с поиском по промпту — токенов для копирования = 4, макс. размер n-граммы = 3",
                 "ar": "فك الترميز بالبحث في الاستعلام — رموز للنسخ = 4، أقصى حجم للن-جرام = 3"}


def _compared_with_a_changed_setting():  # -> bench.CompareResult
    """A comparison whose method runs with two parameters the page changed, built by the benchmark's own code."""
    from playground import bench
    from playground.bench.rows import Measurement

    values = {**{p.name: p.default for p in METHODS["prompt_lookup"].params},
              "prompt_lookup_num_tokens": 4, "max_matching_ngram_size": 3}
    label = compare_tab._spec_label("prompt_lookup", values)
    spec, base_spec = bench.make_spec("prompt_lookup", values, label=label), bench.make_spec("baseline")
    base, run = gallery.load("baseline-greedy"), gallery.load("prompt-lookup-greedy")
    prompt = bench.BenchPrompt("", "", "p")
    base_m, run_m = Measurement(base_spec, traces=[base]), Measurement(spec, traces=[run])
    rows = [bench.build_row(base_spec, prompt, base_m, base_m, None),
            bench.build_row(spec, prompt, run_m, base_m, None)]
    return bench.CompareResult(prompt=prompt, rows=rows, aggregates=bench.aggregate(rows),
                               traces={"baseline": base, label: run}, diagnoses={label: ["a diagnosis"]}, checks={},
                               specs={"baseline": base_spec, label: spec})


@pytest.mark.parametrize("lang", ("en", *OTHER_LANGUAGES))
def test_compare_names_a_setting_by_its_title_and_its_controls(lang: str) -> None:
    from playground import bench

    result = _compared_with_a_changed_setting()
    label = "prompt_lookup(prompt_lookup_num_tokens=4, max_matching_ngram_size=3)"
    assert [row.label for row in result.rows] == ["baseline", label]  # the identity: the CLI's, results.json's
    table = compare_tab.compare_table_html(result, [(bench.make_spec("mtp"), "why")], lang)
    cells = [html.unescape(c) for c in re.findall(r"<tr data-[^>]*><td>(.*?)</td>", table)]
    assert cells == [METHODS["baseline"].localized(lang).title, COMPARE_NAMED[lang],
                     METHODS["mtp"].localized(lang).title], cells
    assert f'data-label="{label}"' in table and 'data-label="mtp" data-skipped="true"' in table  # the markup keeps it
    verdict = html.unescape(compare_tab.compare_verdict(result, lang))
    assert COMPARE_NAMED[lang] in verdict and "prompt_lookup" not in verdict, verdict
    hit = re.search(r"<h4[^>]*>(.*?)</h4>", compare_tab.diagnoses_html(result, lang))
    assert hit is not None
    heading = hit.group(1)
    assert html.unescape(heading) == COMPARE_NAMED[lang]
    shown = re.sub(r"<[^>]*>", " ", table)
    assert "prompt_lookup" not in shown and "_" not in shown, shown


def test_a_setting_name_writes_fractions_and_code_values_as_the_language_does() -> None:
    from playground import bench

    values = {**{p.name: p.default for p in METHODS["speculative"].params},
              "num_assistant_tokens_schedule": "heuristic", "assistant_confidence_threshold": 0.45}
    spec = bench.make_spec("speculative", values, label=compare_tab._spec_label("speculative", values))
    assert spec.label == "speculative(num_assistant_tokens_schedule=heuristic, assistant_confidence_threshold=0.45)"
    assert compare_tab.setting_name(spec, "ru") == ("Спекулятивное декодирование (модель-ассистент) — расписание "
                                                    "длины черновика = heuristic, порог уверенности = 0,45")
    assert compare_tab.setting_name(spec, "ar").endswith("جدول طول المسودة = \u2068heuristic\u2069، عتبة الثقة = 0.45")
    defaults = {p.name: p.default for p in METHODS["speculative"].params}  # nothing changed: the title alone
    assert compare_tab.setting_name(bench.make_spec("speculative", defaults, label="speculative"), "ru") == (
        METHODS["speculative"].localized("ru").title)
    file_spec = bench.MethodSpec("nonesuch", {"x": 1}, label="nonesuch(x=1)")  # a method the registry lacks
    assert compare_tab.setting_name(file_spec, "ru") == "nonesuch(x=1)"


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_a_replayed_run_names_its_method_as_the_pages_pickers_do(lang: str) -> None:
    from playground.app.replay_tab import describe_trace

    line = describe_trace(gallery.load("prompt-lookup-greedy"), i18n.t("replay.last_run", lang), lang)
    assert METHODS["prompt_lookup"].localized(lang).title in line and "prompt_lookup" not in line, line
    unknown = copy.copy(gallery.load("prompt-lookup-greedy"))  # the gallery's own trace is shared: a copy
    unknown.method = "someone_elses_method"  # a file's method the registry does not know: as the file writes it
    assert "someone_elses_method" in describe_trace(unknown, "f", lang)


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_the_code_tabs_status_names_the_method_as_the_pages_pickers_do(lang: str, monkeypatch) -> None:
    from types import SimpleNamespace

    from playground import snippet
    from playground.app.code_tab import code_view
    from playground.snippet import request_from_trace

    # The script itself needs the model's tokenizer (a bundled load); this test is about the status line beside it.
    monkeypatch.setattr(snippet, "show_code", lambda request: SimpleNamespace(python="", cli=""))

    status = html.unescape(code_view(request_from_trace(gallery.load("prompt-lookup-greedy")), lang=lang)[-1])
    assert METHODS["prompt_lookup"].localized(lang).title in status and "prompt_lookup" not in status, status
