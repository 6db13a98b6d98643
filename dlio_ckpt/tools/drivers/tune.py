"""``python -m dlio_ckpt tune workload=NAME [storage keys]``: the settings at which this storage
saves and loads the workload's own files fastest, and how close that comes to fio's best.

Why a command: the figure a storage team reads is worth something only at the storage's best
settings, and those differ by storage (an NVMe array wants many requests in flight, a network file
system large ones, an object store large parts and several objects at once). A sweep over the
storage's own axes (``registry.BACKENDS``' ``tuning``) finds them; bounded in bytes (the workload is
scaled to ``--max-gib`` per point) and in time (no point starts after ``--max-seconds``). Each point
is an ordinary sweep point (its own folder, its summary.json). One point is one sample of a noisy
figure (the page cache, another job, a server's background work), so the leading points of the grid
(:func:`finalists`) are run again, alternating, until each has :data:`SAMPLES` samples (points of the
same size, started no later than ``--max-seconds`` either), and the winner is the least median save
plus load time; every sample is printed and kept in ``tune.json``. The winner
is printed as overrides to paste and as the command that reproduces it, with this environment's own
Python and mpiexec. On a file system with fio installed, fio's best
configuration (:mod:`dlio_ckpt.tools.drivers.fio`) is found on the same folder with the winner's bytes per process
and the winner's durability (O_DIRECT, or buffered with the workload's fsync), and the ratios printed.
A key the user sets (fixed, or a list of their own) replaces that axis.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import socket
import statistics
import sys
import time
from typing import Any

from dlio_ckpt.cluster.comm import Comm
from dlio_ckpt.config import Workload, compose, parse_overrides
from dlio_ckpt.errors import ConfigError
from dlio_ckpt.io.backends import get_backend
from dlio_ckpt.plan.layouts import check_job, make_plan
from dlio_ckpt.registry import BACKENDS
from dlio_ckpt.run.launch import redact
from dlio_ckpt.tools.drivers import fio
from dlio_ckpt.tools.drivers.sweep import FIRST_POINT, Point, grid, short_key, sweep

GIB = 1 << 30
FIXED = {"checkpoint.num_checkpoints_write": 1, "checkpoint.num_checkpoints_read": 1,
         "checkpoint.time_between_checkpoints": 0}  # one save and one load per point, back to back
# what the storage can do is the tuned stream's: a framework's own calls take none of the settings tune tries
STREAM = "checkpoint.io_pattern=stream"
# the keys tune sets itself; the user's values of them are dropped
OURS = {*FIXED, "checkpoint.scale", "checkpoint.io_pattern"}
FIO_SECONDS = 2  # at most, per fio point (72 of them at most)
SAMPLES = 3  # each finalist's, the first pass's included: the median of 3 outvotes one lucky or unlucky run
FINALISTS = (2, 3)  # the best quarter of the points that ran, at least 2 and at most 3 (but never more than ran)
MPIEXEC_PLACEHOLDER = "<mpiexec-of-the-MPI-mpi4py-uses>"


def point_size(workload: Workload, world: int, max_gib: float) -> tuple[float, int]:
    """The scale of tune's points (the workload's, or less, so that a point writes about ``max_gib``) and the bytes
    a point writes, as planned: a sample of whole items (``checkpoint.miniature=sample``) may hold more than the
    scale's share (at least an item on each rank it keeps)."""
    ck = workload.checkpoint
    planned = make_plan(workload, world)
    scale = min(ck.scale, max_gib * GIB / (planned.full_size or planned).total_payload_bytes)
    point = planned if scale == ck.scale else \
        make_plan(workload.model_copy(update={"checkpoint": ck.model_copy(update={"scale": scale})}), world)
    return scale, point.total_payload_bytes


def _key(override: str) -> str:
    return short_key(override.partition("=")[0])


def run_tune(overrides: list[str], config_dir: str | None, comm: Comm, world_size: int | None,
             max_gib: float, max_seconds: float, use_fio: bool) -> int:
    """Exit status as a sweep's: 0 when every point ran, the finalists' re-runs too (2, raised, for bad input)."""
    start = time.time()
    single = _fixed(overrides)
    workload, _, _ = compose(single, config_dir)  # the swept keys' values: checked by the sweep
    storage, ck = workload.storage, workload.checkpoint
    entry = BACKENDS[storage.storage_type]
    if not entry.tuning:
        raise ConfigError("workload.storage.storage_type", storage.storage_type, "tune has no settings to try "
                          f"there; it tunes {', '.join(n for n, e in BACKENDS.items() if e.tuning)}")
    if max_gib <= 0:
        raise ConfigError("--max-gib", max_gib, "must be more than 0")
    if max_seconds <= 0:
        raise ConfigError("--max-seconds", max_seconds, "must be more than 0")
    world = world_size or comm.size
    check_job(workload, world, comm.size)
    backend = get_backend(storage.storage_type, storage.storage_root, storage.storage_options)
    given = {_key(o) for o in overrides}
    user_fixed = {_key(o) for o in single}  # a user's list (k=a,b) replaces that axis's values
    axes = [k for k, _ in entry.tuning if k not in user_fixed and _applies(k, backend)]
    if not axes:
        raise ConfigError("tune", " ".join(overrides), "every setting tune tries is fixed by the overrides: leave "
                          f"one of {', '.join(k for k, _ in entry.tuning)} out, or give it a list (k=a,b)")
    scale, point_bytes = point_size(workload, world, max_gib)
    free = backend.free_bytes(backend.join(ck.checkpoint_folder))
    if free is not None and free < point_bytes * 1.05:
        raise ConfigError("--max-gib", max_gib, f"a point writes {point_bytes / GIB:.2f} GiB and the storage under "
                          f"{backend.join(ck.checkpoint_folder)} has {free / GIB:.2f} GiB free: lower --max-gib")
    kept = [o for o in overrides if _key(o) not in OURS]
    ours = [f"++workload.{k}={v}" for k, v in FIXED.items()] + [f"++workload.checkpoint.scale={scale}",
                                                                  f"++workload.{STREAM}"]
    swept = [f"++workload.{k}={','.join(str(v) for v in values)}" for k, values in entry.tuning
             if k in axes and k not in given]
    sizes = str(world_size) if world_size else None
    deadline = start + max_seconds
    outcome = sweep(kept + ours + swept, sizes, config_dir, comm, deadline=deadline)
    chosen = comm.bcast(finalists(outcome.rows) if comm.rank == 0 else None)  # rows: rank 0's
    again = None
    if chosen:
        rerun_dir, points = _rerun_points(grid(kept + ours + swept, sizes, config_dir), chosen, outcome.sweep_dir)
        if comm.rank == 0:
            print(f"\ntune: running the best {len(chosen)} points ({', '.join(map(str, chosen))}) again, alternating, "
                  f"for {SAMPLES} samples each; the winner is the least median save + load time", flush=True)
        again = sweep(kept + ours + [f"++hydra.sweep.dir={rerun_dir}"], sizes, config_dir, comm, deadline=deadline,
                      points=points)
    status = max(outcome.status, again.status if again else 0)  # a re-run failed or not reached: as a sweep's
    if comm.rank != 0:
        comm.barrier()
        return status
    try:
        same = [o for o in single if _key(o) not in OURS and _key(o) not in axes
                and not _key(o).startswith("hydra.sweep.")]
        _report(outcome, chosen, again.rows if again else [], same + ours + (["--world-size", sizes] if sizes else []),
                axes, entry.local_folder and use_fio, backend, ck, comm.size)
    finally:
        comm.barrier()
    return status


def finalists(rows: list[dict[str, Any]]) -> list[int]:
    """The first pass's leading points (their numbers, best first): the best quarter of those that ran,
    :data:`FINALISTS` bounding how many. Why more than one: a single sample's rank among close settings is
    chance; why so few: each costs ``SAMPLES - 1`` more points of the same size."""
    ok = sorted(_finished(rows), key=_seconds)
    low, high = FINALISTS
    return [r["point"] for r in ok[:min(len(ok), max(low, min(high, math.ceil(len(ok) / 4))))]]


def _finished(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["status"] == "ok" and "load_seconds" in r]


def _seconds(row: dict[str, Any]) -> float:
    """What tune minimises: one save plus one load, in seconds."""
    return row["save_seconds"] + row["load_seconds"]


def _rerun_points(points: list[Point], chosen: list[int], sweep_dir: str) -> tuple[str, list[Point]]:
    """The re-runs of the chosen points, ``SAMPLES - 1`` rounds, in a sweep folder of their own inside
    the first pass's (named by the points, so a resumed tune finds its own). The order alternates
    (1 2 3, 3 2 1...): a drift over time (a cache filling, a neighbour starting) then weighs on every
    finalist alike. Each keeps its settings and says which first-pass point and which sample it is."""
    rerun_dir = os.path.join(sweep_dir, "finalists_" + "_".join(map(str, chosen)))
    order = [n for round_ in range(SAMPLES - 1) for n in (chosen[::-1] if round_ % 2 else chosen)]
    seen: dict[int, int] = {}
    out = []
    for i, number in enumerate(order, start=FIRST_POINT):
        first = points[number - FIRST_POINT]
        seen[number] = sample = seen.get(number, 1) + 1
        out.append(Point(i, {"finalist": str(number), "sample": str(sample), **first.values},
                         [o for o in first.overrides if not _key(o).startswith("hydra.sweep.")]
                         + [f"++hydra.sweep.dir={rerun_dir}"], first.world_size))
    return rerun_dir, out


def reproduce_command(processes: int, args: list[str]) -> list[str]:
    """The command that runs ``args`` again as this run ran: this Python (a bare ``python`` may lack
    dlio_ckpt) under the mpiexec beside it, the MPI mpi4py was built with (a Debian mpiexec on PATH
    belongs to another MPI, and its processes would each be a world of one); a placeholder where this
    environment has none."""
    launcher = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if processes > 1:
        launch = [launcher if os.path.exists(launcher) else MPIEXEC_PLACEHOLDER, "-n", str(processes)]
    else:
        launch = []
    return [*launch, sys.executable, "-m", "dlio_ckpt", *args]


def _fixed(overrides: list[str]) -> list[str]:
    """The overrides that set one value (not ``k=a,b`` lists of the user's own)."""
    return [o.input_line for o in parse_overrides(overrides) if not o.is_sweep_override()]


def _applies(key: str, backend: Any) -> bool:
    """An axis the storage can take: O_DIRECT only where it has it."""
    return key != "checkpoint.odirect" or backend.capabilities.odirect


def _report(outcome: Any, chosen: list[int], reruns: list[dict[str, Any]], fixed: list[str], axes: list[str],
            with_fio: bool, backend: Any, ck: Any, processes: int) -> None:
    ok = _finished(outcome.rows)
    result: dict[str, Any] = {"points": len(outcome.rows), "ok": len(ok), "chosen": chosen, "reruns": len(reruns),
                              "reruns_ok": len(_finished(reruns))}
    if not ok:
        print("tune: no point finished; see the sweep's log in " + outcome.sweep_dir, flush=True)
        _write(outcome.sweep_dir, result)
        return
    ranked = _medians([r for r in ok if r["point"] in chosen], reruns, axes)
    result["finalists"] = ranked
    print(f"\ntune: {len(ok)} points ran; the finalists by their median save + load time "
          f"(least first; {SAMPLES} samples each unless out of time):", flush=True)
    for f in ranked:
        spread = ", ".join(f"{s['save_seconds'] + s['load_seconds']:.3f}" for s in f["samples"])
        print(f"  point {f['point']} [{' '.join(f'{k}={v}' for k, v in f['settings'].items())}]: median "
              f"{f['median_seconds']:.3f} s of {len(f['samples'])} samples ({spread} s); save "
              f"{f['save_GiB_per_second']:.3f} GiB/s, load {f['load_GiB_per_second']:.3f} GiB/s (medians)")
    win = ranked[0]
    if len(win["samples"]) < SAMPLES:
        print(f"tune: the winner has {len(win['samples'])} of {SAMPLES} samples (--max-seconds reached): its "
              "place is less certain")
    paste = [f"++workload.{k}={v}" for k, v in win["settings"].items()] + [f"++workload.{STREAM}"]  # as swept
    # credentials given as overrides are shown and kept as '***' (launch.redact): give your own to re-run
    result |= {"winner": win, "overrides": paste, "reproduce": reproduce_command(processes, [*redact(fixed), *paste])}
    print(f"\ntune: the winner is point {win['point']}: save {win['save_GiB_per_second']:.3f} GiB/s, load "
          f"{win['load_GiB_per_second']:.3f} GiB/s (medians of {len(win['samples'])})", flush=True)
    print("settings to paste:  " + " ".join(paste))
    print("to reproduce the figure:  " + shlex.join(result["reproduce"]))
    if MPIEXEC_PLACEHOLDER in result["reproduce"]:
        print(f"  ({MPIEXEC_PLACEHOLDER}: no mpiexec beside {sys.executable}; use the one of the MPI that mpi4py "
              "was built with)")
    if with_fio and fio.available():
        odirect = str(win["settings"].get("checkpoint.odirect", ck.odirect)) == "True"
        result["fio"] = _fio(backend, ck, processes, int(win["checkpoint_GiB"] * GIB / processes), odirect,
                             ck.fsync, win)
    elif with_fio:
        result["fio"] = "fio is not installed: no yardstick"
        print("fio is not installed here: no yardstick (apt-get install fio)")
    _write(outcome.sweep_dir, result)


def _medians(finals: list[dict[str, Any]], reruns: list[dict[str, Any]], axes: list[str]) -> list[dict[str, Any]]:
    """Each finalist with all its samples that finished, the first pass's first, and their medians; the
    least median save + load time first. A finalist whose re-runs were not reached (``--max-seconds``)
    or failed has fewer samples, and says so."""
    again = _finished(reruns)
    out = []
    for first in finals:
        rows = [first, *(r for r in again if int(r["finalist"]) == first["point"])]
        samples = [{k: r[k] for k in ("save_seconds", "load_seconds", "save_GiB_per_s", "load_GiB_per_s", "run_dir")}
                   for r in rows]
        out.append({"point": first["point"], "settings": {k: first[k] for k in axes}, "samples": samples,
                    "median_seconds": statistics.median(_seconds(r) for r in rows),
                    "save_GiB_per_second": statistics.median(r["save_GiB_per_s"] for r in rows),
                    "load_GiB_per_second": statistics.median(r["load_GiB_per_s"] for r in rows),
                    # bytes read over the load's time: what fio's reads are compared with (a load may read more
                    # than the checkpoint it restores)
                    "load_read_GiB_per_second": statistics.median(r.get("load_read_GiB_per_s", r["load_GiB_per_s"])
                                                                  for r in rows),
                    "checkpoint_GiB": first["checkpoint_GiB"], "run_dir": first["run_dir"]})
    return sorted(out, key=lambda f: f["median_seconds"])


def _fio(backend: Any, ck: Any, processes: int, size: int, odirect: bool, fsync: bool,
         win: dict[str, Any]) -> dict[str, Any]:
    """fio's best on the checkpoint folder, in a folder of its own removed after."""
    folder = os.path.join(backend.join(ck.checkpoint_folder), f"tune_fio.{socket.gethostname()}.{os.getpid()}")
    os.makedirs(folder)
    try:
        best = fio.best(folder, processes, max(size // 4096 * 4096, 1 << 20), odirect, fsync and not odirect,
                        FIO_SECONDS)
    finally:
        os.rmdir(folder)
    out: dict[str, Any] = {"processes": processes, "bytes_per_process": size, "odirect": odirect,
                           "fsync": fsync and not odirect}
    for op, phase in (("write", "save"), ("read", "load")):
        speed, job = best[op]
        ratio = win["save_GiB_per_second" if phase == "save" else "load_read_GiB_per_second"] / speed
        out[op] = {"GiB_per_second": speed, "engine": job.engine, "iodepth": job.iodepth, "bs": job.bs,
                   f"{phase}_ratio": ratio}
        print(f"fio's best {op} here ({job}): {speed:.3f} GiB/s; the winner's {phase} is {ratio:.2f} of it")
    return out


def _write(sweep_dir: str, result: dict[str, Any]) -> None:
    with open(os.path.join(sweep_dir, "tune.json"), "w") as fh:
        json.dump(result, fh, indent=2)
