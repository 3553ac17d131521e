"""Record the gallery: run each `playground.gallery.GALLERY` recording on the bundled models and save its trace.

The traces are real runs (float32 on this machine's CPU; timings are this machine's), written compactly to
playground/data/gallery/<key>.json with the step microscope's top-k kept (PLAYGROUND_TOP_K, 5 by default), and the
folder's README.md is rewritten with the command, the date and the environment. Not a test: run it by hand when the
recordings' requests, the trace schema or the bundled models change.

    python tests/measure/record_gallery.py [KEY ...]     # every recording, or only the keys named
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
# A recording must run to its end: the page's run time limit (300 s) cut two of the first recordings on a busy machine.
os.environ.setdefault("PLAYGROUND_RUN_TIMEOUT_S", "3600")

from playground.engine import run  # noqa: E402
from playground.gallery import GALLERY, GALLERY_DIR, RECORDED_DTYPE, RECORDED_TOKENS, get_recording  # noqa: E402
from playground.trace import Trace, check_invariants  # noqa: E402

COMMAND = "python tests/measure/record_gallery.py"


def describe(key: str, trace: Trace, size: int) -> str:
    s = trace.summary
    acceptance = "n/a" if s.acceptance_rate is None else f"{s.acceptance_rate:.0%} ({s.accepted}/{s.drafted})"
    return (f"{key}: {s.new_tokens} tokens in {s.steps} steps ({s.tokens_per_step:.2f}/step), acceptance {acceptance}, "
            f"{s.elapsed_s:.1f} s, {size // 1024} KB")


def record(keys: list[str]) -> None:
    """Run and save the named recordings (all when none)."""
    for recording in [get_recording(k) for k in keys] if keys else GALLERY:
        started = time.perf_counter()
        trace = run(recording.request())
        check_invariants(trace)
        text = trace.to_json(indent=None) + "\n"
        recording.path.write_text(text, encoding="utf-8")
        Trace.load(recording.path)  # what the page will read: it must load back
        print(describe(recording.key, trace, len(text.encode())), f"(recorded in {time.perf_counter() - started:.0f} s)",
              flush=True)


def write_readme() -> None:
    """The folder's README from the recordings on disk (all must be there)."""
    traces = [(r, Trace.load(r.path)) for r in GALLERY]
    env = traces[0][1].env
    day = datetime.datetime.fromtimestamp(max(r.path.stat().st_mtime for r in GALLERY)).date().isoformat()
    body = "\n".join(f"- {describe(r.key, trace, r.path.stat().st_size)}" for r, trace in traces)
    (GALLERY_DIR / "README.md").write_text(f"""# The gallery's recorded runs

Real runs of the bundled models (Gemma 3 270M; its first 12 layers, built from it at first use, as the greedy
speculative drafter; SmolLM2-135M-Instruct as the universal assistant), one per method that runs offline and per
decoding, opened by the page's "Step through a run" tab without loading a model. What each
asks is `playground/gallery.py`'s `GALLERY`; what to look at in each is `gallery.<key>.look` in the locales.

Made by `{COMMAND}` ({RECORDED_DTYPE}, {RECORDED_TOKENS} new tokens, last on {day}; torch {env.get('torch')},
transformers {env.get('transformers')}, {env.get('threads')} threads on {env.get('device')}). Timings are that
machine's (AMD EPYC, AVX512-BF16, nothing else running): two CPU cores, slower than a GPU Space.

{body}
""", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("keys", nargs="*", help="recordings to make (default: all)")
    args = parser.parse_args()
    GALLERY_DIR.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    record(args.keys)
    print(f"all recorded in {time.perf_counter() - started:.0f} s", flush=True)
    if all(r.path.is_file() for r in GALLERY):
        write_readme()


if __name__ == "__main__":
    main()
