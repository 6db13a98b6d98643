"""What every real mode shares: where its checkpoints go, how its timings become result files.

Why: the three modes differ in what they save and how, not in the contract around it. Each one
produces :class:`~dlio_ckpt.results.OpRecord` per process and checkpoint; this module turns them into
the same ``summary.json`` and ``{rank}_per_epoch_stats.json`` the emulator writes, so ``diff`` and
``report`` read either.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from .. import runner
from ..backends import Backend, get_backend
from ..comm import Comm, on_root
from ..config import Checkpoint, Workload
from ..errors import ConfigError
from ..failure import RunState, Watchdog, watching
from ..results import OpRecord
from ..runner import refuse_old_checkpoints, replace_old_checkpoints, step_name


@dataclass
class ModeContext:
    """One process's view of a real-mode run."""

    workload: Workload
    comm: Comm
    backend: Backend
    state: RunState = field(default_factory=RunState)
    watchdog: Watchdog | None = None
    run_dir: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)

    @classmethod
    def build(cls, workload: Workload, comm: Comm) -> ModeContext:
        st = workload.storage
        return cls(workload, comm, get_backend(st.storage_type, st.storage_root, st.storage_options,
                                               comm.local_rank))

    @property
    def ck(self) -> Checkpoint:
        return self.workload.checkpoint

    def path(self, step: int, suffix: str = "") -> str:
        """The backend path of a step's checkpoint (a folder for DCP, a file for Lightning)."""
        return self.backend.join(self.ck.checkpoint_folder, step_name(step) + suffix)

    def url(self, path: str) -> str:
        """What a framework is given: a local path, or ``s3://bucket/key`` / ``gs://bucket/key``."""
        url = getattr(self.backend, "url", None)
        return url(path) if url else path

    def watch(self) -> AbstractContextManager:
        return watching(self.watchdog)


# Checkpoint keys that shape the emulator's synthetic files and mean nothing to a framework's own save
EMULATOR_ONLY = ("format", "scale", "odirect", "verify", "chunk_size", "recovery_rank_shift", "ranks_per_host", "mode")


def storage_preflight(ctx: ModeContext, *, supported: tuple[str, ...]) -> None:
    """Before anything is written: the mode can use this storage, the storage answers, and an earlier
    run's checkpoints are not silently mixed with ours."""
    st, ck = ctx.workload.storage, ctx.ck
    if ctx.backend.name not in supported:
        raise ConfigError("workload.storage.storage_type", st.storage_type,
                          f"mode={ctx.workload.mode} supports storage_type {', '.join(supported)}")
    for key in EMULATOR_ONLY:  # a key the framework cannot honour is refused, never silently dropped
        value = getattr(ck, key)
        if value != Checkpoint.model_fields[key].default:
            raise ConfigError(f"workload.checkpoint.{key}", value, f"applies to emulated runs only: in "
                              f"mode={ctx.workload.mode} the framework decides it; leave it out")
    if getattr(getattr(ctx.backend, "options", None), "spread_prefixes", 0):
        raise ConfigError("workload.storage.storage_options.spread_prefixes", ctx.backend.options.spread_prefixes,
                          "applies to emulated runs only: in real modes the framework names the objects")
    if ck.num_checkpoints_write == 0:
        raise ConfigError("workload.checkpoint.num_checkpoints_write", 0,
                          f"must be >= 1 in mode={ctx.workload.mode} (it reads back what this run saved)")
    on_root(ctx.comm, lambda: ctx.backend.check(writing=True))
    on_root(ctx.comm, lambda: refuse_old_checkpoints(ctx.backend, ck))


def clear_old(ctx: ModeContext) -> None:
    """``checkpoint.overwrite``: remove an earlier run's checkpoints before timing starts."""
    if ctx.comm.rank == 0 and ctx.ck.overwrite:
        replace_old_checkpoints(ctx.backend, ctx.ck.checkpoint_folder)
    if ctx.comm.rank == 0:
        ctx.backend.makedirs(ctx.backend.join(ctx.ck.checkpoint_folder))
    ctx.comm.barrier()


def evict_before_read(ctx: ModeContext, paths: list[str]) -> None:
    """As in emulated runs: unless ``checkpoint.read_from_page_cache``, a load reads from storage,
    not from the pages the save left in this host's cache."""
    if ctx.backend.capabilities.evict_cache and not ctx.ck.read_from_page_cache:
        for path in paths:
            ctx.backend.evict(path)


def read_cache(ctx: ModeContext) -> str:
    return runner.read_cache(ctx.backend, ctx.ck)


def fsync_meaning(ctx: ModeContext, what: str) -> str | bool:
    """``what``: how this mode syncs when ``checkpoint.fsync`` asks (object stores: implicit)."""
    return runner.fsync_meaning(ctx.backend, ctx.ck.fsync, what)


def record(ctx: ModeContext, phase: str, index: int, start: float, duration: float, nbytes: int,
           files: int) -> OpRecord:
    return OpRecord(phase, index, index, ctx.comm.rank, start, start + duration, duration, nbytes, files)


def write_results(ctx: ModeContext, records: list[OpRecord], checkpoint_bytes: int, io: dict[str, Any],
                  extra: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The emulator's result files (:func:`~dlio_ckpt.runner.finish_run`), with this mode's facts.
    ``checkpoint_bytes``: one checkpoint, all processes, as written; ``extra``: this process's own."""
    def describe(per_process: list[dict[str, Any]]) -> dict[str, Any]:
        return {"mode": ctx.workload.mode, "num_accelerators": ctx.comm.size,
                "io": {"storage_type": ctx.backend.name, "storage": ctx.backend.describe(), **io},
                "per_process": per_process}
    return runner.finish_run(ctx.comm, ctx.run_dir, ctx.meta, ctx.started, records, checkpoint_bytes,
                             extra or {}, describe)
