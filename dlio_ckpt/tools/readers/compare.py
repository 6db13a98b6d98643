"""``dlio_ckpt diff A B``: every metric of two runs side by side, and a verdict a CI job can gate on.

Why a direction per metric: "did save throughput drop more than 5%" and "did save duration grow more
than 5%" are both regressions, while a standard deviation or a checkpoint size has no better side
(a size change means the runs did not do the same work, which is shown, not judged). A metric that A
has and B lacks is a regression too: a gate must not pass because the figure it watches vanished.
NaN (DLIO's read-only runs) means "no figure" on either side and is never judged.

Why a phase's rate takes its duration's verdict where the two disagree: the duration is what training (a
save) or a restart (a load) waits for, and a rate can move the other way: a load's rate once was the bytes its
ranks read over its time, so a load that read 8 times the checkpoint was "+278% better" and, by its duration, a
"+256% regression" in one table; and DLIO's mean of per-checkpoint rates can fall while the mean duration falls
too (1 s and 3 s against 1.9 s twice). One change gets one direction: the duration's, said beside the rate
("by duration"), with the rate's own change. Where they agree, or one did not move, each keeps its own verdict
(a rate beyond the threshold is a regression whatever the duration did by less).

Why a latency percentile of requests of other sizes is "not comparable": a request's latency grows with its size,
so the p99 of 16 MiB writes against that of 1 MiB writes measures the sizes, not the storage (it showed as a
regression of thousands of percent, and failed the gate). The sizes come from what each run recorded: the phase's
checkpoints' ``latency`` count and bytes of that kind of call, every process. The same job records the same sizes to
the byte; a change of request pattern (``chunk_size``, a layout, a framework's writer) changes them by a factor. The
rule (:data:`SIZE_RULE`) leaves room for the files' last, shorter requests when the checkpoint's size moves a little.

Why a repeated run's intervals are said with their coverage: below six repeats no interval reaches 95 % (three
give 75 %); the coverage is :mod:`dlio_ckpt.tools.readers.repeated`' own, from the count of repeats.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any, Literal

from dlio_ckpt.tools.readers.repeated import order_rank
from dlio_ckpt.tools.readers.runfiles import Run, number

Direction = Literal["higher", "lower", "none"]
_RUN_SPECIFIC = ("checkpoint.checkpoint_folder", "storage.storage_root")  # differ between any two runs; shown
SIZE_RATIO = 1.1  # the larger mean request size at most this times the smaller: one size of request
SIZE_RULE = ("a latency percentile is compared only where both runs' requests of its kind are of one size: their mean "
             f"bytes per request (count and bytes of the phase's checkpoints, every process) within "
             f"{(SIZE_RATIO - 1) * 100:.0f} %, the larger at most {SIZE_RATIO:g} times the smaller")
_PERCENTILE = re.compile(r"(save|load)_checkpoint_(.+)_p\d+(?:_\d+)?_ms")  # phase, kind of call
MIB, KIB = 1 << 20, 1 << 10


def direction(name: str) -> Direction:
    """Which way is better for a metric, from its name (DLIO's and ours follow the same words; a latency in ms is
    better lower)."""
    if "stdev" in name or "size" in name:
        return "none"
    if name.endswith(("_per_second", "_percentage")) or "throughput" in name:
        return "higher"
    if "duration" in name or name.endswith(("_seconds", "_ms")):
        return "lower"
    return "none"


def judge(name: str) -> str | None:
    """The metric whose verdict a phase's rate takes: that phase's mean duration (None: judged by itself)."""
    phase = re.fullmatch(r"(save|load)_checkpoint_io_(?!stdev).*_per_second", name)
    return f"{phase[1]}_checkpoint_duration_mean_seconds" if phase else None


@dataclass
class MetricChange:
    name: str
    a: float | None
    b: float | None
    change_pct: float | None  # (b - a) / a, in percent
    direction: Direction
    verdict: str  # better, worse, same, regression, missing in B, new in B, no figure, not judged, not comparable
    judged_by: str | None = None  # where a rate moved against its phase's duration: the duration, whose verdict it took
    a_interval: tuple[float, float] | None = None  # repeated runs: the median's interval (readers.repeated)
    b_interval: tuple[float, float] | None = None
    why: str | None = None  # not comparable: why (SIZE_RULE)


UP, DOWN = ("better",), ("worse", "regression")


def compare_metrics(a: Run, b: Run, threshold_pct: float, select: str | None = None) -> list[MetricChange]:
    """Every metric of A and B (``select``: those whose name it matches) with its change and verdict. A rate
    of a phase that moved against that phase's mean duration takes the duration's verdict (see the module's
    docstring), whether or not ``select`` shows the duration."""
    every = {c.name: c for c in _each_metric(a, b, threshold_pct)}
    for c in every.values():
        by = every.get(judge(c.name) or "")
        if by is not None and (c.verdict in UP and by.verdict in DOWN or c.verdict in DOWN and by.verdict in UP):
            c.verdict, c.judged_by = by.verdict, by.name
    return [c for c in every.values() if select is None or re.search(select, c.name)]


def request_size(run: Run, phase: str, kind: str) -> float | None:
    """Mean bytes per call of ``kind`` over ``phase``'s checkpoints, every process: the calls a latency percentile
    of that kind is taken over. None where no checkpoint records bytes of such calls (metadata calls carry none;
    DLIO's summaries record no calls)."""
    checkpoints = run.summary.checkpoints
    calls = [c.latency.kinds[kind] for c in (checkpoints.phase(phase) if checkpoints is not None else [])
             if c.latency is not None and kind in c.latency.kinds]
    nbytes, count = sum(f.bytes or 0 for f in calls), sum(f.count for f in calls)
    return nbytes / count if nbytes and count else None


def _size(nbytes: float) -> str:
    return f"{nbytes / MIB:.4g} MiB" if nbytes >= MIB else f"{nbytes / KIB:.4g} KiB" if nbytes >= KIB \
        else f"{nbytes:.4g} B"


def not_comparable(a: Run, b: Run, name: str) -> str | None:
    """Why a latency percentile of A and B compares requests of other sizes (:data:`SIZE_RULE`); None where it
    does not (or ``name`` is no latency percentile of a phase)."""
    percentile = _PERCENTILE.fullmatch(name)
    if percentile is None:
        return None
    phase, kind = percentile.groups()
    sa, sb = request_size(a, phase, kind), request_size(b, phase, kind)
    if sa is None and sb is None:
        return None  # calls that move no bytes (metadata): one size
    if sa is None or sb is None:
        return f"the request sizes are not known: {'A' if sa is None else 'B'} records no bytes of its {kind} calls"
    if max(sa, sb) > SIZE_RATIO * min(sa, sb):
        return f"the request sizes differ: A {_size(sa)}, B {_size(sb)} per {kind} (mean bytes per request)"
    return None


def _each_metric(a: Run, b: Run, threshold_pct: float) -> list[MetricChange]:
    """Every metric judged by itself: its direction and the threshold."""
    out = []
    in_a, in_b = a.metric.figures(), b.metric.figures()  # by name: DLIO's training metrics and tier figures too
    for name in dict.fromkeys([*in_a, *in_b]):
        va, vb = in_a.get(name), in_b.get(name)
        if isinstance(va, list | str) or isinstance(vb, list | str):
            continue  # per-epoch lists and verdict strings of DLIO's training metrics
        na, nb = number(va), number(vb)
        d = direction(name)
        change = (nb - na) / abs(na) * 100 if na not in (None, 0.0) and nb is not None else None
        if na is None and nb is None:
            verdict = "no figure"
        elif nb is None:  # A has a figure, B none
            verdict = "missing in B" if d != "none" else "missing in B (not judged)"
        elif na is None:
            verdict = "new in B"
        elif d == "none":
            verdict = "not judged"
        elif change is None or abs(change) < 1e-9:
            verdict = "same"
        else:
            worse = change < 0 if d == "higher" else change > 0
            verdict = ("regression" if abs(change) > threshold_pct else "worse") if worse else "better"
        ia, ib = a.intervals.get(name), b.intervals.get(name)
        if ia is not None and ib is not None and verdict in ("better", "worse", "regression") \
                and not (ia[1] < ib[0] or ib[1] < ia[0]):
            verdict = "same (intervals overlap)"  # repeated on both sides: a move inside the spread is no finding
        why = not_comparable(a, b, name) if na is not None and nb is not None else None
        if why is not None:
            verdict, change = "not comparable", None  # no percentage: it would be the sizes', not the storage's
        out.append(MetricChange(name, na, nb, change, d, verdict, a_interval=ia, b_interval=ib, why=why))
    return out


def regressions(changes: list[MetricChange]) -> list[MetricChange]:
    return [c for c in changes if c.verdict in ("regression", "missing in B")]


def config_differences(a: Run, b: Run) -> list[dict[str, Any]] | None:
    """Keys whose values differ (None when either run has no config beside its summary)."""
    if a.config is None or b.config is None:
        return None
    keys = dict.fromkeys([*a.config, *b.config])
    return [{"key": k, "a": a.config.get(k, "(absent)"), "b": b.config.get(k, "(absent)")}
            for k in keys if a.config.get(k, "(absent)") != b.config.get(k, "(absent)")]


def layout_note(a: Run, b: Run) -> str | None:
    """Two runs of different layouts wrote different files for the same model: their figures compare
    the storage under two jobs, not two storages under one."""
    if a.layout == b.layout:
        return None
    return (f"layouts differ: A {a.layout}, B {b.layout}: the runs wrote other files (names, sizes per rank, "
            "metadata) for the same model; the figures compare two jobs' checkpoints")


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if abs(v) < 1e6 else f"{v:.4e}"


def _interval(bounds: tuple[float, float] | None) -> str:
    return f" [{_fmt(bounds[0])}, {_fmt(bounds[1])}]" if bounds is not None else ""


def interval_coverage(run: Run) -> float | None:
    """The coverage of a repeated run's intervals (:func:`~dlio_ckpt.tools.readers.repeated.order_rank`); None: run
    once."""
    return order_rank(run.repeats)[1] if run.repeats and run.intervals else None


def _repeated(run: Run) -> str:
    coverage = interval_coverage(run)
    return "run once (no interval)" if coverage is None else f"{run.repeats} runs ({coverage * 100:.4g} % interval)"


def render_table(a: Run, b: Run, changes: list[MetricChange], configs: list[dict] | None, threshold: float) -> str:
    rows = [("metric", "A", "B", "change", "verdict")]
    for c in changes:
        pct = f"{c.change_pct:+.1f}%" if c.change_pct is not None else ""
        verdict = c.verdict.upper() if c.verdict == "regression" else c.verdict
        rows.append((c.name, _fmt(c.a) + _interval(c.a_interval), _fmt(c.b) + _interval(c.b_interval), pct,
                     verdict + (" (by duration)" if c.judged_by else "")))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [f"A: {a.path}", f"B: {b.path}", f"threshold: {threshold:g}% (throughput down or duration up; a "
                                             "throughput moving against its duration takes the duration's verdict)",
             *([note] if (note := layout_note(a, b)) else []),
             *([f"repeated runs: medians [interval]; A {_repeated(a)}, B {_repeated(b)}; where both are repeated, a "
                "change is a regression only where the intervals separate"] if a.intervals or b.intervals else []), ""]
    for i, r in enumerate(rows):
        lines.append("  ".join(v.ljust(w) if j == 0 else v.rjust(w) for j, (v, w) in enumerate(zip(r, widths,
                                                                                                      strict=True))))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    if apart := [c for c in changes if c.why is not None]:
        lines += [f"not comparable: {SIZE_RULE}", *(f"  {c.name}: {c.why}" for c in apart), ""]
    if configs is None:
        lines.append("config: not compared (a run has no .hydra/config.yaml beside its summary)")
    elif not configs:
        lines.append("config: identical")
    else:
        lines.append(f"config keys that differ ({len(configs)}):")
        for d in configs:
            note = "  (run-specific)" if d["key"] in _RUN_SPECIFIC else ""
            lines.append(f"  {d['key']}: {d['a']!r} -> {d['b']!r}{note}")
    bad = regressions(changes)
    lines.append("")
    lines.append("result: " + ("REGRESSION in " + ", ".join(c.name for c in bad) if bad else "no regression"))
    return "\n".join(lines)


def render_json(a: Run, b: Run, changes: list[MetricChange], configs: list[dict] | None, threshold: float) -> str:
    bad = regressions(changes)
    return json.dumps({"a": a.path, "b": b.path, "threshold_pct": threshold,
                       "layouts": {"a": a.layout, "b": b.layout, "note": layout_note(a, b)},
                       "repeats": {"a": a.repeats, "b": b.repeats, "a_interval_coverage": interval_coverage(a),
                                   "b_interval_coverage": interval_coverage(b)},
                       "size_rule": SIZE_RULE,
                       "metrics": [asdict(c) for c in changes], "config_differences": configs,
                       "regressions": [c.name for c in bad], "result": "regression" if bad else "ok"},
                      indent=2, default=str)


def diff_sweeps(a_dir: str, b_dir: str, threshold: float, select: str | None, fmt: str) -> tuple[str, bool]:
    """Two sweep folders point by point (points matched by their swept values), each pair through
    the same gate as two runs. A point that ran in A and failed or is absent in B is a regression.
    Returns the text to print and whether anything regressed."""
    from dlio_ckpt.tools.readers.runfiles import load_run
    from dlio_ckpt.tools.readers.sweeps import load_sweep, point_key

    a, b = load_sweep(a_dir), load_sweep(b_dir)
    keys = a["keys"]
    b_rows = {point_key(r, keys): r for r in b["points"]}
    report: list[dict[str, Any]] = []  # a point each: its result, regressions and (when both ran) metrics
    regressed = False
    for row in a["points"]:
        if row["status"] != "ok":
            continue
        key, other = point_key(row, keys), b_rows.get(point_key(row, keys))
        if other is None or other["status"] != "ok":
            why = "absent in B" if other is None else f"failed in B: {other['reason'][:200]}"
            report.append({"point": " ".join(key), "result": "regression", "regressions": [why]})
            regressed = True
            continue
        changes = compare_metrics(load_run(row["run_dir"]), load_run(other["run_dir"]), threshold,
                                  select or r"_checkpoint_io_mean_GiB_per_second$|_duration_mean_seconds$")
        bad = [c.name for c in regressions(changes)]
        regressed = regressed or bool(bad)
        report.append({"point": " ".join(key), "result": "regression" if bad else "ok", "regressions": bad,
                       "metrics": {c.name: {"a": c.a, "b": c.b, "change_pct": c.change_pct, "verdict": c.verdict}
                                   for c in changes}})
    if fmt == "json":
        return json.dumps({"a": a_dir, "b": b_dir, "threshold_pct": threshold, "points": report,
                           "result": "regression" if regressed else "ok"}, indent=2, default=str), regressed
    lines = [f"A: {a_dir}", f"B: {b_dir}", f"threshold: {threshold:g}% per point", ""]
    for p in report:
        figures = "  ".join(f"{n.split('_checkpoint')[0]} {_fmt(m['a'])}->{_fmt(m['b'])} "
                            f"({m['change_pct']:+.1f}%)" for n, m in p.get("metrics", {}).items()
                            if m["change_pct"] is not None and n.endswith("GiB_per_second"))
        lines.append(f"{p['point']}: {p['result'].upper() if p['result'] == 'regression' else 'ok'}  {figures}"
                     + (f"  [{'; '.join(p['regressions'])}]" if p["regressions"] else ""))
    lines += ["", "result: " + ("REGRESSION" if regressed else "no regression")]
    return "\n".join(lines), regressed
