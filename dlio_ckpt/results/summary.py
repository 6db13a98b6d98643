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
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dlio_ckpt.cluster.comm import Comm
from dlio_ckpt.cluster.host import host_memory, hostname, peak_rss
from dlio_ckpt.inflight import temporary
from dlio_ckpt.io.requests import Request, summarize
from dlio_ckpt.results import goodput

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


@dataclass(frozen=True)
class OpRecord:
    """One process's part of one checkpoint save or load."""

    phase: str  # "save" or "load"
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


def iso(t: float) -> str:
    return datetime.fromtimestamp(t).isoformat()


SYNC_TIMES = {"load": "evict_times"}  # a phase's second pass over its files: fsync (saves, drains), eviction (loads)


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
        if r.file_times:  # seconds from this operation's start: the report's timeline
            data = [(name, s, e, n) for name, s, e, n in r.file_times if n]
            passes = [(name, s, e) for name, s, e, n in r.file_times if not n]
            entry = epoch[f"{r.phase}_ckpt{r.index}"]
            entry["file_times"] = [[name, round(s - r.start, 6), round(e - r.start, 6), n] for name, s, e, n in data]
            if passes:
                entry[SYNC_TIMES.get(r.phase, "fsync_times")] = [
                    [name, round(s - r.start, 6), round(e - r.start, 6)] for name, s, e in passes]
    epoch["end"] = iso(run_end)
    return {"1": epoch}


def checkpoint_figures(records: list[OpRecord], phase: str, checkpoint_bytes: int | None = None,
                       ) -> list[dict[str, Any]]:
    """One entry per checkpoint: the slowest process's duration, all processes' bytes. With
    ``checkpoint_bytes`` (loads: the stored bytes the load restores, as the save wrote them) the throughput
    is those over the duration, DLIO's figure, and ``read_GiB_per_second`` what the processes read
    (``bytes``) over it: a load that reads more is not faster for it."""
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
        out.append({
            "index": index, "step": group[0].step, "bytes": total, "files": sum(r.files for r in group),
            **({} if checkpoint_bytes is None else {"checkpoint_bytes": checkpoint_bytes}),
            "duration_seconds": duration, "slowest_process": slowest.process,
            "fastest_process_duration_seconds": min(r.duration for r in group),
            "start": iso(min(r.start for r in group)), "end": iso(max(r.end for r in group)),
            "throughput_GiB_per_second": moved / GIB / duration if duration > 0 else 0.0,
            "throughput_GB_per_second": moved / GB / duration if duration > 0 else 0.0,
            **({} if checkpoint_bytes is None else
               {"read_GiB_per_second": total / GIB / duration if duration > 0 else 0.0}),
            "coordination": coordination(group),
            "cpu": cpu_figures(group, total),
        })
        requests = [q for r in group for q in r.requests]
        if requests:
            out[-1]["requests"] = summarize(requests, duration)
        metadata = [r.metadata_seconds for r in group if r.metadata_seconds is not None]
        if metadata:  # a load: the metadata every rank read first, and how uneven the processes were
            out[-1]["metadata_read_seconds_max"] = max(metadata)
            out[-1]["metadata_read_seconds_mean"] = statistics.fmean(metadata)
            out[-1]["duration_imbalance"] = duration / statistics.fmean(r.duration for r in group) if duration else 1.0
        if group[0].held is None and any(r.stalled for r in group):  # a sync save that waited for a drain
            out[-1]["drain_wait_seconds_max"] = max(r.stalled for r in group)
        if group[0].held is not None:
            held, stalled = [r.held for r in group], [r.stalled for r in group]
            out[-1]["async"] = {"held_seconds_max": max(held), "held_seconds_mean": statistics.fmean(held),
                                "stalled_seconds_max": max(stalled), "time_to_durable_seconds": duration,
                                "overlapped": max(stalled) < 0.001}
    return out


def cpu_figures(group: list[OpRecord], nbytes: int) -> dict[str, float | int]:
    """The processes' CPU time and first-touched pages during one operation, summed, and per GiB
    moved (see :class:`ProcessCost`)."""
    seconds = sum(r.cost.user + r.cost.system for r in group)
    return {"seconds": seconds, "system_seconds": sum(r.cost.system for r in group),
            "seconds_per_GiB": seconds / (nbytes / GIB) if nbytes else 0.0,
            "minor_page_faults": sum(r.cost.minor_faults for r in group)}


def tier_figures(records: list[OpRecord], saves: list[dict[str, Any]]) -> dict[int, list[float]]:
    """Tiered runs: each save's ``tiers`` entry (per tier: seconds from the checkpoint's start until
    every process's files were on it, bytes there); returns each lower tier's times to durable."""
    starts: dict[int, float] = {}
    drains: dict[tuple[int, int], list[OpRecord]] = {}
    for r in records:
        if r.phase == "save":
            starts[r.step] = min(starts.get(r.step, r.start), r.start)
        elif r.phase.startswith("drain_tier"):
            drains.setdefault((int(r.phase.removeprefix("drain_tier")), r.step), []).append(r)
    durable: dict[int, list[float]] = {}
    for c in saves if drains else []:
        c["tiers"] = [{"tier": 0, "durable_seconds": c["duration_seconds"], "bytes": c["bytes"]}]
        for (k, step), group in sorted(drains.items()):
            if step == c["step"]:
                seconds = max(r.end for r in group) - starts[step]
                slowest = max(r.duration for r in group)
                nbytes = sum(r.bytes for r in group)
                c["tiers"].append({"tier": k, "durable_seconds": seconds, "bytes": nbytes, "drain_seconds": slowest,
                                   "drain_GiB_per_second": nbytes / GIB / slowest if slowest > 0 else 0.0})
                durable.setdefault(k, []).append(seconds)
    return durable


def coordination(group: list[OpRecord]) -> dict[str, float]:
    """How much of a checkpoint is skew rather than storage: the spread of the processes' starts
    (after the common barrier) and ends, the time they waited in that barrier for each other, and
    how far the slowest process's duration lies above the median one's."""
    waits = [r.waited for r in group]
    return {"start_spread_seconds": max(r.start for r in group) - min(r.start for r in group),
            "end_spread_seconds": max(r.end for r in group) - min(r.end for r in group),
            "barrier_wait_seconds_max": max(waits), "barrier_wait_seconds_mean": statistics.fmean(waits),
            "skew_seconds": max(r.duration for r in group) - statistics.median(r.duration for r in group)}


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.pstdev(values)


def summary(records: list[OpRecord], *, checkpoint_bytes: int, meta: dict[str, Any],
            loaded_bytes: int | None = None) -> dict[str, Any]:
    """DLIO's summary keys (``metric.*``, ``checkpoint_size_GB`` in GiB as DLIO has it) and ours.
    ``loaded_bytes``: the stored bytes one load restores (the checkpoint as saved, or its model alone),
    over which the load figures are taken; None: the bytes the loads read (modes whose loads read the
    checkpoint whole, once)."""
    metric: dict[str, Any] = {
        "checkpoint_size_GB": checkpoint_bytes / GIB,
        "checkpoint_size_bytes": checkpoint_bytes,
        "checkpoint_size_GiB": checkpoint_bytes / GIB,
        "checkpoint_size_GB_decimal": checkpoint_bytes / GB,
    }
    figures = {"save": checkpoint_figures(records, "save"), "load": checkpoint_figures(records, "load", loaded_bytes)}
    for phase, items in figures.items():
        if not items:
            continue
        gib, durations = [c["throughput_GiB_per_second"] for c in items], [c["duration_seconds"] for c in items]
        (m, s), (dm, ds) = _mean_std(gib), _mean_std(durations)
        metric[f"{phase}_checkpoint_io_mean_GB_per_second"] = m  # DLIO's name; the value is GiB/s
        metric[f"{phase}_checkpoint_io_stdev_GB_per_second"] = s
        metric[f"{phase}_checkpoint_duration_mean_seconds"] = dm
        metric[f"{phase}_checkpoint_duration_stdev_seconds"] = ds
        metric[f"{phase}_checkpoint_io_mean_GiB_per_second"] = m
        metric[f"{phase}_checkpoint_io_mean_GB_decimal_per_second"] = m * GIB / GB
        metric[f"{phase}_checkpoint_io_median_GiB_per_second"] = statistics.median(gib)
    held = [c["async"] for c in figures["save"] if "async" in c]
    if held:  # async saves: what they cost training, as metrics diff can gate on
        metric["save_checkpoint_held_mean_seconds"] = statistics.fmean(h["held_seconds_max"] for h in held)
        metric["save_checkpoint_time_to_durable_mean_seconds"] = statistics.fmean(
            h["time_to_durable_seconds"] for h in held)
    tiers = tier_figures(records, figures["save"])
    for k, durable in tiers.items():
        metric[f"save_checkpoint_time_to_durable_tier{k}_mean_seconds"] = statistics.fmean(durable)
        figures[f"drain_tier{k}"] = checkpoint_figures(records, f"drain_tier{k}")
    if "requests" in meta:
        meta["requests"]["during_checkpoints"] = summarize([q for r in records for q in r.requests])
    if "goodput" in meta and figures["save"]:  # asked for: {"mtbf_hours", "interval_seconds"}
        saves, loads = figures["save"], figures["load"]
        held = [c["async"]["held_seconds_max"] if "async" in c else c["duration_seconds"] for c in saves]
        # durable where a restart reads from: the read tier, and where lost hosts read theirs, the later of them
        read = meta["goodput"].get("tiers", [0])
        first = statistics.fmean(c["duration_seconds"] for c in saves)  # tier 0: durable when the save ends
        durable = max(statistics.fmean(tiers[k]) if k in tiers else first for k in read)
        meta["goodput"] = {**goodput.figures(
            meta["goodput"]["interval_seconds"], statistics.fmean(held), durable,
            statistics.fmean(c["duration_seconds"] for c in loads) if loads else 0.0, meta["goodput"]["mtbf_hours"]),
            "durable_on_tiers": read}
    if (scaled := meta.get("io", {}).get("scaled")) is not None:
        scaled["projected_full_size"] = projected(scaled["bytes_ratio"], metric)
    return {**meta, "metric": metric, "checkpoints": figures}


PROJECTION_BASIS = ("a projection, not a measurement: this run's mean times x the full size's bytes per checkpoint / "
                    "this run's; it assumes time grows with bytes at the bandwidth this run reached (no fixed cost "
                    "per file or request grows with it) and no more processes than this run's")


def projected(bytes_ratio: float, metric: dict[str, Any]) -> dict[str, Any]:
    """A scaled run's times projected to the full size (``io.scaled.projected_full_size``), labelled as such."""
    out: dict[str, Any] = {}
    for phase in ("save", "load"):
        if (mean := metric.get(f"{phase}_checkpoint_duration_mean_seconds")) is not None:
            out[f"{phase}_seconds"] = mean / bytes_ratio
    return {**out, "basis": PROJECTION_BASIS}


def hosts_summary(per_process: list[tuple[str, int]]) -> dict[str, Any]:
    """From each process's (host, memory): DLIO's ``host_memory_GB`` list (GiB, one per host) and
    ours, naming hosts and their process counts (MLPerf's page-cache rule needs both)."""
    hosts: dict[str, dict[str, int]] = {}
    for host, memory in per_process:
        entry = hosts.setdefault(host, {"processes": 0, "memory_bytes": memory})
        entry["processes"] += 1
    return {"host_memory_GB": [h["memory_bytes"] / GIB for h in hosts.values()], "hosts": hosts}


def dumps(obj: Any) -> str:
    """Strict JSON: NaN and infinities are errors, not tokens other parsers reject."""
    return json.dumps(obj, indent=2, allow_nan=False) + "\n"


def finish_run(comm: Comm, run_dir: str, meta: dict[str, Any], run_start: float, records: list[OpRecord],
               checkpoint_bytes: int, mine: Any, describe: Callable[[list[Any]], dict[str, Any]],
               loaded_bytes: int | None = None) -> dict[str, Any] | None:
    """Gather every process's records and facts; rank 0 writes ``{process}_per_epoch_stats.json`` and
    ``summary.json`` and returns the summary (None elsewhere). ``mine`` is this process's own facts
    (retries, set-up time...); ``describe`` turns every process's into the mode's summary fields.
    ``checkpoint_bytes``: one checkpoint, all processes; ``loaded_bytes``: what one load restores (see
    :func:`summary`). Every mode ends here, so their result files agree."""
    gathered = comm.gather((records, hostname(), host_memory(), peak_rss(), mine))
    if gathered is None:
        return None
    run_end = time.time()
    for proc, recs in enumerate(g[0] for g in gathered):
        write_result(f"{run_dir}/{proc}_per_epoch_stats.json", dumps(per_epoch_stats(recs, run_start, run_end,
                                                                                    meta.get("run_id"))))
    rss = [g[3] for g in gathered]
    meta = {
        **meta, "status": "ok", "num_processes": comm.size, "num_hosts": len({g[1] for g in gathered}),
        "hostname": hostname(), "start": iso(run_start), "end": iso(run_end), "invocation_end_time": iso(time.time()),
        **hosts_summary([(g[1], g[2]) for g in gathered]),
        "memory": {"peak_rss_bytes_max": max(rss), "peak_rss_bytes_per_process": rss},
        **describe([g[4] for g in gathered]),
    }
    result = summary([r for g in gathered for r in g[0]], checkpoint_bytes=checkpoint_bytes, meta=meta,
                     loaded_bytes=loaded_bytes)
    write_result(f"{run_dir}/summary.json", dumps(result))
    return result


def write_result(path: str, text: str) -> None:
    """Atomically: a result file is whole or absent, never half-written by a killed process."""
    with temporary(f"{path}.tmp{os.getpid()}") as tmp:
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
