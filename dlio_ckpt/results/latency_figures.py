"""``summary.json``'s latency figures: the calls of each kind a checkpoint made, their percentiles, the outliers,
the metadata calls apart from data, the stonewall, and the run's calls outside its checkpoints
(:mod:`dlio_ckpt.results.latency` fills them). Why apart from :mod:`dlio_ckpt.results.schema`: one module, one
part of the file, each under the size the project holds its modules to."""

# ruff: noqa: N815 - a field is named as the file names its key

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dlio_ckpt.results.section import Section


class RequestKind(Section):
    """Object-store requests of one kind (a request name, or ``call: ...`` for our call into the client)."""

    count: int = Field(description="requests of this kind")
    bytes: int = Field(description="bytes they carried")
    p50_ms: float | None = Field(None, description="median latency of the requests seen (none when derived)")
    p90_ms: float | None = Field(None, description="90th percentile latency, ms")
    p99_ms: float | None = Field(None, description="99th percentile latency, ms")
    max_ms: float | None = Field(None, description="the slowest request, ms")
    per_second: float | None = Field(None, description="requests per second over the checkpoint's duration")
    failures: dict[str, int] | None = Field(None, description="failed requests by cause")
    derived: bool | None = Field(None, description="true: counted by the client's rule (its part requests and "
                                                   "retries are hidden), no latency")


class LatencyFigures(Section):
    """The calls of one kind (``write``, ``fsync``, ``create``, ``rename``, ``coordinator write``,
    ``request: PutObject``...), every process's merged: each call timed from entering the storage's client to its
    return. Percentiles come from a histogram per process (128 buckets per power of two: within 0.4 % of the true
    value), merged exactly."""

    of: Literal["data", "metadata", "request"] = Field(description="data: moves bytes or makes them durable (write, "
                                                                   "read, fsync, close...); metadata: creates, opens, "
                                                                   "stats, renames, lists or removes; request: an "
                                                                   "object store's request, as its client counts it")
    count: int = Field(description="calls, all processes")
    bytes: int | None = Field(None, description="bytes they moved (data calls)")
    mean_ms: float = Field(description="mean latency, ms")
    min_ms: float = Field(description="the quickest call, ms")
    p50_ms: float = Field(description="median latency, ms")
    p90_ms: float = Field(description="90th percentile, ms")
    p99_ms: float = Field(description="99th percentile, ms")
    p99_9_ms: float = Field(description="99.9th percentile, ms")
    max_ms: float = Field(description="the slowest call, ms (exact)")
    seconds: float = Field(description="time spent in these calls, all processes and threads summed")
    per_second: float | None = Field(None, description="calls per second over the checkpoint's duration (checkpoints "
                                                       "only)")
    processes: int | None = Field(None, description="processes that made such calls")


class LatencyOutlier(Section):
    """A process whose calls of one kind were far slower than the other processes' (its p99 at least twice theirs,
    and 0.1 ms above it)."""

    process: int = Field(description="the process (MPI rank)")
    kind: str = Field(description="the kind of call")
    p99_ms: float = Field(description="its 99th percentile, ms")
    max_ms: float = Field(description="its slowest call, ms")
    count: int = Field(description="its calls of this kind")
    others_p99_ms: float = Field(description="the median of the other processes' 99th percentiles, ms")
    ratio: float = Field(description="p99_ms over others_p99_ms")
    slowest_process: bool = Field(description="whether it is the process that set the checkpoint's duration")


class MetadataFigures(Section):
    """Metadata calls (create, open, stat, rename, mkdir, list, remove...) counted and timed apart from data, as
    mdtest reports them; the coordinator's files (DCP's ``.metadata``, megatron's ``common.pt``) apart again."""

    operations: int = Field(description="metadata calls, all processes")
    per_second: float | None = Field(None, description="of them per second over the checkpoint's duration")
    seconds: float = Field(description="time spent in them, all processes and threads summed")
    share_of_call_seconds: float = Field(description="their share of the time spent in every storage call")
    by_kind: dict[str, int] = Field(description="calls by kind")
    coordinator_calls: int | None = Field(None, description="calls on the files rank 0 writes besides its data (the "
                                                            "coordinator's, which every rank reads; those beside the "
                                                            "steps), data and metadata")
    coordinator_seconds: float | None = Field(None, description="time spent in them, all processes summed")


class OperationLatency(Section):
    """Every storage call of one checkpoint (or of the run), by kind, with the processes that stood out."""

    kinds: dict[str, LatencyFigures] = Field(description="by kind of call")
    metadata: MetadataFigures | None = Field(None, description="the metadata calls, apart from data")
    outliers: list[LatencyOutlier] | None = Field(None, description="processes far slower than the others in a kind "
                                                                    "(at most 10, the worst first)")


class Stonewall(Section):
    """IOR's stonewall: the throughput while every process is still moving data (until the first one is done),
    beside the slowest-process duration and the spread from first to last."""

    first_done_seconds: float = Field(description="the quickest process's duration")
    first_done_process: int = Field(description="that process")
    bytes_by_first_done: int = Field(description="bytes all processes had moved by then")
    GiB_per_second: float = Field(description="bytes_by_first_done over first_done_seconds, GiB/s")
    share_done: float = Field(description="bytes_by_first_done over all the checkpoint's bytes")
    last_done_seconds: float = Field(description="the slowest process's duration (duration_seconds)")
    last_done_process: int = Field(description="that process")
    first_to_last_seconds: float = Field(description="last_done_seconds minus first_done_seconds")
    estimated_from: Literal["file_times", "process_bytes"] = Field(
        description="file_times: each file's bytes spread over its own start and end; process_bytes (no file "
                    "times): each process's bytes spread evenly over its duration")


class RunLatency(Section):
    """The run's storage calls: all of them, and those outside the checkpoints (storage checks, manifests, folders,
    clean-up, drains to lower tiers). Each checkpoint's are in ``checkpoints``."""

    note: str = Field(description="what is timed, and what is not")
    run: OperationLatency = Field(description="every call of the run, all processes and tiers")
    outside_checkpoints: OperationLatency | None = Field(None, description="the calls made outside the timed saves "
                                                                           "and loads")
