"""How a run ends when something goes wrong: every rank stops promptly, the cause is named, and no
result claims success.

Why MPI_Abort and never a normal exit: a rank that leaves normally enters MPI_Finalize and waits for
the others, while they wait in a barrier for it; and Python signal handlers never run while a rank
sits inside a C-level MPI wait. So whichever rank sees the fault (an error, SIGINT, SIGTERM, a stall)
prints who, where and why, records a failed summary where it can, and aborts the whole job; mpiexec
also ends every rank when one is killed outright (``kill -9``).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

from dlio_ckpt import inflight
from dlio_ckpt.cluster.comm import Comm
from dlio_ckpt.cluster.host import hostname
from dlio_ckpt.io.trace import Tracer
from dlio_ckpt.results.schema import FailedSummary
from dlio_ckpt.results.summary import dumps, write_result


@dataclass
class RunState:
    """Where this process is, for messages and the failed summary; updated by the runner."""

    run_dir: str | None = None
    run_id: str | None = None  # as in summary.json: which run a failed summary belongs to
    phase: str = "starting"  # starting, save, load, results
    step: int | None = None
    file: str | None = None  # the file in progress when a stall is detected
    committed: list[int] | None = None  # emulated runs: steps whose manifest is written (every process knows)
    # every process while a step's manifest is written: the step, and whether it is on storage yet (a
    # signal that ends the run between the manifest landing and ``committed`` growing must still count it)
    landing: tuple[int, Callable[[], bool]] | None = None
    durable: dict[int, list[int]] = field(default_factory=dict)  # tiered runs: tier -> steps marked there
    tracer: Tracer | None = None  # checkpoint.trace: told each change of phase or step (a span of the trace)

    def __setattr__(self, name: str, value: object) -> None:
        super().__setattr__(name, value)
        if name in ("phase", "step") and self.tracer is not None:
            self.tracer.at(self.phase, self.step)

    def close_trace(self) -> None:
        """The trace written whole, where there is one (a failed run's too: its last calls are the ones asked)."""
        if self.tracer is not None:
            try:
                self.tracer.close()
            except OSError:  # the run folder may be what failed
                pass

    def where(self) -> str:
        return self.phase if self.step is None else f"{self.phase} of step {self.step}"


def _landed(look: Callable[[], bool], seconds: float = 2.0) -> bool:
    """Whether a manifest being written is on storage: asked from a thread of its own, for at most
    ``seconds`` (the storage may be what hangs, and the watchdog that asks must still end the job)."""
    answer: list[bool] = []

    def ask() -> None:
        try:
            answer.append(bool(look()))
        except Exception:  # noqa: BLE001 - the storage may be what failed: then the step is not counted
            answer.append(False)
    asking = threading.Thread(target=ask, daemon=True, name="dlio_ckpt_landing")
    asking.start()
    asking.join(seconds)
    return bool(answer and answer[0])


def write_failed_summary(state: RunState, rank: int, reason: str) -> None:
    """``summary.json`` with ``"status": "failed"``, atomically, if this host sees the run folder
    (rank 0 creates it; on other hosts it may not exist and then nothing is written)."""
    if not state.run_dir or not os.path.isdir(state.run_dir):
        return
    committed = state.committed
    if committed is not None and state.landing is not None and state.landing[0] not in committed \
            and _landed(state.landing[1]):
        committed = sorted([*committed, state.landing[0]])
    try:
        body = FailedSummary(
            status="failed", run_id=state.run_id, reason=reason, failed_rank=rank, host=hostname(),
            during=state.where(), time=time.strftime("%Y-%m-%dT%H:%M:%S"),
            note="no throughput is reported for a failed run; steps without a manifest are incomplete",
            steps_committed=committed,
            # every process keeps this account
            steps_durable_per_tier={str(k): steps for k, steps in state.durable.items()} if state.durable else None)
        write_result(os.path.join(state.run_dir, "summary.json"), dumps(body))
    except (OSError, ValueError):  # a failing run must still end: the summary is the one thing left unsaid
        pass  # the run folder itself may be what failed; the message on stderr still says why


def say_error(message: str, prefix: str = "dlio_ckpt") -> None:
    """``dlio_ckpt: error: message`` on stderr in one write (``prefix``: the command, as ``dlio_ckpt sweep``). Ranks
    failing at once share mpiexec's stderr, and a line written in two parts (``print``'s text, then its newline)
    ran into another rank's: two ENOSPC messages were seen on one line."""
    sys.stderr.write(f"{prefix}: error: {message}\n")
    sys.stderr.flush()


def one_line(reason: str) -> str:
    """A storage client's message on one line (gcsfs's and botocore's span several): the error is one line on
    stderr, where batch logs and ``grep`` find it whole, and ``summary.json``'s ``reason`` is that line."""
    return "; ".join(part.strip() for part in reason.splitlines() if part.strip())


def fail_every_rank(comm: Comm, state: RunState, reason: str, code: int = 1, quiet: bool = False) -> None:
    """Say who failed and why, leave a failed summary, end every rank. ``quiet``: rank 0 says it
    (the error was its own, shared by :func:`~dlio_ckpt.cluster.comm.on_root`); this rank only ends, a moment
    later, so that rank 0's message and summary are out before the job is torn down."""
    state.close_trace()
    if quiet:
        inflight.remove_all()
        time.sleep(2.0)
        comm.abort(code)
        return
    message = f"rank {comm.rank} on {hostname()}, during {state.where()}: {one_line(reason)}"
    say_error(message)
    write_failed_summary(state, comm.rank, message)
    inflight.remove_all()
    _let_output_drain()
    comm.abort(code)


def _let_output_drain() -> None:
    """mpiexec forwards a rank's stderr through its proxy; an abort right after the print can tear
    the job down before the line is forwarded (seen: an ENOSPC run ended with empty stderr). A
    short pause costs nothing on a job that is ending anyway."""
    time.sleep(0.5)


def on_signals(comm: Comm, state: RunState) -> None:
    """SIGINT and SIGTERM (mpiexec forwards both to every rank) end the job as a failure."""

    def handler(signum: int, _frame: object) -> None:
        fail_every_rank(comm, state, f"interrupted by {signal.Signals(signum).name}", 128 + signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)


class Watchdog:
    """Ends the job when I/O makes no progress for ``timeout`` seconds (a hung mount, a server that
    accepts connections and never answers): a stalled rank would otherwise hold every other rank in
    the next barrier forever. Runs in its own thread, since the stalled one may be the main thread."""

    def __init__(self, comm: Comm, state: RunState, timeout: float) -> None:
        self.comm, self.state, self.timeout = comm, state, timeout
        self._last = time.monotonic()
        self._busy = 0
        self._lock = threading.Lock()
        if timeout > 0:
            threading.Thread(target=self._watch, name="dlio_ckpt_watchdog", daemon=True).start()

    def progress(self, file: str | None = None) -> None:
        self._last = time.monotonic()
        if file is not None and file != self.state.file:  # a set on RunState goes through its tracer's hook
            self.state.file = file

    def __enter__(self) -> Watchdog:
        with self._lock:
            self._busy += 1
        self.progress()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._busy -= 1

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.timeout / 4))
            idle = time.monotonic() - self._last
            if self._busy and idle > self.timeout:
                what = f" on {self.state.file}" if self.state.file else ""
                reason = (f"no I/O progress for {idle:.0f} s{what} (checkpoint.io_timeout="
                          f"{self.timeout:g}): storage stalled or unreachable")
                say_error(f"rank {self.comm.rank} on {hostname()}, during {self.state.where()}: {reason}")
                write_failed_summary(self.state, self.comm.rank, reason)
                inflight.remove_all()
                _let_output_drain()
                os._exit(1)  # the main thread may be stuck in the kernel: leave now; mpiexec ends the rest


def watching(watchdog: Watchdog | None) -> AbstractContextManager:
    """Wrap this process's own storage I/O, and nothing else: a rank waiting in a collective for a
    slower one is not stalled."""
    return watchdog if watchdog is not None else nullcontext()
