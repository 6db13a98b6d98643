"""What each command accepts: one argparse sub-parser per command, each with only its own options.

Why sub-parsers: a command cannot take another's option, so a run given plan's ``--write-bandwidth`` is
refused by argparse itself ("unrecognized arguments: --write-bandwidth", exit 2) instead of measuring the
storage and silently ignoring the bandwidth it was told, and no table of whose option is whose has to be
kept in step with the parsers. Sizes and rates are read by :mod:`dlio_ckpt.units`, so ``20GB/s`` means
here what it means in a workload key. Parsing writes nothing and starts no process.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, NoReturn

from dlio_ckpt import __version__
from dlio_ckpt.errors import ConfigError, DlioCkptError
from dlio_ckpt.results.whatif import Rate
from dlio_ckpt.units import RATE_RULE, parse_rate, parse_size

GIB = 1 << 30


@dataclass(frozen=True)
class Command:
    """One command as the help shows it: ``label`` heads its line in the commands list, ``usage`` is its
    synopsis (the top-level usage lists them all), ``summary`` says what it does (the list, and its own --help)."""

    label: str
    usage: str
    summary: str


COMMANDS: dict[str, Command] = {
    "run": Command(
        "(none), run",
        "dlio_ckpt [run] workload=NAME [++workload.KEY=VALUE ...] [--config-dir DIR] [--world-size W] "
        "[--replace-results] [--repeat N]",
        "write num_checkpoints_write checkpoints, then read back num_checkpoints_read (under mpiexec -n N, or "
        "alone as a world of one process); --repeat N: N times, with each figure's median and interval"),
    "plan": Command(
        "plan",
        "dlio_ckpt plan workload=NAME [++workload.KEY=VALUE ...] [--config-dir DIR] --world-size W "
        "[--format json|table]\n"
        "          [--write-bandwidth B] [--read-bandwidth B] [--mtbf-hours H (with both)] "
        "[--drain-bandwidth B]\n"
        "          [--interconnect-bandwidth B --hosts N]",
        "the files each rank writes (--world-size W) and what each rank of the load reads (the layout's restore, "
        "or workload.restore.*'s); --write-bandwidth alone: what a save takes, --read-bandwidth alone: what a "
        "load takes, with --mtbf-hours too: what checkpointing costs training over "
        "workload.checkpoint.time_between_checkpoints; writes nothing"),
    "sweep": Command(
        "sweep",
        "dlio_ckpt sweep workload=NAME KEY=v1,v2 KEY2=range(a,b,step) ... [--world-size W1,W2] [--stop-on-failure]\n"
        "          [--keep-checkpoints]",
        "a grid of settings (KEY=a,b; --world-size 2,4) run point after point in one job"),
    "tune": Command(
        "tune",
        "dlio_ckpt tune workload=NAME [storage keys] [--max-gib G] [--max-seconds S] [--no-fio] [--world-size W]",
        "the storage's fastest settings for the workload's files (a bounded sweep), as overrides to paste, "
        "beside fio's best configuration on the same folder"),
    "diff": Command(
        "diff A B",
        "dlio_ckpt diff A B [--threshold PCT] [--format table|json] [--metrics REGEX]",
        "compare two runs or sweeps; exit 1 on a regression (a CI gate)"),
    "trace-diff": Command(
        "trace-diff",
        "dlio_ckpt trace-diff TRACE [TRACE ...] RUN [--under DIR ...] [--phase save|load] [--checkpoint K ...] "
        "[--format table|json]",
        "how close a run's storage calls (its checkpoint.trace) are to a real job's trace of a save or load "
        "(DFTracer .pfw/.pfw.gz, or strace -f -ttt -T -y output), per phase: KS distances of call sizes and of gaps, "
        "calls and threads per file, fsyncs, renames, bytes, duration; exit 1 where it is far (DLIO auto-config's "
        "thresholds)"),
    "report": Command("report RUN", "dlio_ckpt report RUN", "figures and report.html in a run folder"),
    "repeats": Command(
        "repeats DIR", "dlio_ckpt repeats DIR",
        "DIR/repeats.json from the runs in DIR/repeat1, repeat2, ... (each a job of its own, in new processes: "
        "++hydra.run.dir=DIR/repeat<k>): each figure's median and its interval, as run --repeat writes it"),
    "check": Command(
        "check RUN",
        "dlio_ckpt check RUN [READ_RUN] [--edition 2.0|3.0|4.0] [--division closed|open] [--format table|json]",
        "MLPerf Storage's checkpointing rules, one by one (--edition: 2.0, 3.0, or 4.0, the draft; default the "
        "newest)"),
    "keys": Command(
        "keys",
        "dlio_ckpt keys [SECTION]",
        "every workload key with its type, default and meaning (keys checkpoint: one section)"),
}
TOP_LEVEL_OPTIONS = ("-h", "--help", "--version")  # all the top level takes; anything else is a run's
USAGE = "\n".join([*(c.usage for c in COMMANDS.values()), "dlio_ckpt [COMMAND] --help | --version"])
WORKLOADS_AND_KEYS = """\
workloads (workload=NAME; --config-dir DIR adds DIR/workload/NAME.yaml):
  {workloads}

keys are set as ++workload.SECTION.KEY=VALUE (++workload.checkpoint.num_checkpoints_write=3), Hydra's as
++hydra.KEY=VALUE (++hydra.run.dir=results/new); `dlio_ckpt keys` lists them all, the docs' reference
explains them. Bad input exits 2 with one message naming key, value and rule, before anything is written."""


class UsageError(DlioCkptError):
    """argparse's complaint (an unknown option, a missing argument): bad input, so exit 2 like a ConfigError."""

    exit_code = 2


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose complaints are raised (:class:`UsageError`) for the caller to report, not printed."""

    def error(self, message: str) -> NoReturn:
        """One line and exit 2, printed by the caller on rank 0 only (argparse would print its usage on every rank)."""
        raise UsageError(message)


class _Parsed(argparse.Action):
    """Stores ``parse(text)``. A text ``parse`` refuses (ValueError) exits 2 as every bad input does, naming the
    flag, the value as given and ``rule`` with examples (argparse's own message would give neither)."""

    def __init__(self, option_strings: Sequence[str], dest: str, parse: Callable[[str], Any], rule: str,
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.parse, self.rule = parse, rule

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        try:
            setattr(namespace, self.dest, self.parse(values))
        except ValueError:
            raise ConfigError(self.option_strings[0], values, self.rule) from None


def _rate(text: str) -> Rate:
    """``20GB/s`` as the what-if needs it: the bytes per second, and the text its messages quote."""
    return Rate(text, parse_rate(text))


def _gibibytes(text: str) -> float:
    """``--max-gib``: a bare number counts GiB, as the flag's name says and as it always did; a size with a unit
    (``512MiB``, ``2GB``) is read by :func:`dlio_ckpt.units.parse_size`, as a workload key's size is."""
    try:
        return float(text)
    except ValueError:
        return parse_size(text) / GIB


class Parsers(NamedTuple):
    """The top-level parser (``--help``, ``--version``) and each command's own."""

    top: argparse.ArgumentParser
    commands: dict[str, argparse.ArgumentParser]


def build_parsers() -> Parsers:
    """Every command's parser, as sub-parsers of the top level's, so ``dlio_ckpt --help`` lists them all.

    They are parsed one by one (:func:`dlio_ckpt.cli.main.main` picks the command), not through the top level's
    ``parse_args``: a bare ``dlio_ckpt workload=NAME`` is a run, which argparse cannot default to, and options
    may come between overrides (``parse_intermixed_args``), which argparse refuses for a parser with sub-parsers."""
    from dlio_ckpt.config import available_workloads

    top = _Parser(prog="dlio_ckpt", usage=USAGE, description="How fast storage saves and restores large-model "
                  "checkpoints, without the GPUs.", epilog=_epilog(available_workloads()),
                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"dlio_ckpt {__version__}")
    # listed by the epilog, as they always were; prog: argparse would otherwise prefix each with the whole USAGE
    subparsers = top.add_subparsers(dest="command", prog="dlio_ckpt", help=argparse.SUPPRESS)
    commands: dict[str, argparse.ArgumentParser] = {
        name: subparsers.add_parser(name, usage=command.usage, description=command.summary)
        for name, command in COMMANDS.items()}
    _run_options(commands["run"])
    _plan_options(commands["plan"])
    _sweep_options(commands["sweep"])
    _tune_options(commands["tune"])
    _diff_options(commands["diff"])
    _trace_diff_options(commands["trace-diff"])
    commands["report"].add_argument("run", help="a dlio_ckpt run folder (or a sweep's folder)")
    commands["repeats"].add_argument("dir", help="the folder holding repeat1, repeat2, ... (two at least)")
    _check_options(commands["check"])
    commands["keys"].add_argument("section", nargs="?", help="one section (checkpoint, storage, model, ...)")
    return Parsers(top, commands)


def _epilog(workloads: Sequence[str]) -> str:
    """The commands, one paragraph each, then the workloads and how keys are set."""
    lines = ["commands:"]
    for command in COMMANDS.values():
        lines += textwrap.wrap(command.summary, width=110, initial_indent=f"  {command.label:<12} ",
                               subsequent_indent=" " * 15)
    return "\n".join(lines) + "\n\n" + WORKLOADS_AND_KEYS.format(workloads=", ".join(workloads))


def _workload_options(p: argparse.ArgumentParser, overrides: str) -> None:
    """What every command that composes a workload takes: its overrides and an extra configuration folder."""
    p.add_argument("overrides", nargs="*", help=overrides)
    p.add_argument("--config-dir", "-cd", metavar="DIR", help="extra folder with workload/NAME.yaml (as DLIO's)")


def _run_options(p: argparse.ArgumentParser) -> None:
    _workload_options(p, "workload=NAME and Hydra overrides")
    p.add_argument("--world-size", type=int, metavar="W", help="ranks to emulate: a multiple of the process count, "
                   "each process writing world-size/N ranks (default: the process count)")
    p.add_argument("--replace-results", action="store_true", help="the run folder (hydra.run.dir) may hold an "
                   "earlier run's results; they are removed first (only the files a run writes)")
    p.add_argument("--repeat", type=int, default=1, metavar="N", help="run the job N times, each an ordinary run in "
                   "RUN_DIR/repeat<k> (its checkpoints replaced, caches evicted as usual), then write "
                   "RUN_DIR/repeats.json: each figure's median and its 95%% order-statistic interval (diff reads it)")


def _plan_options(p: argparse.ArgumentParser) -> None:
    _workload_options(p, "workload=NAME and Hydra overrides")
    p.add_argument("--world-size", type=int, metavar="W", help="ranks to lay out (required for an emulated workload)")
    p.add_argument("--format", choices=["json", "table"], help="plan output (default: table)")
    what_if = p.add_argument_group("what-if", "times and goodput from the checkpoint's size and the rates given "
                                   "(B: a rate such as 20GB/s, 500MiB/s or 1.5TB/s)")
    rate: dict[str, Any] = {"action": _Parsed, "parse": _rate, "rule": RATE_RULE, "metavar": "B"}
    what_if.add_argument("--write-bandwidth", **rate, help="what-if aggregate write bandwidth (e.g. 20GB/s); alone, "
                         "the save's time: the checkpoint over it")
    what_if.add_argument("--read-bandwidth", **rate, help="what-if aggregate read bandwidth (e.g. 40GB/s); alone, "
                         "the load's time: the heaviest loading rank's reads x the load's ranks over it")
    what_if.add_argument("--mtbf-hours", type=float, metavar="H", help="mean time between failures of the job "
                         "(hours); with both bandwidths, the goodput at workload.checkpoint.time_between_checkpoints "
                         "(DLIO's 5 s by default: set it to the job's)")
    what_if.add_argument("--drain-bandwidth", **rate, help="what-if aggregate bandwidth of a tier below (e.g. 5GB/s): "
                         "durable there after the write and the drain")
    what_if.add_argument("--interconnect-bandwidth", **rate, help="what-if bandwidth of each host's link to its peers "
                         "(e.g. 25GB/s), with a peer tier in workload.tiers: durable on it after the write and the "
                         "replication, and a lost host's part restored over it")
    what_if.add_argument("--hosts", type=int, metavar="N", help="hosts the job runs on (default: "
                         "workload.hosts.simulate), with --interconnect-bandwidth")


def _sweep_options(p: argparse.ArgumentParser) -> None:
    _workload_options(p, "workload=NAME, KEY=v1,v2 sweeps and fixed overrides")
    p.add_argument("--world-size", metavar="W1,W2", help="ranks to emulate: one value or a comma list to sweep")
    p.add_argument("--stop-on-failure", action="store_true", help="stop at the first failed point")
    p.add_argument("--keep-checkpoints", action="store_true", help="keep each point's checkpoints")


def _tune_options(p: argparse.ArgumentParser) -> None:
    _workload_options(p, "workload=NAME and the storage's keys; a key given here is not tried")
    p.add_argument("--world-size", type=int, metavar="W", help="ranks to emulate (default: the process count)")
    p.add_argument("--max-gib", action=_Parsed, parse=_gibibytes, default=1.0, metavar="G",
                   rule="must be a size: GiB (0.5), or with a unit (512MiB, 2GB)", help="GiB one point writes, all "
                   "processes (the workload is scaled down to it; default 1; a unit may be given: 512MiB)")
    p.add_argument("--max-seconds", type=float, default=600.0, metavar="S",
                   help="no point starts after this (default 600)")
    p.add_argument("--no-fio", action="store_true", help="skip fio's best configuration")


def _diff_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="run folder or summary.json (ours or DLIO's): the baseline")
    p.add_argument("b", help="run folder or summary.json: the run judged against A")
    p.add_argument("--threshold", type=float, default=5.0, metavar="PCT",
                   help="percent a metric may worsen (default 5)")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--metrics", metavar="REGEX", help="judge only metrics matching this regular expression")


def _trace_diff_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", nargs="+", metavar="TRACE", help="the job's trace: DFTracer .pfw or .pfw.gz files, or "
                   "strace -f -ttt -T -y output (one file, or -ff's files; a folder: every file in it)")
    p.add_argument("run", metavar="RUN", help="a run folder with its traces (++workload.checkpoint.trace=True)")
    p.add_argument("--under", metavar="DIR", action="append", default=[], help="the job's calls on files under "
                   "DIR only (its checkpoint's folder; default: every file but the system's and Python's); given "
                   "again, each DIR is one checkpoint of the job, all of them pooled against as many of the run's")
    p.add_argument("--phase", choices=["save", "load"], help="what the job's trace is of, where it does not say "
                   "(default: save if it wrote more bytes than it read)")
    p.add_argument("--checkpoint", type=int, metavar="K", action="append", default=[], help="the checkpoint "
                   "(step) of each phase compared, where a trace names them (the run's; given again, pooled; "
                   "default: the first, or as many first ones as the job has --under folders)")
    p.add_argument("--format", choices=["table", "json"], default="table")


def _check_options(p: argparse.ArgumentParser) -> None:
    from dlio_ckpt.tools.readers.mlperf import DIVISIONS, EDITIONS

    p.add_argument("runs", nargs="+", metavar="RUN", help="a run folder; or a write-only run then a read-only run")
    p.add_argument("--edition", choices=EDITIONS, default=EDITIONS[-1], help="the rules' edition (default: "
                   f"{EDITIONS[-1]}, the newest)")
    p.add_argument("--division", choices=DIVISIONS, default="closed", help="3.0 and later: CLOSED (the "
                   "model's process count) or OPEN (a multiple of TP x PP)")
    p.add_argument("--format", choices=["table", "json"], default="table")
