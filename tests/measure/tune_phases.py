"""Where a predicted time goes wrong: tune's predicted phases beside a real run's, step by step (a benchmark).

Usage (the figures need a quiet machine):

    python tests/measure/tune_phases.py --category translation \
        --settings "num_assistant_tokens=1;num_assistant_tokens=1,assistant_confidence_threshold=0.4;num_assistant_tokens=5"

One tune pass (baseline, drafter pass, calibration) on the first Spec-Bench prompt of `--category`, then each
setting run for real through the engine. A run's trace times every step's phases (draft, verify, other), so the
prediction is compared phase by phase on the run's own steps (its own draft lengths, so a count that differs in
bfloat16 does not blur the comparison): the first step with the set-up, Σ draft, Σ verify and Σ other over the
later steps, and per draft length the median measured draft and verify phase beside the calibrated call and
forward. Ratios of phases within one run do not depend on the machine's pace; the calibration table is printed
as well (seconds, at the calibration's pace; × scale is what a prediction charges).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from playground.bench import load_prompts  # noqa: E402
from playground.engine import RunRequest  # noqa: E402
from playground.models import DEFAULT_TARGET, STORE  # noqa: E402
from playground.tune import (  # noqa: E402
    Calibration, Setting, TuneRequest, pace_ratios, replay_of, run_setting, tune_prompt,
)


def parse_settings(method: str, text: str) -> list[Setting]:
    """`a=1,b=x;a=2` → settings of `method` (values read as JSON where they parse, else as strings)."""
    out = []
    for spec in filter(None, (s.strip() for s in text.split(";"))):
        values: dict[str, Any] = {}
        for pair in spec.split(","):
            key, _, raw = pair.partition("=")
            try:
                values[key.strip()] = json.loads(raw)
            except json.JSONDecodeError:
                values[key.strip()] = raw.strip()
        out.append(Setting.of(method, values))
    return out


def phases(trace: Any, calibration: Calibration, ngram: int | None) -> dict[str, Any]:
    """Predicted beside measured, phase by phase, on the run's own steps (seconds)."""
    scale = calibration.scale
    steps = trace.steps

    def draft(step: Any) -> float:
        if ngram is not None:
            return calibration.lookup_call_s.get(ngram, 0.0) * scale
        return calibration.drafter_call(len(step.drafted)) * scale

    first = steps[0]
    later = steps[1:]
    predicted_first = calibration.predict_s(steps[:1], ngram)
    measured_first = (trace.setup_ms + first.draft_ms + first.verify_ms + (first.other_ms or 0.0)) / 1000
    first_parts = {"setup": trace.setup_ms / 1000, "draft": first.draft_ms / 1000, "verify": first.verify_ms / 1000,
                   "other": (first.other_ms or 0.0) / 1000}
    ratios = pace_ratios(trace, calibration, ngram)
    calibrated_draft = sum(draft(st) for st in later) / scale if scale else 0.0
    calibrated_verify = sum(calibration.forward(len(st.drafted) + 1) for st in later)
    half = len(ratios) // 2
    by_length: dict[int, list[Any]] = defaultdict(list)
    for st in later:
        by_length[len(st.drafted)].append(st)
    return {
        "steps": len(steps), "elapsed_s": trace.summary.elapsed_s,
        "predicted_s": calibration.predict_s(steps, ngram),
        "first": (predicted_first, measured_first), "first_parts": first_parts,
        "draft": (sum(draft(st) for st in later), sum(st.draft_ms for st in later) / 1000),
        "verify": (sum(calibration.forward(len(st.drafted) + 1) * scale for st in later),
                   sum(st.verify_ms for st in later) / 1000),
        "other": (calibration.loop_s * len(later), sum((st.other_ms or 0.0) for st in later) / 1000),
        # the run's own pace ÷ the calibration's (what `scale` would have been, taken from this run): the median of
        # its steps' ratios, its first and second half apart, and Σ measured ÷ Σ calibrated per phase
        "pace": statistics.median(ratios) if ratios else None, "step_ratios": ratios,
        "pace_halves": (statistics.median(ratios[:half]) if half else None,
                        statistics.median(ratios[half:]) if ratios[half:] else None),
        "draft_pace": sum(st.draft_ms for st in later) / 1000 / calibrated_draft if calibrated_draft else None,
        "verify_pace": sum(st.verify_ms for st in later) / 1000 / calibrated_verify if calibrated_verify else None,
        "by_length": {length: {"steps": len(group),
                               "draft": (draft(group[0]), statistics.median(st.draft_ms for st in group) / 1000),
                               "verify": (calibration.forward(length + 1) * scale,
                                          statistics.median(st.verify_ms for st in group) / 1000),
                               "other": (calibration.loop_s,
                                         statistics.median((st.other_ms or 0.0) for st in group) / 1000)}
                      for length, group in sorted(by_length.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--method", default="speculative")
    parser.add_argument("--category", default="translation")
    parser.add_argument("--prompt-index", type=int, default=0, help="which prompt of the category (0: the first)")
    parser.add_argument("--settings", default="num_assistant_tokens=1;"
                        "num_assistant_tokens=1,assistant_confidence_threshold=0.4;num_assistant_tokens=5")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-draft", type=int, default=6)
    parser.add_argument("--exit-layer", type=int, default=9)
    parser.add_argument("--repeats", type=int, default=1, help="real runs per setting")
    parser.add_argument("--json", default="")
    args = parser.parse_args()

    replay = replay_of(args.method)
    prompt = load_prompts("spec-bench", [args.category], args.prompt_index + 1)[args.prompt_index].text
    assistant = DEFAULT_TARGET if replay.model_pass and not replay.exit_layer_param else None
    params = {replay.exit_layer_param: args.exit_layer} if replay.exit_layer_param else {}
    run = RunRequest(prompt=prompt, target=DEFAULT_TARGET, method=args.method, assistant=assistant, params=params,
                     max_new_tokens=args.max_new_tokens, dtype=args.dtype)
    settings = parse_settings(args.method, args.settings)
    request = TuneRequest(run=run, max_draft=args.max_draft, ngram_sizes=(1, 2, 3),
                          schedules=("constant", "heuristic"), thresholds=(0.0, 0.4))
    result = tune_prompt(request, STORE)
    c = result.calibration
    record: dict[str, Any] = {"args": vars(args), "calibration": {
        "scale": c.scale, "baseline_forward_s": c.baseline_forward_s, "baseline_first_step_s": c.baseline_first_step_s,
        "loop_s": c.loop_s, "drafter_prefill_s": c.drafter_prefill_s, "pace_change": c.pace_change,
        "method_first_step_s": c.method_first_step_s, "method_first_draft": c.method_first_draft,
        "method_pace": c.method_pace, "method_pace_steps": c.method_pace_steps,
        "target_forward_s": c.target_forward_s, "drafter_call_s": c.drafter_call_s, "lookup_call_s": c.lookup_call_s},
        "baseline_s": result.baseline_s, "baseline_run_s": result.baseline_run_s, "runs": []}
    print(f"{args.method} · {args.category} · prompt {args.prompt_index + 1} · {result.env.get('dtype')} · "
          f"baseline {result.baseline_s:.3f} s (the speedups' reference; its run {result.baseline_run_s:.3f} s)")
    print(f"calibration: scale {c.scale:.3f}, baseline forward {c.baseline_forward_s * 1000:.1f} ms, loop "
          f"{c.loop_s * 1000:.1f} ms, first step {c.baseline_first_step_s * 1000:.1f} ms, drafter prefill "
          f"{c.drafter_prefill_s * 1000:.1f} ms, pace change {c.pace_change:.2f}")
    print(f"the method's short run: first step {c.method_first_step_s * 1000:.1f} ms (draft of "
          f"{c.method_first_draft}), loop (median other) {c.loop_s * 1000:.1f} ms, its pace ÷ the calibration's "
          f"{c.method_pace:.3f} (the scale where set; its steps: "
          f"{', '.join(f'{r:.3f}' for r in c.method_pace_steps)})")
    print("  width/length  forward(w)  drafter call(L)   (ms, at the calibration's pace)")
    for k in sorted(set(c.target_forward_s) | set(c.drafter_call_s)):
        fwd = c.target_forward_s.get(k)
        call = c.drafter_call_s.get(k)
        print(f"  {k:>12}  {fwd * 1000 if fwd else float('nan'):>10.1f}  {call * 1000 if call else float('nan'):>15.1f}")
    scale_used = c.scale
    for setting in settings:
        row = result.row(setting)
        if row is None or row.predicted is None:
            print(f"\n{setting.label}: not in the sweep (or refused)")
            continue
        ngram = None if replay.model_pass else int(setting.values["max_matching_ngram_size"])
        for k in range(args.repeats):
            trace = run_setting(run, setting, STORE)
            ph = phases(trace, c, ngram)
            ph["setting"], ph["repeat"] = setting.label, k + 1
            ph["predicted_counts"] = row.predicted.counts()
            ph["measured_counts"] = (trace.summary.steps, trace.summary.drafted, trace.summary.accepted)
            record["runs"].append(ph)
            print(f"\n{setting.label} (run {k + 1}): predicted {row.predicted.time_s:.3f} s (on its own steps "
                  f"{ph['predicted_s']:.3f} s), measured {ph['elapsed_s']:.3f} s, ratio "
                  f"{row.predicted.time_s / ph['elapsed_s']:.2f}; counts {ph['predicted_counts']} vs "
                  f"{ph['measured_counts']}")
            print(f"  {'phase':10} {'predicted':>10} {'measured':>10} {'ratio':>6}")
            for name in ("first", "draft", "verify", "other"):
                p, m = ph[name]
                print(f"  {name:10} {p:>9.3f}s {m:>9.3f}s {p / m if m else float('nan'):>6.2f}")
            fmt = lambda x: f"{x:.3f}" if x is not None else "-"  # noqa: E731
            print(f"  this run's pace ÷ the calibration's: {fmt(ph['pace'])} (halves {fmt(ph['pace_halves'][0])}, "
                  f"{fmt(ph['pace_halves'][1])}; draft {fmt(ph['draft_pace'])}, verify {fmt(ph['verify_pace'])}) "
                  f"against the scale {scale_used:.3f}")
            print("  first step measured: " + ", ".join(f"{k} {v:.3f} s" for k, v in ph["first_parts"].items()))
            print(f"  {'length':>6} {'steps':>5}  {'draft pred/meas (ms)':>22}  {'verify pred/meas':>18}  "
                  f"{'other pred/meas':>17}")
            for length, g in ph["by_length"].items():
                print(f"  {length:>6} {g['steps']:>5}  {g['draft'][0] * 1000:>10.1f} {g['draft'][1] * 1000:>10.1f}  "
                      f"{g['verify'][0] * 1000:>8.1f} {g['verify'][1] * 1000:>8.1f}  "
                      f"{g['other'][0] * 1000:>8.1f} {g['other'][1] * 1000:>8.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
