"""Per-operation records → DLIO's ``summary.json`` and ``{rank}_per_epoch_stats.json``, plus our
own unambiguous fields.

Why our own fields too: DLIO's ``GB`` keys are GiB, and its duration is rank 0's alone. We keep its
keys and values for comparability, take each checkpoint's duration from the slowest process (as
MLPerf Storage's rules define it), and add bytes, GiB and GB named as such. JSON is strict: a
figure that does not exist is left out, never written as NaN.

A load's figure is DLIO's: the checkpoint's bytes over the load's duration, not the bytes its ranks read.
Why: a restore that reads more (Megatron's replicas, DCP's resharding reading whole stored chunks) would
otherwise look faster the more it reads; what it read stays beside (``bytes``, ``read_GiB_per_second``,
and ``io.restore``), and the time a restart waits is the duration.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dlio_ckpt.cluster.comm import Comm
from dlio_ckpt.cluster.host import host_memory, hostname, peak_rss
from dlio_ckpt.inflight import temporary
from dlio_ckpt.io.latency import Histograms, bucket_bounds, merged
from dlio_ckpt.io.requests import Request, summarize
from dlio_ckpt.results import goodput, latency
from dlio_ckpt.results.schema import (
    FSYNC_TIMES,
    SECOND_PASS,
    SHORT_DATA_SECONDS,
    AsyncFigures,
    CheckpointFigures,
    Checkpoints,
    Coordination,
    CpuFigures,
    Goodput,
    HostShare,
    MemoryFigures,
    Metric,
    Projection,
    Scaled,
    Section,
    Summary,
    TierFigures,
    written,
)

GIB = 1 << 30
GB = 10**9


@dataclass(frozen=True)
class ProcessCost:
    """What an operation cost this process's host: CPU time of all its threads (user and system)
    and minor page faults (each a page touched for the first time). Why: the bytes a client copies,
    verifies and buffers compete with the storage for the host's cores, and on a machine where a
    fresh page is expensive (a VM that hands freed memory back to its host) the faults alone can
    decide a read's speed; the same run's figures then say whether storage or client set the pace."""

    user: float = 0.0
    system: float = 0.0
    minor_faults: int = 0

    @staticmethod
    def now() -> ProcessCost:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return ProcessCost(usage.ru_utime, usage.ru_stime, usage.ru_minflt)

    def since(self, earlier: ProcessCost) -> ProcessCost:
        return ProcessCost(self.user - earlier.user, self.system - earlier.system,
                           self.minor_faults - earlier.minor_faults)


@dataclass(frozen=True, kw_only=True)
class OpRecord:
    """One process's part of one checkpoint save or load. Built by keyword only: eight of its fields are
    plain numbers (five ints, three floats), and a positional call that swapped two (start and end, bytes
    and files) would write wrong figures that still look right."""

    phase: str  # "save", "load" or "drain_tier{k}"
    index: int  # 1-based position within its phase: save_ckpt{index}
    step: int  # the step folder it wrote or read
    process: int
    start: float  # wall clock, seconds since the epoch
    end: float
    duration: float  # monotonic clock, from the common barrier to this process's last byte
    bytes: int
    files: int
    # (file name, start, end, bytes) of each file, wall clock; 0 bytes: its fsync or cache eviction
    file_times: tuple[tuple[str, float, float, int], ...] = ()
    waited: float = 0.0  # seconds in the barrier before it: waiting for the other processes
    requests: tuple[Request, ...] = ()  # object-store requests of this process during it
    held: float | None = None  # async saves: seconds training was held (staging + waiting)
    stalled: float = 0.0  # async saves: of which waiting for the previous checkpoint's background write
    cost: ProcessCost = ProcessCost()  # this process (all threads, drains included) from start to end
    metadata_seconds: float | None = None  # loads: reading the metadata every rank reads before its data
    # of its duration, from its first byte of the ranks' files to its last (their syncs and evictions within): what
    # a scaled run's projection scales, the rest (barriers, the coordinator's files, metadata) kept; 0: it moved none
    # of the ranks' files; None: not worked out (the real modes keep no file's times: all of it; a drain's)
    data_seconds: float | None = None
    device_copy_seconds: float | None = None  # the modelled copy of its tensors from the accelerators (loads: to)
    framework_cpu: float = 0.0  # of its CPU time, the framework's own work it played (torch.save's CRC-32...)
    cpu_share: float = 1.0  # the cores this process could use: one, or its share of its host's where they are fewer
    latency: Histograms = field(default_factory=dict)  # this process's storage calls during it, by kind


def iso(t: float) -> str:
    return datetime.fromtimestamp(t).isoformat()


@dataclass(frozen=True)
class GoodputAsked:
    """``checkpoint.mtbf_hours`` asked for goodput: the figures summary.json's ``goodput`` is worked out from,
    with the tiers a restart reads (a step counts as durable once it is on all of them)."""

    mtbf_hours: float
    interval_seconds: float
    tiers: tuple[int, ...] = (0,)


def per_epoch_stats(records: list[OpRecord], run_start: float, run_end: float, run_id: str | None = None,
                    ) -> dict[str, Any]:
    """DLIO's per-rank file: epoch "1" holding save_ckpt{i} / load_ckpt{i}. Duration and throughput
    here are this process's own (its bytes over its time); summary.json has the job's. ``run_id``
    (also in summary.json) lets a reader tell the files of one run from another's. Each file's data is
    in ``file_times`` once, with its bytes; its fsync (or a load's cache eviction first) in ``fsync_times``
    (``evict_times``): the engine records those as 0-byte passes, which listed every file twice, once
    with no bytes."""
    epoch: dict[str, Any] = {"start": iso(run_start), **({"run_id": run_id} if run_id else {})}
    for r in records:
        epoch[f"{r.phase}_ckpt{r.index}"] = {
            "start": iso(r.start), "end": iso(r.end), "duration": r.duration,
            "throughput": r.bytes / GIB / r.duration if r.duration > 0 else 0.0,
            "bytes": r.bytes, "files": r.files, "step": r.step, "barrier_wait": r.waited,
            "cpu_user_seconds": r.cost.user, "cpu_system_seconds": r.cost.system,
            "minor_page_faults": r.cost.minor_faults,
        }
        if r.requests:
            epoch[f"{r.phase}_ckpt{r.index}"]["requests"] = summarize(list(r.requests), r.duration)
        if r.held is not None:
            epoch[f"{r.phase}_ckpt{r.index}"].update(held=r.held, stalled=r.stalled)
        if r.data_seconds is not None:  # what a scaled run's projection scales (io.scaled.projected_full_size)
            epoch[f"{r.phase}_ckpt{r.index}"]["data_seconds"] = r.data_seconds
        if r.file_times:  # seconds from this operation's start: the report's timeline
            data = [(name, s, e, n) for name, s, e, n in r.file_times if n]
            passes = [(name, s, e) for name, s, e, n in r.file_times if not n]
            entry = epoch[f"{r.phase}_ckpt{r.index}"]
            entry["file_times"] = [[name, round(s - r.start, 6), round(e - r.start, 6), n] for name, s, e, n in data]
            if passes:
                entry[SECOND_PASS.get(r.phase, FSYNC_TIMES)] = [
                    [name, round(s - r.start, 6), round(e - r.start, 6)] for name, s, e in passes]
    epoch["end"] = iso(run_end)
    return {"1": epoch}


def _rate(nbytes: int, unit: int, seconds: float) -> float:
    return nbytes / unit / seconds if seconds > 0 else 0.0


def checkpoint_figures(records: list[OpRecord], phase: str, checkpoint_bytes: int | None = None,
                       ) -> list[CheckpointFigures]:
    """One entry per checkpoint: the slowest process's duration, all processes' bytes. With
    ``checkpoint_bytes`` (DLIO's checkpoint: what ``checkpoint_size_GB`` counts, or a load's part of it) the
    throughput is those over the duration, DLIO's figure for a save and a load alike, and a load's
    ``read_GiB_per_second`` what the processes read (``bytes``) over it: a load that reads more is not faster
    for it."""
    by_index: dict[int, list[OpRecord]] = {}
    for r in records:
        if r.phase == phase:
            by_index.setdefault(r.index, []).append(r)
    out = []
    for index in sorted(by_index):
        group = by_index[index]
        slowest = max(group, key=lambda r: r.duration)
        total = sum(r.bytes for r in group)
        duration = slowest.duration
        moved = total if checkpoint_bytes is None else checkpoint_bytes
        requests = [q for r in group for q in r.requests]
        # a load: the metadata every rank read first, and how uneven the processes were
        metadata = [r.metadata_seconds for r in group if r.metadata_seconds is not None]
        drain_waits = [r.stalled for r in group] if group[0].held is None and any(r.stalled for r in group) else []
        copies = [r.device_copy_seconds for r in group if r.device_copy_seconds is not None]
        out.append(CheckpointFigures(
            index=index, step=group[0].step, bytes=total, files=sum(r.files for r in group),
            checkpoint_bytes=checkpoint_bytes, duration_seconds=duration, slowest_process=slowest.process,
            fastest_process_duration_seconds=min(r.duration for r in group),
            start=iso(min(r.start for r in group)), end=iso(max(r.end for r in group)),
            throughput_GiB_per_second=_rate(moved, GIB, duration), throughput_GB_per_second=_rate(moved, GB, duration),
            read_GiB_per_second=_rate(total, GIB, duration) if checkpoint_bytes is not None and phase == "load"
            else None,
            coordination=coordination(group), cpu=cpu_figures(group, total),
            requests=summarize(requests, duration) if requests else None,
            metadata_read_seconds_max=max(metadata) if metadata else None,
            metadata_read_seconds_mean=statistics.fmean(metadata) if metadata else None,
            duration_imbalance=(duration / statistics.fmean(r.duration for r in group) if duration else 1.0)
            if metadata else None,
            drain_wait_seconds_max=max(drain_waits) if drain_waits else None,  # a sync save that waited for a drain
            device_copy_seconds_max=max(copies) if copies else None,
            async_=async_figures(group, duration) if group[0].held is not None else None,
            latency=latency.operation_latency(operation_calls(group), duration, slowest.process),
            stonewall=latency.stonewall(group)))
    return out


def operation_calls(group: list[OpRecord]) -> dict[int, Histograms]:
    """Each process's timed calls during one operation: its storage calls and its object-store requests."""
    return {r.process: merged([r.latency, latency.request_histograms(r.requests)]) for r in group}


def async_figures(group: list[OpRecord], duration: float) -> AsyncFigures:
    """An asynchronous save's hold on training, over its processes, and when it was durable."""
    held, stalled = [r.held or 0.0 for r in group], [r.stalled for r in group]
    return AsyncFigures(held_seconds_max=max(held), held_seconds_mean=statistics.fmean(held),
                        stalled_seconds_max=max(stalled), time_to_durable_seconds=duration,
                        overlapped=max(stalled) < 0.001)


CPU_BOUND = 0.9  # a process this busy (CPU seconds over its duration, of the cores it could use) set its own time


def cpu_figures(group: list[OpRecord], nbytes: int) -> CpuFigures:
    """The processes' CPU time and first-touched pages during one operation, summed, and per GiB
    moved (see :class:`ProcessCost`); how busy the busiest process was, and whether that made the operation
    CPU-bound: a process busy on CPU for :data:`CPU_BOUND` of its time (of one core, or of its share of its host's
    cores where the host has fewer than processes: a Python process's own work runs on one core at a time) waited
    on the storage for little of it, so the operation's time is its CPU's, not the storage's."""
    seconds = sum(r.cost.user + r.cost.system for r in group)
    busy = max((r.cost.user + r.cost.system) / (r.duration * r.cpu_share) if r.duration > 0 else 0.0 for r in group)
    framework = sum(r.framework_cpu for r in group)
    return CpuFigures(seconds=seconds, system_seconds=sum(r.cost.system for r in group),
                      seconds_per_GiB=seconds / (nbytes / GIB) if nbytes else 0.0,
                      minor_page_faults=sum(r.cost.minor_faults for r in group),
                      framework_seconds=framework,
                      own_seconds=max(sum(r.cost.user for r in group) - framework, 0.0),
                      busiest_process_busy=busy, bound=busy >= CPU_BOUND)


def tier_figures(records: list[OpRecord], saves: list[CheckpointFigures]) -> dict[int, list[float]]:
    """Tiered runs: each save's ``tiers`` (per tier: seconds from the checkpoint's start until every
    process's files were on it, bytes there); returns each lower tier's times to durable."""
    starts: dict[int, float] = {}
    drains: dict[tuple[int, int], list[OpRecord]] = {}
    for r in records:
        if r.phase == "save":
            starts[r.step] = min(starts.get(r.step, r.start), r.start)
        elif r.phase.startswith("drain_tier"):
            drains.setdefault((int(r.phase.removeprefix("drain_tier")), r.step), []).append(r)
    durable: dict[int, list[float]] = {}
    for c in saves if drains else []:
        tiers = [TierFigures(tier=0, durable_seconds=c.duration_seconds, bytes=c.bytes)]
        for (k, step), group in sorted(drains.items()):
            if step == c.step:
                seconds = max(r.end for r in group) - starts[step]
                slowest = max(r.duration for r in group)
                nbytes = sum(r.bytes for r in group)
                tiers.append(TierFigures(tier=k, durable_seconds=seconds, bytes=nbytes, drain_seconds=slowest,
                                         drain_GiB_per_second=_rate(nbytes, GIB, slowest)))
                durable.setdefault(k, []).append(seconds)
        c.tiers = tiers
    return durable


def coordination(group: list[OpRecord]) -> Coordination:
    """How much of a checkpoint is skew rather than storage: the spread of the processes' starts
    (after the common barrier) and ends, the time they waited in that barrier for each other, and
    how far the slowest process's duration lies above the median one's."""
    waits = [r.waited for r in group]
    return Coordination(start_spread_seconds=max(r.start for r in group) - min(r.start for r in group),
                        end_spread_seconds=max(r.end for r in group) - min(r.end for r in group),
                        barrier_wait_seconds_max=max(waits), barrier_wait_seconds_mean=statistics.fmean(waits),
                        skew_seconds=max(r.duration for r in group) - statistics.median(r.duration for r in group))


def phase_means(phase: str, items: list[CheckpointFigures]) -> dict[str, float]:
    """``metric``'s figures of one phase that ran, by name: DLIO's four (its ``GB`` is GiB) and ours, the
    first checkpoint's duration and the later ones' mean (the steady state) among them."""
    gib, durations = [c.throughput_GiB_per_second for c in items], [c.duration_seconds for c in items]
    mean, stdev = statistics.fmean(gib), statistics.pstdev(gib)
    return {f"{phase}_checkpoint_io_mean_GB_per_second": mean,  # DLIO's name; the value is GiB/s
            f"{phase}_checkpoint_io_stdev_GB_per_second": stdev,
            f"{phase}_checkpoint_duration_mean_seconds": statistics.fmean(durations),
            f"{phase}_checkpoint_duration_stdev_seconds": statistics.pstdev(durations),
            f"{phase}_checkpoint_io_mean_GiB_per_second": mean,
            f"{phase}_checkpoint_io_mean_GB_decimal_per_second": mean * GIB / GB,
            f"{phase}_checkpoint_io_median_GiB_per_second": statistics.median(gib),
            # a job's first checkpoint meets what later ones do not (memory touched for the first time, a cold
            # page cache, files created where none were): said apart from the steady state a job lives in
            f"{phase}_checkpoint_first_duration_seconds": durations[0],
            **({f"{phase}_checkpoint_steady_duration_mean_seconds": statistics.fmean(durations[1:])}
               if len(durations) > 1 else {})}


def metric_figures(checkpoint_bytes: int, saves: list[CheckpointFigures], loads: list[CheckpointFigures],
                   durable: dict[int, list[float]], records: list[OpRecord] | None = None) -> Metric:
    """``metric``: the checkpoint's size (DLIO's ``checkpoint_size_GB`` in GiB, as DLIO has it), each phase
    that ran (:func:`phase_means`), what async saves cost training (a figure ``metrics diff`` can gate on) and
    each lower tier's mean time to durable."""
    held = [c.async_ for c in saves if c.async_ is not None]
    return Metric(
        checkpoint_size_GB=checkpoint_bytes / GIB, checkpoint_size_bytes=checkpoint_bytes,
        checkpoint_size_GiB=checkpoint_bytes / GIB, checkpoint_size_GB_decimal=checkpoint_bytes / GB,
        **(phase_means("save", saves) if saves else {}), **(phase_means("load", loads) if loads else {}),
        save_checkpoint_held_mean_seconds=statistics.fmean(h.held_seconds_max for h in held) if held else None,
        save_checkpoint_time_to_durable_mean_seconds=statistics.fmean(h.time_to_durable_seconds for h in held)
        if held else None,
        **{f"save_checkpoint_time_to_durable_tier{k}_mean_seconds": statistics.fmean(seconds)
           for k, seconds in durable.items()},
        **latency_metrics(records or [], saves, loads))


def latency_metrics(records: list[OpRecord], saves: list[CheckpointFigures], loads: list[CheckpointFigures],
                    ) -> dict[str, float]:
    """``metric``'s latency headlines, over every checkpoint of a phase (a figure ``diff`` and repeats judge):
    the p99 of the saves' writes, the loads' reads and the saves' metadata calls; the mean stonewall rate."""
    out: dict[str, float | None] = {
        "save_checkpoint_write_p99_ms": latency.p99_of([r.latency for r in records if r.phase == "save"], "write"),
        "load_checkpoint_read_p99_ms": latency.p99_of([r.latency for r in records if r.phase == "load"], "read"),
        "save_checkpoint_metadata_p99_ms": latency.p99_of([r.latency for r in records if r.phase == "save"],
                                                          "metadata")}
    for phase, items in (("save", saves), ("load", loads)):
        walls = [c.stonewall.GiB_per_second for c in items if c.stonewall is not None]
        out[f"{phase}_checkpoint_stonewall_mean_GiB_per_second"] = statistics.fmean(walls) if walls else None
    return {k: v for k, v in out.items() if v is not None}


def goodput_figures(asked: GoodputAsked, saves: list[CheckpointFigures], loads: list[CheckpointFigures],
                    durable: dict[int, list[float]]) -> Goodput:
    """``goodput`` from the measured times: training held per checkpoint (an async save's hold, else the save),
    durable where a restart reads from (the read tier, and where lost hosts read theirs, the later of them)."""
    held = [c.async_.held_seconds_max if c.async_ is not None else c.duration_seconds for c in saves]
    first = statistics.fmean(c.duration_seconds for c in saves)  # tier 0: durable when the save ends
    at = max(statistics.fmean(durable[k]) if k in durable else first for k in asked.tiers)
    load = statistics.fmean(c.duration_seconds for c in loads) if loads else 0.0
    return Goodput(**goodput.figures(asked.interval_seconds, statistics.fmean(held), at, load, asked.mtbf_hours),
                   durable_on_tiers=list(asked.tiers))


def summary(records: list[OpRecord], *, checkpoint_bytes: int, meta: dict[str, Any],
            loaded_bytes: int | None = None, goodput_asked: GoodputAsked | None = None,
            outside_latency: list[Histograms] | None = None) -> Summary:
    """``summary.json`` of ``records``: ``meta`` is every other field of :class:`Summary` by name (the run's
    facts, the mode's ``io``...), to which the checkpoints' figures and ``metric`` are added, and where asked,
    ``goodput``, the requests during checkpoints and a scaled run's projection. ``checkpoint_bytes``: DLIO's
    checkpoint (``checkpoint_size_GB``), over which the save figures are taken; ``loaded_bytes``: its part one load
    restores (the whole, or the model alone), over which the load figures are; None: the bytes the loads read
    (modes whose loads read the checkpoint whole, once). ``outside_latency``:
    each process's storage calls outside the records (by process), which with the records' make ``latency``."""
    # DLIO's keys over one count: checkpoint_size_GB, and each save's and load's figure (DLIO's StatsCounter takes
    # both throughputs as its checkpoint_size over the duration); what the processes moved stays in ``bytes``
    saves = checkpoint_figures(records, "save", checkpoint_bytes)
    loads = checkpoint_figures(records, "load", loaded_bytes)
    durable = tier_figures(records, saves)
    drains = {f"drain_tier{k}": checkpoint_figures(records, f"drain_tier{k}") for k in durable}
    result = Summary(**meta, metric=metric_figures(checkpoint_bytes, saves, loads, durable, records),
                     checkpoints=Checkpoints(save=saves, load=loads, **drains))
    calls: dict[int, list[Histograms]] = {}
    for r in records:
        calls.setdefault(r.process, []).append(operation_calls([r])[r.process])
    result.latency = latency.run_latency({p: merged(hs) for p, hs in calls.items()}, dict(enumerate(outside_latency))) \
        if outside_latency is not None else None
    if result.requests is not None:
        result.requests.during_checkpoints = summarize([q for r in records for q in r.requests])
    if goodput_asked is not None and saves:
        result.goodput = goodput_figures(goodput_asked, saves, loads, durable)
    if result.io is not None and result.io.scaled is not None:
        result.io.scaled.projected_full_size = projected(result.io.scaled, records,
                                                         cpu_bound_phases(result.checkpoints))
    return result


def cpu_bound_phases(checkpoints: Checkpoints | None) -> list[str]:
    """The phases (save, load) whose checkpoints were CPU-bound, any of them (:func:`cpu_figures`)."""
    if checkpoints is None:
        return []
    return [phase for phase in ("save", "load")
            if any(c.cpu is not None and c.cpu.bound for c in checkpoints.phase(phase))]


PROJECTION_BASIS = {
    "shrink": "a projection, not a measurement: each process's time moving the ranks' files (first byte to last, "
              "syncs and evictions within) x the full size's bytes per checkpoint / this run's (a load's: what it "
              "reads), its barriers, metadata and coordinator's files as measured, the slowest process's sum; it "
              "assumes the files' time grows with bytes at the bandwidth this run reached, so it scales the time per "
              "item and call too and overstates where that is large (a CPU-bound run): checkpoint.miniature=sample "
              "keeps the items whole, a sweep over checkpoint.scale (two or more values) projects the two parts apart; "
              "no more processes than this run's",
    "sample": "a projection, not a measurement: each process's time moving the ranks' files (first byte to last, "
              "syncs and evictions within) x the full size's bytes per checkpoint / this run's (a load's: what it "
              "reads), from a sample of the items kept whole (checkpoint.miniature=sample), so each item's time keeps "
              "its share of the bytes'; its barriers, metadata and coordinator's files as measured, the slowest "
              "process's sum; it assumes the storage's rate at this run's bytes and concurrency (fewer writing ranks, "
              "the same processes) holds at the full size's",
}


def projected(scaled: Scaled, records: list[OpRecord], cpu_bound: list[str]) -> Projection:
    """A scaled run's times projected to the full size (``io.scaled.projected_full_size``), labelled as such, and
    the phases whose times the processes' CPU set (``cpu_bound``): their projection scales the emulator's work.
    Each checkpoint's is its slowest process's time with the part moving the ranks' files (``data_seconds``) over
    the bytes ratio (a load's: what it reads) and the rest as measured: a barrier, the metadata every rank reads
    and the coordinator's files, taken to the full size by the ratio, would weigh on a small sample's load as if
    they grew with its bytes. The mean over checkpoints; none where a ratio is 0.

    ``data_seconds`` is, by phase, the mean over checkpoints of that process's (the one whose projected time is
    longest) time moving the ranks' files; a phase where it is under :data:`SHORT_DATA_SECONDS` is ``too_short``:
    a storage's caches, a thread's start and the first request's latency set so short a time, and the ratio (up to
    1/scale) multiplies their noise. Measured: ``bench/results/2026-12-07-miniature.md``."""
    load_ratio = scaled.bytes_ratio if scaled.load_bytes_ratio is None else scaled.load_bytes_ratio
    moved: dict[str, float] = {}

    def mean(phase: str, ratio: float) -> float | None:
        if not ratio:
            return None
        slowest: dict[int, tuple[float, float]] = {}  # checkpoint: (projected, its time moving the ranks' files)
        for r in records:
            if r.phase == phase:
                moving = r.duration if r.data_seconds is None else r.data_seconds
                here = (r.duration - moving + moving / ratio, moving)
                slowest[r.index] = max(slowest.get(r.index, here), here)
        if not slowest:
            return None
        moved[phase] = statistics.fmean(m for _, m in slowest.values())
        return statistics.fmean(p for p, _ in slowest.values())

    save, load = mean("save", scaled.bytes_ratio), mean("load", load_ratio)
    return Projection(save_seconds=save, load_seconds=load, basis=PROJECTION_BASIS[scaled.miniature],
                      cpu_bound=cpu_bound, data_seconds=moved,
                      too_short=[phase for phase, seconds in moved.items() if seconds < SHORT_DATA_SECONDS])


def hosts_summary(per_process: list[tuple[str, int]]) -> dict[str, Any]:
    """From each process's (host, memory): DLIO's ``host_memory_GB`` list (GiB, one per host) and
    ours, ``hosts``, naming hosts and their process counts (MLPerf's page-cache rule needs both)."""
    processes: dict[str, int] = {}
    memory: dict[str, int] = {}
    for host, nbytes in per_process:
        processes[host] = processes.get(host, 0) + 1
        memory.setdefault(host, nbytes)
    return {"host_memory_GB": [memory[h] / GIB for h in memory],
            "hosts": {h: HostShare(processes=processes[h], memory_bytes=memory[h]) for h in memory}}


def dumps(obj: Any) -> str:
    """Strict JSON: NaN and infinities are errors, not tokens other parsers reject. A model is written as
    ``summary.json`` holds it (:func:`dlio_ckpt.results.schema.written`)."""
    return json.dumps(written(obj) if isinstance(obj, Section) else obj, indent=2, allow_nan=False) + "\n"


def finish_run(comm: Comm, run_dir: str, meta: dict[str, Any], run_start: float, records: list[OpRecord],
               checkpoint_bytes: int, mine: Any, describe: Callable[[list[Any]], dict[str, Any]],
               loaded_bytes: int | None = None, goodput_asked: GoodputAsked | None = None,
               outside_latency: Histograms | None = None) -> Summary | None:
    """Gather every process's records and facts; rank 0 writes ``{process}_per_epoch_stats.json`` and
    ``summary.json`` and returns the summary (None elsewhere). ``meta``: the launch's fields of
    :class:`Summary` by name (workload, run_id, command...); ``mine`` is this process's own facts
    (retries, set-up time...); ``describe`` turns every process's into the mode's summary fields, by name.
    ``checkpoint_bytes``: one checkpoint, all processes; ``loaded_bytes``: what one load restores (see
    :func:`summary`); ``outside_latency``: this process's storage calls outside its records (None: not timed).
    Every mode ends here, so their result files agree."""
    gathered = comm.gather((records, hostname(), host_memory(), peak_rss(), mine, outside_latency))
    if gathered is None:
        return None
    run_end = time.time()
    for proc, recs in enumerate(g[0] for g in gathered):
        write_result(f"{run_dir}/{proc}_per_epoch_stats.json", dumps(per_epoch_stats(recs, run_start, run_end,
                                                                                    meta.get("run_id"))))
    rss = [g[3] for g in gathered]
    ran = dict(status="ok", num_processes=comm.size, num_hosts=len({g[1] for g in gathered}), hostname=hostname(),
               start=iso(run_start), end=iso(run_end), invocation_end_time=iso(time.time()),
               **hosts_summary([(g[1], g[2]) for g in gathered]),
               memory=MemoryFigures(peak_rss_bytes_max=max(rss), peak_rss_bytes_per_process=rss))
    # one dict of fields, later ones winning: the mode's world_size (a read-only run's, at its own world size)
    # replaces the launch's
    result = summary([r for g in gathered for r in g[0]], checkpoint_bytes=checkpoint_bytes,
                     meta={**meta, **ran, **describe([g[4] for g in gathered])}, loaded_bytes=loaded_bytes,
                     goodput_asked=goodput_asked,
                     outside_latency=[g[5] or {} for g in gathered] if any(g[5] is not None for g in gathered)
                     else None)
    write_result(f"{run_dir}/summary.json", dumps(result))
    if result.latency is not None:
        write_result(f"{run_dir}/{LATENCY_FILE}", dumps(latency_histograms([r for g in gathered for r in g[0]],
                                                                           [g[5] or {} for g in gathered])))
    return result


LATENCY_FILE = "latency_histograms.json"


def latency_histograms(records: list[OpRecord], outside: list[Histograms]) -> dict[str, Any]:
    """``latency_histograms.json``: by phase (save, load, drain..., outside: the calls outside them), each kind's
    calls of every process and checkpoint merged, as ``[[upper bound ns, count], ...]`` of the non-empty buckets:
    what ``report`` draws its distributions from (summary.json has their percentiles)."""
    phases: dict[str, list[Histograms]] = {"outside": outside}
    for r in records:
        phases.setdefault(r.phase, []).append(operation_calls([r])[r.process])
    out: dict[str, Any] = {"note": "per phase and kind: [[bucket upper bound (ns), calls], ...], every process "
                                   "merged; each bucket is at most 1/128 of its value wide", "phases": {}}
    for phase, parts in phases.items():
        every = merged(parts)
        out["phases"][phase] = {kind: {"count": h.count, "min_ns": h.min_ns, "max_ns": h.max_ns,
                                       "buckets": [[bucket_bounds(i)[1], n] for i, n in sorted(h.counts.items())]}
                                for kind, h in sorted(every.items())}
    return out


def write_result(path: str, text: str) -> None:
    """Atomically: a result file is whole or absent, never half-written by a killed process."""
    with temporary(f"{path}.tmp{os.getpid()}") as tmp:
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
