"""Runs one process's share of a checkpoint: writes or reads-and-verifies a list of files.

Why it looks like this: memory must stay bounded whatever the checkpoint size, and writes must run
at the storage's limit. So the engine cuts each file into chunks at fixed file offsets and makes each
chunk in a buffer allocated once (:mod:`~dlio_ckpt.io.synthetic`: one XOR pass over its pool, no per-write
allocation; the format's few bytes are written over the window for the call and put back). A storage that
reads and writes at offsets (file systems: ``capabilities.positional``) gets ``queue_depth`` chunks of a
file in flight at once, as fio's iodepth, from buffers allocated once; a stream (object stores, GDS) gets
them in order.
It knows neither model shapes nor storage protocols: it gets segments from a format and moves them
through a backend.

A file may also come with its framework's calls (``FileTask.pattern``, ``checkpoint.io_pattern=framework``):
then it is written as the framework writes it, each call through a buffered file object of the storage's
block size (the buffering a framework's ``open(path, "wb")`` gets), by a few writer threads taking whole
files, each file synced on its own descriptor before it is closed (DCP's ``FileSystemWriter``).

The package, by pattern: :mod:`.tasks` (what is moved), :mod:`.content` (the bytes made and checked),
:mod:`.buffers` (the memory owned), :mod:`.files` (a framework's file objects), :mod:`.core` (what both patterns
share), :mod:`.stream` and :mod:`.framework` (the two patterns), and here the engine itself: which pattern plays a
batch of files."""

from __future__ import annotations

from dlio_ckpt.io.engine.buffers import check_capabilities, io_buffer_bytes
from dlio_ckpt.io.engine.content import _abort, _close, _finish
from dlio_ckpt.io.engine.framework import LARGEST_CALL, FrameworkPattern
from dlio_ckpt.io.engine.stream import StreamPattern
from dlio_ckpt.io.engine.tasks import FileTask, IOOptions, WriterSettings, _RangedRead

__all__ = ["LARGEST_CALL", "Engine", "FileTask", "IOOptions", "WriterSettings", "check_capabilities", "io_buffer_bytes"]


def _one_way(ways: set[object]) -> None:
    """A batch is played one way, chosen by its files (a framework's calls or the stream; a framework's reads, an
    archive's or the stream's): files that differ are our bug, refused rather than played the first file's way."""
    if len(ways) > 1:
        raise AssertionError(f"a batch of files to be played in different ways: {sorted(map(str, ways))}")


class Engine(StreamPattern, FrameworkPattern):
    """Moves a process's files through a backend, ``backend.options.threads`` files at a time: each batch by the
    pattern its files come with."""

    def write_files(self, tasks: list[FileTask], writers: int | None = None) -> int:
        """Write every file, then fsync each (``checkpoint.fsync``): the rank's end time follows the
        last fsync, and the kernel writes one file back while the next is being written instead of
        the stream stalling after every file. Stores that commit on close need no second pass.
        Files that come with their framework's calls are written as it writes them (:meth:`_as_framework`), by
        ``writers`` threads (the engine's :class:`WriterSettings` by default)."""
        _one_way({t.pattern is None for t in tasks})
        if tasks and tasks[0].pattern is not None:
            return self._as_framework(tasks, writers or self.writers.threads, writers == 1 or
                                      self.writers.caller_writes)
        if self._positional:
            nbytes = self._positioned(tasks, self._open_write, self._write_chunk, _finish, _abort, self._write_depth)
        else:
            nbytes = self._each(self._write_file, tasks)
        if self.options.fsync and not self.backend.capabilities.durable_on_close:
            self._each(lambda _, t: self._sync(t.path), tasks)
        return nbytes

    def read_files(self, tasks: list[FileTask]) -> int:
        """Read every file whole, each byte compared with what was written; a file that comes with its
        framework's reads (a coordinator's ``.metadata``, on a file system) is read by them (:meth:`_read_calls`),
        and a file that is one ``torch.save`` archive (``FilePattern.archive``) as ``torch.load`` reads it."""
        _one_way({(p is None or p.reads is None, p is not None and p.archive) for p in (t.pattern for t in tasks)})
        pattern = tasks[0].pattern if tasks else None
        caps = self.backend.capabilities
        if self.options.evict_before_read and not self.options.odirect and caps.evict_cache:
            self._each(lambda _, t: self._evict(t.path), tasks)
        if not self._verify:
            return self._each(self._read_unverified, tasks)
        if pattern is not None and pattern.reads is not None and self._positional:
            return self._each(self._read_calls, tasks)
        if pattern is not None and pattern.archive and self._positional:
            return self._each(lambda worker, task: self._read_items(worker, task, ((0, task.size),)), tasks)
        if self._positional:
            return self._positioned(tasks, self._open_read, self._read_chunk, _close, _close, self._read_depth)
        return self._each(self._read_file if self.options.verify else self._read_counted, tasks)

    def read_ranges(self, reads: list[tuple[FileTask, tuple[tuple[int, int], ...]]]) -> int:
        """Read byte ranges of files, every byte compared with what was written there: a restore that
        needs slices of other ranks' files (:mod:`dlio_ckpt.plan.reads`). Each file is opened once and its
        ranges read in the order given, adjacent ones as one, each in requests of at most ``chunk_size``
        (on object stores a ranged GET each), one in flight per file: DCP's ``FileSystemReader`` reads a
        rank's items one after another from one stream. Under O_DIRECT a range is widened to whole
        blocks, and the bytes read count them. Files that come with their framework's calls are read as
        its reader reads them: on a file system item by item (:meth:`_read_items`), on a storage that says how
        its framework client reads items (``item_reader``: S3, s3torchconnector's ``S3StorageReader``) in
        those spans (:meth:`_read_spans`). Returns the bytes read."""
        _one_way({t.pattern is None for t, _ in reads})
        caps = self.backend.capabilities
        if self.options.evict_before_read and not self.options.odirect and caps.evict_cache:
            files = list({t.path: t for t, _ in reads}.values())  # a file many ranks read, evicted once
            self._each(lambda _, t: self._evict(t.path), files)
        if reads and reads[0][0].pattern is not None and self._positional and self._verify:
            return self._each(lambda worker, job: self._read_items(worker, job.task, job.spans),
                              [_RangedRead(task, ranges) for task, ranges in reads])
        if reads and reads[0][0].pattern is not None and self._verify and \
                (client := self.backend.item_reader()) is not None:
            spanned = [(task, client.spans(self._within(task, ranges))) for task, ranges in reads]
            if all(s is not None for _, s in spanned):
                return self._each(lambda worker, job: self._read_spans(worker, job.task, job.spans),
                                  [_RangedRead(task, tuple(s or ())) for task, s in spanned])
        # one entry per (rank, file) read: several loading ranks of this process may read one file
        jobs = [_RangedRead(task, self._asked(task, ranges)) for task, ranges in reads]
        return self._each(lambda worker, job: self._read_ranges(worker, job.task, job.spans), jobs)
