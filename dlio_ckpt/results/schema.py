"""``summary.json`` as pydantic models: what every run writes (:func:`dlio_ckpt.results.summary.finish_run`,
:func:`dlio_ckpt.run.failure.write_failed_summary`) and what every tool that reads runs reads
(:func:`dlio_ckpt.tools.readers.runfiles.load_run`).

Why one model for both sides: the writer and the readers (``diff``, ``report``, ``check``, sweeps) once agreed on
the file only by convention, one building nested dicts and the others reading them back with ``.get()`` chains,
so a key renamed on one side became a silent "not recorded" on the other. Here each key is named, typed and
described once (the descriptions are the file's reference), and a reader gets attributes or a validation error.

Why DLIO's keys keep DLIO's names, nesting and types: a DLIO summary (its own runs, as ``tests/data/dlio_run``
holds one) must still load, and our files must still read as DLIO's to DLIO's readers: ``metric`` holds DLIO's
means under DLIO's names (whose ``GB`` is GiB), and our unambiguous figures beside them. Keys DLIO or a mode
adds that are not enumerated here are kept (``extra="allow"``), so a file read and written back loses nothing.

Why a field that is None is left out when written: a section or figure that does not apply to a run (a load's
figures in a write-only run, a tier's in an untiered one) is absent from the file, never ``null``, as before the
model existed; a field that may say ``null`` as a value (no accelerator declared, no caveat) names itself in
``written_as_null`` and is written as ``null`` when it was given, absent when it was not. Fields that older
versions did not write yet are optional, so their runs still load.
"""

# ruff: noqa: N815 - a field is named as the file names its key (DLIO's checkpoint_size_GB, our _GiB_ figures)

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from dlio_ckpt.results.latency_figures import OperationLatency, RequestKind, RunLatency, Stonewall
from dlio_ckpt.results.section import Section

# The per-process file (``{process}_per_epoch_stats.json``): each operation's second pass over its files,
# listed apart from their data (``file_times``): their fsync (saves, drains) or a load's cache eviction first.
FSYNC_TIMES, EVICT_TIMES = "fsync_times", "evict_times"
SECOND_PASS = {"save": FSYNC_TIMES, "load": EVICT_TIMES}  # by phase; a drain (drain_tier{k}) fsyncs


# -- the checkpoints, one by one -----------------------------------------------------------------------

class Coordination(Section):
    """How much of a checkpoint is skew rather than storage."""

    start_spread_seconds: float = Field(description="latest minus earliest process start, after the common barrier")
    end_spread_seconds: float = Field(description="latest minus earliest process end")
    barrier_wait_seconds_max: float = Field(description="the longest any process waited in the barrier before it")
    barrier_wait_seconds_mean: float = Field(description="the processes' mean wait in that barrier")
    skew_seconds: float = Field(description="the slowest process's duration minus the median process's")


class CpuFigures(Section):
    """What the operation cost the hosts' CPUs, all processes summed (their threads and drains included)."""

    seconds: float = Field(description="CPU seconds, user and system")
    system_seconds: float = Field(description="of which in the kernel (the storage's client: a real job's too)")
    framework_seconds: float = Field(0.0, description="of the user time, the framework's own work the emulation "
                                     "plays (torch.save's CRC-32, Lightning's copy into memory, "
                                     "checkpoint.framework_item_us): a real job's too; with mode=fsdp or lightning, "
                                     "all of it (the framework runs itself)")
    own_seconds: float = Field(0.0, description="of the user time, the emulator's own work: making and checking "
                               "the synthetic bytes, playing the calls (what a real job does not do)")
    seconds_per_GiB: float = Field(description="CPU seconds per GiB the processes moved (0 when none)")
    minor_page_faults: int = Field(description="pages touched for the first time")
    busiest_process_busy: float = Field(0.0, description="the busiest process's CPU seconds over its duration, of "
                                        "the cores it could use (one, or its share of its host's): 1 is all of it")
    bound: bool = Field(False, description="CPU-bound: the busiest process was busy at least 90 % of its time, so "
                        "the duration is set by the processes' CPU (see own_seconds and framework_seconds), not by "
                        "the storage")


class AsyncFigures(Section):
    """An asynchronous save: what it held training for, and when it was durable."""

    held_seconds_max: float = Field(description="the longest any process held training (staging and waiting)")
    held_seconds_mean: float = Field(description="the processes' mean hold")
    stalled_seconds_max: float = Field(description="of the hold, the longest wait for the previous background write")
    time_to_durable_seconds: float = Field(description="from the save's start to its last byte durable")
    overlapped: bool = Field(description="whether the background write hid behind training (no stall over 1 ms)")


class TierFigures(Section):
    """A tiered save: when the checkpoint was on one tier (tier 0: where it was saved)."""

    tier: int = Field(description="the tier, 0 for the one saved to")
    durable_seconds: float = Field(description="from the save's start until every process's files were on it")
    bytes: int = Field(description="bytes on that tier, all processes")
    drain_seconds: float | None = Field(None, description="lower tiers: the slowest process's copy to it")
    drain_GiB_per_second: float | None = Field(None, description="lower tiers: bytes over drain_seconds, in GiB/s")


class CheckpointFigures(Section):
    """One checkpoint (or a drain of one to a lower tier): every process's part, timed as MLPerf Storage's rules
    define it: the duration is the slowest process's, the throughput the checkpoint over that duration."""

    index: int = Field(description="1-based position within its phase (save_ckpt{index} in the per-process files)")
    step: int = Field(description="the step folder it wrote or read")
    bytes: int = Field(description="bytes all processes moved")
    files: int = Field(description="files all processes moved")
    checkpoint_bytes: int | None = Field(None, description="loads: the stored bytes the load restores, over which "
                                                           "its throughput is taken (DLIO's figure)")
    duration_seconds: float = Field(description="the slowest process's, from the common barrier to its last byte")
    slowest_process: int = Field(description="the process that took duration_seconds")
    fastest_process_duration_seconds: float = Field(description="the quickest process's duration")
    start: str = Field(description="the earliest process start, local time, ISO 8601")
    end: str = Field(description="the latest process end, local time, ISO 8601")
    throughput_GiB_per_second: float = Field(description="the checkpoint (checkpoint_bytes for a load, else bytes) "
                                                         "over duration_seconds, GiB/s")
    throughput_GB_per_second: float = Field(description="the same in decimal GB/s")
    read_GiB_per_second: float | None = Field(None, description="loads: what the processes read (bytes) over "
                                                                "duration_seconds, GiB/s")
    coordination: Coordination | None = Field(None, description="skew between the processes")
    cpu: CpuFigures | None = Field(None, description="the processes' CPU time and first-touched pages")
    requests: dict[str, RequestKind] | None = Field(None, description="object stores: the processes' requests "
                                                                      "during it, by kind")
    metadata_read_seconds_max: float | None = Field(None, description="loads: the longest any process took to read "
                                                                      "the metadata every rank reads first")
    metadata_read_seconds_mean: float | None = Field(None, description="loads: the processes' mean of that")
    duration_imbalance: float | None = Field(None, description="loads with metadata: the slowest process's duration "
                                                               "over the processes' mean")
    drain_wait_seconds_max: float | None = Field(None, description="synchronous saves: the longest any process first "
                                                                   "waited for a drain to make room (keep_last)")
    device_copy_seconds_max: float | None = Field(
        None, description="synchronous saves and loads with io_pattern framework: the longest any process spent "
        "copying its tensors from the accelerators (a load: to them; modelled at checkpoint.gpu_copy_gb_per_second), "
        "within duration_seconds")
    async_: AsyncFigures | None = Field(None, alias="async", description="asynchronous saves")
    tiers: list[TierFigures] | None = Field(None, description="tiered saves: when it was durable on each tier")
    latency: OperationLatency | None = Field(None, description="every storage call of it: latency percentiles by "
                                                               "kind, metadata apart, outlying processes")
    stonewall: Stonewall | None = Field(None, description="the throughput until the first process was done, and the "
                                                          "spread from first to last")


class Checkpoints(Section):
    """Our figures of each checkpoint, by phase; a tiered run adds ``drain_tier{k}``: its copies to tier k."""

    __pydantic_extra__: dict[str, list[CheckpointFigures]] = Field(init=False)  # drain_tier{k}

    save: list[CheckpointFigures] = Field(description="the saves, in order (empty in a read-only run)")
    load: list[CheckpointFigures] = Field(description="the loads, in order (empty in a write-only run)")

    def phase(self, name: str) -> list[CheckpointFigures]:
        """``save``, ``load`` or ``drain_tier{k}``: its checkpoints, none when the run had none."""
        if name in ("save", "load"):
            return getattr(self, name)
        return (self.model_extra or {}).get(name, [])


# -- DLIO's means and ours ---------------------------------------------------------------------------

class Metric(Section):
    """DLIO's means under DLIO's names (its ``GB`` is GiB; a phase that did not run is NaN in DLIO's files and
    absent in ours), then our figures named by their units. A figure of a phase is the mean over that phase's
    checkpoints, each timed by its slowest process. DLIO's training metrics (``train_au_percentage``...) and
    our tiers' ``save_checkpoint_time_to_durable_tier{k}_mean_seconds`` are kept as further keys."""

    checkpoint_size_GB: float | None = Field(None, description="DLIO's: one checkpoint, all processes, in GiB")
    checkpoint_size_bytes: int | None = Field(None, description="one checkpoint, all processes, in bytes")
    checkpoint_size_GiB: float | None = Field(None, description="the same in GiB")
    checkpoint_size_GB_decimal: float | None = Field(None, description="the same in decimal GB")
    save_checkpoint_io_mean_GB_per_second: float | None = Field(None, description="DLIO's: mean save throughput, "
                                                                                  "GiB/s")
    save_checkpoint_io_stdev_GB_per_second: float | None = Field(None, description="DLIO's: its standard deviation")
    save_checkpoint_duration_mean_seconds: float | None = Field(None, description="DLIO's: mean save duration")
    save_checkpoint_duration_stdev_seconds: float | None = Field(None, description="DLIO's: its standard deviation")
    save_checkpoint_io_mean_GiB_per_second: float | None = Field(None, description="mean save throughput, GiB/s")
    save_checkpoint_io_mean_GB_decimal_per_second: float | None = Field(None, description="the same in decimal GB/s")
    save_checkpoint_io_median_GiB_per_second: float | None = Field(None, description="median save throughput, GiB/s")
    save_checkpoint_first_duration_seconds: float | None = Field(None, description="the first save's duration")
    save_checkpoint_steady_duration_mean_seconds: float | None = Field(None, description="the mean duration of the "
                                                                       "saves after the first (the steady state a "
                                                                       "job saves in); absent with one save")
    load_checkpoint_io_mean_GB_per_second: float | None = Field(None, description="DLIO's: mean load throughput "
                                                                                  "(the checkpoint over the duration), "
                                                                                  "GiB/s")
    load_checkpoint_io_stdev_GB_per_second: float | None = Field(None, description="DLIO's: its standard deviation")
    load_checkpoint_duration_mean_seconds: float | None = Field(None, description="DLIO's: mean load duration, the "
                                                                                  "time a restart waits")
    load_checkpoint_duration_stdev_seconds: float | None = Field(None, description="DLIO's: its standard deviation")
    load_checkpoint_io_mean_GiB_per_second: float | None = Field(None, description="mean load throughput, GiB/s")
    load_checkpoint_io_mean_GB_decimal_per_second: float | None = Field(None, description="the same in decimal GB/s")
    load_checkpoint_io_median_GiB_per_second: float | None = Field(None, description="median load throughput, GiB/s")
    load_checkpoint_first_duration_seconds: float | None = Field(None, description="the first load's duration")
    load_checkpoint_steady_duration_mean_seconds: float | None = Field(None, description="the mean duration of the "
                                                                       "loads after the first; absent with one load")
    save_checkpoint_held_mean_seconds: float | None = Field(None, description="asynchronous saves: mean time training "
                                                                              "was held (the slowest process's)")
    save_checkpoint_time_to_durable_mean_seconds: float | None = Field(None, description="asynchronous saves: mean "
                                                                                         "time to durable")
    save_checkpoint_write_p99_ms: float | None = Field(None, description="the 99th percentile of every save's write "
                                                                         "requests, ms")
    load_checkpoint_read_p99_ms: float | None = Field(None, description="the 99th percentile of every load's read "
                                                                        "requests, ms")
    save_checkpoint_metadata_p99_ms: float | None = Field(None, description="the 99th percentile of every save's "
                                                                            "metadata calls, ms")
    save_checkpoint_stonewall_mean_GiB_per_second: float | None = Field(None, description="mean over the saves of "
                                                                                          "the stonewall throughput, "
                                                                                          "GiB/s")
    load_checkpoint_stonewall_mean_GiB_per_second: float | None = Field(None, description="the same for the loads")

    def figures(self) -> dict[str, Any]:
        """Every figure present, by its name in the file (DLIO's training metrics and tier figures too): what
        ``diff`` compares and ``report`` tabulates, name by name."""
        return self.model_dump(by_alias=True)


# -- the run's facts --------------------------------------------------------------------------------

class FileSystem(Section):
    """The file system holding a folder, from the kernel's mount table."""

    path: str | None = Field(None, description="the folder as given")
    realpath: str | None = Field(None, description="it, or its nearest existing parent, with links resolved")
    device: str | None = Field(None, description="major:minor: two folders are on one file system exactly when "
                                                 "these match")
    type: str | None = Field(None, description="the file system's type (ext4, xfs, nfs, tmpfs...)")
    source: str | None = Field(None, description="what is mounted there")
    mount_point: str | None = Field(None, description="where it is mounted")


class FileSystems(Section):
    """MLPerf Storage 3.0's §4.4.2 evidence: the checkpoints' and the results' file systems."""

    written_as_null: ClassVar[frozenset[str]] = frozenset({"checkpoint", "same_file_system"})

    checkpoint_storage: str | None = Field(None, description="the checkpoints' storage_type")
    checkpoint: FileSystem | None = Field(None, description="the checkpoint folder's; null where it is no folder of "
                                                            "this host's (an object store, null storage)")
    results: FileSystem | None = Field(None, description="the results folder's")
    same_file_system: bool | None = Field(None, description="whether they are one; null where the checkpoints are on "
                                                            "none")


class HostShare(Section):
    """One host of the run."""

    processes: int = Field(description="processes on it")
    memory_bytes: int = Field(description="its memory")


class MemoryFigures(Section):
    """The processes' own memory (what the benchmark itself took)."""

    peak_rss_bytes_max: int = Field(description="the largest peak resident set of any process")
    peak_rss_bytes_per_process: list[int] = Field(description="each process's peak resident set, by process")


class Spread(Section):
    """min / median / mean / max of a figure over ranks (or over reads)."""

    min: int = Field(description="the least")
    median: int = Field(description="the middle one (the upper of two)")
    mean: float = Field(description="the mean")
    max: int = Field(description="the most")


class ReadSizes(Spread):
    """The sizes of every read of the load, all ranks."""

    histogram: dict[str, int] = Field(description="reads by power of two: '<=4096' counts reads of 2049 to 4096 "
                                                  "bytes")


class RestoreFigures(Section):
    """What the load needs and reads, per rank and in all, from its plan; and whose load it follows."""

    written_as_null: ClassVar[frozenset[str]] = frozenset({"caveat", "read_amplification"})

    world_size: int = Field(description="the load's ranks")
    saved_world_size: int = Field(description="the save's ranks")
    model_only: bool | None = Field(None, description="whether the load restores the model alone (no optimizer)")
    resharded: bool | None = Field(None, description="whether the load's world size differs from the save's")
    follows: str | None = Field(None, description="whose reader the read phase follows, in plain words")
    frameworks_own_load: bool | None = Field(None, description="whether that is the framework's own load")
    caveat: str | None = Field(None, description="where it is not, why; null where it is")
    bytes_restored: int | None = Field(None, description="the stored bytes the load restores, each once, headers "
                                                         "and metadata included (DLIO's load figure is over the "
                                                         "payload: checkpoints.load[].checkpoint_bytes)")
    bytes_needed: int | None = Field(None, description="what the ranks need, all ranks")
    bytes_read: int | None = Field(None, description="what the ranks read, all ranks")
    read_amplification: float | None = Field(None, description="bytes_read over bytes_needed; null when none needed")
    metadata_bytes_per_rank: int | None = Field(None, description="the metadata every rank reads first")
    bytes_read_per_rank: Spread | None = Field(None, description="bytes each rank reads")
    bytes_needed_per_rank: Spread | None = Field(None, description="bytes each rank needs")
    reads_per_rank: Spread | None = Field(None, description="reads each rank asks for (a whole file, or a run of "
                                                            "adjacent ranges)")
    ranged_requests_per_rank: Spread | None = Field(None, description="requests its ranged reads take: of at most "
                                                                      "chunk_size bytes each, or as follows' reader "
                                                                      "splits them (S3: part_size GETs)")
    files_per_rank: Spread | None = Field(None, description="files each rank reads from")
    read_bytes: ReadSizes | None = Field(None, description="the size of every read")
    imbalance: float | None = Field(None, description="the heaviest rank's bytes read over the ranks' mean")
    heaviest_rank: int | None = Field(None, description="the rank that reads most")
    heaviest_rank_bytes_needed: int | None = Field(None, description="what that rank needs")


class SizeFigures(Section):
    """One checkpoint of a plan, as stored."""

    checkpoint_size_GiB: float = Field(description="the model's bytes (the payload), GiB")
    bytes_per_checkpoint: int = Field(description="what is stored, headers and coordinator files included")
    coordinator_bytes: int = Field(description="the files one rank writes for all")
    headers_share: float = Field(description="the share of the stored bytes that is the format's headers")
    writing_ranks: int | None = Field(None, description="the ranks that write files")
    files: int | None = Field(None, description="the ranks' files")
    items: int | None = Field(None, description="what the ranks' files hold: tensors, and objects pickled whole")
    busiest_process_share: float | None = Field(None, description="the largest share of the ranks' bytes that one "
                                                "of the run's processes holds (the slowest sets the time)")


SHORT_DATA_SECONDS = 1.0  # a phase moving the ranks' files in less is too short to measure the storage


class Projection(Section):
    """A scaled run's mean times projected to the full size: a projection, not a measurement."""

    save_seconds: float | None = Field(None, description="the save's mean duration, its slowest process's time "
                                       "moving the ranks' files (data_seconds in its per_epoch_stats) over bytes_ratio")
    load_seconds: float | None = Field(None, description="the load's mean duration, its slowest process's time "
                                       "moving the ranks' files over load_bytes_ratio")
    basis: str = Field(description="what the projection assumes")
    cpu_bound: list[str] = Field(default_factory=list, description="the phases whose times the processes' CPU set "
                                 "(checkpoints[].cpu.bound): their projection scales the emulator's work, not the "
                                 "storage's")
    data_seconds: dict[str, float] = Field(default_factory=dict, description="by phase: the mean over checkpoints "
                                           "of the time moving the ranks' files of the process whose projected "
                                           "time is longest, the part the projection divides by the ratio")
    too_short: list[str] = Field(default_factory=list, description=f"the phases whose data_seconds is under "
                                 f"{SHORT_DATA_SECONDS:g} s: "
                                 "too short to measure the storage (its caches and a run's first requests set such "
                                 "a time, and the ratio multiplies their noise); a run moving more bytes measures "
                                 "it")


class Scaled(Section):
    """A run at ``checkpoint.scale`` below 1: what it wrote beside what the full size would."""

    miniature: Literal["shrink", "sample"] = Field("shrink", description="checkpoint.miniature: every tensor "
                                                   "shrunk, or a sample of the items whole")
    bytes_ratio: float = Field(description="this run's stored bytes per checkpoint over the full size's")
    this_run: SizeFigures = Field(description="this run's checkpoint")
    full_size: SizeFigures = Field(description="the full size's")
    projected_full_size: Projection | None = Field(None, description="this run's times at the full size")
    full_size_load_bytes_read: int | None = Field(None, description="what one load reads at the full size, as "
                                                  "the layout's restore reads it (io.restore.bytes_read there): a "
                                                  "sweep over checkpoint.scale projects the load to it")
    load_bytes_ratio: float | None = Field(None, description="what one load reads here over what it reads at the "
                                           "full size (io.restore.bytes_read over full_size_load_bytes_read)")


class Reference(Section):
    """``checkpoint.reference``: whose I/O the run did as that tool does it."""

    name: str = Field(description="the preset")
    tool: str = Field(description="the tool it stands for")
    sets: dict[str, Any] = Field(description="the keys the preset set, and their values")
    differences: list[str] = Field(description="what we still do otherwise")


class Placement(Section):
    """``hosts.simulate``: which pretend host each process was on."""

    simulated: bool = Field(description="whether the hosts are pretend ones")
    hosts: dict[str, list[int]] = Field(description="each host's processes")


class TierDescription(Section):
    """One storage tier of a tiered run (tier 0: where it saves)."""

    written_as_null: ClassVar[frozenset[str]] = frozenset({"keep_last"})

    tier: int = Field(description="its position, 0 first")
    storage_type: str = Field(description="its storage_type")
    storage_root: str = Field(description="its storage_root")
    scope: str = Field(description="shared, node (each host its own copy) or peer (kept by other hosts)")
    replicas: int | None = Field(None, description="peer tiers: how many other hosts keep each host's part")
    replication: str | None = Field(None, description="peer tiers: ring or clique")
    keep_last: int | None = Field(None, description="the newest steps it keeps; null: all")
    steps_durable: list[int] = Field(description="the steps marked durable there at the end")
    memory_bytes_per_host: int | None = Field(None, description="memory tiers: host memory it takes")
    storage: dict[str, Any] = Field(description="its storage's own account")


class IO(Section):
    """How the run did its I/O: what every mode says alike (storage, fsync, read cache), then the mode's own
    keys (the emulated mode's layout and plan, a real mode's writer)."""

    storage_type: str | None = Field(None, description="the checkpoints' storage backend")
    storage: dict[str, Any] | None = Field(None, description="the backend's own account (root or bucket, threads, "
                                                             "queue depths, client...; never credentials)")
    checkpoint_folder: str | None = Field(None, description="where the steps were")
    fsync: str | bool | None = Field(None, description="what checkpoint.fsync did on this storage, in words; false: "
                                                       "nothing synced")
    read_cache: str | None = Field(None, description="where reads could have been served from: evicted, allowed, "
                                                     "odirect, server, none")
    layout: str | None = Field(None, description="emulated: whose files (dlio, megatron, dcp, deepspeed)")
    format: str | None = Field(None, description="the files' format")
    checkpoint_io: str | None = Field(None, description="lightning: the CheckpointIO that wrote")
    dataflux_multipart: bool | None = Field(None, description="lightning with dataflux: multipart uploads")
    writer: str | None = Field(None, description="fsdp: DCP's storage writer")
    thread_count: int | None = Field(None, description="fsdp: DCP writer threads per process")
    async_save: bool | None = Field(None, description="fsdp: whether saves were dcp.async_save")
    primary_path: str | None = Field(None, description="gds: the path whose times fill the checkpoints")
    paths: dict[str, dict[str, Any]] | None = Field(None, description="gds: each path's figures, or why it was "
                                                                      "skipped")
    odirect: bool | None = Field(None, description="emulated: O_DIRECT")
    verified: bool | str | None = Field(None, description="whether (or how) what was read was checked")
    bytes_read_note: str | None = Field(None, description="fsdp: how a load's bytes are counted")
    recovery_rank_shift: bool | None = Field(None, description="emulated: loads read another host's files")
    scale: float | None = Field(None, description="emulated: checkpoint.scale")
    chunk_size: int | None = Field(None, description="emulated: bytes per write or read")
    io_pattern: Literal["framework", "stream"] | None = Field(
        None, description="emulated: how the saves wrote: as the layout's framework does, or the tuned stream")
    framework_writer: str | None = Field(None, description="emulated, io_pattern framework: whose calls were played")
    writer_threads_per_process: int | None = Field(None, description="emulated, io_pattern framework: threads "
                                                   "writing each process's files")
    io_buffer_bytes_per_process: int | None = Field(None, description="emulated: the engine's buffers")
    data_reduction: dict[str, float | str] | None = Field(
        None, description="emulated: what a storage may reduce the data by, as asked (compression_ratio, dedup_ratio: "
        "2, it may store half; both 1, irreducible; data_values: random, irreducible, or torch_rand, torch.rand's "
        "values of each file's datatype, which an entropy coder shrinks by their exponents)")
    tiers: list[TierDescription] | None = Field(None, description="tiered runs: each tier")
    read_tier: int | None = Field(None, description="tiered runs: the tier loads read")
    placement: Placement | None = Field(None, description="simulated hosts")
    reference: Reference | None = Field(None, description="checkpoint.reference, where one was followed")
    restore: RestoreFigures | None = Field(None, description="emulated runs that load: what the load needs and reads")
    scaled: Scaled | None = Field(None, description="emulated runs below full size")


class RequestsSeen(Section):
    """Object stores: every request the run's storage clients made, by kind."""

    outside_checkpoints: dict[str, RequestKind] = Field(description="storage checks, manifests and clean-up")
    note: str = Field(description="what the figures are")
    during_checkpoints: dict[str, RequestKind] | None = Field(None, description="the checkpoints' (each one's are in "
                                                                                "checkpoints[])")


class Goodput(Section):
    """``checkpoint.mtbf_hours``: what checkpointing costs training at the measured times (Young/Daly)."""

    mtbf_hours: float = Field(description="the job's mean time between failures")
    interval_seconds: float = Field(description="training between checkpoints")
    held_seconds_per_checkpoint: float = Field(description="training held per checkpoint (the save, or an async "
                                                           "save's hold)")
    time_to_durable_seconds: float = Field(description="until a checkpoint is durable where a restart reads it")
    load_seconds: float = Field(description="a restart's load")
    lost_per_failure_seconds: float = Field(description="work lost per failure: interval/2 + durable + load")
    goodput: float = Field(description="the share of time that is training")
    optimal_interval_seconds: float = Field(description="Young/Daly's interval: sqrt(2 * held * MTBF)")
    lost_per_failure_at_optimal_seconds: float = Field(description="work lost per failure at that interval")
    goodput_at_optimal: float = Field(description="goodput at that interval")
    formulas: str = Field(description="the formulas, in words")
    durable_on_tiers: list[int] | None = Field(None, description="the tiers a restart reads, where durable counts")


class RestoreSource(Section):
    """A restore with lost hosts: who read from one tier."""

    tier: int = Field(description="the tier")
    hosts: list[str] = Field(description="the hosts that read there")
    processes: list[int] = Field(description="the processes that read there")
    bytes: int = Field(description="what they read over all loads")
    seconds: float = Field(description="the slowest of them over all loads")


class AsyncSave(Section):
    """Emulated asynchronous saves: how the copy to host memory and training were emulated."""

    staging: str = Field(description="modelled (a rate) or real (a copy)")
    training: str = Field(description="how training between checkpoints was emulated")
    staging_gb_per_second: float | None = Field(None, description="modelled staging: the copy's rate per process")
    staging_bytes_per_process: list[int] | None = Field(None, description="real staging: each process's bytes")


class TrainingMemory(Section):
    """``checkpoint.training_memory_gb``: the host memory each process wrote afresh in every training interval, and
    what writing it took (the interval's time, not a save's)."""

    gb_per_process: float = Field(description="GB each process wrote afresh at the start of each interval")
    seconds_max: list[float] = Field(description="per interval, in order, the slowest process's seconds writing it")
    interval_seconds: float = Field(description="the interval asked for (time_between_checkpoints): where writing "
                                    "took longer, the interval ran that much longer")


class ProcessRetries(Section):
    """One process's files redone."""

    save: int = Field(description="during saves")
    load: int = Field(description="during loads")


class Retries(Section):
    """Files redone after a transient storage error."""

    save: int = Field(description="during saves, all processes")
    load: int = Field(description="during loads, all processes")
    per_process: list[ProcessRetries] = Field(description="by process")
    note: str = Field(description="what is and is not counted")


# -- the file --------------------------------------------------------------------------------------------

class Summary(Section):
    """A finished run's ``summary.json``: ours (``status`` "ok", ``checkpoints``) or DLIO's (its keys alone).
    Fields are in the order our runs write them; DLIO's keys that we do not write follow."""

    written_as_null: ClassVar[frozenset[str]] = frozenset({"accelerator_type"})

    workload: str | None = Field(None, description="the workload's name")
    run_id: str | None = Field(None, description="this run's id; each per-process file names it too")
    world_size: int | None = Field(None, description="the job's ranks (the load's in a read-only run at another "
                                                     "world size)")
    run_dir: str | None = Field(None, description="the run folder")
    command: str | None = Field(None, description="the command line, credentials redacted")
    invocation_start_time: str | None = Field(None, description="when this invocation began, local time (mlpstorage's "
                                                                "name)")
    accelerator_type: str | None = Field(None, description="workload.accelerator_type; null: none declared")
    file_systems: FileSystems | None = Field(None, description="the checkpoints' and results' file systems")
    status: Literal["ok"] | None = Field(None, description="ok: the run finished (a failed run's file is a "
                                                          "FailedSummary); absent in DLIO's")
    num_processes: int | None = Field(None, description="MPI processes (each may act as several ranks)")
    num_hosts: int | None = Field(None, description="DLIO's: hosts the processes ran on")
    hostname: str | None = Field(None, description="DLIO's: rank 0's host")
    start: str | None = Field(None, description="DLIO's: when the timed run began, local time, ISO 8601")
    end: str | None = Field(None, description="DLIO's: when it ended")
    invocation_end_time: str | None = Field(None, description="when this invocation ended, local time")
    host_memory_GB: list[float] | float | None = Field(None, description="DLIO's: each host's memory, in GiB")
    hosts: dict[str, HostShare] | None = Field(None, description="each host by name: its processes and memory")
    memory: MemoryFigures | None = Field(None, description="the benchmark's own memory")
    mode: str | None = Field(None, description="emulated, lightning, fsdp or gds")
    num_accelerators: int | None = Field(None, description="DLIO's: the simulated accelerators (the job's ranks)")
    save_world_size: int | None = Field(None, description="the save's ranks, where the run saved")
    load_world_size: int | None = Field(None, description="the load's ranks, where the run loaded")
    io: IO | None = Field(None, description="how the I/O was done")
    requests: RequestsSeen | None = Field(None, description="object stores: the run's requests")
    goodput: Goodput | None = Field(None, description="checkpoint.mtbf_hours: what checkpointing costs training")
    restore_sources: list[RestoreSource] | None = Field(None, description="restores with lost hosts: where each "
                                                                          "read")
    async_save: AsyncSave | bool | None = Field(None, description="emulated: false, or how async saves were emulated")
    retries: Retries | None = Field(None, description="emulated: files redone after transient errors")
    training_memory: TrainingMemory | None = Field(None, description="emulated, checkpoint.training_memory_gb: the "
                                                   "memory each training interval wrote afresh")
    per_process: list[dict[str, Any]] | None = Field(None, description="real modes: each process's own facts "
                                                                       "(set-up time, versions...)")
    metric: Metric = Field(description="DLIO's means and ours")
    checkpoints: Checkpoints | None = Field(None, description="ours: each checkpoint's figures; absent in DLIO's")
    latency: RunLatency | None = Field(None, description="ours: the run's storage calls, timed one by one")
    # DLIO's keys that our runs do not write (DLIO's StatsCounter)
    num_files_train: int | None = Field(None, description="DLIO's: training files")
    num_files_eval: int | None = Field(None, description="DLIO's: evaluation files")
    num_samples_per_file: int | None = Field(None, description="DLIO's: samples per file")
    host_cpu_count: list[int] | int | None = Field(None, description="DLIO's: each host's CPUs")
    host_processor_name: str | None = Field(None, description="DLIO's: platform.processor()")
    potential_caching: list[int] | bool | None = Field(None, description="DLIO's: per host, 1 where the data fits "
                                                                         "in its memory")
    host_cpuinfo: dict[str, str] | None = Field(None, description="DLIO's: /proc/cpuinfo of rank 0's host")
    host_meminfo: dict[str, str] | None = Field(None, description="DLIO's: /proc/meminfo of rank 0's host")
    data_size_per_host_GB: float | None = Field(None, description="DLIO's: training data per host, GiB")
    epochs: int | None = Field(None, description="DLIO's: training epochs run")

    @property
    def ours(self) -> bool:
        """Whether dlio_ckpt wrote it (it has our per-checkpoint figures), not DLIO."""
        return self.checkpoints is not None

    @property
    def processes(self) -> int | None:
        """The run's processes: ours counts them, DLIO's one per simulated accelerator."""
        return self.num_processes if self.num_processes is not None else self.num_accelerators


class FailedSummary(Section):
    """A run that failed: who, where and why, and no figures (``status`` "failed"). Every run writes all of its
    fields but the steps'; a reader asks for none but ``status``, so that any failed run's file is refused
    for what it is, saying why where it can."""

    written_as_null: ClassVar[frozenset[str]] = frozenset({"run_id"})

    status: Literal["failed"] = Field(description="failed")
    run_id: str | None = Field(None, description="the run's id; null when it failed before one was drawn")
    reason: str | None = Field(None, description="who failed, during what, and why")
    failed_rank: int | None = Field(None, description="the rank that saw the fault")
    host: str | None = Field(None, description="its host")
    during: str | None = Field(None, description="the phase (and step) it was in")
    time: str | None = Field(None, description="when, local time")
    note: str | None = Field(None, description="what a failed run's files mean")
    steps_committed: list[int] | None = Field(None, description="emulated: steps whose manifest was written")
    steps_durable_per_tier: dict[str, list[int]] | None = Field(None, description="tiered runs: the steps marked on "
                                                                                  "each tier")


def read_summary(data: dict[str, Any]) -> Summary | FailedSummary:
    """A parsed ``summary.json``: a failed run's, or a finished one's (ours or DLIO's). Raises pydantic's
    ``ValidationError`` where it is neither."""
    if data.get("status") == "failed":
        return FailedSummary.model_validate(data)
    return Summary.model_validate(data)


def written(summary: Section) -> dict[str, Any]:
    """What ``summary.json`` holds for ``summary``: its keys as the file names them (``async``), fields that do
    not apply left out. Python values, not JSON ones, so that NaN stays NaN and the strict writer refuses it
    (pydantic's JSON mode would write it as null)."""
    return summary.model_dump(by_alias=True)
