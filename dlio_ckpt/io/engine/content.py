"""A file's bytes as the engine makes and checks them: a window of the payload stream with the format's bytes
written over it for one call, and the first wrong byte named by file, offset and whose block came back."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import Any

from dlio_ckpt.errors import VerifyError
from dlio_ckpt.io.backends import Reader, ViewsReader, Writer
from dlio_ckpt.io.engine.tasks import FileTask
from dlio_ckpt.io.synthetic import BLOCK, STAMP_BYTES, SyntheticData


def _patched(window: Any, patches: list[tuple[int, bytes]]) -> Iterator[tuple[int, Any]]:
    """A chunk's bytes in order as (offset in the chunk, bytes): payload from ``window``, the
    format's bytes from ``patches``."""
    at = 0
    for offset, raw in patches:
        if offset > at:
            yield at, window[at:offset]
        yield offset, memoryview(raw)
        at = offset + len(raw)
    if at < len(window):
        yield at, window[at:]


@contextmanager
def _formatted(window: Any, patches: list[tuple[int, bytes]]) -> Iterator[None]:
    """The format's bytes written over a pool window for one call (a write, a compare) and put back after:
    a few hundred bytes moved, against a copy of the whole chunk; the pool stays as generated."""
    saved = [(offset, bytes(window[offset:offset + len(raw)])) for offset, raw in patches]
    try:
        for offset, raw in patches:
            window[offset:offset + len(raw)] = raw
        yield
    finally:
        for offset, raw in saved:
            window[offset:offset + len(raw)] = raw


def _window_of(data: SyntheticData, task: FileTask, start: int, end: int, skip: int = 0,
             ) -> tuple[Any, list[tuple[int, bytes]]]:
    """The file's bytes [start, end) as a window of its payload stream and the format's bytes that take the
    place of parts of it, as (offset in the window, bytes); ``skip``: bytes at the window's start the
    caller will not look at (left unstamped, block-aligned). ``start`` need not be block-aligned (a
    framework's tensor follows a header): the window is cut from one that is, with no copy."""
    lead = start % BLOCK
    window = data.window(task.key, start - lead, end - start + lead, skip, task.dtype)[lead:]
    meta = task.format_pieces
    patches = []
    for i in range(max(bisect_right(task.format_starts, start + skip) - 1, 0), len(meta)):
        offset, raw = meta[i]
        if offset >= end:
            break
        lo, hi = max(offset, start), min(offset + len(raw), end)
        if lo < hi:
            patches.append((lo - start, raw[lo - offset:hi - offset]))
    return window, patches


def _wrong(task: FileTask, offset: int, data: SyntheticData | None = None, got: Any = None, base: int = 0,
           ) -> VerifyError:
    """The first wrong byte, by file and offset; and, where ``got`` (the file's bytes from ``base``) holds the
    stamp of the block there, whose block came back instead (another file's, rank's, checkpoint's, run's)."""
    message = f"{task.path}: wrong data at offset {offset} (4 KiB block {offset // BLOCK})"
    at = offset - offset % BLOCK - base
    if data is not None and got is not None and 0 <= at and at + STAMP_BYTES <= len(got):
        whose = data.foreign(got[at:at + STAMP_BYTES], task.key, offset // BLOCK)
        if whose is not None:
            message += f": it holds {whose}"
    return VerifyError(message)


def _chunks(reader: Reader, buf: Any) -> Generator[Any, None, None]:
    """A file's bytes as the reader delivers them: in its own buffers where it lends them
    (``views``: verified where they landed, no copy), else read into ``buf`` one fill at a time."""
    if isinstance(reader, ViewsReader):
        yield from reader.views()
        return
    while filled := reader.readinto(buf):
        yield buf[:filled]


@contextmanager
def finished(writer: Writer) -> Iterator[Writer]:
    """A file written in the block: its writer finished at the end (the file whole, an object committed), or
    aborted where the block or the finish raises (nothing left half-written where the storage can help it)."""
    try:
        yield writer
        writer.finish()
    except BaseException:
        writer.abort()
        raise


def _finish(writer: Writer) -> None:
    writer.finish()


def _abort(writer: Writer) -> None:
    writer.abort()


def _close(reader: Reader) -> None:
    reader.close()
