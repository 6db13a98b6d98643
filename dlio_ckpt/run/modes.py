"""The ways of running a checkpoint benchmark: ``workload.mode`` → a module that keeps the contract
:class:`dlio_ckpt.run.context.Mode` states (FSYNC, preflight, writes, needed_bytes, check_reads, run).

Why modules imported on use (their table is :data:`dlio_ckpt.registry.MODES`): torch and Lightning take
seconds to import and gigabytes to install, and the emulator must start without them; a mode whose
packages are missing stops with the ``pip install`` that provides them. Every mode runs inside the same
skeleton (:mod:`dlio_ckpt.run.context`).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from dlio_ckpt.registry import MODES


def prediction(workload: Any, world_size: int) -> dict[str, Any]:
    """What ``plan`` says of a real mode's checkpoint, without importing its framework."""
    return MODES.load(workload.mode, MODES[workload.mode].predict)(workload, world_size)


def load_mode(mode: str) -> ModuleType:
    """The mode's module, which keeps :class:`dlio_ckpt.run.context.Mode`'s contract."""
    return MODES.load(mode)
