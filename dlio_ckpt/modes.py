"""The ways of running a checkpoint benchmark, one table: ``workload.mode`` → a module with
``preflight(ctx)`` (checks before anything is written) and ``run(ctx)`` (the run, then its results).

Why a table of lazily imported modules: torch and Lightning take seconds to import and gigabytes to
install, and the emulator must start without them; a mode whose packages are missing stops with the
``pip install`` that provides them. Every mode runs inside the same skeleton (:mod:`dlio_ckpt.context`).
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from .context import RunContext
from .errors import ConfigError
from .steps import Writes

_MODES: dict[str, tuple[str, str]] = {
    # mode: (module, what provides its imports)
    "emulated": ("dlio_ckpt.runner", ""),
    "lightning": ("dlio_ckpt.real.lightning_mode", "pip install 'dlio_ckpt[lightning]'"),
    "fsdp": ("dlio_ckpt.real.fsdp_mode", "pip install 'dlio_ckpt[fsdp]'"),
    "gds": ("dlio_ckpt.real.gds_mode", "pip install 'dlio_ckpt[gds-cu13]' (CUDA 13) or 'dlio_ckpt[gds-cu12]' "
            "(CUDA 12) on a machine with a CUDA GPU"),
}


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


def load_mode(mode: str) -> Mode:
    module, hint = _MODES[mode]
    try:
        return importlib.import_module(module)  # type: ignore[return-value]
    except ImportError as exc:
        raise ConfigError("workload.mode", mode, f"needs {exc.name}, which is not installed ({hint})") from None
