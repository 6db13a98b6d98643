"""``python -m dlio_ckpt sweep``: a grid of settings (Hydra's multirun syntax: ``k=a,b``,
``k=range(a,b,step)``, ``k=choice(a,b)``, ``workload=glob(llama*)``; ``--world-size 2,4``) run point
after point inside one job, every rank taking part, each point an ordinary run with its own folder.

Why one job: a relaunch per point pays MPI start-up, imports and storage checks each time, and the
table of all points is what a person tuning storage reads. Every point is composed and validated
before the first runs (bad input: exit 2, nothing written). A point that fails (a fault, not input)
is recorded with its reason and the sweep goes on: on MPI each point has a communicator of its own
whose collectives a failing rank can abort (:class:`~dlio_ckpt.cluster.comm.PointComm`). Points whose
``summary.json`` says ``ok`` are skipped when the same sweep is run again into the same folder
(``++hydra.sweep.dir=...``), so an interrupted sweep resumes. Each point writes its checkpoints under
``<checkpoint_folder>/<sweep folder name>/point<i>``, removed after the point (``--keep-checkpoints``
keeps them), so points never mix.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

from dlio_ckpt.cluster.comm import Comm, MPIComm, PointAborted, PointComm, on_root, reported_by_another_rank
from dlio_ckpt.cluster.host import hostname, reset_peak_rss
from dlio_ckpt.config import Workload, available_workloads, compose, parse_overrides
from dlio_ckpt.errors import ConfigError, DlioCkptError
from dlio_ckpt.io.backends import Backend
from dlio_ckpt.plan.layouts import check_job
from dlio_ckpt.run.context import RunContext
from dlio_ckpt.run.failure import RunState, Watchdog, on_signals, say_error, write_failed_summary
from dlio_ckpt.run.launch import execute, probe_folder, redact, start
from dlio_ckpt.run.steps import remove_ours, survey
from dlio_ckpt.tools.drivers.sweep_files import projections, write_sweep_files

WORLD_SIZE = "world_size"  # the logical world size, swept with --world-size 2,4,8
FIRST_POINT = 1  # points are counted from 1 (sweep.json says so: earlier versions counted from 0)


@dataclass(frozen=True)
class Point:
    index: int  # counted from 1 everywhere: messages, folders (SWEEP/1), rows, checkpoint folders
    values: dict[str, str]  # swept key -> value, as given
    overrides: list[str]
    world_size: int | None

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.values.items())


def short_key(key: str) -> str:
    """An override's key as sweeps show it: without ``++``/``~`` and ``workload.``."""
    return key.lstrip("+~").removeprefix("workload.")


def grid(overrides: list[str], world_sizes: str | None, config_dir: str | None) -> list[Point]:
    """Every combination of the swept values, in order (the last key varies fastest)."""
    from hydra.core.override_parser.types import Glob

    parsed = parse_overrides(overrides)
    axes: list[tuple[str, list[str]]] = []
    fixed: list[str] = []
    for o in parsed:
        key = o.get_key_element()  # as written (++workload.a.b); shown without prefix and "workload."
        if not o.is_sweep_override():
            fixed.append(o.input_line)
        elif isinstance(o.value(), Glob):
            if o.key_or_group != "workload":
                raise ConfigError(key, o.input_line.partition("=")[2], "glob() sweeps workload names only")
            axes.append((key, o.value().filter(available_workloads(config_dir))))
        elif o.is_discrete_sweep():
            axes.append((key, list(o.sweep_string_iterator())))
        else:
            raise ConfigError(key, o.input_line.partition("=")[2], "has no finite list of points: use a comma "
                              "list, range() or choice()")
    try:
        sizes = [str(int(w)) for w in world_sizes.split(",")] if world_sizes else []
    except ValueError:
        raise ConfigError("--world-size", world_sizes, "must be an integer or a comma list of them") from None
    if len(sizes) > 1:
        axes.append((WORLD_SIZE, sizes))
    if not axes:
        raise ConfigError("sweep", " ".join(overrides), "sweeps nothing: give a key a list of values (k=a,b)")
    points = []
    for i, combo in enumerate(itertools.product(*(values for _, values in axes)), start=FIRST_POINT):
        given = dict(zip((k for k, _ in axes), combo, strict=True))
        size = given.pop(WORLD_SIZE, None) or (sizes[0] if sizes else None)
        shown = {short_key(k): v for k, v in given.items()}
        if len(sizes) > 1:  # a swept world size is shown with the point's values
            assert size is not None  # one of the sizes: an axis of every point
            shown = {**shown, WORLD_SIZE: size}
        points.append(Point(i, shown,
                            fixed + [f"{k}={v}" for k, v in given.items()], int(size) if size else None))
    return points


def validate(points: list[Point], config_dir: str | None, processes: int) -> list[tuple[Workload, dict]]:
    """Compose and check every point before any runs: bad input names the key, value and point."""
    out = []
    for p in points:
        try:
            workload, raw, _ = compose(p.overrides, config_dir)
            check_job(workload, p.world_size or processes, processes)
        except ConfigError as exc:
            raise ConfigError(exc.key, exc.value, f"{exc.rule} (sweep point {p.index}: {p.label})") from None
        out.append((workload, raw))
    return out


def _own_folder(workload: Workload, raw: dict, sweep_dir: str, index: int) -> tuple[Workload, dict]:
    """The point's checkpoints in a folder of their own, replaced if an interrupted attempt left it."""
    folder = f"{workload.checkpoint.checkpoint_folder.rstrip('/')}/{os.path.basename(sweep_dir)}/point{index}"
    ck = workload.checkpoint.model_copy(update={"checkpoint_folder": folder, "overwrite": True})
    raw = {**raw, "checkpoint": {**raw.get("checkpoint", {}), "checkpoint_folder": folder, "overwrite": True}}
    return workload.model_copy(update={"checkpoint": ck}), raw


def _finished(run_dir: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(run_dir, "summary.json")) as fh:
            summary = json.load(fh)
    except (OSError, ValueError):
        return None
    return summary if summary.get("status") == "ok" else None


@dataclass(frozen=True)
class Outcome:
    status: int  # 0 when every point ran, 1 when any failed or was not reached
    sweep_dir: str
    rows: list[dict[str, Any]]  # rank 0's: one per point run or skipped (the others': none)


def run_sweep(overrides: list[str], world_sizes: str | None, config_dir: str | None, comm: Comm,
              stop_on_failure: bool = False, keep_checkpoints: bool = False, deadline: float | None = None) -> int:
    """Exit status: 0 when every point ran, 1 when any failed (2, raised, for bad input)."""
    return sweep(overrides, world_sizes, config_dir, comm, stop_on_failure, keep_checkpoints, deadline).status


def sweep(overrides: list[str], world_sizes: str | None, config_dir: str | None, comm: Comm,
          stop_on_failure: bool = False, keep_checkpoints: bool = False, deadline: float | None = None,
          points: list[Point] | None = None) -> Outcome:
    """The sweep, and what it found. ``deadline`` (rank 0's ``time.time()``): no point starts after it.
    ``points``: run these instead of the grid of ``overrides`` (which ``sweep.json`` still records), for
    a list of chosen combinations that is no grid: tune's re-runs of its finalists; the folder is the
    first point's ``hydra.sweep.dir``."""
    points = points or grid(overrides, world_sizes, config_dir)
    checked = validate(points, config_dir, comm.size)
    state = RunState()
    on_signals(comm, state)  # SIGINT/SIGTERM end the whole sweep, as a run
    sweep_dir = os.path.abspath(comm.bcast(compose(points[0].overrides, config_dir, "sweep")[2]
                                           if comm.rank == 0 else None))
    on_root(comm, lambda: _open_folder(sweep_dir, points, overrides, world_sizes))
    timeouts = [w.checkpoint.io_timeout for w, _ in checked]
    watchdog = Watchdog(comm, state, max(timeouts)) if all(timeouts) else None
    rows: list[dict[str, Any]] = []
    failed = False
    for p, (workload, raw) in zip(points, checked, strict=True):
        if deadline is not None and comm.bcast(time.time() > deadline if comm.rank == 0 else None):
            _say(comm, sweep_dir, f"stopping before point {p.index}: out of time (--max-seconds)")
            failed = True
            break
        run_dir = os.path.join(sweep_dir, str(p.index))
        _say(comm, sweep_dir, f"sweep point {p.index} of {len(points)}: {p.label}")
        done = comm.bcast(_finished(run_dir) if comm.rank == 0 else None)
        if done is None:
            workload, raw = _own_folder(workload, raw, sweep_dir, p.index)
            if watchdog is not None:
                watchdog.timeout = workload.checkpoint.io_timeout
            reason, tiers = _run_point(p, workload, raw, run_dir, comm, state, watchdog)
            reasons = [r for r in comm.allgather(reason) if r]  # every rank leaves the point together
            if tiers and not keep_checkpoints:  # no rank writes into the point any more: each tier's acting
                _remove_checkpoints(tiers, workload.checkpoint.checkpoint_folder)  # rank, its own copy
            done = None if reasons else comm.bcast(_finished(run_dir) if comm.rank == 0 else None)
            failure = reasons[0] if reasons else None if done else "no summary.json was written"
        else:
            failure = None
            _say(comm, sweep_dir, f"  already done in {run_dir}: skipped")
        if comm.rank == 0:
            rows.append(_row(p, done, failure))
            line = write_sweep_files(sweep_dir, points, rows)
            _say(comm, sweep_dir, f"  {line}")
        failed = failed or failure is not None
        if failure is not None and stop_on_failure:
            _say(comm, sweep_dir, "stopping: --stop-on-failure")
            break
    if comm.rank == 0:
        if rows:  # none when out of time before the first point
            write_sweep_files(sweep_dir, points, rows, figures=True)
            for projection in projections(list(points[0].values), rows):
                for line in projection["lines"]:
                    _say(comm, sweep_dir, f"projected: {line}")
        _say(comm, sweep_dir, f"sweep done: {sum(r['status'] == 'ok' for r in rows)} of {len(points)} points ok; "
             f"results in {sweep_dir}")
    return Outcome(1 if failed else 0, sweep_dir, rows)


def _run_point(p: Point, workload: Workload, raw: dict, run_dir: str, comm: Comm, state: RunState,
               watchdog: Watchdog | None) -> tuple[str | None, list[Backend]]:
    """One point as an ordinary run; returns this rank's reason when the point failed here, and the
    storages it may have written to that this rank cleans up (rank 0 a shared tier, every host's acting
    rank its own copy of a node or peer tier; none when it failed before choosing them). On MPI the
    point's communicator is closed however the point ended, so no message of this point is still in
    flight when the next one starts (:meth:`~dlio_ckpt.cluster.comm.PointComm.close`), except when the job
    itself is ending (SystemExit, KeyboardInterrupt): the other ranks may never come to close it."""
    point_comm: Any = PointComm(comm) if isinstance(comm, MPIComm) else comm
    state.phase, state.step, state.file, state.run_dir, state.committed = "starting", None, None, None, None
    reset_peak_rss()
    ctx, job_ending = None, False
    outcome: tuple[str | None, list[Backend]] | None = None  # None below: the failure's own handling failed
    try:
        mode, ctx = start(workload, point_comm, p.world_size or comm.size, state, watchdog)
        execute(mode, ctx, run_dir, raw, p.overrides, ["sweep", *sys.argv[2:]], replace=True)  # a failed attempt's
        outcome = None, _cleaned_here(ctx)
    except PointAborted as exc:
        outcome = str(exc), _cleaned_here(ctx)
    except (SystemExit, KeyboardInterrupt):
        job_ending = True
        raise
    except BaseException as exc:  # a fault: this point fails on every rank, the sweep goes on
        text = str(exc) if isinstance(exc, DlioCkptError) else f"unexpected error: {traceback.format_exc()}"
        who = "rank 0" if reported_by_another_rank(exc, comm.rank) else f"rank {comm.rank} on {hostname()}"
        reason = f"{who}, during {state.where()}: {text}"
        if not reported_by_another_rank(exc, comm.rank):  # rank 0's own error, shared: rank 0 says it once
            say_error(f"sweep point {p.index} ({p.label}): {reason}")
            write_failed_summary(state, comm.rank, reason)
        if isinstance(point_comm, PointComm):
            point_comm.abort_point(reason)
        outcome = reason, _cleaned_here(ctx)
    finally:  # ok, failed or aborted: this rank's messages delivered, the point's communicator freed
        if isinstance(point_comm, PointComm) and not job_ending:
            # a failed point's drains may still wait
            point_comm.close(peers_idle=outcome is not None and outcome[0] is None)
    return outcome


def _cleaned_here(ctx: RunContext | None) -> list[Backend]:
    """The tiers whose copy of a point this rank removes after it."""
    return [b for k, b in enumerate(ctx.tiers) if ctx.acts_on(k)] if ctx is not None else []


def _remove_checkpoints(tiers: list[Backend], folder: str) -> None:
    """A point's checkpoints, on every tier: what the point wrote (its run record and manifests name
    it), then its folder and the sweep's folder above it where they are left empty."""
    for backend in tiers:
        try:
            remove_ours(backend, survey(backend, folder))
            backend.remove_empty(backend.join(folder))
            backend.remove_empty(backend.join(os.path.dirname(folder.rstrip("/"))))
        except DlioCkptError:
            pass  # what could not be removed stays; the next point has a folder of its own


def _row(p: Point, summary: dict[str, Any] | None, failure: str | None) -> dict[str, Any]:
    """A point's row of sweep.csv from its summary: DLIO's means (a load's GiB/s are the checkpoint's bytes
    over its duration, and the sweep judges loads by the duration: sweep_results.JUDGED_BY) and how much more
    the load's ranks read than they needed (``load_read_amplification``: ``io.restore.read_amplification``),
    which a point's load figures no longer show."""
    row: dict[str, Any] = {"point": p.index, **p.values, "status": "ok" if summary else "failed",
                           "reason": failure or ""}
    if summary:
        m = summary["metric"]
        for phase in ("save", "load"):
            if f"{phase}_checkpoint_io_mean_GiB_per_second" in m:
                row[f"{phase}_GiB_per_s"] = m[f"{phase}_checkpoint_io_mean_GiB_per_second"]
                row[f"{phase}_GB_per_s"] = m[f"{phase}_checkpoint_io_mean_GB_decimal_per_second"]
                row[f"{phase}_seconds"] = m[f"{phase}_checkpoint_duration_mean_seconds"]
                slowest = [c["slowest_process"] for c in summary["checkpoints"][phase]]
                row[f"{phase}_slowest_process"] = max(set(slowest), key=slowest.count)
                row[f"{phase}_cpu_bound"] = any((c.get("cpu") or {}).get("bound")
                                                for c in summary["checkpoints"][phase])
        amplification = summary.get("io", {}).get("restore", {}).get("read_amplification")
        if "load_seconds" in row and amplification is not None:
            row["load_read_amplification"] = amplification
        if reads := [c["read_GiB_per_second"] for c in summary["checkpoints"]["load"] if "read_GiB_per_second" in c]:
            row["load_read_GiB_per_s"] = sum(reads) / len(reads)  # what the storage delivered: bytes read / time
        row["checkpoint_GiB"] = m["checkpoint_size_GiB"]
        if scaled := summary.get("io", {}).get("scaled"):  # what a projection across scales fits: the bytes each
            row["full_size_bytes"] = scaled["full_size"]["bytes_per_checkpoint"]  # phase moved, and at full size
            row["full_size_load_bytes"] = scaled.get("full_size_load_bytes_read")
            for phase in ("save", "load"):
                if moved := [c["bytes"] for c in summary["checkpoints"][phase]]:
                    row[f"{phase}_bytes"] = sum(moved) / len(moved)
        row["peak_rss_MiB"] = summary["memory"]["peak_rss_bytes_max"] / 2**20
        retries = summary.get("retries", {})
        row["retries"] = retries.get("save", 0) + retries.get("load", 0)
        row["run_dir"] = summary.get("run_dir", "")
    return row


def _open_folder(sweep_dir: str, points: list[Point], overrides: list[str], world_sizes: str | None) -> None:
    """The sweep folder and its grid; a folder holding another grid is refused (no mixing)."""
    path = os.path.join(sweep_dir, "sweep.json")
    # credentials in overrides are recorded as '***' (launch.redact), and compared so on a resumed sweep
    grid_now = [redact(p.overrides) + ([f"--world-size={p.world_size}"] if p.world_size else []) for p in points]
    if os.path.exists(path):
        with open(path) as fh:
            before = json.load(fh)
        if before.get("grid") != grid_now or before.get("first_point") != FIRST_POINT:
            raise ConfigError("hydra.sweep.dir", sweep_dir, "holds a sweep of another grid (or one numbered from 0 by "
                              "an earlier version): choose another folder")
    probe_folder("hydra.sweep.dir", sweep_dir)
    os.makedirs(sweep_dir, exist_ok=True)
    with open(path, "w") as fh:
        json.dump({"overrides": redact(overrides), "world_sizes": world_sizes, "grid": grid_now,
                   "first_point": FIRST_POINT, "keys": list(points[0].values), "points": []}, fh, indent=2)


def _say(comm: Comm, sweep_dir: str, line: str) -> None:
    if comm.rank == 0:
        print(line, flush=True)
        with open(os.path.join(sweep_dir, "sweep.log"), "a") as fh:
            fh.write(line + "\n")
