"""A run's precision as one record: the choices, the rules of "auto", and the sentence that explains them.

Pure and torch-free (views, theory and the benchmark read it); `models.resolve_precision` asks the hardware for
the facts these functions take as arguments, once per run, and the prepared run carries the resulting `Precision`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import PlaygroundError
from .i18n import Listed, Message, Number

if TYPE_CHECKING:
    import torch

DTYPE_CHOICES: tuple[str, ...] = ("auto", "float32", "bfloat16", "float16")
"""Every precision a run may ask for, listed once: "auto" picks per device (`precision_for`), the others are
torch dtype names. The page offers those its device can run (`dtype_choices`)."""

CPU_ONLY_REFUSED = ("float16",)  # overflows on CPU in models such as the bundled Gemma (engine.validate_request)
# Precisions whose rounding can flip a near-tie: a batched verification pass may then pick the other token than
# one-token steps, so a greedy difference from baseline is reported as a near-tie, not an error.
REDUCED_DTYPES = ("bfloat16", "float16")


@dataclass(frozen=True)
class Precision:
    """A run's precision, resolved once: what was asked, the torch dtype it became, where, and why.

    Plain strings, so every view (page, CLI, benchmark, snippet, links) reads it without importing torch.
    """

    choice: str  # as asked: one of DTYPE_CHOICES
    dtype: str  # the torch dtype's name, e.g. "bfloat16"
    device: str  # "cpu", "cuda", ...
    reason: str  # one sentence for the user, e.g. "bfloat16: measured 1.9× faster than float32 on this CPU"

    def torch_dtype(self) -> torch.dtype:
        """The torch dtype itself (imports torch: for the loader and the store, not for views)."""
        import torch

        return getattr(torch, self.dtype)

    @property
    def reduced(self) -> bool:
        """Whether rounding can flip a near-tie between two tokens (see `REDUCED_DTYPES`)."""
        return self.dtype in REDUCED_DTYPES


def check_choice(choice: str) -> None:
    """Refuse a choice that is not one of DTYPE_CHOICES, naming them."""
    if choice not in DTYPE_CHOICES:
        raise PlaygroundError.keyed("error.dtype", got=repr(choice), known=", ".join(DTYPE_CHOICES))


# How much faster bfloat16 must decode than float32, measured on this machine, for `auto` to give up float32 (whose
# greedy output follows plain decoding token for token where bfloat16's batched verification can flip a near-tie).
# Two short measurements on a shared machine differ by a few per cent (19.6 vs 18.6 tokens/s is such a case): below
# this margin the difference is not worth the exactness.
BF16_FASTER_BY = 1.2


@dataclass(frozen=True)
class SpeedMeasurement:
    """Plain greedy decoding's speed in float32 and in bfloat16 on this machine, measured once (`models.speed`) and
    kept with the bundled model's conversion; the figures `auto` decides by on a CPU with native bfloat16."""

    float32_tps: float  # tokens per second
    bfloat16_tps: float
    new_tokens: int  # per timed decode
    model: str  # the catalogue key measured

    @property
    def ratio(self) -> float:
        """How many times as fast bfloat16 decoded as float32."""
        return self.bfloat16_tps / self.float32_tps if self.float32_tps > 0 else 0.0


def measured_choice(measured: SpeedMeasurement) -> tuple[str, str]:
    """bfloat16 only where it was measured at least BF16_FASTER_BY times as fast as float32, float32 otherwise;
    with the sentence that says so and gives both speeds (pure)."""
    speeds = dict(tps=Number(measured.bfloat16_tps, ".1f"), ref=Number(measured.float32_tps, ".1f"),
                  ratio=Number(measured.ratio, ".1f"))
    if measured.ratio >= BF16_FASTER_BY:
        return "bfloat16", Message.keyed("precision.auto.measured_faster", **speeds)
    return "float32", Message.keyed("precision.auto.measured_slower", threshold=Number(BF16_FASTER_BY, ".1f"),
                                    **speeds)


def auto_reason(device: str, cpu_flags: tuple[str, ...] = (), gpu_bf16: bool | None = None,
                measured: SpeedMeasurement | None = None) -> tuple[str | None, str]:
    """What "auto" picks on this device and why. Pure: the device's facts are arguments. On a CPU, bfloat16 only
    where the hardware computes it natively (emulated bf16 is slower than fp32) and a measurement on this machine
    found it faster (`measured_choice`); not measured yet, float32. `gpu_bf16` None means the GPU is not asked yet
    (a ZeroGPU Space attaches one per run; the page is built before torch is imported): the dtype is then None and
    the sentence says when it is decided. The CPU's features are a list in the page's language (`Listed`)."""
    if device.startswith("cuda"):
        if gpu_bf16 is None:
            return None, Message.keyed("precision.auto.gpu_unknown")
        if gpu_bf16:
            return "bfloat16", Message.keyed("precision.auto.gpu_bf16")
        return "float32", Message.keyed("precision.auto.gpu_no_bf16")
    if device == "cpu":
        if not cpu_flags:
            return "float32", Message.keyed("precision.auto.cpu_no_bf16")
        if measured is None:
            return "float32", Message.keyed("precision.auto.cpu_unmeasured", flags=Listed(cpu_flags))
        return measured_choice(measured)
    return "float32", Message.keyed("precision.auto.other_device", device=repr(device))


def precision_for(choice: str, device: str, cpu_flags: tuple[str, ...] = (),
                  gpu_bf16: bool | None = None, measured: SpeedMeasurement | None = None) -> Precision:
    """The precision record for a choice on a device whose facts are given (pure; `resolve_precision` asks the
    hardware and reads the kept measurement). An unknown choice raises the one message that lists the choices."""
    check_choice(choice)
    if choice != "auto":
        return Precision(choice, choice, device, Message.keyed("precision.explicit", choice=choice))
    dtype, reason = auto_reason(device, cpu_flags, gpu_bf16, measured)
    if dtype is None:
        raise PlaygroundError(f"cannot resolve auto precision on {device}: its bfloat16 support is unknown")
    return Precision(choice, dtype, device, reason)


def dtype_choices(device: str) -> tuple[str, ...]:
    """The precisions a run on this device can use (float16 is refused on CPU)."""
    return tuple(c for c in DTYPE_CHOICES if not (device == "cpu" and c in CPU_ONLY_REFUSED))
