"""Tiered checkpoints (``workload.tiers``): each step written on the first storage is copied down
the tiers in the background, read back and verified as a real drain does; every tier gets its own
commit marker once all processes' files of the step are on it; ``keep_last`` holds a tier to its
newest steps, removing an older one only once it is durable on the tier below. A node tier is each
host's own storage (its acting rank marks and cleans that copy); a peer tier keeps other hosts'
parts, received over MPI (:mod:`dlio_ckpt.run.emulated.peers`).

Why a thread per process, and markers in the main thread: a drain is each process copying its own
files (or exchanging them with its peers, point to point), while a marker says something of every
process, which takes a collective, and collectives stay in the main thread. So the main thread
*settles* finished drains at every checkpoint and at the end: the processes say which (step, tier)
copies they have finished, and those finished everywhere get their marker, in step order, on rank 0
(on each host's acting rank for its copy of a node or peer tier). A drain's failure wakes the main
thread (``ctx.alarm``), which ends the job naming the tier and the file.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

from dlio_ckpt.config import tier_key
from dlio_ckpt.errors import DlioCkptError, StorageError, VerifyError
from dlio_ckpt.io.backends import Backend
from dlio_ckpt.io.engine import Engine, IOOptions
from dlio_ckpt.results.schema import TierDescription
from dlio_ckpt.results.summary import OpRecord, ProcessCost
from dlio_ckpt.run.emulated.checkpoints import EmulatedRun, ranks_of_process, reduction
from dlio_ckpt.run.emulated.peers import PeerLink, PeerSource, in_background, partner_rank, send_files
from dlio_ckpt.run.preparation import tier_backend
from dlio_ckpt.run.steps import manifest_path, remove_step, step_name

log = logging.getLogger("dlio_ckpt")


def on_tier(what: str, exc: DlioCkptError) -> DlioCkptError:
    """A storage failure named by the tier work it ended (a verification failure stays one)."""
    return (VerifyError if isinstance(exc, VerifyError) else StorageError)(f"{what}: {exc}")


class Drain:
    """This process's drain threads, one per tier below the first: each copies this process's files of
    every step to its tier, in step order, from the nearest tier above that holds them (waiting for
    that copy where it is not the first tier), and keeps what it has copied (and the first failure,
    named by step and tier) for the main thread. Why a thread per tier: a peer tier's replication and
    an S3 drain both read the node tier and use different links on a cluster; in one thread, an S3
    upload of minutes would hold the next step's copy to the peers back as long. (On this 2-core
    machine both are CPU-bound and two threads did not shorten the time to durable on the peer tier:
    bench/hosts.py, interval 2 s, 11.8 s in one thread, 12.7 s in two.)"""

    def __init__(self, run: EmulatedRun, where: list[str]) -> None:
        ctx = self.ctx = run.ctx
        self.run, self._where = run, where
        # its own clients: its requests are its own, and it shares no connection with a save
        self._backends = [tier_backend(ctx.workload, k, ctx.comm.local_rank, ctx.placement.node_folder)
                          for k in range(len(where))]
        options = IOOptions(fsync=ctx.ck.fsync, chunk_size=ctx.ck.chunk_size, reduction=reduction(ctx))
        self._engines = [Engine(b, run.run_key, options, self._progress) for b in self._backends[1:]]
        self._scopes = [st.scope for st in ctx.workload.storages]
        self._link = PeerLink(ctx.comm) if "peer" in self._scopes else None
        self.done: dict[tuple[int, int], OpRecord] = {}  # (step, tier) -> this process's copy
        self.error: BaseException | None = None
        self._changed = threading.Condition()
        self._queues: list[queue.SimpleQueue[int | None]] = [queue.SimpleQueue() for _ in where[1:]]
        self._threads = [threading.Thread(target=self._run, args=(k,), name=f"dlio_ckpt_drain{k}", daemon=True)
                         for k in range(1, len(where))]
        for thread in self._threads:
            thread.start()

    def add(self, step: int) -> None:
        """Copy this process's files of ``step`` down (called from any thread)."""
        for q in self._queues:
            q.put(step)

    def finished(self) -> set[tuple[int, int]]:
        with self._changed:
            return set(self.done)

    def wait_for(self, step: int, k: int) -> None:
        """Until ``step`` is on tier ``k`` (or the drain failed)."""
        with self._changed:
            self._changed.wait_for(lambda: (step, k) in self.done or self.error is not None)

    def close(self) -> None:
        """Every step added so far copied (or the drain failed), the engines released."""
        for q in self._queues:
            q.put(None)
        for thread in self._threads:
            while thread.is_alive():
                thread.join(0.2)
        for engine in self._engines:
            engine.close()

    def _progress(self, path: str, _nbytes: int) -> None:
        if self.ctx.watchdog is not None:
            self.ctx.watchdog.progress(path)

    def _run(self, k: int) -> None:
        # from the nearest tier above that holds this process's own files (a peer tier holds others')
        above = max(j for j in range(k) if self._scopes[j] != "peer")
        for step in iter(self._queues[k - 1].get, None):
            if above:
                self.wait_for(step, above)
            if self.error is not None:
                return
            try:
                if self._scopes[k] == "peer":
                    record = self._replicate(step, k, self._backends[above], self._backends[k])
                else:
                    record = self._copy(step, k, self._backends[above], self._backends[k])
            except BaseException as exc:  # the main thread raises it
                self._fail(step, k, exc)
                return
            with self._changed:
                self.done[(step, k)] = record
                self._changed.notify_all()

    def _copy(self, step: int, k: int, source: Backend, target: Backend) -> OpRecord:
        folder = (self.ctx.ck.checkpoint_folder, step_name(step))
        todo = self.run.tasks(step, source)
        start, t0, cost = time.time(), time.perf_counter(), ProcessCost.now()
        with self.ctx.watch():
            target.makedirs(target.join(*folder))
            nbytes = self._engines[k - 1].copy_files(todo, source,
                                                     lambda p: target.join(*folder, p.rsplit("/", 1)[1]))
        seconds = time.perf_counter() - t0
        requests = tuple(q for b in (source, target) if b.requests is not None for q in b.requests.take())
        times = self._engines[k - 1].take_file_times()
        return OpRecord(phase=f"drain_tier{k}", index=step, step=step, process=self.ctx.comm.rank, start=start,
                        end=start + seconds, duration=seconds, bytes=nbytes, files=len(todo), file_times=times,
                        requests=requests, cost=ProcessCost.now().since(cost))

    def _replicate(self, step: int, k: int, source: Backend, target: Backend) -> OpRecord:
        """A peer tier: this process's files of ``step`` sent to its partner on each of ``replicas`` other
        hosts while it receives, verifies and keeps a partner's, round by round (all processes in the
        same order, so every send meets its receive)."""
        ctx, st, place = self.ctx, self.ctx.workload.storages[k], self.ctx.placement
        link = self._link
        assert link is not None  # made where a tier is a peer tier, the only kind replicated
        folder = (ctx.ck.checkpoint_folder, step_name(step))
        own = [t.path for t in self.run.tasks(step, source)]
        ways = place.peers(st.replicas, st.replication)
        start, t0, cost, nbytes, files = time.time(), time.perf_counter(), ProcessCost.now(), 0, 0
        times: tuple[tuple[str, float, float, int], ...] = ()
        with ctx.watch():
            target.makedirs(target.join(*folder))
            for to_host, from_host in zip(ways.send_to, ways.receive_from, strict=True):
                dest, sender = partner_rank(place, to_host), partner_rank(place, from_host)
                sent = in_background(partial(send_files, link, dest, source, own, ctx.ck.chunk_size, self._progress))
                theirs = self.run.tasks(step, target, plans=ranks_of_process(ctx, sender))
                peer = PeerSource(link, sender, [t.path.rsplit("/", 1)[1] for t in theirs],
                                  f"{self._where[k]}, from {place.hosts[from_host]}").expect()
                nbytes += self._engines[k - 1].copy_files(theirs, peer,
                                                          lambda p: target.join(*folder, p.rsplit("/", 1)[1]))
                sent()
                files += len(theirs)
                times += self._engines[k - 1].take_file_times()
        seconds = time.perf_counter() - t0
        return OpRecord(phase=f"drain_tier{k}", index=step, step=step, process=ctx.comm.rank, start=start,
                        end=start + seconds, duration=seconds, bytes=nbytes, files=files, file_times=times,
                        cost=ProcessCost.now().since(cost))

    def _fail(self, step: int, k: int, exc: BaseException) -> None:
        error = exc  # a bug keeps its traceback
        if isinstance(exc, DlioCkptError):
            error = on_tier(f"drain of step {step} to tier {k}, {self._where[k]}", exc)
        with self._changed:
            if self.error is not None:  # another tier's thread failed first: its cause is the one to say
                return
            self.error = error
            self._changed.notify_all()
        self.ctx.alarm.set()


class Tiers:
    """What is durable where, for one process: every process keeps the same account of the markers
    and settles its drain's copies at the same points; rank 0 alone writes markers and removes steps."""

    def __init__(self, run: EmulatedRun) -> None:
        ctx = self.ctx = run.ctx
        self.run = run
        storages = ctx.workload.storages
        self.keep = [st.keep_last for st in storages]
        self.where = [f"{tier_key(k)} ({st.storage_type} {st.storage_root})" for k, st in enumerate(storages)]
        self.marked: dict[int, list[int]] = {k: [] for k in range(len(storages))}  # steps with a marker
        self.active = len(storages) > 1 or bool(self.keep[0])
        if self.active:
            ctx.state.durable = self.marked  # a failed summary says what is durable where
        self.records: list[OpRecord] = []  # this process's drains whose step is marked on their tier
        self._settled: set[tuple[int, int]] = set()  # (step, tier) ever marked: a removed step stays settled
        self.drain = Drain(run, self.where) if len(storages) > 1 else None

    def written(self, step: int) -> None:
        """This process's files of ``step`` are whole on the first tier: copy them down (any thread)."""
        if self.drain is not None:
            self.drain.add(step)

    # -- the main thread -------------------------------------------------------------------------

    def check(self) -> None:
        """Raise a drain's failure in the main thread (which ends the job)."""
        if self.drain is not None and self.drain.error is not None:
            self.ctx.state.phase = "drain"
            raise self.drain.error

    def committed(self, step: int) -> None:
        """``step`` is marked on the first tier (every process calls this, after the marker)."""
        self.marked[0].append(step)

    def make_room(self, step: int) -> float:
        """Before ``step`` is written: with ``keep_last`` on the first tier, it holds at most that
        many steps and the one being written, so the step ``keep_last + 1`` back must be durable on
        the tier below first (a collective). Returns the seconds this process waited for its drain."""
        keep, waited = self.keep[0], 0.0
        if self.drain is not None and keep and step - keep - 1 >= 1:
            t = time.perf_counter()
            self.drain.wait_for(step - keep - 1, 1)
            waited = time.perf_counter() - t
            self.check()
        self.settle()
        return waited

    def settle(self) -> None:
        """Mark each (step, tier) every process has copied (in step order, each only after its tier
        above), then apply keep_last; a collective: every process calls it at the same points."""
        if not self.active:
            return
        self.check()
        mine = self.drain.finished() if self.drain is not None else set()
        everywhere = set.intersection(*(set(d) for d in self.ctx.comm.allgather(sorted(mine))))
        for step, k in sorted(everywhere - self._settled):
            if step not in self.marked[k - 1]:
                continue  # not marked above yet: marked at a later settle
            target = self.ctx.tiers[k]
            with self._on_tier(f"marker of step {step}", k):  # made by the acting rank (a node tier's: its part)
                self.ctx.on_tier_io(k, partial(self._mark, target, step, k))
            self.marked[k].append(step)
            self._settled.add((step, k))
            assert self.drain is not None  # a (step, tier) is finished by the drain alone
            self.records.append(self.drain.done[(step, k)])
            if self.ctx.comm.rank == 0:
                log.info("step %d durable on tier %d, %s", step, k, self.where[k])
        self._retire()

    def _mark(self, target: Backend, step: int, k: int) -> None:
        """Write the marker of ``step`` on tier ``k`` (``target``)."""
        target.put_marker(manifest_path(target, self.ctx.ck.checkpoint_folder, step),
                          json.dumps(self.run.manifest(step, k)).encode())

    def _retire(self) -> None:
        """keep_last: a tier's steps beyond its newest ``keep_last`` go once durable below (on the
        last tier, at once); the marker first, so no removed step passes for durable."""
        gone: list[tuple[int, int]] = []
        for k, keep in enumerate(self.keep):
            if not keep:
                continue
            below = set(self.marked[k + 1]) if k + 1 in self.marked else None
            for step in self.marked[k][:-keep]:
                if below is None or step in below:
                    gone.append((k, step))
        for k, step in gone:
            self.marked[k].remove(step)
        for k in sorted({k for k, _ in gone}):  # a node tier's steps go from every host's copy
            self.ctx.on_tier_io(k, partial(self._remove, [(t, s) for t, s in gone if t == k]))

    @contextmanager
    def _on_tier(self, what: str, k: int) -> Iterator[None]:
        """A storage failure of the main thread's work on tier ``k`` names the tier, as a drain's does
        (a marker can meet a cut network before the drain does)."""
        try:
            yield
        except DlioCkptError as exc:
            raise on_tier(f"{what} on tier {k}, {self.where[k]}", exc) from exc

    def _remove(self, gone: list[tuple[int, int]]) -> None:
        for k, step in gone:
            with self._on_tier(f"removing step {step}", k):
                remove_step(self.ctx.tiers[k], self.ctx.ck.checkpoint_folder, step, self.ctx.writes)
            log.info("step %d removed from tier %d (keep_last=%d)", step, k, self.keep[k])

    def close(self) -> None:
        """Every drain finished and marked (a collective), the drain engines released."""
        if self.drain is not None:
            self.drain.close()
        self.settle()

    def describe(self) -> list[TierDescription]:
        """summary.json's ``io.tiers``: each tier, what it keeps, the steps marked there at the end."""
        ctx = self.ctx
        return [TierDescription(tier=k, storage_type=st.storage_type, storage_root=st.storage_root, scope=st.scope,
                                replicas=st.replicas if st.scope == "peer" else None,
                                replication=st.replication if st.scope == "peer" else None,
                                keep_last=st.keep_last, steps_durable=list(self.marked[k]),
                                memory_bytes_per_host=ctx.memory_bytes.get(k) or None,
                                storage=ctx.tiers[k].describe()) for k, st in enumerate(ctx.workload.storages)]
