"""The command line, and the only module that knows about processes.

``python -m dlio_ckpt workload=NAME [overrides]`` runs the benchmark (under mpiexec or alone);
``python -m dlio_ckpt plan workload=NAME --world-size W`` prints the layout and writes nothing.
Bad input exits 2 with one message, before anything is created; an error on any rank of a run
ends every rank (MPI_Abort), naming the rank, its host and the cause.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from typing import Any

from dlio_ckpt import __version__
from dlio_ckpt.cluster.comm import Comm, SelfComm, end, get_comm, on_root, said_elsewhere
from dlio_ckpt.config import check_world_size, compose
from dlio_ckpt.errors import ConfigError, DlioCkptError

USAGE = """\
dlio_ckpt workload=NAME [++workload.KEY=VALUE ...] [--config-dir DIR] [--world-size W] [--replace-results]
dlio_ckpt plan workload=NAME [++workload.KEY=VALUE ...] [--config-dir DIR] --world-size W [--format json|table]
          [--write-bandwidth B --read-bandwidth B --mtbf-hours H | --read-bandwidth B] [--drain-bandwidth B]
          [--interconnect-bandwidth B --hosts N]
dlio_ckpt sweep workload=NAME KEY=v1,v2 KEY2=range(a,b,step) ... [--world-size W1,W2] [--stop-on-failure]
          [--keep-checkpoints]
dlio_ckpt tune workload=NAME [storage keys] [--max-gib G] [--max-seconds S] [--no-fio] [--world-size W]
dlio_ckpt diff A B [--threshold PCT] [--format table|json] [--metrics REGEX]
dlio_ckpt report RUN
dlio_ckpt check RUN [READ_RUN] [--edition 2.0|3.0|4.0] [--division closed|open] [--format table|json]
dlio_ckpt keys [SECTION]
dlio_ckpt --help | --version"""
RESULT_COMMANDS = ("diff", "report", "check")
COMMANDS = """commands:
  (none)       run: write num_checkpoints_write checkpoints, then read back num_checkpoints_read
               (under mpiexec -n N, or alone as a world of one process)
  plan         the files each rank writes (--world-size W) and, with workload.restore.* set, what each rank
               of the restore reads; with --write-bandwidth, --read-bandwidth and --mtbf-hours what
               checkpointing costs training, with --read-bandwidth alone what a load takes; writes nothing
  sweep        a grid of settings (KEY=a,b; --world-size 2,4) run point after point in one job
  tune         the storage's fastest settings for the workload's files (a bounded sweep), as overrides to
               paste, beside fio's best configuration on the same folder
  diff A B     compare two runs or sweeps; exit 1 on a regression (a CI gate)
  report RUN   figures and report.html in a run folder
  check RUN    MLPerf Storage's checkpointing rules, one by one (--edition: 2.0, 3.0, or 4.0, the draft;
               default the newest)
  keys         every workload key with its type, default and meaning (keys checkpoint: one section)

workloads (workload=NAME; --config-dir DIR adds DIR/workload/NAME.yaml):
  {workloads}

keys are set as ++workload.SECTION.KEY=VALUE (++workload.checkpoint.num_checkpoints_write=3), Hydra's as
++hydra.KEY=VALUE (++hydra.run.dir=results/new); `dlio_ckpt keys` lists them all, the README's Keys section
explains them. Bad input exits 2 with one message naming key, value and rule, before anything is written."""


class _ArgError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # exit 2 with our own message, on rank 0 only
        raise _ArgError(message)


# Options of one command that another's parser takes only to refuse them by name (flag: destination, whose):
# a run given --write-bandwidth measured the storage and ignored the bandwidth it was told, silently.
PLAN_ONLY = {"--format": ("format", "`dlio_ckpt plan` (its output; diff and check take their own)"),
             "--write-bandwidth": ("write_bandwidth", "`dlio_ckpt plan` (its what-if)"),
             "--read-bandwidth": ("read_bandwidth", "`dlio_ckpt plan` (its what-if)"),
             "--mtbf-hours": ("mtbf_hours", "`dlio_ckpt plan` (its what-if; a run's goodput takes "
                              "++workload.checkpoint.mtbf_hours)"),
             "--drain-bandwidth": ("drain_bandwidth", "`dlio_ckpt plan` (its what-if)"),
             "--interconnect-bandwidth": ("interconnect_bandwidth", "`dlio_ckpt plan` (its what-if)"),
             "--hosts": ("hosts", "`dlio_ckpt plan` (its what-if; a run's pretend hosts are "
                         "++workload.hosts.simulate)")}
RUN_ONLY = {"--replace-results": ("replace_results", "a run (plan writes no results to replace)")}


def _plan_options(p: argparse.ArgumentParser, shown: bool = True) -> None:
    """plan's own options; hidden from the help of a command that takes them only to refuse them."""
    def say(text: str) -> str:
        return text if shown else argparse.SUPPRESS
    p.add_argument("--format", choices=["json", "table"], help=say("plan output (default: table)"))
    p.add_argument("--write-bandwidth", help=say("plan: what-if aggregate write bandwidth (e.g. 20GB/s)"))
    p.add_argument("--read-bandwidth", help=say("plan: what-if aggregate read bandwidth (e.g. 40GB/s); alone, "
                                                "the load's time without the goodput"))
    p.add_argument("--mtbf-hours", type=float, help=say("plan: mean time between failures of the job (hours)"))
    p.add_argument("--drain-bandwidth", help=say("plan: what-if aggregate bandwidth of a tier below (e.g. "
                                                 "5GB/s): durable there after the write and the drain"))
    p.add_argument("--interconnect-bandwidth", help=say(
        "plan: what-if bandwidth of each host's link to its peers (e.g. 25GB/s), with a peer tier in "
        "workload.tiers: durable on it after the write and the replication, and a lost host's part restored "
        "over it"))
    p.add_argument("--hosts", type=int, help=say("plan: hosts the job runs on (default: workload.hosts.simulate), "
                                                 "with --interconnect-bandwidth"))


def _refuse_others(args: argparse.Namespace, command: str) -> None:
    """Exit 2 naming an option another command owns, rather than ignoring it (argparse would take it, since
    run and plan share options, or call it unrecognized without saying whose it is)."""
    foreign = RUN_ONLY if command == "plan" else PLAN_ONLY
    for flag, (dest, whose) in foreign.items():
        value = getattr(args, dest, None)
        if value is not None and value is not False:
            raise ConfigError(flag, value, f"belongs to {whose}, not to `dlio_ckpt {command}`, which would "
                              "ignore it: leave it out here")


def _parser() -> argparse.ArgumentParser:
    from dlio_ckpt.config import available_workloads

    p = _Parser(prog="dlio_ckpt", usage=USAGE, description="How fast storage saves and restores large-model "
                "checkpoints, without the GPUs.", epilog=COMMANDS.format(workloads=", ".join(available_workloads())),
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"dlio_ckpt {__version__}")
    p.add_argument("overrides", nargs="*", help="workload=NAME and Hydra overrides")
    p.add_argument("--config-dir", "-cd", help="extra folder with workload/NAME.yaml (as DLIO's)")
    p.add_argument("--world-size", type=int, help="ranks to emulate (plan: required; run: a "
                   "multiple of the process count, each process writing world-size/N ranks)")
    p.add_argument("--replace-results", action="store_true", help="run: the run folder (hydra.run.dir) may hold "
                   "an earlier run's results; they are removed first (only the files a run writes)")
    _plan_options(p)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv.pop(0) if argv and argv[0] in ("plan", "run", "sweep", "tune", "keys", *RESULT_COMMANDS) else "run"
    if command == "keys":
        return _keys(argv)
    if command in RESULT_COMMANDS:
        return _results_command(command, argv)
    if command in ("sweep", "tune"):
        return _sweep(argv) if command == "sweep" else _tune(argv)
    parser = _parser()
    comm: Comm = SelfComm() if command == "plan" else get_comm()
    try:
        args = parser.parse_intermixed_args(argv)  # options may come between overrides
        _refuse_others(args, command)
        if command == "plan":
            return _plan(args)
        return end(comm, _run(args, comm))
    except DlioCkptError as exc:  # bad input (2), or storage unusable (1), alike on every rank before the run
        if comm.rank == 0:
            print(f"dlio_ckpt: error: {exc}", file=sys.stderr)
        return end(comm, exc.exit_code)
    except _ArgError as exc:
        if comm.rank == 0:
            print(f"dlio_ckpt: error: {exc}", file=sys.stderr)
        return end(comm, 2)


def _sweep(argv: list[str]) -> int:
    """Every point of a grid inside this one job (dlio_ckpt/sweep.py)."""
    from dlio_ckpt.tools.sweep import run_sweep

    p = _Parser(prog="dlio_ckpt sweep", usage=USAGE)
    p.add_argument("overrides", nargs="*", help="workload=NAME, KEY=v1,v2 sweeps and fixed overrides")
    p.add_argument("--config-dir", "-cd")
    p.add_argument("--world-size", help="ranks to emulate: one value or a comma list to sweep")
    p.add_argument("--stop-on-failure", action="store_true", help="stop at the first failed point")
    p.add_argument("--keep-checkpoints", action="store_true", help="keep each point's checkpoints")
    _plan_options(p, shown=False)
    comm = get_comm()
    try:
        args = p.parse_intermixed_args(argv)
        _refuse_others(args, "sweep")
        return run_sweep(args.overrides, args.world_size, args.config_dir, comm, args.stop_on_failure,
                         args.keep_checkpoints)
    except (ConfigError, _ArgError, DlioCkptError) as exc:  # found before any point ran
        if comm.rank == 0:
            print(f"dlio_ckpt sweep: error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)


def _tune(argv: list[str]) -> int:
    """The storage's fastest settings for the workload (dlio_ckpt/tune.py)."""
    from dlio_ckpt.tools.tune import run_tune

    p = _Parser(prog="dlio_ckpt tune", usage=USAGE)
    p.add_argument("overrides", nargs="*", help="workload=NAME and the storage's keys; a key given here is not tried")
    p.add_argument("--config-dir", "-cd")
    p.add_argument("--world-size", type=int, help="ranks to emulate (default: the process count)")
    p.add_argument("--max-gib", type=float, default=1.0, help="GiB one point writes, all processes (the "
                   "workload is scaled down to it; default 1)")
    p.add_argument("--max-seconds", type=float, default=600.0, help="no point starts after this (default 600)")
    p.add_argument("--no-fio", action="store_true", help="skip fio's best configuration")
    _plan_options(p, shown=False)
    comm = get_comm()
    try:
        args = p.parse_intermixed_args(argv)
        _refuse_others(args, "tune")
        return run_tune(args.overrides, args.config_dir, comm, args.world_size, args.max_gib, args.max_seconds,
                        not args.no_fio)
    except (ConfigError, _ArgError, DlioCkptError) as exc:  # found before any point ran
        if comm.rank == 0:
            print(f"dlio_ckpt tune: error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)


def _keys(argv: list[str]) -> int:
    """Every workload key, from the configuration's own models (so the list cannot drift from them)."""
    from dlio_ckpt.config import describe_keys
    from dlio_ckpt.io.backends import REGISTRY

    OPTIONS = {name: entry.options for name, entry in REGISTRY.items()}  # noqa: N806 (a table)

    accepts: dict[str, list[str]] = {}
    for kind, model in OPTIONS.items():
        for name in model.model_fields:
            accepts.setdefault(name, []).append(kind)
    def note(name: str, kinds: list[str]) -> str:
        defaults = {k: OPTIONS[k].model_fields[name].get_default(call_default_factory=True) for k in kinds}
        each = "" if len(set(map(repr, defaults.values()))) == 1 else \
            " (defaults: " + ", ".join(f"{k} {v!r}" for k, v in defaults.items()) + ")"
        return f"storage_type {', '.join(kinds)}{each}; the same under each tier's storage_options"
    options = [(f"workload.storage.storage_options.{name}", OPTIONS[kinds[0]].model_fields[name], note(name, kinds))
               for name, kinds in sorted(accepts.items())]

    p = _Parser(prog="dlio_ckpt keys", usage=USAGE)
    p.add_argument("section", nargs="?", help="one section (checkpoint, storage, model, ...)")
    try:
        args = p.parse_args(argv)
        print(describe_keys(args.section, options))
        return 0
    except (_ArgError, ConfigError) as exc:
        print(f"dlio_ckpt keys: error: {exc}", file=sys.stderr)
        return 2


def _results_command(command: str, argv: list[str]) -> int:
    """diff, report and check: read finished runs, write nothing but the report's own files.
    Exit 0: fine; 1: a regression (diff) or a failed rule (check); 2: bad arguments or unreadable input."""
    p = _Parser(prog=f"dlio_ckpt {command}", usage=USAGE)
    if command == "diff":
        p.add_argument("a", help="run folder or summary.json (ours or DLIO's): the baseline")
        p.add_argument("b", help="run folder or summary.json: the run judged against A")
        p.add_argument("--threshold", type=float, default=5.0, help="percent a metric may worsen (default 5)")
        p.add_argument("--format", choices=["table", "json"], default="table")
        p.add_argument("--metrics", help="judge only metrics matching this regular expression")
    elif command == "report":
        p.add_argument("run", help="a dlio_ckpt run folder")
    else:
        from dlio_ckpt.tools.mlperf import DIVISIONS, EDITIONS

        p.add_argument("runs", nargs="+", metavar="RUN", help="a run folder; or a write-only run then a read-only run")
        p.add_argument("--edition", choices=EDITIONS, default=EDITIONS[-1], help="the rules' edition (default: "
                       f"{EDITIONS[-1]}, the newest)")
        p.add_argument("--division", choices=DIVISIONS, default="closed", help="3.0 and later: CLOSED (the "
                       "model's process count) or OPEN (a multiple of TP x PP)")
        p.add_argument("--format", choices=["table", "json"], default="table")
    try:
        args = p.parse_args(argv)
        if command == "diff":
            return _diff(args)
        if command == "report":
            from dlio_ckpt.tools.report import write_report
            from dlio_ckpt.tools.sweep_results import draw, is_sweep, load_sweep

            if is_sweep(args.run):
                body = load_sweep(args.run)
                paths = draw(args.run, body["keys"], body["points"]) if body["points"] else []
            else:
                paths = write_report(args.run)
            for path in paths:
                print(path)
            return 0
        return _check(args)
    except (_ArgError, DlioCkptError) as exc:  # bad arguments, unreadable runs (exit 2)
        print(f"dlio_ckpt {command}: error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)


def _diff(args: argparse.Namespace) -> int:
    import re

    from dlio_ckpt.tools.compare import compare_metrics, config_differences, regressions, render_json, render_table
    from dlio_ckpt.tools.runfiles import load_run

    if args.threshold < 0:
        raise ConfigError("--threshold", args.threshold, "must be >= 0 (percent)")
    if args.metrics is not None:
        try:
            re.compile(args.metrics)
        except re.error as exc:
            raise ConfigError("--metrics", args.metrics, f"is not a regular expression ({exc})") from None
    from dlio_ckpt.tools.sweep_results import is_sweep

    if is_sweep(args.a) and is_sweep(args.b):
        from dlio_ckpt.tools.compare import diff_sweeps

        text, regressed = diff_sweeps(args.a, args.b, args.threshold, args.metrics, args.format)
        print(text)
        return 1 if regressed else 0
    a, b = load_run(args.a), load_run(args.b)
    changes = compare_metrics(a, b, args.threshold, args.metrics)
    if not any(c.direction != "none" and c.a is not None for c in changes):
        raise ConfigError("--metrics" if args.metrics else "A", args.metrics or args.a,
                          "leaves no throughput or duration of A to judge")
    render = render_json if args.format == "json" else render_table
    print(render(a, b, changes, config_differences(a, b), args.threshold))
    return 1 if regressions(changes) else 0


def _check(args: argparse.Namespace) -> int:
    from dlio_ckpt.tools.mlperf import check_runs, render
    from dlio_ckpt.tools.runfiles import load_run

    if len(args.runs) > 2:
        raise ConfigError("RUN", args.runs, "give one run, or a write-only run and then a read-only run")
    runs = [load_run(r) for r in args.runs]
    rules = check_runs(runs, args.edition, args.division)
    failed = any(r.failed for r in rules)
    if args.format == "json":
        print(json.dumps({"runs": args.runs, "edition": args.edition, "division": args.division,
                          "result": "FAIL" if failed else "PASS",
                          "rules": [{"name": r.name, "verdict": r.verdict, "expected": r.expected, "actual": r.actual}
                                    for r in rules]}, indent=2))
    else:
        print(render(rules, args.runs, args.edition))
    return 1 if failed else 0


def _plan(args: argparse.Namespace) -> int:
    from dlio_ckpt.plan.layouts import file_format, make_plan
    from dlio_ckpt.plan.view import plan_json, plan_table, restore_table
    from dlio_ckpt.run.preparation import check_tier_options

    workload, _, _ = compose(args.overrides, args.config_dir)
    if workload.mode != "emulated":
        from dlio_ckpt.run.modes import prediction

        view = prediction(workload, args.world_size or 1)
        print(json.dumps(view) if args.format == "json" else "\n".join(f"{k}: {v}" for k, v in view.items()))
        return 0
    if args.world_size is None:
        raise ConfigError("--world-size", None, "plan needs the number of ranks to lay out")
    check_world_size(workload, args.world_size)
    check_tier_options(workload)
    fmt = file_format(workload)
    plan = make_plan(workload, args.world_size)
    plan.validate()
    restore = _restore(workload, plan, fmt) if _restore_asked(workload) else None
    asked = (args.write_bandwidth, args.read_bandwidth, args.mtbf_hours, args.drain_bandwidth,
             args.interconnect_bandwidth)
    if args.hosts is not None and args.interconnect_bandwidth is None:
        raise ConfigError("--hosts", args.hosts, "is the what-if's host count for --interconnect-bandwidth; "
                          "give that too, or leave --hosts out")
    what_if = _what_if(args, workload, plan, restore) if any(a is not None for a in asked) else None
    section = "goodput" if what_if and "goodput" in what_if else "load"  # --read-bandwidth alone: no goodput
    if args.format == "json":
        print(json.dumps({**plan_json(plan, fmt), **({"restore": restore} if restore else {}),
                          **({section: what_if} if what_if else {})}))
    else:
        print(plan_table(plan, fmt))
        if restore:
            print(restore_table(restore, plan))
        for key, value in (what_if or {}).items():
            if value is None:
                value = "none (see verdict)"
            print(f"{key}: {value:.4g}" if isinstance(value, float) else f"{key}: {value}")
    return 0


def _restore_asked(workload: Any) -> bool:
    """Whether the read phase is asked for anything but each rank's own files at the save's world size."""
    asked = workload.restore
    return asked.world_size is not None or asked.tensor is not None or asked.model_only


def _restore(workload: Any, plan: Any, fmt: Any) -> dict[str, Any]:
    """The restore a run of this workload would read, as its summary.json's ``io.restore`` says it
    (:func:`dlio_ckpt.plan.restore.described`); a load the layout cannot do is refused as a run refuses it (exit 2)."""
    from dlio_ckpt.plan.restore import described, restore_plan

    return described(workload, restore_plan(workload, plan), plan, fmt)


_UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def _bandwidth(key: str, text: str) -> float:
    import re

    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?i?B)/s\s*", text, re.IGNORECASE)
    if not m or float(m.group(1)) <= 0:
        raise ConfigError(key, text, "must be a positive rate such as 20GB/s, 500MiB/s or 1.5TB/s")
    return float(m.group(1)) * _UNITS[m.group(2).upper()]


def _what_if(args: argparse.Namespace, workload: Any, plan: Any, restore: dict[str, Any] | None,
             ) -> dict[str, Any]:
    """Before buying storage: times from the checkpoint's size (a restore asked otherwise: its heaviest
    rank's reads) and the bandwidths given. ``--read-bandwidth`` alone: the load's time; with
    ``--write-bandwidth`` and ``--mtbf-hours`` too, the goodput (:func:`dlio_ckpt.results.goodput.what_if` says what
    follows from them, stalls and drains included)."""
    from dlio_ckpt.results import goodput

    ck, size = workload.checkpoint, plan.total_payload_bytes
    heaviest: int | None = None
    ranks: int | None = None
    load_from: dict[str, Any] = {"load_seconds_from": "the checkpoint / --read-bandwidth (each rank reads its "
                                                      "own files whole)"}
    if restore:
        heaviest, ranks = restore["bytes_read_per_rank"]["max"], restore["world_size"]
        load_from = {"load_ranks": ranks, "load_heaviest_rank": restore["heaviest_rank"],
                     "load_heaviest_rank_bytes_read": heaviest,
                     "load_seconds_from": "the heaviest rank's bytes read x the load's ranks / --read-bandwidth "
                                          "(the bandwidth shared evenly; the load ends with its heaviest rank)"}
    goodput_flags = {"--write-bandwidth": args.write_bandwidth, "--mtbf-hours": args.mtbf_hours,
                     "--drain-bandwidth": args.drain_bandwidth, "--interconnect-bandwidth": args.interconnect_bandwidth}
    given = {k: v for k, v in goodput_flags.items() if v is not None}
    if not given:  # --read-bandwidth alone: how long a restart's load takes, no goodput asked
        load = goodput.load_seconds(size, _bandwidth("--read-bandwidth", args.read_bandwidth), heaviest, ranks)
        return {"checkpoint_bytes": size, **load_from, "load_seconds": load}
    needed = {"--write-bandwidth": args.write_bandwidth, "--read-bandwidth": args.read_bandwidth,
              "--mtbf-hours": args.mtbf_hours}
    missing = [k for k, v in needed.items() if v is None]
    if missing:
        flag, value = next(iter(given.items()))
        raise ConfigError(flag, value, f"the goodput what-if needs {' and '.join(missing)} too (goodput follows "
                          "from the write's and the load's times and the MTBF); --read-bandwidth alone gives the "
                          "load's time")
    if args.mtbf_hours <= 0:
        raise ConfigError("--mtbf-hours", args.mtbf_hours, "must be > 0")
    staging = max(r.payload_bytes for r in plan.ranks) / (ck.staging_gb_per_second * 1e9) if ck.async_save else None
    drain = size / _bandwidth("--drain-bandwidth", args.drain_bandwidth) if args.drain_bandwidth else None
    load = goodput.load_seconds(size, _bandwidth("--read-bandwidth", args.read_bandwidth), heaviest, ranks)
    peer = _peer_what_if(args, workload, size) if args.interconnect_bandwidth else None
    if peer is not None:  # durable for a restart after a host is lost once the peers have their copies
        drain, load = peer["replicate_seconds"], max(load, peer["lost_host_restore_seconds"])
    return {"checkpoint_bytes": size, **({"peer": peer} if peer else {}), **load_from, **goodput.what_if(
        ck.time_between_checkpoints, size / _bandwidth("--write-bandwidth", args.write_bandwidth), load,
        args.mtbf_hours, staging, drain)}


def _peer_what_if(args: argparse.Namespace, workload: Any, size: int) -> dict[str, Any]:
    """A node tier with a peer tier below it: each host sends ``replicas`` copies of its part (the
    checkpoint over the hosts) over its link while it receives as many (a full-duplex link), and a lost
    host's replacement gets its part back over its link while the others read their own copy."""
    peers = [st for st in workload.tiers if st.scope == "peer"]
    if not peers:
        raise ConfigError("--interconnect-bandwidth", args.interconnect_bandwidth, "needs a peer tier in "
                          "workload.tiers (scope: peer) to replicate to")
    hosts = args.hosts or workload.hosts.simulate
    if not hosts or hosts <= peers[0].replicas:
        raise ConfigError("--hosts", hosts, f"must be more than the peer tier's replicas ({peers[0].replicas}): "
                          "give the hosts the job runs on")
    link, part = _bandwidth("--interconnect-bandwidth", args.interconnect_bandwidth), size / hosts
    return {"hosts": hosts, "replicas": peers[0].replicas, "bytes_per_host": part,
            "replicate_seconds": peers[0].replicas * part / link, "lost_host_restore_seconds": part / link}


def _run(args: argparse.Namespace, comm: Comm) -> int:
    from dlio_ckpt.run.failure import RunState, Watchdog, die, on_signals
    from dlio_ckpt.run.launch import check_run_dir, execute, start

    state = RunState()
    on_signals(comm, state)  # from here on, SIGINT/SIGTERM end every rank (no rank left in a barrier)
    world_size = comm.size if args.world_size is None else args.world_size
    # Every rank validates (same input, same answer, no collective needed); rank 0 alone resolves
    # the run folder (it holds the time) and shares it. Config-only rules all come before storage.
    workload, raw, run_dir = compose(args.overrides, args.config_dir)
    check_world_size(workload, world_size, comm.size)
    run_dir = comm.bcast(run_dir if comm.rank == 0 else None)
    on_root(comm, lambda: check_run_dir(run_dir, args.replace_results))
    run_dir = os.path.abspath(run_dir)
    mode, ctx = start(workload, comm, world_size, state, Watchdog(comm, state, workload.checkpoint.io_timeout))
    try:
        execute(mode, ctx, run_dir, raw, args.overrides, sys.argv[1:], args.replace_results)
        return 0
    except DlioCkptError as exc:  # raised on one rank or on all: either way every rank must end
        die(comm, state, str(exc), exc.exit_code, quiet=said_elsewhere(exc, comm.rank))
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException:  # Exception, and libraries' BaseExceptions (DCP's CheckpointException)
        die(comm, state, f"unexpected error\n{traceback.format_exc()}")
    return 1
