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

_MODES: dict[str, tuple[str, str]] = {
    # mode: (module, what provides its imports)
    "emulated": ("dlio_ckpt.runner", ""),
    "lightning": ("dlio_ckpt.real.lightning_mode", "pip install 'dlio_ckpt[lightning]'"),
    "fsdp": ("dlio_ckpt.real.fsdp_mode", "pip install 'dlio_ckpt[fsdp]'"),
    "gds": ("dlio_ckpt.real.gds_mode", "pip install 'dlio_ckpt[gds-cu13]' (CUDA 13) or 'dlio_ckpt[gds-cu12]' "
            "(CUDA 12) on a machine with a CUDA GPU"),
}


class Mode(Protocol):
    def preflight(self, ctx: RunContext) -> None: ...
    def run(self, ctx: RunContext) -> dict[str, Any] | None: ...


def load_mode(mode: str) -> Mode:
    module, hint = _MODES[mode]
    try:
        return importlib.import_module(module)  # type: ignore[return-value]
    except ImportError as exc:
        raise ConfigError("workload.mode", mode, f"needs {exc.name}, which is not installed ({hint})") from None
