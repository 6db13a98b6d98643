"""local_fs backend against the real file system: O_DIRECT tails, page-cache eviction, atomic puts."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess

import pytest

from dlio_ckpt.backends import get_backend
from dlio_ckpt.errors import StorageError


def resident_bytes(path) -> int:
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip())


@pytest.mark.skipif(shutil.which("fincore") is None, reason="fincore (util-linux) not installed")
def test_evict_drops_a_written_file_from_the_page_cache(tmp_path):
    backend = get_backend("local_fs", str(tmp_path), {})
    path = backend.join("f.bin")
    with open(path, "wb") as fh:
        fh.write(os.urandom(8 << 20))
    if resident_bytes(path) == 0:
        pytest.skip("this file system does not keep written pages in the page cache")
    backend.evict(path)
    assert resident_bytes(path) == 0


def test_odirect_writer_handles_unaligned_tail(tmp_path):
    import mmap

    backend = get_backend("local_fs", str(tmp_path), {})
    buf = mmap.mmap(-1, 3 * 4096)
    buf[:] = os.urandom(3 * 4096)
    try:
        writer = backend.open_write(backend.join("d.bin"), odirect=True)
    except StorageError as exc:  # tmpfs refuses O_DIRECT (EINVAL); a skip fails under CI
        pytest.skip(f"O_DIRECT not supported here: {exc}")
    writer.write(memoryview(buf)[:2 * 4096 + 123])
    writer.finish()
    backend.sync(backend.join("d.bin"))
    assert (tmp_path / "d.bin").read_bytes() == buf[:2 * 4096 + 123]


def test_put_small_is_atomic_and_get_small_reads_back(tmp_path):
    backend = get_backend("local_fs", str(tmp_path), {})
    backend.put_small(backend.join("m.json"), b"{}")
    assert backend.get_small(backend.join("m.json")) == b"{}"
    assert backend.get_small(backend.join("missing")) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


class _Flaky:
    """local_fs whose first ``failures`` opens for writing fail with a transient error (a unit
    test of the engine's retry logic; the real faults are in test_faults.py)."""

    def __init__(self, inner, failures: int) -> None:
        self._inner, self.failures = inner, failures

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def open_write(self, path, odirect):
        from dlio_ckpt.errors import StorageError

        if self.failures:
            self.failures -= 1
            raise StorageError(f"cannot create {path}: connection reset", transient=True)
        return self._inner.open_write(path, odirect)


@pytest.mark.parametrize("retries,failures,ok", [(2, 2, True), (1, 2, False), (0, 1, False)])
def test_transient_errors_are_retried_a_bounded_number_of_times_and_counted(tmp_path, retries, failures, ok):
    from dlio_ckpt.engine import Engine, FileTask, IOOptions
    from dlio_ckpt.errors import StorageError

    backend = _Flaky(get_backend("local_fs", str(tmp_path), {"retries": retries}), failures)
    task = FileTask(str(tmp_path / "f.bin"), (1 << 20,), 7)
    engine = Engine(backend, 1, IOOptions(chunk_size=1 << 20))
    try:
        if ok:
            assert engine.write_files([task]) == 1 << 20
            assert engine.read_files([task]) == 1 << 20
        else:
            with pytest.raises(StorageError, match="connection reset"):
                engine.write_files([task])
        assert engine.retries == min(retries, failures)
    finally:
        engine.close()


def test_a_reader_that_lends_its_buffers_is_verified_where_they_landed(tmp_path):
    """Object stores' readers hand over the client's buffers (``views``) in sizes of their own; the
    engine compares them in place, across piece and buffer boundaries, and still names the exact
    offset of a wrong byte."""
    from dlio_ckpt.engine import Engine, FileTask, IOOptions

    backend = get_backend("local_fs", str(tmp_path), {})
    task = FileTask(backend.join("v.bin"), (b"h" * 77, 3 << 20, b"t" * 5), 7)
    Engine(backend, 1, IOOptions()).write_files([task])

    class Lending:
        def __init__(self, path: str) -> None:
            self.data = open(path, "rb").read()

        def views(self):
            at, sizes = 0, [1, 4095, (1 << 20) + 3, 777, 1 << 22]
            while at < len(self.data):
                n = sizes[len(self.data) % len(sizes) if at == 0 else at % len(sizes)]
                yield memoryview(self.data)[at:at + n]
                at += n

        def readinto(self, buf):
            raise AssertionError("views() must be used")

        def close(self) -> None:
            pass

    backend.open_read = lambda path, odirect, size=None: Lending(path)
    backend.capabilities = dataclasses.replace(backend.capabilities, positional=False)  # a stream's reader
    assert Engine(backend, 1, IOOptions()).read_files([task]) == task.size
    with open(task.path, "r+b") as fh:
        fh.seek(77 + 5000)
        fh.write(b"\0")
    from dlio_ckpt.errors import VerifyError

    with pytest.raises(VerifyError, match=f"wrong data at offset {77 + 5000} "):
        Engine(backend, 1, IOOptions()).read_files([task])
