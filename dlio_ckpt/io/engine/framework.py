"""A framework's I/O pattern (``checkpoint.io_pattern=framework``): a file that comes with its framework's calls
(``FileTask.pattern``) is written as the framework writes it, each call through a buffered file object of the
storage's block size (the buffering a framework's ``open(path, "wb")`` gets) or torch.save's C++ stream, by a few
writer threads taking whole files, each file synced on its own descriptor before it is closed (DCP's
``FileSystemWriter``); and read as its loader reads it (``torch.load``'s and ``pickle.load``'s reads through a
buffered file, or a client's own spans on an object store). The framework's own CPU work (torch.save's CRC-32) and
its copies from the accelerators are played too, and counted apart."""

from __future__ import annotations

import io
import os
import queue
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import cast

from dlio_ckpt.errors import VerifyError
from dlio_ckpt.io.backends import Backend, SyncingWriter, Writer
from dlio_ckpt.io.engine.buffers import _CallWriter, _Worker
from dlio_ckpt.io.engine.content import _chunks, _formatted, _window_of, _wrong, finished
from dlio_ckpt.io.engine.core import EngineCore
from dlio_ckpt.io.engine.files import _FileBuf, _RawReader, _RawWriter
from dlio_ckpt.io.engine.tasks import FileTask, IOOptions, WriterSettings, _item_reads
from dlio_ckpt.io.synthetic import BLOCK, SLACK, first_difference
from dlio_ckpt.io.trace import Tracer
from dlio_ckpt.plan.formats import FLUSH
from dlio_ckpt.plan.pattern import FileObject, FilePattern, FirstWritten

# A framework's write of a whole tensor is one call; beyond this it is made in pieces of it, so that a writer
# thread holds at most this much synthetic data (the framework holds the whole state in memory)
LARGEST_CALL = 256 << 20


TOLD_AT_LEAST = 1 << 20  # a framework's read of at least this is told to the progress by itself


ONE_WRITER = WriterSettings()  # the caller's thread alone, no copies from an accelerator
SLEEP_AT_LEAST = 0.002  # a writer thread's modelled copies are slept once they add up to this (s)


class FrameworkPattern(EngineCore):
    """The framework pattern's writer threads, files and reads."""

    def __init__(self, backend: Backend, run_key: int, options: IOOptions,
                 progress: Callable[[str, int], None] = lambda _path, _n: None,
                 writers: WriterSettings = ONE_WRITER) -> None:
        super().__init__(backend, run_key, options, progress)
        self.writers = writers
        self._run_key = run_key  # the synthetic bytes' key, which the writer threads' sources are made of
        self._copy_seconds: dict[int, float] = {}  # modelled copy time by writer thread, since the last take
        self._framework_cpu = 0.0  # CPU seconds of the framework's own work played, since the last take
        self._sleep_owed = threading.local()  # a writer thread's modelled copy time not yet slept (s; < 0: credit)
        self._call_writers: list[_CallWriter] = []  # made when such files first come, as large as their calls
        self._in_memory = 0  # the largest piece a writer copies into memory before writing it (Lightning's)

    @cached_property
    def _buffer_size(self) -> int:
        """The buffer of a framework's file object on this storage (asked once)."""
        return self.backend.buffer_size

    @property
    def buffer_bytes(self) -> int:
        """The stream's buffers, and the framework writers' sources once made (with the piece each copies into
        memory first where its framework serializes into memory, and their datatypes' pools)."""
        return super().buffer_bytes + sum(w.window + SLACK + self._in_memory + w.data.value_pool_bytes
                                          for w in self._call_writers)

    def close(self) -> None:
        for c in self._call_writers:
            c.close()
        super().close()

    def _as_framework(self, tasks: list[FileTask], threads: int, caller_writes: bool) -> int:
        """``threads`` threads, each file made of its calls (:meth:`_write_calls`). DCP's ``FileSystemWriter``
        (``caller_writes``): the caller's thread one of them, each taking the next whole file from one queue until
        none is left. megatron-core's writer processes: the caller waits, and writer ``i`` writes files ``i``,
        ``i + threads``, ... (its bucket: one process a bucket, ``write_preloaded_data_multiproc`` in
        ``filesystem_async.py`` of megatron-core 0.16.1), so a writer that starts first does not take another's file.
        The first error stops the others after the file they are on."""
        writers = self._framework_pool(tasks, threads)
        failed: list[BaseException] = []
        written = [0] * len(writers)
        if caller_writes:
            todo: queue.SimpleQueue[FileTask] = queue.SimpleQueue()
            for task in tasks:
                todo.put(task)

            def next_file(i: int) -> FileTask | None:  # noqa: ARG001 (one queue for every writer)
                try:
                    return todo.get_nowait()
                except queue.Empty:
                    return None
        else:
            buckets = [iter(tasks[i::len(writers)]) for i in range(len(writers))]

            def next_file(i: int) -> FileTask | None:
                return next(buckets[i], None)

        def drain(i: int) -> None:
            try:
                while not failed and (task := next_file(i)) is not None:
                    written[i] += self._attempt(self._write_calls, writers[i], task)
            except BaseException as exc:  # noqa: BLE001 (handed to the caller's thread, raised there)
                failed.append(exc)

        first = 1 if caller_writes else 0
        helpers = [threading.Thread(target=drain, args=(i,), name="dlio_ckpt_writer")
                   for i in range(first, len(writers))]
        for helper in helpers:
            helper.start()
        if caller_writes:
            drain(0)
        for helper in helpers:
            helper.join()
        if failed:
            raise failed[0]
        return sum(written)

    def _framework_pool(self, tasks: list[FileTask], threads: int) -> list[_CallWriter]:
        """One source per writer thread, as large as the largest call of ``tasks`` (at most
        :data:`LARGEST_CALL`): made once, remade only for more threads or larger calls."""
        patterns = [_pattern(t) for t in tasks]
        largest = min(max((n for p in patterns for n in p.calls), default=1), LARGEST_CALL)
        # a python file object's buffer is written from the same source, whole
        largest = max(largest, self._buffer_size if any(p.file_object is FileObject.PYTHON for p in patterns) else 0)
        size = max([-(-largest // BLOCK) * BLOCK, *(w.calls for w in self._call_writers)])
        # played by its arithmetic (_write_through_buffer): what it keeps goes out from one window with the next call
        buffered = any(p.file_object is FileObject.PYTHON and not p.in_memory for p in patterns)
        before = max([-(-self._buffer_size // BLOCK) * BLOCK if buffered else 0,
                      *(w.before for w in self._call_writers)])
        count = max(1, min(threads, len(tasks)))
        if len(self._call_writers) < count or self._call_writers[0].calls < size or \
                self._call_writers[0].before < before:
            for w in self._call_writers:
                w.close()
            self._call_writers = [_CallWriter(self._run_key, size, self.options.reduction, before)
                                  for _ in range(count)]
        if any(p.in_memory for p in patterns):  # each writer also holds a copy of the piece it writes (buffer_bytes)
            self._in_memory = max(self._in_memory, largest)
        return self._call_writers[:count]

    def _write_calls(self, w: _CallWriter, task: FileTask) -> int:
        """One file as its framework writes it: opened, each call made on a buffered file of the storage's
        block size (a flush where the framework flushes), synced on its own descriptor before it is closed
        (``checkpoint.fsync``; the framework's buffer is flushed at the close, after the fsync, as DCP's
        ``with open(...)`` does), closed. The file's bytes are the stream's, offset for offset. Each payload
        call's CRC-32 is computed as ``torch.save`` computes it over each record (torch 2.13.0's default): the one
        CPU cost of a save that grows with its bytes (its value is not written: the format's CRC fields stay 0).
        A file the framework serializes into memory first (``in_memory``: Lightning's ``torch.save`` into a
        ``BytesIO``) is copied into fresh memory piece by piece and written from the copy: the copy and its page
        faults are most of that save's CPU (``bench/lightning_phases.py``), played in bounded memory.
        A file the framework writes through torch.save's C++ stream goes through :class:`_FileBuf` instead; one it
        writes in ``$TMPDIR`` first (``FirstWritten.TMPDIR``, on a file system) is written there and moved into place
        (:meth:`Backend.rename <dlio_ckpt.io.backends.base.Backend.rename>`: a rename, or a copy to another
        device), as fsspec's transaction does under Lightning."""
        pattern = _pattern(task)
        staged = self._staged_path() if pattern.first_written is FirstWritten.TMPDIR and \
            self.backend.capabilities.rename else None
        sync = pattern.synced and self.options.fsync and not self.backend.capabilities.durable_on_close
        try:
            with finished(self.backend.open_write(staged or task.path, False)) as writer:
                own = sync and isinstance(writer, SyncingWriter)
                if pattern.file_object is FileObject.PYTHON and not pattern.in_memory:
                    self._write_through_buffer(w, writer, task, cast(SyncingWriter, writer).sync if own else None)
                else:
                    self._write_through_file_object(w, writer, task, pattern, own)
            return self._placed(task, staged, sync and not own)
        except BaseException:
            if staged is not None:
                self.backend.remove(staged)  # the temporary file this save made
            raise

    def _write_through_file_object(self, w: _CallWriter, writer: Writer, task: FileTask, pattern: FilePattern,
                                   own: bool) -> None:
        """A file's calls through a file object itself: torch.save's C++ stream (:class:`_FileBuf`), or Python's
        buffered file where the framework serializes into memory first; ``own``: synced on the writer's own
        descriptor before the last bytes go out, as :meth:`_write_calls` says."""
        buffered: io.BufferedWriter | _FileBuf = _FileBuf(writer) if pattern.file_object is FileObject.CPP else \
            io.BufferedWriter(_RawWriter(writer), self._buffer_size)
        offset = 0
        for n in pattern.calls:
            if n == FLUSH:
                buffered.flush()
                continue
            if (raw := task.format_slice(offset, offset + n)) is not None:  # a header: the format's alone
                buffered.write(raw)
                self._progress(task.path, n)
                offset += n
                continue
            if self.writers.device_copy_rate and pattern.tensors:
                self._copy_from_device(n)
            for at in range(offset, offset + n, w.calls):  # a call beyond LARGEST_CALL: in pieces of it
                end = min(at + w.calls, offset + n)
                window, patches = _window_of(w.data, task, at, end)
                with _formatted(window, patches):
                    t0 = time.thread_time()
                    zlib.crc32(window)  # torch.save's per-byte work (its CRC-32 of each record); not written
                    # torch.save into memory (Lightning's BytesIO): each byte copied into memory never touched
                    # before (its pages faulted in), the write made from that copy; a piece at a time, freed
                    source = bytearray(window) if pattern.in_memory else window
                    self._played(time.thread_time() - t0)
                    buffered.write(source)
                self._progress(task.path, end - at)
            offset += n
        if offset != task.size:
            raise AssertionError(f"{task.path}: calls of {offset} bytes for a file of {task.size}")
        if own:
            cast(SyncingWriter, writer).sync()
        buffered.flush()

    def _placed(self, task: FileTask, staged: str | None, sync_by_name: bool) -> int:
        """A written file's last steps: synced by name where its writer has no descriptor of its own to sync, and
        moved into place from ``$TMPDIR`` (``staged``; its caller removes it where this fails)."""
        if sync_by_name:
            self.backend.sync(staged or task.path)
        if staged is not None:
            self.backend.rename(staged, task.path)
        return task.size

    def _write_through_buffer(self, w: _CallWriter, writer: Writer, task: FileTask,
                              sync: Callable[[], None] | None) -> None:
        """A file's calls through Python's buffered file (``open(path, "wb")``, :class:`io.BufferedWriter` of the
        storage's block size), played by its arithmetic: only the ``write(2)`` calls it makes are made, each from
        the file's bytes. CPython 3.11's ``_io__Buffered_write_impl``: a call that fits the room left is kept; one
        that does not first writes what is kept, then is kept itself, or written at once whole when it is larger
        than the buffer; a flush writes what is kept. So the storage sees the calls it sees under the framework
        (the strace tests hold them to a real ``dcp.save``), and a tensor's dozens of small header calls cost a
        few integer operations instead of a Python write each (a scaled save of 139,540 tensors made 5.4 million).
        Each payload call's CRC-32 (torch.save's per-byte work) is computed before the buffer's bytes ahead of it go
        out, as torch.save computes a record's before handing it to the file: its header's write follows at once,
        as it does under the framework; its copy from the accelerator is modelled before it, as the framework
        copies before it writes.
        ``sync``: the writer's own fsync, made before the buffer's last bytes go out at the close (DCP's ``with
        open(...)``: ``os.fsync`` inside it, the flush at its end)."""
        size, piece = self._buffer_size, w.calls
        kept_at = kept = 0  # the buffer: where its bytes start in the file, how many
        payloads: list[tuple[int, int]] = []  # the payload calls among the bytes about to go out, (start, end)

        def emit(lo: int, hi: int, split_at: int | None = None) -> None:
            """The file's bytes [lo, hi) written, their payload calls' CRC-32s first (torch.save computes a
            record's before handing it to the file); ``split_at``: where a call that goes out whole starts, the
            kept bytes before it written by a call of their own."""
            window, patches = _window_of(w.data, task, lo, hi)
            with _formatted(window, patches):
                if payloads:
                    t0 = time.thread_time()
                    for start, end in payloads:
                        zlib.crc32(window[start - lo:end - lo])  # torch.save's CRC-32 of each record; not written
                    self._played(time.thread_time() - t0)
                for a, b in ((lo, split_at), (split_at, hi)) if split_at is not None and split_at > lo else ((lo, hi),):
                    writer.write(window[a - lo:b - lo])
                    self._progress(task.path, b - a)
            payloads.clear()

        meta, i = task.format_pieces, 0  # the format's pieces, in order; i: the first that does not end before offset
        offset, pattern = 0, _pattern(task)
        items = pattern.items and bool(self.writers.item_seconds or self._tracer is not None)
        item_starts = True
        for n in pattern.calls:
            if items and item_starts:
                self._framework_item(task.path)
            item_starts = n == FLUSH
            if n == FLUSH:
                if kept:
                    emit(kept_at, kept_at + kept)
                    kept = 0
                continue
            while i < len(meta) and meta[i][0] + len(meta[i][1]) <= offset:
                i += 1
            # a call of the format's bytes alone lies within one of its pieces (what format_slice finds, in order)
            payload = not (i < len(meta) and meta[i][0] <= offset and offset + n <= meta[i][0] + len(meta[i][1]))
            if payload and self.writers.device_copy_rate and pattern.tensors:
                self._copy_from_device(n)
            for at in range(offset, offset + n, piece) if payload else (offset,):  # beyond LARGEST_CALL: pieces
                m = min(piece, offset + n - at) if payload else n
                if m > size:  # larger than the buffer: what is kept goes out first, then the call, whole
                    if payload:
                        payloads.append((at, at + m))
                    emit(kept_at if kept else at, at + m, at)
                    kept = 0
                    continue
                if kept and m > size - kept:  # no room left: what is kept goes out first
                    emit(kept_at, kept_at + kept)
                    kept = 0
                if payload:
                    payloads.append((at, at + m))
                kept_at, kept = (kept_at, kept + m) if kept else (at, m)
            offset += n
        if offset != task.size:
            raise AssertionError(f"{task.path}: calls of {offset} bytes for a file of {task.size}")
        if sync is not None:
            sync()
        if kept:
            emit(kept_at, kept_at + kept)

    @cached_property
    def _tracer(self) -> Tracer | None:
        """The trace the storage's calls go to (``checkpoint.trace``), which also shows each item played."""
        return getattr(self.backend, "tracer", None)

    def _framework_item(self, path: str) -> None:
        """The framework's own time on an item before its first call (``checkpoint.framework_item_us``: DCP's
        planner and torch.save's archive and pickling), played busy: a loop that holds Python's lock as the
        framework's Python does, so that the process's other writer threads wait as they wait under DCP. Its CPU is
        the framework's (:meth:`_played`); on the trace an ``item`` event, also where nothing is played (trace-diff
        counts a save's items)."""
        t0 = time.perf_counter_ns()
        if self.writers.item_seconds:
            cpu, end = time.thread_time(), t0 + round(self.writers.item_seconds * 1e9)
            while time.perf_counter_ns() < end:
                pass
            self._played(time.thread_time() - cpu)
        if self._tracer is not None:
            self._tracer.item(path, t0, time.perf_counter_ns() - t0)

    def _copy_from_device(self, nbytes: int) -> None:
        """A tensor's copy from its accelerator before its framework writes it, modelled: a sleep at
        :attr:`WriterSettings.device_copy_rate` (memory bounded: no bytes move), counted per writer thread. A
        thread's copies are slept once they add up to :data:`SLEEP_AT_LEAST`, the time overslept kept as credit:
        a sleep of a few microseconds lasts some 60 µs or more here (the kernel's timer slack and a wake-up), so a
        sleep a tensor made a scaled save of 139,540 small tensors last 34 s for 0.013 s of modelled copies."""
        seconds = nbytes / self.writers.device_copy_rate
        with self._lock:
            thread = threading.get_ident()
            self._copy_seconds[thread] = self._copy_seconds.get(thread, 0.0) + seconds
        owed = getattr(self._sleep_owed, "s", 0.0) + seconds
        if owed >= SLEEP_AT_LEAST:
            t0 = time.perf_counter()
            time.sleep(owed)
            owed -= time.perf_counter() - t0
        self._sleep_owed.s = owed

    def _played(self, seconds: float) -> None:
        """CPU seconds a writer thread spent on the framework's own work it plays (torch.save's CRC-32, Lightning's
        copy into memory): a real job's cost too, told apart from ours (making and checking the bytes)."""
        with self._lock:
            self._framework_cpu += seconds

    def take_framework_cpu(self) -> float:
        """The CPU seconds of the framework's work played since the last call, all threads summed."""
        with self._lock:
            seconds, self._framework_cpu = self._framework_cpu, 0.0
        return seconds

    def take_copy_seconds(self) -> float:
        """The modelled copy time on this process's busiest writer thread since the last call: what the copies
        added to its save (its threads copy side by side, each at its share of its accelerator's rate)."""
        with self._lock:
            seconds, self._copy_seconds = max(self._copy_seconds.values(), default=0.0), {}
        return seconds

    @staticmethod
    def _staged_path() -> str:
        """A new temporary file in ``$TMPDIR``, made as fsspec's local transaction makes it (``mkstemp``) and
        reopened for the calls. Its mode is the one fsspec gives the file once it is in place (``0o666`` less the
        umask: ``mkstemp``'s 0600 would leave the checkpoint unreadable to others)."""
        fd, path = tempfile.mkstemp()
        os.close(fd)
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(path, 0o666 & ~umask)
        return path

    def _read_calls(self, worker: _Worker, task: FileTask) -> int:
        """A file read by its framework's reads (:attr:`FilePattern.reads`), one after another through a buffered
        file; the bytes storage served."""
        with self._buffered(task) as (raw, buffered):
            at = told = 0
            for n in _pattern(task).reads or ():
                told += self._framework_read(worker, task, buffered, at, n, into=False)  # pickle.load's read()s
                at += n
            self._progress(task.path, at - told)
        return raw.served

    def _read_items(self, worker: _Worker, task: FileTask, items: tuple[tuple[int, int], ...]) -> int:
        """The items a loading rank needs from one file, as DCP's ``FileSystemReader`` reads them: the file
        opened once, buffered; each item (offset, length) a ``torch.save`` archive, read as ``torch.load`` reads
        it, or an object read whole (an archive with no storage: DCP's bytes). The bytes storage served."""
        with self._buffered(task) as (raw, buffered):
            for offset, length in items:
                told = sum(self._framework_read(worker, task, buffered, offset + at, n, into)
                           for at, n, into in _item_reads(task, offset, length))
                self._progress(task.path, length - told)  # the rest an item at a time: dozens of small reads
        return raw.served

    @contextmanager
    def _buffered(self, task: FileTask) -> Iterator[tuple[_RawReader, io.BufferedReader]]:
        """The file opened as a framework opens it for reading: buffered, the storage's block size."""
        reader = self.backend.open_ranged(task.path, False)
        try:
            raw = _RawReader(reader, task.size)
            yield raw, io.BufferedReader(raw, self._buffer_size)
        finally:
            reader.close()

    def _framework_read(self, worker: _Worker, task: FileTask, buffered: io.BufferedReader, at: int, n: int,
                        into: bool) -> int:
        """One read of a framework: ``n`` bytes from ``at`` (in pieces of at most :data:`LARGEST_CALL`),
        compared with what was written there. ``into``: by ``readinto`` (``torch.load``'s), else by ``read``
        (``pickle.load``'s, DCP's bytes): CPython's buffer serves the two differently (``read`` asks storage
        for whole blocks and buffers the rest, ``readinto`` reads the remainder through). A piece of
        at least :data:`TOLD_AT_LEAST` is told to the progress at once (the watchdog hears of a long read as it goes);
        the bytes told are returned, the rest left to the caller, who tells them an item at a time."""
        buffered.seek(at)  # a read of nothing is a seek alone (torch.load's to the end, for the size)
        told = 0
        for lo in range(at, at + n, LARGEST_CALL):
            want = min(LARGEST_CALL, at + n - lo)
            if into:
                got = worker.framework_buffer(want)
                filled = buffered.readinto(got)
            else:
                got = memoryview(buffered.read(want))
                filled = len(got)
            if filled != want:
                raise VerifyError(f"{task.path}: ends before offset {lo + want}, planned {task.size} bytes")
            if self.options.verify:
                raw = task.format_slice(lo, lo + want)
                if raw is None:
                    self._check_read(worker, task, got, lo, lo, lo + want)
                elif (bad := first_difference(got, raw)) is not None:  # a header: compared with the format's
                    raise _wrong(task, lo + bad)
            if want >= TOLD_AT_LEAST:
                self._progress(task.path, want)
                told += want
        return told

    def _read_spans(self, worker: _Worker, task: FileTask, spans: tuple[tuple[int, int], ...]) -> int:
        """A loading rank's items of one object as its framework's client reads them on this storage: each span
        (start, end) of the storage's ``item_reader`` one request stream (``open_span``: on S3 one GET of the
        range, which the CRT splits into ``part_size`` GETs), read in order in the client's own buffers, every
        byte compared with what was written there (a gap between items too: the file's bytes). The bytes read."""
        total = 0
        for start, end in spans:
            reader = self.backend.open_span(task.path, start, end)
            chunks = _chunks(reader, worker.readbuf)
            pos = start
            try:
                for got in chunks:
                    if pos + len(got) > end:
                        raise VerifyError(f"{task.path}: a read of [{start}, {end}) returned more bytes")
                    if self.options.verify:
                        self._check_read(worker, task, got, pos, pos, pos + len(got))
                    pos += len(got)
                    self._progress(task.path, len(got))
            finally:
                chunks.close()
                reader.close()
            if pos != end:
                raise VerifyError(f"{task.path}: has {pos} bytes, planned {task.size}")
            total += end - start
        return total


def _pattern(task: FileTask) -> FilePattern:
    """How its framework writes ``task``: a file the engine plays this pattern for comes with one."""
    assert task.pattern is not None, task.path
    return task.pattern
