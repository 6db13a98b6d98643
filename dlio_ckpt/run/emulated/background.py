"""Async checkpoints in the emulator (``checkpoint.async_save``): training holds only while a
checkpoint is staged, the write runs in the background during the next training interval, and the
next checkpoint waits for it (as DCP's ``async_save``, Megatron or DataStates do).

Why here and not a second runner: it is a way of running the save of :mod:`dlio_ckpt.run.emulated.runner`'s loop,
through the same skeleton (``timed`` + ``record``); only when the write ends and what holds training
change. Staging is modelled (the shard at ``staging_gb_per_second`` per accelerator: memory stays
bounded) or a real copy into host memory (:class:`Staging`); training is a sleep, or one busy core
(``training=cpu``). With tiers, a process's drain starts as soon as its background write ends.
"""

from __future__ import annotations

import mmap
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from dlio_ckpt.io.engine import Engine, FileTask
from dlio_ckpt.results.summary import OpRecord, ProcessCost
from dlio_ckpt.run.context import Clock, record, timed
from dlio_ckpt.run.emulated.checkpoints import EmulatedRun, plan_of
from dlio_ckpt.run.emulated.tiers import Tiers


class Staging:
    """The copy that holds training at each async checkpoint. ``modelled``: the largest shard of this
    process's ranks at ``staging_gb_per_second`` (they stage at once, each from its own accelerator),
    a sleep, memory bounded. ``real``: every byte of this process's shards copied into host memory
    allocated (and faulted in) once before the run, from a source buffer standing for device memory:
    a real memory-bandwidth cost, competing with the background write, at the shard's memory."""

    SOURCE = 64 << 20  # the source is reused: a bigger one would only add memory

    def __init__(self, kind: str, rate_gb_per_second: float, largest: int, total: int) -> None:
        self.kind, self.seconds, self.bytes = kind, largest / (rate_gb_per_second * 1e9), total
        if kind == "real":
            self.buffer = np.ones(total, dtype=np.uint8)  # written once: every page is resident from now
            self.source = np.random.default_rng(0).integers(0, 256, min(total, self.SOURCE), dtype=np.uint8)

    def __call__(self) -> None:
        if self.kind == "modelled":
            time.sleep(self.seconds)
            return
        step = len(self.source)
        for offset in range(0, self.bytes, step):
            n = min(step, self.bytes - offset)
            self.buffer[offset:offset + n] = self.source[:n]


WARM_PIECE = 256 << 20  # the training memory is written this much at a time, the alarm looked at between


def train(seconds: float, kind: str, alarm: threading.Event, memory_bytes: int = 0) -> tuple[float, float]:
    """One training interval: a sleep, or a CPU-bound loop on this process's core; cut short when a
    background thread failed (``alarm``), so the job ends now and not an interval later.

    ``memory_bytes`` (``checkpoint.training_memory_gb``): host memory the step writes afresh at the interval's
    start and hands back to the system at its end, as a job whose training churns host memory leaves it just
    before a save, so that the save's page cache can land on memory touched moments before. Where memory left
    idle is slow to touch again (a virtual machine whose host appears to take back what its guest leaves idle),
    that moves the save's time; on this project's machine it did once the memory written covered nearly all of
    the free memory (bench/results/2026-12-07-steady-state.md). Its time is the interval's; the interval runs
    over where writing it takes longer. Returns the seconds the writing took and those the interval took."""
    start = time.perf_counter()
    end, written = start + seconds, 0.0
    memory = mmap.mmap(-1, memory_bytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) if memory_bytes else None
    try:
        if memory is not None:
            memory.madvise(mmap.MADV_HUGEPAGE)  # warm pages are the point, not the step's faults (fewer with THP)
            pages = np.frombuffer(memory, dtype=np.uint8)
            for offset in range(0, memory_bytes, WARM_PIECE):
                if alarm.is_set():
                    break
                pages[offset:offset + WARM_PIECE].fill(1)
            del pages  # (the mapping cannot close while a view of it lives)
            written = time.perf_counter() - start
        if kind == "sleep":
            alarm.wait(max(0.0, end - time.perf_counter()))
        else:
            a = np.random.default_rng(0).random((128, 128))
            while time.perf_counter() < end and not alarm.is_set():
                a = np.tanh(a @ a)
    finally:
        if memory is not None:
            memory.close()  # unmapped just before the save: its pages are free memory for the save's page cache
    return written, time.perf_counter() - start


class BackgroundSaves:
    """Checkpoints written in the background, one at a time; the run's ``commit(step)`` writes the
    step's manifest (a collective: every process calls it at the same point, once the write is done
    everywhere)."""

    def __init__(self, run: EmulatedRun, engine: Engine, tiers: Tiers) -> None:
        self.run, self.ctx, self.engine, self.tiers = run, run.ctx, engine, tiers
        self.records: list[OpRecord] = []
        self._pending: tuple[int, Clock, float, threading.Thread, dict[str, Any], int] | None = None

    def save(self, step: int, todo: list[FileTask], stage: Callable[[], None]) -> None:
        """Checkpoint ``step``: wait for (and commit) the previous one, stage, start the write."""
        with timed(self.ctx, "save", step) as clock:
            stalled = self.wait() + self.tiers.make_room(step)
            stage()  # the device-to-host copy that holds training
            self.run.prepare(step)
            self.ctx.comm.barrier()  # the step's folder exists before any process writes into it
            box: dict[str, Any] = {}
            thread = threading.Thread(target=self._write, args=(step, todo, box), name="dlio_ckpt_async", daemon=True)
            thread.start()
        self._pending = (step, clock, stalled, thread, box, len(todo))

    def _write(self, step: int, todo: list[FileTask], box: dict[str, Any]) -> None:
        try:
            with self.ctx.watch():
                box["bytes"] = self.engine.write_files(todo)
            box["end"], box["cost"] = time.perf_counter(), ProcessCost.now()
            self.tiers.written(step)  # the drain to the next tier starts now, not at the commit
        except BaseException as exc:  # raised again in the main thread, which reports it
            box["error"] = exc
            self.ctx.alarm.set()

    def wait(self) -> float:
        """The write in flight is done on this process, then committed by all; its record made.
        Returns the seconds spent waiting for this process's write (the commit not included)."""
        if self._pending is None:
            return 0.0
        step, clock, stalled, thread, box, files = self._pending
        self._pending = None
        self.ctx.state.phase, self.ctx.state.step = "background save", step
        t = time.perf_counter()
        thread.join()
        waited = time.perf_counter() - t
        if "error" in box:
            raise box["error"]
        self.records.append(record(self.ctx, "save", step, clock, box["bytes"], files, seconds=box["end"] - clock.t0,
                                   file_times=self.engine.take_file_times(), held=clock.seconds, stalled=stalled,
                                   ended=box["cost"], coordinator=plan_of(self.ctx).rank0_names))
        self.run.commit(step, self.records[-1].duration)
        self.tiers.committed(step)
        return waited
