"""The layouts side by side: what each writes for one model, and how fast this machine saves and loads it.

Part 1 plans the model at ``--ranks`` ranks in every layout (no I/O): files per rank, payload per rank
(largest, smallest), the file every rank reads first on load. Part 2 runs each layout under mpiexec
(``--procs`` processes emulating ``--ranks`` ranks, ``checkpoint.scale`` shrinking every tensor alike,
fsync on, caches evicted before the load) in alternating rounds and prints the medians, with each layout's
ratio to dlio's. ``dcp`` emulates FSDP2 alone: it runs with tensor=1 and pipeline=1 (the others keep the
workload's parallelism).

    .venv/bin/python bench/layouts.py --workload llama3_70b --ranks 64 --procs 2 --scale 0.002 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dlio_ckpt.config import compose  # noqa: E402
from dlio_ckpt.errors import ConfigError  # noqa: E402
from dlio_ckpt.plan.formats import planned_size  # noqa: E402
from dlio_ckpt.plan.layouts import check_job, file_format, make_plan  # noqa: E402
from dlio_ckpt.registry import LAYOUTS  # noqa: E402

MPIEXEC = Path(sys.executable).parent / "mpiexec"
GIB = 1 << 30


def overrides(workload: str, layout: str) -> list[str]:
    """The workload in ``layout``; dcp emulates FSDP2 alone (tensor=1, pipeline=1; for an MoE, torchtitan's
    expert parallelism, without an MTP module), and DeepSpeed's MoE files are modelled without pipeline
    parallelism (pipeline=1 there, Megatron's stage split and expert tensor parallelism dropped: DeepSpeed
    splits experts over the tensor-parallel ranks)."""
    out = [f"workload={workload}", f"++workload.checkpoint.layout={layout}"]
    if layout == "dcp":
        out += ["++workload.model.parallelism.tensor=1", "++workload.model.parallelism.pipeline=1"]
    raw = compose([f"workload={workload}", "++workload.checkpoint.layout=megatron"], None)[0].model
    if layout == "dcp" and raw.family == "moe":
        out += ["++workload.model.mtp_layers=0"]  # torchtitan has no MTP module
    if layout in ("dcp", "deepspeed") and raw.family == "moe":
        out += ["++workload.model.parallelism.pipeline=1", "++workload.model.parallelism.first_stage_layers=null",
                "++workload.model.parallelism.last_stage_layers=null",
                "++workload.model.parallelism.expert_tensor=null"]
    if layout in ("dlio", "deepspeed") and raw.moments_datatype is not None:
        out += ["++workload.model.moments_datatype=null"]  # their optimizer files hold one dtype
    return out


def table(workload: str, ranks: int) -> None:
    print(f"{workload} at {ranks} ranks (plan, no I/O)")
    print("layout     parallelism                                   files/rank  writing  largest GiB  "
          "smallest GiB  total GiB  first read on load")
    for layout in LAYOUTS.names:
        try:
            w, _, _ = compose(overrides(workload, layout), None)
            check_job(w, ranks)
        except ConfigError as exc:
            print(f"{layout:<10} refused: {exc}")
            continue
        plan, fmt = make_plan(w, ranks), file_format(w)
        per_rank = [sum(planned_size(fmt, f) for f in r.files) for r in plan.ranks]
        counts = sorted({len(r.files) for r in plan.ranks})
        writing = sum(1 for n in per_rank if n)
        meta = ", ".join(f"{c.name} {c.size / 2**20:.1f} MiB (every rank)" for c in plan.coordinator) or "none"
        print(f"{layout:<10} {plan.layout.describe()[:45]:<45} {'-'.join(map(str, (counts[0], counts[-1]))):>10}  "
              f"{writing:>7}  {max(per_rank) / GIB:>11.2f}  {min(n for n in per_rank if n) / GIB:>12.2f}  "
              f"{sum(per_rank) / GIB:>9.1f}  {meta}")


def run(workload: str, layout: str, ranks: int, procs: int, scale: float, root: Path) -> tuple[float, float, float]:
    out = root / f"out-{layout}"
    args = [str(MPIEXEC), "-n", str(procs), sys.executable, "-m", "dlio_ckpt", *overrides(workload, layout),
            "--world-size", str(ranks), f"++workload.checkpoint.scale={scale}", "++workload.checkpoint.fsync=True",
            "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1",
            "++workload.checkpoint.time_between_checkpoints=0", "++workload.checkpoint.progress=False",
            f"++workload.storage.storage_root={root / 'store'}", f"hydra.run.dir={out}"]
    subprocess.run(args, cwd=REPO, check=True, capture_output=True, text=True)
    s = json.loads((out / "summary.json").read_text())
    m = s["metric"]
    shutil.rmtree(root / "store")
    shutil.rmtree(out)
    written = s["checkpoints"]["save"][0]["bytes"] / GIB  # with headers and .metadata
    return m["save_checkpoint_io_mean_GiB_per_second"], m["load_checkpoint_io_mean_GiB_per_second"], written


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", default="llama3_70b")
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--scale", type=float, default=0.002)
    p.add_argument("--rounds", type=int, default=5, help="0: the table only")
    p.add_argument("--root", default=None, help="a folder on the storage to measure (default: a temporary one)")
    args = p.parse_args()
    print(f"{platform.node()}, {platform.machine()}, python {platform.python_version()}")
    table(args.workload, args.ranks)
    if args.rounds == 0:
        return
    root = Path(tempfile.mkdtemp(dir=args.root))
    seen: dict[str, list[tuple[float, float, float]]] = {n: [] for n in LAYOUTS.names}
    try:
        for r in range(args.rounds):
            for layout in LAYOUTS.names if r % 2 == 0 else reversed(LAYOUTS.names):
                seen[layout].append(run(args.workload, layout, args.ranks, args.procs, args.scale, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\nmeasured: {args.procs} processes emulating {args.ranks} ranks, scale {args.scale}, fsync, "
          f"caches evicted before the load; medians of {args.rounds} alternating rounds [min, max]")
    base = {k: statistics.median(x[k] for x in seen["dlio"]) for k in (0, 1)}
    print("layout     GiB written  save GiB/s            load GiB/s            save/dlio  load/dlio")
    for layout in LAYOUTS.names:
        save, load = ([x[k] for x in seen[layout]] for k in (0, 1))
        ms, ml = statistics.median(save), statistics.median(load)
        print(f"{layout:<10} {seen[layout][0][2]:>11.2f}  {ms:>5.2f} [{min(save):.2f}, {max(save):.2f}]  "
              f"{ml:>5.2f} [{min(load):.2f}, {max(load):.2f}]  {ms / base[0]:>9.2f}  {ml / base[1]:>9.2f}")


if __name__ == "__main__":
    main()
