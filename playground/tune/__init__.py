"""Tune: every draft setting's outcome from one greedy run (exact in float32); then the best one, measured.

For greedy decoding a lossless method's trajectory is fixed by two things: the target's own greedy
output y (one baseline run through the engine, the same `generate()` call a baseline run makes) and,
at each position i, what the drafter would propose after `prompt + y[:i]`. A step at position i with
draft d accepts the m leading drafts equal to y[i:], emits m + 1 tokens (fewer where the output
ends) and moves on. We replay Transformers 5.24's loop on that record for every setting at once:

* the draft length cap `min(num_assistant_tokens, max_length - cur_len - 1)` of
  `AssistedCandidateGenerator._calculate_new_tokens` (no draft at all when it is 0);
* the heuristic schedules of `update_candidate_strategy` (+2 when `n_matches` equals the draft
  length, else −1, at least 1; `heuristic` and `heuristic_transient` are the same within one
  `generate()` call, and the engine resets the persisted value after each run);
* `ConfidenceCriteria`: the drafter stops *after* the first token whose probability is below the
  threshold (0 = off); the drafter also stops after an EOS token;
* the loop's cut of the emitted tokens at the length budget and at the first EOS (drafts past the
  cut are unverified);
* prompt lookup: `PromptLookupCandidateGenerator.get_candidates` replayed on the token sequence
  (longest n-gram first, earliest occurrence whose continuation is non-empty, copy cut at the
  sequence end and at the first EOS, no draft when one token of budget is left).

The counts are exact where a drafting run's output is the baseline's token for token: greedy decoding in
float32 (tests/test_tune.py runs every setting for real). In bfloat16 or float16 a near-tie between two
tokens can fall the other way in a wider verification than in the baseline's one-token step, so there they
are a prediction from the baseline's output; `counts_exact` says which, and `verify` counts how many of the
settings run for real matched.

Universal decoding re-tokenises every draft through text and re-aligns the assistant's own prompt
each step; its proposals depend on the text of both tokenizers in ways we cannot replay exactly, so
it gets no prediction (nor do sampling, ensemble verification and the MTP methods, and the adaptive
confidence threshold Transformers switches on when scikit-learn is installed).

Cost: each step of a drafting run costs its drafting (one `get_candidates` call of the step's draft length:
Transformers' own candidate generator, its cache crop and its `assistant.generate()`, or one prompt-lookup
`get_candidates`), the target's forward at the step's verification width with the loop's work on its logits, and
the loop's own time once. A calibration on this machine at this context length times the real calls for every
width and draft length the predictions need (every figure in turn, sampled again where the samples spread wide),
a short real run of the method (at least PACE_STEPS steps after its first) gives the loop's own time (its median
`other` phase), the set-up and first step (both prefills) and the absolute level (its draft and verify phases
against the calibrated ones; without it, the baseline's pace). A short baseline after the calibration checks
that the machine kept its pace; where it did not, tune measures again once, then says its times are unreliable. The
baseline the predicted speedups divide takes its later steps at the mean pace of the two baselines (before and after
the calibration), not one run's (`reference_baseline_s`). A setting is recommended over the method's default only
where its predicted gain exceeds the prediction's margin (`TuneResult.margin`); otherwise the default is. Where even
the fastest setting is not predicted faster than plain decoding by more than that margin (`TuneResult.standing`), the
verdict says so, and by how much, and recommends nothing. Timings are predictions; `verify` runs settings for real,
between two baselines, and reports measured beside predicted. docs/tune.md describes the model and the benchmark of
its accuracy.

Its modules, each importing only those listed before it; the first four import no torch (nor the engine), so the
page, the CLI and the report read settings, replays, costs and verdicts without it:
  settings     a setting and its outcome, the sweep grids, each draft source's replay (`REPLAYS`), why a method or a
               setting gets no prediction, the tune request checked, `TuneError`
  replaying    the assisted loop replayed on one greedy output: prompt lookup's drafts, a model drafter's proposals
  cost         the calibration's figures and a predicted time (`Calibration`), the pace arithmetic over real traces
  verdict      rows, one prompt's and several prompts' results, the recommendation, the standing, tune.json
  calibration  the timers (torch): forwards per width, the drafter's and prompt lookup's calls, sampled in turn
  drafter      the drafter pass (torch): a greedy drafter's proposals along the output, at the models under the locks
  one_prompt   one prompt in named phases: baseline, drafter pass, calibration checked against the pace, the rows
  several      several prompts (`tune`) and the chosen settings measured for real (`verify`)

Callers import the public names from here (`from .tune import TuneRequest`). The measuring part's names are
imported on first use (`__getattr__`), so importing this package or its pure modules imports no torch. A name with a
leading underscore belongs to the package: a test reads or patches it in the module that owns it (patching a name
here changes nothing for the module that uses it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .cost import (
    PACE_CHECK_TOKENS, PACE_STEPS, PACE_TOLERANCE, RECOMMEND_MARGIN, SPREAD_LIMIT, SPREAD_ROUNDS, WARM_UP_TOKENS,
    Calibration, calibration_points, forward_pace_s, loop_pace, loop_time_s, pace_ratios, pace_run_tokens,
    reference_baseline_s, step_pace_s,
)
from .replaying import DraftFor, NgramIndex, Proposals, prompt_lookup_draft, replay, simulate_drafter, \
    simulate_prompt_lookup
from .settings import (
    REPLAYS, SCHEDULES, Grid, MakeSetting, Outcome, Progress, Replay, Setting, TuneError, TuneRequest, default_setting,
    not_tunable_reason, replay_of, sweep_settings,
)
from .verdict import FASTER, SLOWER, UNCLEAR, PromptTune, Row, TuneResult, counts_exact, outcome_of, \
    standing_against_baseline, to_json

if TYPE_CHECKING:
    from .calibration import drafter_generator
    from .one_prompt import run_baseline, run_setting, tune_prompt
    from .several import tune, verify

# The measuring part's public names and the module of each: imported on first use, so that the pure part (and the
# page that reads it) never imports torch.
_MEASURING = {"drafter_generator": "calibration", "run_baseline": "one_prompt", "run_setting": "one_prompt",
              "tune_prompt": "one_prompt", "tune": "several", "verify": "several"}


def __getattr__(name: str) -> Any:
    """A measuring name, imported from its module the first time it is asked for (PEP 562)."""
    if name not in _MEASURING:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_MEASURING[name]}", __name__), name)
    globals()[name] = value
    return value
