#!/usr/bin/env python3
"""Four pretend hosts on this machine (``workload.hosts.simulate=4``, one process each): checkpoints
saved synchronously to shared storage, against saved asynchronously to each host's node tier,
replicated to a peer (ring, one replica, over MPI) and drained to S3 (SeaweedFS on 127.0.0.1); then a
restore that loses host 2, its part got back from its peer, against the same restore reading that
part from S3.

What it prints (medians over checkpoints and rounds): the time training was held per checkpoint; the
time from a checkpoint's start until it was durable on each tier; the restore's duration (slowest
process) and the lost host's own load time, per source. Each round runs the two saves in rotated
order; the restore from S3 is a read-only run over the async run's checkpoints with the peer tier left
out of the tier list, so the lost host's part can only come from S3. Node, peer and shared folders
are on one disk here, and the four hosts share two cores: the figures compare the paths, not a cluster.

    python bench/hosts.py --mib 512 --checkpoints 3 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).parent))
from tiers import run as run_on  # noqa: E402

from tests.servers import seaweedfs  # noqa: E402

WORKLOAD = "llama_7b_zero3"
FULL_BYTES = 11_792_473_088 * 8  # llama_7b_zero3's checkpoint at scale 1 (spec example)
HOSTS = 4


def run(name: str, folder: Path, args: list[str], env: dict[str, str]) -> dict:
    return run_on(name, folder, HOSTS, args, env)


def saves(summary: dict) -> dict[str, float]:
    held, durable = [], {}
    for c in summary["checkpoints"]["save"]:
        held.append(c["async"]["held_seconds_max"] if "async" in c else c["duration_seconds"])
        for t in c.get("tiers", [{"tier": 0, "durable_seconds": c["duration_seconds"]}]):
            durable.setdefault(t["tier"], []).append(t["durable_seconds"])
    return {"held": statistics.median(held), **{f"durable{k}": statistics.median(v) for k, v in durable.items()}}


def restore(summary: dict) -> dict[str, float]:
    out = {"load": statistics.median(c["duration_seconds"] for c in summary["checkpoints"]["load"])}
    for s in summary.get("restore_sources", []):
        out["lost host" if "simhost2" in s["hosts"] else "others, own copy"] = s["seconds"] / \
            len(summary["checkpoints"]["load"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=512, help="checkpoint size, all hosts (MiB)")
    ap.add_argument("--checkpoints", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval", type=float, default=2.0, help="training seconds between checkpoints")
    a = ap.parse_args()
    scale = a.mib * (1 << 20) / FULL_BYTES
    common = [f"workload={WORKLOAD}", "--world-size", "8", f"++workload.checkpoint.scale={scale}",
              f"++workload.hosts.simulate={HOSTS}", "++workload.checkpoint.checkpoint_folder=ck",
              "++workload.checkpoint.fsync=True", f"++workload.checkpoint.time_between_checkpoints={a.interval}"]
    rows: dict[str, list[dict[str, float]]] = {"sync, shared": [], "async, node + peer + S3": [],
                                               "restore from the peer": [], "restore from S3": []}
    with seaweedfs() as server, tempfile.TemporaryDirectory(prefix="bench_hosts_", dir=REPO) as tmp:
        def s3(prefix: str) -> str:
            return (f"storage_type: s3, storage_root: '{server.bucket}/{prefix}', "
                    f"storage_options: {{endpoint_url: '{server.endpoint}', threads: 2}}")
        for r in range(a.rounds):
            folder = Path(tmp) / f"round{r}"
            folder.mkdir()
            prefix = f"hosts-{time.time_ns()}"
            tiered = [*common, "++workload.storage.storage_root=node", "++workload.storage.scope=node",
                      "++workload.checkpoint.async_save=True", "++workload.restore.lost_hosts=[2]",
                      f"++workload.checkpoint.num_checkpoints_write={a.checkpoints}",
                      "++workload.checkpoint.num_checkpoints_read=1",
                      "++workload.tiers=[{storage_type: local_fs, storage_root: peer, scope: peer}, "
                      f"{{{s3(prefix)}}}]"]
            shared = [*common, "++workload.storage.storage_root=shared",
                      f"++workload.checkpoint.num_checkpoints_write={a.checkpoints}",
                      "++workload.checkpoint.num_checkpoints_read=1"]
            order = [("sync, shared", shared), ("async, node + peer + S3", tiered)]
            for name, args in (order if r % 2 == 0 else order[::-1]):
                summary = run(name.split(",")[0], folder, args, server.env)
                rows[name].append(saves(summary))
                if name.startswith("async"):
                    rows["restore from the peer"].append(restore(summary))
            from_s3 = [*common, "++workload.storage.storage_root=node", "++workload.storage.scope=node",
                       "++workload.restore.lost_hosts=[2]", "++workload.checkpoint.num_checkpoints_write=0",
                       "++workload.checkpoint.num_checkpoints_read=1",
                       f"++workload.tiers=[{{{s3(prefix)}}}]"]
            rows["restore from S3"].append(restore(run("from_s3", folder, from_s3, server.env)))
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    print(f"machine: {platform.node()} ({os.cpu_count()} cores), {a.rounds} rounds, {WORKLOAD} at {a.mib} MiB per "
          f"checkpoint over {HOSTS} pretend hosts (8 ranks on {HOSTS} processes), {a.checkpoints} checkpoints, "
          f"interval {a.interval:g} s, fsync on")
    for name, got in rows.items():
        med = {k: statistics.median(x[k] for x in got) for k in got[0]}
        print(f"{name:26} " + "  ".join(f"{k} {v:.3f} s" for k, v in med.items()))


if __name__ == "__main__":
    main()
