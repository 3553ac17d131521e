"""What the benchmark runs on: prompts from Spec-Bench (carried with the project), a Spec-Bench-style JSONL,
or the project's own example set."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from .. import examples
from ..outside import read_text_bounded
from .specs import BenchError

# The project's own small example set, in Spec-Bench's format. Written for a base model (the
# bundled Gemma 3 270M continues the text); a chat model gets them through its chat template.
EXAMPLE_PROMPTS: list[dict[str, Any]] = [
    {"question_id": e.question_id, "category": e.category, "turns": [e.text]} for e in examples.EXAMPLES
]

# Spec-Bench's 480 questions (Apache-2.0), carried with the project: see data/spec_bench/README.md.
SPEC_BENCH_FILE = Path(__file__).resolve().parent.parent / "data" / "spec_bench" / "question.jsonl"
SPEC_BENCH_NAME = "spec-bench"


@dataclass(frozen=True)
class BenchPrompt:
    question_id: Any
    category: str
    text: str


def _read_jsonl(p: Path) -> list[dict[str, Any]]:
    """The records of a Spec-Bench-style JSONL file, each checked for a first turn."""
    try:
        lines = read_text_bounded(p).splitlines()  # an endless file stops at the input limit (InputTooLarge)
    except OSError as exc:
        raise BenchError(f"cannot read prompt file {p}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise BenchError(f"{p}: not UTF-8 text (byte {exc.start})") from None
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BenchError(f"{p}:{number}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("turns"), list) or not record["turns"] \
                or not isinstance(record["turns"][0], str):
            raise BenchError(f"{p}:{number}: expected an object with 'turns' (a list of strings), as in Spec-Bench")
        records.append(record)
    return records


def load_prompts(path: str | Path | None = None, categories: Sequence[str] | None = None,
                 limit: int | None = None) -> list[BenchPrompt]:
    """Prompts from a Spec-Bench-style JSONL (first turn), the bundled Spec-Bench set ('spec-bench') or the
    example set (None or 'examples'); `limit` is per category."""
    named = None  # how a message names the set: the bundled one by its name, never by the server's path to it
    if path is not None and str(path) == SPEC_BENCH_NAME:
        path, named = SPEC_BENCH_FILE, "Spec-Bench"
    records: Iterable[dict[str, Any]]
    if path is None or str(path) == "examples":
        records = EXAMPLE_PROMPTS
        source = "the example set"
    else:
        records = _read_jsonl(Path(path))
        source = named or str(Path(path))
    prompts = [BenchPrompt(r.get("question_id", i), str(r.get("category", "uncategorized")), r["turns"][0])
               for i, r in enumerate(records)]
    if categories:
        wanted = [c.strip() for c in categories if c.strip()]
        available = sorted({p.category for p in prompts})
        unknown = [c for c in wanted if c not in available]
        if unknown:
            raise BenchError(f"no prompts of category {', '.join(unknown)} in {source}; it has: {', '.join(available)}")
        prompts = [p for c in wanted for p in prompts if p.category == c]
    if limit is not None:
        if limit < 1:
            raise BenchError(f"--limit must be at least 1; got {limit}")
        seen: dict[str, int] = {}
        kept = []
        for p in prompts:
            seen[p.category] = seen.get(p.category, 0) + 1
            if seen[p.category] <= limit:
                kept.append(p)
        prompts = kept
    if not prompts:
        raise BenchError(f"no prompts selected from {source}")
    return prompts
