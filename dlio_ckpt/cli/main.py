"""The command line's entry point, and the only module that picks processes: which command, on which
processes, and how its errors end them.

``dlio_ckpt workload=NAME [overrides]`` runs the benchmark (under mpiexec or alone);
``dlio_ckpt plan workload=NAME --world-size W`` prints the layout and writes nothing.
:mod:`dlio_ckpt.cli.parser` says what each command accepts, :mod:`dlio_ckpt.cli.commands` what each does.
Bad input exits 2 with one message, before anything is created; an error on any rank of a run
ends every rank (MPI_Abort), naming the rank, its host and the cause.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from dlio_ckpt.cli import commands
from dlio_ckpt.cli.parser import TOP_LEVEL_OPTIONS, build_parsers
from dlio_ckpt.cluster.comm import Comm, SelfComm, get_comm, process_exit
from dlio_ckpt.errors import DlioCkptError
from dlio_ckpt.run.failure import say_error

HANDLERS: dict[str, Callable[[argparse.Namespace, Comm], int]] = {
    "run": commands.run, "plan": commands.plan, "sweep": commands.sweep, "tune": commands.tune,
    "diff": commands.diff, "trace-diff": commands.trace_diff,
    "report": commands.report, "repeats": commands.repeats, "check": commands.check,
    "keys": commands.keys}
# Commands that run on every process of the job (mpiexec, torchrun); the others read or print, in one process.
ON_EVERY_PROCESS = frozenset({"run", "sweep", "tune"})


def main(argv: list[str] | None = None) -> int:
    """Exit status of ``dlio_ckpt ARGV``: 0 done, 1 a failure found (a run's, a regression, a broken rule),
    2 bad input. A first word that names no command makes the command line a run's, as it always was."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parsers = build_parsers()
    if argv[:1] and argv[0] in TOP_LEVEL_OPTIONS:
        parsers.top.parse_args(argv[:1])  # prints the help or the version and exits 0
    name = argv.pop(0) if argv[:1] and argv[0] in parsers.commands else "run"
    comm: Comm = get_comm() if name in ON_EVERY_PROCESS else SelfComm()
    # run and plan, the benchmark's own commands, have always said "dlio_ckpt: error:" (scripts match it)
    prefix = "dlio_ckpt" if name in ("run", "plan") else f"dlio_ckpt {name}"
    code = reported(prefix, comm, lambda: HANDLERS[name](parsers.commands[name].parse_intermixed_args(argv), comm))
    return process_exit(comm, code) if name == "run" else code


def reported(prefix: str, comm: Comm, command: Callable[[], int]) -> int:
    """``command()``'s exit status, or the error it raised as one line on rank 0 and that error's status (bad
    input 2, storage unusable 1), found alike on every rank. The one place where an error we expect becomes an
    exit; anything else is a bug and keeps its traceback."""
    try:
        return command()
    except DlioCkptError as exc:
        if comm.rank == 0:
            say_error(str(exc), prefix)
        return exc.exit_code
