"""The framework pattern in the engine, in process: a file written by its framework's calls holds the bytes the
tuned stream writes (so either pattern reads and verifies the other's checkpoint), its items read back as
``torch.load`` reads them, a wrong byte in a header or a tensor named by its offset, a failing writer thread
ending the save with its error. (The calls themselves are held to the frameworks under strace in
tests/against_frameworks/test_io_patterns.py.)"""

from __future__ import annotations

import pytest

from dlio_ckpt.errors import StorageError, VerifyError
from dlio_ckpt.io.backends import get_backend
from dlio_ckpt.io.engine import Engine, FileTask, IOOptions
from dlio_ckpt.plan.layouts.dcp import file_calls, item_segments, item_size
from dlio_ckpt.plan.types import Item, ItemFile

ITEMS = (Item("optim.param_groups.0.lr", "", (), pickled=b"\x80\x02G?PbM\xd2\xf1\xa9\xfc."),
         Item("w", "bf16", (1024, 96)), Item("b", "fp32", (7,)), Item("e", "bf16", (0, 96)),
         Item("big", "fp32", (3, 1 << 20)))
FILE = ItemFile("__0_0", ITEMS, sum(i.nbytes for i in ITEMS), sum(item_size(i) for i in ITEMS))


def task(path: str, framework: bool) -> FileTask:
    segments = tuple(s for i in ITEMS for s in item_segments(i))
    return FileTask(path, segments, 11, file_calls(FILE) if framework else None)


def ranges() -> tuple[tuple[int, int], ...]:
    out, at = [], 0
    for item in ITEMS:
        out.append((at, item_size(item)))
        at += item_size(item)
    return tuple(out)


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
    engine = Engine(backend, 5, IOOptions(chunk_size=1 << 20))
    engine.framework_writers = 2
    (tmp_path / "blocked").write_text("a file where a folder must be")
    tasks = [task(backend.join(f"f{k}"), True) for k in range(3)] + [task(backend.join("blocked/x"), True)]
    try:
        with pytest.raises(StorageError, match="blocked/x"):
            engine.write_files(tasks)
    finally:
        engine.close()
