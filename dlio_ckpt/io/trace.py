"""One process's trace of its storage calls in DFTracer's format (``checkpoint.trace``): the ``.pfw.gz`` file
DLIO's own profiler writes, which DFTracer's tools read (the tests read it with dftracer-utils' ``TraceViewer``).

The format, as DFTracer's ChromeWriter writes it: a line ``[``, then one Chrome trace event a line, a complete event
(``"ph":"X"``) with ``id``, ``name``, ``cat``, ``pid``, ``tid``, ``ts`` and ``dur`` in microseconds since the
epoch, and ``args``. A storage call is an event of category ``POSIX`` named by its kind as ``summary.json``'s
latency sections count it (``write``, ``fsync``, ``coordinator write``...), its args the file (``fname``, as
DFTracer names it), ``offset`` and ``size`` where it has them, the ``rank``, the run's ``phase`` and the
``checkpoint`` (the step) at the time of the call; each span of the run's phase is an event of category ``phase``,
each timed save or load one of category ``checkpoint``. Where a save plays its framework item by item
(``io_pattern=framework``, DCP), each item is an event of category ``framework`` named ``item``: the framework's own
time before its first call (``checkpoint.framework_item_us``; 0 long where none is played), which trace-diff counts.

Why a writer of ours and not pydftracer: pydftracer writes through DFTracer's C++ library, a 40 MiB package
the tool would need on every host, and its events carry no rank, phase or checkpoint but what the caller adds
per call; an event here is one formatted line appended to a list (``bench/trace_cost.py`` measures both).

Why lines kept and written in batches: a trace of a long run has millions of calls; they go to the file
:data:`BATCH` lines at a time (compressed as they go), so memory holds one batch, never the run. Calls made before
the run folder exists (the storage checks) wait in the first batch.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import threading
import time
from time import perf_counter_ns
from typing import IO

BATCH = 4096  # lines held before they are written
CALL = "POSIX"  # DFTracer's category of a file call (an object store's are the client's calls, the same category)
ITEM = "framework"  # the category of an item a framework saves: its own time before the item's first call


TRACE_FILE = re.compile(r"(\d+)_trace\.pfw\.gz")  # a process's trace in the run folder (results.folder lists it)


def trace_name(rank: int) -> str:
    """The trace file of process ``rank`` in the run folder."""
    return f"{rank}_trace.pfw.gz"


class Tracer:
    """This process's trace: ``call`` and ``span`` append a line each (any thread), ``start`` opens the file
    once the run folder exists, ``close`` writes the rest. ``phase`` and ``checkpoint`` are where the run is
    (:meth:`at`), written into every call's args."""

    def __init__(self, rank: int) -> None:
        self.rank, self.pid = rank, os.getpid()
        self.phase: str = "starting"
        self.checkpoint: int | None = None
        self._since = perf_counter_ns()  # when the current phase began
        self._epoch_ns = time.time_ns() - perf_counter_ns()  # perf_counter's 0 on the epoch's clock
        self._ids = itertools.count(1)
        self._lines: list[str] = []
        self._names: dict[str, str] = {}  # a path as a JSON string, made once per file
        self._lock = threading.Lock()  # the batch
        self._writing = threading.Lock()  # the file
        self._file: IO[str] | None = None
        self._context = self._args_tail()

    def _args_tail(self) -> str:
        checkpoint = "null" if self.checkpoint is None else str(self.checkpoint)
        return f',"rank":{self.rank},"phase":{json.dumps(self.phase)},"checkpoint":{checkpoint}}}}}'

    def _us(self, ns: int) -> int:
        return (ns + self._epoch_ns) // 1000

    def call(self, kind: str, path: str, t0: int, ns: int, size: int | None = None,
             offset: int | None = None) -> None:
        """One storage call: ``t0`` its start (``perf_counter_ns``), ``ns`` how long it took. The hot path: one
        formatted line appended (about 2 us; ``bench/trace_cost.py``)."""
        where = "" if size is None else f',"size":{size}' if offset is None else f',"offset":{offset},"size":{size}'
        self._on_file(kind, CALL, path, t0, ns, where)

    def item(self, path: str, t0: int, ns: int) -> None:
        """An item a framework saves into ``path``: its own time before the item's first call (``t0``, ``ns``)."""
        self._on_file("item", ITEM, path, t0, ns)

    def _on_file(self, name: str, cat: str, path: str, t0: int, ns: int, where: str = "") -> None:
        """An event on the file ``path`` (its JSON string made once per file), ``where``: its args before the
        run's context."""
        fname = self._names.get(path)
        if fname is None:
            fname = self._names[path] = json.dumps(path)
        self._add(f'{{"id":{next(self._ids)},"name":"{name}","cat":"{cat}","pid":{self.pid},'
                  f'"tid":{threading.get_native_id()},"ts":{self._us(t0)},"dur":{ns // 1000},'
                  f'"ph":"X","args":{{"fname":{fname}{where}{self._context}')

    def span(self, name: str, cat: str, t0: int, ns: int, checkpoint: int | None) -> None:
        """A phase or a checkpoint: ``t0`` its start (``perf_counter_ns``), ``ns`` its length."""
        step = "null" if checkpoint is None else str(checkpoint)
        self._add(f'{{"id":{next(self._ids)},"name":{json.dumps(name)},"cat":"{cat}","pid":{self.pid},'
                  f'"tid":{threading.get_native_id()},"ts":{self._us(t0)},"dur":{ns // 1000},"ph":"X",'
                  f'"args":{{"rank":{self.rank},"checkpoint":{step}}}}}')

    def at(self, phase: str, checkpoint: int | None) -> None:
        """The run is now in ``phase`` of ``checkpoint``: the span of the phase it leaves becomes an event. A new
        checkpoint within the same phase goes on with it (the run sets a phase, then its step): a phase's span
        names the last checkpoint it was in."""
        if phase != self.phase:
            now = perf_counter_ns()
            self.span(self.phase, "phase", self._since, now - self._since, self.checkpoint)
            self.phase, self._since = phase, now
        self.checkpoint = checkpoint
        self._context = self._args_tail()

    def _add(self, line: str) -> None:
        with self._lock:  # a line appended to a batch being taken would be lost
            self._lines.append(line)
            full = len(self._lines) >= BATCH and self._file is not None
        if full:
            self._flush()

    def _flush(self) -> None:
        """The lines held so far, written; the threads go on appending to a new batch meanwhile."""
        with self._lock:
            lines, self._lines = self._lines, []
        with self._writing:
            if self._file is not None and lines:
                self._file.write("\n".join(lines) + "\n")

    def start(self, folder: str) -> None:
        """Write the trace into ``folder`` from now on (what was traced before goes first)."""
        with self._writing:
            self._file = gzip.open(os.path.join(folder, trace_name(self.rank)), "wt", compresslevel=1)
            self._file.write("[\n")
        self._flush()

    def close(self) -> None:
        """The last phase's span and every line not yet written; the file is whole once this returns."""
        self.at("end", None)
        self._flush()
        with self._writing:
            if self._file is not None:
                self._file.write("]\n")
                self._file.close()
                self._file = None
