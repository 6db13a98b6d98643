"""The emulated mode: write ``num_checkpoints_write`` checkpoints in DLIO's layout, read back
``num_checkpoints_read``, from the :class:`~dlio_ckpt.planner.Plan` built once in :func:`preflight`.

Why here and not in the CLI: this is the choreography (steps, manifests, who reads what) and nothing
else; the skeleton around it (barrier, clock, watchdog, results) is :mod:`dlio_ckpt.context`'s, so it
runs the same on one process and on a thousand.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import Counter
from typing import Any

from . import references
from .background import BackgroundSaves, Staging, train
from .context import GIB, RunContext, record, say_done, timed, write_results
from .emulation import EmulatedRun, check_manifest, expected_files, io_options, shard_bytes
from .engine import Engine, FileTask, IOOptions, check_capabilities, io_buffer_bytes
from .errors import ConfigError
from .formats import Format, planned_size
from .host import available_memory, hostname
from .layouts import file_format, make_plan
from .progress import progress_display
from .restore import RankReads, figures, restore_plan
from .steps import Writes
from .tiers import Tiers

log = logging.getLogger("dlio_ckpt")


FSYNC = "every file fsynced before the process's end time"


def preflight(ctx: RunContext) -> None:
    """The plan (built and validated once), what the read phase reads of it, and what the storages
    must be able to do for both."""
    ctx.plan = make_plan(ctx.workload, ctx.world_size)
    ctx.plan.validate()
    ctx.restore = restore_plan(ctx.workload, ctx.plan)
    check_capabilities(ctx.backend, io_options(ctx))
    ck = ctx.ck
    for backend in ctx.tiers[1:]:  # drains write without O_DIRECT; the read phase reads as asked
        check_capabilities(backend, IOOptions(fsync=ck.fsync))
    check_capabilities(ctx.tiers[ck.read_tier], io_options(ctx))
    _check_io_buffers(ctx)
    if ck.async_save and ck.staging == "real":
        _check_staging_memory(ctx)


def writes(ctx: RunContext) -> Writes:
    fmt, plan = file_format(ctx.workload), ctx.plan
    coordinator = tuple(name for c in plan.coordinator for name in (c.name, c.staged) if name)
    return Writes.of_run(ctx.ck, files=(*(f"{f.stem}{fmt.extension}" for p in plan.ranks for f in p.files),
                                        *coordinator))


def needed_bytes(ctx: RunContext) -> int:
    return ctx.ck.num_checkpoints_write * sum(expected_files(ctx, file_format(ctx.workload)).values())


def check_reads(ctx: RunContext) -> None:
    """A read-only run: every step it will read complete and of this layout, before anything is created."""
    ck, fmt = ctx.ck, file_format(ctx.workload)
    if ck.num_checkpoints_write == 0:
        files = ctx.on_root_io(lambda: expected_files(ctx, fmt))
        key = ctx.on_root_io(lambda: check_manifest(ctx, files, 1, None))
        for i in range(2, ck.num_checkpoints_read + 1):
            ctx.on_root_io(lambda i=i: check_manifest(ctx, files, i, key))


def _check_staging_memory(ctx: RunContext) -> None:
    """``staging=real`` holds every process's shards in host memory for the whole run."""
    _check_host_memory(ctx, sum(shard_bytes(ctx)), "workload.checkpoint.staging", "real",
                       "holds each process's shards in host memory",
                       "use staging=modelled, a smaller checkpoint.scale, or more hosts")


def _check_io_buffers(ctx: RunContext) -> None:
    """The engine's buffers (bytes in flight) are allocated up front for the whole run."""
    need = io_buffer_bytes(ctx.backend, ctx.ck.chunk_size)
    depth = "read_queue_depth" if ctx.backend.read_queue_depth > ctx.backend.queue_depth else "queue_depth"
    _check_host_memory(ctx, need, f"workload.storage.storage_options.{depth}", getattr(ctx.backend, depth),
                       f"holds {need / GIB:.2f} GiB of I/O buffers per process (threads x {depth} x "
                       f"(2 x chunk_size + 1 MiB), chunk_size={ctx.ck.chunk_size})",
                       f"lower {depth}, chunk_size or threads")


def _check_host_memory(ctx: RunContext, need: int, key: str, value: object, what: str, advice: str) -> None:
    """Refused where a host has not ``need`` bytes per process of it available (at most 80%): every
    process decides alike, from everyone's figures."""
    facts = ctx.comm.allgather((hostname(), need, available_memory()))
    for host in {h for h, _, _ in facts}:
        total = sum(n for h, n, _ in facts if h == host)
        free = min(a for h, _, a in facts if h == host)
        if total > 0.8 * free:
            raise ConfigError(key, value, f"{what}: {total / GIB:.2f} GiB on {host}, which has {free / GIB:.2f} "
                              f"GiB available (at most 80% may be used): {advice}")


def _read_plans(ctx: RunContext) -> list[RankReads]:
    """What each of my loading ranks reads (a contiguous share of the restore's ranks): its own, or
    with recovery_rank_shift those of the rank one host further on, so reads cannot come from this
    host's page cache."""
    ck, ranks = ctx.ck, ctx.restore.ranks
    w, per = len(ranks), len(ranks) // ctx.comm.size
    share = range(ctx.comm.rank * per, (ctx.comm.rank + 1) * per)
    if not ck.recovery_rank_shift:
        return [ranks[q] for q in share]
    hosts = ctx.comm.allgather(hostname())
    # a host's loading ranks: given for the save's world (ranks_per_host), scaled to the load's
    per_host = (max(1, ck.ranks_per_host * w // ctx.world_size) if ck.ranks_per_host
                else Counter(hosts)[hostname()] * per)
    if per_host % w == 0 and ctx.comm.rank == 0:
        log.warning("recovery_rank_shift: a shift of %d ranks (one host's) is the whole world of %d: every rank "
                    "reads its own files; set checkpoint.ranks_per_host to emulate several hosts", per_host, w)
    return [ranks[(q + per_host) % w] for q in share]


def _restore_figures(ctx: RunContext, fmt: Format) -> dict[str, Any]:
    """summary.json's ``io.restore``: the read phase's plan, what each rank needs and reads."""
    plan = ctx.plan
    return figures(ctx.restore, lambda rank, k: planned_size(fmt, plan.ranks[rank].files[k]),
                   sum(c.size for c in plan.coordinator), ctx.ck.chunk_size)


def run(ctx: RunContext) -> dict[str, Any] | None:
    """Run the benchmark; returns the summary on rank 0 (None elsewhere)."""
    ck, comm, state, fmt = ctx.ck, ctx.comm, ctx.state, file_format(ctx.workload)
    files = expected_files(ctx, fmt) if comm.rank == 0 else {}  # manifests are rank 0's
    state.committed = []
    if ck.num_checkpoints_write > 0:
        run_key = comm.bcast(secrets.randbits(63) if comm.rank == 0 else None)
    else:
        run_key = ctx.on_root_io(lambda: check_manifest(ctx, files, 1, None))
    # rank 0's share of each checkpoint (none for async saves: they run behind training)
    shown = progress_display(comm.rank == 0 and ck.progress and not ck.async_save, ck.progress_interval)

    def progress(path: str, nbytes: int) -> None:
        if ctx.watchdog is not None:
            ctx.watchdog.progress(path)
        shown.advance(nbytes)
    engine = Engine(ctx.backend, run_key, io_options(ctx), progress)
    if comm.rank == 0 and "transport" in (storage := ctx.backend.describe()):  # GDS or POSIX, said up front
        log.info("storage_type=%s moves bytes by %s: %s", ctx.backend.name, storage["transport"], storage["why"])
    records, retries = [], {"save": 0, "load": 0}

    def save(index: int, todo: list[FileTask], stalled: float = 0.0) -> None:
        """One synchronous save (with the coordinator's files after everyone's data); ``stalled``:
        seconds it waited first for a drain (keep_last)."""
        before = engine.retries
        shown.start(f"save_ckpt{index}", sum(t.size for t in todo))
        try:
            with timed(ctx, "save", index) as clock:
                nbytes = engine.write_files(todo) + run.finish_save(engine, index)
        finally:
            shown.stop()
        records.append(record(ctx, "save", index, clock, nbytes, len(todo), file_times=engine.take_file_times(),
                              stalled=stalled, backend=engine.backend))
        retries["save"] += engine.retries - before

    run = EmulatedRun(ctx, fmt, run_key, files)
    tiers = Tiers(run)
    background = BackgroundSaves(run, engine, tiers) if ck.async_save else None
    shards = shard_bytes(ctx)
    stage = Staging(ck.staging, ck.staging_gb_per_second, max(shards), sum(shards)) if ck.async_save else None
    for i in range(1, ck.num_checkpoints_write + 1):
        state.phase, state.step = "train" if background else "wait before save", i
        train(ck.time_between_checkpoints, ck.training, ctx.alarm)
        tiers.check()
        state.phase = "save"
        if background is None:
            stalled = tiers.make_room(i)
            run.prepare(i)
            save(i, run.tasks(i, coordinator=False), stalled)
            tiers.written(i)
            run.commit(i, records[-1].duration)
            tiers.committed(i)
        else:
            background.save(i, run.tasks(i), stage)
            records[:] = background.records  # the previous checkpoint's, once committed
    if background is not None:
        background.wait()
        records[:] = background.records
    state.phase, state.step = "drain", None
    tiers.close()
    records += tiers.records
    read_plans = _read_plans(ctx) if ck.num_checkpoints_read else []
    reader = ctx.tiers[ck.read_tier]
    read_engine = engine if reader is ctx.backend else Engine(reader, run_key, io_options(ctx), progress)
    for i in range(1, ck.num_checkpoints_read + 1):
        state.phase, state.step = "load", i
        ctx.on_root_io(lambda i=i: check_manifest(ctx, files, i, run_key))
        whole, ranged = run.restore_reads(i, reader, read_plans)
        metadata = run.metadata_reads(i, reader, len(read_plans))
        before = read_engine.retries
        shown.start(f"load_ckpt{i}", sum(t.size for t in metadata + whole) + sum(n for _, r in ranged for _, n in r))
        try:
            with timed(ctx, "load", i) as clock:
                nbytes = read_engine.read_files(metadata)
                metadata_seconds = time.perf_counter() - clock.t0
                nbytes += read_engine.read_files(whole) + read_engine.read_ranges(ranged)
        finally:
            shown.stop()
        records.append(record(ctx, "load", i, clock, nbytes, len(metadata) + len(whole) + len(ranged),
                              file_times=read_engine.take_file_times(), backend=reader,
                              metadata_seconds=metadata_seconds if metadata else None))
        retries["load"] += read_engine.retries - before
        say_done(ctx, f"load_ckpt{i}", records[-1].duration, "verified" if ck.verify else "read")
    engine.close()
    if read_engine is not engine:
        read_engine.close()
    state.phase, state.step = "results", None
    backend = ctx.backend

    def describe(tries: list[dict[str, int]]) -> dict[str, Any]:
        asked = {"goodput": {"mtbf_hours": ck.mtbf_hours, "interval_seconds": ck.time_between_checkpoints,
                             "tier": ck.read_tier}} if ck.mtbf_hours else {}
        staged = [sum(shard_bytes(ctx, p)) for p in range(comm.size)]
        background_mode = {"staging": ck.staging, "training": ck.training,
                           **({"staging_gb_per_second": ck.staging_gb_per_second} if ck.staging == "modelled" else
                              {"staging_bytes_per_process": staged})}
        return {**asked, "async_save": background_mode if ck.async_save else False,
                "retries": {"save": sum(t["save"] for t in tries), "load": sum(t["load"] for t in tries),
                            "per_process": tries,
                            "note": "files redone after a transient storage error; the client's own attempts "
                                    "(S3 max_attempts, gcsfs) are not visible here"}}
    io = {"layout": ck.layout, "format": fmt.name, "odirect": ck.odirect,
          "verified": backend.capabilities.stores_data and ck.verify, "recovery_rank_shift": ck.recovery_rank_shift,
          "scale": ck.scale, "chunk_size": ck.chunk_size,
          "io_buffer_bytes_per_process": engine.buffer_bytes + (read_engine.buffer_bytes if read_engine is not engine
                                                                else 0),
          **({"tiers": tiers.describe(), "read_tier": ck.read_tier} if tiers.active else {}),
          **({"reference": references.describe(ck.reference)} if ck.reference != "none" else {}),
          **({"restore": _restore_figures(ctx, fmt)} if ck.num_checkpoints_read else {})}
    return write_results(ctx, records, ctx.plan.total_payload_bytes, io, retries, describe)
