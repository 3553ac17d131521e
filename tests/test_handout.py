"""The printable handout of a run (`playground.handout`): the run's own numbers in the rule, one annotated step, the
generate() call, in every language with nothing English left on a Russian or Arabic handout; the CLI writes it."""

from __future__ import annotations

import html
import re

import pytest
from test_draws import _one_step_trace, _step
from test_i18n_no_english import english_words, without_code

from playground import handout, i18n, microscope
from playground.cli import main as cli_main
from playground.engine import LiveRun, RunRequest, prepare
from playground.trace import Step, Trace

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _visible(page: str) -> str:
    """The page's text outside code, styles and attributes."""
    return without_code(re.sub(r"<(style|pre)\b.*?</\1>", " ", page, flags=re.S))


def _shown(text: str, page: str) -> bool:
    """Whether `text` is on the page as its HTML writes it."""
    return html.escape(text) in page


def _digit_trace() -> Trace:
    """A greedy two-step trace whose token texts are digits (no words of any language), so every word on the
    handout is the handout's own."""
    first = Step(index=0, drafted=[5, 6, 8], accepted=1, rejected=[6], discarded=[8], emitted=[5, 7],
                 drafted_text=["1", "2", "4"], emitted_text=["1", "3"], q=[0.6, 0.5, 0.4], p=[0.7, 0.1, 0.2])
    second = Step(index=1, drafted=[9], accepted=1, rejected=[], emitted=[9, 10], drafted_text=["5"],
                  emitted_text=["5", "6"], q=[0.9], p=[0.8])
    trace = Trace(method="speculative", target="bundled/gemma-3-270m", assistant="bundled/gemma-3-270m",
                  params={"num_assistant_tokens": 3}, prompt="0", chat=False, lossy=False,
                  env={"dtype": "float32", "transformers": "5.24.0"}, output_ids=[5, 7, 9, 10], output_text="1356",
                  steps=[first, second], decoding={"sample": False, "max_new_tokens": 4})
    trace.summary = trace.summarize(0.5)
    return trace


@pytest.mark.parametrize("lang", list(i18n.LANGUAGES))
def test_the_handout_holds_the_runs_numbers_in_its_language(lang: str) -> None:
    trace = _digit_trace()
    page = handout.handout_html(trace, lang)
    assert page.startswith("<!doctype html>") and f'lang="{lang}" dir="{i18n.direction(lang)}"' in page
    assert "@media print" in page and "<script" not in page and "http" not in page.split("</style>")[1]
    assert handout.run_numbers(trace) == {"kept": 2, "judged": 3, "alpha": 2 / 3, "new": 4, "steps": 2, "tau": 2.0}
    alpha = i18n.t("handout.numbers.alpha", lang, kept=2, judged=3, alpha=microscope.number(2 / 3, lang))
    tau = i18n.t("handout.numbers.tau", lang, new=4, steps=2, tau=i18n.number(2.0, lang, ".2f"))
    assert _shown(alpha, page) and _shown(tau, page)
    assert microscope.number(2 / 3, lang) == i18n.number(2 / 3, lang, ".3f")
    assert _shown(i18n.t("handout.rule.greedy", lang), page)
    # The annotated step: the first with a refusal, its positions in the microscope's words.
    assert 'data-testid="pg-handout-step" data-step="0"' in page
    refused = microscope.explain(trace.steps[0], 1, trace.decoding).messages[0].localized(lang)
    assert _shown(i18n.t("handout.step.why.refusal", lang), page) and _shown(refused, page)
    # Every fate named in words, and the call that made the run.
    for status in ("accepted", "rejected", "discarded", "correction", "bonus", "target", "unverified"):
        assert _shown(i18n.t(f"render.legend.{status}.meaning", lang), page)
    assert "model.generate(**inputs, assistant_model=assistant_model, max_new_tokens=4, do_sample=False)" in page
    assert "assistant_model.generation_config.num_assistant_tokens = 3" in page
    if lang != "en":
        assert not english_words(_visible(page)), english_words(_visible(page))


@pytest.mark.parametrize("lang", list(i18n.LANGUAGES))
def test_a_sampling_handout_states_the_draw_rule_and_the_recorded_r(lang: str) -> None:
    trace = _one_step_trace(_step([0.9, 0.3]))
    trace.target = trace.assistant = "bundled/gemma-3-270m"
    trace.summary = trace.summarize(0.1)
    page = handout.handout_html(trace, lang)
    assert handout.rule_key(trace) == "handout.rule.sampling"
    assert _shown(i18n.t("handout.rule.sampling", lang), page)
    assert _shown(microscope.explain(trace.steps[0], 1, trace.decoding).messages[1].localized(lang), page)  # r > a
    assert "torch.manual_seed(0)\nout = model.generate(" in html.unescape(page) and "do_sample=True" in page
    if lang != "en":
        assert not english_words(_visible(page)), english_words(_visible(page))


def test_a_plain_run_and_an_empty_trace() -> None:
    trace = _digit_trace()
    trace.method, trace.assistant, trace.params = "baseline", None, {}
    for step in trace.steps:
        step.drafted, step.accepted, step.rejected, step.discarded = [], 0, [], []
        step.emitted, step.emitted_text = step.emitted[:1], step.emitted_text[:1]
        step.q = step.p = None
    assert handout.rule_key(trace) == handout.NO_DRAFT_RULE
    annotated = handout.annotated_step(trace)
    assert annotated is not None
    assert annotated[1] == "handout.step.why.first"
    assert handout.generate_call(trace) == "out = model.generate(**inputs, max_new_tokens=4, do_sample=False)"
    trace.steps = []
    assert handout.annotated_step(trace) is None


def test_the_cli_writes_the_handout_of_a_real_run(tmp_path, store, tiny_models, capsys) -> None:
    """A real sampling run of the tiny models, saved; `python -m playground handout` writes its page with the
    run's figures, and with --script the snippet's script."""
    trace = LiveRun(prepare(RunRequest(
        prompt="The capital of France is", target=tiny_models["target"], assistant=tiny_models["noisy"],
        method="speculative", params={"num_assistant_tokens": 4, "assistant_confidence_threshold": 0.0},
        max_new_tokens=16, sample=True, temperature=1.0, top_k=0, seed=1, dtype="float32", chat=False),
        store)).run()
    path = tmp_path / "run.json"
    trace.save(path)
    assert cli_main(["handout", str(path), "--lang", "ru"]) == 0
    out = tmp_path / "run-handout-ru.html"
    assert capsys.readouterr().out.strip() == str(out)
    page = out.read_text(encoding="utf-8")
    n = handout.run_numbers(trace)
    assert _shown(i18n.t("handout.numbers.alpha", "ru", kept=n["kept"], judged=n["judged"],
                         alpha=microscope.number(n["alpha"], "ru")), page)
    assert "do_sample=True" in page and "temperature=1.0" in page
    assert cli_main(["handout", str(path), "--script", "--out", str(tmp_path / "h.html")]) == 0
    with_script = (tmp_path / "h.html").read_text(encoding="utf-8")
    assert "Reproduces a playground run with Transformers alone." in with_script
    assert cli_main(["handout", str(tmp_path / "missing.json")]) == 2


def test_the_page_offers_the_finished_runs_handout() -> None:
    """The page's handler (its own event after a run): the handout written for the session, offered for download;
    hidden while there is no run."""
    from playground.app import handout_button

    trace = _digit_trace()
    shown = handout_button.make_handout(trace)
    assert shown["visible"] is True and shown["value"].endswith(".html")
    with open(shown["value"], encoding="utf-8") as handle:
        assert handle.read() == handout.handout_html(trace, "en")
    again = handout_button.make_handout(trace)["value"]
    import os

    assert os.path.exists(again) and (again == shown["value"] or not os.path.exists(shown["value"]))  # one kept
    assert handout_button.make_handout(None) == {"__type__": "update", "value": None, "visible": False}
    assert handout_button.hide() == {"__type__": "update", "visible": False}
