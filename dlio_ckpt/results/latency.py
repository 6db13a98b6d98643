"""``summary.json``'s latency figures: every process's histograms of its storage calls
(:mod:`dlio_ckpt.io.latency`, recorded by :mod:`dlio_ckpt.io.backends.timed`) merged per checkpoint and per run,
metadata apart from data, the processes that stood out, and IOR's stonewall.

Why per process first and merged here: a percentile of percentiles is no percentile; the histograms add
exactly, so the job's p99 is the p99 of every call of the job. A process's own histogram is kept long enough
to find the process whose calls were slow (an outlier is named, not averaged away).
"""

from __future__ import annotations

import statistics
from typing import Any

from dlio_ckpt.io.backends.timed import COORDINATOR, kind_class
from dlio_ckpt.io.latency import Histogram, Histograms, bucket_of, merged
from dlio_ckpt.io.requests import Request
from dlio_ckpt.results.latency_figures import (
    LatencyFigures,
    LatencyOutlier,
    MetadataFigures,
    OperationLatency,
    RunLatency,
    Stonewall,
)

GIB = 1 << 30
MS = 1e6  # ns per ms
REQUEST = "request: "  # an object store's request kind, as its client's log names it
OUTLIER_RATIO, OUTLIER_FLOOR_MS, MOST_OUTLIERS = 2.0, 0.1, 10

NOTE = ("each call into the storage's client timed from entry to return, by kind, in a log-bucket histogram per "
        "process (within 0.4 %), merged exactly across processes; ms. Data: write, read (each request), fsync, "
        "close, evict, small write/read (manifests); metadata: create, open, stat, rename, mkdir, list, remove, "
        "rmdir, statfs, probe; 'coordinator ...': calls on the coordinator's files; 'request: ...': object-store "
        "requests as their client counts them (seen ones only). Not timed: what a real mode's framework does "
        "itself (it opens the storage's URL on its own)")


def request_histograms(requests: list[Request] | tuple[Request, ...]) -> Histograms:
    """Object-store requests seen by their client's log as histograms by kind (derived ones have no latency)."""
    out: Histograms = {}
    for q in requests:
        if q.derived:
            continue
        ns = int(q.seconds * 1e9)
        h = out.setdefault(REQUEST + q.kind, Histogram())
        i = bucket_of(ns)
        h.counts[i] = h.counts.get(i, 0) + 1
        h.min_ns = ns if not h.count else min(h.min_ns, ns)
        h.max_ns = max(h.max_ns, ns)
        h.count += 1
        h.total_ns += ns
        h.bytes += q.bytes
    return out


def figures(kind: str, h: Histogram, seconds: float | None = None, processes: int | None = None) -> LatencyFigures:
    """One kind's figures from its merged histogram; ``seconds``: the checkpoint's duration (a rate over it)."""
    return LatencyFigures(of=kind_class(kind.removeprefix(REQUEST)) if not kind.startswith(REQUEST) else "request",
                          count=h.count, bytes=h.bytes or None, mean_ms=h.total_ns / h.count / MS,
                          min_ms=h.min_ns / MS, p50_ms=h.quantile_ns(0.5) / MS, p90_ms=h.quantile_ns(0.9) / MS,
                          p99_ms=h.quantile_ns(0.99) / MS, p99_9_ms=h.quantile_ns(0.999) / MS, max_ms=h.max_ns / MS,
                          seconds=h.total_ns / 1e9, per_second=h.count / seconds if seconds else None,
                          processes=processes)


def of_class(hs: Histograms, which: str) -> Histogram:
    """Every kind of one class (``data``, ``metadata``) as one histogram."""
    return merged([{which: h} for kind, h in hs.items() if not kind.startswith(REQUEST) and kind_class(kind) == which]
                  ).get(which, Histogram())


def metadata_figures(hs: Histograms, seconds: float | None) -> MetadataFigures | None:
    """The metadata calls apart from data (None where there were none and no coordinator's calls)."""
    meta = {k: h for k, h in hs.items() if not k.startswith(REQUEST) and kind_class(k) == "metadata"}
    ours = [h for k, h in hs.items() if k.startswith(COORDINATOR)]
    if not meta and not ours:
        return None
    count = sum(h.count for h in meta.values())
    spent = sum(h.total_ns for h in meta.values()) / 1e9
    every = sum(h.total_ns for k, h in hs.items() if not k.startswith(REQUEST)) / 1e9
    return MetadataFigures(operations=count, per_second=count / seconds if seconds else None, seconds=spent,
                           share_of_call_seconds=spent / every if every else 0.0,
                           by_kind={k: h.count for k, h in sorted(meta.items())},
                           coordinator_calls=sum(h.count for h in ours) if ours else None,
                           coordinator_seconds=sum(h.total_ns for h in ours) / 1e9 if ours else None)


def outliers(per_process: dict[int, Histograms], slowest: int | None = None) -> list[LatencyOutlier]:
    """Processes whose p99 in a kind is at least :data:`OUTLIER_RATIO` times the median of the other processes'
    p99 in it, and :data:`OUTLIER_FLOOR_MS` above it (a microsecond's jitter is not a finding); the worst first."""
    found = []
    kinds = sorted({k for hs in per_process.values() for k in hs})
    for kind in kinds:
        p99 = {p: hs[kind].quantile_ns(0.99) / MS for p, hs in per_process.items() if kind in hs and hs[kind].count}
        if len(p99) < 2:
            continue
        for p, mine in p99.items():
            others = statistics.median(v for q, v in p99.items() if q != p)
            if mine >= OUTLIER_RATIO * others and mine - others >= OUTLIER_FLOOR_MS:
                h = per_process[p][kind]
                found.append(LatencyOutlier(process=p, kind=kind, p99_ms=mine, max_ms=h.max_ns / MS, count=h.count,
                                            others_p99_ms=others, ratio=mine / others if others else float("inf"),
                                            slowest_process=p == slowest))
    found.sort(key=lambda o: -o.ratio if o.others_p99_ms else -o.p99_ms * 1e9)
    return [o.model_copy(update={"ratio": min(o.ratio, 1e9)}) for o in found[:MOST_OUTLIERS]]


def operation_latency(per_process: dict[int, Histograms], seconds: float | None = None,
                      slowest: int | None = None) -> OperationLatency | None:
    """Every process's calls of one operation (a checkpoint, or the run) merged: by kind, metadata apart,
    outliers named. None where nothing was timed (a real mode's checkpoint, whose I/O is its framework's)."""
    every = merged(list(per_process.values()))
    if not every:
        return None
    made = {k: sum(1 for hs in per_process.values() if k in hs) for k in every}
    kinds = {k: figures(k, every[k], seconds, made[k]) for k in sorted(every)}
    return OperationLatency(kinds=kinds, metadata=metadata_figures(every, seconds),
                            outliers=outliers(per_process, slowest) or None)


def run_latency(per_process: dict[int, Histograms], outside: dict[int, Histograms]) -> RunLatency | None:
    """``latency``: the run's calls, all of them and those outside the checkpoints."""
    everything = {p: merged([per_process.get(p, {}), outside.get(p, {})]) for p in {*per_process, *outside}}
    run = operation_latency(everything)
    if run is None:
        return None
    return RunLatency(note=NOTE, run=run, outside_checkpoints=operation_latency(outside))


def bytes_by(t: float, start: float, end: float, nbytes: int) -> float:
    """A file's (or process's) bytes moved by time ``t``, spread evenly over [start, end]."""
    if t >= end:
        return float(nbytes)
    if t <= start:
        return 0.0
    return nbytes * (t - start) / (end - start)


def stonewall(group: list[Any]) -> Stonewall | None:
    """IOR's stonewall from one checkpoint's records (``OpRecord``): every process's bytes moved by the time
    the first process was done, over that time. A process's bytes by then come from its files' own start and
    end (``file_times``), each file's bytes spread over its own interval; without file times (real modes), from
    the process's bytes spread over its duration. Only the processes that moved bytes count: one with nothing to
    move (under Lightning, all but global rank 0's) is done at once and would put the wall at nought. None where
    no process moved anything, or one that did took no time."""
    group = [r for r in group if r.bytes]
    if not group or any(r.duration <= 0 for r in group):
        return None
    first = min(group, key=lambda r: r.duration)
    last = max(group, key=lambda r: r.duration)
    total = sum(r.bytes for r in group)
    t = first.duration
    timed_files = all(any(n for *_, n in r.file_times) for r in group if r.bytes)
    done = 0.0
    for r in group:
        if timed_files and r.bytes:
            data = [(s - r.start, e - r.start, n) for _, s, e, n in r.file_times if n]
            moved = sum(bytes_by(t, s, e, n) for s, e, n in data)
            done += min(moved * r.bytes / max(sum(n for *_, n in data), 1), r.bytes)
        else:
            done += bytes_by(t, 0.0, r.duration, r.bytes)
    return Stonewall(first_done_seconds=t, first_done_process=first.process, bytes_by_first_done=round(done),
                     GiB_per_second=done / GIB / t, share_done=done / total, last_done_seconds=last.duration,
                     last_done_process=last.process, first_to_last_seconds=last.duration - t,
                     estimated_from="file_times" if timed_files else "process_bytes")


def p99_of(per_process: list[Histograms], kind: str) -> float | None:
    """The p99 (ms) of one kind (``metadata``: every metadata kind) over several operations' histograms."""
    parts = [({kind: of_class(hs, "metadata")} if kind == "metadata" else hs) for hs in per_process]
    h = merged(parts).get(kind)
    return h.quantile_ns(0.99) / MS if h is not None and h.count else None


def console_line(name: str, latency: OperationLatency | None, wall: Stonewall | None) -> str | None:
    """The console's line for one checkpoint: p99 of its busiest kinds beside the stonewall (or None)."""
    said = []
    if latency is not None:
        top = sorted(latency.kinds.items(), key=lambda kv: -kv[1].seconds)[:4]
        said.append("p99 " + ", ".join(f"{k} {f.p99_ms:.3g} ms" for k, f in top))
        if latency.outliers:
            o = latency.outliers[0]
            said.append(f"outlier: process {o.process} {o.kind} p99 {o.p99_ms:.3g} ms ({o.ratio:.1f}x the others)")
    if wall is not None:
        said.append(f"stonewall {wall.GiB_per_second:.3f} GiB/s (first process done at "
                    f"{wall.first_done_seconds:.3f} s, last {wall.first_to_last_seconds:.3f} s later)")
    return f"{name}: " + "; ".join(said) if said else None
