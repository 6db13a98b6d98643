"""A sweep's folder read back: ``sweep.json`` (a row per point, written by :mod:`dlio_ckpt.tools.drivers.sweep_files`),
the best point of each phase, figures a person reads at a glance (throughput against the swept key with a line per
value of a second key; a heat map for two keys), and the rows ``diff`` of two sweeps matches point by point.

Why rows from each point's own ``summary.json``: a point is an ordinary run, so the table, ``diff``,
``report`` and ``check`` all read the same figures.

Why loads are judged by their duration (the least is best, drawn in seconds) and saves by GiB/s: a load is
what a restart waits for, and points may restore different bytes (a layout, ``restore.model_only``, the
scale swept); a rate once rewarded the load that read most (a Megatron load reading 8 times the checkpoint
was starred best). A save's rate is the storage's figure over the bytes it was given, as DLIO reports it.
"""

from __future__ import annotations

import json
import os
from typing import Any

from dlio_ckpt.errors import ConfigError

PHASES = ("save", "load")
# what a phase is judged by in a sweep: (the row's column, whether more is better, its unit)
JUDGED_BY = {"save": ("save_GiB_per_s", True, "GiB/s"), "load": ("load_seconds", False, "s")}


def figure(row: dict[str, Any], phase: str) -> float:
    """A point's figure for ``phase``, as the sweep judges it (:data:`JUDGED_BY`)."""
    return row[JUDGED_BY[phase][0]]


def better(a: float, b: float, phase: str) -> float:
    """The better of two figures of ``phase``."""
    return max(a, b) if JUDGED_BY[phase][1] else min(a, b)


def best(rows: list[dict[str, Any]], phase: str) -> dict[str, Any] | None:
    """The best point of ``phase``: the save of most GiB/s, the load of least seconds (:data:`JUDGED_BY`)."""
    ok = [r for r in rows if r["status"] == "ok" and f"{phase}_GiB_per_s" in r]
    if not ok:
        return None
    return (max if JUDGED_BY[phase][1] else min)(ok, key=lambda r: figure(r, phase))


def _order(values: list[str]) -> list[str]:
    """Numbers by value, anything else as first seen."""
    distinct = list(dict.fromkeys(values))
    try:
        return sorted(distinct, key=float)
    except ValueError:
        return distinct


def draw(sweep_dir: str, keys: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """``sweep.png`` (each phase's figure against the first key, a line per value of the second: save GiB/s,
    load seconds) and, with two or more keys, ``sweep_heatmap.png`` (best over any further keys); returns their
    paths."""
    from dlio_ckpt.tools.readers.report import _pyplot

    plt = _pyplot()
    ok = [r for r in rows if r["status"] == "ok"]
    phases = [p for p in PHASES if any(f"{p}_GiB_per_s" in r for r in ok)]
    x_key, line_key = keys[0], keys[1] if len(keys) > 1 else None
    xs = _order([str(r[x_key]) for r in ok])
    lines = _order([str(r[line_key]) for r in ok]) if line_key else [""]
    fig, axes = plt.subplots(1, len(phases), figsize=(6.5 * len(phases), 4.5), squeeze=False)
    for ax, phase in zip(axes[0], phases, strict=True):
        for value in lines:
            pts = [(xs.index(str(r[x_key])), figure(r, phase)) for r in ok
                   if f"{phase}_GiB_per_s" in r and (not line_key or str(r[line_key]) == value)]
            by_x: dict[int, float] = {}
            for x, y in pts:  # further keys: the best of them at each x
                by_x[x] = better(y, by_x[x], phase) if x in by_x else y
            ax.plot(sorted(by_x), [by_x[x] for x in sorted(by_x)], "o-",
                    label=f"{line_key}={value}" if line_key else None)
        top, unit = best(ok, phase), JUDGED_BY[phase][2]
        assert top is not None  # phases holds only those with an ok row that has the phase's figure
        ax.plot([xs.index(str(top[x_key]))], [figure(top, phase)], "*", markersize=16, color="gold",
                markeredgecolor="black", zorder=5)
        ax.set_title(f"{phase}: best {figure(top, phase):.3f} {unit} at\n"
                     + ", ".join(f"{k}={top[k]}" for k in keys), fontsize=10)
        ax.set_xticks(range(len(xs)), xs, rotation=30 if max(map(len, xs)) > 6 else 0)
        ax.set_xlabel(x_key)
        ax.set_ylabel(f"{phase} {unit} (mean over checkpoints; " + ("more" if JUDGED_BY[phase][1] else "less")
                      + " is better)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if line_key:
            ax.legend(fontsize=8)
    fig.tight_layout()
    paths = [os.path.join(sweep_dir, "sweep.png")]
    fig.savefig(paths[0], dpi=110)
    plt.close(fig)
    if line_key:
        paths.append(_heatmap(plt, sweep_dir, keys, ok, phases, xs, lines))
    return paths


def _heatmap(plt: Any, sweep_dir: str, keys: list[str], ok: list[dict[str, Any]], phases: list[str],
             xs: list[str], ys: list[str]) -> str:
    fig, axes = plt.subplots(1, len(phases), figsize=(1.2 * len(xs) * len(phases) + 3, 0.6 * len(ys) + 2.5),
                             squeeze=False)
    for ax, phase in zip(axes[0], phases, strict=True):
        cells: list[list[float | None]] = [[None] * len(xs) for _ in ys]
        for r in ok:
            if f"{phase}_GiB_per_s" not in r:
                continue
            i, j, v = ys.index(str(r[keys[1]])), xs.index(str(r[keys[0]])), figure(r, phase)
            cell = cells[i][j]
            cells[i][j] = v if cell is None else better(v, cell, phase)
        seen = [v for row in cells for v in row if v is not None]
        high, low = max(seen), min(seen)
        top = high if JUDGED_BY[phase][1] else low
        cmap = "viridis" if JUDGED_BY[phase][1] else "viridis_r"  # bright: better, either way
        image = ax.imshow([[float("nan") if v is None else v for v in row] for row in cells], cmap=cmap,
                          aspect="auto", origin="lower")
        for i, row in enumerate(cells):
            for j, shown in enumerate(row):  # dark text on the bright (better) end of the map, light on the dark end
                if shown is None:
                    continue
                bright = high > low and abs(shown - (low if JUDGED_BY[phase][1] else high)) / (high - low) > 0.5
                ax.text(j, i, f"{shown:.2f}" + (" *" if shown == top else ""), ha="center", va="center", fontsize=8,
                        color="black" if bright else "white")
        ax.set_xticks(range(len(xs)), xs)
        ax.set_yticks(range(len(ys)), ys)
        ax.set_xlabel(keys[0])
        ax.set_ylabel(keys[1])
        ax.set_title(f"{phase} {JUDGED_BY[phase][2]} (* best)", fontsize=10)
        fig.colorbar(image, ax=ax)
    fig.tight_layout()
    path = os.path.join(sweep_dir, "sweep_heatmap.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def is_sweep(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "sweep.json"))


def load_sweep(path: str) -> dict[str, Any]:
    try:
        with open(os.path.join(path, "sweep.json")) as fh:
            return json.load(fh)
    except (OSError, ValueError) as exc:
        raise ConfigError("SWEEP", path, f"has no readable sweep.json ({exc})") from None


def point_key(row: dict[str, Any], keys: list[str]) -> tuple[str, ...]:
    return tuple(f"{k}={row.get(k)}" for k in keys)
