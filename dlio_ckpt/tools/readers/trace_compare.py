"""``dlio_ckpt trace-diff TRACE RUN``: how close a run's storage calls are to a real job's, per phase.

The job's trace is what its owner can take of a checkpoint's save or load: a DFTracer trace (``.pfw`` or
``.pfw.gz``, as DFTracer or ``checkpoint.trace`` writes it) or ``strace -f -ttt -T -y`` output (one file, or
``-ff``'s files). The run is a run folder with its traces (``checkpoint.trace``). Each side's calls are read into one
form (:class:`Call`: kind, file, thread, start, duration, size), then compared phase by phase. A side may hold
several checkpoints of the phase (the job's: one folder each; the run's: the steps its trace names), pooled: one
save moves by more than DLIO's margins from one run to the next, several together less (:func:`side`, :func:`gaps`).
The distances:

- the KS distance (the largest gap between the two empirical distribution functions, as ``scipy.stats.ks_2samp``'s
  statistic) of the sizes of the write calls, of the read calls, and of the gaps between calls (:func:`gaps`, within
  each checkpoint);
- calls per file, threads per file, fsyncs and renames, side by side (a checkpoint's, the mean where pooled);
- the bytes, the duration (first call's start to last call's end) and the throughput, as the run's over the job's
  (pooled: a checkpoint's mean bytes over the checkpoints' median duration);
- where the run played its framework item by item (its trace's ``item`` events: DCP), the framework's time per item
  that would make up the difference in duration (:func:`item_time`), a value for ``checkpoint.framework_item_us``.

The verdict takes the sizes of the phase's own data calls (a save's writes, a load's reads; the others are shown,
not judged: a real save's framework may read back a little, as ``mode=fsdp``'s rank 0 reads ``.metadata``) and DLIO's
thresholds, from its auto-config's trace comparison (``dlio_benchmark/auto_config/
compare.py`` in argonne-lcf/dlio_benchmark: read-size KS < 0.1, burst-gap KS < 0.15, throughput ratio 0.8 to 1.2),
there for data loading, here applied to a checkpoint's writes and reads and its gaps between calls; they are
DLIO's, not ours, and are said as such.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.io.trace import ITEM, TRACE_FILE

# DLIO's thresholds (dlio_benchmark/auto_config/compare.py, ComparisonReport.summary)
SIZE_KS, GAP_KS, THROUGHPUT = 0.1, 0.15, (0.8, 1.2)
THRESHOLDS = (f"DLIO auto-config's (argonne-lcf/dlio_benchmark, dlio_benchmark/auto_config/compare.py): size KS < "
              f"{SIZE_KS}, gap KS < {GAP_KS}, throughput ratio {THROUGHPUT[0]}-{THROUGHPUT[1]}")

# one name per kind of call, whoever made it: a system call's (strace, DFTracer's POSIX events) or our kinds
KINDS = {**dict.fromkeys(("write", "pwrite", "pwrite64", "writev", "pwritev", "pwritev2", "small write"), "write"),
         **dict.fromkeys(("read", "pread", "pread64", "readv", "preadv", "preadv2", "small read"), "read"),
         **dict.fromkeys(("fsync", "fdatasync"), "fsync"),
         **dict.fromkeys(("rename", "renameat", "renameat2"), "rename"),
         **dict.fromkeys(("open", "open64", "openat", "creat", "create"), "open"), "close": "close"}
DATA = ("write", "read")
ITEM_KIND = "item"  # not a storage call: an item the run's framework saved, its own time before the item's calls


@dataclass(frozen=True)
class Call:
    """One storage call: its kind (:data:`KINDS`' names), file, thread, start and duration (microseconds), the
    bytes it moved (data calls), the phase and checkpoint it was in where its trace says (ours does), and who made
    it where a DFTracer trace says: its rank (ours), else its process id. Also an item a run's framework saved
    (:data:`ITEM_KIND`)."""

    kind: str
    file: str
    thread: int
    start: float
    duration: float
    size: int = 0
    phase: str | None = None
    checkpoint: int | None = None
    process: int = 0  # its rank (a run's trace), else its process id (0: not said)


# -- reading the traces ----------------------------------------------------------------------------------


def _opened(path: Path) -> Iterator[str]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", errors="replace") as fh:
        yield from fh


def first_line(path: Path) -> str | None:
    """The first line of ``path`` that is not blank (None: the file holds none, as DFTracer leaves a forked
    process's file that traced nothing)."""
    return next((line.strip() for line in _opened(path) if line.strip()), None)


def is_dftracer(line: str) -> bool:
    """Whether a trace whose first line is ``line`` is DFTracer's (``[`` or an event), not strace's."""
    return line.startswith(("[", "{"))


def dftracer_calls(paths: Iterable[Path]) -> list[Call]:
    """Every file call of DFTracer traces, with the phase and checkpoint its args name (a job's DFTracer trace names
    none). DFTracer's own form and ours alike: an event a line, ``ph`` "X" (or 1, DFTracer 2's), its file
    as ``args.fname`` or as a hash (``fhash``) named by a metadata event ``FH``, its bytes as ``size`` (ours) or
    as the call's result ``ret`` (DFTracer's); a kind not in :data:`KINDS` (a stat, a mkdir, a seek) is not
    counted, nor a failed call."""
    events: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for path in paths:
        for line in _opened(path):
            line = line.strip().rstrip(",")
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            args = event.get("args") or {}
            if event.get("name") == "FH":
                names[str(args.get("value"))] = str(args.get("name"))
            elif event.get("ph") in ("X", 1) and event.get("cat") not in ("phase", "checkpoint", "dftracer"):
                events.append(event)
    out = []
    for e in events:
        args = e.get("args") or {}
        kind = ITEM_KIND if e.get("cat") == ITEM else KINDS.get(str(e.get("name", "")).removeprefix("coordinator "))
        if kind is None:
            continue
        file = args.get("fname") or names.get(str(args.get("fhash")), "")
        size = args.get("size", args.get("ret")) if kind in DATA else 0
        if int(args.get("ret", 0)) < 0:
            continue
        out.append(Call(kind, str(file), int(e.get("tid", 0)), float(e["ts"]), float(e.get("dur", 0)),
                        int(size or 0), args.get("phase"), args.get("checkpoint"),
                        int(args.get("rank", e.get("pid", 0)))))
    return out


# strace -f -ttt -T -y: "[pid N] " or "N " (-o without -ff) before the time; a call split by another thread's
_LINE = re.compile(r"^(?:\[pid\s+(\d+)\]\s+|(\d+)\s+)?(\d+\.\d+)\s+(.*)$")
_DONE = re.compile(r"^(.*)\)\s+=\s+(-?\d+|0x[0-9a-f]+|\?)(?:<[^>]*>)?(?:\s.*?)?\s+<(\d+\.\d+)>$")
_START = re.compile(r"^(\w+)\((.*)$")
_RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>(.*)$")
_FD_PATH = re.compile(r"^-?\d+<([^>]*)>")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _strace_file(call: str, args: str, cwd: str) -> str:
    """The file a call was on: an open's or a rename's (first) quoted path, made absolute by the folder it is
    relative to (``-y`` prints it beside ``AT_FDCWD``); else the path ``-y`` prints beside the descriptor."""
    if KINDS.get(call) in ("open", "rename"):
        quoted = _QUOTED.search(args)
        if quoted is None:
            return ""
        path = quoted[1]
        base = _FD_PATH.match(args.replace("AT_FDCWD", "-100", 1))
        return path if path.startswith("/") else os.path.join(base[1] if base else cwd, path)
    found = _FD_PATH.match(args)
    return found[1] if found else ""


def strace_calls(paths: Iterable[Path]) -> list[Call]:
    """The file calls of ``strace -f -ttt -T -y`` output (a thread's calls split by another's joined again); a
    failed call (result < 0) is not counted. A file of ``-ff`` (``PREFIX.TID``) gives its lines its thread."""
    calls: list[Call] = []
    for path in paths:
        own = int(path.suffix[1:]) if path.suffix[1:].isdigit() else 0
        pending: dict[int, tuple[str, float, str]] = {}
        for line in _opened(path):
            m = _LINE.match(line.rstrip("\n"))
            if m is None:
                continue
            tid, ts, rest = int(m[1] or m[2] or own), float(m[3]), m[4]
            if rest.endswith("<unfinished ...>"):
                start = _START.match(rest)
                if start:
                    pending[tid] = (start[1], ts, start[2].removesuffix("<unfinished ...>"))
                continue
            resumed = _RESUMED.match(rest)
            if resumed:
                if tid not in pending:
                    continue
                name, ts, head = pending.pop(tid)
                rest = f"{name}({head}{resumed[2]}"
            start = _START.match(rest)
            done = _DONE.match(rest) if start else None
            kind = KINDS.get(start[1]) if start else None
            if start is None or kind is None or done is None or done[2] == "?" or int(done[2], 0) < 0:
                continue
            args = done[1][len(start[1]) + 1:]
            calls.append(Call(kind, _strace_file(start[1], args, ""), tid, ts * 1e6, float(done[3]) * 1e6,
                              int(done[2], 0) if kind in DATA else 0))
    return calls


def traced_calls(paths: list[Path]) -> list[Call]:
    """Every call of the job's trace files (folders: every file in them), whichever tracer wrote them (a DFTracer
    trace of ours names their phases; any other none); not the items of a trace of ours (the run's framework's, not
    the job's)."""
    files = [f for p in paths for f in (sorted(q for q in p.iterdir() if q.is_file()) if p.is_dir() else [p])]
    if not files:
        raise ConfigError("TRACE", " ".join(map(str, paths)), "names no file")
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ConfigError("TRACE", missing[0], "is not a file")
    firsts = {f: first_line(f) for f in files}
    files = [f for f, line in firsts.items() if line is not None]
    traced = dftracer_calls(files) if all(is_dftracer(str(firsts[f])) for f in files) else strace_calls(files)
    return [c for c in traced if c.kind != ITEM_KIND]


def on_files(calls: list[Call], under: str | None) -> list[Call]:
    """The calls on files under ``under`` only, or, without it, those on files of no system folder and not
    Python's."""
    keep = (lambda f: f.startswith(os.path.join(os.path.abspath(under), ""))) if under else _not_system
    return [c for c in calls if keep(c.file)]


_SYSTEM = ("/proc/", "/sys/", "/dev/", "/usr/", "/lib", "/etc/", "pipe:", "socket:", "anon_inode:")


def _not_system(file: str) -> bool:
    return bool(file) and not file.startswith(_SYSTEM) and not file.endswith((".py", ".pyc", ".so")) \
        and ".so." not in file and "/site-packages/" not in file


def run_calls(run: Path) -> list[Call]:
    """A run folder's calls by phase, from its processes' traces."""
    traces = sorted(p for p in run.iterdir() if TRACE_FILE.fullmatch(p.name)) if run.is_dir() else []
    if not traces:
        raise ConfigError("RUN", str(run), "holds no trace: run it with ++workload.checkpoint.trace=True")
    return dftracer_calls(traces)


# -- comparing ------------------------------------------------------------------------------------------


def ks_distance(a: list[float], b: list[float]) -> float | None:
    """The two-sample Kolmogorov-Smirnov statistic: the largest difference between the two empirical distribution
    functions (``scipy.stats.ks_2samp``'s). None where both are empty, 1 where one is."""
    if not a and not b:
        return None
    if not a or not b:
        return 1.0
    xs, ys = sorted(a), sorted(b)
    i = j = 0
    worst = 0.0
    while i < len(xs) and j < len(ys):
        v = min(xs[i], ys[j])
        while i < len(xs) and xs[i] == v:
            i += 1
        while j < len(ys) and ys[j] == v:
            j += 1
        worst = max(worst, abs(i / len(xs) - j / len(ys)))
    return worst


def gaps(*checkpoints: list[Call]) -> list[float]:
    """The time between one data call's start and the next's, every process and thread of a checkpoint together, in
    the order they started (microseconds), checkpoint after checkpoint (none between two): DLIO's gaps
    (auto-config's compare.py, before it keeps those over ten times the median as the gaps between a loader's bursts,
    of which a checkpoint has a handful). Starts, not ends: a call's duration is measured differently by each tracer
    (strace stops the thread at each call, our trace times the call from Python), its start alike."""
    found = []
    for calls in checkpoints:
        starts = sorted(c.start for c in calls if c.kind in DATA)
        found += [b - a for a, b in zip(starts, starts[1:], strict=False)]
    return found


Count = int | float  # a checkpoint's count; pooled, the checkpoints' mean (whole where it is)


@dataclass
class Side:
    """One side's account of a phase: a checkpoint's, the mean of its ``checkpoints`` where pooled."""

    checkpoints: int
    calls: Count
    files: Count
    calls_per_file: float
    threads_per_file: float
    threads: Count
    writes: Count
    reads: Count
    fsyncs: Count
    renames: Count
    bytes: Count
    seconds: float

    @property
    def throughput(self) -> float:
        return self.bytes / self.seconds if self.seconds else 0.0


def _mean(total: int, n: int) -> Count:
    return total // n if total % n == 0 else total / n


def side(*checkpoints: list[Call]) -> Side:
    """The account of one checkpoint's calls, or of several pooled: each count the checkpoints' mean, the duration
    their median's (each first data call's start to last one's end), the throughput a checkpoint's bytes over it;
    calls and threads per file over all their files. The median, not the mean: a real job's save now and then
    stalls for longer than the rest of it lasts (its last of four waited 0.2 s before its ``.metadata`` in
    ``bench/trace_verdict.py``'s job), which a time per item made up from a mean would spread over every item."""
    n = max(len(checkpoints), 1)
    files: list[dict[str, list[Call]]] = [defaultdict(list) for _ in checkpoints]
    for per_file, calls in zip(files, checkpoints, strict=True):
        for c in calls:
            per_file[c.file].append(c)
    every = [cs for per_file in files for cs in per_file.values()]
    calls = [c for cs in checkpoints for c in cs]
    durations = []  # of the checkpoints with data calls
    for cs in checkpoints:
        data = [c for c in cs if c.kind in DATA]
        if data:
            durations.append((max(c.start + c.duration for c in data) - min(c.start for c in data)) / 1e6)

    def count(kind: str) -> Count:
        return _mean(sum(c.kind == kind for c in calls), n)

    return Side(checkpoints=len(checkpoints), calls=_mean(len(calls), n), files=_mean(len(every), n),
                calls_per_file=len(calls) / len(every) if every else 0.0,
                threads_per_file=sum(len({c.thread for c in cs}) for cs in every) / len(every) if every else 0.0,
                threads=_mean(sum(len({c.thread for c in cs}) for cs in checkpoints), n), writes=count("write"),
                reads=count("read"), fsyncs=count("fsync"), renames=count("rename"),
                bytes=_mean(sum(c.size for c in calls if c.kind in DATA), n),
                seconds=statistics.median(durations) if durations else 0.0)


@dataclass
class ItemTime:
    """The framework's time per item: what the run played, on how many items its busiest rank saved, and a
    value of ``checkpoint.framework_item_us`` that would make up the difference in duration (:func:`item_time`)."""

    items_per_rank: Count  # a checkpoint's (the mean, where pooled)
    played_us: float
    suggested_us: float


def item_time(job: Side, run: Side, items: list[Call]) -> ItemTime | None:
    """What the run played before each item (its shortest ``item`` event, microseconds: the value it was asked,
    which a busy loop lasts at least, longer where its thread was preempted) and the value that would make its
    duration the job's: the difference in a checkpoint's duration spread over a checkpoint's items of its busiest
    rank (the mean, where pooled), whose writer threads take their items one at a time (they hold one
    interpreter's lock, as DCP's do). A first estimate: the threads' calls, the other processes and the cores move
    with it, so run again with it and compare again (each comparison starts from what that run played). None where
    the run played no items."""
    if not items:
        return None
    busiest = _mean(max(Counter(c.process for c in items).values()), max(run.checkpoints, 1))
    played = min(c.duration for c in items)
    return ItemTime(busiest, played, max(0.0, played + (job.seconds - run.seconds) * 1e6 / busiest))


@dataclass
class PhaseDistance:
    """One phase held against the job: the distances, both sides' accounts and the verdict."""

    phase: str
    job: Side
    run: Side
    write_size_ks: float | None
    read_size_ks: float | None
    gap_ks: float | None
    bytes_ratio: float | None
    duration_ratio: float | None
    throughput_ratio: float | None
    item: ItemTime | None = None  # where the run played its framework item by item
    failed: list[str] = field(default_factory=list)  # each threshold it misses, said

    @property
    def close(self) -> bool:
        return not self.failed


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def compare_phase(phase: str, job: list[list[Call]], run: list[list[Call]], items: list[Call] | None = None
                  ) -> PhaseDistance:
    """The job's checkpoints of a phase (each its calls; several pooled) held against the run's (and the items the
    run's framework saved in them)."""
    j, r = side(*job), side(*run)
    sizes = {k: ks_distance([float(c.size) for cs in job for c in cs if c.kind == k],
                            [float(c.size) for cs in run for c in cs if c.kind == k]) for k in DATA}
    out = PhaseDistance(phase, j, r, sizes["write"], sizes["read"], ks_distance(gaps(*job), gaps(*run)),
                        _ratio(r.bytes, j.bytes), _ratio(r.seconds, j.seconds), _ratio(r.throughput, j.throughput),
                        item_time(j, r, items or []))
    judged = "read" if phase.startswith("load") else "write"  # DLIO judges a loader's reads; a save's are its writes
    size_ks = sizes[judged]
    if size_ks is not None and size_ks >= SIZE_KS:
        out.failed.append(f"{judged} size KS {size_ks:.3f} >= {SIZE_KS}")
    if out.gap_ks is not None and out.gap_ks >= GAP_KS:
        out.failed.append(f"gap KS {out.gap_ks:.3f} >= {GAP_KS}")
    t = out.throughput_ratio
    if t is None or not THROUGHPUT[0] <= t <= THROUGHPUT[1]:
        out.failed.append(f"throughput ratio {'none' if t is None else f'{t:.2f}'} outside "
                          f"{THROUGHPUT[0]}-{THROUGHPUT[1]}")
    return out


def infer_phase(calls: list[Call]) -> str:
    """A trace of one save or one load: a save writes more bytes than it reads."""
    written = sum(c.size for c in calls if c.kind == "write")
    return "save" if written >= sum(c.size for c in calls if c.kind == "read") else "load"


def compare(job_paths: list[Path], run: Path, under: Sequence[str] = (), phase: str | None = None,
            checkpoints: Sequence[int] = ()) -> list[PhaseDistance]:
    """Every phase of the job's trace held against the run's same phase. A job's trace without phases is one
    phase: ``phase``, else the one its bytes say (a save writes). The job's checkpoints are its calls under each
    folder of ``under``, one a folder, pooled where several; without ``under``, its calls on files not the system's,
    taken whole (a trace of several saves without ``under`` is one checkpoint, the time between them in it). Where a
    side's trace names its checkpoints (the run's does, and a job's of ours), those of ``checkpoints`` are taken (the
    job's: where there is no ``under``), else its first: one for the job (one a folder), as many as the job has for
    the run. A phase in some of the job's folders only is compared on those."""
    traced, ours, trace = traced_calls(job_paths), run_calls(run), " ".join(map(str, job_paths))
    folders: list[str | None] = [*dict.fromkeys(os.path.abspath(u) for u in under)] or [None]
    checkpoints = [*dict.fromkeys(checkpoints)]
    named_in_job = () if under else checkpoints  # a folder is one checkpoint of the job: its first, where named
    job_sets = [on_files(traced, folder) for folder in folders]
    for folder, calls in zip(folders, job_sets, strict=True):
        if not calls:
            raise ConfigError("TRACE", trace, "holds no call on a file" + (f" under {folder}" if folder else ""))
    named = phase or infer_phase([c for calls in job_sets for c in calls])
    job_sets = [[c if c.phase is not None else replace(c, phase=named) for c in calls] for calls in job_sets]
    found = []
    for name in dict.fromkeys(c.phase for calls in job_sets for c in calls):
        theirs = [split for calls in job_sets
                  for split in by_checkpoint([c for c in calls if c.phase == name], named_in_job, 1, "TRACE", trace)]
        mine = [c for c in ours if c.phase == name]
        if not mine:
            raise ConfigError("RUN", str(run), f"traced no call in phase {name} (its phases: "
                              f"{', '.join(dict.fromkeys(str(c.phase) for c in ours))})")
        mine_sets = by_checkpoint(mine, checkpoints, len(theirs), "RUN", str(run))
        found.append(compare_phase(str(name), theirs, [[c for c in s if c.kind != ITEM_KIND] for s in mine_sets],
                                   [c for s in mine_sets for c in s if c.kind == ITEM_KIND]))
    return found


def by_checkpoint(calls: list[Call], checkpoints: Sequence[int], first: int, side_name: str, where: str
                  ) -> list[list[Call]]:
    """The calls of each checkpoint of ``checkpoints`` (default: the ``first`` checkpoints), or all of them as one
    where no call names its checkpoint."""
    steps = sorted({c.checkpoint for c in calls if c.checkpoint is not None})
    if not steps:
        return [calls] if calls else []
    missing = [k for k in checkpoints if k not in steps]
    if missing:
        raise ConfigError("--checkpoint", missing[0], f"is not a checkpoint of {side_name}'s {calls[0].phase} "
                          f"phase (it has: {', '.join(map(str, steps))})")
    if not checkpoints and len(steps) < first:
        raise ConfigError(side_name, where, f"has {len(steps)} checkpoints in phase {calls[0].phase}, fewer than "
                          f"the job's {first} (one an --under folder): run as many (num_checkpoints_write or "
                          "num_checkpoints_read), or name the ones to compare (--checkpoint K)")
    return [[c for c in calls if c.checkpoint == k] for k in (checkpoints or steps[:first])]


# -- saying it --------------------------------------------------------------------------------------------


def _f(v: float | None, fmt: str = "{:.3f}") -> str:
    return "-" if v is None else fmt.format(v)


POOLED = "   (a checkpoint's: the mean of those pooled; seconds, their median)"


def render_table(found: list[PhaseDistance]) -> str:
    lines = []
    for p in found:
        lines += [f"phase {p.phase}: {'CLOSE' if p.close else 'FAR'}" + (f" ({'; '.join(p.failed)})" if p.failed
                                                                          else ""),
                  f"  write size KS {_f(p.write_size_ks)}   read size KS {_f(p.read_size_ks)}   "
                  f"gap KS {_f(p.gap_ks)}",
                  f"  run/job: bytes {_f(p.bytes_ratio, '{:.2f}')}   duration {_f(p.duration_ratio, '{:.2f}')}   "
                  f"throughput {_f(p.throughput_ratio, '{:.2f}')}",
                  f"  {'':<18}{'job':>12}{'run':>12}" + (POOLED if max(p.job.checkpoints, p.run.checkpoints) > 1
                                                          else "")]
        for name in ("checkpoints", "calls", "files", "calls_per_file", "threads_per_file", "threads", "writes",
                     "reads", "fsyncs", "renames", "bytes", "seconds"):
            lines.append(f"  {name:<18}" + "".join(f"{v:>12.3f}" if isinstance(v, float) else f"{v:>12}"
                                                   for v in (getattr(p.job, name), getattr(p.run, name))))
        if p.item is not None:
            lines.append(f"  framework time per item: the run played {p.item.played_us:.0f} us before each item "
                         f"({p.item.items_per_rank:g} a checkpoint on its busiest rank); the job's duration suggests "
                         f"++workload.checkpoint.framework_item_us={p.item.suggested_us:.0f} (a first estimate: run "
                         "with it and compare again)")
    lines.append(f"thresholds: {THRESHOLDS}")
    return "\n".join(lines)


def render_json(found: list[PhaseDistance]) -> str:
    return json.dumps({"thresholds": THRESHOLDS,
                       "phases": [{**asdict(p), "close": p.close} for p in found]}, indent=2)
