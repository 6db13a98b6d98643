"""Full-size times projected from runs of one job at two or more scales: what grows with the bytes, apart
from what does not.

Why: a scaled run (``checkpoint.scale``) shrinks every file but keeps every file, item and call, so its
time is a part the full size keeps (per file, item and call: the processes' CPU per item, the storage's
latency per call) plus a part that grows with the bytes (the storage's bandwidth, and per-byte CPU such as
torch.save's CRC-32 and our synthetic bytes). One run cannot tell the two apart: dividing its whole time
by its bytes ratio (``io.scaled.projected_full_size``) scales the fixed part too, which at small scales is
nearly all of it (llama3_70b under DCP's pattern on 2 processes, scale 0.0002: 16,766 s projected from a
7.7 s save). Runs at two or more scales can: each phase's mean duration is fitted as
``fixed + bytes / bandwidth`` by least squares over the bytes it moved (a save what it wrote; a load what it
read, the framework's read-ahead included), and taken to what the phase moves at full size. A sweep over
``checkpoint.scale`` does it (:func:`across_scales`).

What it assumes, and says beside the figure: the fixed part stays as measured (the same files, items and
calls at full size, on the same processes), the bytes keep the bandwidth the scales reached (a storage
whose rate changes beyond them, such as a page cache the full size overflows, is not foreseen), and the
processes are this run's.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

GIB = 1 << 30

BASIS = ("a projection, not a measurement: each phase's mean duration fitted as fixed + bytes / bandwidth (least "
         "squares over the bytes the phase moved at each scale) and taken to what it moves at full size; it "
         "assumes the fixed part (per file, item and call) stays as measured, the bytes keep the bandwidth the "
         "scales reached, and the processes are these runs'")


@dataclass(frozen=True)
class ScalePoint:
    """One run of the job: its scale, the bytes its phase moved (mean per checkpoint) and its mean duration."""

    scale: float
    bytes: float
    seconds: float
    cpu_bound: bool = False  # its phase's time was set by the processes' CPU (checkpoints[].cpu.bound)


@dataclass(frozen=True)
class ScaleFit:
    """A phase's full-size time projected from :class:`ScalePoint` s (``projected_seconds`` None where the
    time did not grow with the bytes: ``note`` says why)."""

    phase: str
    points: list[ScalePoint]
    full_size_bytes: int  # what the phase moves at full size
    fixed_seconds: float
    seconds_per_GiB: float  # noqa: N815 - named as summary.json names its figures (_GiB_)
    projected_seconds: float | None
    largest_residual_share: float  # the largest |fit - measured| over measured among the points
    cpu_bound: bool  # any point's time was set by the processes' CPU, not the storage
    basis: str = BASIS
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def across_scales(phase: str, points: list[ScalePoint], full_size_bytes: int) -> ScaleFit | None:
    """``phase``'s full-size time from ``points``, at ``full_size_bytes`` moved (None with fewer than two
    distinct sizes)."""
    if len({p.bytes for p in points}) < 2:
        return None
    b, a = statistics.linear_regression([p.bytes for p in points], [p.seconds for p in points])  # least squares
    residual = max(abs(a + b * p.bytes - p.seconds) / p.seconds for p in points)
    grows = b > 0
    return ScaleFit(phase, sorted(points, key=lambda p: p.bytes), full_size_bytes, a, b * GIB,
                    a + b * full_size_bytes if grows else None, residual, any(p.cpu_bound for p in points),
                    note="" if grows else "the time did not grow with the bytes across these scales (set by "
                    "work per file, item or call, or noise): no projection; sweep scales further apart")


def said(fit: ScaleFit) -> str:
    """One line for the console: the figure, its parts and what it assumes (briefly)."""
    scales = ", ".join(f"{p.scale:g}" for p in fit.points)
    if fit.projected_seconds is None:
        return f"{fit.phase}: not projected from scales {scales}: {fit.note}"
    return (f"{fit.phase} {fit.projected_seconds:,.1f} s at full size, projected from scales {scales} (fixed "
            f"{fit.fixed_seconds:.2f} s + {fit.seconds_per_GiB:.3f} s per GiB x {fit.full_size_bytes / GIB:,.4g} "
            f"GiB; the fit misses a point by up to {fit.largest_residual_share:.0%}"
            + ("; the processes' CPU set the time at a scale" if fit.cpu_bound else "")
            + "; assumes the fixed part as measured, the bytes at the rate these scales reached, these processes)")
