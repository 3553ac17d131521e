"""The gallery of recorded runs: every recording is a real, valid trace of what its request asks (the current defaults
of the bundled models), small enough to ship, titled and explained in every language, and opens in the replay."""

from __future__ import annotations

import json

import gradio as gr
import pytest

from playground import gallery, i18n
from playground.app.gallery_picker import LOOK, localized_choices, look_html, on_gallery_pick
from playground.app import replay_tab
from playground.app.replay_tab import LOADED, replay_from_the_start, replay_load
from playground.errors import PlaygroundError
from playground.methods import METHODS
from playground.request import method_for
from playground.trace import Trace, check_invariants

MAX_GALLERY_BYTES = 600 * 1024  # the whole folder: it ships with every clone


class FakeRequest:
    """What a handler reads of Gradio's request: the visitor's language."""

    def __init__(self, lang: str) -> None:
        self.query_params = {"lang": lang}
        self.headers: dict[str, str] = {}
        self.session_hash = "test"


@pytest.mark.parametrize("recording", gallery.GALLERY, ids=lambda r: r.key)
def test_each_recording_is_a_valid_trace_of_its_request(recording):
    data = json.loads(recording.path.read_text(encoding="utf-8"))
    trace = Trace.from_dict(data)  # every field checked as untrusted input, invariants included
    check_invariants(trace)
    request = recording.request()
    assert (trace.method, trace.target, trace.assistant) == (request.method, request.target, request.assistant)
    assert trace.prompt == request.prompt and trace.chat is False  # a base model: the raw prompt
    assert {k: v for k, v in trace.decoding.items() if k != "recorded_top_k"} == request.decoding()
    assert trace.env["dtype"] == gallery.RECORDED_DTYPE
    # Recorded with the parameters a run of these settings takes today (the target's own defaults included).
    assert trace.params == method_for(request.method, request.target).resolve_params(request.params)
    assert trace.summary.new_tokens == len(trace.output_ids) > 0
    if METHODS[trace.method].drafts:
        assert trace.summary.drafted > 0
        assert any(step.dists for step in trace.steps), "the step microscope needs the top-k distributions"


def test_the_gallery_covers_every_offline_method_greedy_and_sampling():
    kinds = {(r.method, r.sample) for r in gallery.GALLERY}
    for method in ("speculative", "prompt_lookup", "early_exit", "universal"):
        assert {(method, False), (method, True)} <= kinds
    assert ("baseline", False) in kinds
    assert len({r.key for r in gallery.GALLERY}) == len(gallery.GALLERY)


def test_the_gallery_is_small_enough_to_ship():
    total = sum(r.path.stat().st_size for r in gallery.GALLERY)
    assert total <= MAX_GALLERY_BYTES, f"{total // 1024} KB"
    readme = (gallery.GALLERY_DIR / "README.md").read_text(encoding="utf-8")
    assert "python tests/measure/record_gallery.py" in readme
    assert all(r.key in readme for r in gallery.GALLERY)


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_every_recording_has_its_title_and_line_in_each_language(lang):
    strings = i18n.catalogue(lang)
    for recording in gallery.GALLERY:
        for part in ("title", "look"):
            assert strings.get(f"gallery.{recording.key}.{part}"), (lang, recording.key, part)
    assert [title for title, _ in gallery.choices(lang)] == [strings[f"gallery.{r.key}.title"] for r in gallery.GALLERY]


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_picking_a_recording_opens_it_in_the_replay(lang):
    request = FakeRequest(lang)
    for recording in gallery.GALLERY:
        out = (LOADED + LOOK).read(on_gallery_pick(replay_from_the_start, LOADED, recording.key, request))
        trace = gallery.load(recording.key)
        expected = LOADED.read(replay_load(trace, "", lang, at=1))
        assert out["trace"] is trace
        # A recording is a lesson to step through: it opens at step 1, not at its end (issue 47).
        assert out["slider"]["maximum"] == max(len(trace.steps), 2) and out["slider"]["value"] == 1
        assert recording.title(lang) in out["status"]  # the status names the recording
        assert out["tokens"] == expected["tokens"]  # the coloured text of step 1, as a replay of the file draws it
        assert out["tokens"] != LOADED.read(replay_load(trace, "", lang))["tokens"]  # not the last step's
        assert out["look"] == look_html(recording.key, lang)
        assert recording.look(lang)[:20] in out["look"].replace("&#x27;", "'")
    assert localized_choices(request)["choices"] == gallery.choices(lang)


def test_clearing_the_picker_changes_nothing_and_an_unknown_key_is_refused():
    for cleared in (None, ""):
        out = on_gallery_pick(replay_load, LOADED, cleared)
        assert len(out) == len(LOADED) + 1 and all(item == gr.skip() for item in out)
    with pytest.raises(PlaygroundError, match="baseline-greedy"):
        on_gallery_pick(replay_load, LOADED, "../../etc/passwd")


def test_the_page_opens_a_picked_recording_at_step_1():
    """The replay tab wires the picker to the opener at step 1 (its source, read: the wiring is one call)."""
    import inspect

    source = inspect.getsource(replay_tab.build_replay)
    assert "gallery_picker.wire(demo, gallery, gallery_look, views, LOADED, replay_from_the_start)" in source


@pytest.mark.parametrize("recording", [r for r in gallery.GALLERY if r.sample], ids=lambda r: r.key)
def test_sampling_recordings_keep_the_draws_that_decided(recording):
    """Speculative sampling's r at each judged draft (schema 4): the microscope shows r against min(1, p/q)."""
    from playground import microscope

    trace = gallery.load(recording.key)
    judged = [(step, i) for step in trace.steps for i in range(min(len(step.drafted), step.accepted + 1))
              if step.q is not None and step.drafted]
    if not judged:  # prompt lookup has no q: the target's own draw decides, nothing to keep
        return
    assert all(step.draws is not None and len(step.draws) >= i + 1 for step, i in judged)
    refused = [(s, s.accepted) for s in trace.steps if s.rejected and s.q is not None]
    assert refused, "a sampling recording to teach from shows a refusal"
    for step, i in refused:
        verdict = microscope.explain(step, i, trace.decoding)
        assert verdict.draw is not None and verdict.acceptance is not None and verdict.draw > verdict.acceptance


def test_the_speculative_greedy_recording_drafts_with_the_derived_drafter_and_is_refused():
    """The page's offline drafter for speculative decoding (Gemma's first 12 layers), not Gemma drafting for itself
    (every draft kept): the recording shows refusals, each followed by the target's correction, and its line says so
    with the recording's own tokens per step."""
    from playground.models import GEMMA_FIRST_LAYERS

    trace = gallery.load("speculative-greedy")
    assert trace.assistant == GEMMA_FIRST_LAYERS != trace.target
    refusing = [step for step in trace.steps if step.rejected]
    assert refusing and 0 < trace.summary.accepted < trace.summary.drafted
    assert all(step.emitted[step.accepted] != step.rejected[0] for step in refusing)  # the correction differs
    assert trace.summary.tokens_per_step is not None
    for lang in i18n.LANGUAGES:
        look = gallery.get_recording("speculative-greedy").look(lang)
        assert i18n.number(trace.summary.tokens_per_step, lang, ".2f") in look and "12" in look
