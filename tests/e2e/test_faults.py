"""Faults really produced: a full file system, a blocked path, killed ranks, signals, object-store
servers killed mid-run, a server that never answers. Each test checks the exit status, how long the
job took to end, the message, and that no step was marked complete that is not."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.support import REPO
from tests.support.cli import dlio
from tests.support.jobs import ended, no_ok_summary, rank_pid, start, wait_for
from tests.support.storage import tmpfs

pytestmark = pytest.mark.mpi
BASE = ["workload=tiny", "++workload.checkpoint.checkpoint_folder=ck", "++hydra.run.dir=out",
        "++workload.checkpoint.num_checkpoints_read=0"]


def test_a_full_file_system_ends_every_rank_naming_rank_file_and_cause(tmp_path):
    """ENOSPC in the middle of step 1, with no race against the run: the file system has room for
    the bytes (the checks pass) and runs out of inodes, as a Lustre or ext4 file system of many
    small files does, after the step's first two files."""
    with tmpfs(tmp_path / "small", "size=128m,nr_inodes=6") as small:  # root, ck, run record, step folder, 2 files
        proc = start([*BASE, f"++workload.storage.storage_root={small}",
                       "++workload.checkpoint.time_between_checkpoints=0"], tmp_path)
        code, err, _ = ended(proc, 30)
        assert code != 0
        assert "No space left on device (errno 28)" in err, err
        assert f"{small}/ck/global_epoch1_step1/" in err and " on " in err and "rank " in err
        assert "during save of step 1" in err
        assert not (small / "ck" / "global_epoch1_step1.manifest.json").exists()
    summary = no_ok_summary(tmp_path / "out")
    assert summary is not None and "No space left on device" in summary["reason"]
    assert summary["steps_committed"] == [] and summary["during"] == "save of step 1"


def test_a_file_system_filled_by_another_writer_mid_run_ends_every_rank_in_one_line(tmp_path):
    """The trial's case, as a user meets it: the checkpoints' file system has room when the run checks it and
    is filled by another writer once step 1 is committed (an event of the run), so the next save's writes run
    into ENOSPC in the middle of the stream's pipeline, its calls timed. Every rank ends within 30 s, with the
    message on one line and the failed summary's reason that message, no traceback; the other writer's file and
    the committed step are left as they were."""
    from tests.support.storage import fill

    with tmpfs(tmp_path / "small", "size=200m") as small:
        proc = start([*BASE, f"++workload.storage.storage_root={small}",
                      "++workload.checkpoint.num_checkpoints_write=4",
                      "++workload.checkpoint.time_between_checkpoints=1.5",
                      "++workload.checkpoint.io_pattern=stream"], tmp_path)
        wait_for((small / "ck" / "global_epoch1_step1.manifest.json").exists)
        filled = fill(small / "filler")
        code, err, _ = ended(proc, 30)
        assert (small / "filler").stat().st_size == filled
        step1 = sorted(p.name for p in (small / "ck" / "global_epoch1_step1").iterdir())
        assert len(step1) == 4 and (small / "ck" / "global_epoch1_step1.manifest.json").exists()
    assert code != 0 and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("dlio_ckpt: error: ")]
    assert lines and all("No space left on device (errno 28)" in line for line in lines), err
    summary = no_ok_summary(tmp_path / "out")
    # the reason is the message of the rank whose summary landed last: its line on stderr may be cut by the abort
    assert summary is not None and "Traceback" not in summary["reason"] and "\n" not in summary["reason"]
    assert re.fullmatch(rf"rank [01] on \S+, during {summary['during']}: write failed on \S+: No space left on "
                        r"device \(errno 28\)", summary["reason"]), summary["reason"]
    step = int(summary["during"].removeprefix("save of step "))
    assert step >= 2 and summary["steps_committed"] == list(range(1, step))
    assert f"{small}/ck/global_epoch1_step{step}/" in summary["reason"]


def test_a_write_that_runs_out_of_room_names_the_file_and_cause(tmp_path):
    """The byte-level ENOSPC of a file system that fills up under a write (a 1 MiB tmpfs, 2 MiB)."""
    from dlio_ckpt.errors import StorageError
    from dlio_ckpt.io.backends import get_backend

    with tmpfs(tmp_path / "tiny", "size=1m") as tiny:
        writer = get_backend("local_fs", str(tiny), {}).open_write(str(tiny / "f.pt"), odirect=False)
        with pytest.raises(StorageError, match=f"write failed on {tiny}/f.pt: No space left on device \\(errno 28\\)"):
            writer.write(memoryview(bytes(2 << 20)))
        writer.abort()


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


def test_old_checkpoints_are_refused_unless_overwrite(tmp_path, dlio_here):
    first = dlio([*BASE, "++workload.checkpoint.num_checkpoints_write=3",
                  "++workload.checkpoint.time_between_checkpoints=0"], tmp_path, nprocs=2)
    assert first.returncode == 0, first.stderr
    # refused: bad input, in this process (dlio_here), as bad input is tested; the writing runs are processes
    again = dlio_here([*BASE[:-2], "++hydra.run.dir=out2", "++workload.checkpoint.time_between_checkpoints=0",
                       "--world-size", "2"])
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


# A run that cannot end by itself while a test looks (100 checkpoints, 0.5 s of training before each: 50 s at
# the least): a fault is injected right after the event the test waits for (step 1's manifest), never after
# some seconds; the job's end is then timed from the fault.
SLOW = [*BASE, "++workload.checkpoint.num_checkpoints_write=100", "++workload.checkpoint.time_between_checkpoints=0.5"]


def _manifests(folder) -> list[int]:
    return sorted(int(p.name[18:].split(".")[0]) for p in folder.glob("global_epoch1_step*.manifest.json"))


def test_a_rank_killed_with_sigkill_ends_the_job_and_commits_nothing_more(tmp_path):
    proc = start(SLOW, tmp_path)
    wait_for(lambda: (tmp_path / "ck" / "global_epoch1_step1.manifest.json").exists())
    os.kill(rank_pid(proc, 1), signal.SIGKILL)
    at_kill = _manifests(tmp_path / "ck")
    code, err, _ = ended(proc, 15)
    assert code != 0
    committed = _manifests(tmp_path / "ck")
    assert committed[:len(at_kill)] == at_kill and len(committed) <= len(at_kill) + 1  # at most the step in flight
    for step in committed:  # what is marked complete is complete
        files = json.loads((tmp_path / "ck" / f"global_epoch1_step{step}.manifest.json").read_text())["files"]
        assert {p.name: p.stat().st_size for p in (tmp_path / "ck" / f"global_epoch1_step{step}").iterdir()} == files
    summary = no_ok_summary(tmp_path / "out")  # rank 0 may see the job end before it can write one
    assert summary is None or summary["steps_committed"] == committed


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_or_sigint_ends_every_rank_with_a_failed_summary(tmp_path, sig):
    proc = start(SLOW, tmp_path)
    wait_for(lambda: (tmp_path / "ck" / "global_epoch1_step1.manifest.json").exists())
    proc.send_signal(sig)
    code, err, _ = ended(proc, 15)
    assert code == 128 + sig, (code, err)
    assert f"interrupted by {sig.name}" in err, err
    summary = no_ok_summary(tmp_path / "out")
    assert summary is not None and f"interrupted by {sig.name}" in summary["reason"]
    assert summary["steps_committed"] == _manifests(tmp_path / "ck") and summary["steps_committed"][0] == 1
    assert not list((tmp_path / "ck").glob("*.tmp*"))


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_the_network_to_an_object_store_cut_mid_run_ends_the_job_naming_the_object(tmp_path, kind, request,
                                                                                  monkeypatch):
    """The path to the server is cut at the first request of step 2 (an event of the run, not a
    moment): the job ends naming the object, and the store, still up behind the cut, holds exactly
    the steps the job reported committed."""
    from dlio_ckpt.io.backends import get_backend
    from tests.support.proxy import gcs_kind, proxy, s3_kind

    server = request.getfixturevalue(f"{kind}_server")
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    root = f"{server.bucket}/cut-{time.monotonic_ns()}"
    with proxy(server.endpoint, s3_kind if kind == "s3" else gcs_kind,
               cut_when=lambda _method, path: "/global_epoch1_step2/" in path) as cut:
        # the client's own attempts at a refused connection: 2, not the CRT's 5 or gcsfs's 6, with backoff between
        options = {"endpoint_url": cut.endpoint, "retries": 1, "max_attempts": 2}
        args = [*SLOW, f"++workload.storage.storage_type={kind}", f"++workload.storage.storage_root={root}",
                "++workload.checkpoint.time_between_checkpoints=0",
                *(f"++workload.storage.storage_options.{k}={v}" for k, v in options.items())]
        proc = start(args, tmp_path, env=server.env)
        wait_for(cut.is_cut.is_set, timeout=120)
        code, err, took = ended(proc, 45)
    assert code != 0
    scheme = "s3" if kind == "s3" else "gs"
    assert f"{scheme}://{root}/ck/global_epoch1_step2/" in err, err
    assert any(w in err.lower() for w in ("connection refused", "cannot connect", "connection reset", "closed")), err
    summary = no_ok_summary(tmp_path / "out")
    assert summary is not None and summary["during"] == "save of step 2" and summary["steps_committed"] == [1]
    log = (tmp_path / "out" / "dlio_ckpt.log").read_text()  # rank 0 logs a step once its manifest is stored
    assert "save_ckpt1:" in log and "save_ckpt2:" not in log
    store = get_backend(kind, root, {"endpoint_url": server.endpoint})  # behind the cut: the server itself
    markers = sorted(p for p in store.list_names(store.join("ck")) if p.endswith(".manifest.json"))
    assert markers == ["global_epoch1_step1.manifest.json"]


def test_a_server_that_never_answers_ends_the_job_after_io_timeout(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held = []
    threading.Thread(target=lambda: held.extend(listener.accept() for _ in range(64)), daemon=True).start()
    from tests.support.servers import S3_ENV

    args = [*BASE, "++workload.storage.storage_type=s3", "++workload.storage.storage_root=b",
            f"++workload.storage.storage_options.endpoint_url=http://127.0.0.1:{listener.getsockname()[1]}",
            "++workload.checkpoint.io_timeout=1"]  # the timeout firing is the point: 1 s, nothing else is slow
    proc = start(args, tmp_path, env=S3_ENV)
    code, err, took = ended(proc, 20)
    listener.close()
    assert code != 0
    assert "no I/O progress for" in err and "checkpoint.io_timeout=1" in err, err
    assert "during storage checks" in err
    assert not (tmp_path / "out").exists()


def test_waiting_is_not_a_stall_the_rank_whose_request_is_held_is(tmp_path, s3_server, monkeypatch):
    """Only a process's own I/O is watched. A sleep between checkpoints longer than io_timeout does not end
    the job; then a proxy holds the first request of step 2 (an event, never released): the rank that sent
    it (the plan says whose file it is) is the one that ends the job, while the other rank waits in the step's
    barrier as long and is not called stalled. io_timeout is 3 s, so a loaded machine's step 1 has room.
    About 15 s."""
    from urllib.parse import unquote

    from tests.support.proxy import Proxy, s3_kind

    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    held: list[str] = []
    release = threading.Event()

    class Holding(Proxy):
        def _forward(self, h) -> None:  # noqa: ANN001 - http.server's handler
            path = unquote(h.path)
            with self._lock:
                hold = not held and "/global_epoch1_step2/" in path
                if hold:
                    held.append(path.split("?")[0])
            if hold:
                release.wait(120)  # the job ends first; then the test lets the thread go
                h.close_connection = True
                return
            super()._forward(h)

    root = f"{s3_server.bucket}/held-{time.monotonic_ns()}"
    p = Holding(s3_server.endpoint, s3_kind)
    threading.Thread(target=p.server.serve_forever, daemon=True).start()
    try:
        proc = start([*BASE, "++workload.storage.storage_type=s3", f"++workload.storage.storage_root={root}",
                      f"++workload.storage.storage_options.endpoint_url={p.endpoint}",
                      "++workload.checkpoint.num_checkpoints_write=2", "++workload.checkpoint.io_timeout=3",
                      "++workload.checkpoint.time_between_checkpoints=3.5"], tmp_path, env=s3_server.env)
        code, err, _ = ended(proc, 60)
    finally:
        release.set()
        p.server.shutdown()
        p.server.server_close()
    from dlio_ckpt.config import compose
    from dlio_ckpt.plan.layouts import make_plan

    workload, _, _ = compose(["workload=tiny"], None)
    assert held, f"the job ended before step 2's first request: {err}"
    (sender,) = [r.rank for r in make_plan(workload, 2).ranks
                 if any(held[0].rsplit("/", 1)[1].startswith(f"{f.stem}.") for f in r.files)]
    stalled = [line for line in err.splitlines() if "no I/O progress for" in line]
    assert code != 0 and len(stalled) == 1, err
    assert f"rank {sender} on " in stalled[0] and "during save of step 2" in stalled[0], (held, stalled)
    summary = no_ok_summary(tmp_path / "out")
    assert summary is None or summary["steps_committed"] == [1]


INTERRUPTED_MARKER = """
import os, signal, sys
from dlio_ckpt.io.backends import get_backend
from dlio_ckpt.cluster.comm import SelfComm
from dlio_ckpt.run.failure import RunState, on_signals


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
