"""Where a model comes from: a spec (catalogue key, Hub id or local folder) classified and checked before anything
touches the disk or the network, whether the Hub answers (the probe, its answer kept for a while), and a loading
failure turned into one line the user can act on (gated, missing, offline, refused).
"""

from __future__ import annotations

import errno
import importlib
import os
import re
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from huggingface_hub import constants as hub_constants
from huggingface_hub import errors as hub_errors
from huggingface_hub import get_token
from huggingface_hub.utils import get_session

from ..errors import shorten
from ..settings import Settings
from .catalogue import CATALOGUE, ModelEntry
from .loaded import ModelLoadError, _first_line


MAX_HUB_ID_CHARS = 96  # the Hub's own bound on owner/name (huggingface_hub's validate_repo_id)
HUB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class _Source:
    kind: Literal["bundled", "hub", "local"]
    entry: ModelEntry | None = None
    hub_id: str | None = None
    path: Path | None = None


def _is_path_syntax(spec: str) -> bool:
    # Hub ids have exactly one "/" and never start with "/", "~" or ".".
    return (
        spec.startswith(("/", "~", "."))
        or "\\" in spec
        or spec.count("/") > 1
        or Path(spec).is_absolute()
    )


def _resolve(spec: str, settings: Settings) -> _Source:
    """Classify and validate a spec before anything touches the disk or the network."""
    spec = spec.strip()
    if not spec:
        raise ModelLoadError.keyed("error.model.none")
    entry = CATALOGUE.get(spec)
    if entry is not None:
        if entry.source == "bundled":
            return _Source("bundled", entry=entry)
        return _Source("hub", entry=entry, hub_id=entry.hub_id)
    if spec.startswith("bundled/"):
        known = ", ".join(k for k, e in CATALOGUE.items() if e.source == "bundled")
        raise ModelLoadError.keyed("error.unknown_bundled_model", spec=repr(spec), known=known)
    # Outside public mode an existing relative directory wins, as in from_pretrained.
    # In public mode only explicit path syntax counts, so probing cannot reveal directories.
    try:  # a path the file system refuses for what it is (a name over 255 bytes, a NUL byte) says so
        if _is_path_syntax(spec) or (not settings.public and Path(spec).is_dir()):
            return _Source("local", path=_check_local_path(spec, settings))
    except (OSError, ValueError) as exc:
        if isinstance(exc, ModelLoadError):
            raise
        too_long = isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG
        raise ModelLoadError.keyed("error.model.name_too_long" if too_long else "error.model.bad_path",
                                   spec=repr(shorten(spec))) from None
    if "/" not in spec:
        raise ModelLoadError.keyed("error.unknown_model", spec=repr(spec))
    if len(spec) > MAX_HUB_ID_CHARS:
        raise ModelLoadError.keyed("error.model.hub_id_too_long", spec=repr(shorten(spec)), n=len(spec),
                                   limit=MAX_HUB_ID_CHARS)
    if not HUB_ID_RE.match(spec) or ".." in spec:
        raise ModelLoadError.keyed("error.model.bad_hub_id", spec=repr(spec))
    return _Source("hub", hub_id=spec)


def _check_local_path(spec: str, settings: Settings) -> Path:
    path = Path(spec).expanduser()
    if settings.public:
        real = path.resolve()
        allowed = [settings.cache_dir, *settings.allowed_dirs]
        if not any(real.is_relative_to(root.expanduser().resolve()) for root in allowed):
            raise ModelLoadError.keyed("error.model.path_public")
        path = real  # load what was checked, not a symlink that could be swapped later
    if not path.exists():
        raise ModelLoadError.keyed("error.model.no_directory", spec=spec)
    if not path.is_dir():
        raise ModelLoadError.keyed("error.model.not_directory", spec=spec)
    if not (path / "config.json").is_file():
        raise ModelLoadError.keyed("error.model.no_config", spec=spec)
    return path


def _local_use_safetensors(path: Path, spec: str, settings: Settings) -> bool:
    """use_safetensors for from_pretrained; refuse pickle-only checkpoints unless allowed."""
    if any(path.glob("*.safetensors")):
        return True
    if any(path.glob("pytorch_model*.bin")):
        if settings.allow_pickle:
            return False
        raise ModelLoadError.keyed("error.model.pickle_only", spec=spec)
    raise ModelLoadError.keyed("error.model.no_weights", spec=spec)


def _offline_env() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in {"1", "ON", "YES", "TRUE"}


def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether Hub presets are worth offering; the probe's answer is kept for a while (`HubProbe`)."""
    if hub_constants.is_offline_mode() or _offline_env():
        return False
    return HUB_PROBE.reachable(hub_constants.ENDPOINT, timeout)


def _head_ok(endpoint: str, timeout: float) -> bool:
    try:
        response = get_session().head(endpoint, timeout=timeout)
    except Exception:  # any transport failure means "not reachable"; nothing to report
        return False
    return response.status_code < 500


class HubProbe:
    """The Hub probe's answers, each kept for a time-to-live: a long-running server (a Space) whose network
    comes back offers Hub presets again a minute later, without probing on every page load or preset pick.
    `clock` is injectable so a test moves time instead of sleeping."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, ttl_reachable_s: float = 600.0,
                 ttl_unreachable_s: float = 60.0) -> None:
        self.clock = clock
        self.ttl_s = {True: ttl_reachable_s, False: ttl_unreachable_s}
        self._answers: dict[str, tuple[bool, float]] = {}  # endpoint -> (reachable, when it expires)
        self._lock = threading.Lock()  # one probe at a time: callers meanwhile wait for its answer

    def reachable(self, endpoint: str, timeout: float) -> bool:
        with self._lock:
            known = self._answers.get(endpoint)
            if known is not None and self.clock() < known[1]:
                return known[0]
            answer = _head_ok(endpoint, timeout)
            self._answers[endpoint] = (answer, self.clock() + self.ttl_s[answer])
            return answer


HUB_PROBE = HubProbe()


def _network_error_types() -> tuple[type[BaseException], ...]:
    """Exception types meaning "no connection", from whichever HTTP clients are installed."""
    types: list[type[BaseException]] = [
        ConnectionError, TimeoutError, socket.gaierror,
        hub_errors.LocalEntryNotFoundError, hub_errors.OfflineModeIsEnabled,
    ]
    for module_name, names in (("httpx", ("TransportError",)), ("httpx2", ("TransportError",)),
                               ("requests", ("ConnectionError", "Timeout"))):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        types.extend(getattr(module, name) for name in names if hasattr(module, name))
    return tuple(types)


_NETWORK_ERRORS = _network_error_types()


def _exception_chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _load_error(spec: str, exc: BaseException, source: _Source, settings: Settings) -> ModelLoadError:
    """Turn a loading failure into one line a user can act on (a keyed message: the library's own first line is
    quoted in it, untranslated)."""
    chain = _exception_chain(exc)

    def seen(*types: type[BaseException]) -> bool:
        return any(isinstance(e, types) for e in chain)

    if source.kind == "hub":
        if seen(hub_errors.GatedRepoError):
            return ModelLoadError.keyed("error.load.gated_token" if get_token() else "error.load.gated", spec=spec)
        if seen(hub_errors.RepositoryNotFoundError, hub_errors.RevisionNotFoundError):
            return ModelLoadError.keyed("error.load.no_such_model", spec=spec)
        if seen(*_NETWORK_ERRORS):
            return ModelLoadError.keyed("error.load.offline", spec=spec)
    first_line = _first_line(exc)
    if not settings.allow_pickle and "safetensors" in first_line:
        return ModelLoadError.keyed("error.load.failed_pickle", spec=spec, reason=first_line)
    if not settings.trust_remote_code and "trust_remote_code" in str(exc):
        return ModelLoadError.keyed("error.load.failed_remote_code", spec=spec, reason=first_line)
    return ModelLoadError.keyed("error.load.failed", spec=spec, reason=first_line)
