"""The file objects a framework writes and reads through, over a storage's writer or reader: Python's buffered
file (``open(path, "wb")`` and ``"rb"``) and the C++ stream ``torch.save(obj, path)`` opens, so the storage sees
the calls it sees under the framework."""

from __future__ import annotations

import io
from typing import Any

from dlio_ckpt.io.backends import RangedReader, VectorWriter, Writer


class _RawWriter(io.RawIOBase):
    """A storage writer as the raw file under Python's :class:`io.BufferedWriter`: the buffered file a
    framework's ``open(path, "wb")`` gives it, so its calls reach storage coalesced as CPython coalesces
    them (pieces that fit the buffer copied into it, larger ones written through whole)."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        self._writer.write(view)
        return len(view)


class _FileBuf:
    """The C++ stream ``torch.save(obj, path)`` writes through (libstdc++'s ``basic_filebuf``, the one
    ``std::ofstream`` torch's ``PyTorchFileWriter`` opens): a buffer of 8 KiB, one byte kept back. A piece of at
    least 1 KiB, or at least the room left, goes out at once with what is pending, in one ``writev``; a smaller
    one is copied in; the close writes what is pending. Seen under strace with torch 2.13.0: a 4 MiB tensor's
    archive is ``writev(704 + 4194304)`` then ``write(781)``."""

    SIZE, CHUNK = 8192, 1024

    def __init__(self, writer: Writer) -> None:
        self._writer, self._pending = writer, bytearray()

    def write(self, b: Any) -> None:
        view = memoryview(b).cast("B")
        if len(view) >= min(self.CHUNK, self.SIZE - 1 - len(self._pending)):
            _writev(self._writer, [memoryview(self._pending), view])
            self._pending.clear()
        else:
            self._pending += view

    def flush(self) -> None:
        """What is pending, in one ``write`` (torch.save(path) flushes only when it closes the stream)."""
        if self._pending:
            self._writer.write(memoryview(self._pending))
            self._pending.clear()


def _writev(writer: Writer, parts: list[memoryview]) -> None:
    """One gathered write where the storage has it (a file's ``writev(2)``), else the parts in order."""
    if isinstance(writer, VectorWriter):
        writer.writev(parts)
        return
    for part in parts:
        if len(part):
            writer.write(part)


class _RawReader(io.RawIOBase):
    """A storage reader as the raw file under Python's :class:`io.BufferedReader`: the buffered file a framework's
    ``open(path, "rb")`` gives it, so its reads reach storage as CPython's buffer makes them (small ones filled
    a block at a time, seeks inside the block free, large ones read through). Counts the bytes storage served."""

    def __init__(self, reader: RangedReader, size: int) -> None:
        self._reader, self._size, self._at, self.served = reader, size, 0, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._at = (offset, self._at + offset, self._size + offset)[whence]
        return self._at

    def tell(self) -> int:
        return self._at

    def readinto(self, b: Any) -> int:
        """One request, of no more than the file holds from here: storage answers it in one call, as a file's
        ``read(2)`` near its end returns what is left."""
        view = memoryview(b).cast("B")[:max(self._size - self._at, 0)]
        n = self._reader.read_at(view, self._at) if len(view) else 0
        self._at += n
        self.served += n
        return n
