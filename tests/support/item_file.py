"""One DCP ``.distcp`` file of items of every kind (a pickled object, bf16 and fp32 tensors, an empty one, one of
12 MiB), as the engine writes and reads it: its write task, played by DCP's calls or streamed, and its items'
ranges. The framework pattern's tests in the engine (tests/unit/test_io_patterns.py) and the S3 reads of a
framework's items (tests/unit/test_s3_item_spans.py) share it."""

from __future__ import annotations

from dlio_ckpt.io.engine import FileTask
from dlio_ckpt.plan.layouts.dcp import file_calls, item_segments, item_size
from dlio_ckpt.plan.pattern import FilePattern
from dlio_ckpt.plan.types import Item, ItemFile

ITEMS = (Item("optim.param_groups.0.lr", "", (), pickled=b"\x80\x02G?PbM\xd2\xf1\xa9\xfc."),
         Item("w", "bf16", (1024, 96)), Item("b", "fp32", (7,)), Item("e", "bf16", (0, 96)),
         Item("big", "fp32", (3, 1 << 20)))
FILE = ItemFile("__0_0", ITEMS, sum(i.nbytes for i in ITEMS), sum(item_size(i) for i in ITEMS))


def task(path: str, framework: bool) -> FileTask:
    """The file's write task at ``path``: played by DCP's calls (``framework``), or the tuned stream."""
    segments = tuple(s for i in ITEMS for s in item_segments(i))
    return FileTask(path, segments, 11, FilePattern(file_calls(FILE)) if framework else None)


def ranges() -> tuple[tuple[int, int], ...]:
    """Each item's (offset, length) in the file, in order."""
    out, at = [], 0
    for item in ITEMS:
        out.append((at, item_size(item)))
        at += item_size(item)
    return tuple(out)
