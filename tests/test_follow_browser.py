"""Follow the presenter in real pages in headless Chromium (`playground.app.follow`): a presenter opens the class link
(QR code and link in ``#pg-class-link``) and steps through a run at the step-by-step pace; followers in English,
Russian and Arabic (right to left, on a phone) see the presenter's tokens step by step in their own page's token view,
answer "kept or refused?", and open a token's step microscope; the presenter's page shows the tally and the answer; an
unknown code is refused in words. The models are tiny local ones, allowed as a public Space allows a folder."""

from __future__ import annotations

import json
from typing import Any, Iterator
from urllib.parse import urlencode

import pytest
from appserver import browser_fixture, needs_chromium
from classroom import public_server

pytestmark = [pytest.mark.server, pytest.mark.browser, pytest.mark.models, needs_chromium]

browser = browser_fixture()
READY = "() => (document.querySelector('#pg-prompt textarea') || {}).value"
STEPS = "() => document.querySelectorAll('#pg-output .pg-step').length"


@pytest.fixture(scope="module")
def app_url(tiny_models: dict[str, str]) -> Iterator[str]:
    with public_server(tiny_models, "follow-browser-server.log") as url:
        yield url


def open_page(browser: Any, url: str, width: int = 1280, height: int = 900) -> Any:
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(60_000)
    page.goto(url)
    page.wait_for_function(READY, timeout=120_000)
    return page


def steps(page: Any) -> int:
    return page.evaluate(STEPS)


def test_followers_in_three_languages_follow_the_presenter_step_by_step(browser: Any, app_url: str,
                                                                        tiny_models: dict[str, str]) -> None:
    settings = {"prompt": "one two three four five six seven eight nine ten", "target": tiny_models["target"],
                "assistant": tiny_models["noisy"], "method": "speculative",
                "params": json.dumps({"num_assistant_tokens": 3}), "max_new_tokens": 20, "chat": "off",
                "dtype": "float32", "view": "presenter"}
    presenter = open_page(browser, f"{app_url}?{urlencode(settings)}")
    pages = [presenter]
    try:
        presenter.wait_for_function("() => document.querySelector('#pg-link-status')?.innerText.includes('restored')")
        presenter.click("#pg-pace input[value=step]")
        presenter.click("#pg-class-open")
        presenter.wait_for_selector("#pg-class-link svg")
        link = presenter.get_attribute("#pg-class-link [data-url]", "data-url")
        assert link.startswith(app_url + "?follow=") and len(link) == len(app_url) + len("?follow=") + 16
        assert presenter.is_visible("#pg-class-link svg") and presenter.is_visible(f"#pg-class-link a[href='{link}']")
        followers = {"en": open_page(browser, link + "&lang=en"), "ru": open_page(browser, link + "&lang=ru"),
                     "ar": open_page(browser, link + "&lang=ar", 390, 844)}
        pages += followers.values()
        for lang, page in followers.items():
            page.wait_for_selector("#pg-follow-bar [data-testid=pg-follow]")
        assert followers["ar"].evaluate("() => document.documentElement.dir") == "rtl"
        assert "следите" in followers["ru"].inner_text("#pg-follow-bar")
        presenter.wait_for_function("() => (document.querySelector('#pg-class-tally-box [data-followers]') || {})"
                                    ".dataset?.followers === '3'")

        presenter.click("#pg-generate")
        for page in followers.values():  # the run stands after its first step: the class is asked
            page.wait_for_selector("#pg-answer-kept", state="visible")
            page.wait_for_selector("#pg-class-question-box [data-asked]")
        asked = followers["en"].get_attribute("#pg-class-question-box [data-asked]", "data-asked")
        assert "Оставит ли целевая модель" in followers["ru"].inner_text("#pg-class-question-box")
        followers["en"].click("#pg-answer-kept")
        followers["ru"].click("#pg-answer-refused")
        followers["en"].wait_for_selector("#pg-answer-kept", state="hidden")
        presenter.wait_for_function(
            "() => (document.querySelector('#pg-class-tally-box') || {}).innerText?.includes('kept 1 · refused 1')")

        # Step by step: each "Next step" of the presenter's shows each follower one more step.
        for press in range(2):
            before = {lang: steps(page) for lang, page in followers.items()}
            presenter.click("#pg-step-on")
            for lang, page in followers.items():
                page.wait_for_function(f"() => ({STEPS})() > {before[lang]}")
                assert steps(page) == before[lang] + 1, lang
        assert all(steps(page) == steps(followers["en"]) for page in followers.values())
        assert steps(presenter) == steps(followers["en"]) + 1  # the question's step, shown to the presenter only
        presenter.wait_for_function(
            f"() => (document.querySelector('#pg-class-tally-box') || {{}}).innerText?.includes("
            f"'Step {int(asked) + 1}: the target')")
        assert "right answers: 1/2" in presenter.inner_text("#pg-class-tally-box")
        # The presenter's tokens, as the class sees them (the same text, step for step).
        shown = followers["en"].evaluate("() => Array.from(document.querySelectorAll('#pg-output .pg-step'))"
                                         ".map(s => s.innerText)")
        theirs = presenter.evaluate("() => Array.from(document.querySelectorAll('#pg-output .pg-step'))"
                                    ".map(s => s.innerText)")
        assert shown == theirs[:len(shown)]
        # A follower opens a token's microscope, in their language, from the trace alone.
        for lang, page in followers.items():
            page.click("#pg-output .tok[role=button]")
            page.wait_for_selector("#pg-micro-box [data-testid=pg-micro][data-step]")
        assert "Шаг" in followers["ru"].inner_text("#pg-micro-box")
        assert "الخطوة" in followers["ar"].inner_text("#pg-micro-box")
        # "Try it yourself": the run's settings in the follower's own page.
        followers["en"].click("#pg-follow-try")
        followers["en"].wait_for_function(
            "() => document.querySelector('#pg-link-status')?.innerText.includes('restored')")
        assert followers["en"].input_value("#pg-prompt textarea") == settings["prompt"]
    finally:
        for page in pages:
            page.close()


@pytest.mark.parametrize("lang, words", [("en", "unknown or its class has ended"), ("ar", "انتهى صفه")])
def test_an_unknown_class_link_is_refused_in_words(browser: Any, app_url: str, lang: str, words: str) -> None:
    page = open_page(browser, f"{app_url}?follow={'A' * 16}&lang={lang}")
    try:
        page.wait_for_function("(w) => document.querySelector('#pg-status-box').innerText.includes(w)", arg=words)
        assert page.is_visible("#pg-status-box [data-kind=error]")
        assert not page.is_visible("#pg-follow-bar [data-testid=pg-follow]")
    finally:
        page.close()
