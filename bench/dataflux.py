#!/usr/bin/env python3
"""Lightning checkpoints on GCS through fsspec (gcsfs) against Dataflux (DatafluxLightningCheckpoint), the
comparison of the Dataflux Lightning checkpoint benchmark, on fake-gcs-server here.

Each round is one sweep (the command a user runs) of ``lightning.checkpoint_io=torch,dataflux`` in
``.venv-dataflux`` (scripts/setup.sh makes it), the order of the two alternating between rounds; same
model (the demo transformer, ``--layers``), same bucket. Reported: each side's median over rounds of its
median save and load throughput, and the ratio Dataflux / fsspec taken round by round (median and
quartiles). Dataflux runs with ``dataflux_multipart=false``: its multipart upload speaks GCS's XML API,
which fake-gcs-server does not serve. Figures describe a local emulator sharing this machine's cores
with the client, not a cloud bucket.

    python bench/dataflux.py --rounds 5 --layers 10 --checkpoints 3
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).parent))
from fio_compare import quartiles  # noqa: E402

from tests.servers import fake_gcs  # noqa: E402

PYTHON = REPO / ".venv-dataflux" / "bin" / "python"
SIDES = ("torch", "dataflux")


def sweep(server, order: tuple[str, ...], layers: int, checkpoints: int, folder: Path) -> dict[str, dict]:
    """One sweep of both sides; each side's median save and load GiB/s."""
    out = folder / f"sweep{time.monotonic_ns()}"
    cmd = [str(PYTHON), "-m", "dlio_ckpt", "sweep", "workload=lightning_demo", f"++workload.model.num_layers={layers}",
           f"++workload.checkpoint.num_checkpoints_write={checkpoints}",
           f"++workload.checkpoint.num_checkpoints_read={checkpoints}",
           "++workload.storage.storage_type=gcs",
           f"++workload.storage.storage_root={server.bucket}/bench{time.time_ns()}",
           f"++workload.storage.storage_options.endpoint_url={server.endpoint}",
           f"++workload.lightning.checkpoint_io={','.join(order)}", "++workload.lightning.dataflux_multipart=false",
           f"++hydra.sweep.dir={out}"]
    subprocess.run(cmd, check=True, capture_output=True, cwd=folder, env={**os.environ, **server.env})
    with open(out / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    result = {}
    for row in rows:
        s = json.loads((out / row["point"] / "summary.json").read_text())
        result[row["lightning.checkpoint_io"]] = {
            phase: statistics.median(c["throughput_GiB_per_second"] for c in s["checkpoints"][phase])
            for phase in ("save", "load")} | {"bytes": s["checkpoints"]["save"][0]["bytes"]}
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--checkpoints", type=int, default=3)
    a = ap.parse_args()
    if not PYTHON.exists():
        sys.exit(f"{PYTHON} is missing: bash scripts/setup.sh makes it")
    rounds = []
    with fake_gcs() as server, tempfile.TemporaryDirectory(prefix="bench_dataflux_") as folder:
        for r in range(a.rounds):
            order = SIDES if r % 2 == 0 else SIDES[::-1]
            rounds.append(sweep(server, order, a.layers, a.checkpoints, Path(folder)))
            print(f"round {r + 1}/{a.rounds} ({' then '.join(order)}): " + ", ".join(
                f"{k} save {v['save']:.3f} load {v['load']:.3f} GiB/s" for k, v in rounds[-1].items()), file=sys.stderr)
    print(f"machine: {platform.node()}, {platform.machine()}, Python {platform.python_version()}; "
          f"{a.rounds} rounds, demo transformer {a.layers} layers "
          f"({rounds[0]['torch']['bytes'] / (1 << 20):.1f} MiB per .ckpt), {a.checkpoints} saves and loads per side")
    print(f"{'side':10} {'save GiB/s':>10} {'load GiB/s':>10}")
    for side in SIDES:
        print(f"{side:10} {statistics.median(x[side]['save'] for x in rounds):10.3f} "
              f"{statistics.median(x[side]['load'] for x in rounds):10.3f}")
    for phase in ("save", "load"):
        q1, med, q3 = quartiles([x["dataflux"][phase] / x["torch"][phase] for x in rounds])
        print(f"dataflux / fsspec, {phase}: median {med:.2f} (quartiles {q1:.2f}-{q3:.2f})")


if __name__ == "__main__":
    main()
