"""The translations: every key in every language, nothing left in English, fields and plurals intact;
and the renderers, charts, diagnosis and registry speak each language (English unchanged)."""

from __future__ import annotations

import json
import string
from typing import Any

import pytest

from playground import charts, i18n, methods, render, theory
from playground.examples import EXAMPLES, localized_examples
from playground.drafts import NO_DRAFT_REASONS
from playground.methods import METHODS
from playground.models import CATALOGUE
from playground.presets import GUIDE_PRESETS, STAND_INS
from playground.trace import Step, Summary, Trace

OTHER_LANGUAGES = [code for code in i18n.LANGUAGES if code != i18n.DEFAULT_LANGUAGE]


def registry_english() -> dict[str, str]:
    """Keys whose English lives in the method registry, the presets and the example set (not in en.json)."""
    out: dict[str, str] = methods.registry_english()  # the methods, their parameters, the ensemble's lecture
    for preset in GUIDE_PRESETS:  # presets.py keeps its own English, as the registry does
        out[f"preset.{preset.name}.title"] = preset.title
        out[f"preset.{preset.name}.section"] = preset.section
        if preset.note:
            out[f"preset.{preset.name}.note"] = preset.note
    for method, stand_in in STAND_INS.items():
        if stand_in.shows:
            out[f"preset.stand_in.{method}.shows"] = stand_in.shows
        out[f"preset.stand_in.{method}.misses"] = stand_in.misses
    for key, entry in CATALOGUE.items():  # the model catalogue keeps its labels' English, as the registry does
        out[f"model.{key}.label"] = entry.label
    for example in EXAMPLES:
        out[f"example.{example.question_id}.name"] = example.name
        out[f"example.{example.question_id}.text"] = example.text
        for lang, note in example.weak_in:  # where the bundled model cannot do the task in that language
            out[f"example.{example.question_id}.weak.{lang}"] = note
    return out


def english() -> dict[str, object]:
    return {**i18n.catalogue("en"), **registry_english()}


def fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}


def forms(value: object) -> list[str]:
    return list(value.values()) if isinstance(value, dict) else [value]  # type: ignore[list-item]


def test_files_are_valid_json_objects_of_strings():
    for code in i18n.LANGUAGES:
        data = json.loads((i18n.LOCALES_DIR / f"{code}.json").read_text(encoding="utf-8"))
        assert isinstance(data, dict)
        for key, value in data.items():
            if key.startswith("@"):
                continue
            assert all(isinstance(form, str) and form for form in forms(value)), (code, key)


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_no_key_missing_or_unknown(lang):
    reference, theirs = set(english()), set(i18n.catalogue(lang))
    assert not reference - theirs, f"{lang} lacks {sorted(reference - theirs)}"
    assert not theirs - reference, f"{lang} has keys English does not: {sorted(theirs - reference)}"


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_nothing_left_untranslated(lang):
    allowed = set(i18n.notes(lang).get("@same_as_english", []))
    reference = english()
    same = [key for key, value in i18n.catalogue(lang).items()
            if key not in allowed and any(form in forms(reference[key]) for form in forms(value))]
    assert not same, f"{lang} strings equal to English (translate them or allow-list them): {same}"
    assert all(key in reference for key in allowed)


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_fields_and_plural_forms_match_english(lang):
    reference = english()
    for key, value in i18n.catalogue(lang).items():
        ours = set().union(*(fields(form) for form in forms(reference[key])))
        if isinstance(value, dict):
            assert set(value) == set(i18n.plural_categories(lang)), (lang, key)
            for form in value.values():
                assert fields(form) <= ours | {"n"}, (lang, key, form)
        else:  # the registry's prose numbers are fields of a translation, typed in the registry's English
            assert fields(value) - set(methods.PROSE_NUMBERS) == ours, (lang, key, value)


def test_every_no_draft_reason_has_a_key():
    for code, text in NO_DRAFT_REASONS.items():
        assert i18n.t(f"no_draft.{code}") == text


def test_plural_rules():
    assert [i18n.plural_category("ru", n) for n in (1, 2, 5, 11, 21, 22, 25, 112)] == [
        "one", "few", "many", "many", "one", "few", "many", "many"]
    assert [i18n.plural_category("ar", n) for n in (0, 1, 2, 3, 10, 11, 99, 100, 103)] == [
        "zero", "one", "two", "few", "few", "many", "many", "other", "few"]
    assert i18n.tn("render.tokens", 1) == "1 token" and i18n.tn("render.tokens", 3) == "3 tokens"
    assert i18n.tn("render.tokens", 3, "ru") == "3 токена" and i18n.tn("render.tokens", 5, "ru") == "5 токенов"
    assert i18n.tn("render.tokens", 2, "ar") == "رمزان"


def test_language_choice():
    assert i18n.choose_language(None, "ru-RU,ru;q=0.9,en;q=0.8") == "ru"
    assert i18n.choose_language("", "fr-FR,fr;q=0.9,ar;q=0.5,en;q=0.3") == "ar"
    assert i18n.choose_language("en", "ar") == "en"  # the picker overrides the browser
    assert i18n.choose_language("ar-EG", None) == "ar"
    assert i18n.choose_language("xx", "de") == "en"  # nothing supported: English
    assert i18n.choose_language("<script>", "en;q=abc, ru;q=0") == "en"
    assert i18n.direction("ar") == "rtl" and i18n.direction("ru") == "ltr"
    assert i18n.t("render.stat.elapsed", "zz") == "elapsed"  # an unknown language falls back to English
    with pytest.raises(KeyError):
        i18n.t("no.such.key")


def test_ui_translations_cover_every_language():
    ui = i18n.ui_translations()
    assert set(ui) == set(i18n.LANGUAGES)
    assert all(set(ui[code]) == set(ui["en"]) for code in ui)


def sample_steps() -> list[Step]:
    return [
        Step(index=0, drafted=[1, 2, 3, 4], accepted=1, rejected=[2], discarded=[3, 4], emitted=[1, 9],
             drafted_text=["كتب", " الـ", "ولد", "x"], emitted_text=["كتب", " ال"], q=[.5, .4, .3, .2],
             p=[.9, .001, .1, .1], mixture=[.1, .2, .3, .4], draft_ms=1.0, verify_ms=9.0, other_ms=2.5),
        Step(index=1, drafted=[5, 6], accepted=2, rejected=[], emitted=[5, 6, 7], drafted_text=["a", "b"],
             emitted_text=["a", "b", "c"], verify_ms=5.0),
        Step(index=2, drafted=[], accepted=0, rejected=[], emitted=[8], emitted_text=["\n"], verify_ms=4.0,
             no_draft_reason=NO_DRAFT_REASONS["no_match"]),
        Step(index=3, drafted=[5, 6], accepted=1, rejected=[], emitted=[5], unverified=[6],
             drafted_text=["m", "n"], emitted_text=["m"], verify_ms=3.0),
    ]


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_renderers_speak_the_language(lang):
    steps = sample_steps()
    english_narration = [render.narrate_step(s, m) for s in steps for m in ("", "prompt_lookup", "mtp")]
    narration = [render.narrate_step(s, m, lang=lang) for s in steps for m in ("", "prompt_lookup", "mtp")]
    assert all(a != b for a, b in zip(english_narration, narration))
    assert i18n.t("no_draft.no_match", lang) in render.narrate_step(steps[2], "prompt_lookup", lang=lang)
    assert "Step" not in " ".join(narration) and "drafted" not in " ".join(narration)
    tokens = render.render_tokens(steps, lang=lang)
    assert 'dir="auto"' in tokens and i18n.t("render.describe.rejected", lang) in tokens
    legend = render.legend_html(lang)
    assert i18n.t("render.legend.bonus.label", lang) in legend and "hover a token" not in legend
    summary = Summary(new_tokens=6, steps=4, drafted=8, accepted=4, acceptance_rate=.5, tokens_per_step=1.5,
                      elapsed_s=1.0, tokens_per_s=6.0)
    assert i18n.t("render.stat.elapsed", lang) in render.stats_html(summary, (1.2, True, "ok"), lang=lang)
    detail = render.step_detail_html(steps[0], "speculative", 0, lang=lang)
    assert i18n.t("detail.mark.rejected", lang) in detail and "verify (one target forward)" not in detail
    race = render.race_html([dict(label="a", steps=steps, total_tokens=7, finish_s=1.0)], 1.0, 0.5, lang=lang)
    assert "recorded time" not in race
    for figure in (*charts.figures(steps, current=1, total_steps=4, lang=lang), *charts.figures([], lang=lang),
                   charts.theory_figure(.5, 1.5, 2.0, 1.8, lang=lang), charts.theory_figure(lang=lang)):
        text = json.dumps(figure.to_dict(), ensure_ascii=False)
        assert "verification step" not in text and "Drafted vs accepted" not in text
    page = render.render_document(Trace(method="speculative", target="m", prompt="p", steps=steps), lang=lang)
    assert f"dir='{i18n.direction(lang)}'" in page


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_diagnosis_registry_and_examples_speak_the_language(lang):
    steps = sample_steps()
    run = Trace(method="speculative", target="m", prompt="p", steps=steps, env={"dtype": "bfloat16"})
    run.summarize(1.0)
    base = Trace(method="baseline", target="m", prompt="p", env={"dtype": "float32"}, output_ids=[1, 2],
                 steps=[Step(index=i, drafted=[], accepted=0, rejected=[], emitted=[i], verify_ms=10.0 + i)
                        for i in range(4)])
    base.summarize(2.0)
    for sentences, english_sentences in ((theory.diagnose(run, base, lang), theory.diagnose(run, base)),
                                         (theory.diagnose(run, None, lang), theory.diagnose(run)),
                                         (theory.diagnose(base, None, lang), theory.diagnose(base))):
        assert sentences and len(sentences) == len(english_sentences)
        assert not set(sentences) & set(english_sentences)
    for name, method in METHODS.items():
        local = method.localized(lang)
        assert local.name == name and local.fixed_kwargs == method.fixed_kwargs
        assert local.title != method.title and local.summary != method.summary
        assert local.lecture.keys() == method.lecture.keys()
        assert [p.name for p in local.params] == [p.name for p in method.params]
        assert all(a.label != b.label and a.help != b.help for a, b in zip(local.params, method.params))
    assert METHODS["speculative"].localized("en") is METHODS["speculative"]
    examples = localized_examples(lang)
    assert [e.category for e in examples] == [e.category for e in EXAMPLES]
    assert all(a.text != b.text for a, b in zip(examples, EXAMPLES))


def test_guide_terms():
    assert i18n.t("method.speculative.title", "ru").startswith("Спекулятивное декодирование")
    assert i18n.t("method.prompt_lookup.title", "ru") == "Декодирование с поиском по промпту"
    assert i18n.t("method.early_exit.title", "ru").startswith("Самоспекулятивное декодирование")
    assert i18n.t("method.speculative.title", "ar").startswith("التفكيك التخميني")
    assert i18n.t("method.prompt_lookup.title", "ar") == "فك الترميز بالبحث في الاستعلام"


# --------------------------------------------------------------------------- Compare, Tune and error messages


def sample_compare(lang: str):  # -> bench.CompareResult
    """A comparison of the sample run against a baseline, built by the benchmark's own row and aggregate code."""
    from playground import bench
    from playground.bench.rows import Measurement

    steps = sample_steps()
    run = Trace(method="speculative", target="m", prompt="p", steps=steps, env={"dtype": "float32"},
                output_ids=[e for s in steps for e in s.emitted])
    run.summarize(1.0)
    base = Trace(method="baseline", target="m", prompt="p", env={"dtype": "float32"},
                 output_ids=[e for s in steps for e in s.emitted][:5] + [99, 98, 97, 96, 95],
                 steps=[Step(index=i, drafted=[], accepted=0, rejected=[], emitted=[i], verify_ms=10.0 + i)
                        for i in range(10)])
    base.summarize(2.0)
    prompt = bench.BenchPrompt("", "", "p")
    base_spec, spec = bench.make_spec("baseline"), bench.make_spec("speculative", {}, "m2")
    base_m = Measurement(base_spec, traces=[base])
    m = Measurement(spec, traces=[run])
    check = bench.check_lossless(run.output_ids, base.output_ids, dtype="float32")
    rows = [bench.build_row(base_spec, prompt, base_m, base_m, None), bench.build_row(spec, prompt, m, base_m, check)]
    return bench.CompareResult(prompt=prompt, rows=rows, aggregates=bench.aggregate(rows),
                               traces={"baseline": base, spec.label: run},
                               diagnoses={spec.label: theory.diagnose(run, base, lang)}, checks={spec.label: check},
                               specs={"baseline": base_spec, spec.label: spec})


ENGLISH_COMPARE = ("<th>speedup</th>", "Speedup over baseline", "ms per step", "drafted token position", "α (accepted / judged)", "refined prediction", "the reference", "differs at token",
                   "Same prompt, same run", "skipped:", "No method beat", "Fastest here", "Measured ", "baseline steps")
ENGLISH_TUNE = ("Recommended:", "tokens per target forward", "<th>setting</th>", "(default)", "Predicted speedup",
                "draft position", "own best", "Steps, drafted and accepted")


def sample_tune() -> dict:
    outcome = dict(steps=5, drafted=12, accepted=7, tokens_per_step=2.2, time_s=0.5, speedup=1.4,
                   by_position=[[5, 4], [4, 2], [2, 1]])
    rows = [dict(method="prompt_lookup", label=f"n={n}", params={"prompt_lookup_num_tokens": n,
                                                                 "max_matching_ngram_size": 2},
                 predicted={**outcome, "speedup": 1.0 + n / 10}, measured=None, refused=None) for n in (1, 2, 3)]
    rows[1]["measured"] = {**outcome, "speedup": 1.1}
    return dict(meta={"prompts": 2, "method": "prompt_lookup"}, rows=rows, recommended="n=3", default="n=2",
                losses=[dict(prompt="a", own_best="n=3", own_best_speedup=1.3, overall_best_speedup=1.3, loss=0.0),
                        dict(prompt="b", own_best="n=1", own_best_speedup=1.2, overall_best_speedup=1.1, loss=0.08)])


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_compare_views_speak_the_language(lang):
    from playground import bench
    from playground.app import compare_tab

    result = sample_compare(lang)
    def charts(lang: str = "en") -> str:
        return json.dumps([f.to_dict() for f in bench.compare_figures(result, lang).values()], ensure_ascii=False)

    english = " ".join((compare_tab.compare_table_html(result, [(bench.make_spec("mtp"), "why")]), compare_tab.compare_verdict(result),
                        compare_tab.diagnoses_html(result), charts()))
    assert all(phrase in english for phrase in ENGLISH_COMPARE[:9]), english
    table = compare_tab.compare_table_html(result, [(bench.make_spec("mtp"), "why")], lang)
    page = " ".join((table, compare_tab.compare_verdict(result, lang), compare_tab.diagnoses_html(result, lang),
                     *compare_tab.idle_views(lang), charts(lang)))
    leaks = [phrase for phrase in ENGLISH_COMPARE if phrase in page]
    assert not leaks, f"English in the {lang} Compare view: {leaks}"
    assert i18n.t("compare.head.speedup", lang) in table and i18n.t("compare.check.reference", lang) in table
    assert i18n.t("compare.skipped", lang, reason="why") in table
    assert 'data-label="mtp" data-skipped="true"' in table  # the markup tests and the race rely on stays


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_tune_views_speak_the_language(lang):
    from playground import tune_report
    from playground.app import tune_tab

    data = sample_tune()
    english = tune_tab.result_html(data) + json.dumps([f.to_dict() for f in tune_report.figures(data).values()])
    assert all(phrase in english for phrase in ENGLISH_TUNE), english
    page = (tune_tab.result_html(data, lang) + tune_tab.idle_status(lang)
            + json.dumps([f.to_dict() for f in tune_report.figures(data, lang).values()], ensure_ascii=False))
    leaks = [phrase for phrase in ENGLISH_TUNE if phrase in page]
    assert not leaks, f"English in the {lang} Tune view: {leaks}"
    shown = i18n.joined([i18n.t("tune.label.prompt_lookup_num_tokens", lang, value=3),
                         i18n.t("tune.label.max_matching_ngram_size", lang, value=2)], lang)
    assert shown + " ★" in page and "n=3" not in page and i18n.t("tune.head.measured_steps", lang) in page
    # The CLI's and the report's English is unchanged.
    assert tune_report.verdict(data).startswith("Recommended: n=3, predicted 1.30× baseline")
    assert "over 2 prompts" in tune_report.verdict(data)


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_our_refusals_reach_the_page_in_its_language(lang):
    from playground.app import generate_tab
    from playground.app.guard import refusal
    from playground.engine import RunError, RunRequest, user_message, validate_request
    from playground.errors import PlaygroundError
    from playground.methods import MethodError, get_method
    from playground.models import ModelLoadError
    from playground.models.sources import _resolve
    from playground.settings import get_settings

    param = METHODS["prompt_lookup"].param("prompt_lookup_num_tokens")
    refusals = []
    for call, english in ((lambda: param.coerce(10_000), "prompt_lookup_num_tokens must be between"),
                          (lambda: param.coerce("many"), "prompt_lookup_num_tokens must be an integer; got 'many'"),
                          (lambda: get_method("nope"), "unknown method 'nope'; choose one of baseline"),
                          (lambda: validate_request(RunRequest(prompt="  ")), "the prompt is empty"),
                          (lambda: _resolve("no-such-model", get_settings()), "'no-such-model' is not a catalogue key"),
                          (lambda: _resolve("bundled/nope", get_settings()), "unknown bundled model 'bundled/nope'")):
        with pytest.raises((MethodError, RunError, ModelLoadError)) as caught:
            call()
        exc = caught.value
        assert isinstance(exc, PlaygroundError) and str(exc).startswith(english)  # the CLI's English as before
        local = user_message(exc, lang=lang)
        assert local != str(exc) and local == refusal(exc, lang) == exc.localized(lang)
        assert user_message(exc) == str(exc)
        refusals.append(local)
    assert "10000" in refusals[0] and "'many'" in refusals[1] and "'nope'" in refusals[2]  # the value, quoted
    assert "'no-such-model'" in refusals[4]
    # A library's own failure is quoted, untranslated, inside our translated sentence.
    from playground import models
    failed = models.sources._load_error("x/y", OSError("Unrecognized model in x/y\nmore lines"),
                                        models.sources._Source("local"), get_settings())
    assert str(failed) == "could not load x/y: Unrecognized model in x/y"
    assert failed.localized(lang) == i18n.t("error.load.failed", lang, spec="x/y", reason="Unrecognized model in x/y")
    assert failed.localized(lang) != str(failed)
    # Anything else: the generic line in the visitor's language, naming what failed in it.
    assert user_message(KeyError("x"), i18n.t("error.what.run", lang), lang) == i18n.t(
        "error.internal", lang, failed=i18n.t("error.what.run", lang))
    assert refusal(KeyError("x"), lang) == i18n.t("error.not_from_the_page", lang)
    # The brief status a click shows before its run starts.
    queued = generate_tab.CLICKED.read(generate_tab.on_generate_click(
        "prompt_lookup", {name: p.default for name, p in generate_tab.param_specs().items()}, lang=lang))["status"]
    assert i18n.t("status.queued", lang) in queued and "Queued" not in queued


def test_every_error_key_in_the_code_is_in_the_catalogue():
    import pathlib
    import re

    root = pathlib.Path(i18n.__file__).parent
    keys = {key for path in root.rglob("*.py")
            for key in re.findall(r'\.keyed\(\s*"([\w.]+)"', path.read_text(encoding="utf-8"))}
    keys |= {"error.param.integer", "error.param.number"}  # chosen by the parameter's kind
    assert len(keys) > 20 and not keys - set(i18n.catalogue("en"))


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_loading_lines_reach_the_page_in_its_language(lang, monkeypatch):
    """A model's loading and converting lines are `i18n.Message`s: the CLI prints their English as before, the
    page's status shows them in the visitor's language (a nested stage translated too, the figures kept)."""
    import html
    import threading

    from playground import models
    from playground.app import preload
    from playground.i18n import Message, localize

    lines: list[str] = []
    progress = models.gguf_convert._ConversionProgress("Tiny", lines.append)
    progress("parse", Message.keyed("load.stage.parse"))
    progress.started -= 30.0  # 30 s in, half way through the weights: a time left is shown
    progress("weights", Message.keyed("load.stage.weights", done=3, n=12), 0.5)
    stages = models.gguf_convert._ConversionProgress.STAGES
    half = stages['weights'] + (stages['tokenizer'] - stages['weights']) * 0.5  # half way through
    share = f"{half:.0%}"
    assert lines[0] == "Converting Tiny to safetensors (one time only): reading the GGUF metadata: 0% done"
    assert lines[1].startswith("Converting Tiny to safetensors (one time only): dequantising weights (3 of "
                               f"12 tensors): {share} done, about ") and lines[1].endswith(" s left")
    first, second = localize(lines[0], lang), localize(lines[1], lang)
    assert first == i18n.t("load.converting", lang, label="Tiny", what=i18n.t("load.stage.parse", lang),
                           done=i18n.Number(0.0, ".0%"))
    assert "Converting" not in first and "reading" not in first and i18n.number(0.0, lang, ".0%") in first
    assert "dequantising" not in second and "3" in second and "12" in second
    assert i18n.number(half, lang, ".0%") in second  # the language's own percent (ru "44 %"), from the formatter
    assert i18n.t("load.stage.weights", lang, done=3, n=12) in second
    assert localize("plain text", lang) == "plain text"  # a line that carries no key stays as written

    copy = Message.keyed("load.dtype_copy", dtype="bfloat16")
    assert copy == "Keeping a bfloat16 copy of the weights (one time only)…" and "bfloat16" in copy.localized(lang)
    assert copy.localized(lang) != copy and copy.localized("en") == copy
    loading = Message.keyed("load.loading", spec="bundled/gemma-3-270m-it", dtype="float32")
    assert loading == "Loading bundled/gemma-3-270m-it (float32)…"
    assert loading.localized(lang) == {"ru": "Загружаю bundled/gemma-3-270m-it (float32)…",
                                       "ar": "تحميل bundled/gemma-3-270m-it (float32)…"}[lang]

    # The start-up load's status box, in the page's language (and English for an English page).
    state = preload.Preload()
    state.message, state.thread = lines[1], threading.current_thread()  # started, not done
    monkeypatch.setattr(preload, "PRELOAD", state)
    assert html.escape(second, quote=False) in preload.initial_status(lang)
    assert "dequantising weights (3 of 12 tensors)" in preload.initial_status("en")
    # A failed preload: our refusal inside the line is translated with it.
    from playground.models import ModelLoadError
    refused = ModelLoadError.keyed("error.model.no_weights", spec="/m")
    failed = Message.keyed("load.preload.failed", target="/m", error=refused)
    assert failed == "Preloading /m failed: /m has no model weights (*.safetensors)"
    assert failed.localized(lang) == i18n.t("load.preload.failed", lang, target="/m", error=refused.localized(lang))
    assert "has no model weights" not in failed.localized(lang)


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_rarer_refusals_reach_the_page_in_its_language(lang):
    """The API's field checks, the engine's sampling/seed/precision checks and the model-path refusals: English
    unchanged for the CLI and the API, the page's language on the page, the visitor's value quoted as it was."""
    import dataclasses

    from playground.app.run_request import build_request, parse_params
    from playground.engine import RunRequest, user_message, validate_request
    from playground.models.sources import _resolve
    from playground.settings import get_settings

    def refused(call) -> Any:  # a ValueError of ours: its key and fields are read
        with pytest.raises(ValueError) as caught:
            call()
        return caught.value

    def ask(**values):
        args = dict(prompt="hi", target=None, assistant=None, method=None, params=None, max_new_tokens=None,
                    sample=None, temperature=None, top_p=None, top_k=None, seed=None, chat=None, dtype=None)
        return build_request(**{**args, **values})

    request = RunRequest(prompt="hi")
    cases = [
        (lambda: ask(seed="1.5"), "seed must be a whole number; got '1.5'", "'1.5'"),
        (lambda: ask(chat="maybe"), "chat must be auto, on or off; got 'maybe'", "'maybe'"),
        (lambda: ask(sample="perhaps"), "sample must be true or false; got 'perhaps'", "'perhaps'"),
        (lambda: ask(prompt="x" * 10**6), "the prompt is 1000000 characters long; at most", i18n.count(10**6, lang)),
        (lambda: parse_params("{"), 'params must be a JSON object, e.g. {"prompt_lookup_num_tokens": 5}: '
                                    "Expecting property name enclosed in double quotes",
         "Expecting property name enclosed in double quotes"),  # json's own reason, quoted as it is
        (lambda: validate_request(dataclasses.replace(request, seed=2**70)),
         f"seed must be a whole number from 0 to 2^64 − 1 (or down to −2^63); got {2**70}", str(2**70)),
        (lambda: validate_request(dataclasses.replace(request, sample=True, temperature=0.0)),
         "temperature must be above 0 when sampling (use greedy for deterministic output); got 0.0", "0.0"),
        (lambda: validate_request(dataclasses.replace(request, sample=True, top_p=1.5)),
         "top-p must be in (0, 1]; got 1.5", "1.5"),
        (lambda: _resolve("a/b c", get_settings()),
         "invalid Hub model id 'a/b c': expected owner/name using letters, digits, '.', '_' or '-'", "'a/b c'"),
    ]
    for call, english, quoted in cases:
        exc = refused(call)
        assert str(exc).startswith(english), str(exc)  # the CLI's and the API's English as before
        assert user_message(exc) == str(exc)
        local = user_message(exc, lang=lang)
        assert local != str(exc) and quoted in local, (english, local)
        assert local == i18n.t(exc.key, lang, **{k: i18n.localize(v, lang) for k, v in exc.fields.items()})
    phrase = user_message(refused(lambda: ask(prompt="x" * 10**6)), lang=lang)
    assert phrase.startswith(i18n.t("error.request.the_prompt", lang)) or i18n.t("error.request.the_prompt",
                                                                                  lang) in phrase
    assert "the prompt" not in phrase
    assert user_message(refused(lambda: validate_request(dataclasses.replace(request, seed=-2**64))), lang=lang) == {
        # the control's name («Зерно (seed)»), and negative seeds allowed down to −2^63, as torch.manual_seed takes them
        "ru": f"зерно (seed) должно быть целым числом от 0 до 2^64 − 1 (допустимы и отрицательные, не меньше −2^63); "
              f"получено {-2**64}",
        "ar": f"يجب أن تكون البذرة (seed) عددًا صحيحًا من 0 إلى \u20682^64 − 1\u2069 (أو حتى \u2068−2^63\u2069)؛ وصل {-2**64}"}[lang]


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_trace_format_reasons_reach_the_page_in_its_language(lang):
    """A replay upload that is not a trace: the reason in the page's language, the CLI's English unchanged."""
    from playground.trace import TraceFormatError

    with pytest.raises(TraceFormatError) as caught:
        Trace.from_dict({"method": "x", "steps": [], "schema_version": 99})
    assert str(caught.value).startswith("trace schema_version 99 is not supported (expected one of ")
    assert caught.value.localized(lang) != str(caught.value) and "99" in caught.value.localized(lang)
    good = Trace(method="baseline", target="m", prompt="p", steps=[]).to_dict()
    with pytest.raises(TraceFormatError) as caught:
        Trace.from_dict({**good, "output_ids": "abc"})
    assert str(caught.value) == "malformed trace: trace.output_ids must be a list; got 'abc'"
    local = caught.value.localized(lang)
    assert local == i18n.t("error.trace.must_be", lang, where="trace.output_ids",
                           expected=i18n.t("error.trace.a_list", lang), got="'abc'")
    assert "must be" not in local and "a list" not in local


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_an_overflowing_run_says_why_in_the_page_language(lang):
    import torch

    from playground.engine import RunError, non_finite_message

    reason = non_finite_message(torch.float16, 3)
    error = RunError.keyed(reason.key, **reason.fields)  # as the run raises it
    assert str(error) == reason and "float16 overflows for this model; use bfloat16 or float32" in str(error)
    local = error.localized(lang)
    assert local == reason.localized(lang) and "overflows" not in local and "NaN" in local and "float16" in local
    assert i18n.t("error.non_finite.float16", lang, dtype="float16") in local


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_ensemble_refusals_reach_the_page_in_its_language(lang):
    """Ensemble verification refused (a method without the parameter; a run without draft logits): English as the
    CLI always printed it, the page's sentence with the method's title in the guide's terms."""
    from playground.engine import user_message
    from playground.methods import MethodError, ModelFacts, get_method

    with pytest.raises(MethodError) as no_parameter:
        get_method("prompt_lookup").resolve_params({"assistant_ensemble_weight": 0.5})
    assert str(no_parameter.value) == (
        "prompt_lookup has no parameter 'assistant_ensemble_weight': ensemble verification mixes the draft's "
        "probabilities into the target's, and prompt lookup decoding produces no draft probabilities")
    assert user_message(no_parameter.value) == str(no_parameter.value)
    assert user_message(no_parameter.value, lang=lang) == {
        "ru": "у prompt_lookup нет параметра 'assistant_ensemble_weight': ансамблевая верификация подмешивает "
              "вероятности черновика к вероятностям целевой модели, а метод «Декодирование с поиском по промпту» "
              "не даёт вероятностей черновика",
        "ar": "ليس لدى prompt_lookup المعامل 'assistant_ensemble_weight': التحقق عبر التجميع يمزج احتمالات المسودة "
              "باحتمالات النموذج الهدف، والطريقة «فك الترميز بالبحث في الاستعلام» لا تُنتج احتمالات للمسودة"}[lang]

    universal = get_method("universal")
    facts = ModelFacts(target_class="A", target_layers=4, assistant_class="B", same_vocabulary=False,
                       target_vocab_size=10, assistant_vocab_size=12)
    with pytest.raises(MethodError) as no_logits:
        universal.validate(facts, universal.resolve_params({"assistant_ensemble_weight": 0.5}))
    assert str(no_logits.value) == (
        "ensemble verification (assistant_ensemble_weight) needs draft logits, and greedy universal assisted decoding has "
        "none; set it to 1 (off) or turn on sampling")
    assert user_message(no_logits.value, lang=lang) == {
        "ru": "ансамблевой верификации (assistant_ensemble_weight) нужны логиты черновика, а у метода «жадное "
              "универсальное ассистированное декодирование» их нет; установите 1 (выключено) или включите "
              "сэмплирование",
        "ar": "يحتاج التحقق عبر التجميع (assistant_ensemble_weight) إلى لوجيتات المسودة، وليس لدى «فك الترميز "
              "المُساعَد الشامل الجشع» أيّ منها؛ اضبطه على 1 (معطّل) أو فعّل أخذ العيّنات"}[lang]


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_tune_refusals_and_reasons_reach_the_page_in_its_language(lang):
    """Tune's refusals inside its run and its no-prediction reasons: English as the CLI printed them, the page's
    language in the Tune tab's status and table."""
    from playground import tune, tune_report
    from playground.app import tune_tab
    from playground.engine import RunRequest, user_message

    def refused(call) -> tune.TuneError:
        with pytest.raises(tune.TuneError) as caught:
            call()
        return caught.value

    greedy = refused(lambda: tune.tune(tune.TuneRequest(run=RunRequest(prompt="hi", sample=True)), ["hi"]))
    assert str(greedy) == "tune replays greedy decoding only: turn sampling off"
    assert user_message(greedy, lang=lang) == {
        "ru": "подбор воспроизводит только жадный поиск: выключите сэмплирование",
        "ar": "لا يحاكي الضبط إلا البحث الجشع: أوقف أخذ العيّنات"}[lang]
    assert user_message(greedy, lang=lang) in tune_tab._failed(greedy, lang)[0]
    universal = refused(lambda: tune.tune(tune.TuneRequest(run=RunRequest(prompt="hi", method="universal")), ["hi"]))
    assert str(universal) == METHODS["universal"].replay_obstacle
    assert user_message(universal, lang=lang) == i18n.t("method.universal.replay_obstacle", lang) != str(universal)
    no_prompts = refused(lambda: tune.tune(tune.TuneRequest(run=RunRequest(prompt="hi")), []))
    assert (str(no_prompts), user_message(no_prompts, lang=lang)) == (
        "no prompts to tune on", {"ru": "нет промптов для подбора", "ar": "لا موجّهات للضبط عليها"}[lang])
    at_least = refused(lambda: tune.sweep_settings("prompt_lookup", 0))
    assert str(at_least) == "--max-draft must be at least 1; got 0"
    assert user_message(at_least, lang=lang) == {"ru": "--max-draft должен быть не меньше 1; получено 0",
                                                 "ar": "يجب أن يكون \u2068--max-draft\u2069 1 على الأقل؛ وصل 0"}[lang]

    reason = tune.settings._refusal(tune.Setting.of("speculative", {"assistant_ensemble_weight": 0.5}))
    assert reason == ("ensemble verification is lossy: its output is not the target's greedy output the replay "
                      "starts from")
    data = sample_tune()
    data["rows"][0].update(predicted=None, refused=reason)
    assert tune_report.table_rows(data)[0][1] == f"no prediction: {reason}"  # the CLI's and the report's English
    assert tune_report.table_rows(data, lang=lang)[0][1] == {
        "ru": "нет прогноза: ансамблевая верификация идёт с потерями: её вывод не совпадает с жадным выводом целевой "
              "модели, от которого отталкивается воспроизведение",
        "ar": "لا تنبؤ: التحقق عبر التجميع مع فقد: ناتجه ليس الناتج الجشع للنموذج الهدف الذي تنطلق منه "
              "المحاكاة"}[lang]
    assert tune.not_tunable_reason("nope") == "tune cannot predict nope"
    assert i18n.localize(tune.not_tunable_reason("nope"), lang) == {
        "ru": "подбор не умеет прогнозировать nope", "ar": "لا يستطيع الضبط التنبؤ بـnope"}[lang]


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_code_tab_refusals_reach_the_page_in_its_language(lang):
    """The Code tab's refusals (an argument no script can hold, an adaptation no script repeats): English for the
    CLI, the page's language (the tab shows `user_message(exc, lang=...)` in its "cannot show the code" line)."""
    import types

    import torch

    from playground import snippet
    from playground.engine import user_message

    def refused(call) -> snippet.SnippetError:
        with pytest.raises(snippet.SnippetError) as caught:
            call()
        return caught.value

    cases = [
        (refused(lambda: snippet._expr("bias", torch.zeros(1), [], set())),
         "cannot write the tensor argument 'bias' into a script",
         {"ru": "тензорный аргумент 'bias' нельзя записать в скрипт",
          "ar": "لا يمكن كتابة وسيط الموتر 'bias' في سكربت"}),
        (refused(lambda: snippet._expr("streamer", object(), [], set())),
         "cannot write the object argument 'streamer' into a script",
         {"ru": "аргумент 'streamer' типа object нельзя записать в скрипт",
          "ar": "لا يمكن كتابة الوسيط 'streamer' من النوع object في سكربت"}),
        (refused(lambda: snippet._adaptation_lines(types.SimpleNamespace(assistant_adaptations=["retuned"]))),  # type: ignore[arg-type]
         "the run adapts its assistant in a way no script here can repeat (retuned): plain generate() would not "
         "reproduce it",
         {"ru": "запуск настраивает ассистента так, как ни один скрипт здесь повторить не может (retuned): обычный "
                "generate() этого не воспроизведёт",
          "ar": "يكيّف التشغيل مساعده بطريقة لا يستطيع أي سكربت هنا تكرارها (retuned): لن يعيد \u2068generate()\u2069 العادي "
                "إنتاجها"}),
    ]
    for exc, english, local in cases:
        assert str(exc) == english and user_message(exc) == english
        assert user_message(exc, lang=lang) == local[lang]


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_a_link_with_an_unknown_dtype_says_why_in_the_page_language(lang):
    """A shared link naming a precision this host lacks gets the keyed dtype refusal (not an internal error)."""
    import html

    from playground.app import links
    from playground.app.run_request import DTYPES

    def status(lang: str) -> str:
        return html.unescape(links.restored([]).read(links.restore({"prompt": "hi", "dtype": "int3"}, [], lang))["link_status"])

    known = ", ".join(DTYPES)
    assert f"This link's settings were not applied: unknown dtype 'int3': use {known}<" in status("en")
    assert {"ru": f"Настройки из ссылки не применены: неизвестная точность 'int3': используйте {known}<",
            "ar": f"لم تُطبَّق إعدادات هذا الرابط: دقة غير معروفة 'int3': استخدم {known}<"}[lang] in status(lang)


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_trace_consistency_checks_reach_the_page_in_its_language(lang):
    """A replayed trace whose steps contradict each other: "step i: …" in English for the CLI, translated on the
    replay tab (the step number and the field's name kept)."""
    import dataclasses

    from playground.engine import user_message
    from playground.trace import TraceFormatError, check_invariants

    steps = sample_steps()

    def refused(*changed: Step, output_ids: list[int] | None = None) -> TraceFormatError:
        trace = Trace(method="speculative", target="m", prompt="p", steps=list(changed),
                      output_ids=output_ids if output_ids is not None else [t for s in changed for t in s.emitted])
        with pytest.raises(TraceFormatError) as caught:
            check_invariants(trace)
        return caught.value

    cases = [
        (refused(dataclasses.replace(steps[0], emitted=[7, 9])),
         "step 0: emitted[:accepted] differs from drafted[:accepted]",
         {"ru": "шаг 0: emitted[:accepted] отличается от drafted[:accepted]",
          "ar": "الخطوة 0: emitted[:accepted] يختلف عن drafted[:accepted]"}),
        (refused(steps[1], dataclasses.replace(steps[0], q=[0.5])),
         "step 1: q must hold one probability per drafted token",
         {"ru": "шаг 1: в q должно быть по одной вероятности на каждый токен черновика",
          "ar": "الخطوة 1: يجب أن يحوي q احتمالًا واحدًا لكل رمز في المسودة"}),
        (refused(dataclasses.replace(steps[0], verify_ms=-1.0)), "step 0: verify_ms must be a time in ms (>= 0)",
         {"ru": "шаг 0: verify_ms должно быть временем в мс (>= 0)",
          "ar": "الخطوة 0: يجب أن يكون verify_ms زمنًا بالملّي ثانية (>= 0)"}),
        (refused(steps[1], output_ids=[5]), "emitted tokens of all steps do not concatenate to output_ids",
         {"ru": "выданные токены всех шагов вместе не совпадают с output_ids",
          "ar": "الرموز المُخرَجة في كل الخطوات لا تساوي output_ids حين توصل معًا"}),
    ]
    for exc, english, local in cases:
        assert str(exc) == english and user_message(exc) == english
        assert user_message(exc, lang=lang) == local[lang]


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_lossy_reasons_reach_the_page_in_its_language(lang):
    """Why a run is lossy (ensemble verification; the registry's sampling bias): English for the CLI and the
    benchmark, translated in the Generate tab's status."""
    method = METHODS["speculative"]
    reason = method.lossy_reason({"assistant_ensemble_weight": 0.7})
    assert reason == ("ensemble verification (weight 0.7): drafts are checked against 0.7·target + 0.3·draft, so "
                      "the output follows that mixture, not the target alone")
    assert i18n.localize(reason, lang) == {
        # v = w·p + (1 − w)·q, Transformers' `_speculative_sampling`: the weight is the target's share
        "ru": "ансамблевая верификация (вес 0,7): черновики проверяются по смеси 0,7·p + 0,3·q (p — распределение "
              "целевой модели, q — черновика), поэтому вывод следует этой смеси, а не одной целевой модели",
        "ar": "التحقق عبر التجميع (الوزن 0.7): يُتحقَّق من المسودات مقابل 0.7·الهدف + 0.3·المسودة، فيتبع الناتج هذا "
              "المزيج لا النموذج الهدف وحده"}[lang]
    drafter = METHODS["mtp_drafter"]
    bias = drafter.lossy_reason({}, sample=True)
    assert bias == drafter.sampling_bias
    assert i18n.localize(bias, lang) == i18n.t("method.mtp_drafter.sampling_bias", lang) != bias


@pytest.mark.parametrize("lang, expected", [
    ("ru", "bfloat16: по замеру на этом процессоре в 1,9 раза быстрее float32 (19,0 против 10,0 токена/с)"),
    ("ar", "bfloat16: أسرع من float32 بمقدار ⁨1.9×⁩ قياسًا على هذا المعالج (⁨19.0⁩ مقابل ⁨10.0⁩ رمز/ث)")])
def test_the_precision_sentence_reaches_the_page_in_its_language(lang: str, expected: str) -> None:
    from playground.precision import SpeedMeasurement, precision_for

    record = precision_for("auto", "cpu", ("AVX512-BF16",), measured=SpeedMeasurement(10.0, 19.0, 16, "m"))
    english = "bfloat16: measured 1.9× faster than float32 on this CPU (19.0 vs 10.0 tokens/s)"
    assert str(record.reason) == english  # the CLI, the trace file and the logs
    assert i18n.localize(record.reason, lang) == expected
    explicit = precision_for("float32", "cpu")
    assert str(explicit.reason) == "float32: chosen explicitly"
    assert i18n.localize(explicit.reason, lang) == i18n.t("precision.explicit", lang, choice="float32") != str(explicit.reason)
    assert json.loads(json.dumps({"precision": record.reason})) == {"precision": english}


@pytest.mark.parametrize("lang", OTHER_LANGUAGES)
def test_a_message_from_another_process_is_still_translated(lang):
    """A conversion in another process publishes its progress as JSON (`Message.to_dict`); the process that waits
    for it shows the same English to the CLI and the same sentence, translated, to the page."""
    import json

    from playground.i18n import Message

    stage = Message.keyed("load.stage.weights", done=3, n=12)
    line = Message.keyed("load.converting_left", label="Tiny", what=stage, done=0.44, left=12.5)
    title = Message.registry("method.prompt_lookup.title", "prompt lookup")
    for message in (line, title, Message.keyed("load.waiting_other", label="Tiny")):
        again = Message.from_dict(json.loads(json.dumps(message.to_dict())))
        assert isinstance(again, Message) and again == message and again.key == message.key
        assert again.localized(lang) == message.localized(lang) != str(message)
    assert Message.from_dict(json.loads(json.dumps(line.to_dict()))).fields["what"].key == "load.stage.weights"
