"""``dlio_ckpt report RUN``: PNG figures in the run folder and one self-contained HTML page.

Why these three pictures: throughput per checkpoint shows drift over a run; per-process durations
show stragglers (the slowest process sets every checkpoint's duration); the timeline shows where
each process spent its time, file by file. They must stay readable from 4 to 1024 processes, so
nothing is drawn per process that needs a legend: durations are a strip of points over a box per
checkpoint with the slowest processes labelled, plus a process-by-checkpoint heat map; the timeline
has one thin row per process and colours by phase only.

The page says what the figures are of: the layout, where the checkpoints were, each phase's ranks, and what
the load did (its duration first, by which loads are judged; its world size against the save's, whose reader
it follows and any caveat, what it restored, needed and read, per rank and at the heaviest rank).
"""

from __future__ import annotations

import base64
import html
import json
import re
import statistics
from pathlib import Path
from typing import Any

from dlio_ckpt.results.folder import FIGURES, REPORT_FILES
from dlio_ckpt.results.schema import EVICT_TIMES, FSYNC_TIMES, RestoreFigures, Spread
from dlio_ckpt.results.summary import LATENCY_FILE
from dlio_ckpt.tools.readers.runfiles import Run, load_run, operations

GIB, MIB = 1 << 30, 1 << 20
PHASE_COLOURS = {"save": "#1f77b4", "load": "#ff7f0e"}
SYNC_COLOUR = "#9e9e9e"
HELD_COLOUR = "#d62728"
TRAIN_COLOUR = "#e0e0e0"  # async runs: training between one checkpoint's hold and the next one's
SLOWEST_COLOUR = "#000000"  # the timeline's mark of each checkpoint's slowest process
DRAIN_COLOUR = "#2ca02c"  # tiered runs: copies to the tiers below, in the lower band of each row
DRAINS = r"drain_tier(\d+)_ckpt\d+"
SYNC_TIMES = (FSYNC_TIMES, EVICT_TIMES)  # each file's second pass, beside its data (results.summary.per_epoch_stats)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed on a cluster node
    import matplotlib.pyplot as plt

    return plt


def _durations(run: Run) -> dict[str, dict[int, float]]:
    """``save_ckpt1`` -> {process: duration}."""
    out: dict[str, dict[int, float]] = {}
    for proc, stats in run.per_process.items():
        for name, entry in operations(stats).items():
            out.setdefault(name, {})[proc] = float(entry["duration"])
    return out


def _ordered(names: Any) -> list[str]:
    return sorted(names, key=lambda n: (not n.startswith("save"), int(n.split("ckpt")[1])))


def per_checkpoint(run: Run, phase: str) -> list[tuple[int, float]]:
    """(index, GiB/s) of each checkpoint: ours from summary.json; a DLIO run's recomputed from its
    per-rank files (its summary has only means, timed on rank 0), as the checkpoint's size over the
    slowest rank's duration, which is how MLPerf's rules define it."""
    if run.summary.checkpoints is not None:
        return [(c.index, c.throughput_GiB_per_second) for c in run.summary.checkpoints.phase(phase)]
    size = run.metric.checkpoint_size_GB  # GiB, as DLIO names it
    return [(int(name.split("ckpt")[1]), size / max(d.values())) for name, d in _durations(run).items()
            if name.startswith(phase) and size and max(d.values()) > 0]


def _load_seconds(run: Run, phase: str) -> str:
    """A load's legend names its mean duration too: what a load is judged by (the time a restart waits)."""
    seconds = run.metric.load_checkpoint_duration_mean_seconds
    return f", mean {seconds:.3g} s" if phase == "load" and seconds is not None else ""


def processes(run: Run) -> Any:
    return run.summary.processes if run.summary.processes is not None else "?"


def throughput_figure(run: Run, path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for phase, colour in PHASE_COLOURS.items():
        items = sorted(per_checkpoint(run, phase))
        if items:
            x, y = [i for i, _ in items], [g for _, g in items]
            ax.plot(x, y, "o-", color=colour, label=f"{phase} (median {statistics.median(y):.3g} GiB/s"
                    + _load_seconds(run, phase) + ")")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("checkpoint")
    ax.set_ylabel("GiB/s (the checkpoint over the slowest process's time)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{run.summary.workload or 'DLIO run'}: throughput per checkpoint, "
                 f"{processes(run)} processes" + ("" if run.ours else " (recomputed from the per-rank files)"))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def durations_figure(run: Run, path: Path, label_slowest: int = 3) -> None:
    """A box per checkpoint, every process a point over it, the slowest processes named."""
    import numpy as np

    plt = _pyplot()
    data = _durations(run)
    names = _ordered(data)
    fig, ax = plt.subplots(figsize=(max(8, 0.6 * len(names) + 3), 5))
    rng = np.random.default_rng(0)
    n = max(len(d) for d in data.values())
    size, alpha = (30, 0.9) if n <= 32 else (6, 0.4)
    for i, name in enumerate(names):
        procs = list(data[name])
        values = np.array([data[name][p] for p in procs])
        colour = PHASE_COLOURS[name.split("_")[0]]
        ax.boxplot(values, positions=[i], widths=0.6, showfliers=False, medianprops={"color": "black"})
        xs = i + rng.uniform(-0.22, 0.22, len(values))
        ax.scatter(xs, values, s=size, alpha=alpha, color=colour, linewidths=0)
        for j in np.argsort(values)[::-1][:label_slowest]:
            if values[j] > 1.05 * np.median(values):  # only processes that stand out, beside their point
                ax.annotate(f"p{procs[j]}", (xs[j], values[j]), xytext=(5, 0), textcoords="offset points",
                            fontsize=7, va="center")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_ylabel("seconds (barrier to this process's last byte)")
    ax.set_title(f"Per-process durations ({n} processes; labels: processes >5% slower than the median)")
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def heatmap_figure(run: Run, path: Path) -> None:
    """The stragglers' heat map, saved."""
    fig = stragglers_figure(run)
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)


def stragglers_figure(run: Run) -> Any:
    """Process x checkpoint, coloured by duration / that checkpoint's median: a straggler is a bright row.
    Why the title in two lines: with few checkpoints the axes are narrower than one line of it, which ran off the
    figure's left edge, and the room one line left above the axes raised the colour bar, whose label, centred on
    it, ran off the top (a layout engine moves axes, it does not shorten text)."""
    import numpy as np

    plt = _pyplot()
    data = _durations(run)
    names = _ordered(data)
    procs = sorted({p for d in data.values() for p in d})
    grid = np.full((len(procs), len(names)), np.nan)
    for j, name in enumerate(names):
        med = statistics.median(data[name].values()) or 1.0
        for i, p in enumerate(procs):
            if p in data[name]:
                grid[i, j] = data[name][p] / med
    fig, ax = plt.subplots(figsize=(max(7, 0.5 * len(names) + 4.5), min(12, 3 + len(procs) / 40)))
    image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="magma", vmin=min(0.8, np.nanmin(grid)),
                      vmax=max(1.5, np.nanmax(grid)))
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_ylabel("process")
    if len(procs) <= 32:
        ax.set_yticks(range(len(procs)), [str(p) for p in procs])
    fig.colorbar(image, ax=ax, pad=0.14, label="duration / median of that checkpoint")
    mean_ratio = np.nanmean(grid, axis=1)
    for i in np.argsort(mean_ratio)[::-1][:5]:  # name the worst rows where they stand out
        if mean_ratio[i] > 1.1:
            ax.annotate(f"p{procs[i]} ({mean_ratio[i]:.2f}x)", (len(names) - 0.5, i), xytext=(4, 0),
                        textcoords="offset points", fontsize=8, va="center", annotation_clip=False)
    ax.set_title("Stragglers: each process's duration\nrelative to the checkpoint's median")
    fig.tight_layout()
    return fig


def timeline_figure(run: Run, path: Path) -> None:
    """One row per process; a bar per file (or per operation where files were not recorded)."""
    from datetime import datetime

    from matplotlib.collections import PolyCollection

    plt = _pyplot()
    t0 = min(datetime.fromisoformat(e["start"]).timestamp() for s in run.per_process.values()
             for e in operations(s).values())
    verts: list[list[tuple[float, float]]] = []
    colours: list[str | tuple[float, float, float]] = []  # a named colour, or a phase's shade as RGB
    procs = sorted(run.per_process)
    height = 0.8 if len(procs) <= 64 else 1.0  # many rows: no gaps, or the picture turns to moire
    for row, proc in enumerate(procs):
        saves = [e for n, e in operations(run.per_process[proc], r"save_ckpt\d+").items() if "held" in e]
        for before, after in zip(saves, saves[1:], strict=False):  # training: from a hold's end to the next's start
            x0 = datetime.fromisoformat(before["start"]).timestamp() - t0 + before["held"]
            x1 = datetime.fromisoformat(after["start"]).timestamp() - t0
            verts.append([(x0, row - height / 2), (x1, row - height / 2), (x1, row - height / 3),
                          (x0, row - height / 3)])
            colours.append(TRAIN_COLOUR)
        for name, e in operations(run.per_process[proc]).items():
            phase = name.split("_")[0]
            base = datetime.fromisoformat(e["start"]).timestamp() - t0
            spans = [(s, t, n) for _, s, t, n in e.get("file_times", [])] or [(0.0, e["duration"], e.get("bytes", 1))]
            spans += [(s, t, 0) for key in SYNC_TIMES for _, s, t in e.get(key, [])]  # fsync, eviction: grey
            for k, (s, t, n) in enumerate(spans):
                x0, x1 = base + s, base + max(t, s + 1e-4)
                verts.append([(x0, row - height / 2), (x1, row - height / 2), (x1, row + height / 2),
                              (x0, row + height / 2)])
                shade = 1.0 if k % 2 == 0 else 0.7  # neighbouring files of a row alternate in shade
                colours.append(SYNC_COLOUR if n == 0 else _shade(PHASE_COLOURS[phase], shade))
            if e.get("held"):  # async: the time training was held, over the start of its background write
                x1, h = base + e["held"], height / 4
                verts.append([(base, row - h), (x1, row - h), (x1, row + h), (base, row + h)])
                colours.append(HELD_COLOUR)
        for name, e in operations(run.per_process[proc], DRAINS).items():  # under the saves they overlap
            drain = re.fullmatch(DRAINS, name)
            assert drain is not None  # operations() gave only the entries that DRAINS matches
            base, tier = datetime.fromisoformat(e["start"]).timestamp() - t0, int(drain[1])
            for k, (_, s, t, _n) in enumerate(e.get("file_times", []) or [("", 0.0, e["duration"], 0)]):
                x0, x1 = base + s, base + max(t, s + 1e-4)
                verts.append([(x0, row + height / 6), (x1, row + height / 6), (x1, row + height / 2),
                              (x0, row + height / 2)])
                colours.append(_shade(DRAIN_COLOUR, (1.0 if k % 2 == 0 else 0.7) / tier ** 0.5))
    fig, ax = plt.subplots(figsize=(11, min(14, 2.5 + len(procs) / 25)))
    ax.add_collection(PolyCollection(verts, facecolors=colours, edgecolors="none"))
    slowest = _slowest_marks(run, procs, t0)
    if slowest:  # each checkpoint's slowest process: its row outlined over the operation, its end marked
        for x0, x1, row in slowest:
            ax.add_patch(plt.Rectangle((x0, row - height / 2), x1 - x0, height, fill=False, edgecolor=SLOWEST_COLOUR,
                                       linewidth=1.2))
        ax.plot([x1 for _, x1, _ in slowest], [row for *_, row in slowest], "<", color=SLOWEST_COLOUR, markersize=7)
    ax.autoscale()
    ax.set_ylim(-0.5, len(procs) - 0.5)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first checkpoint started")
    ax.set_ylabel("process")
    if len(procs) <= 32:
        ax.set_yticks(range(len(procs)), [str(p) for p in procs])
    held = HELD_COLOUR in colours
    drained = any(operations(s, DRAINS) for s in run.per_process.values())
    handles = [plt.Rectangle((0, 0), 1, 1, color=c)
               for c in (*PHASE_COLOURS.values(), SYNC_COLOUR, *([HELD_COLOUR, TRAIN_COLOUR] if held else []),
                         *([DRAIN_COLOUR] if drained else []), *([SLOWEST_COLOUR] if slowest else []))]
    labels = ["save (a bar per file, or per checkpoint in real modes)", "load", "fsync / cache eviction",
              *(["training held (async: staging, waiting)", "training (top band)"] if held else []),
              *(["drain to the next tier (lower band; darker: lower tier)"] if drained else []),
              *(["slowest process of each checkpoint (outlined, its end marked): it sets the duration"]
                if slowest else [])]
    ax.legend(handles, labels, loc="upper center",
              bbox_to_anchor=(0.5, -0.08 if len(procs) > 64 else -0.3), ncol=3, fontsize=8, frameon=False)
    ax.set_title(f"Timeline of each process's files ({len(procs)} processes)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _slowest_marks(run: Run, procs: list[int], t0: float) -> list[tuple[float, float, int]]:
    """(start, end, row) of each checkpoint's slowest process (summary.json's ``slowest_process``), seconds since
    ``t0``: the process whose duration is the checkpoint's."""
    from datetime import datetime

    checkpoints, rows, out = run.summary.checkpoints, {p: i for i, p in enumerate(procs)}, []
    for phase in PHASE_COLOURS:
        for c in checkpoints.phase(phase) if checkpoints is not None else []:
            entry = operations(run.per_process.get(c.slowest_process, {})).get(f"{phase}_ckpt{c.index}")
            if entry is not None and c.slowest_process in rows:
                start = datetime.fromisoformat(entry["start"]).timestamp() - t0
                out.append((start, start + float(entry["duration"]), rows[c.slowest_process]))
    return out


def latency_figure(run: Run, path: Path) -> None:
    """The distribution of every kind of storage call, one panel per phase (saves, loads, the calls outside
    them): the share of calls at or below each latency, on a logit axis so that p90, p99 and p99.9 are as far
    apart as p50 and p90 (the tail is what a storage team reads), from ``latency_histograms.json``."""
    import numpy as np

    assert run.folder is not None  # write_report draws it only for a folder holding the histograms
    body = json.loads((run.folder / LATENCY_FILE).read_text())["phases"]
    phases = [p for p in ("save", "load", "outside") if body.get(p)]
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(phases), figsize=(5.2 * len(phases), 4.6), squeeze=False)
    for ax, phase in zip(axes[0], phases, strict=True):
        kinds = sorted(body[phase].items(), key=lambda kv: -kv[1]["count"])
        for kind, h in kinds[:10]:
            n = h["count"]
            xs = np.array([max(h["min_ns"], 1), *(b for b, _ in h["buckets"])], dtype=float) / 1e6
            ys = np.clip(np.cumsum([0, *(c for _, c in h["buckets"])]) / n, 0.5 / n, 1 - 0.5 / n)
            ax.step(np.minimum(xs, h["max_ns"] / 1e6), ys, where="pre", label=f"{kind} ({n:,})")
        ax.set_xscale("log")
        ax.set_yscale("logit")
        ax.set_ylim(0.01, 0.9999)
        ticks = (0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999)
        ax.set_yticks(ticks, ["p1", "p10", "p50", "p90", "p99", "p99.9", "p99.99"])
        ax.yaxis.set_minor_locator(plt.NullLocator())
        for q in ticks:
            ax.axhline(q, color="#dddddd", linewidth=0.6, zorder=0)
        ax.set_xlabel("latency (ms)")
        ax.set_ylabel("share of calls at or below")
        ax.set_title({"save": "saves", "load": "loads", "outside": "outside the checkpoints"}[phase])
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"Latency of each kind of storage call, every process ({run.summary.num_processes} processes)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _shade(colour: str, factor: float) -> tuple[float, float, float]:
    from matplotlib.colors import to_rgb

    return tuple(c * factor for c in to_rgb(colour))  # type: ignore[return-value]


def requests_figure(run: Run, path: Path) -> None:
    """Object stores: requests per second of each kind at each checkpoint (left) and each kind's
    latency distribution over the run, p50 / p90 / p99 / max of the requests seen (right)."""
    checkpoints, seen = run.summary.checkpoints, run.summary.requests
    if checkpoints is None or seen is None or seen.during_checkpoints is None:  # write_report draws it only then
        raise ValueError(f"{run.path}: no requests were counted (not an object store)")
    plt = _pyplot()
    fig, (rate, latency) = plt.subplots(1, 2, figsize=(13, 4.5))
    ops = [(f"{phase}{c.index}", c.requests or {}) for phase in PHASE_COLOURS for c in checkpoints.phase(phase)]
    kinds = sorted({k for _, reqs in ops for k in reqs if not k.startswith("call: ")})
    for kind in kinds:
        rate.plot([name for name, _ in ops], [reqs[kind].per_second or 0.0 if kind in reqs else 0.0 for _, reqs in ops],
                  "o-", label=kind + (" (derived)" if any(kind in r and r[kind].derived for _, r in ops) else ""))
    rate.set_ylabel("requests per second")
    rate.set_xlabel("checkpoint")
    rate.legend(fontsize=7)
    during = seen.during_checkpoints
    timed = [k for k in sorted(during) if during[k].p50_ms is not None]
    for i, stat in enumerate(("p50_ms", "p90_ms", "p99_ms", "max_ms")):
        latency.bar([x + 0.2 * i for x in range(len(timed))], [getattr(during[k], stat) for k in timed], 0.2,
                    label=stat)
    latency.set_xticks([x + 0.3 for x in range(len(timed))], timed, rotation=20, ha="right", fontsize=7)
    latency.set_ylabel("latency (ms)")
    latency.set_yscale("log")
    latency.legend(fontsize=8)
    fig.suptitle("object-store requests (derived kinds: counted by the client's rule, no latency)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


DRAW = dict(zip(FIGURES, (throughput_figure, durations_figure, heatmap_figure, timeline_figure, requests_figure,
                          latency_figure), strict=True))


def write_report(path: str) -> list[Path]:
    """Every figure and ``report.html`` into the run folder; returns what was written."""
    run = load_run(path, need_stats=True)
    folder = run.folder
    assert folder is not None  # load_run names the folder it read
    written = []
    figures = {name: draw for name, draw in DRAW.items()
               if (draw is not requests_figure or run.summary.requests is not None)
               and (draw is not latency_figure or (folder / LATENCY_FILE).is_file())}
    for name, draw in figures.items():
        draw(run, folder / name)
        written.append(folder / name)
    page = folder / REPORT_FILES[-1]
    page.write_text(_html(run, written))
    return [*written, page]


def _checkpoint_folder(run: Run) -> Any:
    """Where the steps were: ``io.checkpoint_folder``, or for older runs the file system record's path or
    the config's key (DLIO's own runs: its config's)."""
    io, file_systems, config = run.summary.io, run.summary.file_systems, run.config or {}
    recorded = file_systems.checkpoint.path if file_systems is not None and file_systems.checkpoint else None
    return (io.checkpoint_folder if io is not None else None) or recorded or config.get("checkpoint.checkpoint_folder")


def _sizes(spread: Spread | None) -> str:
    """min / median / max of a per-rank spread (``io.restore``), in bytes shown as GiB or MiB."""
    return str(spread) if spread is None else _spread(spread, _bytes)


def _counts(spread: Spread | None) -> str:
    """min / median / max of a per-rank count (``io.restore``)."""
    return " / ".join(["None"] * 3) + " (min / median / max)" if spread is None else _spread(spread, str)


def _spread(spread: Spread, shown: Any) -> str:
    return " / ".join(shown(n) for n in (spread.min, spread.median, spread.max)) + " (min / median / max)"


def _bytes(n: Any) -> str:
    if not isinstance(n, int | float):
        return str(n)
    return f"{n / GIB:.3f} GiB" if n >= GIB / 10 else f"{n / MIB:.3f} MiB"


def restore_rows(run: Run) -> list[tuple[str, Any]]:
    """What the load did, for the page: its world size against the save's, whose reader it follows (and
    where that is not the framework's own load, the caveat), what it restored, needed and read, the spread
    over ranks and the heaviest; its duration first, as loads are judged by it."""
    r: RestoreFigures | None = run.summary.io.restore if run.summary.io is not None else None
    if r is None:
        return []
    m = run.metric
    loads = run.summary.checkpoints.load if run.summary.checkpoints is not None else []
    rows: list[tuple[str, Any]] = [
        ("load duration (mean, the slowest process's)", _number(m.load_checkpoint_duration_mean_seconds, "s")),
        ("load GiB/s (the checkpoint over the duration)", _number(m.load_checkpoint_io_mean_GiB_per_second)),
        ("load world size", f"{r.world_size} (saved at {r.saved_world_size}" + (": resharded)" if r.resharded
                                                                                else ")")),
        ("model only", r.model_only), ("follows", r.follows)]
    if r.caveat:
        rows.append(("caveat", r.caveat))
    rows += [("bytes restored / needed / read", " / ".join(_bytes(n) for n in (r.bytes_restored, r.bytes_needed,
                                                                               r.bytes_read))),
             ("read amplification", _number(r.read_amplification, digits=".3f")),
             ("bytes read per rank", _sizes(r.bytes_read_per_rank)),
             ("reads per rank", _counts(r.reads_per_rank)),
             ("files per rank (max)", r.files_per_rank.max if r.files_per_rank is not None else None),
             ("metadata read by every rank", _bytes(r.metadata_bytes_per_rank)),
             ("heaviest rank (its bytes read over the mean)", f"{r.heaviest_rank} "
                                                              f"({_number(r.imbalance, digits='.3f')}x)")]
    metadata = [c.metadata_read_seconds_max for c in loads if c.metadata_read_seconds_max is not None]
    if metadata:
        rows.append(("metadata read, slowest process (max over loads)", _number(max(metadata), "s")))
    return rows


def _number(v: Any, unit: str = "", digits: str = ".4g") -> str:
    return f"{v:{digits}}{' ' + unit if unit else ''}" if isinstance(v, int | float) else str(v)


def _table(rows: list[tuple[str, Any]]) -> str:
    return "<table>" + "\n".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
                                  for k, v in rows) + "</table>"


def _html(run: Run, images: list[Path]) -> str:
    s = run.summary
    sizes = [f"{phase} {size}" for phase, size in (("save", s.save_world_size), ("load", s.load_world_size))
             if size is not None]
    rows = [("workload", s.workload), ("mode", s.mode or "emulated"), ("status", s.status),
            ("processes / hosts", f"{processes(run)} / {s.num_hosts}"),
            ("ranks", ", ".join(sizes) or s.num_accelerators),
            ("layout", run.layout), ("format", s.io.format if s.io is not None else None),
            ("checkpoint folder", _checkpoint_folder(run)),
            ("storage", json.dumps(s.io.storage if s.io is not None else None)),
            ("start / end", f"{s.start} / {s.end}"), ("command", s.command)]
    rows += [(k, f"{v:.6g}" if isinstance(v, float) else v) for k, v in s.metric.figures().items()]
    table = _table(rows)
    restore = restore_rows(run)
    if restore:
        table += "\n<h2>load (restore)</h2>\n" + _table(restore)
    figures = "\n".join(
        f'<figure><img alt="{p.stem}" src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
        f"<figcaption>{p.name}</figcaption></figure>" for p in images)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>dlio_ckpt report: {html.escape(str(s.workload))}</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:2em auto}} table{{border-collapse:collapse}}
th,td{{border:1px solid #ccc;padding:2px 8px;text-align:left;font-size:13px}} img{{max-width:100%}}
figure{{margin:1.5em 0}}</style></head>
<body><h1>dlio_ckpt report</h1><p>{html.escape(str(run.folder))}</p>
{table}
{figures}
</body></html>
"""
