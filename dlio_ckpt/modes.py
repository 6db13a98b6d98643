"""The ways of running a checkpoint benchmark, one table: ``workload.mode`` → a module with
``preflight(ctx)`` (checks before anything is written) and ``run(ctx)`` (the run, then its results).

Why a table of lazily imported modules: torch and Lightning take seconds to import and gigabytes to
install, and the emulator must start without them; a mode whose packages are missing stops with the
``pip install`` that provides them. Every mode runs inside the same skeleton (:mod:`dlio_ckpt.context`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .errors import ConfigError

if TYPE_CHECKING:
    from .context import RunContext
    from .steps import Writes


@dataclass(frozen=True)
class Entry:
    """One mode: its module (imported on use), what provides its imports, and the storage types its
    framework can save to (None: every one; the config's rule derives from it)."""

    module: str
    install: str = ""
    storage: tuple[str, ...] | None = None
    predict: str = ""  # a real mode's "what plan says" without torch: a function in real/predict.py


REGISTRY: dict[str, Entry] = {  # the only list of modes: the config's choices derive from it
    "emulated": Entry("dlio_ckpt.runner"),
    "lightning": Entry("dlio_ckpt.real.lightning_mode", "pip install 'dlio_ckpt[lightning]'",
                       ("local_fs", "s3", "gcs"), "lightning"),
    "fsdp": Entry("dlio_ckpt.real.fsdp_mode", "pip install 'dlio_ckpt[fsdp]'", ("local_fs", "s3", "gcs"), "fsdp"),
    "gds": Entry("dlio_ckpt.real.gds_mode", "pip install 'dlio_ckpt[gds-cu13]' (CUDA 13) or 'dlio_ckpt[gds-cu12]' "
                 "(CUDA 12) on a machine with a CUDA GPU", ("local_fs", "gds"), "gds"),
}
NAMES = tuple(REGISTRY)


class Mode(Protocol):
    """What :mod:`dlio_ckpt.launch` needs of a mode to run the sequence every mode shares (checks,
    storage prepared, the checkpoint folder replaced and recorded, the run, its result files)."""

    FSYNC: str  # what checkpoint.fsync makes this mode do, said plainly (summary.json io.fsync)

    def preflight(self, ctx: RunContext) -> None:
        """Checks that need no storage (the emulated mode builds its plan here)."""

    def writes(self, ctx: RunContext) -> Writes:
        """What it may write in the checkpoint folder (the run record)."""

    def needed_bytes(self, ctx: RunContext) -> int:
        """Bytes of every checkpoint it writes, for the room check (asked on rank 0 only)."""

    def check_reads(self, ctx: RunContext) -> None:
        """Checks that need the storage checked first (a read-only run's steps)."""

    def run(self, ctx: RunContext) -> dict[str, Any] | None:
        """The run, ending with its result files (``context.write_results``); the summary on rank 0."""


def prediction(workload: Any, world_size: int) -> dict[str, Any]:
    """What ``plan`` says of a real mode's checkpoint, without importing its framework."""
    from .real import predict

    return getattr(predict, REGISTRY[workload.mode].predict)(workload, world_size)


def load_mode(mode: str) -> Mode:
    entry = REGISTRY[mode]
    try:
        return importlib.import_module(entry.module)  # type: ignore[return-value]
    except ImportError as exc:
        raise ConfigError("workload.mode", mode,
                          f"needs {exc.name}, which is not installed ({entry.install})") from None
