"""charts.py on hand-built traces: traces, values and validity of the Plotly figures."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from playground import charts
from playground.trace import Step, Trace


def steps() -> list[Step]:
    return [
        Step(index=0, drafted=[1, 2, 3], accepted=2, rejected=[3], emitted=[1, 2, 9], draft_ms=2.0, verify_ms=60.0),
        Step(index=1, drafted=[4, 5], accepted=2, rejected=[], emitted=[4, 5, 6], draft_ms=1.0, verify_ms=58.0),
        Step(index=2, drafted=[], accepted=0, rejected=[], emitted=[7], draft_ms=0.0, verify_ms=50.0),
        Step(index=3, drafted=[8, 9, 10], accepted=1, rejected=[], emitted=[8], unverified=[9, 10],
             draft_ms=1.0, verify_ms=61.0),
    ]


def by_name(fig: go.Figure) -> dict[str, dict]:
    return {t["name"]: t for t in fig.to_dict()["data"]}


def test_acceptance_figure_values() -> None:
    fig = charts.acceptance_figure(steps())
    traces = by_name(fig)
    assert set(traces) == {"accepted", "rejected", "unverified", "acceptance %"}
    assert list(traces["accepted"]["x"]) == [1, 2, 3, 4]
    assert list(traces["accepted"]["y"]) == [2, 2, 0, 1]
    assert list(traces["rejected"]["y"]) == [1, 0, 0, 0]
    assert list(traces["unverified"]["y"]) == [0, 0, 0, 2]
    # accepted / verified drafts so far: 2/3, 4/5, 4/5, 5/6 (unverified drafts do not count)
    assert list(traces["acceptance %"]["y"]) == pytest.approx([66.67, 80.0, 80.0, 83.33], abs=0.01)
    assert traces["acceptance %"]["yaxis"] == "y2"
    assert fig.layout.barmode == "stack"


def test_acceptance_figure_accepts_a_trace() -> None:
    trace = Trace(method="prompt_lookup", target="t", prompt="p", steps=steps())
    assert charts.acceptance_figure(trace).to_dict() == charts.acceptance_figure(trace.steps).to_dict()


def test_timing_figure_values() -> None:
    traces = by_name(charts.timing_figure(steps()))
    assert list(traces["draft"]["y"]) == [2.0, 1.0, 0.0, 1.0]
    assert list(traces["verify"]["y"]) == [60.0, 58.0, 50.0, 61.0]
    assert list(traces["ms / token"]["y"]) == pytest.approx([62 / 3, 59 / 3, 50.0, 62.0], abs=0.01)
    assert "other" not in traces  # schema-1 steps: no other time recorded


def test_timing_figure_shows_the_other_phase_and_discarded_drafts() -> None:
    timed = steps()
    for s in timed:
        s.other_ms = 3.0
    timed[0] = Step(index=0, drafted=[1, 2, 3], accepted=1, rejected=[2], discarded=[3], emitted=[1, 9],
                    draft_ms=2.0, verify_ms=60.0, other_ms=3.0)
    traces = by_name(charts.timing_figure(timed))
    assert list(traces["other"]["y"]) == [3.0] * 4
    assert traces["ms / token"]["y"][0] == pytest.approx(65 / 2)  # draft + verify + other per new token
    assert "draft vs verify vs other" in charts.timing_figure(timed).layout.title.text.lower()
    bars = by_name(charts.acceptance_figure(timed))
    assert list(bars["rejected"]["y"])[0] == 1 and list(bars["discarded"]["y"])[0] == 1


def test_baseline_has_no_acceptance_line_and_says_why() -> None:
    plain = [Step(index=i, drafted=[], accepted=0, rejected=[], emitted=[i], verify_ms=50.0) for i in range(3)]
    fig = charts.acceptance_figure(plain)
    assert "acceptance %" not in by_name(fig)
    assert "Nothing drafted" in fig.layout.annotations[0].text
    assert "draft" not in by_name(charts.timing_figure(plain))  # no drafting time to show


def test_empty_figures_have_a_hint() -> None:
    """Before the first step a chart is its title and one line of hint, not a tall frame of empty axes; the replay's
    empty chart too."""
    for fig in (*charts.figures([]), *charts.figures([], current=0, total_steps=3)):
        assert fig.to_dict()["data"] == []
        assert [a.text for a in fig.layout.annotations] == [fig.layout.annotations[0].text]
        assert "appears here" in fig.layout.annotations[0].text
        assert fig.layout.height == charts.WAITING_HEIGHT < charts.HEIGHT
        assert fig.layout.xaxis.visible is False and fig.layout.yaxis.visible is False and not fig.layout.shapes
    assert all(fig.layout.height == charts.HEIGHT for fig in charts.figures(steps()))


@pytest.mark.parametrize("source", [[], steps(), [Step(index=0, drafted=[], accepted=0, rejected=[], emitted=[1])]])
def test_figures_are_valid_plotly_and_json(source: list[Step]) -> None:
    for fig in charts.figures(source):
        go.Figure(fig.to_dict())  # full validation (the live path skips it for speed)
        data = json.loads(fig.to_json())
        assert data["layout"]["paper_bgcolor"] == "rgba(0,0,0,0)"  # transparent: light and dark mode


def test_colours_match_the_token_palette() -> None:
    from playground.render import PALETTE

    traces = by_name(charts.acceptance_figure(steps()))
    assert traces["accepted"]["marker"]["color"] == PALETTE["accepted"]
    assert traces["rejected"]["marker"]["color"] == PALETTE["rejected"]
    assert traces["unverified"]["marker"]["color"] == PALETTE["unverified"]
