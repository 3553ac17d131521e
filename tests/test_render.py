"""render.py on hand-built traces: statuses, order, escaping, tooltips, incremental output."""

from __future__ import annotations

import dataclasses
import re
import time
from html.parser import HTMLParser

import pytest

from playground import render
from playground.trace import STATUSES, Step, Summary, Trace


class Spans(HTMLParser):
    """Collects token spans: (attributes, text) in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens: list[tuple[dict[str, str], str]] = []
        self._depth: list[bool] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        a = {k: v or "" for k, v in attrs}
        is_tok = tag == "span" and "tok" in a.get("class", "").split()
        if is_tok:
            self.tokens.append((a, ""))
        self._depth.append(is_tok)

    def handle_endtag(self, tag: str) -> None:
        if self._depth:
            self._depth.pop()

    def handle_data(self, data: str) -> None:
        if any(self._depth) and self.tokens:
            attrs, text = self.tokens[-1]
            self.tokens[-1] = (attrs, text + data)


def parse(html_text: str) -> Spans:
    parser = Spans()
    parser.feed(html_text)
    parser.close()
    return parser


def mixed_steps() -> list[Step]:
    """Step 0: 2 of 3 drafts kept + correction; step 1: all kept + bonus; step 2: no draft;
    step 3: cut by the length limit with one unverified draft."""
    return [
        Step(index=0, drafted=[10, 11, 12], accepted=2, rejected=[12], emitted=[10, 11, 20],
             drafted_text=["Hello", ",", " <script>"], emitted_text=["Hello", ",", " world"],
             draft_ms=1.5, verify_ms=60.0, q=[0.9, 0.8, 0.2], p=[0.95, 0.7, 0.01]),
        Step(index=1, drafted=[30, 31], accepted=2, rejected=[], emitted=[30, 31, 32],
             drafted_text=[" &", " co"], emitted_text=[" &", " co", "."], draft_ms=0.5, verify_ms=55.0,
             q=None, p=[0.5, 0.6]),
        Step(index=2, drafted=[], accepted=0, rejected=[], emitted=[40], emitted_text=["\n"], verify_ms=50.0),
        Step(index=3, drafted=[50, 51], accepted=1, rejected=[], emitted=[50], unverified=[51],
             drafted_text=[" Bye", "\n"], emitted_text=[" Bye"], verify_ms=52.0),
    ]


def test_every_token_has_its_status_in_reading_order() -> None:
    tokens = parse(render.render_tokens(mixed_steps())).tokens
    statuses = [a["data-status"] for a, _ in tokens]
    assert statuses == [
        "accepted", "accepted", "rejected", "correction",  # step 0: the rejected draft stays, then the correction
        "accepted", "accepted", "bonus",  # step 1
        "target",  # step 2
        "accepted", "unverified",  # step 3
    ]
    assert set(statuses) <= set(STATUSES)
    assert [a["data-step"] for a, _ in tokens] == ["0"] * 4 + ["1"] * 3 + ["2"] + ["3"] * 2


def test_token_text_is_escaped() -> None:
    html_text = render.render_tokens(mixed_steps())
    assert "<script>" not in html_text
    assert "&lt;script&gt;" in html_text
    tokens = parse(html_text).tokens
    assert tokens[2][1] == " <script>"  # the rejected draft reads as its text once unescaped
    assert tokens[4][1] == " &"
    assert "script" not in parse(html_text).tags


def test_attribute_injection_is_escaped() -> None:
    step = Step(index=0, drafted=[1], accepted=0, rejected=[1], emitted=[2],
                drafted_text=['" onmouseover="alert(1)'], emitted_text=["'><img src=x onerror=alert(1)>"])
    html_text = render.render_step(step)
    parsed = parse(html_text)
    assert "img" not in parsed.tags
    for attrs, _ in parsed.tokens:
        assert "onmouseover" not in attrs and "onerror" not in attrs
    assert parsed.tokens[1][1] == "'><img src=x onerror=alert(1)>"


def test_tooltips_show_step_and_probabilities() -> None:
    tokens = parse(render.render_tokens(mixed_steps())).tokens
    first, _ = tokens[0]
    assert first["data-q"] == "0.9" and first["data-p"] == "0.95"
    assert "step 1" in first["title"] and "q = 0.900" in first["title"] and "p = 0.950" in first["title"]
    rejected, _ = tokens[2]
    assert "rejected draft 3/3" in rejected["title"] and "p = 0.010" in rejected["title"]
    bonus_step_accepted, _ = tokens[4]
    assert "data-q" not in bonus_step_accepted and bonus_step_accepted["data-p"] == "0.5"
    target, _ = tokens[7]
    assert "data-q" not in target and "data-p" not in target and "step 3" in target["title"]
    correction, _ = tokens[3]
    assert "correction" in correction["title"] and "data-p" not in correction


def test_whitespace_only_drafts_stay_visible() -> None:
    tokens = parse(render.render_tokens(mixed_steps())).tokens
    unverified_newline = tokens[-1]
    assert unverified_newline[0]["data-status"] == "unverified"
    assert unverified_newline[1] == "↵"  # shown as a symbol, not a line break in the output
    target_newline = tokens[7]
    assert target_newline[1] == "\n"  # produced text keeps its real newline


def test_stream_output_only_grows_and_matches_one_shot_render() -> None:
    steps = mixed_steps()
    stream = render.TokenStream()
    assert "pg-empty" in stream.html()
    previous = None
    for step in steps:
        stream.add(step)
        current = stream.html()
        if previous is not None:
            assert current.startswith(previous)  # append-only: Gradio can send the tail as a diff
        previous = current
    assert len(stream) == len(steps)
    assert stream.html() == previous  # html() is repeatable
    assert previous + "</div>" == render.render_tokens(steps)


def test_empty_trace_and_legend() -> None:
    assert "pg-empty" in render.render_tokens([])
    legend = render.legend_html()
    assert set(re.findall(r'data-status="(\w+)"', legend)) == set(STATUSES)
    for status in STATUSES:
        assert f'[data-status="{status}"]' in render.CSS


def test_stats_and_status_boxes() -> None:
    summary = Summary(new_tokens=12, steps=4, drafted=8, accepted=6, acceptance_rate=0.75, tokens_per_step=3.0,
                      elapsed_s=0.5, tokens_per_s=24.0)
    stats = render.stats_html(summary)
    for key in ("new_tokens", "steps", "acceptance_rate", "tokens_per_step", "tokens_per_s", "elapsed_s"):
        assert f'data-stat="{key}"' in stats
    assert "75%" in stats and "24.0" in stats and "(6/8)" in stats
    empty = render.stats_html(None)  # before the first step: one line that says what will appear, no dashes
    assert "data-stat=" not in empty and "–" not in empty and "new tokens, steps" in empty
    assert "data-stat=" not in render.stats_html(Summary())
    alert = render.status_html("bad <input>", "error")
    assert 'role="alert"' in alert and "bad &lt;input&gt;" in alert
    assert 'role="status"' in render.status_html("ok", "done")


def test_render_document_is_standalone() -> None:
    trace = Trace(method="prompt_lookup", target="bundled/<gemma>", prompt="p", steps=mixed_steps())
    doc = render.render_document(trace)
    assert doc.startswith("<!doctype html>") and render.CSS in doc and "bundled/&lt;gemma&gt;" in doc
    assert len(parse(doc).tokens) == 10 + len(render.LEGEND)  # 10 tokens plus one legend sample per status


def test_rendering_cost_is_linear_in_output_length() -> None:
    """Updating after every step re-renders nothing: per-step cost does not grow with the output.

    Counts work, not time: the bytes rendered per `add` stay constant while the output grows.
    """
    step = mixed_steps()[0]
    stream = render.TokenStream()
    sizes = []
    for i in range(400):
        before = sum(len(part) for part in stream._parts)
        stream.add(Step(**{**step.__dict__, "index": i}))
        sizes.append(sum(len(part) for part in stream._parts) - before)
        stream.html()
    assert max(sizes) <= 1.05 * min(sizes)  # only the step numbers' digits differ


def measure_render_cost(tokens_per_step: int = 4, lengths: tuple[int, ...] = (64, 256, 512, 2048)) -> list[dict]:
    """Figures for the report: rendering cost per page update vs output length (not a test)."""
    rows = []
    for n_tokens in lengths:
        n_steps = max(1, n_tokens // tokens_per_step)
        drafted = list(range(tokens_per_step))
        steps = [
            Step(index=i, drafted=drafted, accepted=tokens_per_step - 1, rejected=[drafted[-1]],
                 emitted=drafted[:-1] + [99], drafted_text=[" tok"] * tokens_per_step,
                 emitted_text=[" tok"] * tokens_per_step, q=[0.5] * tokens_per_step, p=[0.6] * tokens_per_step)
            for i in range(n_steps)
        ]
        stream = render.TokenStream()
        start = time.perf_counter()
        for s in steps:
            stream.add(s)
            html_text = stream.html()
        incremental = time.perf_counter() - start
        start = time.perf_counter()
        for i in range(1, n_steps + 1, max(1, n_steps // 32)):
            render.render_tokens(steps[:i])
        sampled = len(range(1, n_steps + 1, max(1, n_steps // 32)))
        naive_per_update = (time.perf_counter() - start) / sampled
        rows.append({
            "tokens": n_tokens, "steps": n_steps, "html_kb": round(len(html_text) / 1024, 1),
            "incremental_total_ms": round(incremental * 1000, 2),
            "incremental_per_update_ms": round(incremental * 1000 / n_steps, 3),
            "full_rerender_per_update_ms": round(naive_per_update * 1000, 3),
        })
    return rows


if __name__ == "__main__":
    for row in measure_render_cost():
        print(row)


def test_every_value_in_an_attribute_is_escaped_even_unvalidated():
    """Defence in depth: even a Step that skipped validation cannot open an attribute or a tag."""
    from html.parser import HTMLParser

    evil = '1" onmouseover="alert(1)" x="'
    step = Step(index=3, drafted=[evil, "<script>x</script>"], accepted=1,  # type: ignore[list-item]
                rejected=["<script>x</script>"],  # type: ignore[list-item]
                emitted=[evil, "<img src=x onerror=alert(1)>"], drafted_text=["<b>", "</span><script>"],  # type: ignore[list-item]
                emitted_text=["<b>", "<i>"])

    class Attributes(HTMLParser):
        def __init__(self):
            super().__init__()
            self.names, self.tags = set(), set()

        def handle_starttag(self, tag, attrs):
            self.tags.add(tag)
            self.names.update(name for name, _ in attrs)

    pieces = [render.render_step(step), render.render_step(step, current=True), render.step_detail_html(step),
              render.emitted_spans([step]), render.status_html(evil, evil, evil),
              render.race_html([{"label": evil, "steps": [step], "total_tokens": 5, "finish_s": 1.0}], 1.0, 1.0, evil)]
    for piece in pieces:
        parser = Attributes()
        parser.feed(piece)
        assert not {n for n in parser.names if n.startswith("on")}, piece
        assert parser.tags <= {"span", "div", "p", "b"}, (parser.tags, piece)


def test_drafts_after_the_rejected_one_are_discarded_not_rejected() -> None:
    step = Step(index=0, drafted=[1, 2, 3, 4], accepted=1, rejected=[2], discarded=[3, 4], emitted=[1, 9],
                drafted_text=["a", "b", "c", "d"], emitted_text=["a", "z"], q=[0.9, 0.5, 0.4, 0.3],
                p=[0.8, 0.1, 0.6, 0.7], mixture=[0.83, 0.22, 0.54, 0.58], verify_ms=40.0, other_ms=2.0)
    tokens = parse(render.render_step(step)).tokens
    assert [a["data-status"] for a, _ in tokens] == ["accepted", "rejected", "discarded", "discarded", "correction"]
    discarded = tokens[2][0]
    assert "discarded draft 3/4" in discarded["title"] and "never judged" in discarded["title"]
    assert "data-p" not in discarded, "p after a refused prefix was never used: not shown"
    assert tokens[1][0]["data-v"] == "0.22" and "ensemble v = w·p + (1−w)·q = 0.220" in tokens[1][0]["title"]
    assert "discarded" in render.legend_html() and "doubly warped" in render.legend_html()
    text = render.narrate_step(step, "speculative")
    assert "rejected 'b'" in text and "the 2 tokens after it 'cd' were discarded without being judged" in text
    assert "the rest of the loop 2.0 ms" in text
    detail = render.step_detail_html(step, "speculative")
    assert "– discarded" in detail and "v 0.220" in detail and "other 2.0 ms" in detail


def test_empty_draft_reason_comes_from_the_trace() -> None:
    step = Step(index=4, drafted=[], accepted=0, rejected=[], emitted=[7], emitted_text=["x"],
                no_draft_reason="the earlier match continues with end-of-sequence, which prompt lookup never drafts")
    assert "end-of-sequence" in render.narrate_step(step, "prompt_lookup")
    old = Step(index=4, drafted=[], accepted=0, rejected=[], emitted=[7], emitted_text=["x"])
    assert "n-gram" not in render.narrate_step(old, "prompt_lookup"), "a schema-1 trace does not say why"


def test_a_schema_1_first_step_says_why_where_the_registry_says_the_drafter_needs_the_target_first() -> None:
    from playground.i18n import t
    from playground.methods import METHODS

    first = Step(index=0, drafted=[], accepted=0, rejected=[], emitted=[7], emitted_text=["x"])
    for name, method in METHODS.items():
        if method.reference:
            continue
        text = render.narrate_step(first, name)
        if method.first_step_drafts:
            assert t("no_draft.nothing_proposed") in text, name
        else:
            assert t(f"render.no_draft.{name}") in text, name
    assert {name for name, m in METHODS.items() if not m.first_step_drafts} == {"mtp", "mtp_drafter"}


@pytest.mark.parametrize("lang", ["en", "ru", "ar"])
def test_a_step_that_refuses_64_drafts_is_told_in_a_few_lines(lang: str) -> None:
    """A presenter reads the narration off a projector (#47): 64 refused drafts of "ptides" (what the bundled
    model's early layers draft) are quoted by their first whole tokens up to NARRATION_QUOTE_CHARS, then "…"; short
    quotes stay whole. Before, all 64 were quoted: 384 characters, ten lines under the output at 1280×720."""
    drafted = list(range(100, 164))
    step = Step(index=0, drafted=drafted, accepted=1, rejected=[drafted[1]], emitted=[drafted[0], 7],
                drafted_text=["ptides"] * 64, emitted_text=["ptides", "x"], verify_ms=40.0)
    text = render.narrate_step(step, "early_exit", lang=lang)
    cut = "ptides" * (render.NARRATION_QUOTE_CHARS // 6) + "…"
    assert cut in text and "ptides" * (render.NARRATION_QUOTE_CHARS // 6 + 1) not in text, text
    assert len(text) < 600, len(text)
    short = render.narrate_step(dataclasses.replace(step, drafted=drafted[:3], drafted_text=["a", "b", "c"],
                                                    rejected=[drafted[1]]), "early_exit", lang=lang)
    assert "…" not in short, short
