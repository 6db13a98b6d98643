"""Starting one run and carrying it out in its run folder: what a plain run and every point of a
sweep do alike (the caller decides what a failure ends: the job, or the point).

Why apart from the CLI: ``sweep`` runs many points inside one job through exactly this path, so a
point is an ordinary run with ordinary result files.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from dlio_ckpt.cluster.comm import Comm, on_root
from dlio_ckpt.cluster.placement import place
from dlio_ckpt.config import Workload
from dlio_ckpt.errors import ConfigError, StorageError
from dlio_ckpt.io.backends import get_backend
from dlio_ckpt.io.backends.base import SECRET_OPTIONS
from dlio_ckpt.io.backends.timed import TimedBackend, timed_backend
from dlio_ckpt.io.latency import LatencyRecorder
from dlio_ckpt.io.trace import Tracer
from dlio_ckpt.registry import BACKENDS
from dlio_ckpt.results import provenance
from dlio_ckpt.results.folder import results_in
from dlio_ckpt.results.latency import console_line
from dlio_ckpt.results.schema import Summary
from dlio_ckpt.results.summary import dumps, write_result
from dlio_ckpt.run.context import Mode, RunContext, finished_line
from dlio_ckpt.run.failure import RunState, Watchdog
from dlio_ckpt.run.modes import load_mode
from dlio_ckpt.run.preparation import prepare_storage, start_writing, tier_backend

log = logging.getLogger("dlio_ckpt")
_SECRETS = SECRET_OPTIONS  # storage_options that hold credentials (backends.base)


def start(workload: Workload, comm: Comm, world_size: int, state: RunState,
          watchdog: Watchdog | None) -> tuple[Mode, RunContext]:
    """The mode and its context, checked (``preflight``) before anything is written. Every tier's backend is
    timed (:mod:`dlio_ckpt.io.backends.timed`): each storage call of the run, by kind, in a histogram per tier;
    the emulated mode's preflight has it tell the calls on the coordinator's files apart. With
    ``checkpoint.trace`` each call is also an event of this process's trace (:mod:`dlio_ckpt.io.trace`), from the
    storage checks on."""
    mode: Mode = load_mode(workload.mode)
    state.tracer = Tracer(comm.rank) if workload.checkpoint.trace else None  # a sweep's points share the state
    state.phase = "storage checks"
    placement = place(comm, workload.hosts.simulate)
    tiers: list = [timed_backend(tier_backend(workload, k, comm.local_rank, placement.node_folder), LatencyRecorder())
                   for k in range(len(workload.storages))]
    for backend in tiers:
        if isinstance(backend, TimedBackend):
            backend.tracer = state.tracer
    ctx = RunContext(workload, comm, tiers[0], world_size, state, watchdog, tiers=tiers, placement=placement)
    mode.preflight(ctx)
    ctx.fsync_wording = mode.FSYNC
    prepare_storage(ctx, lambda: mode.needed_bytes(ctx), mode.writes(ctx))
    mode.check_reads(ctx)
    state.phase = "setup"  # checks passed: what fails from here is not a storage check
    return mode, ctx


def check_run_dir(run_dir: str, replace: bool) -> None:
    """One run, one folder: a folder that already holds a run's results is refused, unless the user
    asked to replace them (then :func:`execute` removes them first, and nothing else)."""
    if not run_dir.strip():
        raise ConfigError("hydra.run.dir", run_dir, "must name a folder for the results")
    held = results_in(Path(run_dir))
    if held and not replace:
        shown = ", ".join(str(p.relative_to(run_dir)) for p in held[:3]) + (
            f" and {len(held) - 3} more" if len(held) > 3 else "")
        raise ConfigError("hydra.run.dir", run_dir, f"already holds a run ({shown}): the results of two runs must not "
                          "mix; choose another folder, or add --replace-results to remove that run's files first")
    probe_folder("hydra.run.dir", run_dir)


def probe_folder(key: str, path: str) -> None:
    """A results folder that cannot be written is bad input found before the run (exit 2), not a
    traceback from every rank at the end: create it, write and remove a probe, remove what was made."""
    try:
        get_backend("local_fs", path, {}).probe_write("")
    except StorageError as exc:
        raise ConfigError(key, path, str(exc)) from None


def execute(mode: Mode, ctx: RunContext, run_dir: str, raw: dict, overrides: list[str],
            command: list[str], replace: bool = False) -> Summary | None:
    """Rank 0 makes the run folder (``.hydra/config.yaml``, ``overrides.yaml``, the log), first
    removing an earlier run's results there when ``replace``; then the run, which writes
    ``summary.json`` there. Returns the summary on rank 0."""
    comm = ctx.comm
    ctx.state.run_dir = ctx.run_dir = run_dir  # first: a signal once the folder exists leaves a failed summary in it
    on_root(comm, lambda: _prepare_run_dir(run_dir, redact(raw), [redact(o) for o in overrides], replace))
    ctx.state.run_id = comm.bcast(secrets.token_hex(8) if comm.rank == 0 else None)
    if ctx.state.tracer is not None:  # each process its own file (on another host, in its own copy of the folder)
        os.makedirs(run_dir, exist_ok=True)
        ctx.state.tracer.start(run_dir)
    _setup_logging(run_dir, comm.rank)
    local = BACKENDS[ctx.backend.name].local_folder
    ctx.meta = {"workload": ctx.workload.model.name, "run_id": ctx.state.run_id, "world_size": ctx.world_size,
                "run_dir": run_dir, "command": " ".join(["dlio_ckpt", *(redact(a) for a in command)]),
                **provenance.run_facts(ctx.workload.accelerator_type, ctx.backend.name,
                                       ctx.backend.join(ctx.ck.checkpoint_folder) if local else None, run_dir)}
    ctx.started = time.time()
    if ctx.ck.num_checkpoints_write > 0:
        start_writing(ctx, lambda: mode.needed_bytes(ctx))
    result = mode.run(ctx)
    ctx.state.close_trace()
    if result is not None:
        for line in latency_lines(result):
            log.info("%s", line)
        library = provenance.storage_library({"storage_type": ctx.backend.name, **ctx.backend.describe()})
        write_result(os.path.join(run_dir, "provenance.json"), dumps(provenance.document(redact(raw), library)))
        log.info("%s", finished_line(result, run_dir))
    return result


def latency_lines(result: Summary) -> list[str]:
    """Each checkpoint's p99s and stonewall for the console, after its duration was said: the figures exist once
    every process's histograms are merged, at the end of the run."""
    if result.checkpoints is None:
        return []
    return [line for phase in ("save", "load") for c in result.checkpoints.phase(phase)
            if (line := console_line(f"{phase}_ckpt{c.index} ({c.duration_seconds:.3f} s)", c.latency, c.stonewall))]


def redact(item: Any) -> Any:
    """Credentials given as storage_options never reach the result files (config, overrides, command):
    under ``storage`` and in each item of ``tiers`` (a list), and inside an override whose value is a
    whole list or dict (``++workload.tiers=[{..., storage_options: {secret_access_key: X}}]``)."""
    if isinstance(item, dict):
        return {k: "***" if k in _SECRETS and v is not None else redact(v) for k, v in item.items()}
    if isinstance(item, list | tuple):
        return [redact(v) for v in item]
    if isinstance(item, str) and "=" in item:
        key, _, _ = item.partition("=")
        if key.rsplit(".", 1)[-1] in _SECRETS:
            return f"{key}=***"
        return _SECRET_INSIDE.sub(r"\1***", item)
    return item


# a secret option inside an override's list or dict value: its name, then its value up to the next , } or ]
_SECRET_INSIDE = re.compile(r"(\b(?:" + "|".join(_SECRETS) + r")\s*[:=]\s*)('[^']*'|\"[^\"]*\"|[^,}\]\s]+)")


def _prepare_run_dir(run_dir: str, raw: dict, overrides: list[str], replace: bool) -> None:
    if replace:
        for path in results_in(Path(run_dir)):
            path.unlink()
    os.makedirs(os.path.join(run_dir, ".hydra"), exist_ok=True)
    with open(os.path.join(run_dir, ".hydra", "config.yaml"), "w") as fh:
        fh.write(OmegaConf.to_yaml({"workload": raw}))
    with open(os.path.join(run_dir, ".hydra", "overrides.yaml"), "w") as fh:
        fh.write(OmegaConf.to_yaml(list(overrides)))


def _setup_logging(run_dir: str, rank: int) -> None:
    log.setLevel(logging.INFO)
    log.handlers.clear()
    if rank == 0:
        fmt = logging.Formatter("[%(asctime)s] %(message)s")
        for handler in (logging.StreamHandler(sys.stdout), logging.FileHandler(f"{run_dir}/dlio_ckpt.log")):
            handler.setFormatter(fmt)
            log.addHandler(handler)
