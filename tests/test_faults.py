"""Faults really produced: a full file system, a blocked path, killed ranks, signals, object-store
servers killed mid-run, a server that never answers. Each test checks the exit status, how long the
job took to end, the message, and that no step was marked complete that is not."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from .conftest import MPIEXEC, REPO, dlio, load, tmpfs

pytestmark = pytest.mark.mpi
BASE = ["workload=tiny", "++workload.checkpoint.checkpoint_folder=ck", "++hydra.run.dir=out",
        "++workload.checkpoint.num_checkpoints_read=0"]


def start(args: list[str], cwd: Path, nprocs: int = 2, env: dict | None = None) -> subprocess.Popen:
    cmd = [str(MPIEXEC), "-n", str(nprocs), sys.executable, "-m", "dlio_ckpt", *args]
    return subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {}), "PYTHONPATH": str(REPO)})


def wait_for(predicate, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.1)


def ended(proc: subprocess.Popen, limit: float) -> tuple[int, str, float]:
    """Wait for the job; return its status, stderr, and seconds from now to its end."""
    t0 = time.monotonic()
    try:
        _, err = proc.communicate(timeout=limit + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"the job did not end within {limit + 30} s") from None
    took = time.monotonic() - t0
    print(f"job ended {took:.2f} s after the fault")
    assert took < limit, f"took {took:.1f} s to end"
    return proc.returncode, err, took


def no_ok_summary(out: Path) -> dict | None:
    path = out / "summary.json"
    if not path.exists():
        return None
    summary = load(path)
    assert summary["status"] == "failed", summary
    return summary


def rank_pid(proc: subprocess.Popen, rank: int) -> int:
    """The pid of one MPI rank of a job started by :func:`start` (from PMI_RANK in its environment)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"dlio_ckpt" in cmdline and f"PMI_RANK={rank}".encode() in env and \
                b"PMI_SIZE=" in b"".join(env) and str(proc.pid) != entry.name and _descends(int(entry.name), proc.pid):
            return int(entry.name)
    raise AssertionError(f"rank {rank} not found")


def _descends(pid: int, ancestor: int) -> bool:
    """Whether ``pid`` is a child, grandchild... of ``ancestor`` (not a rank of another job on the machine)."""
    while pid > 1:
        try:
            pid = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid == ancestor:
            return True
    return False




def test_full_file_system_ends_every_rank_naming_rank_file_and_cause(tmp_path, small_fs):
    """The file system fills up after the checks (another writer takes the room): ENOSPC mid-save."""
    proc = start([*BASE, f"++workload.storage.storage_root={small_fs}",
                  "++workload.checkpoint.time_between_checkpoints=3"], tmp_path)
    wait_for(lambda: (tmp_path / "out" / ".hydra").exists(), timeout=30)
    free = shutil.disk_usage(small_fs).free
    with open(small_fs / "filler", "wb") as fh:
        fh.write(bytes(free - (8 << 20)))
    code, err, _ = ended(proc, 30)
    assert code != 0
    assert "No space left on device (errno 28)" in err, err
    assert f"{small_fs}/ck/global_epoch1_step1/" in err and " on " in err and "rank " in err
    assert "during save of step 1" in err
    assert not (small_fs / "ck" / "global_epoch1_step1.manifest.json").exists()
    summary = no_ok_summary(tmp_path / "out")
    assert summary is not None and "No space left on device" in summary["reason"]


def test_unwritable_storage_root_is_refused_before_anything_is_written(tmp_path):
    with tmpfs(tmp_path / "ro", "ro,size=1m") as mnt:
        res = dlio([*BASE, f"++workload.storage.storage_root={mnt}"], tmp_path, nprocs=2)
    assert res.returncode == 2, res.stderr
    assert f"workload.checkpoint.checkpoint_folder='ck': cannot write {mnt}/ck: Read-only file system" in res.stderr
    assert not (tmp_path / "out").exists()


def test_a_path_blocked_by_a_regular_file_is_named(tmp_path):
    (tmp_path / "blocker").write_text("not a folder")
    res = dlio([*BASE, "++workload.checkpoint.checkpoint_folder=blocker/ck"], tmp_path, nprocs=2)
    assert res.returncode == 2, res.stderr
    assert f"cannot be a folder: {tmp_path}/blocker is a file" in res.stderr
    assert not (tmp_path / "out").exists()


def test_old_checkpoints_are_refused_unless_overwrite(tmp_path):
    first = dlio([*BASE, "++workload.checkpoint.num_checkpoints_write=3",
                  "++workload.checkpoint.time_between_checkpoints=0"], tmp_path, nprocs=2)
    assert first.returncode == 0, first.stderr
    again = dlio([*BASE[:-2], "++hydra.run.dir=out2", "++workload.checkpoint.time_between_checkpoints=0"],
                 tmp_path, nprocs=2)
    assert again.returncode == 2
    assert "workload.checkpoint.checkpoint_folder='ck': already holds checkpoints of an earlier run" in again.stderr
    assert "overwrite=True" in again.stderr and not (tmp_path / "out2").exists()
    over = dlio([*BASE[:-2], "++hydra.run.dir=out3", "++workload.checkpoint.time_between_checkpoints=0",
                 "++workload.checkpoint.overwrite=True"], tmp_path, nprocs=2)
    assert over.returncode == 0, over.stderr
    # the earlier run's third step is gone: the folder holds only this run's two steps
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == [
        "dlio_ckpt_run.json", "global_epoch1_step1", "global_epoch1_step1.manifest.json", "global_epoch1_step2",
        "global_epoch1_step2.manifest.json"]


SLOW = [*BASE, "++workload.checkpoint.num_checkpoints_write=4", "++workload.checkpoint.time_between_checkpoints=1"]


def test_a_rank_killed_with_sigkill_ends_the_job_and_commits_nothing_more(tmp_path):
    proc = start(SLOW, tmp_path)
    wait_for(lambda: (tmp_path / "ck" / "global_epoch1_step1.manifest.json").exists())
    os.kill(rank_pid(proc, 1), signal.SIGKILL)
    code, err, _ = ended(proc, 15)
    assert code != 0
    committed = sorted(p.name for p in (tmp_path / "ck").glob("*.manifest.json"))
    assert "global_epoch1_step4.manifest.json" not in committed and len(committed) <= 2
    for name in committed:  # what is marked complete is complete
        step = name.removesuffix(".manifest.json")
        files = json.loads((tmp_path / "ck" / name).read_text())["files"]
        assert {p.name: p.stat().st_size for p in (tmp_path / "ck" / step).iterdir()} == files
    no_ok_summary(tmp_path / "out")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_or_sigint_ends_every_rank_with_a_failed_summary(tmp_path, sig):
    proc = start(SLOW, tmp_path)
    wait_for(lambda: (tmp_path / "ck" / "global_epoch1_step1.manifest.json").exists())
    proc.send_signal(sig)
    code, err, _ = ended(proc, 15)
    assert code != 0
    assert f"interrupted by {sig.name}" in err, err
    summary = no_ok_summary(tmp_path / "out")
    assert summary is not None and "interrupted" in summary["reason"]
    assert not (tmp_path / "ck" / "global_epoch1_step4.manifest.json").exists()


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_object_store_killed_mid_run_ends_the_job_naming_the_object(tmp_path, kind, monkeypatch):
    from .servers import fake_gcs, seaweedfs

    with (seaweedfs if kind == "s3" else fake_gcs)() as server:
        from dlio_ckpt.backends import get_backend

        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        options = {"endpoint_url": server.endpoint, "retries": 1}
        if kind == "gcs":
            options["timeout"] = 4
        root = f"{server.bucket}/killed"
        backend = get_backend(kind, root, options)
        args = [*SLOW, f"++workload.storage.storage_type={kind}", f"++workload.storage.storage_root={root}",
                *(f"++workload.storage.storage_options.{k}={v}" for k, v in options.items())]
        proc = start(args, tmp_path, env=server.env)
        wait_for(lambda: backend.get_small(backend.join("ck", "global_epoch1_step1.manifest.json")) is not None)
        server.kill()
        code, err, took = ended(proc, 45)
        assert code != 0
        scheme = "s3" if kind == "s3" else "gs"
        assert f"{scheme}://{server.bucket}/killed/ck/" in err, err
        assert "connection refused" in err.lower() or "cannot connect" in err.lower(), err
        no_ok_summary(tmp_path / "out")
        log = (tmp_path / "out" / "dlio_ckpt.log").read_text()  # rank 0 logs a step once its manifest is stored
        logged = [i for i in range(1, 5) if f"save_ckpt{i}:" in log]
        assert logged and logged == list(range(1, len(logged) + 1)) and len(logged) < 4
        if kind == "gcs":  # fake-gcs-server restarts on its data (SeaweedFS takes minutes): look at the store
            server.restart()
            committed = [i for i in range(1, 5)
                         if backend.get_small(backend.join("ck", f"global_epoch1_step{i}.manifest.json")) is not None]
            assert committed == logged


def test_a_server_that_never_answers_ends_the_job_after_io_timeout(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held = []
    threading.Thread(target=lambda: held.extend(listener.accept() for _ in range(64)), daemon=True).start()
    from .servers import S3_ENV

    args = [*BASE, "++workload.storage.storage_type=s3", "++workload.storage.storage_root=b",
            f"++workload.storage.storage_options.endpoint_url=http://127.0.0.1:{listener.getsockname()[1]}",
            "++workload.checkpoint.io_timeout=3"]
    proc = start(args, tmp_path, env=S3_ENV)
    code, err, took = ended(proc, 20)
    listener.close()
    assert code != 0
    assert "no I/O progress for" in err and "checkpoint.io_timeout=3" in err, err
    assert "during storage checks" in err
    assert not (tmp_path / "out").exists()


def test_waiting_is_not_a_stall(tmp_path):
    """Only a process's own I/O is watched: sleeping between checkpoints, or waiting in a barrier
    for a slower rank, longer than io_timeout must not end the job."""
    res = dlio([*BASE, "++workload.checkpoint.io_timeout=1", "++workload.checkpoint.time_between_checkpoints=2.5"],
               tmp_path, nprocs=2)
    assert res.returncode == 0, res.stderr
    assert load(tmp_path / "out" / "summary.json")["status"] == "ok"


INTERRUPTED_MARKER = """
import os, signal, sys
from dlio_ckpt.backends import get_backend
from dlio_ckpt.comm import SelfComm
from dlio_ckpt.failure import RunState, on_signals


class Aborting(SelfComm):
    def abort(self, code):  # as MPI_Abort does: the process ends here, no finally runs
        os._exit(code)


on_signals(Aborting(), RunState())
fsync = os.fsync


def interrupted(fd):  # SIGINT arrives while a marker is being written (between write and rename)
    os.kill(os.getpid(), signal.SIGINT)
    fsync(fd)


os.fsync = interrupted
backend = get_backend("local_fs", sys.argv[1], {})
backend.put_small(backend.join("ck", "global_epoch1_step3.manifest.json"), b"{}")
"""


def test_an_interrupted_marker_write_leaves_no_temporary_file(tmp_path):
    """SIGINT during an async run with tiers once left global_epoch1_step3.manifest.json.tmp<pid>:
    the signal ends the process from its handler, where no finally runs."""
    (tmp_path / "ck").mkdir()
    r = subprocess.run([sys.executable, "-c", INTERRUPTED_MARKER, str(tmp_path)], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 128 + signal.SIGINT and "interrupted by SIGINT" in r.stderr, r.stderr
    assert list((tmp_path / "ck").iterdir()) == []
