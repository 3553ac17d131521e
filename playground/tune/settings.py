"""What Tune sweeps and for which methods (torch-free): a setting, its outcome, the sweep grids, each kind of draft
source's replay (`REPLAYS`), why a method or a setting gets no prediction, and the tune request checked.

Torch-free so that the page, the CLI's argument checks and the report read settings without importing the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..errors import RunError
from ..i18n import DEFAULT_LANGUAGE, Message, Number, joined, normalize, t
from ..methods import DRAFT_LENGTH, METHODS, Method, Param, ensemble_weight, get_method
from ..models import method_defaults
from ..request import RunRequest

Progress = Callable[[str], None]

# The draft-length schedules, as the registry offers them (`methods.DRAFT_LENGTH`).
SCHEDULES = next(p.choices for p in DRAFT_LENGTH if p.name == "num_assistant_tokens_schedule")


class TuneError(RunError):
    """The tune request cannot run as given; the message is for the user."""


@dataclass(frozen=True)
class Setting:
    """One draft setting: a method and its full, resolved parameters."""

    method: str
    params: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, method: str, params: dict[str, Any]) -> "Setting":
        resolved = get_method(method).resolve_params(params)
        return cls(method, tuple(sorted(resolved.items())))

    @property
    def values(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def label(self) -> str:
        """The setting's English name: tune.json's, the CLI's and the report's (`setting_label`)."""
        return setting_label(self.method, self.values)

    def shown(self, lang: str = DEFAULT_LANGUAGE) -> str:
        """The setting as the page names it in `lang` (`setting_label`)."""
        return setting_label(self.method, self.values, lang)


def setting_label(method: str, values: dict[str, Any], lang: str = DEFAULT_LANGUAGE) -> str:
    """A setting in a few words: its swept values, each as the catalogue's `tune.label.<parameter>` writes it in `lang`
    (Russian and Arabic name a parameter as the page's control does, «длина черновика = 5»). In English the method's
    registry name leads (``speculative(γ=5, conf≥0.4)``): the name tune.json, the CLI and the report know it by."""
    swept = replay_of(method).label(values, lang)
    return f"{method}({swept})" if normalize(lang) == DEFAULT_LANGUAGE else swept


@dataclass
class Outcome:
    """What a run of one setting does: counts (exact for predictions) and time."""

    steps: int
    drafted: int
    accepted: int
    tokens_per_step: float | None
    time_s: float | None
    speedup: float | None
    new_tokens: int = 0
    unverified: int = 0
    by_position: list[tuple[int, ...]] = field(default_factory=list)  # trace.acceptance_by_position's counts
    samples_s: list[float] = field(default_factory=list)  # measured: each real run's time (`time_s` their median)

    def counts(self) -> tuple[int, int, int]:
        return self.steps, self.drafted, self.accepted


def sweep_settings(method: str, max_draft: int, *, ngram_sizes: Sequence[int] = (1, 2, 3, 4),
                   schedules: Sequence[str] = ("constant", "heuristic"),
                   thresholds: Sequence[float] = (0.0, 0.2, 0.4, 0.6),
                   fixed: dict[str, Any] | None = None) -> list[Setting]:
    """Every setting to predict: draft lengths 1..max_draft crossed with the method's other knobs, plus its default."""
    replay = replay_of(method)
    if max_draft < 1:
        raise TuneError.keyed("error.tune.max_draft_at_least_one", got=max_draft)
    fixed = dict(fixed or {})
    settings = replay.grid(max_draft, Grid(tuple(ngram_sizes), tuple(schedules), tuple(thresholds)),
                           lambda values: Setting.of(method, {**fixed, **values}))
    default = default_setting(method, fixed)
    if default not in settings:
        settings.append(default)
    return list(dict.fromkeys(settings))


def default_setting(method: str, fixed: dict[str, Any] | None = None) -> Setting:
    """The method's default setting in the playground (the registry's defaults, plus fixed parameters)."""
    keep = {k: v for k, v in (fixed or {}).items() if k not in _SWEPT}
    return Setting.of(method, keep)


@dataclass(frozen=True)
class Grid:
    """The values a sweep crosses with the draft lengths (each replay uses the ones its method has)."""

    ngram_sizes: tuple[int, ...]
    schedules: tuple[str, ...]
    thresholds: tuple[float, ...]


MakeSetting = Callable[[dict[str, Any]], Setting]  # swept values -> the setting (the request's fixed values added)


def _copy_grid(max_draft: int, grid: Grid, make: MakeSetting) -> list[Setting]:
    return [make({"prompt_lookup_num_tokens": tokens, "max_matching_ngram_size": size})
            for size in grid.ngram_sizes for tokens in range(1, max_draft + 1)]


def _named(name: str, value: Any, lang: str) -> str:
    """One swept parameter's value, named as `lang` names it (`tune.label.<name>`; a fraction written by `i18n.number`)."""
    return t(f"tune.label.{name}", lang, value=Number(value, "g") if isinstance(value, float) else value)


def _copy_label(values: dict[str, Any], lang: str = DEFAULT_LANGUAGE) -> str:
    return joined([_named(name, values[name], lang) for name in ("prompt_lookup_num_tokens", "max_matching_ngram_size")],
                  lang)


def _copy_series(values: dict[str, Any], lang: str = DEFAULT_LANGUAGE) -> str:
    return t("tune.label.max_matching_ngram_size", lang, value=values["max_matching_ngram_size"])


def _drafter_grid(max_draft: int, grid: Grid, make: MakeSetting) -> list[Setting]:
    out = []
    for schedule in grid.schedules:
        if schedule not in SCHEDULES:
            raise TuneError.keyed("error.tune.schedule", got=repr(schedule), known=", ".join(SCHEDULES))
        out += [make({"num_assistant_tokens": tokens, "num_assistant_tokens_schedule": schedule,
                      "assistant_confidence_threshold": threshold})
                for threshold in grid.thresholds for tokens in range(1, max_draft + 1)]
    return out


def _drafter_label(values: dict[str, Any], lang: str = DEFAULT_LANGUAGE) -> str:
    parts = [_named("num_assistant_tokens", values["num_assistant_tokens"], lang)]
    if values["num_assistant_tokens_schedule"] != "constant":
        parts.append(_named("num_assistant_tokens_schedule", values["num_assistant_tokens_schedule"], lang))
    if values["assistant_confidence_threshold"]:
        parts.append(_named("assistant_confidence_threshold", float(values["assistant_confidence_threshold"]), lang))
    return joined(parts, lang)


def _drafter_series(values: dict[str, Any], lang: str = DEFAULT_LANGUAGE) -> str:
    schedule, threshold = values.get("num_assistant_tokens_schedule", "constant"), values.get("assistant_confidence_threshold")
    parts = [_named("num_assistant_tokens_schedule", schedule, lang)] if schedule != "constant" or not threshold else []
    if threshold:
        parts.append(_named("assistant_confidence_threshold", float(threshold), lang))
    return joined(parts, lang)


@dataclass(frozen=True)
class Replay:
    """How tune replays one kind of draft source (`Method.draft_replay` names one of `REPLAYS`): what it sweeps, with
    what drafter, and how its settings are named. Tune, its report and its page ask the replay, never the method's
    name or tag: a new method whose drafts one of these replays follows is one registry line for tune too."""

    swept: tuple[str, ...]  # the parameters a sweep varies (the others stay as the request fixed them)
    grid: Callable[[int, Grid, MakeSetting], list[Setting]]  # the settings for draft lengths 1..max_draft
    label: Callable[[dict[str, Any], str], str]  # a setting's swept values in a few words, in a language
    series: Callable[[dict[str, Any], str], str]  # a chart's series: the swept values but the draft length, in words
    model_pass: bool  # drafts come from a greedy pass of a model (False: from the token sequence alone)
    exit_layer_param: str | None = None  # the drafter is the target cut after this many layers
    # Transformers re-fits the confidence threshold after each step when scikit-learn is installed (only in
    # `AssistedCandidateGenerator` itself, not its early-exit subclass), which tune does not replay.
    refits_threshold: bool = False


_DRAFTER_SWEPT = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
REPLAYS: dict[str, Replay] = {
    "context_copy": Replay(("prompt_lookup_num_tokens", "max_matching_ngram_size"), _copy_grid, _copy_label,
                           _copy_series, model_pass=False),
    "assistant_model": Replay(_DRAFTER_SWEPT, _drafter_grid, _drafter_label, _drafter_series,
                              model_pass=True, refits_threshold=True),
    "early_layers": Replay(_DRAFTER_SWEPT, _drafter_grid, _drafter_label, _drafter_series,
                           model_pass=True, exit_layer_param="assistant_early_exit"),
}
_SWEPT = tuple(dict.fromkeys(name for replay in REPLAYS.values() for name in replay.swept))


def not_tunable_reason(name: str) -> Message | None:
    """Why tune offers no prediction for the method `name` (None: it has an exact replay); English as a `str`,
    translated on the page."""
    method: Method | None = METHODS.get(name)
    if method is None:
        return Message.keyed("tune.reason.cannot_predict", name=name)
    if method.draft_replay is None:
        return method.replay_obstacle_message() or Message.keyed("tune.reason.cannot_predict", name=name)
    if method.draft_replay not in REPLAYS:
        raise LookupError(f"method {name!r} names the replay {method.draft_replay!r}, which tune does not have "
                          f"(known: {', '.join(REPLAYS)})")
    return None


def replay_of(name: str) -> Replay:
    """The replay of the method `name`'s drafts; TuneError with the registry's reason where it has none."""
    reason = not_tunable_reason(name)
    replay = METHODS[name].draft_replay
    if reason or replay is None:
        raise TuneError.saying(reason or Message.keyed("tune.reason.cannot_predict", name=name))
    return REPLAYS[replay]


def _refusal(setting: Setting) -> Message | None:
    """Why one setting of a tunable method gets no prediction (None: it gets one)."""
    values = setting.values
    if ensemble_weight(values) is not None:
        return Message.keyed("tune.reason.ensemble_lossy")
    if values.get("assistant_confidence_threshold") and replay_of(setting.method).refits_threshold:
        from transformers.utils import is_sklearn_available

        if is_sklearn_available():
            return Message.keyed("tune.reason.threshold_refit")
    return None


@dataclass
class TuneRequest:
    """What to tune: a run request (greedy; its method's non-swept parameters fixed) and the sweep."""

    run: RunRequest
    max_draft: int = 8
    ngram_sizes: tuple[int, ...] = (1, 2, 3, 4)
    schedules: tuple[str, ...] = ("constant", "heuristic")
    thresholds: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6)
    calibration_repeats: int = 3

    def settings(self) -> list[Setting]:
        # The target's own defaults (the catalogue's, e.g. early exit's layer) stand where the run leaves them out,
        # as they do in a run of the playground.
        fixed = {**method_defaults(self.run.target, self.run.method), **self.run.params}
        return sweep_settings(self.run.method, self.max_draft, ngram_sizes=self.ngram_sizes,
                              schedules=self.schedules, thresholds=self.thresholds, fixed=fixed)


def _check(request: TuneRequest) -> None:
    run = request.run
    if run.sample:
        raise TuneError.keyed("error.tune.greedy_only")
    replay = replay_of(run.method)
    method = get_method(run.method)
    low, high = _range(method.param(method.draft_length_param or ""))  # the registry's range: one definition
    if not low <= request.max_draft <= high:
        raise TuneError.keyed("error.tune.max_draft_range", lo=low, hi=high, got=request.max_draft)
    if ensemble_weight(run.params) is not None:
        raise TuneError.keyed("error.tune.ensemble_lossy")
    if "max_matching_ngram_size" in replay.swept:
        low, high = _range(method.param("max_matching_ngram_size"))
        if not all(low <= n <= high for n in request.ngram_sizes):
            raise TuneError.keyed("error.tune.ngram_sizes", lo=low, hi=high)


def _range(param: Param) -> tuple[int, int]:
    """A whole-number parameter's range as the registry bounds it."""
    assert param.minimum is not None and param.maximum is not None, param.name
    return int(param.minimum), int(param.maximum)
