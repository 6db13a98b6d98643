"""``python -m dlio_ckpt tune workload=NAME [storage keys]``: the settings at which this storage
saves and loads the workload's own files fastest, and how close that comes to fio's best.

Why a command: the figure a storage team reads is worth something only at the storage's best
settings, and those differ by storage (an NVMe array wants many requests in flight, a network file
system large ones, an object store large parts and several objects at once). A sweep over the
storage's own axes (``backends.REGISTRY``'s ``tuning``) finds them; bounded in bytes (the workload is
scaled to ``--max-gib`` per point) and in time (no point starts after ``--max-seconds``). Each point
is an ordinary sweep point (its own folder, its summary.json); the winner, the least save plus load
time, is printed as overrides to paste. On a file system with fio installed, fio's best
configuration (:mod:`dlio_ckpt.fio`) is found on the same folder with the winner's bytes per process
and the winner's durability (O_DIRECT, or buffered with the workload's fsync), and the ratios printed.
A key the user sets (fixed, or a list of their own) replaces that axis.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import time
from typing import Any

from . import fio
from .backends import REGISTRY, get_backend
from .comm import Comm
from .config import check_world_size, compose, parse_overrides
from .errors import ConfigError
from .layouts import make_plan
from .sweep import short_key, sweep

GIB = 1 << 30
FIXED = {"checkpoint.num_checkpoints_write": 1, "checkpoint.num_checkpoints_read": 1,
         "checkpoint.time_between_checkpoints": 0}  # one save and one load per point, back to back
OURS = {*FIXED, "checkpoint.scale"}  # the keys tune sets itself; the user's values of them are dropped
FIO_SECONDS = 2  # at most, per fio point (72 of them at most)


def _key(override: str) -> str:
    return short_key(override.partition("=")[0])


def run_tune(overrides: list[str], config_dir: str | None, comm: Comm, world_size: int | None,
             max_gib: float, max_seconds: float, use_fio: bool) -> int:
    """Exit status as a sweep's: 0 when every point ran (2, raised, for bad input)."""
    start = time.time()
    single = _fixed(overrides)
    workload, _, _ = compose(single, config_dir)  # the swept keys' values: checked by the sweep
    storage, ck = workload.storage, workload.checkpoint
    entry = REGISTRY[storage.storage_type]
    if not entry.tuning:
        raise ConfigError("workload.storage.storage_type", storage.storage_type, "tune has no settings to try "
                          f"there; it tunes {', '.join(n for n, e in REGISTRY.items() if e.tuning)}")
    if max_gib <= 0:
        raise ConfigError("--max-gib", max_gib, "must be more than 0")
    if max_seconds <= 0:
        raise ConfigError("--max-seconds", max_seconds, "must be more than 0")
    world = world_size or comm.size
    check_world_size(workload, world, comm.size)
    backend = get_backend(storage.storage_type, storage.storage_root, storage.storage_options)
    given = {_key(o) for o in overrides}
    user_fixed = {_key(o) for o in single}  # a user's list (k=a,b) replaces that axis's values
    axes = [k for k, _ in entry.tuning if k not in user_fixed and _applies(k, backend)]
    if not axes:
        raise ConfigError("tune", " ".join(overrides), "every setting tune tries is fixed by the overrides: leave "
                          f"one of {', '.join(k for k, _ in entry.tuning)} out, or give it a list (k=a,b)")
    full = make_plan(workload, world).total_payload_bytes / ck.scale
    scale = min(ck.scale, max_gib * GIB / full)
    point_bytes = int(full * scale)
    free = backend.free_bytes(backend.join(ck.checkpoint_folder))
    if free is not None and free < point_bytes * 1.05:
        raise ConfigError("--max-gib", max_gib, f"a point writes {point_bytes / GIB:.2f} GiB and the storage under "
                          f"{backend.join(ck.checkpoint_folder)} has {free / GIB:.2f} GiB free: lower --max-gib")
    kept = [o for o in overrides if _key(o) not in OURS]
    ours = [f"++workload.{k}={v}" for k, v in FIXED.items()] + [f"++workload.checkpoint.scale={scale}"]
    grid = [f"++workload.{k}={','.join(str(v) for v in values)}" for k, values in entry.tuning
            if k in axes and k not in given]
    outcome = sweep(kept + ours + grid, str(world_size) if world_size else None, config_dir, comm,
                    deadline=start + max_seconds)
    if comm.rank != 0:
        comm.barrier()
        return outcome.status
    try:
        same = [o for o in single if _key(o) not in OURS and _key(o) not in axes
                and not _key(o).startswith("hydra.sweep.")]
        sizes = ["--world-size", str(world_size)] if world_size else []
        _report(outcome, same + ours + sizes, axes, entry.local_folder and use_fio, backend, ck, comm.size)
    finally:
        comm.barrier()
    return outcome.status


def _fixed(overrides: list[str]) -> list[str]:
    """The overrides that set one value (not ``k=a,b`` lists of the user's own)."""
    return [o.input_line for o in parse_overrides(overrides) if not o.is_sweep_override()]


def _applies(key: str, backend: Any) -> bool:
    """An axis the storage can take: O_DIRECT only where it has it."""
    return key != "checkpoint.odirect" or backend.capabilities.odirect


def _report(outcome: Any, fixed: list[str], axes: list[str], with_fio: bool,
            backend: Any, ck: Any, processes: int) -> None:
    ok = [r for r in outcome.rows if r["status"] == "ok" and "load_seconds" in r]
    result: dict[str, Any] = {"points": len(outcome.rows), "ok": len(ok)}
    if not ok:
        print("tune: no point finished; see the sweep's log in " + outcome.sweep_dir, flush=True)
        _write(outcome.sweep_dir, result)
        return
    win = min(ok, key=lambda r: r["save_seconds"] + r["load_seconds"])
    paste = [f"++workload.{k}={win[k]}" for k in axes]  # the swept keys, as the sweep recorded them
    result |= {"winner": {"point": win["point"], "settings": {k: win[k] for k in axes},
                          "save_GiB_per_second": win["save_GiB_per_s"], "load_GiB_per_second": win["load_GiB_per_s"],
                          "run_dir": win["run_dir"]}, "overrides": paste,
               "reproduce": [*(["mpiexec", "-n", str(processes)] if processes > 1 else []), "python", "-m",
                             "dlio_ckpt", *fixed, *paste]}
    print(f"\ntune: best of {len(ok)} points (least save + load time): point {win['point']}, "
          f"save {win['save_GiB_per_s']:.3f} GiB/s, load {win['load_GiB_per_s']:.3f} GiB/s", flush=True)
    print("settings to paste:  " + " ".join(paste))
    print("to reproduce the figure:  " + shlex.join(result["reproduce"]))
    if with_fio and fio.available():
        odirect = str(win.get("checkpoint.odirect", ck.odirect)) == "True"
        result["fio"] = _fio(backend, ck, processes, int(win["checkpoint_GiB"] * GIB / processes), odirect,
                             ck.fsync, win)
    elif with_fio:
        result["fio"] = "fio is not installed: no yardstick"
        print("fio is not installed here: no yardstick (apt-get install fio)")
    _write(outcome.sweep_dir, result)


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
    out = {"processes": processes, "bytes_per_process": size, "odirect": odirect, "fsync": fsync and not odirect}
    for op, phase in (("write", "save"), ("read", "load")):
        speed, job = best[op]
        ratio = win[f"{phase}_GiB_per_s"] / speed
        out[op] = {"GiB_per_second": speed, "engine": job.engine, "iodepth": job.iodepth, "bs": job.bs,
                   f"{phase}_ratio": ratio}
        print(f"fio's best {op} here ({job}): {speed:.3f} GiB/s; the winner's {phase} is {ratio:.2f} of it")
    return out


def _write(sweep_dir: str, result: dict[str, Any]) -> None:
    with open(os.path.join(sweep_dir, "tune.json"), "w") as fh:
        json.dump(result, fh, indent=2)
