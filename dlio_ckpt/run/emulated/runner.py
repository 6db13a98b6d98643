"""The emulated mode: write ``num_checkpoints_write`` checkpoints in DLIO's layout, read back
``num_checkpoints_read``, from the :class:`~dlio_ckpt.plan.types.Plan` built once in :func:`preflight`.

Why here and not in the CLI: this is the choreography (steps, manifests, who reads what) and nothing
else; the skeleton around it (barrier, clock, watchdog, results) is :mod:`dlio_ckpt.run.context`'s, so it
runs the same on one process and on a thousand.
"""

from __future__ import annotations

import logging
import secrets
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from dlio_ckpt.cluster.host import available_memory, hostname
from dlio_ckpt.cluster.placement import surviving_keeper
from dlio_ckpt.config import references, rules, tier_key
from dlio_ckpt.errors import ConfigError
from dlio_ckpt.io.backends import Backend
from dlio_ckpt.io.backends.base import ItemReader
from dlio_ckpt.io.backends.timed import TimedBackend
from dlio_ckpt.io.engine import Engine, FileTask, IOOptions, check_capabilities, io_buffer_bytes
from dlio_ckpt.plan.formats import Format
from dlio_ckpt.plan.layouts import file_format, framework_io, load_caveat, make_plan, restore_plan
from dlio_ckpt.plan.reads import RankReads
from dlio_ckpt.plan.view import scaled_figures
from dlio_ckpt.results.restore import described, restored_payload
from dlio_ckpt.results.schema import (
    IO,
    AsyncSave,
    ProcessRetries,
    RestoreSource,
    Retries,
    Summary,
    TrainingMemory,
)
from dlio_ckpt.results.summary import GoodputAsked, OpRecord
from dlio_ckpt.run.context import GIB, RunContext, record, say_done, timed, write_results
from dlio_ckpt.run.emulated.background import BackgroundSaves, Staging, train
from dlio_ckpt.run.emulated.checkpoints import (
    DeviceCopy,
    EmulatedRun,
    Planned,
    check_manifest,
    device_copy,
    expected_files,
    held_files,
    io_options,
    load_copy,
    plan_of,
    planned,
    restore_of,
    shard_bytes,
    writer_settings,
)
from dlio_ckpt.run.emulated.peers import LostShares, PeerSource
from dlio_ckpt.run.emulated.tiers import Tiers
from dlio_ckpt.run.progress import PlannedBytes, progress_display
from dlio_ckpt.run.steps import Writes

log = logging.getLogger("dlio_ckpt")


FSYNC = "every file fsynced before the process's end time"


def preflight(ctx: RunContext) -> None:
    """The plan (built and validated once), what the read phase reads of it, and what the storages
    must be able to do for both. Every timed tier tells the calls on the coordinator's files apart from then on."""
    plan = make_plan(ctx.workload, ctx.world_size)
    plan.validate()
    whole = plan.full_size  # a scaled run's plan at full size
    full = restore_plan(ctx.workload, whole) if whole is not None and ctx.ck.num_checkpoints_read else None
    ctx.prepared = Planned(plan, restore_plan(ctx.workload, plan, full))
    for backend in ctx.tiers:
        if isinstance(backend, TimedBackend):
            backend.coordinator = plan.rank0_names
    check_capabilities(ctx.backend, io_options(ctx))
    ck = ctx.ck
    if ck.odirect and (framework := framework_io(ctx.workload)):
        raise ConfigError("workload.checkpoint.odirect", True, f"checkpoint.io_pattern=framework writes as "
                          f"{framework.writer} does, through the page cache; set "
                          "++workload.checkpoint.io_pattern=stream to measure O_DIRECT")
    if ck.framework_item_us and not getattr(framework_io(ctx.workload), "items", False):
        raise ConfigError("workload.checkpoint.framework_item_us", ck.framework_item_us,
                          "is played item by item by a framework's writer threads that share one interpreter "
                          f"(checkpoint.layout=dcp, io_pattern=framework); checkpoint.layout={ck.layout} with "
                          f"io_pattern={ck.io_pattern} plays none: leave it 0")
    for backend in ctx.tiers[1:]:  # drains write without O_DIRECT; the read phase reads as asked
        check_capabilities(backend, IOOptions(fsync=ck.fsync))
    check_capabilities(ctx.tiers[ck.read_tier], io_options(ctx))
    own = [k for k, st in enumerate(ctx.workload.storages) if st.scope != "shared"]  # each host's own copy
    if own and plan.coordinator:
        names = ", ".join(c.name for c in plan.coordinator)
        raise ConfigError(f"{tier_key(own[0])}.scope", ctx.workload.storages[own[0]].scope,
                          f"checkpoint.layout={ck.layout} has rank 0 write {names} once for every rank to read, "
                          "and a node or peer tier would hold it on one host alone (not supported yet): scope shared")
    if ctx.workload.restore.lost_hosts:  # now that the hosts are known: every lost host's part is held somewhere
        lost_hosts_tier(ctx)
    _check_io_buffers(ctx)
    if ck.async_save and ck.staging == "real":
        _check_staging_memory(ctx)
    if ck.training_memory_gb and ck.num_checkpoints_write:
        _check_training_memory(ctx)
    # last, once every refusal above is past: what the full size's load reads is kept, not its plan (which grows
    # with the ranks)
    if full is not None and whole is not None:
        ctx.prepared = replace(planned(ctx), full_load_bytes_read=described(
            ctx.workload, full, whole, file_format(ctx.workload), item_reader(ctx))["bytes_read"])


def item_reader(ctx: RunContext) -> ItemReader | None:
    """How the read tier's client reads a framework's items its own way, where it does (the loads play a
    framework's reads): their ranged reads are counted as the engine plays them."""
    return ctx.tiers[read_tier(ctx)].item_reader() if framework_io(ctx.workload) else None


def writes(ctx: RunContext) -> Writes:
    fmt, plan = file_format(ctx.workload), plan_of(ctx)
    return Writes.of_run(ctx.ck, files=(*(f"{f.stem}{fmt.extension}" for p in plan.ranks for f in p.files),
                                        *plan.coordinator_names), folder=plan.folder_names)


def needed_bytes(ctx: RunContext) -> int:
    return ctx.ck.num_checkpoints_write * sum(expected_files(ctx, file_format(ctx.workload)).values())


def check_reads(ctx: RunContext) -> None:
    """A read-only run: every step it will read complete and of this layout, before anything is created."""
    ck, fmt = ctx.ck, file_format(ctx.workload)
    if ck.num_checkpoints_write == 0:
        files = ctx.on_root_io(lambda: expected_files(ctx, fmt))
        host_files = _host_files(ctx, fmt)
        key = _check_step(ctx, files, host_files, 1, None)
        for i in range(2, ck.num_checkpoints_read + 1):
            _check_step(ctx, files, host_files, i, key)


def _host_files(ctx: RunContext, fmt: Format) -> dict[str, int]:
    """This host's part of a step, on its acting rank where a tier is node-scoped (their markers)."""
    node = any(st.scope != "shared" for st in ctx.workload.storages)
    return expected_files(ctx, fmt, ctx.placement.members()) if node and ctx.placement.acts else {}


def lost(ctx: RunContext) -> bool:
    """Whether this process's host is one the restore declares lost (``restore.lost_hosts``)."""
    return ctx.placement.host_index in ctx.workload.restore.lost_hosts


def lost_hosts_tier(ctx: RunContext) -> int:
    """The tier lost hosts read (:func:`dlio_ckpt.config.rules.lost_hosts_tier`, now that the hosts are known)."""
    return rules.lost_hosts_tier(ctx.workload, len(ctx.placement.hosts))


def read_tier(ctx: RunContext) -> int:
    """Where this process reads: its host's copy of the read tier, or for a lost host the peer or shared
    tier below it that still holds its part (:func:`lost_hosts_tier`)."""
    return lost_hosts_tier(ctx) if lost(ctx) else ctx.ck.read_tier


def _check_step(ctx: RunContext, files: dict[str, int], host_files: dict[str, int], step: int,
                run_key: int | None) -> int:
    """``step`` complete and of this layout everywhere the read phase reads it: each surviving host's
    copy of a node-scoped read tier (its part), the shared tier lost hosts read (every file). Its run key."""
    t = ctx.ck.read_tier
    if ctx.workload.storages[t].scope == "node":  # a lost host's copy is gone with it: not asked
        key = ctx.on_tier_io(t, lambda: None if lost(ctx) else check_manifest(ctx, host_files, step, run_key, t))
    else:
        key = ctx.on_root_io(lambda: check_manifest(ctx, files, step, run_key, t))
    lost_hosts = ctx.workload.restore.lost_hosts
    if lost_hosts:
        source, place = lost_hosts_tier(ctx), ctx.placement
        st = ctx.workload.storages[source]
        if st.scope == "peer":  # each host that keeps a lost host's part: its peer copy, all it keeps
            keeps = place.host_index in {surviving_keeper(len(place.hosts), h, st.replicas, st.replication, lost_hosts)
                                         for h in lost_hosts}
            fmt = file_format(ctx.workload)
            key = ctx.on_tier_io(source, lambda: check_manifest(ctx, held_files(ctx, fmt, source), step,
                                                                run_key or key, source) if keeps else None) or key
        else:
            key = ctx.on_root_io(lambda: check_manifest(ctx, files, step, run_key or key, source))
    assert key is not None  # every rank has the first key found: a surviving host's, or the lost hosts' source's
    return key


def _check_staging_memory(ctx: RunContext) -> None:
    """``staging=real`` holds every process's shards in host memory for the whole run."""
    _check_host_memory(ctx, sum(shard_bytes(ctx)), "workload.checkpoint.staging", "real",
                       "holds each process's shards in host memory",
                       "use staging=modelled, a smaller checkpoint.scale, or more hosts")


def _check_training_memory(ctx: RunContext) -> None:
    """``training_memory_gb`` is written afresh in every interval, by every process at once, beside what the run
    holds all along (its I/O buffers, a real staging copy). It may take more of a host's memory than the run
    holds (it is freed before each save), but not all: it is meant to leave little free, as a job's training
    does, not to drive the host into swap or its processes into the OOM killer."""
    ck = ctx.ck
    held = io_buffer_bytes(ctx.backend, ck.chunk_size) + \
        (sum(shard_bytes(ctx)) if ck.async_save and ck.staging == "real" else 0)
    _check_host_memory(ctx, int(ck.training_memory_gb * 1e9) + held, "workload.checkpoint.training_memory_gb",
                       ck.training_memory_gb, f"each process writes {ck.training_memory_gb:g} GB afresh in every "
                       f"training interval, beside the {held / GIB:.2f} GiB it holds", "a smaller training_memory_gb",
                       share=TRAINING_MEMORY_SHARE)


def _check_io_buffers(ctx: RunContext) -> None:
    """The engine's buffers (bytes in flight) are allocated up front for the whole run."""
    need = io_buffer_bytes(ctx.backend, ctx.ck.chunk_size)
    depth = "read_queue_depth" if ctx.backend.read_queue_depth > ctx.backend.queue_depth else "queue_depth"
    _check_host_memory(ctx, need, f"workload.storage.storage_options.{depth}", getattr(ctx.backend, depth),
                       f"holds {need / GIB:.2f} GiB of I/O buffers per process (threads x {depth} x "
                       f"(2 x chunk_size + 1 MiB), chunk_size={ctx.ck.chunk_size})",
                       f"lower {depth}, chunk_size or threads")


HELD_SHARE = 0.8  # of a host's available memory, what the run may hold for itself
TRAINING_MEMORY_SHARE = 0.95  # what the training intervals may write afresh (freed before every save)


def _check_host_memory(ctx: RunContext, need: int, key: str, value: object, what: str, advice: str,
                       share: float = HELD_SHARE) -> None:
    """Refused where a host has not ``need`` bytes per process of it available (at most ``share`` of it): every
    process decides alike, from everyone's figures."""
    facts = ctx.comm.allgather((hostname(), need, available_memory()))
    for host in {h for h, _, _ in facts}:
        total = sum(n for h, n, _ in facts if h == host)
        free = min(a for h, _, a in facts if h == host)
        if total > share * free:
            raise ConfigError(key, value, f"{what}: {total / GIB:.2f} GiB on {host}, which has {free / GIB:.2f} "
                              f"GiB available (at most {share:.0%} may be used): {advice}")


def _read_plans(ctx: RunContext, process: int | None = None) -> list[RankReads]:
    """What each of my (or ``process``'s) loading ranks reads (a contiguous share of the restore's ranks):
    its own, or with recovery_rank_shift those of the rank one host further on, so reads cannot come
    from this host's page cache (a collective then: every process asks for its own)."""
    ck, ranks = ctx.ck, restore_of(ctx).ranks
    w, per = len(ranks), len(ranks) // ctx.comm.size
    p = ctx.comm.rank if process is None else process
    share = range(p * per, (p + 1) * per)
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


def _lost_shares(ctx: RunContext, run: EmulatedRun) -> LostShares | None:
    """With lost hosts restored from a peer tier: who sends whom their part (None otherwise)."""
    if not ctx.workload.restore.lost_hosts:
        return None
    tier = lost_hosts_tier(ctx)
    if ctx.workload.storages[tier].scope != "peer":
        return None
    return LostShares(ctx, tier, lambda step, backend, p: run.restore_reads(step, backend, _read_plans(ctx, p))[0])


@dataclass(frozen=True)
class ReadFrom:
    """Where one process's loads read in a restore with lost hosts: the tier, its host, its bytes and seconds over
    all loads."""

    tier: int
    host: str
    bytes: int
    seconds: float


def _sources(read_from: list[ReadFrom]) -> list[RestoreSource]:
    """Where a restore with lost hosts read, per tier: the hosts and processes that read there, their
    bytes over all loads and the slowest process's load seconds."""
    out: dict[int, RestoreSource] = {}
    for process, r in enumerate(read_from):
        s = out.setdefault(r.tier, RestoreSource(tier=r.tier, hosts=[], processes=[], bytes=0, seconds=0.0))
        s.hosts += [] if r.host in s.hosts else [r.host]
        s.processes.append(process)
        s.bytes += r.bytes
        s.seconds = max(s.seconds, r.seconds)
    return [out[k] for k in sorted(out)]


@dataclass
class ProcessFacts:
    """This process's files redone after a transient storage error, by phase, (a lost-host restore) where its
    loads read from, and (``training_memory_gb``) the seconds each training interval spent writing its memory and
    took in all: its part of summary.json's ``retries``, ``restore_sources`` and ``training_memory``, gathered from
    every process."""

    save: int = 0
    load: int = 0
    read_from: ReadFrom | None = None
    training_memory_seconds: list[float] = field(default_factory=list)
    interval_seconds: list[float] = field(default_factory=list)  # with training memory: each interval's length


def run(ctx: RunContext) -> Summary | None:
    """Run the benchmark; returns the summary on rank 0 (None elsewhere)."""
    job = EmulatedJob(ctx)
    job.saves()
    job.loads()
    job.close()
    return job.results()


class EmulatedJob:
    """One process's part of an emulated run, phase by phase: set up (the engine, what the saves write), the saves,
    the loads, then the results (the ``io`` description and summary.json). A class because the phases share the
    engine, the run's checkpoints, the records and the retries."""

    def __init__(self, ctx: RunContext) -> None:
        ck, comm = ctx.ck, ctx.comm
        self.ctx, self.fmt = ctx, file_format(ctx.workload)
        files = expected_files(ctx, self.fmt) if comm.rank == 0 else {}  # shared tiers' manifests are rank 0's
        host_files = _host_files(ctx, self.fmt)  # a node tier's, each host's acting rank's
        ctx.state.committed = []
        if ck.num_checkpoints_write > 0:
            run_key = comm.bcast(secrets.randbits(63) if comm.rank == 0 else None)
        else:
            run_key = _check_step(ctx, files, host_files, 1, None)
        # rank 0's share of each checkpoint (none for async saves: they run behind training)
        # (each file's planned bytes counted once: a load's framework reads go back over bytes, PlannedBytes)
        self.shown = PlannedBytes(progress_display(comm.rank == 0 and ck.progress and not ck.async_save,
                                                   ck.progress_interval))
        self.framework = framework = framework_io(ctx.workload)
        self.engine = self.read_engine = Engine(ctx.backend, run_key, io_options(ctx), self._progress,
                                                writer_settings(ctx, framework))
        self.copy_first = device_copy(ctx, framework)
        if comm.rank == 0 and "transport" in (storage := ctx.backend.describe()):  # GDS or POSIX, said up front
            log.info("storage_type=%s moves bytes by %s: %s", ctx.backend.name, storage["transport"], storage["why"])
        if comm.rank == 0 and ck.num_checkpoints_write:
            log.info("saves write %s", f"as {framework.writer} does, {self.engine.writers.threads} writer thread(s) "
                     "per process (checkpoint.io_pattern=framework)" if framework else
                     f"the tuned stream: {ck.chunk_size} B requests (checkpoint.io_pattern=stream)")
        self.records: list[OpRecord] = []
        self.facts = ProcessFacts()
        self.run = EmulatedRun(ctx, self.fmt, run_key, files, host_files)
        self.tiers = Tiers(self.run)

    def _progress(self, path: str, nbytes: int) -> None:
        if self.ctx.watchdog is not None:
            self.ctx.watchdog.progress(path)
        self.shown.advance(path, nbytes)

    def saves(self) -> None:
        """Every checkpoint, each after its training interval: synchronous, or written in the background (async
        saves); then the tiers drained."""
        ctx, ck, state, run, tiers = self.ctx, self.ctx.ck, self.ctx.state, self.run, self.tiers
        background = BackgroundSaves(run, self.engine, tiers) if ck.async_save else None
        shards = shard_bytes(ctx)
        stage = Staging(ck.staging, ck.staging_gb_per_second, max(shards), sum(shards)) if ck.async_save else None
        for i in range(1, ck.num_checkpoints_write + 1):
            state.phase, state.step = "train" if background else "wait before save", i
            writing, interval = train(ck.time_between_checkpoints, ck.training, ctx.alarm,
                                      int(ck.training_memory_gb * 1e9))
            if ck.training_memory_gb:
                self.facts.training_memory_seconds.append(writing)
                self.facts.interval_seconds.append(interval)
            tiers.check()
            state.phase = "save"
            if background is None:
                stalled = tiers.make_room(i)
                run.prepare(i)
                self._save(i, run.tasks(i, coordinator=False), stalled)
                tiers.written(i)
                run.commit(i, self.records[-1].duration, self.records[-1].device_copy_seconds)
                tiers.committed(i)
            else:
                assert stage is not None  # made with background, for async saves
                background.save(i, run.tasks(i, folder=True), stage)
                self.records[:] = background.records  # the previous checkpoint's, once committed
        if background is not None:
            background.wait()
            self.records[:] = background.records
        state.phase, state.step = "drain", None
        tiers.close()
        self.records += tiers.records

    def _save(self, index: int, todo: list[FileTask], stalled: float = 0.0) -> None:
        """One synchronous save (with the coordinator's files after everyone's data); ``stalled``:
        seconds it waited first for a drain (keep_last)."""
        ctx, engine = self.ctx, self.engine
        before = engine.retries
        self.shown.start(f"save_ckpt{index}", [(t.path, t.size) for t in todo])
        try:
            with timed(ctx, "save", index) as clock:
                self.run.look_for_earlier(index)
                self.copy_first()
                nbytes = engine.write_files(todo) + self.run.finish_save(engine, index)
        finally:
            self.shown.stop()
        copied = self.copy_first.seconds + engine.take_copy_seconds()
        self.records.append(record(ctx, "save", index, clock, nbytes, len(todo), file_times=engine.take_file_times(),
                                   stalled=stalled, backend=engine.backend, device_copy_seconds=copied or None,
                                   framework_cpu=engine.take_framework_cpu(),
                                   coordinator=plan_of(ctx).rank0_names))
        self.facts.save += engine.retries - before

    def loads(self) -> None:
        """Every load: the restore's reads of each step, from the read tier (or, on a lost host, from its peer)."""
        ctx, ck, comm = self.ctx, self.ctx.ck, self.ctx.comm
        if not ck.num_checkpoints_read:
            return
        read_plans = _read_plans(ctx)
        reader = ctx.tiers[read_tier(ctx)]  # where this process's files are named (and read, but from a peer)
        handoff = _lost_shares(ctx, self.run)
        from_peer = handoff.source(1) if handoff is not None and lost(ctx) else None
        # a lost host reads its PeerSource as storage (open_read, capabilities, options): it is no more of a Backend
        if reader is not ctx.backend or from_peer is not None:
            self.read_engine = Engine(from_peer or reader, self.run.run_key, io_options(ctx),  # type: ignore[arg-type]
                                      self._progress)
        caveat = load_caveat(ctx.workload, restore_of(ctx))
        if caveat and comm.rank == 0:  # once, before the loads say "verified"
            log.info("load: %s", caveat)
        copy_back = load_copy(ctx, self.framework, read_plans)  # the same every load
        for i in range(1, ck.num_checkpoints_read + 1):
            self._load(i, reader, read_plans, copy_back, handoff, from_peer)
        if ctx.workload.restore.lost_hosts:  # each process's source, for io.restore
            loads = [r for r in self.records if r.phase == "load"]
            self.facts.read_from = ReadFrom(read_tier(ctx), ctx.placement.host, sum(r.bytes for r in loads),
                                              sum(r.duration for r in loads))

    def _load(self, i: int, reader: Backend, read_plans: list[RankReads], copy_back: DeviceCopy,
              handoff: LostShares | None, from_peer: PeerSource | None) -> None:
        ctx, engine, run = self.ctx, self.read_engine, self.run
        ctx.state.phase, ctx.state.step = "load", i
        _check_step(ctx, run.files, run.host_files, i, run.run_key)
        whole, ranged = run.restore_reads(i, reader, read_plans)
        metadata = run.metadata_reads(i, reader, len(read_plans))
        before = engine.retries
        self.shown.start(f"load_ckpt{i}", [(t.path, t.size) for t in metadata + whole] +
                         [(t.path, sum(n for _, n in r)) for t, r in ranged])
        try:
            with timed(ctx, "load", i) as clock:
                sent = handoff.send(i, engine.options.evict_before_read) if handoff is not None else None
                if from_peer is not None:
                    from_peer.expect()
                nbytes = engine.read_files(metadata)
                metadata_seconds = time.perf_counter() - clock.t0
                nbytes += engine.read_files(whole) + engine.read_ranges(ranged)
                copy_back()
                if sent is not None:  # a keeper's load ends when the lost partner has its part too
                    sent()
        finally:
            self.shown.stop()
        self.records.append(record(ctx, "load", i, clock, nbytes, len(metadata) + len(whole) + len(ranged),
                                   file_times=engine.take_file_times(), backend=reader,
                                   metadata_seconds=metadata_seconds if metadata else None,
                                   device_copy_seconds=copy_back.seconds or None,
                                   coordinator=plan_of(ctx).rank0_names))
        self.facts.load += engine.retries - before
        say_done(ctx, f"load_ckpt{i}", self.records[-1].duration, "verified" if ctx.ck.verify else "read",
                 copy_back.seconds)

    def close(self) -> None:
        self.engine.close()
        if self.read_engine is not self.engine:
            self.read_engine.close()

    def results(self) -> Summary | None:
        """summary.json (rank 0's; None elsewhere), with what every process did gathered into it."""
        ctx, ck = self.ctx, self.ctx.ck
        ctx.state.phase, ctx.state.step = "results", None
        restart_reads = [ck.read_tier]  # a step is restorable once durable on every tier a restart reads
        if ctx.workload.restore.lost_hosts:
            restart_reads = sorted({ck.read_tier, lost_hosts_tier(ctx)})
        goodput = GoodputAsked(mtbf_hours=ck.mtbf_hours, interval_seconds=self._interval(),
                               tiers=tuple(restart_reads)) if ck.mtbf_hours else None
        plan = plan_of(ctx)
        restore = self._restore_described()
        return write_results(ctx, self.records, plan.total_payload_bytes, self._io(restore), self.facts,
                             self._gathered, restored_payload(restore_of(ctx), plan, self.fmt)
                             if restore is not None else None, goodput, load_world_size=restore_of(ctx).world_size)

    def _interval(self) -> float:
        """The training between checkpoints that goodput is worked out over: ``time_between_checkpoints``, or where
        writing the training memory made intervals run over, their mean length (each the slowest process's; a
        collective: every process calls it)."""
        ck = self.ctx.ck
        if not (ck.training_memory_gb and ck.num_checkpoints_write):
            return ck.time_between_checkpoints
        lengths = self.ctx.comm.allgather(self.facts.interval_seconds)
        return max(ck.time_between_checkpoints,
                   statistics.fmean(max(each) for each in zip(*lengths, strict=True)))

    def _gathered(self, facts: list[ProcessFacts]) -> dict[str, Any]:
        """summary.json's sections made of every process's part (on rank 0)."""
        ctx, ck = self.ctx, self.ctx.ck
        staged = [sum(shard_bytes(ctx, p)) for p in range(ctx.comm.size)]
        modelled = ck.staging == "modelled"
        background_mode = AsyncSave(staging=ck.staging, training=ck.training,
                                    staging_gb_per_second=ck.staging_gb_per_second if modelled else None,
                                    staging_bytes_per_process=None if modelled else staged)
        sources = _sources([t.read_from for t in facts if t.read_from is not None])
        intervals = zip(*(t.training_memory_seconds for t in facts), strict=True)  # every process trains alike
        memory = TrainingMemory(gb_per_process=ck.training_memory_gb, seconds_max=[max(s) for s in intervals],
                                interval_seconds=ck.time_between_checkpoints) \
            if ck.training_memory_gb and ck.num_checkpoints_write else None
        return {"restore_sources": sources or None, "async_save": background_mode if ck.async_save else False,
                "training_memory": memory,
                "retries": Retries(save=sum(t.save for t in facts), load=sum(t.load for t in facts),
                                   per_process=[ProcessRetries(save=t.save, load=t.load) for t in facts],
                                   note="files redone after a transient storage error; the client's own attempts "
                                        "(S3 max_attempts, gcsfs) are not visible here")}

    def _restore_described(self) -> dict[str, Any] | None:
        """``io.restore``: what the loads read (None without loads)."""
        ctx = self.ctx
        if not ctx.ck.num_checkpoints_read:
            return None
        return described(ctx.workload, restore_of(ctx), plan_of(ctx), self.fmt, item_reader(ctx))

    def _io(self, restore: dict[str, Any] | None) -> IO:
        """summary.json's ``io``: how this run moved its bytes."""
        ctx, ck, framework, engine = self.ctx, self.ctx.ck, self.framework, self.engine
        plan = plan_of(ctx)
        scaled = scaled_figures(plan, self.fmt, ctx.comm.size) if plan.full_size else None
        if scaled is not None and restore is not None and plan.full_size is not None:  # the load's own bytes ratio
            full = planned(ctx).full_load_bytes_read
            assert full is not None  # worked out with the loads, by the preflight
            scaled.update(full_size_load_bytes_read=full,
                          load_bytes_ratio=restore["bytes_read"] / full if full else None)
        return IO(layout=ck.layout, format=self.fmt.name, odirect=ck.odirect,
                  verified=ctx.backend.capabilities.stores_data and ck.verify,
                  recovery_rank_shift=ck.recovery_rank_shift, scale=ck.scale, chunk_size=ck.chunk_size,
                  io_pattern="framework" if framework else "stream",
                  framework_writer=framework.writer if framework else None,
                  writer_threads_per_process=engine.writers.threads if framework else None,
                  io_buffer_bytes_per_process=engine.buffer_bytes + (self.read_engine.buffer_bytes
                                                                     if self.read_engine is not engine else 0),
                  data_reduction={"compression_ratio": ck.compression_ratio, "dedup_ratio": ck.dedup_ratio,
                                  "data_values": ck.data_values},
                  tiers=self.tiers.describe() if self.tiers.active else None,
                  read_tier=ck.read_tier if self.tiers.active else None,
                  placement=ctx.placement.describe() if ctx.placement.simulated else None,
                  reference=references.describe(ck.reference) if ck.reference != "none" else None,
                  restore=restore, scaled=scaled)
