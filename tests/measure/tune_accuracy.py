"""How true tune's predicted times come: predicted beside measured on the bundled models (a benchmark, not a test).

Usage (the figures need a quiet machine; about half an hour with the defaults):

    python tests/measure/tune_accuracy.py
    python tests/measure/tune_accuracy.py --dtype float32 --max-new-tokens 64 --per-category 2 --extra 2
    python tests/measure/tune_accuracy.py --methods prompt_lookup --max-new-tokens 12 --per-category 1 --max-draft 2  # a smoke run
    python tests/measure/tune_accuracy.py --json tune_accuracy.json  # also the JSON of everything printed
    python tests/measure/tune_accuracy.py --repeat 3  # each measured setting run 3 times in rounds: its median, and the spread
    python tests/measure/tune_accuracy.py --reread tune_accuracy.json  # no runs: a stored --json's speedups, two baselines

For every method tune can replay (the registry's `draft_replay`) on the bundled Gemma 3 270M (speculative: the
bundled Gemma drafting for itself, the only same-tokenizer pair bundled; early exit: its first half of layers),
over prompts of three Spec-Bench categories: tune per category, then `verify` runs the recommended setting, the
fastest predicted one (where the margin kept the default), the default and `--extra` more settings spread over the
predicted ranking for real (between two baselines). Printed per setting and prompt: predicted and measured time and
their ratio (and whether the counts matched); per measured setting over all prompts its predicted and measured
speedup; the predicted gain of the recommended and of the fastest predicted setting over the default, and the
margin a gain must exceed to be recommended; per method the median absolute error of the predicted time, and of the
predicted speedup (each against its own baseline: a pace change between the tune and the measurement would cancel
where it moved both alike, which in add47be's run it did not, see docs/tune.md); per
category whether a recommended setting other than the default measured at least as fast as the default. The
predicted speedup's two halves are printed apart: tune's baseline (the reference every predicted speedup divides) ÷
the baselines measured beside the runs, per category (a predicted speedup ÷ the measured one = that ÷ the run's
predicted ÷ measured time). `--repeat N` runs each measured setting N times in rounds (each setting once per round,
a baseline between rounds: `verify(repeats=N)`), its measured time the median, and prints the measured times' own
spread beside the errors, so that prediction error and run-to-run noise can be told apart. Methods
tune cannot replay (universal decoding with SmolLM2) are listed with the reason. `--json PATH` writes everything
printed, and the same figures as data. The goal (issue 25): median absolute error ≤ 15 % per method.

`--reread PATH` runs nothing: from a stored `--json` it prints, per method, the median absolute error of the
predicted speedup with tune's baseline (as stored: the baseline run at the mean pace of its two runs) and with the
baseline predicted through the cost model at the same scale as the predicted times (its first step, then a
one-token forward per step at `scale` and the loop's time: a speedup that is a ratio of two predictions from one
scale), and each baseline's own error against the measured one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from playground.bench import load_prompts  # noqa: E402
from playground.engine import RunRequest  # noqa: E402
from playground.i18n import localize, t  # noqa: E402
from playground.methods import METHODS  # noqa: E402
from playground.models import DEFAULT_TARGET, DEFAULT_UNIVERSAL_ASSISTANT, STORE  # noqa: E402
from playground.tune import (  # noqa: E402
    FASTER, REPLAYS, SLOWER, UNCLEAR, TuneRequest, TuneResult, not_tunable_reason, tune, verify,
)

CATEGORIES = ("summarization", "translation", "qa")
# `TuneResult.standing()` as the page's verdict puts it (`tune.verdict.*` in English)
STANDING_WORDS = {SLOWER: "slower: no setting is predicted to beat it (the least slow is not a recommendation)",
                  UNCLEAR: "unclear: the fastest setting's predicted gain is inside the margin",
                  FASTER: "faster: the fastest setting's predicted gain exceeds the margin",
                  None: "none: no setting has a predicted time"}


def method_request(name: str, prompt: str, args: argparse.Namespace) -> RunRequest:
    """The run tune sweeps for method `name` on the bundled models."""
    draft_replay = METHODS[name].draft_replay
    assert draft_replay is not None
    replay = REPLAYS[draft_replay]
    assistant = DEFAULT_TARGET if replay.model_pass and not replay.exit_layer_param else None
    params = {replay.exit_layer_param: args.exit_layer} if replay.exit_layer_param else {}
    return RunRequest(prompt=prompt, target=DEFAULT_TARGET, method=name, assistant=assistant, params=params,
                      max_new_tokens=args.max_new_tokens, dtype=args.dtype)


def chosen_settings(result: TuneResult, extra: int) -> list:
    """The recommended setting, the fastest predicted one, the default, and `extra` more spread over the predicted
    ranking."""
    ranked = sorted((r for r in result.overall() if r.predicted), key=lambda r: -(r.predicted.speedup or 0))  # type: ignore[union-attr]
    picks = [r.setting for r in (result.recommended(), result.best()) if r is not None]
    picks.append(result.default())
    if extra and len(ranked) > 1:
        step = (len(ranked) - 1) / extra
        picks += [ranked[round(step * (k + 1))].setting for k in range(extra)]
    return list(dict.fromkeys(picks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--per-category", type=int, default=2, help="Spec-Bench prompts per category")
    parser.add_argument("--categories", default=",".join(CATEGORIES))
    parser.add_argument("--max-draft", type=int, default=6)
    parser.add_argument("--extra", type=int, default=2, help="settings measured beside the recommended and default")
    parser.add_argument("--exit-layer", type=int, default=9, help="early exit: the drafter's layers")
    parser.add_argument("--methods", default="", help="comma-separated; default: every method tune replays")
    parser.add_argument("--json", default="", help="also write everything printed (and the figures) to this JSON file")
    parser.add_argument("--repeat", type=int, default=1,
                        help="real runs of each measured setting, in rounds (its measured time: their median)")
    parser.add_argument("--reread", default="", help="run nothing: compare two baselines on a stored --json's runs")
    args = parser.parse_args()
    if args.reread:
        reread(json.loads(Path(args.reread).read_text(encoding="utf-8")))
        return

    names = [m for m in (args.methods.split(",") if args.methods else METHODS) if m]
    tunable = [m for m in names if not_tunable_reason(m) is None]
    for m in names:
        if m not in tunable:
            say(f"{m}: not tuned ({localize(not_tunable_reason(m))})")
    if "universal" in names:
        say(f"  (universal decoding would draft with {DEFAULT_UNIVERSAL_ASSISTANT})")
    categories = [c for c in args.categories.split(",") if c]
    errors: dict[str, list[float]] = {m: [] for m in tunable}
    speedup_errors: dict[str, list[float]] = {m: [] for m in tunable}
    # the measured side's own noise: each real run's time ÷ its setting's median (with --repeat > 1), and tune's
    # baseline ÷ the measured one per category (the predicted speedup's other half)
    noise: dict[str, list[float]] = {m: [] for m in tunable}
    baseline_errors: dict[str, list[float]] = {m: [] for m in tunable}
    verdicts: list[str] = []
    record: dict = {"args": vars(args), "not_tuned": [m for m in names if m not in tunable], "categories": []}
    started = time.perf_counter()
    for name in tunable:
        for category in categories:
            prompts = [p.text for p in load_prompts("spec-bench", [category], args.per_category)]
            request = TuneRequest(run=method_request(name, prompts[0], args), max_draft=args.max_draft,
                                  ngram_sizes=(1, 2, 3), schedules=("constant", "heuristic"), thresholds=(0.0, 0.4))
            result = tune(request, prompts, STORE)
            verify(result, STORE, settings=chosen_settings(result, args.extra), repeats=args.repeat)
            entry = category_record(name, category, result, errors, speedup_errors)
            noise[name] += [abs(t / r["measured_s"] - 1) for r in entry["runs"] for t in r["measured_samples_s"]]
            noise[name] += [abs(t / statistics.median(b) - 1) for b in entry["measured_baselines_s"] for t in b]
            baseline_errors[name].append(abs(entry["baseline_ratio"] - 1))
            record["categories"].append(entry)
            verdict = entry["verdict"]
            if verdict:
                verdicts.append(verdict)
    medians(record, "median_abs_error", "\nMedian absolute error of the predicted time (goal ≤ 15 %):", errors)
    medians(record, "median_abs_speedup_error", "Median absolute error of the predicted speedup (each against its own "
            "baseline; its two halves are printed below):", speedup_errors)
    medians(record, "median_abs_baseline_error", "Median absolute error of tune's baseline (the reference of the "
            "predicted speedups) against the measured one, per category:", baseline_errors, "categories")
    if args.repeat > 1:
        medians(record, "median_abs_run_noise", f"Run-to-run noise of the measurement: each of the {args.repeat} real "
                "runs of a setting (and each baseline) against its median, median absolute deviation:", noise)
    say("\nRecommended against default, where tune's margin rule picked a setting other than the default:")
    for line in verdicts or ["(the recommended setting was the default everywhere)"]:
        say("  " + line)
    record["seconds"] = time.perf_counter() - started
    say(f"\n{record['seconds']:.0f} s in all")
    record["lines"] = PRINTED
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1, ensure_ascii=False), encoding="utf-8")
        print(f"wrote {args.json}")


PRINTED: list[str] = []


def medians(record: dict, key: str, title: str, figures: dict[str, list[float]], unit: str = "runs") -> None:
    """Print `title` and each method's median and max of `figures` (absolute errors), and keep them in `record[key]`."""
    say(title)
    record[key] = {}
    for name, values in figures.items():
        if values:
            record[key][name] = {"median": statistics.median(values), "max": max(values), unit: len(values)}
            say(f"  {name:16} {statistics.median(values):6.1%} over {len(values)} {unit} (max {max(values):.1%})")


def say(line: str) -> None:
    """Print a line and keep it for the JSON (which holds everything printed)."""
    print(line, flush=True)
    PRINTED.extend(line.split("\n"))


def category_record(name: str, category: str, result: TuneResult, errors: dict[str, list[float]],
                    speedup_errors: dict[str, list[float]]) -> dict:
    """Print one method × category: each measured run, each measured setting's predicted and measured speedup over
    all prompts, and the recommendation's predicted gain over the default; return the same as data."""
    meta = result.meta
    say(f"\n{name} · {category} · {len(result.prompts)} prompt(s) · {result.prompts[0].env.get('dtype')} · "
        f"times reliable: {meta.get('times_reliable')} · measured reliable: {meta.get('measured_reliable')} "
        f"(baseline {'after/before' if len((meta.get('measured_baselines_s') or [[0, 0]])[0]) <= 2 else 'to the next, widest change'} "
        f"{meta.get('measured_pace_change', 1.0):.2f})")
    say(f"  {'setting':44} {'prompt':>6} {'predicted':>10} {'measured':>10} {'ratio':>6}  counts")
    runs = []
    for k, p in enumerate(result.prompts):
        for row in p.rows:
            if row.measured is None or row.predicted is None:
                continue
            assert row.predicted.time_s is not None and row.measured.time_s is not None
            ratio = row.predicted.time_s / row.measured.time_s
            errors[name].append(abs(ratio - 1))
            # the same prediction against the baseline measured beside it (a pace change between the tune and the
            # measurement cancels here only where it moved the baseline and the run alike)
            speedup_ratio = (row.predicted.speedup / row.measured.speedup
                             if row.predicted.speedup and row.measured.speedup else None)
            if speedup_ratio is not None:
                speedup_errors[name].append(abs(speedup_ratio - 1))
            same = "equal" if row.predicted.counts() == row.measured.counts() else \
                f"{row.predicted.counts()} vs {row.measured.counts()}"
            samples = row.measured.samples_s or [row.measured.time_s]
            spread = (max(samples) - min(samples)) / row.measured.time_s
            runs.append({"setting": row.setting.label, "prompt": k + 1, "predicted_s": row.predicted.time_s,
                         "measured_s": row.measured.time_s, "ratio": ratio, "speedup_ratio": speedup_ratio,
                         "predicted_counts": row.predicted.counts(), "measured_counts": row.measured.counts(),
                         "measured_samples_s": samples, "measured_spread": spread})
            runs_of = f"  (median of {len(samples)}: {', '.join(f'{t:.3f}' for t in samples)}; spread {spread:.1%})" \
                if len(samples) > 1 else ""
            say(f"  {row.setting.label[:44]:44} {k + 1:>6} {row.predicted.time_s:>9.3f}s "
                f"{row.measured.time_s:>9.3f}s {ratio:>6.2f}  {same}{runs_of}")
    # the predicted speedup's other half: tune's baseline against the ones measured beside the runs (per prompt)
    measured_baselines = meta.get("measured_baselines_s", [])
    for k, (p, bases) in enumerate(zip(result.prompts, measured_baselines)):
        c = p.calibration
        say(f"  baseline, prompt {k + 1}: tune's {p.baseline_s:.3f} s (its run {p.baseline_run_s:.3f} s; the check after the "
            f"calibration's steps {c.pace_change:.2f}× its steps; scale {c.scale:.3f}) vs measured "
            f"{statistics.median(bases):.3f} s ({', '.join(f'{t:.3f}' for t in bases)}): "
            f"{p.baseline_s / statistics.median(bases):.2f}")
    baseline_ratio = (sum(p.baseline_s for p in result.prompts) / result.measured_baseline_s
                      if result.measured_baseline_s else None)
    best, recommended, default = result.best(), result.recommended(), result.default()
    standing = result.standing()
    say(f"  {'setting, over all prompts':44} {'predicted speedup':>18} {'measured speedup':>17}")
    speedups = []
    for row in result.overall():
        if row.measured is None or row.predicted is None:
            continue
        # The page's marks (`tune_report._mark`): where no setting is predicted clearly faster than plain decoding,
        # the fastest predicted says what it is and nothing is called recommended.
        mark = ""
        if standing in (None, FASTER):
            mark = " (recommended)" if recommended and row.setting == recommended.setting else ""
        elif best and row.setting == best.setting:
            mark = t(f"tune.mark.{standing}", "en")
        mark += " (default)" if row.setting == default else ""
        mark += " (fastest predicted)" if best and row.setting == best.setting else ""
        speedups.append({"setting": row.setting.label, "predicted_speedup": row.predicted.speedup,
                         "measured_speedup": row.measured.speedup, "marks": mark.strip()})
        say(f"  {row.setting.label[:44]:44} {row.predicted.speedup:>17.2f}× {row.measured.speedup:>16.2f}×{mark}")
    gain, margin = result.predicted_gain(recommended), result.margin()
    fastest_gain = result.predicted_gain(best)
    say(f"  predicted gain of the recommended over the default: {gain:+.1%}; fastest predicted "
        f"{best.setting.label if best else None} {fastest_gain:+.1%}; margin {margin:.1%}; "
        f"clear win: {result.clear_win()}" if gain is not None and fastest_gain is not None else
        "  predicted gain: none (the default has no predicted time)")
    say(f"  against plain decoding (the baseline), as the page's verdict says: {STANDING_WORDS.get(standing, standing)}")
    if best is not None and best.setting != default and best.setting in result.measured:
        fast, slow = result.measured[best.setting].time_s, result.measured[default].time_s
        assert fast is not None and slow is not None
        say(f"  fastest predicted {best.setting.label} measured {fast:.3f} s vs default {slow:.3f} s "
            f"(measured gain {slow / fast - 1:+.1%})")
    verdict = None
    if recommended is not None and recommended.setting != default:
        fast, slow = result.measured[recommended.setting].time_s, result.measured[default].time_s
        assert fast is not None and slow is not None
        called = {SLOWER: "least slow, picked over the default (no setting is predicted to beat plain decoding: "
                          "not a recommendation)",
                  UNCLEAR: "picked over the default (no setting is predicted clearly faster than plain decoding: "
                           "not a recommendation)"}.get(standing, "recommended")  # type: ignore[arg-type]
        verdict = (f"{name} · {category}: {called} {recommended.setting.label} (predicted {gain:+.1%}) measured "
                   f"{fast:.3f} s vs default {slow:.3f} s: {'at least as fast' if fast <= slow else 'SLOWER'}")
    return {"method": name, "category": category, "prompts": len(result.prompts), "dtype": result.prompts[0].env.get("dtype"),
            "times_reliable": meta.get("times_reliable"), "measured_reliable": meta.get("measured_reliable"),
            "measured_pace_change": meta.get("measured_pace_change"),
            "pace_change": [p.calibration.pace_change for p in result.prompts],
            "scale": [p.calibration.scale for p in result.prompts], "runs": runs, "speedups": speedups,
            "baseline_s": [p.baseline_s for p in result.prompts], "baseline_run_s": [p.baseline_run_s for p in result.prompts],
            "new_tokens": [p.new_tokens for p in result.prompts],
            "measured_baselines_s": measured_baselines, "baseline_ratio": baseline_ratio,
            "calibration": [{"scale": p.calibration.scale, "method_pace_steps": p.calibration.method_pace_steps,
                             "method_first_step_s": p.calibration.method_first_step_s,
                             "method_first_draft": p.calibration.method_first_draft,
                             "baseline_first_step_s": p.calibration.baseline_first_step_s,
                             "baseline_forward_s": p.calibration.baseline_forward_s,
                             "forward_1_s": p.calibration.forward(1) if p.calibration.target_forward_s else None,
                             "loop_s": p.calibration.loop_s, "spread": p.calibration.spread}
                            for p in result.prompts],
            "recommended": recommended.setting.label if recommended else None,
            "fastest_predicted": best.setting.label if best else None, "default": default.label,
            "predicted_gain": gain, "fastest_predicted_gain": fastest_gain, "margin": margin,
            "clear_win": result.clear_win(), "standing": standing, "verdict": verdict}


def model_baseline_s(calibration: dict, new_tokens: int, loop_s: float | None = None) -> float:
    """The baseline's time through tune's cost model at the scale of the predicted times: its set-up and first step,
    then per later step a one-token forward at `scale` and the loop's own time (`loop_s`: the drafting loop's, as
    the model charges it; or the baseline's own)."""
    loop = calibration["loop_s"] if loop_s is None else loop_s
    return (calibration["baseline_first_step_s"]
            + (new_tokens - 1) * (calibration["forward_1_s"] * calibration["scale"] + loop))


def reread(record: dict) -> None:
    """Print, from a stored --json, the predicted speedup's error with tune's baseline and with the baseline the cost
    model predicts at the same scale; no runs."""
    speedup_errors: dict[str, dict[str, list[float]]] = {}
    baseline_errors: dict[str, dict[str, list[float]]] = {}
    for entry in record["categories"]:
        name = entry["method"]
        for k, calibration in enumerate(entry.get("calibration") or []):
            runs = [r for r in entry["runs"] if r["prompt"] == k + 1]
            if not runs or calibration.get("forward_1_s") is None:
                continue
            # a JSON written before `new_tokens` was: steps + accepted of a run, one too many where its last step's
            # bonus token was cut at the length limit, so the least over the runs
            new_tokens = (entry["new_tokens"][k] if "new_tokens" in entry else
                          min(r["predicted_counts"][0] + r["predicted_counts"][2] for r in runs))
            measured_base = statistics.median(entry["measured_baselines_s"][k])
            later = max(1, new_tokens - 1)
            own_loop = max(0.0, (entry["baseline_run_s"][k] - calibration["baseline_first_step_s"]) / later
                           - calibration["baseline_forward_s"])  # the baseline run's mean step minus its median forward
            baselines = {"tune's baseline (stored)": entry["baseline_s"][k],
                         "cost model, same scale": model_baseline_s(calibration, new_tokens),
                         "cost model, the baseline's own loop": model_baseline_s(calibration, new_tokens, own_loop)}
            for label, base in baselines.items():
                baseline_errors.setdefault(label, {}).setdefault(name, []).append(abs(base / measured_base - 1))
                for r in runs:
                    predicted, measured = base / r["predicted_s"], measured_base / r["measured_s"]
                    speedup_errors.setdefault(label, {}).setdefault(name, []).append(abs(predicted / measured - 1))
    if not speedup_errors:
        say("no runs with a stored calibration (forward_1_s) in this file")
        return
    for title, errors, unit in (("Median absolute error of the predicted speedup", speedup_errors, "runs"),
                                ("Median absolute error of the baseline against the measured one", baseline_errors,
                                 "prompts")):
        say(title + ", by the baseline it divides:")
        for label, per_method in errors.items():
            say(f"  {label}:")
            for name, values in per_method.items():
                say(f"    {name:16} {statistics.median(values):6.1%} over {len(values)} {unit} (max {max(values):.1%})")


if __name__ == "__main__":
    main()
