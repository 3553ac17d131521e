""""Final text only" (`render.FINAL_HIDDEN`, `render.FINAL_ONLY_CSS`): a token view with the drafts that never reached
the output hidden reads as the run's output text. Checked on a real trace of tiny models (a drafter that is often
refused, so the trace has rejected and discarded drafts); in Chromium by tests/test_presenter_browser.py.
"""

from __future__ import annotations

import html.parser
import re

import pytest

from playground import render
from playground.engine import LiveRun, RunRequest, prepare
from playground.trace import ACCEPTED, DISCARDED, REJECTED, UNVERIFIED

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPT = "The quick brown fox jumps over the lazy dog. The quick"


class _Shown(html.parser.HTMLParser):
    """The text a browser shows of a token view with `hidden` statuses' spans not displayed (as the CSS hides them)."""

    def __init__(self, hidden: tuple[str, ...]) -> None:
        super().__init__()
        self.hidden = hidden
        self.stack: list[bool] = []  # per open span: whether it (or a span around it) is hidden
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag != "span":
            return
        values = dict(attrs)
        inside = bool(self.stack and self.stack[-1])
        self.stack.append(inside or (values.get("data-status") in self.hidden and "tok" in (values.get("class") or "")))

    def handle_endtag(self, tag: str) -> None:
        if tag == "span" and self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if not (self.stack and self.stack[-1]):
            self.text.append(data)


def shown_text(markup: str, hidden: tuple[str, ...]) -> str:
    parser = _Shown(hidden)
    parser.feed(markup)
    return "".join(parser.text)


def hidden_by_css() -> tuple[str, ...]:
    """The statuses the page's rule hides (read back from the CSS itself)."""
    return tuple(re.findall(r'\.pg-final-only \.tok\[data-status="(\w+)"\]', render.FINAL_ONLY_CSS))


@pytest.fixture(scope="module")
def refused_trace(store, tiny_models):
    """A speculative run whose drafter is a noisy copy of the target: drafts kept, refused and discarded. (Unverified
    drafts come only from an EOS inside an accepted draft, which these tiny models do not produce: the rule's own
    test below names that status.)"""
    request = RunRequest(prompt=PROMPT, target=tiny_models["target"], assistant=tiny_models["noisy"],
                         method="speculative", dtype="float32", max_new_tokens=23,
                         params={"num_assistant_tokens": 4})
    trace = LiveRun(prepare(request, store)).run()
    statuses = {status for step in trace.steps for _, _, status, _ in step.token_statuses()}
    assert {ACCEPTED, REJECTED, DISCARDED} <= statuses, statuses
    assert trace.finish_reason == "length"
    return trace


def test_the_css_hides_exactly_the_drafts_that_never_reached_the_output() -> None:
    assert hidden_by_css() == render.FINAL_HIDDEN == (REJECTED, DISCARDED, UNVERIFIED)


@pytest.mark.parametrize("lang", ["en", "ar"])
def test_final_text_only_reads_as_the_output_text(refused_trace, lang) -> None:
    markup = render.render_trace(refused_trace, lang=lang)
    everything = shown_text(markup, ())
    final = shown_text(markup, hidden_by_css())
    assert final == refused_trace.output_text
    assert everything != final, "the full view shows the refused drafts"
    # The replay's view (a window with the current step outlined) reads the same.
    replay = render.render_tokens(refused_trace.steps, current=len(refused_trace.steps) - 1, lang=lang)
    assert shown_text(replay, hidden_by_css()) == refused_trace.output_text
