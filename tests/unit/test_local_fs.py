"""local_fs backend against the real file system: O_DIRECT tails, page-cache eviction, atomic puts."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import threading
import time

import pytest

from dlio_ckpt.errors import StorageError
from dlio_ckpt.io.backends import get_backend


def resident_bytes(path) -> int:
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip())


@pytest.mark.skipif(shutil.which("fincore") is None, reason="fincore (util-linux-extra) not installed")
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
    test of the engine's retry logic; the real faults are in tests/e2e/test_faults.py)."""

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
    from dlio_ckpt.errors import StorageError
    from dlio_ckpt.io.engine import Engine, FileTask, IOOptions

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
    from dlio_ckpt.io.engine import Engine, FileTask, IOOptions

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


@pytest.mark.parametrize("odirect", [False, True])
@pytest.mark.parametrize("depth", [1, 4])
def test_chunks_in_flight_write_and_verify_every_byte_around_the_formats_bytes(tmp_path, odirect, depth):
    """queue_depth chunks of a file in flight: the format's bytes (here across chunk boundaries and
    at unaligned offsets) land where they belong, a file of any size is written under O_DIRECT, a
    read at any depth verifies what any depth wrote, and a wrong byte is named by its offset."""
    from dlio_ckpt.errors import VerifyError
    from dlio_ckpt.io.engine import Engine, FileTask, IOOptions

    segments = (b"h" * 77, 3 << 20, b"m" * 9000, (5 << 20) + 123, b"t" * 5)
    backend = get_backend("local_fs", str(tmp_path), {"queue_depth": depth})
    tasks = [FileTask(backend.join(f"f{i}.bin"), segments, 7 + i) for i in range(3)]
    engine = Engine(backend, 1, IOOptions(odirect=odirect, chunk_size=1 << 20))
    try:
        assert engine.write_files(tasks) == sum(t.size for t in tasks)
        assert all(os.path.getsize(t.path) == t.size for t in tasks)
        data = open(tasks[1].path, "rb").read()
        assert data[:77] == b"h" * 77 and data[77 + (3 << 20):77 + (3 << 20) + 9000] == b"m" * 9000
        assert data.endswith(b"t" * 5)
        other = get_backend("local_fs", str(tmp_path), {"queue_depth": 5 - depth})
        reader = Engine(other, 1, IOOptions(odirect=not odirect, chunk_size=1 << 20))
        try:
            assert reader.read_files(tasks) == sum(t.size for t in tasks)
        finally:
            reader.close()
        with open(tasks[2].path, "r+b") as fh:
            fh.seek(77 + (3 << 20) + 100)
            fh.write(b"\0")
        with pytest.raises(VerifyError, match=f"f2.bin: wrong data at offset {77 + (3 << 20) + 100} "):
            engine.read_files(tasks)
    finally:
        engine.close()


def test_a_process_keeps_its_requests_in_flight_across_file_boundaries(tmp_path):
    """As fio's one job: the next file's first chunks are written while the last chunks of the one
    before are still in flight, never more than queue_depth at once."""
    import threading
    import time

    from dlio_ckpt.io.engine import Engine, FileTask, IOOptions

    backend = get_backend("local_fs", str(tmp_path), {"queue_depth": 4})
    lock, now, most, events = threading.Lock(), [0], [0], []
    opened = backend.open_write

    def slow_open(path, odirect):
        writer = opened(path, odirect)
        plain = writer.write_at

        def write_at(data, offset):
            with lock:
                now[0] += 1
                most[0] = max(most[0], now[0])
                events.append(("start", os.path.basename(path), offset))
            time.sleep(0.02)
            plain(data, offset)
            with lock:
                now[0] -= 1
                events.append(("end", os.path.basename(path), offset))
        writer.write_at = write_at
        return writer

    backend.open_write = slow_open
    tasks = [FileTask(backend.join(f"f{i}.bin"), (6 << 20,), i) for i in range(2)]
    engine = Engine(backend, 1, IOOptions(chunk_size=1 << 20))
    try:
        engine.write_files(tasks)
    finally:
        engine.close()
    assert most[0] == 4
    first_of_next = events.index(("start", "f1.bin", 0))
    assert ("end", "f0.bin", 5 << 20) in events[first_of_next:]  # f0's last chunk still in flight


class _StopsAnswering:
    """A store whose first file is held until released and whose second fails at once: the engine's first error
    in time, while another file is in flight (a store that stopped answering holds it to its timeout)."""

    def __init__(self, inner, held: str, failing: str) -> None:
        self._inner, self.held, self.failing = inner, held, failing
        self.release, self.begun = threading.Event(), []

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def open_write(self, path, odirect):
        self.begun.append(os.path.basename(path))
        if path == self.failing:
            raise StorageError(f"cannot create {path}: connection refused")
        if path == self.held:
            assert self.release.wait(30), "the held file was never released"
        return self._inner.open_write(path, odirect)


def test_after_a_file_fails_no_other_file_begins_and_its_error_is_raised(tmp_path):
    """Two threads, four files: the second fails while the first is held. The freed thread takes no third file
    (on a store that stopped answering each would wait out its own timeout), and the error raised is the
    failure's, once the file in flight ends."""
    from dlio_ckpt.io.engine import Engine, FileTask, IOOptions

    names = [str(tmp_path / f"{i}.bin") for i in range(4)]
    backend = _StopsAnswering(get_backend("local_fs", str(tmp_path), {"threads": 2}), names[0], names[1])
    engine = Engine(backend, 1, IOOptions(chunk_size=1 << 20))
    raised: list[BaseException] = []

    def write() -> None:
        try:
            engine.write_files([FileTask(n, (1 << 16,), 7) for n in names])
        except StorageError as exc:
            raised.append(exc)

    writer = threading.Thread(target=write)
    try:
        writer.start()
        # both files begun, and the failed one's thread done with it (its buffers back with the engine, after the
        # failure is noted) while the held one is still in flight
        deadline = time.monotonic() + 30
        while not (sorted(backend.begun) == ["0.bin", "1.bin"] and engine._idle.qsize() == 1):
            assert time.monotonic() < deadline, backend.begun
            writer.join(0.01)
    finally:
        backend.release.set()
        writer.join(30)
        engine.close()
    assert sorted(backend.begun) == ["0.bin", "1.bin"], backend.begun
    assert len(raised) == 1 and "1.bin: connection refused" in str(raised[0])
