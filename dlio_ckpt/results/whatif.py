"""``dlio_ckpt plan``'s what-if: before buying storage, what checkpointing this workload would cost training at
bandwidths and a failure rate one assumes, from the plan's sizes alone (nothing is written or measured).

Why here, beside :mod:`dlio_ckpt.results.goodput`: it is goodput's arithmetic fed with assumed times (the plan's
bytes over the assumed bandwidths) rather than measured ones, so it belongs with it and not with the command line,
which only parses the flags and prints what :func:`what_if` returns. Its messages name each input by plan's flag
(``--write-bandwidth='1GB/s': ...``), the only way one is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlio_ckpt.config import Checkpoint
from dlio_ckpt.errors import ConfigError
from dlio_ckpt.results import goodput

if TYPE_CHECKING:
    from dlio_ckpt.config import Workload
    from dlio_ckpt.plan.types import Plan


@dataclass(frozen=True)
class Rate:
    """A bandwidth in both forms it is needed in: as the user wrote it (``given``, ``20GB/s``: a message quotes
    it as typed) and in bytes per second (the arithmetic)."""

    given: str
    bytes_per_second: float


@dataclass(frozen=True)
class Assumptions:
    """What the user assumes (None: not assumed). Each field is named as plan's flag is, ``write_bandwidth`` for
    ``--write-bandwidth``, so a message can name the flag the user typed."""

    write_bandwidth: Rate | None = None
    read_bandwidth: Rate | None = None
    mtbf_hours: float | None = None
    drain_bandwidth: Rate | None = None
    interconnect_bandwidth: Rate | None = None
    hosts: int | None = None  # the hosts a peer tier spreads over (default: the workload's hosts.simulate)


# What the goodput needs, and what asks for it; a bandwidth alone gives its own time (the save's, the load's).
_GOODPUT_NEEDS = ("write_bandwidth", "read_bandwidth", "mtbf_hours")
_GOODPUT_ASKED_BY = ("mtbf_hours", "drain_bandwidth", "interconnect_bandwidth")
# The goodput's interval: the training between two checkpoints, as a run of the workload waits it.
INTERVAL_KEY = "workload.checkpoint.time_between_checkpoints"


def _flag(field: str) -> str:
    """The command-line flag of an :class:`Assumptions` field (``write_bandwidth``: ``--write-bandwidth``)."""
    return "--" + field.replace("_", "-")


def _as_given(value: Rate | float | int | None) -> str | float | int | None:
    """A value as the user typed it, for a message (a rate's text, not its bytes per second)."""
    return value.given if isinstance(value, Rate) else value


def what_if(assumed: Assumptions, workload: Workload, plan: Plan, restore: dict[str, Any] | None,
            ) -> dict[str, Any] | None:
    """Times from the checkpoint's size and the bandwidths assumed; None when nothing is. A write bandwidth alone
    gives the save's time (the checkpoint over it, as DLIO's save throughput counts it); a read bandwidth alone the
    load's, from the restore's reads (``restore``: what :func:`dlio_ckpt.results.restore.described` says of the load
    a run of this workload reads, its heaviest rank's bytes; None: each rank reads its own files whole). With both and
    an MTBF, the goodput over the interval ``INTERVAL_KEY`` (:func:`dlio_ckpt.results.goodput.what_if` says what
    follows from them, stalls and drains included). Inputs that cannot give an answer are refused (exit 2) naming
    the flag, as every bad input is."""
    if assumed.hosts is not None and assumed.interconnect_bandwidth is None:
        raise ConfigError("--hosts", assumed.hosts, "is the what-if's host count for --interconnect-bandwidth; "
                          "give that too, or leave --hosts out")
    goodput_asked = [name for name in _GOODPUT_ASKED_BY if getattr(assumed, name) is not None]
    read, write = assumed.read_bandwidth, assumed.write_bandwidth
    if not goodput_asked and read is None and write is None:
        return None
    missing = [name for name in _GOODPUT_NEEDS if getattr(assumed, name) is None] if goodput_asked else []
    if missing:
        first = goodput_asked[0]
        raise ConfigError(_flag(first), _as_given(getattr(assumed, first)), f"the goodput what-if needs "
                          f"{' and '.join(map(_flag, missing))} too (goodput follows from the write's and the load's "
                          "times and the MTBF); --write-bandwidth alone gives the save's time, --read-bandwidth "
                          "alone the load's")
    size = plan.total_payload_bytes
    save = {"write_seconds": size / write.bytes_per_second} if write is not None else {}
    heaviest, ranks, load_from = _load_reads(restore)
    load = goodput.load_seconds(size, read.bytes_per_second, heaviest, ranks) if read is not None else None
    if not goodput_asked:  # a bandwidth or two alone: the save's time, the load's, no goodput asked
        return {"checkpoint_bytes": size, **save, **({**load_from, "load_seconds": load} if load is not None else {})}
    mtbf_hours = assumed.mtbf_hours
    assert write is not None and load is not None and mtbf_hours is not None  # in _GOODPUT_NEEDS, checked above
    if mtbf_hours <= 0:
        raise ConfigError("--mtbf-hours", mtbf_hours, "must be > 0")
    ck = workload.checkpoint
    staging = max(r.payload_bytes for r in plan.ranks) / (ck.staging_gb_per_second * 1e9) if ck.async_save else None
    drain = size / assumed.drain_bandwidth.bytes_per_second if assumed.drain_bandwidth is not None else None
    peer = _peer_what_if(assumed.interconnect_bandwidth, assumed.hosts, workload, size) \
        if assumed.interconnect_bandwidth is not None else None
    if peer is not None:  # durable for a restart after a host is lost once the peers have their copies
        drain, load = peer["replicate_seconds"], max(load, peer["lost_host_restore_seconds"])
    figures = goodput.what_if(ck.time_between_checkpoints, save["write_seconds"], load, mtbf_hours, staging, drain)
    out: dict[str, Any] = {"checkpoint_bytes": size, **({"peer": peer} if peer else {}), **load_from}
    for key, value in figures.items():
        out[key] = value
        if key == "interval_seconds":  # the key it came from beside it: the goodput turns on it
            out["interval_from"] = _interval_from(ck.time_between_checkpoints)
    return out


def _interval_from(seconds: float) -> str:
    """Where the goodput's interval comes from, in words: its key, and DLIO's default where it is that."""
    default = Checkpoint.model_fields["time_between_checkpoints"].default
    said = f"{INTERVAL_KEY}={seconds:g} s"
    if seconds == default:
        return f"{said}, DLIO's default: set it to the job's training time between checkpoints"
    return said


def _load_reads(restore: dict[str, Any] | None) -> tuple[int | None, int | None, dict[str, Any]]:
    """What a load reads: (the heaviest rank's bytes, the load's ranks) of a restore planned otherwise, (None, None)
    when each rank reads its own files whole; and the lines that say which the load's time comes from."""
    if not restore:
        return None, None, {"load_seconds_from": "the checkpoint / --read-bandwidth (each rank reads its own files "
                                                 "whole)"}
    heaviest, ranks = restore["bytes_read_per_rank"]["max"], restore["world_size"]
    return heaviest, ranks, {
        "load_ranks": ranks, "load_heaviest_rank": restore["heaviest_rank"], "load_heaviest_rank_bytes_read": heaviest,
        "load_seconds_from": "the heaviest rank's bytes read x the load's ranks / --read-bandwidth (the bandwidth "
                             "shared evenly; the load ends with its heaviest rank)"}


def _peer_what_if(link: Rate, hosts_given: int | None, workload: Workload, size: int) -> dict[str, Any]:
    """A node tier with a peer tier below it: each host sends ``replicas`` copies of its part (the
    checkpoint over the hosts) over its link while it receives as many (a full-duplex link), and a lost
    host's replacement gets its part back over its link while the others read their own copy."""
    peers = [st for st in workload.tiers if st.scope == "peer"]
    if not peers:
        raise ConfigError("--interconnect-bandwidth", link.given, "needs a peer tier in workload.tiers (scope: peer) "
                          "to replicate to")
    hosts = hosts_given or workload.hosts.simulate
    if not hosts or hosts <= peers[0].replicas:
        raise ConfigError("--hosts", hosts, f"must be more than the peer tier's replicas ({peers[0].replicas}): "
                          "give the hosts the job runs on")
    part = size / hosts
    return {"hosts": hosts, "replicas": peers[0].replicas, "bytes_per_host": part,
            "replicate_seconds": peers[0].replicas * part / link.bytes_per_second,
            "lost_host_restore_seconds": part / link.bytes_per_second}
