"""One run as every mode sees it, and the skeleton they all share: one timed block per save or load,
one way to write the results (the storage's preparation before a run is :mod:`dlio_ckpt.run.preparation`'s).

Why once: emulated, Lightning, FSDP and GDS runs differ in what they save and how, not in the
contract around it (start together, slowest process's time, a watchdog on this process's I/O,
DLIO's result files). A mode gets a :class:`RunContext` and uses :func:`timed` for each operation;
it never re-implements barrier, clock, watchdog or result writing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from math import ceil
from typing import Any, Protocol, TypeVar, cast

from dlio_ckpt.cluster.comm import Comm, on_root
from dlio_ckpt.cluster.placement import Placement
from dlio_ckpt.config import Checkpoint, Workload
from dlio_ckpt.errors import mark_reported_by
from dlio_ckpt.io.backends import Backend
from dlio_ckpt.io.backends.timed import TimedBackend
from dlio_ckpt.io.latency import Histograms, merged
from dlio_ckpt.io.requests import Request, summarize
from dlio_ckpt.registry import BACKENDS
from dlio_ckpt.results.schema import IO, SHORT_DATA_SECONDS, Projection, RequestsSeen, Summary
from dlio_ckpt.results.summary import GoodputAsked, OpRecord, ProcessCost, finish_run
from dlio_ckpt.run.failure import RunState, Watchdog, watching
from dlio_ckpt.run.steps import Found, Writes, step_name

T = TypeVar("T")
log = logging.getLogger("dlio_ckpt")
GIB = 1 << 30


@dataclass
class RunContext:
    """What one process knows of the run, whatever its mode. ``prepared`` is what the mode's preflight worked out
    for the rest of its run (the emulated mode: its plan and what its loads read), which no other code reads;
    ``run_dir`` and ``meta`` are set once the run folder exists."""

    workload: Workload
    comm: Comm
    backend: Backend
    world_size: int
    state: RunState = field(default_factory=RunState)
    watchdog: Watchdog | None = None
    prepared: object = None  # the mode's own, from its preflight; only that mode looks inside
    outside_requests: list[Request] = field(default_factory=list)  # not during a timed operation
    run_dir: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    tiers: list[Backend] = field(default_factory=list)  # [backend, then workload.tiers' backends]
    alarm: threading.Event = field(default_factory=threading.Event)  # set by a failed background thread
    writes: Writes = Writes(())  # what this run writes in the checkpoint folder (prepare_storage)
    fsync_wording: str = ""  # the mode's: what checkpoint.fsync makes it do (summary.json io.fsync)
    found: list[Found | None] = field(default_factory=list)  # each tier's acting rank: what its folder held before
    placement: Placement = Placement(("",), 0, False)  # which host each process is on (launch.start places them)
    memory_bytes: dict[int, int | None] = field(default_factory=dict)  # acting ranks: host memory a tier takes
    outside_latency: list[Histograms] = field(default_factory=list)  # storage calls not during a timed operation
    open_operations: int = 0  # timed operations begun and not yet recorded (an async save runs past its block)

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

    def acts_on(self, k: int) -> bool:
        """Whether this process does tier ``k``'s checks, markers and clean-up: rank 0 on a shared tier,
        each host's acting rank on its own copy of a node-scoped one."""
        own = self.workload.storages[k].scope != "shared"  # node or peer: each host's own storage
        return self.placement.acts if own else self.comm.rank == 0

    def on_tier_io(self, k: int, fn: Callable[[], T]) -> T:
        """``on_root_io`` for tier ``k``: on a node or peer tier every host's acting rank runs ``fn`` on its
        own copy, and a failure on any host ends every rank alike (reported by the rank it happened on).
        Every rank gets the first answer other than None, in rank order (rank 0's where it gave one)."""
        if self.workload.storages[k].scope == "shared":
            return self.on_root_io(fn)
        answer: tuple[bool, Any] = (True, None)
        if self.acts_on(k):
            try:
                with self.watch():
                    answer = (True, fn())
            except Exception as exc:  # re-raised below, on every rank
                answer = (False, exc)
        answers = self.comm.allgather(answer)
        for rank, (ok, value) in enumerate(answers):
            if not ok:
                mark_reported_by(value, rank)
                raise value
        # every host has an acting rank: None here means that fn answered None on each (so None is a T)
        return cast(T, next((value for _, value in answers if value is not None), None))

    @property
    def times_calls(self) -> bool:
        """Whether the run's storage calls are timed (launch wraps every tier's backend)."""
        return any(isinstance(b, TimedBackend) for b in self.tiers)

    def take_latency(self, backend: Backend | None = None) -> Histograms:
        """Storage calls timed since the last call: of ``backend``'s tier, or of every tier, by kind."""
        tiers = [backend] if backend else self.tiers
        return merged([b.recorder.take() for b in tiers if isinstance(b, TimedBackend)])

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
    watches this process's I/O. ``what`` names the path or file for messages. Storage calls since the last
    operation are not this one's, unless an operation still runs (an async save's background write): then they
    are that one's, and its record takes them."""
    ctx.state.phase, ctx.state.step = f"{phase} ({what})" if what else phase, step
    ctx.outside_requests += ctx.take_requests()  # requests since the last operation are not this one's
    if not ctx.open_operations:
        ctx.outside_latency.append(ctx.take_latency())
    entered = time.perf_counter()
    ctx.comm.barrier()
    clock = Clock(time.time(), time.perf_counter())
    began = time.perf_counter_ns()
    ctx.open_operations += 1
    clock.waited = clock.t0 - entered
    with ctx.watch():
        yield clock
    clock.seconds = time.perf_counter() - clock.t0
    if ctx.state.tracer is not None:  # the checkpoint as the trace shows it: this block (an async save: until held)
        ctx.state.tracer.span(phase, "checkpoint", began, time.perf_counter_ns() - began, step)


def record(ctx: RunContext, phase: str, index: int, clock: Clock, nbytes: int, files: int, *,
           step: int | None = None, seconds: float | None = None,
           file_times: tuple[tuple[str, float, float, int], ...] = (), held: float | None = None,
           stalled: float = 0.0, backend: Backend | None = None, ended: ProcessCost | None = None,
           metadata_seconds: float | None = None, device_copy_seconds: float | None = None,
           framework_cpu: float | None = 0.0, coordinator: Collection[str] | None = None) -> OpRecord:
    """This process's part of one operation. ``seconds`` replaces the clock's where the operation
    ends after its block (an async save, finished in the background); ``held``: how long it held
    training (async), ``stalled`` of which waiting for the previous background write (or a drain);
    ``backend``: the tier it used, if not the first (whose requests it made); ``ended``: this process's
    cost when the operation ended, where the record is made later (else now); ``metadata_seconds``: a load's
    time reading the metadata every rank reads first (DCP's ``.metadata``); ``device_copy_seconds``: a save's
    modelled copy of its tensors from the accelerators (a load's: to them), within its time; ``framework_cpu``: of
    its CPU time, the framework's own work it played (None: all its user time, where a real mode runs the framework
    itself); ``coordinator``: the names of the files rank 0 writes for all (DCP's ``.metadata``, and those a layout
    writes beside the steps: ``Plan.rank0_names``), which are not the ranks' files in ``data_seconds``, given where
    ``file_times`` holds every file the operation moved (None: a mode that keeps no file's times, whose whole time
    is taken for data)."""
    seconds = clock.seconds if seconds is None else seconds
    requests = tuple(ctx.take_requests(backend or ctx.backend))
    calls = ctx.take_latency(backend or ctx.backend)
    ctx.open_operations = max(ctx.open_operations - 1, 0)
    cost = (ended or ProcessCost.now()).since(clock.cost)
    return OpRecord(phase=phase, index=index, step=index if step is None else step, process=ctx.comm.rank,
                    start=clock.start, end=clock.start + seconds, duration=seconds, bytes=nbytes, files=files,
                    file_times=file_times, waited=clock.waited, requests=requests, held=held, stalled=stalled,
                    cost=cost, metadata_seconds=metadata_seconds, latency=calls,
                    device_copy_seconds=device_copy_seconds,
                    framework_cpu=cost.user if framework_cpu is None else framework_cpu, cpu_share=cpu_share(ctx),
                    data_seconds=data_span(file_times, coordinator, seconds))


def data_span(file_times: tuple[tuple[str, float, float, int], ...], coordinator: Collection[str] | None,
              seconds: float) -> float | None:
    """Seconds from the first byte of the ranks' files to the last, their syncs and evictions within (the files
    named in ``coordinator`` left out), at most the operation's ``seconds``: 0 where it moved none of them (a
    process whose ranks hold no file of a sample, or only the coordinator's); None where ``coordinator`` is None,
    for a mode that keeps no file's times."""
    if coordinator is None:
        return None
    spans = [(start, end) for name, start, end, _ in file_times if os.path.basename(name) not in coordinator]
    return min(seconds, max(e for _, e in spans) - min(s for s, _ in spans)) if spans else 0.0


def cpu_share(ctx: RunContext) -> float:
    """The cores this process could use: one (its own work holds one at a time), or its share of its host's where
    the host has fewer cores than processes (2 cores, 4 processes: half a core each)."""
    here = ctx.placement.names.count(ctx.placement.host)
    return min(1.0, len(os.sched_getaffinity(0)) / max(here, 1))


def say_done(ctx: RunContext, name: str, seconds: float, detail: str = "", copied: float = 0.0) -> None:
    """The console line of one operation, with the duration summary.json reports for it: the slowest
    process's, not rank 0's own (a collective: every process calls it); ``copied``: a load's modelled copy to the
    accelerators within it (the longest any process copied, as summary.json's ``device_copy_seconds_max``)."""
    everyone = ctx.comm.gather((seconds, copied))
    if everyone is not None:
        copy = max(c for _, c in everyone)
        log.info("%s: %.3f s%s%s", name, max(s for s, _ in everyone), f", {detail}" if detail else "",
                 f" (of which {copy:.3f} s copying to the accelerators)" if copy else "")


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


def world_sizes(ctx: RunContext, loads: int | None = None) -> dict[str, int]:
    """The ranks of each phase that ran, and of the job. A load may run at another world size than the save
    (``restore.world_size``): ``save_world_size`` and ``load_world_size`` say each. DLIO's ``num_accelerators``
    (and our ``world_size``) stay the job's: the save's where the run saves (its checkpoints are that job's, and
    MLPerf's rules count its processes), the load's where it only loads (then the job is the load's). ``loads``:
    the load's world size where the mode restores at another (None: the save's)."""
    ck, loads = ctx.ck, ctx.world_size if loads is None else loads
    out = {**({"save_world_size": ctx.world_size} if ck.num_checkpoints_write else {}),
           **({"load_world_size": loads} if ck.num_checkpoints_read else {})}
    job = loads if not ck.num_checkpoints_write and ck.num_checkpoints_read else ctx.world_size
    return {"num_accelerators": job, "world_size": job, **out}


def storage_facts(ctx: RunContext) -> tuple[dict[str, Any], str]:
    """``io.storage`` (the backend's own account) and ``io.checkpoint_folder`` (where the steps are). Why the
    root is corrected here: a checkpoint folder given as an absolute path on a local file system is not under
    ``storage_root`` (which defaults to the current folder), and the backend would name the folder the run
    started in; the real root is the one the checkpoint folder lies in."""
    storage = ctx.backend.describe()
    folder = ctx.backend.join(ctx.ck.checkpoint_folder)
    if BACKENDS[ctx.backend.name].local_folder:
        folder = os.path.normpath(os.path.abspath(folder))
        if os.path.isabs(ctx.ck.checkpoint_folder) and "root" in storage:
            storage["root"] = os.path.dirname(folder)
    return storage, folder


def write_results(ctx: RunContext, records: list[OpRecord], checkpoint_bytes: int, io: IO,
                  mine: Any = None, describe: Callable[[list[Any]], dict[str, Any]] | None = None,
                  loaded_bytes: int | None = None, goodput_asked: GoodputAsked | None = None,
                  load_world_size: int | None = None) -> Summary | None:
    """``summary.json`` and the per-process files for any mode: ``io`` is what the mode says of its
    I/O, to which what every mode says alike is added here (the storage, and what fsync and the read
    cache meant), ``mine`` this process's own facts, listed as ``per_process`` unless ``describe`` turns
    them into other summary fields (by name). ``checkpoint_bytes``: one checkpoint, all processes, as
    written; ``loaded_bytes``: what one load restores, the bytes its figures are taken over (None: what
    the loads read; see :func:`dlio_ckpt.results.summary.summary`); ``goodput_asked``: the goodput section's
    inputs, where checkpoint.mtbf_hours asks for one; ``load_world_size``: the loads' ranks, where they are not the
    save's (:func:`world_sizes`)."""
    def fields(per_process: list[Any]) -> dict[str, Any]:  # on rank 0, once every process's part is in
        storage, folder = storage_facts(ctx)
        io.storage_type, io.storage, io.checkpoint_folder = ctx.backend.name, storage, folder
        io.fsync, io.read_cache = fsync_meaning(ctx), read_cache(ctx)
        mine_all = [m for m, _ in per_process]
        outside = [q for _, out in per_process for q in out]
        # results.summary adds the checkpoints' own requests
        requests = RequestsSeen(outside_checkpoints=summarize(outside), note=REQUESTS_NOTE) \
            if ctx.counts_requests else None
        return {"mode": ctx.workload.mode, **world_sizes(ctx, load_world_size), "io": io, "requests": requests,
                **(describe(mine_all) if describe else {"per_process": mine_all})}

    ctx.outside_requests += ctx.take_requests()
    outside = merged([*ctx.outside_latency, ctx.take_latency()]) if ctx.times_calls else None
    return finish_run(ctx.comm, ctx.run_dir, ctx.meta, ctx.started, records, checkpoint_bytes,
                      (mine if mine is not None else {}, ctx.outside_requests), fields, loaded_bytes, goodput_asked,
                      outside)


def finished_line(result: Summary, run_dir: str) -> str:
    """The run's last console line: the checkpoint's size and a figure for each phase that ran, nothing for
    a phase that did not (a read-only run once said ``save 0.000 GiB/s mean``). A load is said by its
    duration first, the time a restart waits, then the checkpoint's bytes over it (DLIO's figure)."""
    m = result.metric
    said = [f"checkpoint {m.checkpoint_size_GiB:.3f} GiB"]
    if m.save_checkpoint_io_mean_GiB_per_second is not None:
        said.append(f"save {m.save_checkpoint_io_mean_GiB_per_second:.3f} GiB/s mean")
    if m.load_checkpoint_io_mean_GiB_per_second is not None:
        said.append(f"load {m.load_checkpoint_duration_mean_seconds:.3f} s mean "
                    f"({m.load_checkpoint_io_mean_GiB_per_second:.3f} GiB/s of the checkpoint)")
    line = f"done: {'; '.join(said)}; results in {run_dir}"
    bound = [(phase, c.cpu) for phase in ("save", "load") for c in result.checkpoints.phase(phase)
             if c.cpu is not None and c.cpu.bound] if result.checkpoints is not None else []
    if bound:
        phase, cpu = max(bound, key=lambda b: b[1].busiest_process_busy)
        emulated = result.mode == "emulated"
        whose = (f"{cpu_said(cpu.own_seconds)} s our own work, {cpu_said(cpu.framework_seconds)} s the framework's "
                 "we play" if emulated else
                 ", ".join(f"{cpu_said(seconds)} s {what}" for seconds, what in
                           ((cpu.framework_seconds, "the framework's own, run for real"),
                            (cpu.own_seconds, "our own work")) if seconds))
        line += (f"\nCPU-bound: {' and '.join(dict.fromkeys(p for p, _ in bound))} timed the processes' CPU, not the "
                 f"storage: a process was busy {cpu.busiest_process_busy:.0%} of its {phase} "
                 f"({cpu_said(cpu.seconds)} CPU s: {whose}{', ' if whose else ''}{cpu_said(cpu.system_seconds)} s "
                 "in the kernel)"
                 + ("; fewer ranks a process (--world-size), more processes, or io_pattern=stream measure the storage"
                    if emulated else ""))
    if result.io is not None and (scaled := result.io.scaled) is not None:
        full, ahead = scaled.full_size, scaled.projected_full_size
        times = "; ".join(f"{phase} {seconds:.1f} s" for phase, seconds in
                          (("save", ahead.save_seconds), ("load", ahead.load_seconds)) if seconds is not None) \
            if ahead is not None else ""
        here, sample = scaled.this_run, scaled.miniature == "sample"
        line += (f"\nscaled: this run wrote 1/{1 / scaled.bytes_ratio:,.0f} of the job's "
                 f"{full.checkpoint_size_GiB:,.2f} GiB per checkpoint ("
                 + (f"{here.items:,} of its {full.items:,} items whole, on {here.writing_ranks} of "
                    f"{full.writing_ranks} writing ranks; " if sample else "")
                 + f"{here.headers_share:.0%} of it the format's headers, {full.headers_share:.1%} at full size)"
                 + (f"; projected at full size, not measured (the time moving the ranks' files x bytes): {times}"
                    if times else "")
                 + (f" (CPU-bound {', '.join(ahead.cpu_bound)}: its projection scales the emulator's work)"
                    if ahead is not None and ahead.cpu_bound else "")
                 + (too_short(ahead) if ahead is not None else "")
                 + ("; it assumes the storage's rate at these bytes holds at the full size's" if times and sample
                    else "; it scales the time per file, item and call too: checkpoint.miniature=sample keeps items "
                    "whole, a sweep over checkpoint.scale=a,b projects that part apart" if times else "")
                 + uneven(here.busiest_process_share, full.busiest_process_share, result.num_processes))
    return line


def cpu_said(seconds: float) -> str:
    """CPU seconds for the console: three significant figures below 100 (a small run's 0.045), whole seconds
    above (never 1.23e+03)."""
    return f"{seconds:.3g}" if seconds < 100 else f"{seconds:,.0f}"


def too_short(ahead: Projection) -> str:
    """Where a phase moved the ranks' files in under :data:`SHORT_DATA_SECONDS` (``too_short``): said beside the
    projection, with how many times the bytes would move them for that long (the shortest phase that moved any)."""
    if not ahead.too_short:
        return ""
    moved = ", ".join(f"{phase} {ahead.data_seconds[phase]:.2f} s" for phase in ahead.too_short)
    shortest = min((ahead.data_seconds[phase] for phase in ahead.too_short if ahead.data_seconds[phase] > 0),
                   default=0.0)
    larger = (f"; about {ceil(SHORT_DATA_SECONDS / shortest)} times the bytes would move them for "
              f"{SHORT_DATA_SECONDS:g} s" if shortest > 0 else "")
    return (f"; too short to measure the storage (the ranks' files moved in: {moved}): caches and the first "
            f"requests set such times{larger}")


def uneven(here: float | None, full: float | None, processes: int | None) -> str:
    """Where one process holds a larger share of a scaled run's bytes than at full size (a sample of a few large
    items), by more than a fifth: said beside the projection, since the slowest process sets the time."""
    if here is None or full is None or here <= 1.2 * full:
        return ""
    return (f"; one of the {processes} processes holds {here:.0%} of these bytes ({full:.0%} at full size), and "
            "the slowest sets the time: a larger scale spreads them")


REQUESTS_NOTE = ("per kind: count, bytes, latency percentiles of requests seen (ms), requests per second over "
                 "the checkpoint's duration, failures by cause; 'derived': counted by the client's rule "
                 "(s3torchconnector's CRT hides its part requests and retries), no latency; 'call: ...': our call "
                 "into the client, not an HTTP request; checkpoints[] hold each checkpoint's requests, "
                 "outside_checkpoints the storage checks, manifests and clean-up")


class Mode(Protocol):
    """What :mod:`dlio_ckpt.run.launch` needs of a mode to run the sequence every mode shares (checks,
    storage prepared, the checkpoint folder replaced and recorded, the run, its result files)."""

    FSYNC: str  # what checkpoint.fsync makes this mode do, said plainly (summary.json io.fsync)

    def preflight(self, ctx: RunContext) -> None:
        """Checks that need no storage; what it works out for the rest of its run goes in ``ctx.prepared`` (the
        emulated mode: its plan and restore)."""

    def writes(self, ctx: RunContext) -> Writes:
        """What it may write in the checkpoint folder (the run record)."""

    def needed_bytes(self, ctx: RunContext) -> int:
        """Bytes of every checkpoint it writes, for the room check (asked on rank 0 only)."""

    def check_reads(self, ctx: RunContext) -> None:
        """Checks that need the storage checked first (a read-only run's steps)."""

    def run(self, ctx: RunContext) -> Summary | None:
        """The run, ending with its result files (``context.write_results``); the summary on rank 0."""
