"""Runs one process's share of a checkpoint: writes or reads-and-verifies a list of files.

Why it looks like this: memory must stay bounded whatever the checkpoint size, and writes must run
at storage speed. So the engine streams each file in chunks taken straight from the synthetic pool
(no copy, no per-write allocation), allocates its two buffers once, and copies only when O_DIRECT
needs an aligned staging buffer around format metadata. It knows neither model shapes nor storage
protocols: it gets segments from a format and moves them through a backend.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .backends import Backend, Writer
from .errors import StorageError, VerifyError
from .formats import Segment, file_size
from .synthetic import BLOCK, SyntheticData, first_difference


def _address(view: memoryview) -> int:
    """Memory address of a buffer: O_DIRECT needs aligned memory as well as aligned offsets."""
    return np.frombuffer(view, dtype=np.uint8).ctypes.data


@dataclass(frozen=True)
class FileTask:
    path: str
    segments: tuple[Segment, ...]
    key: int  # synthetic-data identity of the file (who wrote it, which step)

    @property
    def size(self) -> int:
        return file_size(list(self.segments))


@dataclass(frozen=True)
class IOOptions:
    fsync: bool = False
    odirect: bool = False
    evict_before_read: bool = True
    chunk_size: int = 8 << 20


class Engine:
    def __init__(self, backend: Backend, data: SyntheticData, options: IOOptions) -> None:
        caps = backend.capabilities
        if options.fsync and not caps.fsync:
            raise StorageError(f"checkpoint.fsync=True but storage {backend.name} cannot fsync")
        if options.odirect and not caps.odirect:
            raise StorageError(f"checkpoint.odirect=True but storage {backend.name} has no O_DIRECT")
        self.backend, self.data, self.options = backend, data, options
        self._chunk = options.chunk_size
        self._align = caps.alignment if options.odirect else 1
        self._staging = mmap.mmap(-1, self._chunk)  # page-aligned, allocated once
        self._readbuf = mmap.mmap(-1, self._chunk)

    # -- content -------------------------------------------------------------------------------

    def _pieces(self, task: FileTask) -> Iterator[memoryview]:
        """The file's bytes in order. Payload windows end on chunk boundaries of the *file*, so
        after any metadata the stream realigns and later chunks need no staging copy."""
        file_offset = 0
        stream_offset = 0  # offset in the file's payload stream (each segment starts block-aligned)
        for seg in task.segments:
            if isinstance(seg, bytes):
                yield memoryview(seg)
                file_offset += len(seg)
                continue
            stream_offset = -(-stream_offset // BLOCK) * BLOCK
            remaining = seg
            while remaining:
                room = self._chunk - file_offset % self._chunk
                n = min(remaining, room if room % BLOCK == 0 else self._chunk)
                yield self.data.window(task.key, stream_offset, n)
                remaining -= n
                stream_offset += n
                file_offset += n

    # -- write ---------------------------------------------------------------------------------

    def write_files(self, tasks: list[FileTask]) -> int:
        """Write every file, then fsync each (``checkpoint.fsync``): the rank's end time follows the
        last fsync, and the kernel writes one file back while the next is being written instead of
        the stream stalling after every file."""
        nbytes = sum(self._write_file(t) for t in tasks)
        if self.options.fsync:
            for t in tasks:
                self.backend.sync(t.path)
        return nbytes

    def _write_file(self, task: FileTask) -> int:
        writer = self.backend.open_write(task.path, self.options.odirect)
        try:
            if self._align == 1:
                for piece in self._pieces(task):
                    writer.write(piece)
            else:
                self._write_staged(writer, task)
            writer.finish(fsync=False)
        except BaseException:
            writer.abort()
            raise
        return task.size

    def _write_staged(self, writer: Writer, task: FileTask) -> None:
        """O_DIRECT: write aligned runs straight from the pool; copy only what is unaligned."""
        staged, stage = 0, memoryview(self._staging)
        for piece in self._pieces(task):
            while piece:
                if staged == 0 and len(piece) >= self._align and _address(piece) % self._align == 0:
                    cut = len(piece) - len(piece) % self._align
                    writer.write(piece[:cut])
                    piece = piece[cut:]
                    continue
                n = min(len(piece), self._chunk - staged)
                stage[staged:staged + n] = piece[:n]
                staged += n
                piece = piece[n:]
                if staged == self._chunk:
                    writer.write(stage)
                    staged = 0
        if staged:
            writer.write(stage[:staged])
        stage.release()

    # -- read ----------------------------------------------------------------------------------

    def read_files(self, tasks: list[FileTask]) -> int:
        if self.options.evict_before_read and not self.options.odirect:
            for t in tasks:
                self.backend.evict(t.path)
        return sum(self._read_file(t) for t in tasks)

    def _read_file(self, task: FileTask) -> int:
        actual = self.backend.size(task.path)
        if actual != task.size:
            raise VerifyError(f"{task.path}: has {actual} bytes, planned {task.size}"
                              if actual is not None else f"{task.path}: missing")
        reader = self.backend.open_read(task.path, self.options.odirect)
        buf = memoryview(self._readbuf)
        try:
            base, used, filled = 0, 0, 0
            for piece in self._pieces(task):
                while piece:
                    if used == filled:
                        base += filled
                        used, filled = 0, reader.readinto(buf)
                        if filled == 0:
                            raise VerifyError(f"{task.path}: ended at offset {base}, planned {task.size}")
                    n = min(len(piece), filled - used)
                    bad = first_difference(buf[used:used + n], piece[:n])
                    if bad is not None:
                        off = base + used + bad
                        raise VerifyError(f"{task.path}: wrong data at offset {off} "
                                          f"(4 KiB block {off // BLOCK})")
                    used += n
                    piece = piece[n:]
        finally:
            buf.release()
            reader.close()
        return task.size

    def close(self) -> None:
        self._staging.close()
        self._readbuf.close()
