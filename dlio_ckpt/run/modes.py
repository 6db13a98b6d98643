"""The ways of running a checkpoint benchmark, one table: ``workload.mode`` → a module that keeps the
contract :class:`dlio_ckpt.run.context.Mode` states (FSYNC, preflight, writes, needed_bytes, check_reads, run).

Why a table of lazily imported modules: torch and Lightning take seconds to import and gigabytes to
install, and the emulator must start without them; a mode whose packages are missing stops with the
``pip install`` that provides them. Every mode runs inside the same skeleton (:mod:`dlio_ckpt.run.context`).
The table imports nothing of the package, so the config derives its choices from it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from dlio_ckpt.errors import ConfigError


@dataclass(frozen=True)
class Entry:
    """One mode: its module (imported on use), what provides its imports, and the storage types its
    framework can save to (None: every one; the config's rule derives from it)."""

    module: str
    install: str = ""
    storage: tuple[str, ...] | None = None
    predict: str = ""  # a real mode's "what plan says" without its framework: "module:function"


_PREDICT = "dlio_ckpt.run.real.predict"
REGISTRY: dict[str, Entry] = {  # the only list of modes: the config's choices derive from it
    "emulated": Entry("dlio_ckpt.run.emulated.runner"),
    "lightning": Entry("dlio_ckpt.run.real.lightning_mode", "pip install 'dlio_ckpt[lightning]'",
                       ("local_fs", "s3", "gcs"), f"{_PREDICT}:lightning"),
    "fsdp": Entry("dlio_ckpt.run.real.fsdp_mode", "pip install 'dlio_ckpt[fsdp]'", ("local_fs", "s3", "gcs"),
                  f"{_PREDICT}:fsdp"),
    "gds": Entry("dlio_ckpt.run.real.gds_mode", "pip install 'dlio_ckpt[gds-cu13]' (CUDA 13) or 'dlio_ckpt[gds-cu12]' "
                 "(CUDA 12) on a machine with a CUDA GPU", ("local_fs", "gds"), f"{_PREDICT}:gds"),
}
NAMES = tuple(REGISTRY)


def prediction(workload: Any, world_size: int) -> dict[str, Any]:
    """What ``plan`` says of a real mode's checkpoint, without importing its framework."""
    module, function = REGISTRY[workload.mode].predict.split(":")
    return getattr(importlib.import_module(module), function)(workload, world_size)


def load_mode(mode: str) -> ModuleType:
    """The mode's module, which keeps :class:`dlio_ckpt.run.context.Mode`'s contract."""
    entry = REGISTRY[mode]
    try:
        return importlib.import_module(entry.module)
    except ImportError as exc:
        raise ConfigError("workload.mode", mode,
                          f"needs {exc.name}, which is not installed ({entry.install})") from None
