"""What each command does with its parsed arguments: one function per command, ``(args, comm) -> exit status``.

Why one signature for all: :func:`dlio_ckpt.cli.main.main` dispatches through a table and reports every
command's errors in one place; a command raises :class:`~dlio_ckpt.errors.DlioCkptError` (bad input: exit 2)
and returns 0, or 1 where it judged something and found it failing (a regression, a broken rule, a failed point).
Heavy modules are imported inside each command, so a run does not import the report's plotting nor a plan torch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from functools import partial
from pathlib import Path
from typing import Any

from dlio_ckpt.cluster.comm import Comm, on_root, reported_by_another_rank
from dlio_ckpt.config import compose
from dlio_ckpt.errors import ConfigError, DlioCkptError


def run(args: argparse.Namespace, comm: Comm) -> int:
    """Write the checkpoints, then read them back, on every process of the job."""
    from dlio_ckpt.plan.layouts import check_job
    from dlio_ckpt.run.failure import RunState, Watchdog, fail_every_rank, on_signals
    from dlio_ckpt.run.launch import check_run_dir, execute, start
    from dlio_ckpt.tools.drivers.repeats import check_repeat, repeat_folder, replaced, write_repeats

    state = RunState()
    on_signals(comm, state)  # from here on, SIGINT/SIGTERM end every rank (no rank left in a barrier)
    world_size = comm.size if args.world_size is None else args.world_size
    check_repeat(args.repeat)
    # Every rank validates (same input, same answer, no collective needed); rank 0 alone resolves
    # the run folder (it holds the time) and shares it. Config-only rules all come before storage.
    workload, raw, run_dir = compose(args.overrides, args.config_dir)
    check_job(workload, world_size, comm.size)
    run_dir = comm.bcast(run_dir if comm.rank == 0 else None)
    on_root(comm, lambda: check_run_dir(run_dir, args.replace_results))
    run_dir = os.path.abspath(run_dir)
    watchdog = Watchdog(comm, state, workload.checkpoint.io_timeout)  # one thread, whichever repeat it watches
    # the first run's checks (bad input, unusable storage) fail alike on every rank: reported once, by main
    mode, ctx = start(workload, comm, world_size, state, watchdog)
    try:
        for k in range(1, args.repeat + 1):  # each repeat an ordinary run, in a folder of its own
            here, w, r = (run_dir, workload, raw) if args.repeat == 1 else \
                (repeat_folder(run_dir, k), *(replaced(workload, raw) if k > 1 else (workload, raw)))
            if here != run_dir:
                on_root(comm, partial(check_run_dir, here, args.replace_results))
            if k > 1:
                mode, ctx = start(w, comm, world_size, state, watchdog)
            execute(mode, ctx, here, r, args.overrides, sys.argv[1:], args.replace_results)
        if args.repeat > 1 and comm.rank == 0:
            print(f"repeats: {write_repeats(run_dir, args.repeat)}", flush=True)
        return 0
    except DlioCkptError as exc:  # raised on one rank or on all: either way every rank must end
        fail_every_rank(comm, state, str(exc), exc.exit_code, quiet=reported_by_another_rank(exc, comm.rank))
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:  # Exception, and libraries' BaseExceptions (DCP's CheckpointException)
        # a bug of ours or a library's: its traceback on stderr for the report, and the message one line as any other
        traceback.print_exc()
        fail_every_rank(comm, state, f"unexpected error: {type(exc).__name__}: {exc} (a bug: please report it with "
                                     "the traceback printed above)")
    return 1


def plan(args: argparse.Namespace, comm: Comm) -> int:
    """The files each rank writes, the restore's reads and the what-if, printed; nothing written."""
    from dlio_ckpt.plan.layouts import check_job, file_format, make_plan, restore_plan
    from dlio_ckpt.plan.view import plan_json, plan_table, restore_table
    from dlio_ckpt.results.restore import described
    from dlio_ckpt.results.whatif import Assumptions, what_if
    from dlio_ckpt.run.preparation import check_tier_options

    workload, _, _ = compose(args.overrides, args.config_dir)
    if workload.mode != "emulated":
        check_job(workload)
        from dlio_ckpt.run.modes import prediction

        view = prediction(workload, args.world_size or 1)
        print(json.dumps(view) if args.format == "json" else "\n".join(f"{k}: {v}" for k, v in view.items()))
        return 0
    if args.world_size is None:
        raise ConfigError("--world-size", None, "plan needs the number of ranks to lay out")
    check_job(workload, args.world_size)
    check_tier_options(workload)
    fmt = file_format(workload)
    job_plan = make_plan(workload, args.world_size)
    job_plan.validate()
    # the restore a run reads, as its summary.json's io.restore says it (restore_plan: who reads what, the one
    # function a run's load follows, restore.* keys or none); a load the layout cannot do is refused as a run
    # refuses it (exit 2)
    restore = described(workload, restore_plan(workload, job_plan), job_plan, fmt)
    assumed = Assumptions(write_bandwidth=args.write_bandwidth, read_bandwidth=args.read_bandwidth,
                          mtbf_hours=args.mtbf_hours, drain_bandwidth=args.drain_bandwidth,
                          interconnect_bandwidth=args.interconnect_bandwidth, hosts=args.hosts)
    figures = what_if(assumed, workload, job_plan, restore)
    if args.format == "json":
        print(json.dumps({**plan_json(job_plan, fmt), "restore": restore,
                          **({_what_if_section(figures): figures} if figures else {})}))
        return 0
    print(plan_table(job_plan, fmt))
    print(restore_table(restore, job_plan))
    for key, value in (figures or {}).items():
        if value is None:
            value = "none (see verdict)"
        print(f"{key}: {value:.4g}" if isinstance(value, float) else f"{key}: {value}")
    return 0


def _what_if_section(figures: dict[str, Any]) -> str:
    """plan --format json's name for the what-if: ``goodput`` where it was asked, else the times given (a bandwidth
    alone: ``save``, ``load``; both: ``save_and_load``)."""
    if "goodput" in figures:
        return "goodput"
    return "_and_".join(name for name, key in (("save", "write_seconds"), ("load", "load_seconds")) if key in figures)


def sweep(args: argparse.Namespace, comm: Comm) -> int:
    """Every point of a grid inside this one job (:mod:`dlio_ckpt.tools.drivers.sweep`)."""
    from dlio_ckpt.tools.drivers.sweep import run_sweep

    return run_sweep(args.overrides, args.world_size, args.config_dir, comm, args.stop_on_failure,
                     args.keep_checkpoints)


def tune(args: argparse.Namespace, comm: Comm) -> int:
    """The storage's fastest settings for the workload (:mod:`dlio_ckpt.tools.drivers.tune`)."""
    from dlio_ckpt.tools.drivers.tune import run_tune

    return run_tune(args.overrides, args.config_dir, comm, args.world_size, args.max_gib, args.max_seconds,
                    not args.no_fio)


def keys(args: argparse.Namespace, comm: Comm) -> int:
    """Every workload key, from the configuration's own models (so the list cannot drift from them), and each
    backend's storage options from that backend's options model."""
    from dlio_ckpt.config import describe_keys
    from dlio_ckpt.io.backends import options_model
    from dlio_ckpt.registry import BACKENDS

    models = {name: options_model(name) for name in BACKENDS.names}
    accepts: dict[str, list[str]] = {}
    for kind, model in models.items():
        for name in model.model_fields:
            accepts.setdefault(name, []).append(kind)

    def note(name: str, kinds: list[str]) -> str:
        defaults = {k: models[k].model_fields[name].get_default(call_default_factory=True) for k in kinds}
        each = "" if len(set(map(repr, defaults.values()))) == 1 else \
            " (defaults: " + ", ".join(f"{k} {v!r}" for k, v in defaults.items()) + ")"
        return f"storage_type {', '.join(kinds)}{each}; the same under each tier's storage_options"
    options = [(f"workload.storage.storage_options.{name}", models[kinds[0]].model_fields[name], note(name, kinds))
               for name, kinds in sorted(accepts.items())]
    print(describe_keys(args.section, options))
    return 0


def trace_diff(args: argparse.Namespace, comm: Comm) -> int:
    """A run held against a job's trace, phase by phase. Exit 1 where a phase is far by DLIO's thresholds."""
    from dlio_ckpt.tools.readers.trace_compare import compare, render_json, render_table

    found = compare([Path(t) for t in args.trace], Path(args.run), args.under, args.phase, args.checkpoint)
    print(render_json(found) if args.format == "json" else render_table(found))
    return 0 if all(p.close for p in found) else 1


def diff(args: argparse.Namespace, comm: Comm) -> int:
    """Compare two runs or two sweeps. Exit 1 on a regression (a CI gate)."""
    import re

    from dlio_ckpt.tools.readers.compare import (
        compare_metrics,
        config_differences,
        regressions,
        render_json,
        render_table,
    )
    from dlio_ckpt.tools.readers.runfiles import load_run
    from dlio_ckpt.tools.readers.sweeps import is_sweep

    if args.threshold < 0:
        raise ConfigError("--threshold", args.threshold, "must be >= 0 (percent)")
    if args.metrics is not None:
        try:
            re.compile(args.metrics)
        except re.error as exc:
            raise ConfigError("--metrics", args.metrics, f"is not a regular expression ({exc})") from None
    if is_sweep(args.a) and is_sweep(args.b):
        from dlio_ckpt.tools.readers.compare import diff_sweeps

        text, regressed = diff_sweeps(args.a, args.b, args.threshold, args.metrics, args.format)
        print(text)
        return 1 if regressed else 0
    from dlio_ckpt.tools.readers.repeated import is_repeats, load_repeats

    a, b = (load_repeats(p) if is_repeats(p) else load_run(p) for p in (args.a, args.b))
    changes = compare_metrics(a, b, args.threshold, args.metrics)
    if not any(c.direction != "none" and c.a is not None for c in changes):
        raise ConfigError("--metrics" if args.metrics else "A", args.metrics or args.a,
                          "leaves no throughput or duration of A to judge")
    render = render_json if args.format == "json" else render_table
    print(render(a, b, changes, config_differences(a, b), args.threshold))
    return 1 if regressions(changes) else 0


def repeats(args: argparse.Namespace, comm: Comm) -> int:
    """``repeats.json`` from repeats run as jobs of their own (new processes each, unlike ``run --repeat``);
    prints its path."""
    from dlio_ckpt.tools.drivers.repeats import repeat_folder, write_repeats

    count = 0
    while os.path.isdir(repeat_folder(args.dir, count + 1)):
        count += 1
    if count < 2:
        raise ConfigError("DIR", args.dir, f"holds {count} repeat folder(s) (repeat1, repeat2, ...): two at least, "
                          "each a run's folder (++hydra.run.dir=DIR/repeat<k>)")
    print(write_repeats(os.path.abspath(args.dir), count))
    return 0


def report(args: argparse.Namespace, comm: Comm) -> int:
    """Figures and report.html in a run folder (a sweep's: its figures); prints the files written."""
    from dlio_ckpt.tools.readers.report import write_report
    from dlio_ckpt.tools.readers.sweeps import draw, is_sweep, load_sweep

    paths: list[str] | list[Path]
    if is_sweep(args.run):
        body = load_sweep(args.run)
        paths = draw(args.run, body["keys"], body["points"]) if body["points"] else []
    else:
        paths = write_report(args.run)
    for path in paths:
        print(path)
    return 0


def check(args: argparse.Namespace, comm: Comm) -> int:
    """MLPerf Storage's checkpointing rules, one by one. Exit 1 when one fails."""
    from dlio_ckpt.tools.readers.mlperf import check_runs, render
    from dlio_ckpt.tools.readers.runfiles import load_run

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
