"""Runtime settings, read from ``PLAYGROUND_*`` environment variables.

``get_settings()`` re-reads the environment on every call, so tests (and a
restarted worker) see changes without any reload dance. ``SETTINGS_DOC`` is the
single source for the docs/settings.md table.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})

DEFAULT_CACHE_DIR = "~/.cache/assisted-playground"
MICROSCOPE_MAX_TOP_K = 10  # the most PLAYGROUND_TOP_K may ask for (trace.MAX_TOP_K reads it)

# (name, default, meaning): kept next to the parser so docs cannot drift.
SETTINGS_DOC: list[tuple[str, str, str]] = [
    ("PLAYGROUND_CACHE_DIR", DEFAULT_CACHE_DIR,
     "Where converted bundled models (and other downloads) are cached; on a Space with persistent storage "
     "put it under `/data` so conversions survive restarts."),
    ("PLAYGROUND_PUBLIC", "true inside a HF Space (SPACE_ID set), else false",
     "Public mode: local model paths are refused except under the cache dir and "
     "PLAYGROUND_ALLOWED_DIRS."),
    ("PLAYGROUND_TRUST_REMOTE_CODE", "false",
     "Pass trust_remote_code=True to Transformers (runs code shipped with a model)."),
    ("PLAYGROUND_ALLOW_PICKLE", "false",
     "Allow loading pickle checkpoints (pytorch_model.bin); otherwise safetensors only."),
    ("PLAYGROUND_ALLOWED_DIRS", "(empty)",
     f"Extra directories (separated by '{os.pathsep}') that local model paths may live "
     "under in public mode."),
    ("PLAYGROUND_MAX_NEW_TOKENS", "512", "Upper limit for new tokens per generation."),
    ("PLAYGROUND_MAX_PROMPT_TOKENS", "4096", "Upper limit for prompt length in tokens."),
    ("PLAYGROUND_MEMORY_BUDGET_GB", "8.0",
     "Parameter memory the model store may hold; least recently used models are evicted."),
    ("PLAYGROUND_RUN_TIMEOUT_S", "300",
     "Time limit for one run's own work, in seconds: its computing and any time it waits at the slowed pace (not the "
     "wait for other runs' steps, nor a step-by-step pause: docs/limits.md)."),
    ("PLAYGROUND_PAUSE_IDLE_S", "180",
     'A step-by-step run with no press of "Next step" for this many seconds ends and says why (in the '
     "visitor's language)."),
    ("PLAYGROUND_RUN_LIFETIME_S", "3600",
     "Wall-clock bound on one run from its start, pauses and waits included: nothing holds a run alive longer."),
    ("PLAYGROUND_MAX_RUNS", "12",
     "Page generations that may exist at once, running or paused (Gradio's limit for Generate; more wait in its "
     "queue). Each keeps its KV cache and pending scores (docs/limits.md)."),
    ("PLAYGROUND_MAX_PACES", "1000",
     "Visitors' pace choices (Free, Slowed, Step by step) the server keeps, a few hundred bytes each; past it the "
     "least recently set are dropped (that visitor's next run goes free), never the pace a run goes at."),
    ("PLAYGROUND_PRELOAD", "true", "Load the default models at start-up."),
    ("PLAYGROUND_CONCURRENCY", "3",
     "Visitors' generations computing at once (the cores' places; the page's other queued handlers too); they take "
     "turns one decoding step at a time, so a visitor's run starts within one step of each other computing "
     "generation. A run standing paused or slowed between two steps holds no place (docs/limits.md)."),
    ("PLAYGROUND_CLIENT_CALLS", "2 in public mode, else 0",
     "Queued or running calls of a handler with a bounded number of places (a run, a Compare, Tune, a run's follow-up "
     "views; not a follower's look at its class, which holds no place) one client address may have at once; one "
     "more is refused in one line (HTTP 429), so that one client never holds every run's place. A class behind one "
     "address (a school's network reaching a Space) shares it: raise it to the class's size there. 0: no bound (the "
     "default on a machine of one's own, where a class reaches it from its own addresses)."),
    ("PLAYGROUND_QUEUE_SIZE", "64", "Calls waiting in the queue, all clients together; one more is refused in one "
     "line (HTTP 503). 0: no bound."),
    ("PLAYGROUND_STREAM_OPEN_S", "30",
     "Seconds a queued call waits for its client to open the answer's stream (every client opens it right after its "
     "call: this is margin for a busy server); past it the call ends, its runs at their next step."),
    ("PLAYGROUND_MALLOC_ARENAS", "2",
     "Memory pools (glibc malloc arenas) the server's threads share at most. glibc's default, 8 per core, let a "
     "class's runs, each in its own thread, leave hundreds of MB free but held in pools of their own "
     "(docs/limits.md). 0: glibc's default; glibc's own MALLOC_ARENA_MAX, where set, is left as it is."),
    ("PLAYGROUND_UPLOADS_MB", "512",
     "Memory the uploaded traces of all sessions together may take, in MB (a 20 MB trace file takes about 50 once "
     "read). An upload that does not fit lets go of the least recently viewed ones of other visitors, who are told "
     "so when they next step through theirs; one larger than the whole budget is refused in one line."),
    ("PLAYGROUND_TRUST_FORWARDED", "true inside a HF Space (SYSTEM=spaces or SPACE_ID set), else false",
     "Take a client's address from the last entry of X-Forwarded-For (set by the Space's proxy) rather than the "
     "socket's peer. Only where a proxy that sets the header stands in front: elsewhere a client could name any "
     "address."),
    ("PLAYGROUND_TOP_K", "5",
     "How many of the most probable tokens the step microscope records per judged position for p, q, the "
     "ensemble mixture and the residual (0 to 10; 0 records none)."),
    ("PLAYGROUND_MCP", "false",
     "Also serve the app as an MCP server (Gradio's mcp_server) at /gradio_api/mcp/, with the tools generate, "
     "compare and bench."),
    ("PLAYGROUND_MAX_ROOMS", "20",
     "Classes that may follow a presenter at once (each presenter's page opens one room, `?follow=CODE`); one more is "
     "refused in words until a room ends."),
    ("PLAYGROUND_ROOM_FOLLOWERS", "200",
     "Followers one room takes (a follower counts while its page is open); one more is refused in words."),
    ("PLAYGROUND_ROOM_GRACE_S", "120",
     "Seconds a room outlives the last beat of its presenter's page (the page beats every second while open); then "
     "it ends and what it held is freed."),
]


@dataclass(frozen=True)
class Settings:
    """Immutable snapshot of the playground configuration."""

    cache_dir: Path
    public: bool
    trust_remote_code: bool
    allow_pickle: bool
    allowed_dirs: tuple[Path, ...]
    max_new_tokens: int
    max_prompt_tokens: int
    memory_budget_gb: float
    run_timeout_s: float
    preload: bool
    concurrency: int
    mcp: bool
    top_k: int = 5  # the step microscope's top-k per distribution (0: record none)
    client_calls: int = 0  # queued or running calls per client address (0: no bound; 2 in public mode)
    queue_size: int = 64  # calls waiting in the queue, all clients (0: no bound)
    stream_open_s: float = 30.0  # a queued call whose answer stream is not opened this long ends (app.gate)
    uploads_mb: float = 512.0  # memory all sessions' uploaded traces may take together (app.uploads)
    trust_forwarded: bool = False  # the client's address from X-Forwarded-For (a Space's proxy sets it)
    pause_idle_s: float = 180.0  # a step-by-step pause with no press this long ends the run
    run_lifetime_s: float = 3600.0  # no run lives longer, pauses included
    max_runs: int = 12  # page generations existing at once (running or paused)
    max_paces: int = 1000  # visitors' paces kept (app.presenter; least recently set dropped first)
    max_rooms: int = 20  # classes following a presenter at once (playground.rooms)
    room_followers: int = 200  # followers one room takes
    room_grace_s: float = 120.0  # how long a room outlives its presenter's page
    malloc_arenas: int = 2  # glibc malloc arenas the server keeps at most (app.sessions.cap_arenas; 0: glibc's own)


def _raw(name: str) -> str | None:
    """The variable's value, or None when unset or blank (blank means 'use the default')."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def _bool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"{name}={value!r} is not a boolean (use one of 1/true/yes/on or 0/false/no/off)")


def _int(name: str, default: int, minimum: int) -> int:
    value = _raw(name)
    if value is None:
        return default
    try:
        parsed = int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None
    if parsed < minimum:
        raise ValueError(f"{name}={parsed} must be at least {minimum}")
    return parsed


def _int_at_most(name: str, default: int, minimum: int, maximum: int) -> int:
    parsed = _int(name, default, minimum)
    if parsed > maximum:
        raise ValueError(f"{name}={parsed} must be at most {maximum}")
    return parsed


def _float(name: str, default: float) -> float:
    value = _raw(name)
    if value is None:
        return default
    try:
        parsed = float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a number") from None
    if not parsed > 0 or parsed == float("inf"):
        raise ValueError(f"{name}={value!r} must be a positive finite number")
    return parsed


def _paths(name: str) -> tuple[Path, ...]:
    value = _raw(name)
    if value is None:
        return ()
    return tuple(Path(part).expanduser() for part in value.split(os.pathsep) if part.strip())


def get_settings() -> Settings:
    """Read the settings from the environment; raises ValueError naming a malformed variable."""
    public = _bool("PLAYGROUND_PUBLIC", default=bool(os.environ.get("SPACE_ID")))
    return Settings(
        cache_dir=Path(_raw("PLAYGROUND_CACHE_DIR") or DEFAULT_CACHE_DIR).expanduser(),
        public=public,
        trust_remote_code=_bool("PLAYGROUND_TRUST_REMOTE_CODE", False),
        allow_pickle=_bool("PLAYGROUND_ALLOW_PICKLE", False),
        allowed_dirs=_paths("PLAYGROUND_ALLOWED_DIRS"),
        max_new_tokens=_int("PLAYGROUND_MAX_NEW_TOKENS", 512, minimum=1),
        max_prompt_tokens=_int("PLAYGROUND_MAX_PROMPT_TOKENS", 4096, minimum=1),
        memory_budget_gb=_float("PLAYGROUND_MEMORY_BUDGET_GB", 8.0),
        run_timeout_s=_float("PLAYGROUND_RUN_TIMEOUT_S", 300.0),
        preload=_bool("PLAYGROUND_PRELOAD", True),
        concurrency=_int("PLAYGROUND_CONCURRENCY", 3, minimum=1),
        mcp=_bool("PLAYGROUND_MCP", False),
        top_k=_int_at_most("PLAYGROUND_TOP_K", 5, minimum=0, maximum=MICROSCOPE_MAX_TOP_K),
        client_calls=_int("PLAYGROUND_CLIENT_CALLS", 2 if public else 0, minimum=0),
        queue_size=_int("PLAYGROUND_QUEUE_SIZE", 64, minimum=0),
        stream_open_s=_float("PLAYGROUND_STREAM_OPEN_S", 30.0),
        uploads_mb=_float("PLAYGROUND_UPLOADS_MB", 512.0),
        trust_forwarded=_bool("PLAYGROUND_TRUST_FORWARDED", default=in_a_space()),
        pause_idle_s=_float("PLAYGROUND_PAUSE_IDLE_S", 180.0),
        run_lifetime_s=_float("PLAYGROUND_RUN_LIFETIME_S", 3600.0),
        max_runs=_int("PLAYGROUND_MAX_RUNS", 12, minimum=1),
        max_paces=_int("PLAYGROUND_MAX_PACES", 1000, minimum=1),
        malloc_arenas=_int("PLAYGROUND_MALLOC_ARENAS", 2, minimum=0),
        max_rooms=_int("PLAYGROUND_MAX_ROOMS", 20, minimum=1),
        room_followers=_int("PLAYGROUND_ROOM_FOLLOWERS", 200, minimum=1),
        room_grace_s=_float("PLAYGROUND_ROOM_GRACE_S", 120.0),
    )


def in_a_space() -> bool:
    """Whether this runs as a Hugging Face Space (its proxy sets X-Forwarded-For)."""
    return os.environ.get("SYSTEM") == "spaces" or bool(os.environ.get("SPACE_ID"))
