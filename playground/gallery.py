"""The gallery: recorded runs of the bundled models, shipped with the project, so a lesson never waits on a live run.

Each recording is a real run's trace (`playground/data/gallery/<key>.json`), one per method that runs offline on the
bundled models and per decoding where it teaches something else, made by `tests/measure/record_gallery.py` from the
`Recording` below (what was asked: enough to record it again) and opened in the replay and the step microscope
without loading a model. Its title and the line that says what to look at are `gallery.<key>.title` and
`gallery.<key>.look` in each language; the data folder's README.md says how and where the files were made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from .examples import BY_NAME
from .i18n import DEFAULT_LANGUAGE, Number, t
from .models import DEFAULT_TARGET, DEFAULT_UNIVERSAL_ASSISTANT, GEMMA_FIRST_LAYERS
from .request import RunRequest, new_request
from .trace import Trace

GALLERY_DIR = Path(__file__).resolve().parent / "data" / "gallery"
RECORDED_DTYPE = "float32"  # exact: greedy drafting equals plain greedy
RECORDED_TOKENS = 48


@dataclass(frozen=True)
class Recording:
    """One gallery run: the request that made it (an example prompt by its English name) and its file."""

    key: str
    method: str
    example: str
    sample: bool = False
    assistant: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    temperature: float = 0.7  # sampling: readable text from a 270M model, still far from greedy
    seed: int = 0

    def request(self) -> RunRequest:
        """The run to record (the target's own defaults fill the parameters it leaves out, as on the page)."""
        return new_request(BY_NAME[self.example].text, method=self.method, assistant=self.assistant,
                           params=dict(self.params), sample=self.sample, temperature=self.temperature,
                           seed=self.seed, dtype=RECORDED_DTYPE, max_new_tokens=RECORDED_TOKENS,
                           target=DEFAULT_TARGET)

    @property
    def path(self) -> Path:
        return GALLERY_DIR / f"{self.key}.json"

    def title(self, lang: str = DEFAULT_LANGUAGE) -> str:
        return t(f"gallery.{self.key}.title", lang)

    def look(self, lang: str = DEFAULT_LANGUAGE) -> str:
        """What to look at in this run, in `lang`; its decimals (the temperature, the recording's own tokens per
        step) are fields the formatter writes in that language."""
        return t(f"gallery.{self.key}.look", lang, temperature=Number(self.temperature, "g"),
                 tau=Number(load(self.key).summary.tokens_per_step or 0.0, ".2f"))


# Greedy speculative decoding drafts with Gemma's own first 12 layers (the derived drafter the page suggests offline:
# drafts kept, refused and corrected, the output still Gemma's own greedy text in float32). The sampling run keeps the
# target drafting for itself: its microscope shows why q differs from p even then (the temperature applied twice).
GALLERY: tuple[Recording, ...] = (
    Recording("baseline-greedy", "baseline", "Short fact"),
    Recording("speculative-greedy", "speculative", "Free writing", assistant=GEMMA_FIRST_LAYERS),
    Recording("speculative-sampling", "speculative", "Free writing", sample=True, assistant=DEFAULT_TARGET),
    Recording("prompt-lookup-greedy", "prompt_lookup", "Edit code"),
    Recording("prompt-lookup-sampling", "prompt_lookup", "Repeat a list", sample=True),
    Recording("early-exit-greedy", "early_exit", "Repeat a list"),
    Recording("early-exit-sampling", "early_exit", "Free writing", sample=True),
    Recording("universal-greedy", "universal", "Translate", assistant=DEFAULT_UNIVERSAL_ASSISTANT),
    Recording("universal-sampling", "universal", "Translate", sample=True, assistant=DEFAULT_UNIVERSAL_ASSISTANT),
)
BY_KEY: dict[str, Recording] = {r.key: r for r in GALLERY}


def get_recording(key: str) -> Recording:
    try:
        return BY_KEY[key]
    except KeyError:
        raise KeyError(f"no gallery recording {key!r}; known: {', '.join(BY_KEY)}") from None


@lru_cache(maxsize=None)
def load(key: str) -> Trace:
    """A recording's trace, read and checked once per process (the files ship with the code and do not change)."""
    return Trace.load(get_recording(key).path)


def choices(lang: str = DEFAULT_LANGUAGE) -> list[tuple[str, str]]:
    """(title in `lang`, key) for the page's picker, in gallery order."""
    return [(r.title(lang), r.key) for r in GALLERY]
