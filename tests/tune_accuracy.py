"""How true tune's predicted times come: predicted beside measured on the bundled models (a benchmark, not a test).

Usage (the figures need a quiet machine; about half an hour with the defaults):

    python tests/tune_accuracy.py
    python tests/tune_accuracy.py --dtype float32 --max-new-tokens 64 --per-category 2 --extra 2
    python tests/tune_accuracy.py --methods prompt_lookup --max-new-tokens 12 --per-category 1 --max-draft 2  # a smoke run

For every method tune can replay (the registry's `draft_replay`) on the bundled Gemma 3 270M (speculative: the
bundled Gemma drafting for itself, the only same-tokenizer pair bundled; early exit: its first half of layers),
over prompts of three Spec-Bench categories: tune per category, then `verify` runs the recommended setting, the
default and `--extra` more settings spread over the predicted ranking for real (between two baselines). Printed per
setting and prompt: predicted and measured time and their ratio (and whether the counts matched); per method the
median absolute error of the predicted time; per category whether the recommended setting measured at least as
fast as the default where the prediction said so. Methods tune cannot replay (universal decoding with SmolLM2)
are listed with the reason. The goal (issue 25): median absolute error ≤ 15 % per method.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playground.bench import load_prompts  # noqa: E402
from playground.engine import RunRequest  # noqa: E402
from playground.i18n import localize  # noqa: E402
from playground.methods import METHODS  # noqa: E402
from playground.models import DEFAULT_TARGET, DEFAULT_UNIVERSAL_ASSISTANT, STORE  # noqa: E402
from playground.tune import (  # noqa: E402
    REPLAYS, TuneRequest, TuneResult, not_tunable_reason, tune, verify,
)

CATEGORIES = ("summarization", "translation", "qa")


def method_request(name: str, prompt: str, args: argparse.Namespace) -> RunRequest:
    """The run tune sweeps for method `name` on the bundled models."""
    replay = REPLAYS[METHODS[name].draft_replay]  # type: ignore[index]
    assistant = DEFAULT_TARGET if replay.model_pass and not replay.exit_layer_param else None
    params = {replay.exit_layer_param: args.exit_layer} if replay.exit_layer_param else {}
    return RunRequest(prompt=prompt, target=DEFAULT_TARGET, method=name, assistant=assistant, params=params,
                      max_new_tokens=args.max_new_tokens, dtype=args.dtype)


def chosen_settings(result: TuneResult, extra: int) -> list:
    """The recommended setting, the default, and `extra` more spread over the predicted ranking."""
    ranked = sorted((r for r in result.overall() if r.predicted), key=lambda r: -(r.predicted.speedup or 0))
    best = result.best()
    picks = [best.setting] if best else []
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
    args = parser.parse_args()

    names = [m for m in (args.methods.split(",") if args.methods else METHODS) if m]
    tunable = [m for m in names if not_tunable_reason(m) is None]
    for m in names:
        if m not in tunable:
            print(f"{m}: not tuned ({localize(not_tunable_reason(m))})")
    if "universal" in names:
        print(f"  (universal decoding would draft with {DEFAULT_UNIVERSAL_ASSISTANT})")
    categories = [c for c in args.categories.split(",") if c]
    errors: dict[str, list[float]] = {m: [] for m in tunable}
    verdicts: list[str] = []
    started = time.perf_counter()
    for name in tunable:
        for category in categories:
            prompts = [p.text for p in load_prompts("spec-bench", [category], args.per_category)]
            request = TuneRequest(run=method_request(name, prompts[0], args), max_draft=args.max_draft,
                                  ngram_sizes=(1, 2, 3), schedules=("constant", "heuristic"), thresholds=(0.0, 0.4))
            result = tune(request, prompts, STORE)
            verify(result, STORE, settings=chosen_settings(result, args.extra))
            meta = result.meta
            print(f"\n{name} · {category} · {len(prompts)} prompt(s) · {result.prompts[0].env.get('dtype')} · "
                  f"times reliable: {meta.get('times_reliable')} · measured reliable: {meta.get('measured_reliable')} "
                  f"(baseline after/before {meta.get('measured_pace_change', 1.0):.2f})")
            print(f"  {'setting':44} {'prompt':>6} {'predicted':>10} {'measured':>10} {'ratio':>6}  counts")
            for k, p in enumerate(result.prompts):
                for row in p.rows:
                    if row.measured is None or row.predicted is None:
                        continue
                    ratio = row.predicted.time_s / row.measured.time_s
                    errors[name].append(abs(ratio - 1))
                    same = "equal" if row.predicted.counts() == row.measured.counts() else \
                        f"{row.predicted.counts()} vs {row.measured.counts()}"
                    print(f"  {row.setting.label[:44]:44} {k + 1:>6} {row.predicted.time_s:>9.3f}s "
                          f"{row.measured.time_s:>9.3f}s {ratio:>6.2f}  {same}")
            best, default = result.best(), result.default()
            if best is not None and best.setting != default:
                predicted_default = next(r for r in result.overall() if r.setting == default).predicted
                says_faster = predicted_default is None or best.predicted.speedup > (predicted_default.speedup or 0)
                if says_faster:
                    fast, slow = result.measured[best.setting].time_s, result.measured[default].time_s
                    verdicts.append(f"{name} · {category}: recommended {best.setting.label} measured "
                                    f"{fast:.3f} s vs default {slow:.3f} s: "
                                    f"{'at least as fast' if fast <= slow else 'SLOWER'}")
    print("\nMedian absolute error of the predicted time (goal ≤ 15 %):")
    for name, errs in errors.items():
        if errs:
            print(f"  {name:16} {statistics.median(errs):6.1%} over {len(errs)} runs (max {max(errs):.1%})")
    print("\nRecommended against default, where tune predicted the recommended faster:")
    for line in verdicts or ["  (the recommended setting was the default everywhere)"]:
        print("  " + line)
    print(f"\n{time.perf_counter() - started:.0f} s in all")


if __name__ == "__main__":
    main()
