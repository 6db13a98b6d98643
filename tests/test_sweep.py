"""``dlio_ckpt sweep`` as a user runs it: a grid inside one MPI job, its table and figures, bad input
refused before anything runs, a failing point that does not stop the rest, resume after an
interrupt, a sweep over storage types with the local S3 server, and diff of two sweeps."""

from __future__ import annotations

import csv
import json
import shutil
import signal
import subprocess
import sys

import pytest

from .conftest import MPIEXEC, REPO, dlio, load
from .test_faults import ended, start, tmpfs, wait_for

pytestmark = pytest.mark.mpi
TINY = ["workload=tiny", "++workload.checkpoint.checkpoint_folder=ck", "++workload.checkpoint.num_checkpoints_read=1"]


def rows(folder) -> list[dict]:
    with open(folder / "sweep.csv") as fh:
        return list(csv.DictReader(fh))


def test_a_2x2_sweep_in_one_job_writes_a_table_figures_and_a_run_per_point(tmp_path):
    r = dlio(["sweep", *TINY, "++workload.checkpoint.chunk_size=1048576,4194304",
              "++workload.storage.storage_options.threads=1,2", "++hydra.sweep.dir=sw"], tmp_path, nprocs=2)
    assert r.returncode == 0, r.stderr
    sw = tmp_path / "sw"
    table = rows(sw)
    assert [(t["checkpoint.chunk_size"], t["storage.storage_options.threads"]) for t in table] == [
        ("1048576", "1"), ("1048576", "2"), ("4194304", "1"), ("4194304", "2")]
    assert all(t["status"] == "ok" and float(t["save_GiB_per_s"]) > 0 and float(t["load_GB_per_s"]) > 0
               and float(t["peak_rss_MiB"]) > 0 for t in table)
    for i in range(1, 5):  # each point an ordinary run: summary, per-process stats, its own config
        summary = load(sw / str(i) / "summary.json")
        assert summary["status"] == "ok" and summary["num_processes"] == 2
        assert (sw / str(i) / "1_per_epoch_stats.json").exists() and (sw / str(i) / ".hydra" / "config.yaml").exists()
    assert load(sw / "2" / "summary.json")["io"]["storage"]["threads"] == 2
    assert [int(t["point"]) for t in table] == [1, 2, 3, 4]  # counted from 1, as the progress lines count them
    assert (sw / "sweep.png").stat().st_size > 10_000 and (sw / "sweep_heatmap.png").stat().st_size > 10_000
    body = load(sw / "sweep.json")
    assert len(body["points"]) == 4 and body["best"]["save"]["status"] == "ok"
    assert "sweep point 3 of 4: checkpoint.chunk_size=4194304 storage.storage_options.threads=1" in r.stdout
    assert not any((tmp_path / "ck").rglob("*.pt"))  # each point's checkpoints removed after it
    report = dlio(["report", str(sw)], tmp_path)
    assert report.returncode == 0 and "sweep.png" in report.stdout
    same = dlio(["diff", str(sw), str(sw)], tmp_path)
    assert same.returncode == 0 and "result: no regression" in same.stdout, same.stdout
    slower = tmp_path / "slower"
    shutil.copytree(sw, slower)
    body = load(slower / "sweep.json")
    for row in body["points"]:
        row["run_dir"] = row["run_dir"].replace(str(sw), str(slower))
    (slower / "sweep.json").write_text(json.dumps(body))
    summary = load(slower / "3" / "summary.json")
    summary["metric"]["save_checkpoint_io_mean_GiB_per_second"] *= 0.5
    (slower / "3" / "summary.json").write_text(json.dumps(summary))
    gated = dlio(["diff", str(sw), str(slower)], tmp_path)
    assert gated.returncode == 1, gated.stdout
    assert "checkpoint.chunk_size=4194304 storage.storage_options.threads=1: REGRESSION" in gated.stdout


def test_a_bad_value_anywhere_in_the_grid_is_refused_before_anything_runs(tmp_path):
    r = dlio(["sweep", *TINY, "++workload.checkpoint.chunk_size=1048576,12345", "++hydra.sweep.dir=sw"],
             tmp_path, nprocs=2)
    assert r.returncode == 2
    assert "workload.checkpoint.chunk_size=12345" in r.stderr and "multiple of 4096" in r.stderr
    assert "(sweep point 2: checkpoint.chunk_size=12345)" in r.stderr
    assert not (tmp_path / "sw").exists() and not (tmp_path / "ck").exists()
    r = dlio(["sweep", *TINY, "--world-size", "2,3"], tmp_path, nprocs=2)
    assert r.returncode == 2 and "must be a multiple of the number of processes (2)" in r.stderr
    assert "(sweep point 2: world_size=3)" in r.stderr


def test_a_failing_point_is_recorded_and_the_sweep_goes_on(tmp_path):
    with tmpfs(tmp_path / "ro", "ro,size=1m") as ro:
        args = ["sweep", *TINY, f"++workload.storage.storage_root={tmp_path / 'ok'},{ro}", "--world-size", "2,4",
                "++hydra.sweep.dir=sw"]
        r = dlio(args, tmp_path, nprocs=2)
        assert r.returncode == 1, r.stderr
        table = rows(tmp_path / "sw")
        assert [t["status"] for t in table] == ["ok", "ok", "failed", "failed"]
        assert "Read-only file system" in table[2]["reason"] and table[2]["world_size"] == "2"
        stopped = dlio([*args[:-1], "++hydra.sweep.dir=sw2", "--stop-on-failure"], tmp_path, nprocs=2)
    assert stopped.returncode == 1 and [t["status"] for t in rows(tmp_path / "sw2")] == ["ok", "ok", "failed"]
    assert "stopping: --stop-on-failure" in stopped.stdout


POINT_ABORT = """
import sys
from dlio_ckpt.comm import MPIComm, PointAborted, PointComm
comm, seen = MPIComm(), []
for point in range(3):
    pc = PointComm(comm)
    try:
        if point == 1 and comm.rank == 1:
            pc.abort_point("rank 1 failed point 1")   # a fault on one rank only...
            raise RuntimeError("fault")
        pc.barrier()
        got = pc.gather(comm.rank)                     # ...while rank 0 waits here for it
        seen.append(pc.bcast(got))
    except PointAborted as exc:
        seen.append(f"aborted: {exc}")
    except RuntimeError:
        seen.append("failed here")
    comm.allgather(None)                               # every rank leaves the point together
print(comm.rank, seen, flush=True)
"""


def test_a_fault_on_one_rank_ends_the_point_on_every_rank_and_the_next_point_runs(tmp_path):
    r = subprocess.run([str(MPIEXEC), "-n", "3", sys.executable, "-c", POINT_ABORT], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    lines = sorted(r.stdout.splitlines())
    assert lines[0] == "0 [[0, 1, 2], 'aborted: rank 1 failed point 1', [0, 1, 2]]"
    assert lines[1] == "1 [[0, 1, 2], 'failed here', [0, 1, 2]]"
    assert lines[2] == "2 [[0, 1, 2], 'aborted: rank 1 failed point 1', [0, 1, 2]]"


def test_an_interrupted_sweep_resumes_where_it_stopped(tmp_path):
    """Point 2 trains 5 s before each of its two checkpoints: the SIGTERM, sent as soon as it has
    started, cannot miss it (a bound no run beats, not a race)."""
    args = ["sweep", *TINY, "++workload.checkpoint.time_between_checkpoints=0,5,0", "++hydra.sweep.dir=sw"]
    proc = start(args, tmp_path)
    wait_for(lambda: (tmp_path / "sw" / "1" / "summary.json").exists(), timeout=60)
    wait_for(lambda: (tmp_path / "sw" / "2" / ".hydra").exists(), timeout=30)
    proc.send_signal(signal.SIGTERM)
    code, _, _ = ended(proc, 15)
    assert code != 0 and load(tmp_path / "sw" / "2" / "summary.json")["status"] == "failed"
    first = (tmp_path / "sw" / "1" / "summary.json").read_text()
    r = dlio(args[:-1] + ["++hydra.sweep.dir=sw"], tmp_path, nprocs=2)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("already done") == 1 and (tmp_path / "sw" / "1" / "summary.json").read_text() == first
    assert [t["status"] for t in rows(tmp_path / "sw")] == ["ok", "ok", "ok"]
    other = dlio(["sweep", *TINY, "++workload.checkpoint.time_between_checkpoints=0,2", "++hydra.sweep.dir=sw"],
                 tmp_path, nprocs=2)
    assert other.returncode == 2 and "holds a sweep of another grid" in other.stderr


def test_a_sweep_over_storage_types_includes_the_s3_server(tmp_path, s3_server):
    env = {**s3_server.env, "AWS_ENDPOINT_URL": s3_server.endpoint}
    r = dlio(["sweep", *TINY, "++workload.storage.storage_type=local_fs,s3",
              f"++workload.storage.storage_root={s3_server.bucket}/sweep", "++hydra.sweep.dir=sw"], tmp_path,
             nprocs=2, env=env, timeout=240)
    assert r.returncode == 0, r.stderr
    table = rows(tmp_path / "sw")
    assert [(t["storage.storage_type"], t["status"]) for t in table] == [("local_fs", "ok"), ("s3", "ok")]
    assert load(tmp_path / "sw" / "2" / "summary.json")["io"]["storage_type"] == "s3"
