#!/usr/bin/env python3
"""The real framework's save and load beside the emulated one (``checkpoint.io_pattern=framework``), on the
same storage, alternating over rounds; medians and per-round ratios emulated/real (issue 38's benchmark).

What runs each round (the order rotated between rounds: disks and page caches drift):
- dcp, real: ``python -m dlio_ckpt run workload=tiny ++workload.mode=fsdp`` on ``--procs`` processes, the
  shape below (FSDP2 on CPU with gloo, Adam, ``dcp.save``/``dcp.load`` through FileSystemWriter/Reader with
  ``fsdp.thread_count=--threads`` and ``sync_files=True``; on ``--s3``, s3torchconnector's S3StorageWriter);
- dcp, emulated: the same workload with ``checkpoint.layout=dcp``, ``checkpoint.files_per_rank=--threads``
  and each ``--io-pattern`` asked for (``framework``, the default; ``stream``, the tuned stream, for
  comparison);
- megatron, real: ``bench/megatron_timed.py`` (the oracle's GPTModel of ``tests/oracles/megatron_save.py``,
  the distributed optimizer, megatron-core 0.16.1's fully parallel ``torch_dist`` save with ``--megatron-threads``
  writers per rank, then Megatron-LM's default ``dist_checkpointing.load``), on the same shape;
- megatron, emulated: ``checkpoint.layout=megatron`` with that shape and ``files_per_rank=--megatron-threads``;
- lightning, real: ``workload=lightning_demo`` (``--lightning-layers``, SGD, TorchCheckpointIO) on one process;
- lightning, emulated: the same workload with ``mode=emulated`` and ``checkpoint.layout=lightning``.
The shape (issue 38's): llama, ``--layers`` 8, hidden 1024, ffn 2816, vocab 32000, 8 heads / 4 KV heads (tiny's),
bf16 weights and moments (dcp; megatron keeps its distributed optimizer's fp32 state whatever the dtype), TP 1,
``--saves`` saves then ``--loads`` loads per run, ``checkpoint.fsync=True`` (lightning: False, as Lightning), pages
evicted before each load.
A checkpoint's duration is the slowest process's, from a barrier before the save (load) to its return, as
``summary.json``'s ``checkpoints.save[].duration_seconds`` (``load``) says. A run's figures: its first save, its
steady state (the mean of its later saves: what a job lives in) and the mean of its loads; the ratio of a round
divides the emulated run's figure by the real run's of the same round.
``--interval SECONDS`` (dcp, megatron): from each save's return to the next save the real jobs train (``mode=fsdp``
takes steps for ``checkpoint.time_between_checkpoints``; ``megatron_timed.py``'s INTERVAL), the emulated runs sleep
it (``checkpoint.training=sleep``); 0 (the default): saves back to back (mode=fsdp still takes one step between).
Before the first save each side has about one interval behind it, not the same one: ``mode=fsdp``'s set-up step
counts toward it, ``megatron_timed.py`` trains a whole interval after its set-up (one optimizer step on made-up
gradients, the oracle's), the emulated runs sleep it; the first save's ratio compares those starts.
``--training-memory-gb GB|auto`` (dcp, megatron): the emulated runs write that much host memory afresh in each
interval and free it before the save (``checkpoint.training_memory_gb``), as the real jobs' CPU training leaves the
memory; ``auto`` leaves 2 GiB of the host's available memory, or where that is more, the 5 % the tool's rule keeps
free and 1 GiB. The report gives what writing it took.
With ``--saves 1`` there is no steady state: its columns repeat the first save.
``--settle`` seconds pass before every run (see bench/fio_compare.py: this VM's buffered writes are slower into
memory freed seconds ago, and the real side's set-up takes seconds the emulator's does not).

    python bench/framework_io.py --dir /path/on/storage --rounds 5 --io-pattern framework,stream \
        --markdown /tmp/figures.md
    python bench/framework_io.py --dir DIR --frameworks dcp --s3      # dcp on a local SeaweedFS (scripts/local_s3.py)
    python bench/framework_io.py --dir DIR --frameworks dcp,megatron --saves 5 --interval 3   # a job's steady state
    python bench/framework_io.py --dir DIR --frameworks dcp,megatron --saves 4 --interval 3 --training-memory-gb auto
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
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
# the real saves here train on the CPU: their state is in host memory, so the emulated saves copy nothing from
# an accelerator either
HOST_MEMORY = ["++workload.checkpoint.gpu_copy_gb_per_second=0"]


def shape(a: argparse.Namespace) -> list[str]:
    return [f"++workload.model.num_layers={a.layers}", f"++workload.model.transformer.hidden_size={a.hidden}",
            f"++workload.model.transformer.ffn_hidden_size={a.ffn}",
            f"++workload.model.transformer.vocab_size={a.vocab}",
            f"++workload.model.transformer.num_attention_heads={a.heads}",
            f"++workload.model.transformer.num_kv_heads={a.kv_heads}", "++workload.model.parallelism.tensor=1"]


def dlio(args: list[str], procs: int, root: str, env: dict[str, str]) -> dict:
    """One run of the tool; its saves' and loads' durations and bytes from summary.json."""
    out = Path(tempfile.mkdtemp(prefix="bench_fwio_"))
    storage = [] if root.startswith("s3://") else [f"++workload.storage.storage_root={root}"]
    cmd = [str(BIN / "mpiexec"), "-n", str(procs), sys.executable, "-m", "dlio_ckpt", "run", *args, *storage,
           f"++hydra.run.dir={out}", "++workload.checkpoint.overwrite=True"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-3000:]}")
    s = json.loads((out / "summary.json").read_text())
    shutil.rmtree(out)
    if not root.startswith("s3://"):
        shutil.rmtree(root, ignore_errors=True)
    return {"save": [c["duration_seconds"] for c in s["checkpoints"]["save"]],
            "load": [c["duration_seconds"] for c in s["checkpoints"]["load"]],
            "bytes": s["checkpoints"]["save"][0]["bytes"], "training_memory": s.get("training_memory")}


def megatron_real(a: argparse.Namespace, root: str) -> dict:
    Path(root).mkdir(parents=True, exist_ok=True)
    result = Path(root) / "timed.json"
    cmd = [sys.executable, str(REPO / "bench" / "megatron_timed.py"), root, str(result), str(a.saves), str(a.loads),
           str(a.procs), "1", str(a.layers), str(a.hidden), str(a.ffn), str(a.heads), str(a.kv_heads), str(a.vocab),
           "bf16", str(a.megatron_threads), str(a.interval)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if r.returncode:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-3000:]}")
    got = json.loads(result.read_text())
    shutil.rmtree(root, ignore_errors=True)
    return {"save": got["save"], "load": got["load"], "bytes": got["bytes"][0], "writers": got["writers"],
            "read_data": got["read_data"]}


def cases(a: argparse.Namespace, s3: list[str]) -> dict[str, dict[str, tuple]]:
    """framework -> {side: (how to run it)}; the real side first."""
    dt = ["++workload.model.model_datatype=bf16", "++workload.model.optimizer_datatype=bf16"]
    n = [f"++workload.checkpoint.num_checkpoints_write={a.saves}",
         f"++workload.checkpoint.num_checkpoints_read={a.loads}", "++workload.checkpoint.fsync=True"]
    # the real side trains for the interval between saves, the emulated one sleeps it (checkpoint.training=sleep)
    n_trained = [*n, f"++workload.checkpoint.time_between_checkpoints={a.interval}"]
    out: dict[str, dict[str, tuple]] = {}
    if "dcp" in a.frameworks:
        job = ["workload=tiny", *shape(a), *dt, *n_trained, *s3]
        out["dcp"] = {"real": ("dlio", [*job, "++workload.mode=fsdp", f"++workload.fsdp.thread_count={a.threads}"])}
        for p in a.io_pattern:
            out["dcp"][f"emulated {p}"] = ("dlio", [*job, "++workload.checkpoint.layout=dcp", *HOST_MEMORY,
                                                    f"++workload.checkpoint.files_per_rank={a.threads}",
                                                    f"++workload.checkpoint.io_pattern={p}"])
    if "megatron" in a.frameworks:
        job = ["workload=tiny", *shape(a), "++workload.model.model_datatype=bf16", *n_trained]
        out["megatron"] = {"real": ("megatron", None)}
        for p in a.io_pattern:
            out["megatron"][f"emulated {p}"] = ("dlio", [*job, "++workload.checkpoint.layout=megatron", *HOST_MEMORY,
                                                         f"++workload.checkpoint.files_per_rank={a.megatron_threads}",
                                                         f"++workload.checkpoint.io_pattern={p}"])
    if "lightning" in a.frameworks:
        # Lightning never syncs its .ckpt (the real mode would add an fsync where asked: not here)
        job = ["workload=lightning_demo", f"++workload.model.num_layers={a.lightning_layers}", *n,
               "++workload.checkpoint.fsync=False", "++workload.checkpoint.time_between_checkpoints=0"]
        out["lightning"] = {"real": ("dlio1", job)}
        for p in a.io_pattern:
            out["lightning"][f"emulated {p}"] = ("dlio1", [*job, "++workload.mode=emulated", *HOST_MEMORY,
                                                           "++workload.checkpoint.layout=lightning",
                                                           f"++workload.checkpoint.io_pattern={p}"])
    return out


def training_memory(a: argparse.Namespace) -> list[str]:
    """The emulated run's ``checkpoint.training_memory_gb`` override, ``--training-memory-gb`` worked out now."""
    if a.training_memory_gb == "0":
        return []
    gb = a.training_memory_gb
    if gb == "auto":  # within the tool's own rule, with room for what the runs hold besides
        from dlio_ckpt.cluster.host import available_memory
        from dlio_ckpt.run.emulated.runner import TRAINING_MEMORY_SHARE

        available = available_memory()  # left free: 2 GiB, or on a larger host what the rule leaves and 1 GiB more
        left = max(2 << 30, (1 - TRAINING_MEMORY_SHARE) * available + (1 << 30))
        gb = f"{(available - left) / a.procs / 1e9:.2f}"
    return [f"++workload.checkpoint.training_memory_gb={gb}"]


def fmt(xs: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="a folder on the storage measured (local files)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--frameworks", type=lambda s: s.split(","), default=["dcp", "megatron", "lightning"])
    ap.add_argument("--io-pattern", type=lambda s: s.split(","), default=["framework"],
                    help="emulated side(s): framework, stream or framework,stream")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--ffn", type=int, default=2816)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="dcp: fsdp.thread_count = files_per_rank")
    ap.add_argument("--megatron-threads", type=int, default=2, help="megatron-core's thread_count = files_per_rank")
    ap.add_argument("--lightning-layers", type=int, default=10)
    ap.add_argument("--saves", type=int, default=2)
    ap.add_argument("--loads", type=int, default=2)
    ap.add_argument("--settle", type=float, default=10.0, help="seconds before each run")
    ap.add_argument("--interval", type=float, default=0.0,
                    help="dcp and megatron: seconds of training from a save's return to the next save (the real "
                         "jobs train, the emulated runs sleep); 0: back to back (mode=fsdp still takes a step)")
    ap.add_argument("--training-memory-gb", default="0",
                    help="dcp and megatron, the emulated runs: checkpoint.training_memory_gb, GB per process, or "
                         "auto: what leaves 2 GiB of the host's available memory when the run starts, or the tool's "
                         "5 %% and 1 GiB where that is more (as the real jobs' CPU training here leaves 0.2 to 1.3 GB "
                         "free before each save)")
    ap.add_argument("--s3", action="store_true", help="dcp on a local SeaweedFS (scripts/local_s3.py) instead")
    ap.add_argument("--markdown", help="also write the tables here")
    a = ap.parse_args()
    folder = Path(a.dir)
    folder.mkdir(parents=True, exist_ok=True)
    server, s3, env = None, [], ENV
    if a.s3:
        if a.frameworks != ["dcp"]:
            sys.exit("--s3 runs dcp alone: add --frameworks dcp")
        info = json.loads(subprocess.run([sys.executable, str(REPO / "scripts" / "local_s3.py"), "--bucket",
                                          "bench", "--background", "--json", "--dir", str(folder / "seaweedfs")],
                                         check=True, capture_output=True, text=True).stdout)
        server, s3 = info, info["overrides"]
        env = {**ENV, **info["environment"]}
    plan = cases(a, s3)
    runs: dict[tuple[str, str], list[dict]] = {(f, side): [] for f, sides in plan.items() for side in sides}
    try:
        for r in range(a.rounds):
            for fw, sides in plan.items():
                names = list(sides)
                names = names[r % len(names):] + names[:r % len(names)]  # alternate who goes first
                for side in names:
                    kind, args = sides[side]
                    time.sleep(a.settle)
                    root = s3[1].split("=", 1)[1] if s3 else str(folder / "root")
                    t0 = time.monotonic()
                    if kind == "megatron":
                        got = megatron_real(a, root)
                    else:
                        warm = training_memory(a) if fw in ("dcp", "megatron") and side != "real" else []
                        got = dlio([*args, *warm], 1 if kind == "dlio1" else a.procs, root, env)
                    runs[(fw, side)].append(got)
                    print(f"round {r + 1}/{a.rounds} {fw} {side}: save {fmt(got['save'])} s, load {fmt(got['load'])} s"
                          f" ({time.monotonic() - t0:.0f} s wall)", file=sys.stderr, flush=True)
    finally:
        if server:
            subprocess.run([sys.executable, str(REPO / "scripts" / "local_s3.py"), "stop", str(server["pid"])])
    lines = report(a, plan, runs)
    print("\n".join(lines))
    if a.markdown:
        Path(a.markdown).write_text("\n".join(lines) + "\n")


def report(a: argparse.Namespace, plan: dict, runs: dict) -> list[str]:
    """The table (medians over rounds) and, per round, each emulated side over the real one: its first save, its
    steady state (the mean of saves 2 to N: what a job lives in) and its loads, apart."""
    med = statistics.median
    mean = statistics.fmean
    storage = "S3 (local SeaweedFS on 127.0.0.1)" if a.s3 else f"local files ({a.dir})"
    lines = [f"- {time.strftime('%Y-%m-%d %H:%M')} on {platform.node()} ({os.cpu_count()} cores), {storage}",
             f"- `{' '.join([Path(sys.executable).name, *sys.argv])}`", "",
             "| framework | side | MiB | save 1 s | saves 2+ s | load s | save 1 ratio | saves 2+ ratio | load ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    ratio_lines = []
    for fw, sides in plan.items():
        real = runs[(fw, "real")]
        for side in sides:
            rows = runs[(fw, side)]
            first = med(row["save"][0] for row in rows)
            later = med(steady(row) for row in rows)
            load = med(mean(row["load"]) for row in rows)
            if side == "real":
                ratios = ["1", "1", "1"] if len(sides) > 1 else ["no emulated side yet (TODO)"] * 3
            else:
                by = {"save 1": [e["save"][0] / x["save"][0] for e, x in zip(rows, real, strict=True)],
                      "saves 2+": [steady(e) / steady(x) for e, x in zip(rows, real, strict=True)],
                      "load": [mean(e["load"]) / mean(x["load"]) for e, x in zip(rows, real, strict=True)]}
                ratios = [f"{med(r):.2f}" for r in by.values()]
                ratio_lines.append(f"- {fw} {side} / real, per round: "
                                   + "; ".join(f"{what} {fmt(r)}" for what, r in by.items()))
            lines.append(f"| {fw} | {side} | {rows[0]['bytes'] / (1 << 20):.1f} | {first:.2f} | {later:.2f} | "
                         f"{load:.2f} | " + " | ".join(ratios) + " |")
        for side in sides:
            rows = runs[(fw, side)]
            ratio_lines.append(f"- {fw} {side}, per round: saves " + "; ".join(fmt(x["save"]) for x in rows)
                               + " s; loads (mean of the run's) " + fmt([mean(x["load"]) for x in rows]) + " s")
            if rows[0].get("training_memory"):  # --training-memory-gb: what writing it took, interval by interval
                ratio_lines.append(f"- {fw} {side}, training memory per process, GB: "
                                   + fmt([x["training_memory"]["gb_per_process"] for x in rows])
                                   + "; seconds writing it before each save (the slowest process): "
                                   + "; ".join(fmt(x["training_memory"]["seconds_max"]) for x in rows))
        if "writers" in real[0]:  # megatron-core's own phases: its writer processes, DCP's read_data
            ratio_lines += phases(fw, sides, runs)
    return [*lines, "", "Medians over rounds; a ratio is emulated/real, the median of the per-round ratios; saves 2+: "
            "the mean of a run's saves after its first.", "", *ratio_lines]


def steady(run: dict, key: str = "save") -> float:
    """A run's steady state: the mean of its saves' ``key`` figures after the first (the first alone where it saved
    once)."""
    return statistics.fmean(run[key][1:] or run[key])


def phases(fw: str, sides: dict, runs: dict) -> list[str]:
    """megatron-core's save less its CPU work: its writer processes' span (fork, writes, fsyncs, join), and its load's
    data part (DCP's ``read_data``: reads, ``torch.load`` of each item, the copy into the state dict), per round
    beside the emulated save and load (``bench/megatron_timed.py`` measures both)."""
    med, mean = statistics.median, statistics.fmean
    real = runs[(fw, "real")]
    w1, w2 = [x["writers"][0] for x in real], [mean(x["writers"][1:]) for x in real if len(x["writers"]) > 1]
    s1, s2 = [x["save"][0] for x in real], [mean(x["save"][1:]) for x in real if len(x["save"]) > 1]
    out = [f"- {fw} real, its writer processes: first save {med(w1):.2f} s of {med(s1):.2f} s"
           + (f", later saves {med(w2):.2f} s of {med(s2):.2f} s" if w2 else "")
           + (f"; its load's read_data {med(mean(x['read_data']) for x in real):.2f} s of "
              f"{med(mean(x['load']) for x in real):.2f} s" if real[0]["read_data"] else "")]
    for side in sides:
        if side == "real":
            continue
        rows = runs[(fw, side)]
        w_1 = [e["save"][0] / x["writers"][0] for e, x in zip(rows, real, strict=True)]
        w_2 = [steady(e) / steady(x, "writers") for e, x in zip(rows, real, strict=True)]
        line = (f"- {fw} {side} save / real writer processes, per round: save 1 {fmt(w_1)} (median {med(w_1):.2f}); "
                f"saves 2+ {fmt(w_2)} (median {med(w_2):.2f})")
        if real[0]["read_data"]:
            l_d = [mean(e["load"]) / mean(x["read_data"]) for e, x in zip(rows, real, strict=True)]
            line += f"; load / real read_data: {fmt(l_d)} (median {med(l_d):.2f})"
        out.append(line)
    return out


if __name__ == "__main__":
    main()
