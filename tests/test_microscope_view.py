"""The step microscope's panel and per-run tables (playground/microscope_view.py) on real runs of the tiny models.

Every figure the panel shows is read back from its HTML and compared with the trace's own records; the clicked
token's position (`data-pos`, from `render.token_positions`) must name the row that decided it. The same panel
in Chromium is in `test_microscope_browser.py`.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from typing import Any

import pytest

from playground import i18n, microscope, microscope_view, render
from playground.app import generate_tab
from playground.trace import ACCEPTED, BONUS, CORRECTION, REJECTED, TARGET, Trace

PROMPT = "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three, four,"


@pytest.fixture(autouse=True)
def no_toasts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generate_tab.gr, "Warning", lambda *a, **k: None)


def run(target: str, method: str, assistant: str | None = None, params: dict | None = None, sample: bool = False,
        tokens: int = 24, seed: int = 0, chat: str = "auto") -> Trace:
    """A run through the page's own streaming handler; the trace it hands the other tabs."""
    final = list(generate_tab.generate(PROMPT, target=target, assistant=assistant, method=method, params=params or {},
                                       max_new_tokens=tokens, sample=sample, seed=seed, dtype="float32",
                                       chat=chat))[-1]
    final = generate_tab.RUN.read(final)
    assert 'data-kind="done"' in final["status"], final["status"]
    return final["run_trace"]


@pytest.fixture(scope="module")
def greedy(tiny_models: dict[str, str]) -> Trace:
    return run(tiny_models["target"], "speculative", tiny_models["noisy"], {"num_assistant_tokens": 4})


@pytest.fixture(scope="module")
def sampled(tiny_models: dict[str, str]) -> Trace:
    return run(tiny_models["target"], "speculative", tiny_models["other"], {"num_assistant_tokens": 4}, sample=True,
               tokens=32, seed=3)


@pytest.fixture(scope="module")
def lookup(tiny_models: dict[str, str]) -> Trace:
    # without the chat template, so the context is the prompt's text (a trace keeps the prompt, not its template)
    return run(tiny_models["target"], "prompt_lookup", params={"prompt_lookup_num_tokens": 4}, chat="off")


class Rows(HTMLParser):
    """The panel's lists: per distribution, its rows' (id, prob, drafted, chosen) in order, and what is marked."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.lists: dict[str, list[dict[str, Any]]] = {}
        self.outside: dict[str, dict[str, str]] = {}
        self.panel: dict[str, str] = {}
        self._dist: str | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if a.get("data-testid") == "pg-micro":
            self.panel = a
        if tag == "section" and "data-dist" in a:
            self._dist = a["data-dist"]
            self.lists[self._dist] = []
        if tag == "li" and self._dist is not None:
            self.lists[self._dist].append({"id": int(a["data-id"]), "prob": float(a["data-prob"]),
                                           "drafted": "data-drafted" in a, "chosen": "data-chosen" in a})
        if tag == "p" and "pg-micro-outside" in a.get("class", "") and self._dist is not None:
            self.outside[self._dist] = a

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self._dist = None


def refused_positions(trace: Trace) -> list[tuple[int, int]]:
    return [(s.index, s.accepted) for s in trace.steps if s.rejected]


def check_list(rows: list[dict[str, Any]], ranked: list[Any], marked: int | None) -> None:
    """The shown list is the recorded top-k, in its order, with the same probabilities; `marked` flagged, alone."""
    assert [r["id"] for r in rows] == [e.id for e in ranked]
    assert [r["prob"] for r in rows] == pytest.approx([e.prob for e in ranked], rel=1e-5)
    assert [r["id"] for r in rows if r["drafted"]] == ([marked] if marked in [e.id for e in ranked] else [])


def opened_refusals(trace: Trace) -> list[tuple[Any, int, Any, Rows]]:
    """(step, position, its recorded row, the panel read back) for every refused draft of the run (at least one)."""
    refused = refused_positions(trace)
    assert refused, "the drafter must be refused at least once in the run"
    return [(trace.steps[i], pos, trace.steps[i].dists[pos], Rows(microscope_view.panel_html(trace, i, pos)))  # type: ignore[index]
            for i, pos in refused]


def test_refused_token_shows_target_top_first_and_the_draft_marked(greedy: Trace) -> None:
    for step, pos, row, view in opened_refusals(greedy):
        assert view.panel["data-refused"] == "true" and view.panel["data-pos"] == str(pos)
        # greedy: the target's top token is the correction that replaced the draft
        assert view.lists["p"][0]["id"] == row.p[0].id == step.emitted[pos]
        assert view.lists["p"][0]["chosen"]
        check_list(view.lists["p"], row.p, step.drafted[pos])
        check_list(view.lists["q"], row.q, step.drafted[pos])
        if step.drafted[pos] not in [e.id for e in row.p]:  # outside the top-k: named below it with its p
            assert int(view.outside["p"]["data-id"]) == step.drafted[pos]
            assert float(view.outside["p"]["data-prob"]) == pytest.approx(row.p_drafted, rel=1e-5)
        assert "residual" not in view.lists  # greedy refuses without a residual


def test_accepted_and_bonus_tokens_open_their_own_rows(greedy: Trace) -> None:
    for step in greedy.steps:
        for pos in range(len(step.emitted)):
            view = Rows(microscope_view.panel_html(greedy, step.index, pos))
            assert step.dists is not None
            row = step.dists[pos]
            check_list(view.lists["p"], row.p, step.drafted[pos] if pos < len(step.drafted) and pos <= step.accepted
                       else None)
            assert view.lists["p"][0]["id"] == step.emitted[pos]  # greedy: every emitted token is the target's top


def test_the_rule_is_microscope_explain_in_the_pages_language(greedy: Trace) -> None:
    step_index, pos = refused_positions(greedy)[0]
    step = greedy.steps[step_index]
    verdict = microscope.explain(step, pos, greedy.decoding)
    for lang in i18n.LANGUAGES:
        panel = microscope_view.panel_html(greedy, step_index, pos, lang)
        hit = re.search(r'<ul class="pg-micro-rule"[^>]*>(.*?)</ul>', panel)
        assert hit is not None
        rule = hit.group(1)
        # The rule with this token's numbers comes first (a projector shows it above the fold), the lists after it;
        # the panel is a named region the keyboard reaches (it scrolls in the presenter's view).
        assert panel.index('class="pg-micro-rule"') < panel.index('class="pg-micro-dists"')
        assert f'role="region" tabindex="0" aria-label="{i18n.t("micro.region", lang)}"' in panel
        assert [html.unescape(re.sub(r"</?bdi[^>]*>", "", x)) for x in re.findall(r"<li>(.*?)</li>", rule)] == [
            m.localized(lang) for m in verdict.messages]
        if lang != "en":
            assert i18n.t("microscope.rule", "en") not in panel and i18n.t("microscope.rule", lang) in panel


def _plain(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_the_page_and_the_cli_show_the_same_labels(greedy: Trace, sampled: Trace) -> None:
    """One set of labels serves both surfaces: the CLI's heading, list titles, rule title and table captions and
    columns are the page's, word for word, in every language."""
    for trace in (greedy, sampled):
        step_index, pos = refused_positions(trace)[0]
        for lang in i18n.LANGUAGES:
            page = microscope_view.panel_html(trace, step_index, pos, lang)
            shown = microscope.panel_text(trace, step_index + 1, pos + 1, lang)
            assert shown is not None
            text = shown.splitlines()
            hit = re.search(r'<p class="pg-micro-head">(.*?)</p>', page)
            assert hit is not None
            head = _plain(hit.group(1))
            titles = [_plain(x) for x in re.findall(r"<h4[^>]*>(.*?)</h4>", page)]
            assert text[0] == head
            assert [line for line in text if line in titles] == titles and len(titles) >= 3
            tables = microscope_view.run_tables_html(trace, lang)
            cli_tables = microscope.tables_text(trace, lang).splitlines()
            for table in re.findall(r"<table.*?</table>", tables):
                hit = re.search(r"<caption>(.*?)</caption>", table)
                assert hit is not None
                caption = _plain(hit.group(1))
                columns = [_plain(x) for x in re.findall(r"<th>(.*?)</th>", table)]
                at = cli_tables.index(caption)
                assert cli_tables[at + 1].split() == " ".join(columns).split()


def test_numbers_read_left_to_right_in_arabic(greedy: Trace) -> None:
    step_index, pos = refused_positions(greedy)[0]
    panel = microscope_view.panel_html(greedy, step_index, pos, "ar")
    numbers = re.findall(r'<bdi dir="ltr" class="pg-num">([^<]*)</bdi>', panel)
    assert numbers and all(re.fullmatch(r"[0-9.e+-]+", n) for n in numbers)
    # every probability shown sits in a left-to-right isolate: none stands bare in the Arabic text
    bare = re.sub(r"<bdi[^>]*>[^<]*</bdi>", "", re.sub(r'data-[a-z]+="[^"]*"|style="[^"]*"', "", panel))
    assert not re.search(r"\d\.\d{3}", bare)


def test_sampling_shows_the_residual_with_the_drawn_token(sampled: Trace) -> None:
    for step, pos, row, view in opened_refusals(sampled):
        check_list(view.lists["residual"], row.residual, step.drafted[pos])
        drawn = [r["id"] for r in view.lists["residual"] if r["chosen"]]
        assert drawn == ([step.emitted[pos]] if step.emitted[pos] in [e.id for e in row.residual] else [])
        check_list(view.lists["p"], row.p, step.drafted[pos])  # the target's p beside it, its top first


def test_every_clickable_token_names_the_row_that_decided_it(greedy: Trace, lookup: Trace) -> None:
    for trace in (greedy, lookup):
        spans = re.findall(r'<span class="tok" data-status="(\w+)" data-step="(\d+)" data-id="(\d+)"'
                           r'(?: data-pos="(\d+)")?', render.render_trace(trace))
        assert any(pos for *_, pos in spans)
        for status, step_index, tok_id, pos in spans:
            step = trace.steps[int(step_index)]
            if status in (ACCEPTED, REJECTED):
                assert int(tok_id) == step.drafted[int(pos)] and int(pos) <= step.accepted
            elif status in (CORRECTION, BONUS, TARGET):
                assert int(tok_id) == step.emitted[int(pos)]
            else:
                assert pos == ""  # discarded and unverified drafts were never judged


def test_prompt_lookup_highlights_the_ngram_it_copied_after(lookup: Trace) -> None:
    steps = [s for s in lookup.steps if s.drafted and s.lookup_source]
    assert steps, "the counting prompt repeats itself: lookup must find a match"
    for step in steps:
        panel = microscope_view.panel_html(lookup, step.index, 0)
        assert "q" not in Rows(panel).lists  # prompt lookup has no draft probabilities
        found = re.search(r'<div class="pg-micro-context"[^>]*>(.*?)<mark class="pg-micro-match"[^>]*>(.*?)</mark>'
                          r'<mark class="pg-micro-copied">(.*?)</mark>', panel, re.S)
        assert found is not None
        before, match, copied = (html.unescape(x) for x in found.groups())
        output = "".join(t for s in lookup.steps[:lookup.steps.index(step)] for t in s.emitted_text)
        # the highlighted n-gram is what the context ends with, and the draft is the text that followed it there
        assert match and (lookup.prompt + output).endswith(match)
        assert copied == "".join(step.drafted_text)
        assert step.lookup_source is not None
        if step.lookup_source[0] < lookup.prompt_tokens:
            assert (before + match + copied) in lookup.prompt


def test_traces_without_distributions_say_so(greedy: Trace) -> None:
    old = Trace.from_json(greedy.to_json())
    for step in old.steps:
        step.dists = None
    step_index, pos = refused_positions(old)[0]
    for lang in i18n.LANGUAGES:
        panel = microscope_view.panel_html(old, step_index, pos, lang)
        assert 'data-recorded="false"' in panel
        assert i18n.t("microscope.not_recorded", lang) in html.unescape(re.sub(r"</?bdi[^>]*>", "", panel))
        assert "<section" not in panel
    # the drafted token's own figures, which every schema has, are still shown
    drafted_p = old.steps[step_index].p
    assert drafted_p is not None
    assert f"{drafted_p[pos]:.3f}" in microscope_view.panel_html(old, step_index, pos)


@pytest.mark.parametrize("data", [None, "3", {"step": "0", "pos": 0}, {"step": 0}, {"step": True, "pos": 0},
                                  {"step": 10**9, "pos": 0}, {"step": 0, "pos": -1}, {"step": 0, "pos": 10**9},
                                  [0, 0]])
def test_a_click_naming_no_token_gets_a_sentence(greedy: Trace, data: Any) -> None:
    panel = microscope_view.panel_for_click(greedy, data)
    assert 'data-empty="true"' in panel and html.escape(i18n.t("micro.no_such_token")) in panel


def test_refusal_and_confidence_tables_are_the_runs(greedy: Trace, sampled: Trace) -> None:
    for trace in (greedy, sampled):
        table = microscope_view.refusals_html(trace)
        rows = re.findall(r'<tr data-draft-id="(\d+)" data-target-id="(\d+)">.*?<bdi dir="ltr">(\d+)</bdi>', table)
        pairs = microscope.refusal_pairs(trace)
        assert [(int(d), int(g), int(c)) for d, g, c in rows] == [(d, g, c) for d, _, g, _, c in pairs][:10]
        assert sum(c for *_, c in pairs) == sum(1 for s in trace.steps if s.rejected)
        buckets = re.findall(r'data-judged="(\d+)" data-accepted="(\d+)"', microscope_view.confidence_html(trace))
        assert sum(int(j) for j, _ in buckets) == sum(s.judged_drafts for s in trace.steps)
        assert sum(int(a) for _, a in buckets) == sum(s.accepted for s in trace.steps)


def test_methods_without_q_say_so_in_the_confidence_table(lookup: Trace) -> None:
    for lang in i18n.LANGUAGES:
        assert html.escape(i18n.t("microscope.confidence.none", lang)) in microscope_view.confidence_html(lookup, lang)
