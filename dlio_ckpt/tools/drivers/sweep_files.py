"""What a sweep writes in its folder as its points end: ``sweep.csv`` and ``sweep.json`` (a row per point, the best
point of each phase, the projection across scales where ``checkpoint.scale`` is swept), its figures at the end, and
a short line per point for the log.

Why rows from each point's own ``summary.json``: a point is an ordinary run, so the table, ``diff``,
``report`` and ``check`` all read the same figures (:mod:`dlio_ckpt.tools.readers.sweeps`).
"""

from __future__ import annotations

import csv
import json
import os
from typing import Any

from dlio_ckpt.results.projection import ScalePoint, across_scales, said
from dlio_ckpt.tools.readers.sweeps import PHASES, best, draw

COLUMNS = ("status", "save_GiB_per_s", "save_GB_per_s", "save_seconds", "save_slowest_process", "load_GiB_per_s",
           "load_GB_per_s", "load_seconds", "load_slowest_process", "load_read_amplification", "checkpoint_GiB",
           "peak_rss_MiB", "retries", "reason", "run_dir")


def write_sweep_files(sweep_dir: str, points: Any, rows: list[dict[str, Any]], figures: bool = False) -> str:
    """sweep.csv and sweep.json as they stand (after each point), figures at the end; returns the
    newest row as a short line for the log."""
    keys = list(points[0].values)
    with open(os.path.join(sweep_dir, "sweep.csv"), "w", newline="") as fh:
        writer = csv.DictWriter(fh, ["point", *keys, *COLUMNS], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    path = os.path.join(sweep_dir, "sweep.json")
    with open(path) as fh:
        body = json.load(fh)
    body["points"] = rows
    body["best"] = {phase: best(rows, phase) for phase in PHASES}
    body["projection"] = projections(keys, rows)
    with open(path, "w") as fh:
        json.dump(body, fh, indent=2)
    if figures and any(r["status"] == "ok" for r in rows):
        draw(sweep_dir, keys, rows)
    return short_line(keys, rows[-1])


SCALE_KEY = "checkpoint.scale"


def projections(keys: list[str], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Where ``checkpoint.scale`` is swept: for each combination of the other keys run at two or more
    scales, each phase's full-size time fitted across them over the bytes it moved (a save: what it wrote, to
    the full size's bytes per checkpoint; a load: what it read, to what the layout's restore reads at full
    size), by :func:`dlio_ckpt.results.projection.across_scales`, with ``lines`` to print. Points of one
    combination that stand for different full sizes are not mixed."""
    if SCALE_KEY not in keys:
        return []
    others = [k for k in keys if k != SCALE_KEY]
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        if r["status"] == "ok" and "full_size_bytes" in r:
            groups.setdefault((*(r[k] for k in others), r["full_size_bytes"]), []).append(r)
    out = []
    for group, members in groups.items():
        full = {"save": group[-1], "load": members[0].get("full_size_load_bytes")}
        fits = [fit for phase in PHASES if full[phase] and (fit := across_scales(
            phase, [ScalePoint(float(r[SCALE_KEY]), r[f"{phase}_bytes"], r[f"{phase}_seconds"],
                               r.get(f"{phase}_cpu_bound", False)) for r in members if f"{phase}_bytes" in r],
            full[phase])) is not None]
        if fits:
            label = " ".join(f"{k}={v}" for k, v in zip(others, group, strict=False))
            out.append({"points_with": dict(zip(others, group, strict=False)),
                        **{fit.phase: fit.as_dict() for fit in fits},
                        "lines": [f"{label + ': ' if label else ''}{said(fit)}" for fit in fits]})
    return out


def short_line(keys: list[str], row: dict[str, Any]) -> str:
    label = " ".join(f"{k}={row[k]}" for k in keys)
    if row["status"] != "ok":
        return f"point {row['point']} [{label}]: FAILED: {row['reason'].splitlines()[0][:300]}"
    said = [f"save {row['save_GiB_per_s']:.3f} GiB/s"] if "save_GiB_per_s" in row else []
    if "load_GiB_per_s" in row:  # a load by its duration first: what the sweep judges it by
        said.append(f"load {row['load_seconds']:.3f} s ({row['load_GiB_per_s']:.3f} GiB/s of the checkpoint)")
    figures = ", ".join(said)
    return f"point {row['point']} [{label}]: {figures}, peak RSS {row['peak_rss_MiB']:.0f} MiB"
