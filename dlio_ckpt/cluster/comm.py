"""The few collectives a run needs, over mpi4py, and a one-process stand-in with the same interface.

Why a wrapper (DCP's ``_DistWrapper``): the runner is written once and runs the same under
``mpiexec -n 1024`` and as a plain ``python -m dlio_ckpt``; tests of the runner need no MPI.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from dlio_ckpt.errors import mark_reported_by, reporting_rank

T = TypeVar("T")


class Comm(Protocol):
    rank: int
    size: int
    local_rank: int  # this process's index among those on its host: which GPU it uses

    def barrier(self) -> None: ...
    def bcast(self, obj: Any) -> Any: ...
    def gather(self, obj: Any) -> list[Any] | None: ...
    def allgather(self, obj: Any) -> list[Any]: ...
    def abort(self, code: int) -> None: ...


def process_exit(comm: Comm, code: int) -> int:
    """How a process leaves once its run is over: it returns ``code`` for an ordinary exit, except
    under torchrun, where it leaves at once. Why: at interpreter exit gloo's run-loop threads may still
    be freeing a finished collective's Python tensors, which needs the GIL, and a thread that asks for
    it while the interpreter finalizes makes C++ terminate the process (SIGABRT after "done": seen
    in about 1 run in 10 of fsdp under torchrun; gdb showed ~AsyncAllgatherWork in pt_gloo_runloop)."""
    leave = getattr(comm, "leave", None)
    if leave is not None:
        leave(code)
    return code


def poll_sleeping(poll: Callable[[], T | None], turn: Callable[[], None] = lambda: None) -> T:
    """``poll()``'s first answer other than None or False, sleeping between tries (50 us, doubling to
    1 ms; ``turn`` runs at each). Why not MPI's blocking calls: MPICH spins a core while it waits in
    one, so a process that finished early took that core from the processes still reading or writing
    and from a storage server on the same host (a profiled S3 load lost a share of its cores to it)."""
    pause = 50e-6
    while (answer := poll()) is None or answer is False:
        turn()
        time.sleep(pause)
        pause = min(2 * pause, 1e-3)
    return answer


class SelfComm:
    """A world of one process."""

    rank, size, local_rank = 0, 1, 0

    def barrier(self) -> None:
        pass

    def bcast(self, obj: Any) -> Any:
        return obj

    def gather(self, obj: Any) -> list[Any]:
        return [obj]

    def allgather(self, obj: Any) -> list[Any]:
        return [obj]

    def abort(self, code: int) -> None:
        sys.exit(code)


class MPIComm:
    def __init__(self) -> None:
        from mpi4py import MPI

        self._c = MPI.COMM_WORLD
        self.rank, self.size = self._c.Get_rank(), self._c.Get_size()
        host = self._c.Split_type(MPI.COMM_TYPE_SHARED)  # the processes sharing this host's memory
        self.local_rank = host.Get_rank()
        host.Free()
        self.threads = MPI.Query_thread() == MPI.THREAD_MULTIPLE  # a peer tier's drain thread sends and receives
        self._peers = self._c.Dup()

    def peer_communicator(self) -> Any:
        """The communicator of peer copies (point to point, from drain threads): apart from the collectives'."""
        return self._peers

    def barrier(self) -> None:
        poll_sleeping(self._c.Ibarrier().Test)

    def bcast(self, obj: Any) -> Any:
        self.barrier()  # every process there first, so the blocking call itself does not wait
        return self._c.bcast(obj, root=0)

    def gather(self, obj: Any) -> list[Any] | None:
        self.barrier()
        return self._c.gather(obj, root=0)

    def allgather(self, obj: Any) -> list[Any]:
        self.barrier()
        return self._c.allgather(obj)

    def abort(self, code: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self._c.Abort(code)


class PointAborted(BaseException):
    """Another rank failed this sweep point: leave it (a BaseException, so that no handler of the
    point's own errors mistakes it for one)."""


class PointComm:
    """The collectives of one sweep point on a communicator of its own, waited for by polling, so a
    fault on one rank ends the point on every rank instead of leaving them in a collective (MPI
    cannot cancel a blocking one) and the sweep goes on. The failing rank calls :meth:`abort_point`;
    the others raise :class:`PointAborted` at their next collective. Objects travel point to point
    (pickled, in order per sender); the barrier too is messages through rank 0, not ``Ibarrier``, so
    that the point's communicator carries exactly one collective, :meth:`close`'s, on every rank (a
    rank that leaves a point's ``Ibarrier`` on an abort would otherwise have one more pending than a
    rank that failed before it, and the next barrier would pair the wrong calls and never end).

    Every rank calls :meth:`close` when the point ends (ok, failed or aborted): see there why no
    message may outlive the point and why closing cannot hang. Used as a context manager, it closes
    on leaving the ``with``."""

    _DATA, _ABORT = 1, 2

    def __init__(self, parent: MPIComm) -> None:
        from mpi4py import MPI

        self._MPI, self._c = MPI, parent._c.Dup()
        self._peers = parent._c.Dup()  # a peer tier's copies, apart from the collectives (MPIComm's reason)
        self.rank, self.size, self.local_rank = parent.rank, parent.size, parent.local_rank
        # this rank's sends not yet known complete; each Request alone keeps its pickled bytes alive
        self._sent: list[Any] = []
        self._prune_at = 64  # the finished ones are dropped when the list doubles: amortised O(1) a send

    def __enter__(self) -> PointComm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, obj: Any, dest: int, tag: int) -> None:
        """Send without waiting. Synchronous mode (``issend``): it completes only once ``dest`` has
        matched the message, which is what lets :meth:`close` say that nothing is left in flight."""
        if len(self._sent) >= self._prune_at:  # a long point (many steps) keeps no finished buffers
            self._sends_done()
            self._prune_at = max(64, 2 * len(self._sent))
        self._sent.append(self._c.issend(obj, dest=dest, tag=tag))

    def peer_communicator(self) -> Any:
        """The point's communicator of peer copies (:meth:`MPIComm.peer_communicator`), freed with the point."""
        return self._peers

    def _check(self) -> None:
        """Leave the point if another rank aborted it."""
        if self._c.iprobe(source=self._MPI.ANY_SOURCE, tag=self._ABORT):
            raise PointAborted(self._c.recv(source=self._MPI.ANY_SOURCE, tag=self._ABORT))

    def _recv(self, source: int) -> Any:
        return poll_sleeping(lambda: self._c.improbe(source=source, tag=self._DATA), self._check).recv()

    def barrier(self) -> None:
        self.allgather(None)  # no rank has rank 0's answer before rank 0 has every rank's message

    def bcast(self, obj: Any) -> Any:
        if self.rank == 0:
            for r in range(1, self.size):
                self._send(obj, r, self._DATA)
            return obj
        return self._recv(0)

    def gather(self, obj: Any) -> list[Any] | None:
        if self.rank != 0:
            self._send(obj, 0, self._DATA)
            return None
        return [obj, *(self._recv(r) for r in range(1, self.size))]

    def allgather(self, obj: Any) -> list[Any]:
        return self.bcast(self.gather(obj))

    def abort_point(self, reason: str) -> None:
        for r in range(self.size):
            if r != self.rank:
                self._send(reason, r, self._ABORT)

    def abort(self, code: int) -> None:
        self._c.Abort(code)

    def close(self, peers_idle: bool = True) -> None:
        """End the point on this rank: wait until this rank's sends are complete, then until every
        rank is here, receiving and throwing away whatever arrives meanwhile, then free the point's
        communicator. Every rank calls it once, however its point ended; a second call does nothing.
        ``peers_idle``: no drain thread of the point can still use its peer communicator (its run ended
        and joined them); after a failed point one may still wait on a partner, so that communicator is
        left to it rather than freed under it (one communicator kept per failed point with a peer tier).

        Why wait for the sends: mpi4py's lowercase ``isend``/``issend`` pickles the object into a
        bytes object that only the returned Request holds (``Request.ob_buf``, dropped when a
        ``Test``/``Wait`` sees it complete), and collecting a Request frees neither the MPI request
        nor waits for it. A rank that left a point with a large message (a rank's results, ~88 kB
        for llama3_70b over 32 logical ranks a process: above MPICH's eager limit, so moved only when
        rank 0 receives it) still in flight had those bytes freed and reused under MPI, and rank 0
        unpickled garbage (``UnpicklingError: invalid load key``, ``UnicodeDecodeError``: a sweep of
        12 such points lost point 7 on every try). And freeing the communicator with messages still
        unmatched could let them land on a later point's communicator, MPI being free to reuse its
        context id (a late ABORT would end the wrong point).

        Why it cannot hang: sends are synchronous, so a send completes once its receiver has matched
        it. Every message is sent before its sender calls ``close``, and is addressed to a rank that
        is either still in the point or in ``close``. One still in the point reaches ``close`` too:
        it received everything a finished sender owed it, or, if the sender failed or was aborted,
        an ABORT that :meth:`abort_point` sent to every rank makes its next collective raise
        :class:`PointAborted` (a rank stalled in its own I/O is the watchdog's, which ends the job,
        as in a run). One in ``close`` matches whatever arrives, DATA or ABORT, until its barrier
        completes. The barrier completes only once every rank has entered it (the only collective on
        this communicator, so every rank's is the same call), and a rank enters only when its own
        sends are complete: so no rank stops receiving while a message to it is unmatched, and when
        any rank leaves, every message of the point has been received and no request or buffer is
        left on the communicator. Both waits poll (:func:`poll_sleeping`) rather than block, so a waiting
        rank does not spin a core the others need. A job that is ending (SystemExit, Ctrl-C) does not
        close: the other ranks may never come."""
        if self._c == self._MPI.COMM_NULL:
            return
        poll_sleeping(self._sends_done, self._discard_arrivals)
        poll_sleeping(self._c.Ibarrier().Test, self._discard_arrivals)
        if peers_idle:
            self._peers.Free()
        self._c.Free()

    def _sends_done(self) -> bool:
        self._sent = [r for r in self._sent if not r.Test()]
        return not self._sent

    def _discard_arrivals(self) -> None:
        """Receive, as raw bytes (never unpickled), every message now waiting on the point's communicator."""
        mpi, status = self._MPI, self._MPI.Status()
        while (message := self._c.improbe(source=mpi.ANY_SOURCE, tag=mpi.ANY_TAG, status=status)) is not None:
            message.Recv([bytearray(status.Get_count(mpi.BYTE)), mpi.BYTE])


class TorchComm:
    """The same collectives over torch.distributed, for processes started by torchrun (which sets
    RANK, WORLD_SIZE and the rendezvous address instead of MPI)."""

    def __init__(self) -> None:
        import torch
        import torch.distributed as dist

        if not dist.is_initialized():  # gloo for our objects; nccl too where there are GPUs (fsdp)
            dist.init_process_group("cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
        self._d = dist
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))  # set by torchrun

    def barrier(self) -> None:
        self._d.barrier()

    def bcast(self, obj: Any) -> Any:
        box = [obj]
        self._d.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj: Any) -> list[Any] | None:
        out = [None] * self.size if self.rank == 0 else None
        self._d.gather_object(obj, out, dst=0)
        return out

    def allgather(self, obj: Any) -> list[Any]:
        out = [None] * self.size
        self._d.all_gather_object(out, obj)
        return out

    def abort(self, code: int) -> None:
        """torchrun ends the other workers when one exits with an error."""
        self.leave(code)

    def leave(self, code: int) -> None:
        """Out now, past the interpreter's finalization (see :func:`end`); the results are written."""
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def get_comm() -> Comm:
    """torch.distributed under torchrun; else MPI when mpi4py is importable (a plain ``python`` run
    is then a singleton world of 1)."""
    if "TORCHELASTIC_RUN_ID" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return TorchComm()
    try:
        import mpi4py

        # a peer tier's drain thread sends and receives while the main thread runs the collectives
        mpi4py.rc.thread_level = "multiple"
        return MPIComm()
    except ImportError:
        return SelfComm()


def on_root(comm: Comm, fn: Callable[[], T]) -> T:
    """Run ``fn`` on rank 0 and give every rank its result, or raise its exception on every rank,
    so a check that fails on rank 0 never leaves the others waiting in a collective."""
    result: tuple[bool, Any] = (True, None)
    if comm.rank == 0:
        try:
            result = (True, fn())
        except Exception as exc:  # re-raised below, on every rank
            result = (False, exc)
    ok, value = comm.bcast(result)
    if not ok:
        mark_reported_by(value, 0)  # rank 0 reports it; the others end without saying it again
        raise value
    return value


def reported_by_another_rank(exc: BaseException, rank: int) -> bool:
    """Whether another rank (rank 0, through :func:`on_root`) reports this error: then this one ends
    quietly, and a failure on rank 0 is one message, not one per rank."""
    return reporting_rank(exc, rank) != rank
