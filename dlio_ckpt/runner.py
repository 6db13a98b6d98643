"""One benchmark run: write ``num_checkpoints_write`` checkpoints, read back ``num_checkpoints_read``.

Why here and not in the CLI: this is the choreography (barriers, timing, manifests) and nothing
else; it receives a validated workload and a :class:`~dlio_ckpt.comm.Comm`, so it runs the same on
one process and on a thousand.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import secrets
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

from . import __version__
from .backends import Backend, get_backend
from .comm import Comm, host_memory, hostname, on_root
from .config import Checkpoint, Workload
from .engine import Engine, FileTask, IOOptions, check_capabilities
from .errors import ConfigError
from .failure import RunState, Watchdog, watching
from .formats import Format, get_format
from .planner import Layout, RankPlan
from .progress import ProgressDisplay, progress_display
from .results import OpRecord, dumps, hosts_summary, iso, per_epoch_stats, summary
from .synthetic import file_key

log = logging.getLogger("dlio_ckpt")
T = TypeVar("T")


def step_name(step: int) -> str:
    return f"global_epoch1_step{step}"


@dataclass
class Job:
    """What every process needs to know about the run, derived once."""

    workload: Workload
    comm: Comm
    layout: Layout
    backend: Backend
    fmt: Format
    mine: list[RankPlan]  # the logical ranks this process emulates
    watchdog: Watchdog | None = None  # set by the CLI; ends the job when this process's I/O stalls

    def watch(self) -> AbstractContextManager:
        return watching(self.watchdog)

    def on_root_io(self, fn: Callable[[], T]) -> T:
        """``on_root`` for a storage operation: rank 0 does it under the watchdog, the others wait."""
        def watched() -> T:
            with self.watch():
                return fn()
        return on_root(self.comm, watched)

    @property
    def folder(self) -> str:
        return self.backend.join(self.workload.checkpoint.checkpoint_folder)

    def manifest_path(self, step: int) -> str:
        return self.backend.join(self.workload.checkpoint.checkpoint_folder, f"{step_name(step)}.manifest.json")

    def tasks(self, step: int, plans: list[RankPlan]) -> list[FileTask]:
        base = self.backend.join(self.workload.checkpoint.checkpoint_folder, step_name(step))
        return [
            FileTask(f"{base}/{f.stem}{self.fmt.extension}", tuple(self.fmt.segments(f)), file_key(step, p.rank, i))
            for p in plans for i, f in enumerate(p.files)
        ]

    @cached_property
    def expected_files(self) -> dict[str, int]:
        """Every file of a step (all ranks) and its size: what a manifest lists. The same for each
        step, so built once (for pt it formats every file's headers)."""
        out = {}
        for r in range(self.layout.world_size):
            for t in self.tasks(0, [self.layout.rank_plan(r)]):
                out[t.path.rsplit("/", 1)[1]] = t.size
        return out


def build_job(workload: Workload, comm: Comm, world_size: int) -> Job:
    if world_size % comm.size:
        raise ConfigError("--world-size", world_size,
                          f"must be a multiple of the number of processes ({comm.size})")
    ck, st = workload.checkpoint, workload.storage
    layout = Layout.from_workload(workload, world_size)
    per = world_size // comm.size
    mine = [layout.rank_plan(r) for r in range(comm.rank * per, (comm.rank + 1) * per)]
    backend = get_backend(st.storage_type, st.storage_root, st.storage_options, comm.local_rank)
    check_capabilities(backend, io_options(workload))
    return Job(workload, comm, layout, backend, get_format(ck.format), mine)


def io_options(workload: Workload) -> IOOptions:
    ck = workload.checkpoint
    return IOOptions(ck.fsync, ck.odirect, not ck.read_from_page_cache, ck.verify, ck.chunk_size)


def _timed(job: Job, phase: str, index: int, step: int, tasks: list[FileTask], engine: Engine,
           shown: ProgressDisplay) -> OpRecord:
    job.comm.barrier()  # every process starts the checkpoint together
    shown.start(f"{phase}_ckpt{index}", sum(t.size for t in tasks))
    start, t0 = time.time(), time.perf_counter()
    try:
        with job.watch():
            nbytes = engine.write_files(tasks) if phase == "save" else engine.read_files(tasks)
    finally:
        shown.stop()
    duration = time.perf_counter() - t0
    files = tuple((p.rsplit("/", 1)[-1], s, e, n) for p, s, e, n in engine.take_file_times())
    return OpRecord(phase, index, step, job.comm.rank, start, time.time(), duration, nbytes, len(tasks), files)


def _manifest(job: Job, step: int, run_key: int) -> dict[str, Any]:
    ck = job.workload.checkpoint
    return {"tool": "dlio_ckpt", "version": __version__, "step": step, "complete": True,
            "workload": job.workload.model.name, "world_size": job.layout.world_size,
            "format": job.fmt.name, "scale": ck.scale, "run_key": run_key,
            "files": job.expected_files}


def _check_manifest(job: Job, step: int, run_key: int | None) -> int:
    """The run key of a complete step that matches this run's layout; an error otherwise."""
    raw = job.backend.get_small(job.manifest_path(step))
    key = "workload.checkpoint.num_checkpoints_read"
    if raw is None:
        raise ConfigError(key, job.workload.checkpoint.num_checkpoints_read,
                          f"step {step} has no complete checkpoint in {job.folder} "
                          f"(no {step_name(step)}.manifest.json): write it first")
    m = json.loads(raw)
    if m["files"] != job.expected_files:
        raise ConfigError(key, job.workload.checkpoint.num_checkpoints_read,
                          f"{step_name(step)} in {job.folder} was written with another layout "
                          f"(workload {m['workload']}, world size {m['world_size']}, format {m['format']}, "
                          f"scale {m['scale']})")
    if run_key is not None and m["run_key"] != run_key:
        raise ConfigError(key, None, f"{step_name(step)} manifest does not belong to this run")
    return int(m["run_key"])


def _read_plans(job: Job) -> list[RankPlan]:
    """Whose files each of my ranks reads: its own, or with recovery_rank_shift those of the rank
    one host further on, so reads cannot come from this host's page cache."""
    ck, w = job.workload.checkpoint, job.layout.world_size
    if not ck.recovery_rank_shift:
        return job.mine
    hosts = job.comm.allgather(hostname())
    per_host = ck.ranks_per_host or Counter(hosts)[hostname()] * (w // job.comm.size)
    return [job.layout.rank_plan((p.rank + per_host) % w) for p in job.mine]


def old_checkpoints(backend: Backend, folder: str) -> list[str]:
    """Steps (folders, files and manifests) an earlier run left in the checkpoint folder."""
    return [n for n in backend.list_names(backend.join(folder)) if n.startswith("global_epoch")]


def refuse_old_checkpoints(backend: Backend, ck: Checkpoint) -> None:
    old = old_checkpoints(backend, ck.checkpoint_folder)
    if old and not ck.overwrite:
        shown = ", ".join(old[:3]) + (f" and {len(old) - 3} more" if len(old) > 3 else "")
        raise ConfigError("workload.checkpoint.checkpoint_folder", ck.checkpoint_folder,
                          f"already holds checkpoints of an earlier run ({shown} in "
                          f"{backend.join(ck.checkpoint_folder)}); set ++workload.checkpoint.overwrite=True "
                          "to replace them, or choose another folder")


def preflight(job: Job) -> None:
    """Checks that need storage but must fail before anything is created: the storage is usable
    (folder writable, bucket there, credentials accepted), a writing run does not silently mix with
    an earlier run's checkpoints, and a read-only run needs every step it will read to be complete
    and of this layout."""
    ck = job.workload.checkpoint
    job.on_root_io(lambda: job.backend.check(writing=ck.num_checkpoints_write > 0))
    if ck.num_checkpoints_write > 0:
        job.on_root_io(lambda: refuse_old_checkpoints(job.backend, ck))
    if ck.num_checkpoints_write == 0:
        key = job.on_root_io(lambda: _check_manifest(job, 1, None))
        for i in range(2, ck.num_checkpoints_read + 1):
            job.on_root_io(lambda i=i: _check_manifest(job, i, key))


def replace_old_checkpoints(backend: Backend, folder: str) -> None:
    """``checkpoint.overwrite``: manifests go first (so no old step can pass for complete), then
    the steps; before any timing starts."""
    old = old_checkpoints(backend, folder)
    for name in sorted(old, key=lambda n: not n.endswith(".manifest.json")):
        path = backend.join(folder, name)
        backend.remove(path) if name.endswith((".manifest.json", ".ckpt")) else backend.remove_tree(path)
    if old:
        log.info("removed %d entries of an earlier run from %s (checkpoint.overwrite)", len(old),
                 backend.join(folder))


def run(job: Job, run_dir: str, meta: dict[str, Any], state: RunState) -> dict[str, Any] | None:
    """Run the benchmark; returns the summary on rank 0 (None elsewhere). ``state`` tells the
    failure path where we are."""
    ck, comm = job.workload.checkpoint, job.comm
    run_start = time.time()
    if ck.num_checkpoints_write > 0:
        run_key = comm.bcast(secrets.randbits(63) if comm.rank == 0 else None)
        if comm.rank == 0 and ck.overwrite:
            with job.watch():
                replace_old_checkpoints(job.backend, ck.checkpoint_folder)
    else:
        run_key = job.on_root_io(lambda: _check_manifest(job, 1, None))
    shown = progress_display(comm.rank == 0 and ck.progress, ck.progress_interval)  # rank 0's share of each checkpoint
    watchdog = job.watchdog

    def progress(path: str, nbytes: int) -> None:
        if watchdog is not None:
            watchdog.progress(path)
        shown.advance(nbytes)
    engine = Engine(job.backend, run_key, io_options(job.workload), progress)
    if comm.rank == 0 and "transport" in (storage := job.backend.describe()):  # GDS or POSIX, said up front
        log.info("storage_type=%s moves bytes by %s: %s", job.backend.name, storage["transport"], storage["why"])
    records: list[OpRecord] = []
    retries = {"save": 0, "load": 0}
    for i in range(1, ck.num_checkpoints_write + 1):
        state.phase, state.step = "wait before save", i
        time.sleep(ck.time_between_checkpoints)
        state.phase = "save"
        if comm.rank == 0:
            with job.watch():
                job.backend.remove(job.manifest_path(i))  # a step being rewritten is not complete
                job.backend.makedirs(job.backend.join(ck.checkpoint_folder, step_name(i)))
        before = engine.retries
        records.append(_timed(job, "save", i, i, job.tasks(i, job.mine), engine, shown))
        retries["save"] += engine.retries - before
        state.phase = "commit"
        if comm.gather(None) is not None:  # all processes finished the step: commit it, last
            manifest = _manifest(job, i, run_key)
            with job.watch():
                job.backend.put_small(job.manifest_path(i), json.dumps(manifest).encode())
            state.committed.append(i)
            log.info("save_ckpt%d: %.3f s, %d files", i, records[-1].duration, len(manifest["files"]))
    read_plans = _read_plans(job) if ck.num_checkpoints_read else []
    for i in range(1, ck.num_checkpoints_read + 1):
        state.phase, state.step = "load", i
        job.on_root_io(lambda i=i: _check_manifest(job, i, run_key))
        before = engine.retries
        records.append(_timed(job, "load", i, i, job.tasks(i, read_plans), engine, shown))
        retries["load"] += engine.retries - before
        log.info("load_ckpt%d %s", i, "verified" if ck.verify else "read")
    engine.close()
    state.phase, state.step = "results", None
    total = sum(job.layout.rank_plan(r).payload_bytes for r in range(job.layout.world_size))

    backend = job.backend
    fsync = fsync_meaning(backend, True, "every file fsynced before the process's end time") if ck.fsync else False

    def describe(tries: list[dict[str, int]]) -> dict[str, Any]:
        return {
            "num_accelerators": job.layout.world_size,
            "io": {
                "storage_type": backend.name, "storage": backend.describe(), "format": job.fmt.name,
                "fsync": fsync, "odirect": ck.odirect, "read_cache": read_cache(backend, ck),
                "verified": backend.capabilities.stores_data and ck.verify,
                "recovery_rank_shift": ck.recovery_rank_shift, "scale": ck.scale, "chunk_size": ck.chunk_size,
            },
            "retries": {"save": sum(t["save"] for t in tries), "load": sum(t["load"] for t in tries),
                        "per_process": tries,
                        "note": "files redone after a transient storage error; the client's own attempts "
                                "(S3 max_attempts, gcsfs) are not visible here"},
        }
    return finish_run(comm, run_dir, meta, run_start, records, total, retries, describe)


def finish_run(comm: Comm, run_dir: str, meta: dict[str, Any], run_start: float, records: list[OpRecord],
               checkpoint_bytes: int, mine: Any, describe: Callable[[list[Any]], dict[str, Any]]
               ) -> dict[str, Any] | None:
    """Gather every process's records and facts; rank 0 writes ``{process}_per_epoch_stats.json`` and
    ``summary.json`` and returns the summary (None elsewhere). ``mine`` is this process's own facts
    (retries, set-up time...); ``describe`` turns every process's into the caller's summary fields.
    ``checkpoint_bytes``: one checkpoint, all processes. Emulated and real modes share this, so their
    result files agree."""
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    gathered = comm.gather((records, hostname(), host_memory(), peak_rss, mine))
    if gathered is None:
        return None
    run_end = time.time()
    write_per_epoch_stats(run_dir, [g[0] for g in gathered], run_start, run_end)
    rss = [g[3] for g in gathered]
    meta = {
        **meta, "status": "ok", "num_processes": comm.size, "num_hosts": len({g[1] for g in gathered}),
        "hostname": hostname(), "start": iso(run_start), "end": iso(run_end),
        **hosts_summary([(g[1], g[2]) for g in gathered]),
        "memory": {"peak_rss_bytes_max": max(rss), "peak_rss_bytes_per_process": rss},
        **describe([g[4] for g in gathered]),
    }
    result = summary([r for g in gathered for r in g[0]], checkpoint_bytes=checkpoint_bytes, meta=meta)
    write_result(f"{run_dir}/summary.json", dumps(result))
    return result


def fsync_meaning(backend: Backend, asked: bool, what: str) -> str | bool:
    """What ``checkpoint.fsync`` meant on this storage, said plainly (``what``: how this writer syncs)."""
    caps = backend.capabilities
    if not caps.stores_data:
        return "nothing stored: null storage"
    if caps.durable_on_close:
        return "implicit: each object is committed when its upload completes"
    return what if asked else False


def read_cache(backend: Backend, ck: Checkpoint) -> str:
    """Where reads could have been served from, said plainly."""
    caps = backend.capabilities
    if not caps.stores_data:
        return "none: null storage"
    if not caps.evict_cache:
        return "server: no client-side cache"
    if ck.odirect:
        return "odirect"
    return "allowed" if ck.read_from_page_cache else "evicted"


def write_per_epoch_stats(run_dir: str, per_process: list[list[OpRecord]], start: float, end: float) -> None:
    for proc, recs in enumerate(per_process):
        write_result(f"{run_dir}/{proc}_per_epoch_stats.json", dumps(per_epoch_stats(recs, start, end)))


def write_result(path: str, text: str) -> None:
    """Atomically: a result file is whole or absent, never half-written by a killed process."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)
