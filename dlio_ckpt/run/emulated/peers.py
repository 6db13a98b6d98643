"""A peer tier: each host's files copied to ``replicas`` other hosts' own storage over MPI, as the
node-local checkpointing of NVIDIA's resiliency extension, Orbax's emergency checkpointing and Gemini
keep a lost node's share on its peers. A restore after losing a host gets that host's share back from
a peer over MPI the same way.

How the bytes travel: a process sends its own files (read back from its host's copy) to the process
of the same local rank on each partner host, a file after another in ``chunk_size`` messages and an
empty one at its end, tagged by the file's place in the step; the receiver takes them through a
reader the engine reads like any storage's (:class:`PeerSource`), so every byte is compared with what
was written before it lands in its own folder, as a drain's copy is. Sends and receives run in the
drain thread (MPI is started with thread support for this) on a communicator of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dlio_ckpt.cluster.comm import poll_sleeping
from dlio_ckpt.cluster.placement import Placement, surviving_keeper
from dlio_ckpt.errors import StorageError
from dlio_ckpt.io.backends.base import Backend, Capabilities, Options

_EMPTY = bytearray(0)


def partner_rank(placement: Placement, host: int) -> int:
    """The process on ``host`` with this process's local rank (every host has as many)."""
    return placement.members(placement.hosts[host])[placement.local_rank]


class PeerLink:
    """Point-to-point traffic of peer copies, on its own communicator. Why a handshake and two kinds of
    wait: MPICH moves a large message only while both sides are inside an MPI call, so polling with
    sleeps in between (``poll_sleeping``) made a transfer several times slower, while a blocking wait spins a
    core for as long as the other side is not there yet (a partner still writing its step). So a
    receiver says it is ready, a sender polls until it is, and the bytes then move under blocking waits;
    a receiver polls until a message is there before it waits for it."""

    _READY = 32000  # above any file's tag

    def __init__(self, comm: Any) -> None:
        self._c = comm.peer_communicator()
        self._said: list[Any] = []

    def ready(self, sender: int) -> None:
        """Tell ``sender`` this process is about to receive from it."""
        self._said = [r for r in self._said if not r.Test()] + [self._c.Isend(_EMPTY, dest=sender, tag=self._READY)]

    def await_ready(self, dest: int) -> None:
        poll_sleeping(lambda: self._c.Iprobe(source=dest, tag=self._READY))
        self._c.Recv(_EMPTY, source=dest, tag=self._READY)

    def send(self, dest: int, tag: int, data: Any) -> None:
        self._c.Isend(data, dest=dest, tag=tag).Wait()

    def receive(self, source: int, tag: int, buf: Any) -> int:
        from mpi4py import MPI

        status = MPI.Status()
        poll_sleeping(lambda: self._c.Iprobe(source=source, tag=tag))
        self._c.Irecv(buf, source=source, tag=tag).Wait(status)
        return status.Get_count(MPI.BYTE)


def send_files(link: PeerLink, dest: int, source: Backend, paths: list[str], chunk: int,
               progress: Callable[[str, int], None]) -> int:
    """Send each file, read back from ``source``, to process ``dest``: its bytes in ``chunk`` messages
    tagged by its place in ``paths``, then an empty one. Bytes sent."""
    buf, total = bytearray(chunk), 0
    view = memoryview(buf)
    link.await_ready(dest)
    for tag, path in enumerate(paths):
        reader = source.open_read(path, False)
        try:
            while filled := reader.readinto(view):
                link.send(dest, tag, view[:filled])
                total += filled
                progress(path, filled)
        finally:
            reader.close()
        link.send(dest, tag, _EMPTY)
    return total


class _Incoming:
    """One file as it arrives from a peer: each ``readinto`` takes the next message; the empty one ends it."""

    def __init__(self, link: PeerLink, sender: int, tag: int) -> None:
        self._link, self._sender, self._tag, self._done = link, sender, tag, False

    def readinto(self, buf: memoryview) -> int:
        if self._done:
            return 0
        n = self._link.receive(self._sender, self._tag, buf)
        self._done = n == 0
        return n

    def close(self) -> None:
        """Nothing to release; a file the engine stopped early (a wrong byte) is not drained: the job ends."""


class PeerSource:
    """What a peer sends, read as if it were storage (the engine asks a source nothing else):
    ``open_read(path)`` yields the file the sender sends under that name's place in ``names`` (the
    sender's files of the step, in its order)."""

    name = "peer"
    capabilities = Capabilities(fsync=False, durable_on_close=False, odirect=False, alignment=1, evict_cache=False)
    options = Options()
    requests = None

    def __init__(self, link: PeerLink, sender: int, names: list[str], where: str) -> None:
        self._link, self._sender, self._where = link, sender, where
        self._tags = {name: tag for tag, name in enumerate(names)}

    def expect(self) -> PeerSource:
        """Before reading a round of files: tell the sender to start (:meth:`PeerLink.ready`)."""
        self._link.ready(self._sender)
        return self

    def open_read(self, path: str, odirect: bool) -> _Incoming:
        name = path.rsplit("/", 1)[-1]
        if name not in self._tags:
            raise StorageError(f"{path}: not among the files rank {self._sender} sends ({self._where})")
        return _Incoming(self._link, self._sender, self._tags[name])



def in_background(fn: Callable[[], int]) -> Callable[[], int]:
    """Run ``fn`` in a thread now; the returned call waits for it and gives its result or raises its error."""
    pool = ThreadPoolExecutor(1, "dlio_ckpt_peer_send")
    future = pool.submit(fn)
    pool.shutdown(wait=False)
    return future.result


class LostShares:
    """A restore after losing hosts, on a peer tier: a lost host's replacement process receives its
    part from the process of the same local rank on the first surviving host that keeps it, which
    reads it back from its peer copy (evicted from the page cache first) and sends it while reading
    its own. ``whole(step, backend, process)``: the files ``process`` loads at ``step``, in order."""

    def __init__(self, ctx: Any, tier: int, whole: Callable[[int, Backend, int], list[Any]]) -> None:
        place, st, lost = ctx.placement, ctx.workload.storages[tier], ctx.workload.restore.lost_hosts
        count = len(place.hosts)
        self.ctx, self.backend, self.whole = ctx, ctx.tiers[tier], whole
        self.link = PeerLink(ctx.comm)
        keeper: dict[int, int] = {}  # lost host -> the surviving host that keeps its part
        for h in lost:
            kept_by = surviving_keeper(count, h, st.replicas, st.replication, lost)
            assert kept_by is not None  # preflight's lost_hosts_tier chose this tier for keeping every lost host's part
            keeper[h] = kept_by
        mine = place.host_index
        self.sender = partner_rank(place, keeper[mine]) if mine in keeper else None  # whom I receive from
        self.receivers = [partner_rank(place, h) for h, k in keeper.items() if k == mine]  # whom I send to
        self.where = f"peer tier {tier}"

    def source(self, step: int) -> PeerSource:
        """What this (lost host's) process reads: its files as its keeper sends them."""
        assert self.sender is not None  # asked only on a lost host, whose part a keeper sends
        names = [t.path.rsplit("/", 1)[1] for t in self.whole(step, self.backend, self.ctx.comm.rank)]
        return PeerSource(self.link, self.sender, names, f"{self.where}, kept by rank {self.sender}")

    def send(self, step: int, evict: bool) -> Callable[[], int]:
        """Start sending each lost partner its files of ``step``; the call returned waits for the sends."""
        def run() -> int:
            total = 0
            for dest in self.receivers:
                paths = [t.path for t in self.whole(step, self.backend, dest)]
                if evict and self.backend.capabilities.evict_cache:
                    for path in paths:
                        self.backend.evict(path)
                total += send_files(self.link, dest, self.backend, paths, self.ctx.ck.chunk_size, lambda *_: None)
            return total
        return in_background(run)
