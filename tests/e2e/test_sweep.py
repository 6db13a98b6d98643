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

from tests.support import REPO
from tests.support.cli import MPIEXEC, dlio, load
from tests.support.jobs import ended, start, wait_for
from tests.support.storage import tmpfs

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
from dlio_ckpt.cluster.comm import MPIComm, PointAborted, PointComm
comm, seen = MPIComm(), []
for point in range(3):
    try:
        with PointComm(comm) as pc:                        # closed on every rank, however the point ends
            if point == 1 and comm.rank == 1:
                pc.abort_point("rank 1 failed point 1")   # a fault on one rank only, before its barrier...
                raise RuntimeError("fault")
            pc.barrier()                                   # ...while the others wait in theirs
            got = pc.gather(comm.rank)
            seen.append(pc.bcast(got))
    except PointAborted as exc:
        seen.append(f"aborted: {exc}")
    except RuntimeError:
        seen.append("failed here")
    comm.allgather(None)                                   # every rank leaves the point together
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


LATE_RESULTS = """
from dlio_ckpt.cluster.comm import MPIComm, PointComm
comm, damaged = MPIComm(), 0
for point in range(20):
    with PointComm(comm) as pc:                            # rank 1 leaves as soon as its results are delivered
        got = pc.gather([bytes([point]) * 1000 for _ in range(90)])  # 90 kB pickled: past MPICH's eager limit
        if comm.rank == 0:
            damaged += sum(part != bytes([point]) * 1000 for part in got[1])
    del pc                                                 # the point's PointComm goes, as in a sweep
    reuse = [bytes([255]) * 1000 * 90 for _ in range(50)]  # what a freed send buffer would be overwritten with
    comm.allgather(None)
print(comm.rank, "damaged parts:", damaged, flush=True)
"""


def test_a_rank_leaves_a_point_only_once_its_large_messages_are_delivered(tmp_path):
    """A rank whose results are still on their way when it leaves the point: before PointComm.close,
    their pickled bytes went with the point and were reused at once (rank 0: ``invalid load key, '\\xff'``,
    every time); now they arrive whole in every point. ``-m mpi4py``: an error on one rank aborts the job
    at once, instead of leaving the other waiting in the next collective."""
    r = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-m", "mpi4py", "-c", LATE_RESULTS],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["0 damaged parts: 0", "1 damaged parts: 0"]


# 80 logical ranks on 2 processes: each rank's results (a record per file of 40 ranks) are ~95 kB pickled (as
# llama3_70b's are at 32 ranks a process: their size is the number of files, not the model's), moved only when
# rank 0 receives them; 1 save and 1 load of a small checkpoint. tiny, not llama3_8b at 64 ranks (the same ~95 kB):
# its DCP metadata, which each of the ranks reads and verifies in the load, is a small fraction of 8b's, so the
# sweep takes 4 s instead of 12 alone, and its messages are the same
LARGE_RESULTS = ["workload=tiny", "++workload.checkpoint.layout=dcp", "++workload.model.parallelism.tensor=1",
                 "++workload.checkpoint.io_pattern=stream",  # the points sweep the stream's settings
                 "++workload.checkpoint.scale=0.05", "--world-size", "80",
                 "++workload.checkpoint.checkpoint_folder=ck",
                 "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1",
                 "++workload.checkpoint.time_between_checkpoints=0"]


def test_every_point_of_a_long_sweep_with_large_results_is_ok_under_load(tmp_path):
    """8 points whose results messages are large, beside a process that burns a core: before
    PointComm.close this sweep lost a point every time (3 of 3 tries: point 7, or 1 and 6; rank 0
    unpickled a freed buffer: ``invalid load key``, ``UnicodeDecodeError``)."""
    # at the lowest priority: it fills whatever CPU the sweep leaves idle, but yields to it, so beside the rest
    # of the suite (which keeps both cores loaded) it no longer takes a third of the machine; alone on an idle
    # machine it loads the sweep less than a burner at normal priority did
    burner = subprocess.Popen([sys.executable, "-c", "import os; os.nice(19)\nwhile True: pass"])
    try:
        r = dlio(["sweep", *LARGE_RESULTS, "++workload.checkpoint.chunk_size=1048576,2097152",
                  "++workload.storage.storage_options.queue_depth=1,2,4,8", "++hydra.sweep.dir=sw"], tmp_path,
                 nprocs=2, timeout=240)
    finally:
        burner.kill()
        burner.wait()
    table = rows(tmp_path / "sw")
    assert [t["status"] for t in table] == ["ok"] * 8, [t["reason"][-400:] for t in table if t["status"] != "ok"]
    assert r.returncode == 0 and "sweep done: 8 of 8 points ok" in r.stdout, r.stderr[-2000:]


def test_an_interrupted_sweep_resumes_where_it_stopped(tmp_path):
    """Point 2 trains 5 s before its one checkpoint: the SIGTERM, sent as soon as it has started, cannot
    miss it (a bound no run beats, not a race). One checkpoint a point: the resumed point 2 trains 5 s, not 10."""
    args = ["sweep", *TINY, "++workload.checkpoint.num_checkpoints_write=1",
            "++workload.checkpoint.time_between_checkpoints=0,5,0", "++hydra.sweep.dir=sw"]
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
    other = dlio(["sweep", *TINY, "++workload.checkpoint.num_checkpoints_write=1",
                  "++workload.checkpoint.time_between_checkpoints=0,2", "++hydra.sweep.dir=sw"],
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


def test_a_sweep_with_a_peer_tier_runs_every_point(tmp_path):
    """Each point's peer copies travel on a communicator of the point's own (PointComm had none: every point
    failed in setup with an AttributeError)."""
    r = dlio(["sweep", "workload=tiny", "++workload.hosts.simulate=2", "++workload.storage.storage_root=node",
              "++workload.storage.scope=node",
              "++workload.tiers=[{storage_type: local_fs, storage_root: peer, scope: peer}]",
              "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1",
              "++workload.checkpoint.async_save=True", "++workload.checkpoint.chunk_size=1048576,2097152",
              "++hydra.sweep.dir=sw"], tmp_path, nprocs=2)
    assert r.returncode == 0 and "sweep done: 2 of 2 points ok" in r.stdout, r.stdout + r.stderr
