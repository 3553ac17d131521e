"""The benchmark: method/prompt parsing, the report's arithmetic on recorded traces, mismatch detection,
the race timeline, and one small real end-to-end run on tiny checkpoints."""

from __future__ import annotations

import csv
import json

import pytest

from playground import bench, theory
from playground.bench import BenchPrompt, Measurement
from playground.cli import main as cli_main
from playground.engine import LiveRun, RunRequest, prepare
from playground.methods import MethodError
from playground.timeline import race_timeline

from test_theory import baseline_trace, make_trace, method_trace

SPEC_BENCH = bench.SPEC_BENCH_FILE  # the project's own copy

REQUIRED_COLUMNS = ["method", "label", "category", "question_id", "new_tokens", "steps", "acceptance_rate",
                    "tokens_per_step", "tokens_per_s", "speedup", "draft_ms", "verify_ms", "theoretical_speedup",
                    "lossless_ok"]


# --- what to run ------------------------------------------------------------------------------------

def test_parse_methods_from_the_issue_example():
    specs = bench.parse_methods("prompt_lookup:prompt_lookup_num_tokens=5,speculative:num_assistant_tokens=5",
                                default_assistant="bundled/gemma-3-270m")
    assert [s.method for s in specs] == ["baseline", "prompt_lookup", "speculative"]
    assert specs[1].params == {"prompt_lookup_num_tokens": 5} and specs[1].assistant is None
    assert specs[2].params == {"num_assistant_tokens": 5} and specs[2].assistant == "bundled/gemma-3-270m"
    assert specs[1].label == "prompt_lookup(prompt_lookup_num_tokens=5)"


def test_parse_methods_several_params_and_own_assistant():
    specs = bench.parse_methods("prompt_lookup:prompt_lookup_num_tokens=3,max_matching_ngram_size=1,"
                                "prompt_lookup:prompt_lookup_num_tokens=10,universal:assistant=A:num_assistant_tokens=4")
    assert [s.label for s in specs] == [
        "baseline", "prompt_lookup(prompt_lookup_num_tokens=3, max_matching_ngram_size=1)",
        "prompt_lookup(prompt_lookup_num_tokens=10)", "universal(num_assistant_tokens=4)"]
    assert specs[3].assistant == "A"


@pytest.mark.parametrize("text, message", [
    ("nope", "unknown method"),
    ("speculative", "needs an assistant"),
    ("prompt_lookup:num_assistant_tokens=3", "has no parameter"),
    ("prompt_lookup:prompt_lookup_num_tokens=0", "between 1 and 64"),
    ("prompt_lookup,prompt_lookup", "listed twice"),
    ("prompt_lookup_num_tokens=3", "before any method"),
])
def test_parse_methods_refuses_bad_input(text, message):
    with pytest.raises(MethodError, match=message):  # BenchError is a MethodError
        bench.parse_methods(text)


def test_spec_bench_ships_with_the_project_with_its_licence():
    lines = SPEC_BENCH.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 480
    assert "Apache License" in (SPEC_BENCH.parent / "LICENSE").read_text()
    assert "hemingkx/Spec-Bench" in (SPEC_BENCH.parent / "README.md").read_text()
    assert bench.load_prompts("spec-bench", ["rag"], limit=3) == bench.load_prompts(SPEC_BENCH, ["rag"], limit=3)
    assert len(bench.load_prompts("spec-bench")) == 480


def test_load_spec_bench_categories_and_limit_per_category():
    prompts = bench.load_prompts(SPEC_BENCH, ["summarization", "rag", "qa", "translation"], limit=2)
    assert [p.category for p in prompts] == ["summarization"] * 2 + ["rag"] * 2 + ["qa"] * 2 + ["translation"] * 2
    first = json.loads(next(line for line in SPEC_BENCH.read_text().splitlines()
                            if json.loads(line)["category"] == "summarization"))
    assert prompts[0].question_id == first["question_id"] and prompts[0].text == first["turns"][0]
    with pytest.raises(bench.BenchError, match="no prompts of category poetry"):
        bench.load_prompts(SPEC_BENCH, ["poetry"])


def test_load_prompts_example_set_and_bad_files(tmp_path):
    examples = bench.load_prompts(None)
    assert len(examples) == len(bench.EXAMPLE_PROMPTS) and all(p.text for p in examples)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question_id": 1, "category": "qa", "turns": ["ok"]}\n{"question_id": 2}\n')
    with pytest.raises(bench.BenchError, match=r"bad.jsonl:2: expected an object with 'turns'"):
        bench.load_prompts(bad)
    bad.write_text("not json\n")
    with pytest.raises(bench.BenchError, match="not valid JSON"):
        bench.load_prompts(bad)


# --- mismatch detection -----------------------------------------------------------------------------

def test_float32_lossless_mismatch_is_an_error():
    check = bench.check_lossless([1, 2, 3, 9], [1, 2, 3, 4], dtype="float32")
    assert check.ok is False and check.severity == "error"
    assert check.divergence is not None and check.divergence.index == 3 and "LOSSLESS VIOLATION" in check.note
    assert bench.check_lossless([1, 2, 3], [1, 2, 3], dtype="float32").ok is True


def test_bfloat16_mismatch_is_reported_with_index_and_margin():
    margin = bench.Divergence(index=5, baseline_token=4, method_token=9, p_baseline=0.41, p_method=0.40, margin=0.01)
    check = bench.check_lossless([0, 1, 2, 3, 4, 9], [0, 1, 2, 3, 4, 4], dtype="bfloat16", margin=margin)
    assert check.ok is False and check.severity == "near-tie"
    assert "index 5" in check.note and "margin 0.0100" in check.note and "near-tie" in check.note


def test_lossy_and_sampled_runs_are_not_checked():
    assert bench.check_lossless([1], [2], dtype="float32", lossy=True).severity == "n/a"
    assert bench.check_lossless([1], [2], dtype="float32", sample=True).ok is None


def test_errors_flag_float32_violations_only():
    spec, base_spec = bench.make_spec("prompt_lookup"), bench.make_spec("baseline")
    prompt = BenchPrompt(1, "qa", "p")
    base = Measurement(base_spec, traces=[baseline_trace(12)])
    run = Measurement(spec, traces=[method_trace()])
    check32 = bench.check_lossless(run.traces[0].output_ids, base.traces[0].output_ids, dtype="float32")
    row32 = bench.build_row(spec, prompt, run, base, check32)
    check16 = bench.check_lossless(run.traces[0].output_ids, base.traces[0].output_ids, dtype="bfloat16")
    row16 = bench.build_row(spec, prompt, run, base, check16)
    assert row32.lossless_ok is False and row32.first_divergence == 0
    result32 = bench.BenchResult({}, [bench.build_row(base_spec, prompt, base, base, None), row32], [], {}, {})
    result16 = bench.BenchResult({}, [bench.build_row(base_spec, prompt, base, base, None), row16], [], {}, {})
    assert len(result32.errors) == 1 and result16.errors == []


# --- the report's arithmetic on recorded traces ------------------------------------------------------

def _retimed(trace, elapsed_s):
    t = make_trace(trace.method, trace.steps, elapsed_s, trace.env["dtype"])
    return t


def test_row_medians_and_paired_speedup():
    spec, base_spec = bench.make_spec("prompt_lookup", {"prompt_lookup_num_tokens": 4}), bench.make_spec("baseline")
    prompt = BenchPrompt(7, "rag", "p")
    # baseline emits 12 tokens like the method (same length), three repeats
    b = [baseline_trace(12)] * 3
    b = [_retimed(b[0], s) for s in (1.2, 1.5, 1.2)]
    m = [_retimed(method_trace(), s) for s in (0.6, 1.0, 0.4)]
    base = Measurement(base_spec, traces=b, plain_s=[1.0, 1.5, 1.2], plain_ids=[t.output_ids for t in b])
    run = Measurement(spec, traces=m, plain_s=[0.5, 1.0, 0.5], plain_ids=[t.output_ids for t in m])
    row = bench.build_row(spec, prompt, run, base, None)
    assert row.elapsed_s == pytest.approx(0.6)  # median of 0.6, 1.0, 0.4
    assert row.tokens_per_s == pytest.approx(12 / 0.6)
    assert row.speedup == pytest.approx(2.0)  # paired ratios 2.0, 1.5, 3.0 -> median 2.0
    assert row.overhead == pytest.approx(1.0)  # 0.6/0.5, 1.0/1.0, 0.4/0.5 -> median 1.0
    assert row.speedup_plain == pytest.approx(2.0)  # 1.0/0.5, 1.5/1.0, 1.2/0.5 -> median of 2.0, 1.5, 2.4
    assert row.acceptance_rate == pytest.approx(8 / 14) and row.tokens_per_step == pytest.approx(12 / 5)
    assert row.gamma == pytest.approx(4.0) and row.c == pytest.approx(0.05) and row.verify_cost == pytest.approx(1.5)
    E = theory.expected_tokens_per_step(8 / 10, 4)  # α = accepted / judged drafts, not the share kept
    assert row.theoretical_speedup == pytest.approx(E / 1.2)
    assert row.draft_ms == pytest.approx(101) and row.verify_ms == pytest.approx(1150)
    assert row.instrumented_matches_plain is True
    assert row.position_counts == [[4, 3, 4], [4, 3, 3], [3, 1, 2], [3, 1, 1]]  # (reached, kept, judged)
    base_row = bench.build_row(base_spec, prompt, base, base, None)
    assert base_row.speedup == 1.0 and base_row.theoretical_speedup == 1.0 and base_row.lossless_ok is True


def test_aggregate_pools_over_prompts_and_categories():
    spec, base_spec = bench.make_spec("prompt_lookup"), bench.make_spec("baseline")
    rows = []
    for qid, cat, b_s, m_s in ((1, "rag", 1.2, 0.6), (2, "rag", 1.2, 1.2), (3, "qa", 2.4, 0.8)):
        prompt = BenchPrompt(qid, cat, "p")
        base = Measurement(base_spec, traces=[_retimed(baseline_trace(12), b_s)])
        run = Measurement(spec, traces=[_retimed(method_trace(), m_s)])
        rows += [bench.build_row(base_spec, prompt, base, base, None), bench.build_row(spec, prompt, run, base, None)]
    aggs = {(a.label, a.category): a for a in bench.aggregate(rows)}
    assert set(aggs) == {(label, c) for label in ("baseline", "prompt_lookup") for c in ("rag", "qa", "all")}
    rag = aggs[("prompt_lookup", "rag")]
    assert rag.prompts == 2 and rag.new_tokens == 24 and rag.steps == 10
    assert rag.speedup == pytest.approx((24 / 1.8) / (24 / 2.4))  # Σ tokens / Σ time, method over baseline
    assert rag.tokens_per_s == pytest.approx(24 / 1.8)
    assert rag.acceptance_rate == pytest.approx(16 / 28) and rag.tokens_per_step == pytest.approx(2.4)
    assert rag.draft_ms_per_step == pytest.approx(202 / 10) and rag.verify_ms_per_step == pytest.approx(2300 / 10)
    assert rag.position_counts == [[8, 6, 8], [8, 6, 6], [6, 2, 4], [6, 2, 2]]
    assert rag.position_acceptance == [0.75, 0.75, pytest.approx(1 / 3), pytest.approx(1 / 3)]
    assert rag.position_acceptance_judged == [0.75, 1.0, 0.5, 1.0]
    assert rag.gamma == pytest.approx(4.0) and rag.empty_draft_fraction == pytest.approx(0.2)
    assert rag.alpha == pytest.approx(16 / 20)  # Σ kept / Σ judged over the pooled positions
    E = theory.expected_tokens_per_step(16 / 20, 4)
    assert rag.theoretical_speedup == pytest.approx(E / (4 * 0.05 + 1))
    assert rag.with_verify_cost == pytest.approx(E / (4 * 0.05 + 1.5))
    everything = aggs[("prompt_lookup", "all")]
    assert everything.speedup == pytest.approx((36 / 2.6) / (36 / 4.8))
    assert aggs[("baseline", "all")].speedup == pytest.approx(1.0)
    assert everything.explanation


def test_csv_has_the_required_columns_in_order(tmp_path):
    spec, base_spec = bench.make_spec("prompt_lookup"), bench.make_spec("baseline")
    prompt = BenchPrompt(1, "qa", "p")
    base = Measurement(base_spec, traces=[baseline_trace(12)])
    run = Measurement(spec, traces=[method_trace()])
    rows = [bench.build_row(base_spec, prompt, base, base, None), bench.build_row(spec, prompt, run, base, None)]
    path = tmp_path / "results.csv"
    bench.write_csv(rows, path)
    with path.open() as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames is not None and reader.fieldnames[: len(REQUIRED_COLUMNS)] == REQUIRED_COLUMNS
        read = list(reader)
    assert [r["method"] for r in read] == ["baseline", "prompt_lookup"]
    assert float(read[1]["acceptance_rate"]) == pytest.approx(8 / 14, rel=1e-5)
    assert read[0]["acceptance_rate"] == ""  # baseline drafts nothing


def test_race_timeline_cumulates_step_times():
    tl = race_timeline(baseline_trace(4), method_trace())
    base, run = tl["lanes"]
    assert [(p["t_ms"], p["tokens"]) for p in base["points"]] == [(0, 0), (500, 1), (600, 2), (700, 3), (800, 4)]
    assert [(p["t_ms"], p["tokens"]) for p in run["points"]] == [(0, 0), (640, 3), (810, 8), (911, 9), (1081, 10),
                                                                 (1251, 12)]
    assert run["points"][2]["text"] == "<5><6><7><8><10>"
    assert tl["duration_ms"] == 1251 and tl["winner"] == "baseline"


# --- real runs on tiny checkpoints ------------------------------------------------------------------

def test_divergence_margin_reads_the_target(store, tiny_models):
    prepared = prepare(RunRequest(prompt="The quick brown fox", target=tiny_models["target"], dtype="float32",
                                  max_new_tokens=6), store)
    ids = LiveRun(prepared).run().output_ids
    other = ids[:3] + [(ids[3] + 1) % 300] + ids[4:]
    div = bench.divergence_margin(prepared, ids, other, 3)
    assert div.index == 3 and div.baseline_token == ids[3] and div.method_token == other[3]
    assert div.p_method is not None and div.p_baseline is not None and div.margin is not None
    assert 0 <= div.p_method <= div.p_baseline <= 1  # greedy picked the most probable token
    assert div.margin == pytest.approx(div.p_baseline - div.p_method)


def test_compare_on_prompt_real_tiny_models(store, tiny_models):
    specs = bench.parse_methods("prompt_lookup:prompt_lookup_num_tokens=4,speculative:num_assistant_tokens=3",
                                default_assistant=tiny_models["noisy"])
    seen: list[str] = []
    result = bench.compare_on_prompt(bench.EXAMPLE_PROMPTS[0]["turns"][0], specs[1:], target=tiny_models["target"],
                                     max_new_tokens=10, dtype="float32", repeats=2, store=store, progress=seen.append)
    assert [r.method for r in result.rows] == ["baseline", "prompt_lookup", "speculative"]  # baseline added
    assert all(r.repeats == 2 and r.lossless_ok is True and r.instrumented_matches_plain for r in result.rows)
    assert any("warm-up" in s for s in seen) and any("rep 2/2" in s for s in seen)
    assert set(result.traces) == {s.label for s in specs}
    assert result.diagnoses["baseline"][0].startswith("Baseline")
    assert result.diagnoses[specs[2].label][0].startswith("This run was")
    spec_row = result.rows[2]
    assert spec_row.gamma is not None and spec_row.gamma > 1  # draft length 3 honoured (no 0.4 threshold cut)
    tl = race_timeline(result.traces["baseline"], result.traces[specs[1].label])
    assert tl["lanes"][1]["new_tokens"] == result.rows[1].new_tokens
    from playground import charts
    from playground.bench import compare_figures, figures

    shown = compare_figures(result)
    assert {"speedup_vs_theory", "position_acceptance", "step_cost", "throughput"} <= set(shown)
    for name, fig in shown.items():  # the Compare tab follows Gradio's light or dark page
        layout = fig.layout
        assert layout.paper_bgcolor == layout.plot_bgcolor == "rgba(0,0,0,0)", name
        assert layout.font.color == charts.TEXT and layout.yaxis.gridcolor == charts.GRID, name
        # Value labels drawn above the bars are not clipped by the plot area.
        assert all(t.cliponaxis is False for t in fig.data if t.type == "bar"), name
    report = figures(result.aggregates)["step_cost"]  # the HTML report stays on its white page
    assert report.layout.paper_bgcolor is None and report.layout.template.layout.paper_bgcolor == "white"


def test_bench_cli_end_to_end(tmp_path, tiny_models, capsys):
    prompts = tmp_path / "q.jsonl"
    prompts.write_text("\n".join(json.dumps(r) for r in [
        {"question_id": 1, "category": "rag", "turns": ["One, two, three, four, five. One, two, three,"]},
        {"question_id": 2, "category": "qa", "turns": ["The capital of France is Paris. The capital of"]},
        {"question_id": 3, "category": "qa", "turns": ["not used: the limit is 1 per category"]},
    ]) + "\n")
    out = tmp_path / "out"
    code = cli_main(["bench", "--prompts", str(prompts), "--limit", "1", "--target", tiny_models["target"],
                     "--methods", "prompt_lookup:prompt_lookup_num_tokens=3", "--max-new-tokens", "8",
                     "--repeats", "1", "--dtype", "float32", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "[1/2 rag #1]" in captured.err and "[2/2 qa #2]" in captured.err  # progress on stderr
    assert "instrumentation overhead" in captured.out
    with (out / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 4 and {r["question_id"] for r in rows} == {"1", "2"}
    assert all(r["lossless_ok"] == "True" for r in rows)
    data = json.loads((out / "results.json").read_text())
    assert {a["category"] for a in data["aggregates"]} == {"rag", "qa", "all"}
    assert data["overhead"]["runs"] == 4 and data["meta"]["env"]["dtype"] == "float32"
    html = (out / "report.html").read_text()
    assert "Theory beside measurement" in html and "Plotly.newPlot" in html
    assert "<script src=" not in html and "<script type='text/javascript'>" in html  # plotly.js inlined, no CDN
    assert "Instrumentation overhead" in html and "Lossless check" in html
    assert len(list((out / "traces").glob("*.json"))) == 4


# --- typed records --------------------------------------------------------------------------------------

def _two_rows():
    spec, base_spec = bench.make_spec("prompt_lookup"), bench.make_spec("baseline")
    prompt = BenchPrompt(1, "qa", "p")
    base = Measurement(base_spec, traces=[baseline_trace(12)], plain_s=[1.0], plain_ids=[baseline_trace(12).output_ids])
    run = Measurement(spec, traces=[method_trace()], plain_s=[0.5], plain_ids=[method_trace().output_ids])
    check = bench.check_lossless(run.traces[0].output_ids, base.traces[0].output_ids, dtype="bfloat16")
    return [bench.build_row(base_spec, prompt, base, base, None), bench.build_row(spec, prompt, run, base, check)]


def test_rows_and_aggregates_round_trip_through_json():
    rows = _two_rows()
    assert list(rows[1].to_dict())[: len(bench.CSV_COLUMNS)] == bench.CSV_COLUMNS  # JSON keys in the CSV's order
    again = [bench.BenchRow.from_dict(json.loads(json.dumps(r.to_dict()))) for r in rows]
    assert again == rows and again[1].divergence is not None and again[1].divergence.index == 0 and again[1].lossless_severity == "near-tie"
    aggs = bench.aggregate(rows)
    assert [bench.Aggregate.from_dict(json.loads(json.dumps(a.to_dict()))) for a in aggs] == aggs


def test_rows_refuse_contradictions_and_unknown_fields():
    row = _two_rows()[1].to_dict()
    with pytest.raises(bench.BenchError, match="more tokens accepted than drafted"):
        bench.BenchRow.from_dict({**row, "accepted": row["drafted"] + 1})
    with pytest.raises(bench.BenchError, match="unknown field"):
        bench.BenchRow.from_dict({**row, "speed": 2})
    with pytest.raises(bench.BenchError, match="a failed run has no figures"):
        bench.BenchRow.from_dict({**row, "error": "out of memory"})
    agg = bench.aggregate(_two_rows())[1].to_dict()
    with pytest.raises(bench.BenchError, match="pools no prompt"):
        bench.Aggregate.from_dict({**agg, "prompts": 0})


def test_rows_are_read_by_the_one_record_reader():
    """The reader trace.py uses for traces builds the nested divergence and refuses what to_dict never writes."""
    row = _two_rows()[1].to_dict()
    assert isinstance(bench.BenchRow.from_dict(row).divergence, bench.Divergence)
    with pytest.raises(bench.BenchError, match=r"^divergence: unknown field\(s\) speed$"):
        bench.BenchRow.from_dict({**row, "divergence": {**row["divergence"], "speed": 2}})
    with pytest.raises(bench.BenchError, match="^a divergence must be a JSON object$"):
        bench.BenchRow.from_dict({**row, "divergence": "index 0"})
    with pytest.raises(bench.BenchError, match="^benchmark row: no 'label'$"):
        bench.BenchRow.from_dict({k: v for k, v in row.items() if k != "label"})
    with pytest.raises(bench.BenchError, match="^a benchmark aggregate must be a JSON object$"):
        bench.Aggregate.from_dict([1, 2])


def test_a_failed_warm_up_is_said_and_not_measured_as_if_warm(store, tiny_models, monkeypatch):
    """A method whose warm-up fails gets the failure in its row and in the progress lines, and is not measured
    cold (the warm-up's failure was swallowed: the method was measured as if it had warmed up)."""
    from playground.engine.prepared import PreparedRun

    specs = bench.parse_methods("prompt_lookup:prompt_lookup_num_tokens=4")
    warm_up = PreparedRun.with_max_new_tokens

    def failing_for_prompt_lookup(self, n):
        if self.method.name == "prompt_lookup":
            raise MethodError("the warm-up's own fault")
        return warm_up(self, n)

    monkeypatch.setattr(PreparedRun, "with_max_new_tokens", failing_for_prompt_lookup)
    seen: list[str] = []
    result = bench.compare_on_prompt("One, two, three, four,", specs, target=tiny_models["target"],
                                     max_new_tokens=6, dtype="float32", repeats=1, store=store, progress=seen.append,
                                     measure_overhead=False)
    row = {r.method: r for r in result.rows}
    assert "the warm-up's own fault" in row["prompt_lookup"].error and not row["prompt_lookup"].new_tokens
    assert any("prompt_lookup" in line and "the warm-up's own fault" in line for line in seen), seen
    assert not row["baseline"].error and row["baseline"].new_tokens
