"""The storage a test runs against: one backend ready for a test (:class:`Store`, made by the ``store`` fixture
in ``tests/conftest.py``), the backends' parameters, and a real small file system of our own (:func:`tmpfs`)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest


@dataclass
class Store:
    """One backend ready for a test: the workload keys that select it, the environment a
    subprocess needs, and a backend instance for direct checks."""

    storage_type: str
    root: str
    options: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)

    def overrides(self) -> list[str]:
        out = [f"++workload.storage.storage_type={self.storage_type}", f"++workload.storage.storage_root={self.root}"]
        return out + [f"++workload.storage.storage_options.{k}={v}" for k, v in self.options.items()]

    def backend(self, **options):
        from dlio_ckpt.io.backends import get_backend

        return get_backend(self.storage_type, self.root, {**self.options, **options})


def gpu_available() -> bool:
    try:
        import cupy
    except ImportError:
        return False
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except cupy.cuda.runtime.CUDARuntimeError:  # no driver, no device
        return False


def backends(*names: str) -> list:
    """Backend parameters; ``gds`` (a real GPU) marked ``gpu``: the one case that may skip under CI."""
    return [pytest.param(n, marks=pytest.mark.gpu) if n == "gds" else n for n in names]


BACKENDS = backends("local_fs", "s3", "gcs", "null", "gds", "gds_standin")
STORING = backends("local_fs", "s3", "gcs", "gds", "gds_standin")  # those that keep what is written


@contextmanager
def tmpfs(folder: Path, options: str) -> Iterator[Path]:
    """A real, small file system of our own (tests run as root here; skip where mounting is not allowed)."""
    folder.mkdir()
    if shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(path: Path, leave: int = 0) -> int:
    """Write zeros to a new file ``path`` until its file system is full, then give back ``leave`` bytes: a file
    system filled by someone else (the file is the user's, not the run's). Returns the file's size."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        block, size = bytes(1 << 20), 0
        while True:
            try:
                size += os.write(fd, block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
        size = max(size - leave, 0)
        os.ftruncate(fd, size)
    finally:
        os.close(fd)
    return size


def s3_tier(server, root: str, keep_last: int | None = None, **options) -> str:
    """The override that puts an S3 tier (on ``server``, under ``root``) below the workload's storage."""
    opts = {"endpoint_url": server.endpoint, **options}
    body = ", ".join(f"{k}: '{v}'" for k, v in opts.items())
    keep = f", keep_last: {keep_last}" if keep_last else ""
    tier = f"storage_type: s3, storage_root: '{server.bucket}/{root}', storage_options: {{{body}}}{keep}"
    return f"++workload.tiers=[{{{tier}}}]"
