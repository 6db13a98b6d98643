"""How a framework's load reads its items on S3, in process: the spans the S3 backend asks for are the range groups of
s3torchconnector's own ``DCPOptimizedS3Reader`` (``S3StorageReader``'s default reader), and the engine reads a
rank's items in those spans, one stream each, every byte compared (a wrong byte in a gap between items is found
too: it is read). The requests a real ``dcp.load`` makes on a server are held in tests/e2e/test_s3_io_pattern.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlio_ckpt.errors import VerifyError
from dlio_ckpt.io.backends import check_options
from dlio_ckpt.io.backends.base import ItemReader
from dlio_ckpt.io.backends.local_fs import LocalFSBackend
from dlio_ckpt.io.backends.s3 import ITEM_GAP, item_spans
from dlio_ckpt.io.engine import Engine, IOOptions
from tests.support.item_file import FILE, ranges, task

MIB = 1 << 20
CASES = [
    [(0, 10), (10, 5), (15, 100)],  # adjacent: one
    [(0, 10), (10 + ITEM_GAP, 5)],  # a gap of exactly the most: joined
    [(0, 10), (11 + ITEM_GAP, 5)],  # one byte more: two
    [(50 * MIB, 7), (0, 3), (4, 0), (20 * MIB, 1)],  # unsorted, an empty one: sorted, the empty one dropped
]


@pytest.mark.parametrize("items", CASES)
def test_the_spans_are_s3torchconnectors_range_groups(items):
    pytest.importorskip("s3torchconnector")
    from s3torchconnector.s3reader.dcp_optimized import DCPOptimizedS3Reader, ItemRange

    sorted_items = sorted(items)  # S3StorageReader.prepare_local_plan sorts them before the reader sees them
    reader = DCPOptimizedS3Reader("bucket", "key", [ItemRange(o, o + n) for o, n in sorted_items],
                                  get_object_info=lambda: None, get_stream=lambda start, end: iter(()))
    assert item_spans(items) == [(g.start, g.end) for g in reader._range_groups]


class SpanFS(LocalFSBackend):
    """Local files read as the S3 backend reads a framework's items: in :func:`item_spans`, each span a stream
    from its start to its end (no positional reads, as on an object store)."""

    capabilities = replace(LocalFSBackend.capabilities, positional=False)
    opened: list[tuple[int, int]]

    def item_reader(self):
        return ItemReader("spans of nearby items", lambda ranges: item_spans(ranges, gap=4096), lambda _: 1)

    def open_span(self, path, start, end):
        self.opened.append((start, end))
        return _Span(path, start, end)


class _Span:
    def __init__(self, path: str, start: int, end: int) -> None:
        self._f, self._left = open(path, "rb"), end - start
        self._f.seek(start)

    def readinto(self, buf) -> int:
        n = self._f.readinto(memoryview(buf)[:min(len(buf), self._left, 65536)])
        self._left -= n
        return n

    def close(self) -> None:
        self._f.close()


def test_the_engine_reads_a_ranks_items_in_the_storages_spans_and_compares_every_byte(tmp_path):
    backend = SpanFS(str(tmp_path), check_options("local_fs", {}))
    backend.opened = []
    engine = Engine(backend, 5, IOOptions(chunk_size=1 << 20))
    try:
        played = task(backend.join("played"), True)
        assert engine.write_files([played]) == FILE.size
        every = ranges()
        assert engine.read_ranges([(played, every)]) == FILE.size  # all items: one span, the whole file
        assert backend.opened == [(0, FILE.size)]
        backend.opened.clear()
        first, last = every[0], every[-1]  # the first item and the last (ITEMS' 12 MiB tensor): far apart
        got = engine.read_ranges([(played, (last, first))])
        assert backend.opened == [(first[0], sum(first)), (last[0], sum(last))] and got == first[1] + last[1]
        backend.opened.clear()
        near = every[:2] + every[3:4]  # a gap of one item (< 4 KiB here): read, and compared
        raw = bytearray((tmp_path / "played").read_bytes())
        where = every[2][0] + 10  # inside the item left out
        raw[where] ^= 1
        (tmp_path / "played").write_bytes(bytes(raw))
        with pytest.raises(VerifyError, match=f"played: wrong data at offset {where} "):
            engine.read_ranges([(played, near)])
        assert backend.opened == [(0, sum(every[3]))]
    finally:
        engine.close()
