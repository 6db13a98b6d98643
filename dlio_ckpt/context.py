"""One run as every mode sees it, and the skeleton they all share: storage checks and old-checkpoint
rules before anything is written, one timed block per save or load, one way to write the results.

Why once: emulated, Lightning, FSDP and GDS runs differ in what they save and how, not in the
contract around it (start together, slowest process's time, a watchdog on this process's I/O,
DLIO's result files). A mode gets a :class:`RunContext` and uses :func:`timed` for each operation;
it never re-implements barrier, clock, watchdog or result writing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .backends import Backend, check_options, get_backend
from .comm import Comm, on_root
from .config import Checkpoint, Workload, tier_key
from .errors import ConfigError, StorageError
from .failure import RunState, Watchdog, watching
from .host import hostname
from .planner import Plan
from .requests import Request, summarize
from .results import OpRecord, ProcessCost, finish_run
from .steps import RECORD, Found, Writes, refuse_mixing, remove_ours, step_name

T = TypeVar("T")
log = logging.getLogger("dlio_ckpt")
GIB = 1 << 30


@dataclass
class RunContext:
    """What one process knows of the run. ``plan`` is the emulated layout (built once, by the
    emulated mode's preflight); ``run_dir`` and ``meta`` are set once the run folder exists."""

    workload: Workload
    comm: Comm
    backend: Backend
    world_size: int
    state: RunState = field(default_factory=RunState)
    watchdog: Watchdog | None = None
    plan: Plan | None = None
    outside_requests: list[Request] = field(default_factory=list)  # not during a timed operation
    run_dir: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    tiers: list[Backend] = field(default_factory=list)  # [backend, then workload.tiers' backends]
    alarm: threading.Event = field(default_factory=threading.Event)  # set by a failed background thread
    writes: Writes = Writes(())  # what this run writes in the checkpoint folder (prepare_storage)
    fsync_wording: str = ""  # the mode's: what checkpoint.fsync makes it do (summary.json io.fsync)
    found: list[Found] = field(default_factory=list)  # rank 0: what each tier's folder held before the run

    def __post_init__(self) -> None:
        self.tiers = self.tiers or [self.backend]

    @property
    def ck(self) -> Checkpoint:
        return self.workload.checkpoint

    def watch(self) -> AbstractContextManager:
        return watching(self.watchdog)

    def on_root_io(self, fn: Callable[[], T]) -> T:
        """``on_root`` for a storage operation: rank 0 does it under the watchdog, the others wait."""
        def watched() -> T:
            with self.watch():
                return fn()
        return on_root(self.comm, watched)

    @property
    def counts_requests(self) -> bool:
        """Whether any storage of the run logs its requests (object stores)."""
        return any(b.requests is not None for b in self.tiers)

    def take_requests(self, backend: Backend | None = None) -> list[Request]:
        """Requests logged since the last call: of ``backend``, or of every tier (not the drains':
        their clients are their own)."""
        return [q for b in ([backend] if backend else self.tiers) if b.requests is not None for q in b.requests.take()]

    def path(self, step: int, suffix: str = "", backend: Backend | None = None) -> str:
        """The path of a step (a folder for files and DCP, a file for Lightning) on ``backend``
        (a tier; the first by default)."""
        return (backend or self.backend).join(self.ck.checkpoint_folder, step_name(step) + suffix)


@dataclass
class Clock:
    """When a timed operation started (wall clock, for records; monotonic, for durations) and how
    long it took once its block ended."""

    start: float
    t0: float
    seconds: float = 0.0
    waited: float = 0.0  # in the barrier before the clock started
    cost: ProcessCost = field(default_factory=ProcessCost.now)  # this process's, when the clock started


@contextmanager
def timed(ctx: RunContext, phase: str, step: int, what: str = "") -> Iterator[Clock]:
    """Every process starts the operation together (barrier), then the clock runs while the watchdog
    watches this process's I/O. ``what`` names the path or file for messages."""
    ctx.state.phase, ctx.state.step = f"{phase} ({what})" if what else phase, step
    ctx.outside_requests += ctx.take_requests()  # requests since the last operation are not this one's
    entered = time.perf_counter()
    ctx.comm.barrier()
    clock = Clock(time.time(), time.perf_counter())
    clock.waited = clock.t0 - entered
    with ctx.watch():
        yield clock
    clock.seconds = time.perf_counter() - clock.t0


def record(ctx: RunContext, phase: str, index: int, clock: Clock, nbytes: int, files: int, *,
           step: int | None = None, seconds: float | None = None,
           file_times: tuple[tuple[str, float, float, int], ...] = (), held: float | None = None,
           stalled: float = 0.0, backend: Backend | None = None, ended: ProcessCost | None = None) -> OpRecord:
    """This process's part of one operation. ``seconds`` replaces the clock's where the operation
    ends after its block (an async save, finished in the background); ``held``: how long it held
    training (async), ``stalled`` of which waiting for the previous background write (or a drain);
    ``backend``: the tier it used, if not the first (whose requests it made); ``ended``: this process's
    cost when the operation ended, where the record is made later (else now)."""
    seconds = clock.seconds if seconds is None else seconds
    requests = tuple(ctx.take_requests(backend or ctx.backend))
    cost = (ended or ProcessCost.now()).since(clock.cost)
    return OpRecord(phase, index, index if step is None else step, ctx.comm.rank, clock.start,
                    clock.start + seconds, seconds, nbytes, files, file_times, clock.waited, requests, held, stalled,
                    cost)


@contextmanager
def _named_as_tier(k: int) -> Iterator[None]:
    """A bad storage option of tier ``k`` is named under its own key, not ``workload.storage``."""
    try:
        yield
    except ConfigError as exc:
        if k == 0:
            raise
        raise ConfigError(exc.key.replace("workload.storage", tier_key(k), 1), exc.value, exc.rule) from None


def tier_backend(workload: Workload, k: int, local_rank: int = 0) -> Backend:
    """The backend of tier ``k`` (0: ``storage``; k: ``tiers[k-1]``)."""
    st = workload.storages[k]
    with _named_as_tier(k):
        return get_backend(st.storage_type, st.storage_root, st.storage_options, local_rank)


def check_tier_options(workload: Workload) -> None:
    """Every tier's storage options, validated without building a client (``plan``)."""
    for k, st in enumerate(workload.storages):
        with _named_as_tier(k):
            check_options(st.storage_type, st.storage_options)


def prepare_storage(ctx: RunContext, needed_bytes: Callable[[], int], writes: Writes) -> None:
    """Before anything is written: the storage answers and can be written, an earlier run's
    checkpoints are not mixed with ours and nothing this tool did not write stands where the run
    writes (``writes``), and ``needed_bytes()`` (every checkpoint this run writes; asked on rank 0
    only) fit where the storage can say; on every tier, each for the steps it keeps."""
    ck = ctx.ck
    ctx.writes = writes

    def on_root() -> None:  # one listing of each folder, kept on rank 0 (the others need none of it)
        for k, backend in enumerate(ctx.tiers):
            with _named_as_tier(k):
                backend.check(writing=ck.num_checkpoints_write > 0)
            if ck.num_checkpoints_write > 0:
                try:
                    ctx.found.append(refuse_mixing(backend, ck, writes, tier_key(k)))
                except ConfigError as exc:  # the tier's own path: named by its key
                    if k == 0 or exc.key != "workload.checkpoint.checkpoint_folder":
                        raise
                    raise ConfigError(f"{tier_key(k)}.storage_root", ctx.workload.tiers[k - 1].storage_root,
                                      exc.rule) from None

    def room() -> None:
        for k, (backend, found) in enumerate(zip(ctx.tiers, ctx.found, strict=True)):
            if not found.ours:  # else: once the earlier run's steps are gone (start_writing)
                check_room(backend, ck.checkpoint_folder, kept(ctx, k, needed_bytes), k)
    ctx.found = []
    ctx.on_root_io(on_root)
    if ck.num_checkpoints_write > 0:
        probe_writable(ctx)
        ctx.on_root_io(room)


def probe_writable(ctx: RunContext) -> None:
    """Every host's acting rank (its local rank 0) creates the checkpoint folder on every tier, writes
    and removes a probe file and removes what it created: a read-only, immutable or foreign folder is
    found here, before anything is written, on the host that cannot write it. The answer is shared,
    so every rank ends alike (exit 2)."""
    comm, made = ctx.comm, []

    def probe(keep: bool) -> tuple[int, str] | None:
        for k, backend in enumerate(ctx.tiers):
            try:
                with ctx.watch():
                    made.extend((backend, f) for f in backend.probe_write(ctx.ck.checkpoint_folder, keep))
            except StorageError as exc:
                return k, f"{exc} (on host {hostname()}, rank {comm.rank})"
        return None
    # rank 0 first, leaving the folders it made, so that hosts sharing a file system never make or
    # remove the same folder at once; then every other host's acting rank; then rank 0 tidies up
    problem = probe(keep=True) if comm.rank == 0 else None
    problems = [p for p in comm.allgather(problem) if p is not None]
    if not problems:
        problem = probe(keep=False) if comm.local_rank == 0 and comm.rank != 0 else None
        problems = [p for p in comm.allgather(problem) if p is not None]
    for backend, folder in made:  # each probe's deepest first
        backend.remove_empty(folder)
    if problems:
        k, why = problems[0]
        st = ctx.workload.storages[k]
        key, value = ("workload.checkpoint.checkpoint_folder", ctx.ck.checkpoint_folder) if k == 0 else \
            (f"{tier_key(k)}.storage_root", st.storage_root)
        raise ConfigError(key, value, why)


def kept(ctx: RunContext, k: int, needed_bytes: Callable[[], int]) -> Callable[[], int]:
    """Bytes tier ``k`` holds at most: with keep_last, its newest steps and the one being written."""
    st = ctx.workload.storages[k]
    writes = ctx.ck.num_checkpoints_write
    if not st.keep_last or st.keep_last + 1 >= writes:
        return needed_bytes
    return lambda: needed_bytes() // writes * (st.keep_last + 1)


def check_room(backend: Backend, folder: str, needed_bytes: Callable[[], int], k: int = 0) -> None:
    """``k``: the tier, named in the message when not the first (its storage_root is the key)."""
    free = backend.free_bytes(backend.join(folder))
    if free is not None and (needed := needed_bytes()) > free:
        key, value = ("workload.checkpoint.checkpoint_folder", folder) if k == 0 else \
            (f"{tier_key(k)}.storage_root", backend.join(folder))
        raise ConfigError(key, value,
                          f"needs {needed / GIB:.2f} GiB ({needed} bytes) for the checkpoints it holds, "
                          f"and {backend.join(folder)} has {free / GIB:.2f} GiB ({free} bytes) free")


def start_writing(ctx: RunContext, needed_bytes: Callable[[], int]) -> None:
    """Rank 0 replaces an earlier run's checkpoints (``checkpoint.overwrite``: only what that run
    wrote; then checks the room that frees), makes the checkpoint folder and records what this run
    writes there, on every tier, before any timing starts."""
    about = {"workload": ctx.workload.model.name, "mode": ctx.workload.mode, "run_dir": ctx.run_dir,
             "world_size": ctx.world_size}
    for k, (backend, found) in enumerate(zip(ctx.tiers, ctx.found, strict=True) if ctx.comm.rank == 0 else ()):
        with ctx.watch():
            if found.ours:
                remove_ours(backend, found)
                check_room(backend, ctx.ck.checkpoint_folder, kept(ctx, k, needed_bytes), k)
            backend.makedirs(backend.join(ctx.ck.checkpoint_folder))
            backend.put_small(backend.join(ctx.ck.checkpoint_folder, RECORD), ctx.writes.record(about))
    ctx.comm.barrier()


def say_done(ctx: RunContext, name: str, seconds: float, detail: str = "") -> None:
    """The console line of one operation, with the duration summary.json reports for it: the slowest
    process's, not rank 0's own (a collective: every process calls it)."""
    everyone = ctx.comm.gather(seconds)
    if everyone is not None:
        log.info("%s: %.3f s%s", name, max(everyone), f", {detail}" if detail else "")


def evict_before_read(ctx: RunContext, paths: list[str]) -> None:
    """Unless ``checkpoint.read_from_page_cache``, a load reads from storage, not from the pages the
    save left in this host's cache."""
    if ctx.backend.capabilities.evict_cache and not ctx.ck.read_from_page_cache:
        for path in paths:
            ctx.backend.evict(path)


def fsync_meaning(ctx: RunContext) -> str | bool:
    """What ``checkpoint.fsync`` meant on this storage, said plainly, the same way for every mode
    (``ctx.fsync_wording``: how the mode syncs)."""
    caps = ctx.backend.capabilities
    if not caps.stores_data:
        return "nothing stored: null storage"
    if caps.durable_on_close:
        return "implicit: each object is committed when its upload completes"
    return ctx.fsync_wording if ctx.ck.fsync else False


def read_cache(ctx: RunContext) -> str:
    """Where reads could have been served from, said plainly."""
    caps, ck = ctx.backend.capabilities, ctx.ck
    if not caps.stores_data:
        return "none: null storage"
    if not caps.evict_cache:
        return "server: no client-side cache"
    if ck.odirect:
        return "odirect"
    return "allowed" if ck.read_from_page_cache else "evicted"


def write_results(ctx: RunContext, records: list[OpRecord], checkpoint_bytes: int, io: dict[str, Any],
                  mine: Any = None, describe: Callable[[list[Any]], dict[str, Any]] | None = None,
                  ) -> dict[str, Any] | None:
    """``summary.json`` and the per-process files for any mode: ``io`` is what the mode says of its
    I/O (what fsync and the read cache meant are said here, alike for every mode), ``mine`` this
    process's own facts, listed as ``per_process`` unless ``describe`` turns them into other summary
    fields. ``checkpoint_bytes``: one checkpoint, all processes, as written."""
    def fields(per_process: list[Any]) -> dict[str, Any]:
        base = {"mode": ctx.workload.mode, "num_accelerators": ctx.world_size,
                "io": {"storage_type": ctx.backend.name, "storage": ctx.backend.describe(),
                       "fsync": fsync_meaning(ctx), "read_cache": read_cache(ctx), **io}}
        if ctx.counts_requests:  # results.summary adds the checkpoints' own
            base["requests"] = {"outside_checkpoints": summarize([q for _, out in per_process for q in out]),
                                "note": REQUESTS_NOTE}
        mine_all = [m for m, _ in per_process]
        return {**base, **(describe(mine_all) if describe else {"per_process": mine_all})}

    ctx.outside_requests += ctx.take_requests()
    return finish_run(ctx.comm, ctx.run_dir, ctx.meta, ctx.started, records, checkpoint_bytes,
                      (mine if mine is not None else {}, ctx.outside_requests), fields)


REQUESTS_NOTE = ("per kind: count, bytes, latency percentiles of requests seen (ms), requests per second over "
                 "the checkpoint's duration, failures by cause; 'derived': counted by the client's rule "
                 "(s3torchconnector's CRT hides its part requests and retries), no latency; 'call: ...': our call "
                 "into the client, not an HTTP request; checkpoints[] hold each checkpoint's requests, "
                 "outside_checkpoints the storage checks, manifests and clean-up")
