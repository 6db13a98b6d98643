"""What both I/O patterns share: an engine's storage, options, buffers and threads; running a function on every
file, ``threads`` at a time, each retried whole after a transient error; a file's bytes chunk by chunk; and a read
compared with what was written (the package's docstring says why the engine is built this way)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any

from dlio_ckpt.errors import StorageError, VerifyError
from dlio_ckpt.io.backends import Backend
from dlio_ckpt.io.engine.buffers import _depths, _Worker, io_buffer_bytes
from dlio_ckpt.io.engine.content import _formatted, _patched, _window_of, _wrong
from dlio_ckpt.io.engine.tasks import _J, _W, FileTask, IOOptions
from dlio_ckpt.io.synthetic import BLOCK, SyntheticData, first_difference
from dlio_ckpt.plan.reads import joined_reads

log = logging.getLogger("dlio_ckpt")


class EngineCore:
    """An engine's storage, options, buffers and threads, and the work both patterns share."""

    def __init__(self, backend: Backend, run_key: int, options: IOOptions,
                 progress: Callable[[str, int], None] = lambda _path, _n: None) -> None:
        caps = backend.capabilities
        self.backend, self.options = backend, options
        self._progress = progress  # told the file and its bytes at every chunk: watchdog, progress bar
        self.file_times: list[tuple[str, float, float, int]] = []  # (path, start, end, bytes), wall clock
        self.retries = 0  # files re-sent or re-read after a transient error, this process
        self._lock = threading.Lock()
        self._chunk = options.chunk_size
        self._align = caps.alignment if options.odirect else 1  # O_DIRECT reads ask whole blocks
        self._verify = caps.stores_data
        self._threads = backend.options.threads
        self._positional = caps.positional
        self._write_depth, self._read_depth, depth = _depths(backend)
        self._stream_buffers = io_buffer_bytes(backend, self._chunk)
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        device = backend.device_memory() if caps.device_buffers else None
        self._workers = [_Worker(run_key, self._chunk, depth, device, options.reduction) for _ in range(self._threads)]
        for w in self._workers:
            self._idle.put(w)
        self._pool = ThreadPoolExecutor(self._threads, "dlio_ckpt_io") if self._threads > 1 else None

    @property
    def buffer_bytes(self) -> int:
        """Every buffer the stream holds, and the datatypes' pools its sources made (checkpoint.data_values=torch_rand:
        1 MiB a datatype)."""
        pools = sum(s.data.value_pool_bytes for w in self._workers for s in w.slots)
        return self._stream_buffers + pools

    def _each(self, fn: Callable[[_Worker, _J], int], tasks: list[_J]) -> int:
        """Run ``fn`` on every task, ``threads`` at a time; the first error cancels the files not begun."""
        if self._pool is None:
            return sum(self._attempt(fn, self._workers[0], t) for t in tasks)

        failed = threading.Event()

        def one(task: _J) -> int:
            if failed.is_set():  # a thread freed by the failure does not begin another file: the error is raised
                return 0
            worker = self._idle.get()
            try:
                return self._attempt(fn, worker, task)
            except BaseException:
                failed.set()
                raise
            finally:
                self._idle.put(worker)

        futures = [self._pool.submit(one, t) for t in tasks]
        try:
            # the first error in time, not in the list's order, raised once the files in flight end (each at its
            # client's timeout where the store stopped answering)
            wait(futures, return_when=FIRST_EXCEPTION)
            for f in futures:
                if f.done() and f.exception() is not None:
                    f.result()
            return sum(f.result() for f in futures)
        finally:
            for f in futures:
                f.cancel()
            wait(futures)

    def _attempt(self, fn: Callable[[_W, _J], int], worker: _W, task: _J) -> int:
        """One file, redone from its first byte after a transient storage error, at most
        ``retries`` times (the client's own attempts come on top); counted in ``self.retries``."""
        allowed = self.backend.options.retries
        for attempt in range(allowed + 1):
            self._progress(task.path, 0)
            try:
                start = time.time()
                with worker.scope():
                    nbytes = fn(worker, task)
                self.file_times.append((task.path, start, time.time(), nbytes))  # list.append is atomic
                return nbytes
            except StorageError as exc:
                if not exc.transient or attempt == allowed:
                    if attempt:
                        raise StorageError(f"{exc} (after {attempt} retries of the whole file)") from None
                    raise
                with self._lock:
                    self.retries += 1
                log.warning("retrying %s after: %s", task.path, exc)
                time.sleep(min(0.5 * 2**attempt, 5.0))
        raise AssertionError("unreachable")

    def _chunk_of(self, data: SyntheticData, task: FileTask, k: int, lo: int = 0, hi: int | None = None,
                  ) -> tuple[Any, list[tuple[int, bytes]]]:
        """Chunk ``k`` of the file (its bytes from ``k * chunk_size``): a window of the payload
        stream, and the format's bytes that take the place of parts of it, as (offset in the chunk,
        bytes). The stream's offsets are the file's, so a chunk of payload is one window, aligned
        in memory and in the file: written and read under O_DIRECT with no copy. A caller that
        looks only at the chunk's bytes [lo, hi) (a restore's range) gets those stamped and no more."""
        start = k * self._chunk
        end = min(start + self._chunk, task.size, start + hi if hi is not None else task.size)
        return _window_of(data, task, start, end, lo - lo % BLOCK)

    def _chunks_of(self, task: FileTask) -> range:
        return range(-(-task.size // self._chunk))

    def _pieces(self, data: SyntheticData, task: FileTask) -> Iterator[Any]:
        """The file's bytes in order, as a stream's writer and reader take them."""
        for k in self._chunks_of(task):
            window, patches = self._chunk_of(data, task, k)
            for _, piece in _patched(window, patches):
                yield piece
            self._progress(task.path, len(window))

    def _sync(self, path: str) -> int:
        """fsync one written file, as :meth:`_each` runs a task (it moves no bytes of its own)."""
        self.backend.sync(path)
        return 0

    def _evict(self, path: str) -> int:
        """Drop one file's cached pages, as :meth:`_each` runs a task (it moves no bytes of its own)."""
        self.backend.evict(path)
        return 0

    def _asked(self, task: FileTask, ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        """What is asked of storage for ``ranges`` (:func:`~dlio_ckpt.plan.reads.joined_reads`, blocks under O_DIRECT),
        each within the file's planned size."""
        return joined_reads(self._within(task, ranges), self._align)

    @staticmethod
    def _within(task: FileTask, ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        """``ranges``, each checked to lie within the file's planned size."""
        for offset, length in ranges:
            if offset + length > task.size:
                raise VerifyError(f"{task.path}: a read of [{offset}, {offset + length}) passes its planned "
                                  f"{task.size} bytes")
        return ranges

    def _check_read(self, worker: _Worker, task: FileTask, got: Any, base: int, lo: int, hi: int) -> None:
        """Compare ``got`` (the file's bytes from ``base``) over file offsets [lo, hi) with what was
        written there, one chunk of the file's grid at a time (a window starts on its grid). On the
        host, the format's bytes are written over the window for one compare and put back (a restore
        reads many small items, each mostly archive headers); on a device, span by span."""
        for k in range(lo // self._chunk, -(-hi // self._chunk)):
            start = k * self._chunk
            window, patches = self._chunk_of(worker.data, task, k, max(lo - start, 0), hi - start)
            if worker.device is None:
                a, b = max(lo, start), min(hi, start + len(window))
                with _formatted(window, patches):
                    bad = first_difference(got[a - base:b - base], window[a - start:b - start])
                if bad is not None:
                    raise _wrong(task, a + bad, worker.data, got, base)
                continue
            for offset, want in _patched(window, patches):
                a, b = max(lo, start + offset), min(hi, start + offset + len(want))
                if a >= b:
                    continue
                bad = worker.first_difference(got[a - base:b - base], want[a - start - offset:b - start - offset])
                if bad is not None:
                    raise _wrong(task, a + bad, worker.data, got, base)

    def take_file_times(self) -> tuple[tuple[str, float, float, int], ...]:
        """The files finished since the last call, by file name (for the report's timeline)."""
        out, self.file_times = self.file_times, []
        return tuple((path.rsplit("/", 1)[-1], s, e, n) for path, s, e, n in out)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
        for w in self._workers:
            w.close()
