#!/usr/bin/env python3
"""Does a scaled run's projection hold? (issue 51, items 1 and 6.) For each layout, llama3_70b at 64 ranks on
``--procs`` processes with the framework's I/O pattern, one save and one load a run
(``--checkpoints``: more, their means):

- a sweep over ``checkpoint.scale`` (``--scales``, e.g. 0.0002, 0.001, 0.005) in each of ``--rounds`` rounds,
  the layouts' order rotated between rounds (disks and page caches drift); each point's mean save and load
  duration, bytes moved and busiest process's CPU share (``checkpoints[].cpu``), medians over the rounds;
- from those medians: each scale's one-run projection (``io.scaled.projected_full_size``: the time moving the
  ranks' files over the bytes ratio, the rest as measured), and the sweep's projection across scales
  (:func:`dlio_ckpt.results.projection.across_scales`) from the two smallest scales, from the two largest, and
  from all of them;
- the largest run this disk holds (``--large``, once per layout, after the rounds): its measured save and load
  beside what each projection foretells for its bytes (a projection's fit taken to that run's bytes moved, the
  one-run rule to its bytes ratio), the test a projection can be put to here.

    python bench/miniature.py --dir /path/on/disk --rounds 3 --markdown /tmp/miniature.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dlio_ckpt.results.projection import GIB, ScalePoint, across_scales  # noqa: E402

BIN = Path(sys.executable).parent
ENV = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
LAYOUTS = {  # llama3_70b's own parallelism (TP 8, ZeRO 3) where the layout models it; DCP's FSDP2 over all ranks
    "dcp": ["++workload.checkpoint.layout=dcp", "++workload.model.parallelism.tensor=1",
            "++workload.model.parallelism.pipeline=1"],
    "megatron": ["++workload.checkpoint.layout=megatron"],
    "deepspeed": ["++workload.checkpoint.layout=deepspeed"],
}
SAMPLE = "-sample"  # a layout's name with it: checkpoint.miniature=sample, a sample of the items whole
PHASES = ("save", "load")


def job(a: argparse.Namespace, layout: str, folder: Path) -> tuple[list[str], list[str]]:
    sample = ["++workload.checkpoint.miniature=sample"] if layout.endswith(SAMPLE) else []
    return [str(BIN / "mpiexec"), "-n", str(a.procs), sys.executable, "-m", "dlio_ckpt"], [
        "workload=llama3_70b", "--world-size", str(a.world), *LAYOUTS[layout.removesuffix(SAMPLE)], *sample,
        f"++workload.checkpoint.num_checkpoints_write={a.checkpoints}",
        f"++workload.checkpoint.num_checkpoints_read={a.checkpoints}",
        f"++workload.checkpoint.checkpoint_folder={folder / 'ck'}"]


def figures(summary: dict[str, Any]) -> dict[str, Any]:
    """A run's mean save and load: seconds, bytes moved, the busiest process's CPU share, and what it stands for."""
    out: dict[str, Any] = {"bytes_ratio": summary["io"]["scaled"]["bytes_ratio"],
                           "load_bytes_ratio": summary["io"]["scaled"]["load_bytes_ratio"],
                           "projected": summary["io"]["scaled"]["projected_full_size"],
                           "full_size_bytes": summary["io"]["scaled"]["full_size"]["bytes_per_checkpoint"],
                           "full_size_load_bytes": summary["io"]["scaled"]["full_size_load_bytes_read"]}
    for phase in PHASES:
        cks = summary["checkpoints"][phase]
        out[phase] = {"seconds": statistics.mean(c["duration_seconds"] for c in cks),
                      "bytes": statistics.mean(c["bytes"] for c in cks),
                      "busy": max(c["cpu"]["busiest_process_busy"] for c in cks),
                      "cpu_bound": any(c["cpu"]["bound"] for c in cks)}
    return out


LOADS: list[float] = []  # the machine's 1-minute load average before each run: other work shares the cores


def sweep(a: argparse.Namespace, layout: str, rnd: int) -> dict[str, dict[str, Any]]:
    LOADS.append(os.getloadavg()[0])
    folder = Path(a.dir) / f"{layout}-r{rnd}"
    shutil.rmtree(folder, ignore_errors=True)
    launch, args = job(a, layout, folder)
    cmd = [*launch, "sweep", *args, f"++workload.checkpoint.scale={','.join(a.scales)}",
           f"++hydra.sweep.dir={folder / 'sweep'}"]
    subprocess.run(cmd, check=True, env=ENV, cwd=a.dir, stdout=subprocess.DEVNULL)
    body = json.loads((folder / "sweep" / "sweep.json").read_text())
    out = {row["checkpoint.scale"]: figures(json.loads((Path(row["run_dir"]) / "summary.json").read_text()))
           for row in body["points"]}
    shutil.rmtree(folder / "ck", ignore_errors=True)
    return out


def large(a: argparse.Namespace, layout: str) -> dict[str, Any]:
    LOADS.append(os.getloadavg()[0])
    folder = Path(a.dir) / f"{layout}-large"
    shutil.rmtree(folder, ignore_errors=True)
    launch, args = job(a, layout, folder)
    subprocess.run([*launch, *args, f"++workload.checkpoint.scale={a.large}", f"++hydra.run.dir={folder / 'run'}"],
                   check=True, env=ENV, cwd=a.dir, stdout=subprocess.DEVNULL)
    shutil.rmtree(folder / "ck", ignore_errors=True)
    return figures(json.loads((folder / "run" / "summary.json").read_text()))


def median_points(rounds: list[dict[str, dict[str, Any]]], scales: list[str], phase: str) -> list[ScalePoint]:
    return [ScalePoint(float(s), statistics.median(r[s][phase]["bytes"] for r in rounds),
                       statistics.median(r[s][phase]["seconds"] for r in rounds),
                       any(r[s][phase]["cpu_bound"] for r in rounds)) for s in scales]


def report(a: argparse.Namespace, results: dict[str, Any]) -> str:
    lines = [f"- {time.strftime('%Y-%m-%d %H:%M')} on {platform.node()} ({os.cpu_count()} cores, "
             f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / GIB:.0f} GiB), Python "
             f"{platform.python_version()}; {a.rounds} rounds; medians; the 1-minute load average before each run: "
             f"{min(LOADS):.1f} to {max(LOADS):.1f} (other work on the machine's 2 cores above 0)",
             f"- `{' '.join(['python', *sys.argv])}`", ""]
    for layout, res in results.items():
        rounds, big = res["rounds"], res.get("large")
        lines += [f"### {layout}", "", "| phase | scale | bytes moved | seconds (median) | busiest CPU | one-run "
                  "projection, s |", "|---|---|---|---|---|---|"]
        for phase in PHASES:
            for s in a.scales:
                runs = [r[s] for r in rounds]
                busy = statistics.median(r[phase]["busy"] for r in runs)
                seconds = statistics.median(r[phase]["seconds"] for r in runs)
                one = statistics.median(r["projected"][f"{phase}_seconds"] for r in runs)
                lines.append(f"| {phase} | {s} | {statistics.median(r[phase]['bytes'] for r in runs) / 2**20:,.0f} "
                             f"MiB | {seconds:.2f} | {busy:.0%} | {one:,.0f} |")
        lines += ["", "| phase | projected from scales | fixed s | s per GiB | full size, s | foretold at "
                  f"{a.large}, s | measured at {a.large}, s | foretold / measured |",
                  "|---|---|---|---|---|---|---|---|"]
        for phase in PHASES:
            points = median_points(rounds, a.scales, phase)
            full = rounds[0][a.scales[0]]["full_size_bytes" if phase == "save" else "full_size_load_bytes"]
            for chosen in list({tuple(c): c for c in (points[:2], points[-2:], points)}.values()):
                fit = across_scales(phase, chosen, full)
                if fit is None:
                    continue
                foretold = fit.fixed_seconds + fit.seconds_per_GiB * big[phase]["bytes"] / GIB if big else None
                measured = big[phase]["seconds"] if big else None
                lines.append(f"| {phase} | {', '.join(f'{p.scale:g}' for p in chosen)} | {fit.fixed_seconds:.2f} | "
                             f"{fit.seconds_per_GiB:.3f} | "
                             + (f"{fit.projected_seconds:,.0f}" if fit.projected_seconds else "not projected")
                             + (f" | {foretold:,.1f} | {measured:,.1f} | {foretold / measured:.2f} |" if big
                                else " | | | |"))
            if big:  # the one-run projection from the smallest scale, taken back to the large run's bytes
                ratio = "bytes_ratio" if phase == "save" else "load_bytes_ratio"
                one = statistics.median(r[a.scales[0]]["projected"][f"{phase}_seconds"] for r in rounds) * big[ratio]
                lines.append(f"| {phase} | one run at {a.scales[0]} (its projection, all of it x the large run's ratio)"
                             " | | | "
                             f"| {one:,.1f} | {big[phase]['seconds']:,.1f} | {one / big[phase]['seconds']:.2f} |")
        if big:
            lines += ["", f"The run at {a.large}: save {big['save']['seconds']:.1f} s "
                      f"({big['save']['bytes'] / GIB:.1f} GiB moved, busiest CPU {big['save']['busy']:.0%}), load "
                      f"{big['load']['seconds']:.1f} s ({big['load']['bytes'] / GIB:.1f} GiB, busiest CPU "
                      f"{big['load']['busy']:.0%})."]
        lines.append("")
    lo, hi = a.scales[0], a.scales[-1]
    lines += [f"### One run's projection from scale {lo} against one from {hi}", "",
              f"| layout | phase | projected from {lo}, s | from {hi}, s | ratio | within 20 % | the run at {a.large}, "
              "projected, s |", "|---|---|---|---|---|---|---|"]
    for layout, res in results.items():
        for phase in PHASES:
            one = {s: statistics.median(r[s]["projected"][f"{phase}_seconds"] for r in res["rounds"]) for s in (lo, hi)}
            big = res.get("large")
            lines.append(f"| {layout} | {phase} | {one[lo]:,.0f} | {one[hi]:,.0f} | {one[lo] / one[hi]:.2f} | "
                         f"{'yes' if abs(one[lo] / one[hi] - 1) <= 0.2 else 'no'} | "
                         + (f"{big['projected'][f'{phase}_seconds']:,.0f} |" if big else "|"))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", required=True, help="a folder on the storage measured (removed files only ours)")
    p.add_argument("--layouts", default="dcp,dcp-sample,megatron,megatron-sample,deepspeed",
                   help=f"of {', '.join(LAYOUTS)}; '{SAMPLE}' after dcp or megatron: checkpoint.miniature=sample")
    p.add_argument("--scales", default="0.0002,0.001,0.005")
    p.add_argument("--large", default="0.05", help="the largest scale this disk holds (0 or '': none)")
    p.add_argument("--large-layouts", help="the layouts run at --large (default: every one)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--checkpoints", type=int, default=1,
                   help="saves and loads a run (its projection, figures and seconds: their mean)")
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--world", type=int, default=64)
    p.add_argument("--markdown", help="write the report here too")
    p.add_argument("--json", help="write every figure here")
    a = p.parse_args()
    a.scales = a.scales.split(",")
    layouts = a.layouts.split(",")
    os.makedirs(a.dir, exist_ok=True)
    results: dict[str, Any] = {layout: {"rounds": []} for layout in layouts}
    for rnd in range(a.rounds):
        for layout in layouts[rnd % len(layouts):] + layouts[:rnd % len(layouts)]:
            results[layout]["rounds"].append(sweep(a, layout, rnd))
            print(f"round {rnd + 1}: {layout} done", flush=True)
    if a.large and float(a.large) > 0:
        for layout in (a.large_layouts or a.layouts).split(","):
            results[layout]["large"] = large(a, layout)
            print(f"large: {layout} done", flush=True)
    text = report(a, results)
    print(text)
    if a.markdown:
        Path(a.markdown).write_text(text + "\n")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
