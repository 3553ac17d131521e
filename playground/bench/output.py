"""The benchmark's files: results.csv, results.json, report.html and traces/, and reading them back."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from .. import theory
from ..trace import Trace
from .aggregation import Aggregate, aggregate
from .measure import BenchResult
from .report import render_report
from .rows import CSV_COLUMNS, BenchRow


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def write_csv(rows: list[BenchRow], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _csv_value(v) for k, v in row.csv_record().items()})


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def results_payload(result: BenchResult) -> dict[str, Any]:
    """What results.json holds (JSON-ready)."""
    payload = {
        "meta": result.meta, "rows": [r.to_dict() for r in result.rows],
        "aggregates": [a.to_dict() for a in result.aggregates], "overhead": result.overhead(),
        "diagnoses": result.diagnoses, "theory": theory.THEORY_NOTES,
        "errors": [{"label": r.label, "question_id": r.question_id, "error": r.error or r.lossless_note}
                   for r in result.errors],
    }
    return _jsonable(payload)


def write_outputs(result: BenchResult, out_dir: str | Path, save_traces: bool = True) -> dict[str, Path]:
    """results.csv, results.json, report.html (and traces/ with each representative trace)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "results.csv", "json": out / "results.json", "html": out / "report.html"}
    write_csv(result.rows, paths["csv"])
    paths["json"].write_text(json.dumps(results_payload(result), indent=1, ensure_ascii=False, default=str),
                             encoding="utf-8")
    paths["html"].write_text(render_report(result), encoding="utf-8")
    if save_traces:
        tdir = out / "traces"
        tdir.mkdir(exist_ok=True)
        for key, by_label in result.traces.items():
            for label, trace in by_label.items():
                trace.save(tdir / _trace_filename(key, label))
    return paths


def _trace_filename(key: str, label: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in f"{key}__{label}") + ".json"


def load_result(out_dir: str | Path) -> BenchResult:
    """A finished benchmark read back from its results.json and traces/ (aggregates recomputed), e.g. to
    re-render report.html with `write_outputs(load_result(d), d)` after changing the report code."""
    out = Path(out_dir)
    data = json.loads((out / "results.json").read_text(encoding="utf-8"))
    traces: dict[str, dict[str, Trace]] = {}
    for key, by_label in (data.get("diagnoses") or {}).items():
        for label in by_label:
            path = out / "traces" / _trace_filename(key, label)
            if path.exists():
                traces.setdefault(key, {})[label] = Trace.load(path)
    rows = [BenchRow.from_dict(r) for r in data["rows"]]
    return BenchResult(meta=data["meta"], rows=rows, aggregates=aggregate(rows), diagnoses=data.get("diagnoses") or {},
                       traces=traces)


def results_table(aggregates: list[Aggregate]) -> str:
    """A Markdown table of the aggregates (for notes and the terminal)."""
    head = ("| method | category | prompts | speedup | tok/s | α | τ | draft ms/step | verify ms/step | "
            "other ms/step | Leviathan | refined | overhead |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]

    def f(x: Any, spec: str) -> str:
        return "–" if x is None else format(x, spec)

    for a in aggregates:
        lines.append(
            f"| {a.label} | {a.category} | {a.prompts} | {f(a.speedup, '.2f')} | "
            f"{f(a.tokens_per_s, '.1f')} | {f(a.alpha, '.2f')} | "
            f"{f(a.tokens_per_step, '.2f')} | {f(a.draft_ms_per_step, '.0f')} | "
            f"{f(a.verify_ms_per_step, '.0f')} | {f(a.other_ms_per_step, '.0f')} | "
            f"{f(a.theoretical_speedup, '.2f')} | "
            f"{f(a.refined_speedup, '.2f')} | {f(a.overhead, '.3f')} |"
        )
    return "\n".join(lines)
