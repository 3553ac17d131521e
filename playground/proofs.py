"""What this project's tests prove about a method's output, greedy and sampling, and which tests prove it.

The registry gives each method its `Proven`; the lectures and README show the claims, and `tests/test_lecture_truth.py`
checks that every named test exists, runs that method and asserts what the claim says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .i18n import DEFAULT_LANGUAGE, t


# What a test of this project proves about a decoding mode's output. "reference": plain decoding itself; "lossless"
# (greedy): equal to a baseline run token for token in float32; "exact" (sampling): a chi-square test against the
# target's exact distribution passes; "lossy": a test shows the output leaves the target's (greedy: it differs from a
# baseline run; sampling: the chi-square test rejects it); "untested": no test decides it yet.
ProofKind = Literal["reference", "lossless", "exact", "lossy", "untested"]


@dataclass(frozen=True)
class Proof:
    """What the tests prove about one way of decoding (greedy or sampling), and which tests prove it: pytest node ids
    (`tests/<file>.py::<function>[<parameters>]`). `tests/test_lecture_truth.py` collects them, so a claim whose test
    is gone, does not run this method or asserts the other way fails there; the lectures and README show the claim."""

    kind: ProofKind
    tests: tuple[str, ...] = ()


@dataclass(frozen=True)
class Proven:
    """What is proven of a method's output, greedy and sampling (the ensemble weight aside: `ENSEMBLE_VERIFICATION`)."""

    greedy: Proof
    sampling: Proof

    def sentences(self, lang: str = DEFAULT_LANGUAGE) -> list[tuple[str, tuple[str, ...]]]:
        """(sentence in `lang`, the tests that prove it) for greedy, then sampling."""
        return [(t(f"method.proven.{mode}.{proof.kind}", lang), proof.tests)
                for mode, proof in (("greedy", self.greedy), ("sampling", self.sampling))]


_GREEDY_TEST = "tests/test_lossless.py::test_greedy_output_equals_a_baseline_run"


def equals_baseline(method: str, kind: ProofKind = "lossless") -> Proof:
    """Greedy output equal to a baseline run, on both of test_lossless.py's prompts (across and beyond the window)."""
    return Proof(kind, tuple(f"{_GREEDY_TEST}[{method}-{prompt}]"
                             for prompt in ("generation-crosses-window", "prompt-beyond-window")))
