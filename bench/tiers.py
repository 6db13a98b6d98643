#!/usr/bin/env python3
"""Sync against async against async + two tiers (a local folder, then S3 on SeaweedFS), on the same
workload and disk, with a training interval long enough for the background write and one too short.

What it prints, per configuration (medians over checkpoints and rounds): the time training was held
per checkpoint (a sync save holds it for the whole save), how long of that was waiting for the
previous background write (stalled), the time until the checkpoint was durable on the first tier and
on S3, and held as a fraction of the synchronous save. Rounds run the configurations in rotated
order, so no configuration always runs first on a cold disk.

    python bench/tiers.py --procs 2 --mib 512 --checkpoints 4 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.servers import seaweedfs  # noqa: E402

BIN = Path(sys.executable).parent
WORKLOAD = "llama_7b_zero3"
FULL_BYTES = 11_792_473_088 * 8  # llama_7b_zero3's checkpoint at scale 1 (spec example)


def run(name: str, folder: Path, procs: int, args: list[str], env: dict[str, str]) -> dict:
    cmd = [str(BIN / "mpiexec"), "-n", str(procs), sys.executable, "-m", "dlio_ckpt", *args,
           f"++hydra.run.dir={name}", "++workload.checkpoint.progress=False"]
    r = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, env={**os.environ, **env}, timeout=1800)
    if r.returncode:
        raise SystemExit(f"{name} failed:\n{r.stderr[-3000:]}")
    return json.loads((folder / name / "summary.json").read_text())


def figures(summary: dict) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"held": [], "stalled": [], "durable0": [], "durable1": [], "save": []}
    for c in summary["checkpoints"]["save"]:
        out["save"].append(c["duration_seconds"])
        out["held"].append(c["async"]["held_seconds_max"] if "async" in c else c["duration_seconds"])
        out["stalled"].append(c["async"]["stalled_seconds_max"] if "async" in c else 0.0)
        tiers = c.get("tiers", [{"durable_seconds": c["duration_seconds"]}])
        out["durable0"].append(tiers[0]["durable_seconds"])
        if len(tiers) > 1:
            out["durable1"].append(tiers[1]["durable_seconds"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--mib", type=int, default=512, help="checkpoint size, all processes (MiB)")
    ap.add_argument("--checkpoints", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--long", type=float, default=None, help="the long interval (s); default 3x the sync save")
    ap.add_argument("--json", type=Path, default=None, help="also write every figure here")
    a = ap.parse_args()
    scale = a.mib * (1 << 20) / FULL_BYTES
    base = [f"workload={WORKLOAD}", "--world-size", str(a.procs), f"++workload.checkpoint.scale={scale}",
            f"++workload.checkpoint.num_checkpoints_write={a.checkpoints}",
            "++workload.checkpoint.num_checkpoints_read=0", "++workload.checkpoint.fsync=True",
            "++workload.storage.storage_root=local"]
    folder = Path(tempfile.mkdtemp(prefix="dlio_ckpt_tiers_"))
    results: dict[str, dict[str, list[float]]] = {}
    try:
        with seaweedfs() as server:
            tier = (f"++workload.tiers=[{{storage_type: s3, storage_root: '{server.bucket}/bench', "
                    f"storage_options: {{endpoint_url: '{server.endpoint}', threads: 4}}}}]")
            sync_probe = run("probe", folder, a.procs, [*base, "++workload.checkpoint.time_between_checkpoints=0",
                                                         "++workload.checkpoint.checkpoint_folder=probe"], server.env)
            long = a.long or round(3 * statistics.median(figures(sync_probe)["save"]), 1)
            configs = {
                f"sync, interval {long:g} s": [f"++workload.checkpoint.time_between_checkpoints={long}"],
                f"async, interval {long:g} s": ["++workload.checkpoint.async_save=True",
                                                f"++workload.checkpoint.time_between_checkpoints={long}"],
                "async, interval 0 s": ["++workload.checkpoint.async_save=True",
                                        "++workload.checkpoint.time_between_checkpoints=0"],
                f"async + S3 tier, interval {long:g} s": ["++workload.checkpoint.async_save=True", tier,
                                                         f"++workload.checkpoint.time_between_checkpoints={long}"],
                "async + S3 tier, interval 0 s": ["++workload.checkpoint.async_save=True", tier,
                                                  "++workload.checkpoint.time_between_checkpoints=0"],
            }
            names = list(configs)
            for r in range(a.rounds):
                for name in names[r % len(names):] + names[:r % len(names)]:
                    tag = f"r{r}c{names.index(name)}"
                    args = [*base, *configs[name], f"++workload.checkpoint.checkpoint_folder={tag}"]
                    s = run(tag, folder, a.procs, args, server.env)
                    for key, values in figures(s).items():
                        results.setdefault(name, {}).setdefault(key, []).extend(values)
                    shutil.rmtree(folder / "local" / tag, ignore_errors=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    sync_save = statistics.median(results[names[0]]["save"])
    print(f"{WORKLOAD} at {a.mib} MiB per checkpoint, {a.procs} processes, {a.checkpoints} checkpoints x "
          f"{a.rounds} rounds, fsync on; medians over checkpoints (first tier: local folder; S3: SeaweedFS)")
    print(f"{'configuration':34} {'held s':>8} {'held/sync':>9} {'stalled s':>9} {'durable s':>9} {'on S3 s':>8}")
    for name in names:
        f = results[name]
        on_s3 = f"{statistics.median(f['durable1']):8.3f}" if f["durable1"] else f"{'-':>8}"
        held = statistics.median(f["held"])
        print(f"{name:34} {held:8.3f} {held / sync_save:9.3f} {statistics.median(f['stalled']):9.3f} "
              f"{statistics.median(f['durable0']):9.3f} {on_s3}")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
