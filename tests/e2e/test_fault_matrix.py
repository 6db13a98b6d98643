"""Faults on every path: a storage that fills, refuses or disappears in the middle of a save or a load ends
the run with one message naming rank, host, file and cause, a failed ``summary.json`` whose ``reason`` is that
message, no traceback, and nothing of the user's touched; for every layout (the registry's list), io pattern and
backend (a local file system, S3 and GCS through the fault proxy), with and without the timing wrapper (every run
has it; without it, on a file system, the engine's paths are shown not to lean on it).

In this process (``run_here``, a world of one writing the files of 4 ranks): what differs between the paths is
the engine's (the stream's pipeline, a framework's writer threads and its buffered file, torch.load's reads) and
the backend's, not MPI's; that every rank ends within 30 s, under mpiexec, is ``test_faults.py``'s. The faults:

- a full file system: a real tmpfs with room for the run when it is checked, filled by the test when the save's
  first data file is created, all but 64 KiB (so that file's first bytes go in and the next fail: ENOSPC from
  the kernel, in the middle of the file);
- a local storage that disappears under a load: every read of a checkpoint file after its first fails with
  EIO, as a lost mount answers (no kernel here makes one on demand: the read call itself is replaced);
- an object store that refuses (403, access denied) every upload of the checkpoint after the first;
- an object store that disappears: the network is cut at the load's second request for the checkpoint;
  each path meets one of the two on S3 and the other on GCS.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dlio_ckpt.cluster.host import hostname
from dlio_ckpt.io.backends import local_fs
from dlio_ckpt.registry import LAYOUTS
from tests.support.cli import run_here
from tests.support.storage import fill, tmpfs
from tests.support.workloads import EVERY_LAYOUT

STEP = "/global_epoch1_step1/"  # the checkpoint's folder: the run's own records are beside it
WORKLOADS = EVERY_LAYOUT
PATHS = [(layout, pattern) for layout in WORKLOADS for pattern in ("framework", "stream")
         if not (layout == "dlio" and pattern == "framework")]  # layout dlio writes the stream either way
USER_BYTES = os.urandom(4096)


def test_every_layout_is_walked():
    """The matrix below follows the registry: a new layout is walked, or this fails."""
    assert sorted(WORKLOADS) == sorted(LAYOUTS.names)


def run(tmp_path: Path, monkeypatch, capfd, storage: list[str], phase: str, layout: str, pattern: str,
        timed: bool, env: dict[str, str] | None = None):
    if not timed:  # the backends as they are, without the wrapper that times every call
        monkeypatch.setattr("dlio_ckpt.run.launch.timed_backend", lambda backend, _recorder: backend)
    args = ["--world-size", "4", *WORKLOADS[layout], *storage, "++workload.checkpoint.checkpoint_folder=ck",
            "++hydra.run.dir=out", "++workload.checkpoint.num_checkpoints_write=1",
            f"++workload.checkpoint.num_checkpoints_read={1 if phase == 'load' else 0}",
            f"++workload.checkpoint.io_pattern={pattern}", "++workload.checkpoint.progress=False"]
    return run_here(args, tmp_path, monkeypatch, capfd, env)


def assert_ended_by(res, tmp_path: Path, phase: str, file_in: str, cause: Callable[[str], bool]) -> None:
    """One message naming rank, host, the checkpoint's file and the cause; the summary's reason is that message."""
    output = res.stdout + res.stderr
    assert res.returncode == 1, output
    assert "Traceback" not in output, output
    errors = [line for line in res.stderr.splitlines() if line.startswith("dlio_ckpt: error: ")]
    assert len(errors) == 1, output
    message = errors[0].removeprefix("dlio_ckpt: error: ")
    assert message.startswith(f"rank 0 on {hostname()}, during {phase} of step 1: "), message
    assert file_in + STEP.lstrip("/") in message, message
    assert cause(message.lower()), message
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["reason"] == message, summary


# -- a local file system ---------------------------------------------------------------------------------

@contextmanager
def users_files(root: Path) -> Iterator[None]:
    """A file of the user's beside the run's folder: the same bytes afterwards."""
    (root / "user").mkdir()
    (root / "user" / "keep.bin").write_bytes(USER_BYTES)
    yield
    assert (root / "user" / "keep.bin").read_bytes() == USER_BYTES


def fill_when_the_save_starts(monkeypatch, root: Path) -> list[int]:
    """When the save creates its first data file (in the checkpoint's folder, or Lightning's in ``$TMPDIR``, moved
    into place later), fill the file system but 64 KiB (the filler is the user's file too: its size is returned,
    to be found unchanged)."""
    filled: list[int] = []
    real, once = local_fs.LocalWriter.__init__, threading.Lock()  # a framework's writer threads open files at once

    def opened(self, path: str, *args, **kwargs) -> None:  # the writer of a save's files, nothing else
        real(self, path, *args, **kwargs)
        with once:
            if not filled:
                filled.append(fill(root / "user" / "filler", 64 << 10))
    monkeypatch.setattr(local_fs.LocalWriter, "__init__", opened)
    return filled


def lose_the_mount_after_the_first_read(monkeypatch) -> None:
    """Every read of a checkpoint file after its first fails with EIO."""
    real, seen = os.preadv, set()

    def preadv(fd: int, buffers, offset: int, *rest) -> int:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if STEP in path:
            if path in seen:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            seen.add(path)
        return real(fd, buffers, offset, *rest)
    monkeypatch.setattr(local_fs.os, "preadv", preadv)


@pytest.mark.parametrize("timed", [True, False], ids=["timed", "bare"])
@pytest.mark.parametrize("layout, pattern", PATHS)
def test_a_file_system_filling_mid_save(tmp_path, monkeypatch, capfd, layout, pattern, timed):
    with tmpfs(tmp_path / "fs", "size=96m") as root, users_files(root):
        filled = fill_when_the_save_starts(monkeypatch, root)
        res = run(tmp_path, monkeypatch, capfd, [f"++workload.storage.storage_root={root}"], "save", layout,
                  pattern, timed)
        assert filled, "the save never created its first data file"
        assert (root / "user" / "filler").stat().st_size == filled[0]
        assert_ended_by(res, tmp_path, "save", f"{root}/ck/", lambda m: "no space left on device (errno 28)" in m)


@pytest.mark.parametrize("timed", [True, False], ids=["timed", "bare"])
@pytest.mark.parametrize("layout, pattern", PATHS)
def test_a_file_system_disappearing_mid_load(tmp_path, monkeypatch, capfd, layout, pattern, timed):
    root = tmp_path / "fs"
    root.mkdir()
    with users_files(root):
        lose_the_mount_after_the_first_read(monkeypatch)
        res = run(tmp_path, monkeypatch, capfd, [f"++workload.storage.storage_root={root}"], "load", layout,
                  pattern, timed)
        assert_ended_by(res, tmp_path, "load", f"{root}/ck/", lambda m: "input/output error (errno 5)" in m)


# -- object stores, through the fault proxy --------------------------------------------------------------

def second(matches: Callable[[str, str], bool]) -> Callable[[str, str], bool]:
    """True from the second request that ``matches``: the first one of the checkpoint's goes through."""
    seen = [0]

    def nth(method: str, path: str) -> bool:
        if matches(method, path):
            seen[0] += 1
            return seen[0] > 1
        return False
    return nth


def uploads(method: str, path: str) -> bool:
    return method in ("PUT", "POST") and STEP in path


def downloads(method: str, path: str) -> bool:
    return method == "GET" and STEP in path


# Each layout and pattern on each store, once: refused mid-save on one store and cut mid-load on the other, in turn,
# so that every path meets both faults and each store both, at half the cost of every fault everywhere
OBJECT_FAULTS = [(kind, layout, pattern, ("refused mid-save", "cut mid-load")[(i + k) % 2])
                 for i, (layout, pattern) in enumerate(PATHS) for k, kind in enumerate(("s3", "gcs"))]


@pytest.mark.parametrize("kind, layout, pattern, fault", OBJECT_FAULTS)
def test_an_object_store_refusing_or_disappearing(tmp_path, monkeypatch, capfd, request, kind, layout, pattern,
                                                  fault):
    """Timed, as every run is: the bare backends' paths are the same code as on a file system, walked above."""
    refused_part = kind == "s3" and layout == "lightning"  # its one object is a multipart upload: a part is refused
    # the CRT keeps no cause for a refused part where a later write finds the upload failed; the message says so
    cause = ("access denied", "refused or lost") if refused_part else ("access denied",)
    object_store_fault(tmp_path, monkeypatch, capfd, request, kind, layout, pattern, True, fault, {}, cause)


@pytest.mark.parametrize("pattern", ["framework", "stream"])
def test_a_refused_part_is_named_by_botocore(tmp_path, monkeypatch, capfd, request, pattern):
    """Where the CRT keeps no cause (above), the botocore client names the store's answer, as the message says."""
    object_store_fault(tmp_path, monkeypatch, capfd, request, "s3", "lightning", pattern, True, "refused mid-save",
                       {"library": "botocore"}, ("access denied",))


def object_store_fault(tmp_path, monkeypatch, capfd, request, kind: str, layout: str, pattern: str, timed: bool,
                       fault: str, library: dict[str, str], refusals: tuple[str, ...]) -> None:
    from dlio_ckpt.io.backends import get_backend
    from tests.support.proxy import gcs_kind, proxy, s3_kind

    server = request.getfixturevalue(f"{kind}_server")
    root = f"{server.bucket}/fault-{time.monotonic_ns()}"
    user_key = f"{server.bucket}/user-{time.monotonic_ns()}"
    for key, value in server.env.items():  # the client made here reads its keys as the run's does
        monkeypatch.setenv(key, value)
    store = get_backend(kind, user_key, {"endpoint_url": server.endpoint})
    store.put_small(store.join("keep.bin"), USER_BYTES)
    saving = fault == "refused mid-save"
    faults = {"refuse_when": second(uploads)} if saving else {"cut_when": second(downloads)}
    with proxy(server.endpoint, s3_kind if kind == "s3" else gcs_kind, store=kind, **faults) as p:
        # the client's own attempts at a refused connection: 2, not the CRT's 5 or gcsfs's 6 (some 30 s of backoff)
        options = {"endpoint_url": p.endpoint, "retries": 0, "max_attempts": 2, **library}
        storage = [f"++workload.storage.storage_type={kind}", f"++workload.storage.storage_root={root}",
                   *(f"++workload.storage.storage_options.{k}={v}" for k, v in options.items())]
        res = run(tmp_path, monkeypatch, capfd, storage, "save" if saving else "load", layout, pattern, timed)
    scheme = "s3" if kind == "s3" else "gs"
    cause = ((lambda m: any(r in m for r in refusals)) if saving else
             (lambda m: any(w in m for w in ("connection refused", "cannot connect", "connection reset", "closed"))))
    assert_ended_by(res, tmp_path, "save" if saving else "load", f"{scheme}://{root}/ck/", cause)
    assert p.refused if saving else p.is_cut.is_set()
    assert store.get_small(store.join("keep.bin")) == USER_BYTES
