"""The framework pattern in the engine, in process: a file written by its framework's calls holds the bytes the
tuned stream writes (so either pattern reads and verifies the other's checkpoint), its items read back as
``torch.load`` reads them, a wrong byte in a header or a tensor named by its offset, a failing writer thread
ending the save with its error; a state dict saved as ``torch.save(obj, path)`` saves it (C++'s stream), a
file written in ``$TMPDIR`` first (Lightning's) moved into place. (The calls themselves are held to the
frameworks under strace in tests/against_frameworks/test_io_patterns.py.)"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path

import pytest

from dlio_ckpt.errors import StorageError, VerifyError
from dlio_ckpt.io.backends import get_backend
from dlio_ckpt.io.engine import Engine, FileTask, IOOptions, WriterSettings
from dlio_ckpt.plan.formats.pt import PtFormat, save_calls
from dlio_ckpt.plan.layouts.dcp import item_size
from dlio_ckpt.plan.pattern import FileObject, FilePattern, FirstWritten
from dlio_ckpt.plan.types import FilePlan, TensorGroup
from tests.support.item_file import FILE, ITEMS, ranges, task


def test_a_framework_written_file_is_the_streams_byte_for_byte_and_reads_back_either_way(tmp_path):
    backend = get_backend("local_fs", str(tmp_path), {})
    engine = Engine(backend, 5, IOOptions(fsync=True, chunk_size=1 << 20))
    try:
        played, streamed = task(backend.join("played"), True), task(backend.join("streamed"), False)
        assert engine.write_files([played]) == engine.write_files([streamed]) == FILE.size
        assert (tmp_path / "played").read_bytes() == (tmp_path / "streamed").read_bytes()
        assert engine.read_ranges([(played, ranges())]) >= FILE.size  # headers read again, a block at a time
        assert engine.read_ranges([(streamed, ranges())]) == FILE.size  # the stream reads the ranges exactly
    finally:
        engine.close()


def test_a_batch_of_files_played_in_two_ways_is_refused_and_nothing_is_written(tmp_path):
    """The engine plays a batch one way, chosen by its files: a batch that mixes a framework's file and a stream's
    is our bug, refused before a byte is written (not played the first file's way)."""
    backend = get_backend("local_fs", str(tmp_path), {})
    engine = Engine(backend, 5, IOOptions(chunk_size=1 << 20))
    try:
        played, streamed = task(backend.join("played"), True), task(backend.join("streamed"), False)
        with pytest.raises(AssertionError, match="played in different ways"):
            engine.write_files([played, streamed])
        with pytest.raises(AssertionError, match="played in different ways"):
            engine.read_ranges([(played, ranges()), (streamed, ranges())])
        assert list(tmp_path.iterdir()) == []
    finally:
        engine.close()


@pytest.mark.parametrize("where", [40, FILE.size - 30, item_size(ITEMS[0]) + 4096], ids=["object", "trailer",
                                                                                         "tensor"])
def test_a_wrong_byte_is_named_by_its_offset_when_read_as_the_framework_reads(tmp_path, where):
    backend = get_backend("local_fs", str(tmp_path), {})
    engine = Engine(backend, 5, IOOptions(chunk_size=1 << 20))
    try:
        played = task(backend.join("played"), True)
        engine.write_files([played])
        raw = bytearray((tmp_path / "played").read_bytes())
        raw[where] ^= 1
        (tmp_path / "played").write_bytes(bytes(raw))
        with pytest.raises(VerifyError, match=f"played: wrong data at offset {where} "):
            engine.read_ranges([(played, ranges())])
    finally:
        engine.close()


def test_a_writer_thread_that_fails_ends_the_save_with_its_error_and_the_others_stop(tmp_path):
    backend = get_backend("local_fs", str(tmp_path), {})
    engine = Engine(backend, 5, IOOptions(chunk_size=1 << 20), writers=WriterSettings(threads=2))
    (tmp_path / "blocked").write_text("a file where a folder must be")
    tasks = [task(backend.join(f"f{k}"), True) for k in range(3)] + [task(backend.join("blocked/x"), True)]
    try:
        with pytest.raises(StorageError, match="blocked/x"):
            engine.write_files(tasks)
    finally:
        engine.close()


def test_megatron_cores_writers_each_write_their_own_file_however_late_one_starts(tmp_path, monkeypatch):
    """megatron-core forks a writer process a bucket (a file here): two writers, two files, the second writer
    started only once the first has returned, and each file is still its own writer's (a shared queue, DCP's, would
    have given the first writer both)."""
    from dlio_ckpt.io.engine import framework

    started: list[threading.Thread] = []

    class Late(threading.Thread):
        def start(self) -> None:
            if started:
                started[-1].join(30)  # the one before has written all it was going to
            started.append(self)
            super().start()

    monkeypatch.setattr(framework.threading, "Thread", Late)
    backend = get_backend("local_fs", str(tmp_path), {})
    engine = Engine(backend, 5, IOOptions(chunk_size=1 << 20), writers=WriterSettings(threads=2, caller_writes=False))
    wrote: dict[str, threading.Thread] = {}
    attempt = engine._attempt

    def noted(fn, worker, t):  # noqa: ANN001, ANN202 - the engine's own signature
        wrote[Path(t.path).name] = threading.current_thread()
        return attempt(fn, worker, t)

    monkeypatch.setattr(engine, "_attempt", noted)
    try:
        assert engine.write_files([task(backend.join(f"f{k}"), True) for k in range(2)]) == 2 * FILE.size
    finally:
        engine.close()
    assert len(started) == 2 and wrote == {"f0": started[0], "f1": started[1]}, wrote


def state_dict_file() -> FilePlan:
    """A DeepSpeed optimizer file's shape: several storages, one of them small (C++'s stream copies it in)."""
    return FilePlan("bf16_zero_pp_rank_0_mp_rank_00_optim_states", "optimizer", "fp32",
                    (TensorGroup(None, (300_000, 300_000, 300_000, 1, 100)),))


@pytest.mark.parametrize("file_object", list(FileObject))
def test_a_state_dict_file_written_as_torch_save_writes_it_is_the_streams_and_torch_loads_it(tmp_path, file_object):
    """DeepSpeed's ``torch.save(state_dict, path)`` (C++'s stream) and a file object's: the same bytes as the
    tuned stream, a file torch.load opens with every storage, read back whole as torch.load reads it."""
    torch = pytest.importorskip("torch")
    f, fmt = state_dict_file(), PtFormat(by_path=True)
    backend = get_backend("local_fs", str(tmp_path), {})
    engine = Engine(backend, 5, IOOptions(chunk_size=1 << 20))
    try:
        segments = tuple(fmt.segments(f))
        played = FileTask(backend.join("played.pt"), segments, 3,
                          FilePattern(save_calls(f), synced=False, file_object=file_object, archive=True))
        streamed = FileTask(backend.join("streamed.pt"), segments, 3)
        assert engine.write_files([played]) == engine.write_files([streamed]) == played.size
        assert (tmp_path / "played.pt").read_bytes() == (tmp_path / "streamed.pt").read_bytes()
        state = torch.load(tmp_path / "played.pt", weights_only=False)
        assert [t.numel() for t in state.values()] == [300_000, 300_000, 300_000, 1, 100]
        assert engine.read_files([played]) >= played.size  # torch.load's reads: a few headers twice
    finally:
        engine.close()


@pytest.mark.parametrize("device", ["same", "other"])
def test_a_file_written_in_tmpdir_first_is_moved_into_place_and_leaves_nothing_there(tmp_path, monkeypatch, device):
    """Lightning's save (fsspec's transaction): the file written in ``$TMPDIR`` and moved to its place (renamed;
    copied where ``$TMPDIR`` is on another device: here /dev/shm); what the save made in ``$TMPDIR`` is gone,
    what was there before is kept."""
    if device == "other":
        shm = Path("/dev/shm")
        if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
            pytest.skip("no /dev/shm on another device than the test's folder")
        tmpdir = Path(tempfile.mkdtemp(dir=shm))
    else:
        tmpdir = tmp_path / "tmpdir"
        tmpdir.mkdir()
    (tmpdir / "theirs").write_bytes(b"not ours")
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile reads $TMPDIR again
    f = state_dict_file()
    backend = get_backend("local_fs", str(tmp_path / "root"), {})
    (tmp_path / "root").mkdir()
    engine = Engine(backend, 5, IOOptions(chunk_size=1 << 20))
    try:
        segments = tuple(PtFormat().segments(f))
        size = FileTask("", segments, 3).size
        played = FileTask(backend.join("ckpt.ckpt"), segments, 3,
                          FilePattern((size,), synced=False, first_written=FirstWritten.TMPDIR))
        assert engine.write_files([played]) == size
        assert (tmp_path / "root" / "ckpt.ckpt").stat().st_size == size
        assert sorted(p.name for p in tmpdir.iterdir()) == ["theirs"]
    finally:
        engine.close()
        if device == "other":
            shutil.rmtree(tmpdir)


def test_the_frameworks_time_on_each_item_is_played_before_it_and_counted_as_the_frameworks(tmp_path, monkeypatch):
    """``WriterSettings.item_seconds`` (``checkpoint.framework_item_us``): each item of a file whose calls mark
    items (DCP's) is preceded by that long a busy loop, whose CPU time is the framework's (``take_framework_cpu``).
    The thread's CPU clock is the wall clock here and the CRC-32 costs nothing, so that what is counted is the loops
    alone and a loaded machine's scheduling cannot move it; a file whose calls mark no items plays none."""
    from dlio_ckpt.io.engine import framework

    monkeypatch.setattr(framework.time, "thread_time", framework.time.perf_counter)
    monkeypatch.setattr(framework.zlib, "crc32", lambda _data: 0)
    backend = get_backend("local_fs", str(tmp_path), {})
    engine = Engine(backend, 5, IOOptions(chunk_size=1 << 20), writers=WriterSettings(item_seconds=0.004))
    try:
        for marked in (True, False):
            one = task(backend.join(f"items_{marked}"), True)
            assert engine.write_files([FileTask(one.path, one.segments, one.key,
                                                FilePattern(one.pattern.calls, items=marked))]) == FILE.size
            played = engine.take_framework_cpu()
            assert played >= len(ITEMS) * 0.004 if marked else played < 0.004  # not one loop
    finally:
        engine.close()
