"""One emulated run's checkpoints as an object: whose files each process writes, the tasks of a
step on any tier, a step's manifest, its preparation and its commit.

Why an object below :mod:`dlio_ckpt.run.emulated.background` and :mod:`dlio_ckpt.run.emulated.tiers`: async
saves and drains need the same few facts of the run (its tasks, its manifest, how a step is prepared and committed).
Handed this object, they ask it; nothing is passed down as a callback that calls back up, and the
mode (:mod:`dlio_ckpt.run.emulated.runner`) is left with the choreography alone.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from dlio_ckpt import __version__
from dlio_ckpt.errors import ConfigError
from dlio_ckpt.io.backends import Backend
from dlio_ckpt.io.engine import Engine, FileTask, IOOptions, WriterSettings
from dlio_ckpt.io.synthetic import Reduction, file_key
from dlio_ckpt.plan.formats import Format
from dlio_ckpt.plan.layouts import FrameworkIO, file_format, framework_io
from dlio_ckpt.plan.pattern import Copies, FilePattern, Threads
from dlio_ckpt.plan.reads import RankReads, RestorePlan
from dlio_ckpt.plan.types import FilePlan, Plan, PlannedFile, RankPlan
from dlio_ckpt.run.context import RunContext
from dlio_ckpt.run.steps import manifest_path, step_name

log = logging.getLogger("dlio_ckpt")


@dataclass(frozen=True)
class Planned:
    """What the emulated mode's preflight (:func:`dlio_ckpt.run.emulated.runner.preflight`) works out once, before
    anything of the mode runs, kept as the run's ``prepared``: the plan, what the read phase reads of it, and the
    bytes one load of a scaled plan's full size reads (``io.scaled.full_size_load_bytes_read``, the load's bytes
    ratio's yardstick; None at full size or without loads)."""

    plan: Plan
    restore: RestorePlan
    full_load_bytes_read: int | None = None


def planned(ctx: RunContext) -> Planned:
    assert isinstance(ctx.prepared, Planned), "the emulated mode's preflight plans the run first"
    return ctx.prepared


def plan_of(ctx: RunContext) -> Plan:
    """The run's plan."""
    return planned(ctx).plan


def restore_of(ctx: RunContext) -> RestorePlan:
    """What the read phase reads."""
    return planned(ctx).restore


def io_options(ctx: RunContext) -> IOOptions:
    ck = ctx.ck
    return IOOptions(ck.fsync, ck.odirect, not ck.read_from_page_cache, ck.verify, ck.chunk_size, reduction(ctx))


def reduction(ctx: RunContext) -> Reduction:
    """What a storage may reduce the run's bytes by (``checkpoint.compression_ratio``, ``dedup_ratio``,
    ``data_values``)."""
    return Reduction(ctx.ck.compression_ratio, ctx.ck.dedup_ratio, ctx.ck.data_values)


def values_dtype(file: PlannedFile) -> str:
    """The datatype whose values ``checkpoint.data_values=torch_rand`` makes a file's payload of: a state dict's
    file is of one (DLIO's model files the model's, its optimizer files the optimizer's, as DLIO v2.0.1 makes
    them); a file of items (DCP's, of several) takes the one that holds most of its bytes, a run of bytes per
    file being what the generator knows (per-tensor values would need the window cut at every item)."""
    if isinstance(file, FilePlan):
        return file.dtype
    weight: dict[str, int] = {}
    for item in file.items:
        if item.dtype:
            weight[item.dtype] = weight.get(item.dtype, 0) + item.nbytes
    return max(weight, key=weight.__getitem__) if weight else ""


def ranks_of_process(ctx: RunContext, process: int | None = None) -> list[RankPlan]:
    """The logical ranks this process (or ``process``) emulates: a contiguous share of the plan."""
    return list(plan_of(ctx).ranks_of_process(ctx.comm.rank if process is None else process, ctx.comm.size))


def shard_bytes(ctx: RunContext, process: int | None = None) -> list[int]:
    """The payload of each logical rank this process (or ``process``) emulates: what async staging copies."""
    return [p.payload_bytes for p in ranks_of_process(ctx, process)]


def tasks(ctx: RunContext, fmt: Format, step: int, plans: list[RankPlan], backend: Backend | None = None,
          ) -> list[FileTask]:
    """The files of ``plans`` at ``step`` on ``backend`` (a tier; the first by default), with their
    framework's calls where the saves play them (:func:`~dlio_ckpt.plan.layouts.framework_io`)."""
    base, framework = ctx.path(step, backend=backend), framework_io(ctx.workload)
    if framework is None:
        return [FileTask(f"{base}/{f.stem}{fmt.extension}", tuple(fmt.segments(f)), file_key(step, p.rank, i),
                         dtype=values_dtype(f)) for p in plans for i, f in enumerate(p.files)]
    return [FileTask(f"{base}/{f.stem}{fmt.extension}", tuple(fmt.segments(f)), file_key(step, p.rank, i),
                     framework.file_pattern(f), dtype=values_dtype(f)) for p in plans for i, f in enumerate(p.files)]


def stages(store: Backend, framework: FrameworkIO | None) -> bool:
    """Whether a coordinator's file is written under its staged name and moved into place on ``store``: a file
    system renames it; on an object store that can copy it into place, where the saves play a framework whose
    client does so (``FrameworkIO.object_store_rename``: DCP's on S3); elsewhere the final name is written."""
    return store.capabilities.rename or (framework is not None and framework.object_store_rename
                                         and store.capabilities.rename_by_copy)


def coordinator_tasks(ctx: RunContext, step: int, backend: Backend | None = None, staged: bool = False,
                      ) -> list[FileTask]:
    """The files rank 0 writes after everyone's data (DCP's ``.metadata``), under the name they are
    first written as when ``staged`` and the storage moves them into place (:func:`stages`)."""
    base, store, framework = ctx.path(step, backend=backend), backend or ctx.backend, framework_io(ctx.workload)
    return [FileTask(f"{base}/{c.staged if staged and c.staged and stages(store, framework) else c.name}",
                     (c.size,), file_key(step, ctx.world_size, k),
                     framework.coordinator_pattern(c) if framework else None)
            for k, c in enumerate(plan_of(ctx).coordinator)]


def folder_tasks(ctx: RunContext, step: int) -> list[FileTask]:
    """The files rank 0 writes beside the steps at ``step``'s save, on the first tier, in order
    (:attr:`Plan.folder`), ``latest``'s bytes the step's name: where the saves play their framework's calls, each
    written in one call and never synced."""
    plan, played = plan_of(ctx), framework_io(ctx.workload) is not None
    out = []
    for k, f in enumerate(plan.folder):
        body = step_name(step).encode() if f.size is None else f.size
        size = len(body) if isinstance(body, bytes) else body
        out.append(FileTask(ctx.backend.join(ctx.ck.checkpoint_folder, f.name), (body,),
                            file_key(step, ctx.world_size, len(plan.coordinator) + k),
                            FilePattern((size,), synced=False, tensors=False) if played else None))
    return out


def writer_threads(ctx: RunContext, backend: Backend) -> int:
    """Threads writing this process's files when the saves play their framework's calls: a rank's writer has a
    thread per file it writes (DCP's ``thread_count``), or only its caller's, one file after another
    (``torch.save``'s: DeepSpeed, Lightning); a process emulating several ranks writes their files at least
    that many at a time, and up to its storage's ``threads``."""
    framework = framework_io(ctx.workload)
    most = max((len(p.files) for p in ranks_of_process(ctx)), default=1) if framework is None or \
        framework.threads is not Threads.CALLER else 1
    return most if ctx.world_size == ctx.comm.size else max(most, backend.options.threads)


class DeviceCopy:
    """The copy a synchronous save makes of all a rank's tensors before its writers start (megatron-core's), or a
    load of what it read (:func:`load_copy`), modelled: a sleep of ``seconds``, none where the copies are made
    tensor by tensor (the engine's) or not at all."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds

    def __call__(self) -> None:
        if self.seconds:
            time.sleep(self.seconds)


def _copy_rate(ctx: RunContext, framework: FrameworkIO | None) -> float:
    """The rate a synchronous save copies its tensors from the accelerators at (``checkpoint.gpu_copy_gb_per_second``,
    bytes/s), 0 where it copies none: only where the saves play their framework's calls (the stream measures the
    storage alone, and an async save's copy is its staging)."""
    rate = ctx.workload.checkpoint.gpu_copy_gb_per_second * 1e9
    return 0.0 if framework is None or ctx.workload.checkpoint.async_save else rate


def writer_settings(ctx: RunContext, framework: FrameworkIO | None) -> WriterSettings:
    """How this process's engine writes a save played as its framework writes it: its writer threads
    (:func:`writer_threads`), whether the caller's thread is one of them, and the copy each makes of a tensor from
    its accelerator before writing it, where the framework copies tensor by tensor: the threads copy side by side,
    sharing the process's accelerators (one per rank it plays), a thread at most one accelerator's rate; and the
    framework's own time on each item (``checkpoint.framework_item_us``; the preflight refuses it where not played)."""
    if framework is None:
        return WriterSettings()
    threads, rate = writer_threads(ctx, ctx.backend), _copy_rate(ctx, framework)
    per_thread = min(rate, rate * len(ranks_of_process(ctx)) / threads) if framework.copies is Copies.EACH else 0.0
    return WriterSettings(threads, framework.threads is not Threads.FILE_EACH_CALLER_WAITS, per_thread,
                          ctx.workload.checkpoint.framework_item_us / 1e6)


def device_copy(ctx: RunContext, framework: FrameworkIO | None) -> DeviceCopy:
    """The copy a synchronous save makes of all its tensors before its writers start, where its framework copies
    them all first: the largest of its ranks' shards, each rank copying from its own (tensor by tensor, the
    engine's writer threads copy instead: :func:`writer_settings`)."""
    rate = _copy_rate(ctx, framework)
    if framework is None or framework.copies is not Copies.FIRST or not rate:
        return DeviceCopy()
    return DeviceCopy(max(shard_bytes(ctx), default=0) / rate)


def load_copy(ctx: RunContext, framework: FrameworkIO | None, reads: list[RankReads]) -> DeviceCopy:
    """How this process's loads copy what they read back to the accelerators (``checkpoint.gpu_copy_gb_per_second``,
    taken for both directions; only where the loads play their framework's reads): each loading rank the state
    it needs (:attr:`RankReads.needed`) into its own accelerator, all of it after its reads. A framework's reader
    copies each tensor as it comes (DCP's ``copy_`` into the state dict, under megatron-core too) or after
    ``torch.load`` of the whole file (DeepSpeed, Lightning), on the thread that reads: either way the reads and
    the copies follow one another, so the load takes their sum. Loads are synchronous, async saves or not."""
    rate = ctx.workload.checkpoint.gpu_copy_gb_per_second * 1e9
    if framework is None or not rate:
        return DeviceCopy()
    return DeviceCopy(max((r.needed for r in reads), default=0) / rate)


def expected_files(ctx: RunContext, fmt: Format, processes: list[int] | None = None) -> dict[str, int]:
    """Every file of a step and its size (all ranks', or those of ``processes``: one host's part):
    what a manifest lists (for pt this formats every file's headers, so it is made once per run)."""
    plans = list(plan_of(ctx).ranks) if processes is None else [p for q in processes for p in ranks_of_process(ctx, q)]
    coordinator = coordinator_tasks(ctx, 0) if processes is None or 0 in processes else []
    return {t.path.rsplit("/", 1)[1]: t.size for t in tasks(ctx, fmt, 0, plans) + coordinator}


def held_hosts(ctx: RunContext, k: int) -> list[str]:
    """The hosts whose parts this host keeps on peer tier ``k``."""
    st, place = ctx.workload.storages[k], ctx.placement
    return [place.hosts[h] for h in place.peers(st.replicas, st.replication).receive_from]


def held_files(ctx: RunContext, fmt: Format, k: int) -> dict[str, int]:
    """What this host keeps of a step on peer tier ``k``: the files of the hosts it keeps, with sizes."""
    return expected_files(ctx, fmt, [r for h in held_hosts(ctx, k) for r in ctx.placement.members(h)])


class EmulatedRun:
    """The run's checkpoints: ``files`` (every file of a step and its size) is rank 0's, who writes
    the manifests of shared tiers; ``host_files`` (this host's part) its acting rank's, who writes
    those of its copy of a node-scoped tier; ``run_key`` stamps every block of the run's data."""

    def __init__(self, ctx: RunContext, fmt: Format, run_key: int, files: dict[str, int],
                 host_files: dict[str, int] | None = None) -> None:
        self.ctx, self.fmt, self.run_key, self.files = ctx, fmt, run_key, files
        self.host_files = host_files or {}
        self._held: dict[int, dict[str, int]] = {}  # peer tier -> what this host keeps of a step (made once)

    def tasks(self, step: int, backend: Backend | None = None, plans: list[RankPlan] | None = None,
              coordinator: bool = True, folder: bool = False) -> list[FileTask]:
        """This process's files of ``step`` (or those of ``plans``) on ``backend`` (the first tier by
        default); rank 0's include the coordinator's files (``.metadata``) last, unless ``coordinator``
        is False (a synchronous save writes them after everyone's data: :meth:`finish_save`), and after
        them, on the first tier, the files beside the steps where ``folder`` (an async save's: no tier's drain
        copies them)."""
        own = tasks(self.ctx, self.fmt, step, ranks_of_process(self.ctx) if plans is None else plans, backend)
        if plans is None and coordinator and self.ctx.comm.rank == 0:
            own += coordinator_tasks(self.ctx, step, backend)
        if plans is None and backend is None and folder and self.ctx.comm.rank == 0:
            own += folder_tasks(self.ctx, step)
        return own

    def finish_save(self, engine: Engine, step: int) -> int:
        """After every rank's data, rank 0 writes the coordinator's files and renames them into place
        where the framework does, and every rank waits for it (DCP's save returns after .metadata is
        written on every rank); then, once its own files are written, the files beside the steps, and
        every rank waits for it again (DeepSpeed's ``save_checkpoint`` writes ``latest``, then ends in a
        barrier). Bytes written by this process; nothing to do for a layout without either."""
        ctx, plan = self.ctx, plan_of(self.ctx)
        nbytes = self._coordinator_files(engine, step) if plan.coordinator else 0
        if plan.folder:
            if ctx.comm.rank == 0:
                nbytes += engine.write_files(folder_tasks(ctx, step), writers=1)
            ctx.comm.barrier()
        return nbytes

    def _coordinator_files(self, engine: Engine, step: int) -> int:
        ctx = self.ctx
        ctx.comm.barrier()
        nbytes = 0
        if ctx.comm.rank == 0:  # from its own thread, one file after another
            staged = coordinator_tasks(ctx, step, staged=True)
            nbytes = engine.write_files(staged, writers=1)
            checks = framework_io(ctx.workload) is not None
            for task, final in zip(staged, coordinator_tasks(ctx, step), strict=True):
                if task.path != final.path:
                    # DCP's FileSystemWriter.finish asks whether the final name exists (a stat, a HEAD on S3), to
                    # remove it: never here (an earlier run's checkpoints went before this run began, and each step
                    # is written once), so the question alone
                    if checks:
                        ctx.backend.size(final.path)
                    ctx.backend.rename(task.path, final.path, task.size)
        ctx.comm.barrier()
        return nbytes

    def look_for_earlier(self, step: int) -> None:
        """Before a save's data, each of this process's ranks asks whether the step already holds the file its
        coordinator moves into place (DCP's ``FileSystemWriter.prepare_local_plan``: ``exists(.metadata)``, a
        stat, a HEAD on S3), where the saves play their framework's calls and its coordinator moves the file into
        place (:func:`stages`): on S3, one HEAD of one key per rank. Synchronous saves: an async save writes its
        coordinator's files in place."""
        ctx = self.ctx
        framework = framework_io(ctx.workload)
        if framework is None or not stages(ctx.backend, framework):
            return
        for c in plan_of(ctx).coordinator:
            if c.staged:
                for _ in ranks_of_process(ctx):
                    ctx.backend.size(f"{ctx.path(step)}/{c.name}")

    def metadata_reads(self, step: int, backend: Backend, readers: int) -> list[FileTask]:
        """What each of this process's ``readers`` (loading ranks) reads first: the coordinator's files
        (DCP's ``.metadata``, read by every rank before its data)."""
        return coordinator_tasks(self.ctx, step, backend) * readers

    def restore_reads(self, step: int, backend: Backend, reads: list[RankReads],
                      ) -> tuple[list[FileTask], list[tuple[FileTask, tuple[tuple[int, int], ...]]]]:
        """The files ``reads`` (this process's loading ranks) read at ``step``: those read whole, and
        those read in byte ranges (a resharded or partial load), in the order the ranks read them."""
        whole, ranged, of = [], [], {}  # of: a writer's files, made once
        for r in reads:
            for f in r.files:
                if f.rank not in of:
                    of[f.rank] = tasks(self.ctx, self.fmt, step, [plan_of(self.ctx).ranks[f.rank]], backend)
                task = of[f.rank][f.index]
                if f.ranges:
                    ranged.append((task, f.ranges))
                else:
                    whole.append(task)
        return whole, ranged

    def manifest(self, step: int, k: int = 0) -> dict[str, Any]:
        """The marker of ``step`` on tier ``k``: on a node tier, of this host's part alone; on a peer
        tier, of the other hosts' parts this host keeps (``holds``)."""
        ctx, ck, st = self.ctx, self.ctx.ck, self.ctx.workload.storages[k]
        files = self.files
        about: dict[str, Any] = {}
        if st.scope == "node":
            files, about = self.host_files, {"host": ctx.placement.host}
        elif st.scope == "peer":
            if k not in self._held:  # for pt this formats every file's headers: once per run, not per step
                self._held[k] = held_files(ctx, self.fmt, k)
            files, about = self._held[k], {"host": ctx.placement.host, "holds": held_hosts(ctx, k)}
        return {"tool": "dlio_ckpt", "version": __version__, "step": step, "complete": True,
                "workload": ctx.workload.model.name, "layout": ck.layout, "world_size": ctx.world_size,
                "format": self.fmt.name, "scale": ck.scale, "run_key": self.run_key, "files": files,
                "data_reduction": reduction(ctx)._asdict(),
                **({"tier": k} if k else {}), **about}

    def prepare(self, step: int) -> None:
        """Before ``step`` is written: the first tier's acting rank removes its manifest (it is being
        rewritten) and makes its folder."""
        ctx = self.ctx
        if ctx.acts_on(0):
            with ctx.watch():
                ctx.backend.remove(manifest_path(ctx.backend, ctx.ck.checkpoint_folder, step))
                ctx.backend.makedirs(ctx.path(step))

    def commit(self, step: int, seconds: float, copied: float | None = None) -> None:
        """Every process has finished ``step`` (``seconds``: this process's time for it, ``copied`` of which
        copying from the accelerators): the first tier's acting rank (each host's, on a node-scoped tier)
        writes its manifest, last, and every process learns it is committed (or the failure). A collective."""
        ctx = self.ctx
        ctx.state.phase = "commit"
        everyone = ctx.comm.gather((seconds, copied or 0.0))

        path = manifest_path(ctx.backend, ctx.ck.checkpoint_folder, step)

        def committed() -> None:
            ctx.state.committed = [*(ctx.state.committed or []), step]
            ctx.state.landing = None

        # every process, not only the writer: a signal reaches each, and the failed summary written last (any
        # rank's) must count a manifest that landed while this process still waited to hear of it
        ctx.state.landing = (step, lambda: ctx.backend.get_small(path) is not None)

        def put() -> None:
            ctx.backend.put_marker(path, json.dumps(self.manifest(step)).encode())
            committed()  # at once: a signal's failed summary must not lag the manifest on disk
            if everyone is not None:  # rank 0: summary.json's figure
                copy = max(c for _, c in everyone)
                log.info("save_ckpt%d: %.3f s, %d files%s", step, max(s for s, _ in everyone), len(self.files),
                         f" (of which {copy:.3f} s copying from the accelerators)" if copy else "")
        ctx.on_tier_io(0, put)
        if not ctx.acts_on(0):
            committed()


def check_manifest(ctx: RunContext, files: dict[str, int], step: int, run_key: int | None,
                   tier: int | None = None) -> int:
    """The run key of a complete step on ``tier`` (the read tier by default) that matches this run's
    layout (``files``: on a node-scoped tier, this host's part); an error (exit 2) otherwise."""
    backend = ctx.tiers[ctx.ck.read_tier if tier is None else tier]
    raw = backend.get_small(manifest_path(backend, ctx.ck.checkpoint_folder, step))
    key, folder = "workload.checkpoint.num_checkpoints_read", backend.join(ctx.ck.checkpoint_folder)
    if raw is None:
        raise ConfigError(key, ctx.ck.num_checkpoints_read, f"step {step} has no complete checkpoint in {folder} "
                          f"(no {step_name(step)}.manifest.json): write it first")
    m = json.loads(raw)
    layout = ctx.ck.layout
    if m["files"] != files and m.get("layout", layout) != layout:  # an older manifest records none
        raise ConfigError("workload.checkpoint.layout", layout, f"{step_name(step)} in {folder} was written with "
                          f"checkpoint.layout={m['layout']}, and this run reads checkpoint.layout={layout}'s files: "
                          f"set ++workload.checkpoint.layout={m['layout']} to read it, or write it first")
    if m["files"] != files:
        raise ConfigError(key, ctx.ck.num_checkpoints_read,
                          f"{step_name(step)} in {folder} holds other files than this run's "
                          f"(workload {m['workload']}, checkpoint.layout={m.get('layout', 'not recorded')}, world "
                          f"size {m['world_size']}, format {m['format']}, scale {m['scale']}; this run: workload "
                          f"{ctx.workload.model.name}, checkpoint.layout={layout}, world size {ctx.world_size}, "
                          f"format {file_format(ctx.workload).name}, scale {ctx.ck.scale})")
    if run_key is not None and m["run_key"] != run_key:
        raise ConfigError(key, None, f"{step_name(step)} manifest does not belong to this run")
    written = m.get("data_reduction", {})  # an older manifest's bytes were irreducible: the defaults
    for name, asked in reduction(ctx)._asdict().items():
        key, default = ("data_values", "random") if name == "values" else (f"{name}_ratio", 1.0)
        if written.get(name, default) != asked:
            raise ConfigError(f"workload.checkpoint.{key}", asked, f"{step_name(step)} in {folder} was "
                              f"written with checkpoint.{key}={written.get(name, default)}: set it so to read "
                              "it, or write it first")
    return int(m["run_key"])
