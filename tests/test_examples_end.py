"""The page's examples end where their task ends (#47: four of five did their task, then rambled or looped): a picked
example sets the new-token count its task takes in the page's language, and the bundled Gemma, run to that count,
stops at the line end that closes its answer."""

from __future__ import annotations

import pytest

from playground.app import generate_tab
from playground.examples import localized_examples
from playground.i18n import LANGUAGES

# The tasks with an end (free writing and the repeated list run on by design, and keep the page's count).
ENDING = ("ex-edit-code", "ex-summarise", "ex-answer-from-a-passage", "ex-translate", "ex-short-fact")


def _ending(lang: str) -> list:
    english_ids = [e.question_id for e in localized_examples("en")]
    return [e for e, qid in zip(localized_examples(lang), english_ids) if qid in ENDING]


@pytest.mark.parametrize("lang", LANGUAGES)
def test_picking_an_example_sets_the_new_tokens_its_task_takes(lang: str) -> None:
    for example in localized_examples(lang):
        tokens = generate_tab.example_tokens(example.name)
        if example in _ending(lang):
            assert tokens == example.new_tokens_in(lang) and 0 < tokens <= 48, (lang, example.name)
        else:
            assert tokens is not None and not isinstance(tokens, int), example.name  # gr.skip(): the slider stays
    assert len(_ending(lang)) == len(ENDING)


@pytest.mark.slow
@pytest.mark.bundled
@pytest.mark.parametrize("lang", LANGUAGES)
def test_an_example_run_to_its_count_ends_at_the_line_end_that_closes_its_answer(lang: str) -> None:
    from playground.engine import LiveRun, prepare
    from playground.models import DEFAULT_TARGET
    from playground.request import new_request

    for example in _ending(lang):
        count = example.new_tokens_in(lang)
        trace = LiveRun(prepare(new_request(example.text, target=DEFAULT_TARGET, method="baseline",
                                            max_new_tokens=count, dtype="float32"))).run()
        pieces = [text for step in trace.steps for text in step.emitted_text]
        assert len(pieces) == count, (lang, example.name)
        # The last token closes the line; the ones before it had not yet: the count is the task's, not one more.
        assert "\n" in pieces[-1] and trace.output_text.endswith("\n"), (lang, example.name, trace.output_text)
        assert not "".join(pieces[:-1]).endswith("\n"), (lang, example.name, trace.output_text)
