#!/usr/bin/env python3
"""The reference presets against the real tool, and beside our own settings, on one file system.

Each round runs, in an order that alternates: upstream DLIO v2.0.1 itself (its own venv, made by
``scripts/dlio_reference_env.sh``), dlio_ckpt with ``checkpoint.reference=dlio-2.0``, with
``reference=mlcommons``, and with its own settings (fsync on, pages dropped before reads, every byte
compared). All run the same workload YAML (DLIO's keys: a llama-style model scaled by ``--layers`` and
``--hidden``), the same processes, ``--checkpoints`` writes then as many reads, into the same folder;
each after ``os.sync()`` and ``--settle`` seconds (this VM hands freed memory back to its host: see
bench/fio_compare.py). The figures are what each tool reports in its summary.json: DLIO's
``save/load_checkpoint_io_mean_GB_per_second`` (rank 0's own durations; GiB/s despite the name) and
ours (the slowest process's). Printed: each round, medians, and per-round ratios of the dlio-2.0
preset to DLIO as median [quartiles]. The MLCommons fork needs Python 3.12 and is not run here.

    bash scripts/dlio_reference_env.sh /tmp/dliovenv /path/to/dlio_benchmark-b56c741.tar
    python bench/references.py --dir /work/benchdir --dlio-venv /tmp/dliovenv --procs 2 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fio_compare import quartiles  # bench/ is this script's own folder on sys.path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TOOLS = ("dlio", "dlio-2.0", "mlcommons", "ours")

WORKLOAD = """\
# llama-style, DLIO's keys (its llama_8b_zero3.yaml), scaled for a bench
model:
  name: ref_bench
  type: transformer
  num_layers: {layers}
  model_datatype: fp16
  optimizer_datatype: fp32
  parallelism: {{pipeline: 1, tensor: 1, zero_stage: 3}}
  transformer: {{vocab_size: 32000, hidden_size: {hidden}, ffn_hidden_size: {ffn}, num_attention_heads: 32,
                num_kv_heads: 8}}
framework: pytorch
workflow: {{generate_data: False, train: False, checkpoint: True}}
checkpoint:
  checkpoint_folder: {folder}
  time_between_checkpoints: 0.1
  num_checkpoints_write: {n}
  num_checkpoints_read: {n}
  fsync: True
"""


def run(tool: str, cfg: Path, folder: Path, procs: int, venv: Path) -> dict[str, float]:
    """One run of ``tool``; its reported save and load GiB/s and its checkpoint's size."""
    out = Path(tempfile.mkdtemp(prefix="ref_bench_"))
    if tool == "dlio":
        cmd = [str(venv / "bin" / "mpiexec"), "-n", str(procs), str(venv / "bin" / "dlio_benchmark"),
               "--config-dir", str(cfg), "workload=ref_bench", f"++hydra.run.dir={out}"]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    else:
        preset = [] if tool == "ours" else [f"++workload.checkpoint.reference={tool}"]
        cmd = [str(BIN / "mpiexec"), "-n", str(procs), sys.executable, "-m", "dlio_ckpt", "--config-dir", str(cfg),
               "workload=ref_bench", f"++hydra.run.dir={out}", "++workload.checkpoint.overwrite=True", *preset]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(cmd, check=True, capture_output=True, cwd=out, env=env, timeout=3600)
    summary = json.loads(next(out.glob("*summary.json")).read_text())
    shutil.rmtree(out)
    shutil.rmtree(folder, ignore_errors=True)  # the next tool writes afresh
    m = summary["metric"]
    return {"save": m["save_checkpoint_io_mean_GB_per_second"], "load": m["load_checkpoint_io_mean_GB_per_second"],
            "GiB": m["checkpoint_size_GB"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="folder on the file system under test")
    ap.add_argument("--dlio-venv", required=True, type=Path, help="the venv with DLIO v2.0.1")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--checkpoints", type=int, default=3, help="writes, then as many reads, per run")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--settle", type=float, default=10.0)
    a = ap.parse_args()
    folder = Path(a.dir) / "ref_bench"
    cfg = Path(tempfile.mkdtemp(prefix="ref_cfg_"))
    (cfg / "workload").mkdir()
    (cfg / "workload" / "ref_bench.yaml").write_text(WORKLOAD.format(
        layers=a.layers, hidden=a.hidden, ffn=a.hidden * 8 // 3 // 256 * 256, folder=folder, n=a.checkpoints))
    rows: dict[str, list[dict[str, float]]] = {t: [] for t in TOOLS}
    for i in range(a.rounds):
        order = TOOLS[i % len(TOOLS):] + TOOLS[:i % len(TOOLS)]  # each tool goes first in turn
        for tool in order:
            os.sync()
            time.sleep(a.settle)
            rows[tool].append(run(tool, cfg, folder, a.procs, a.dlio_venv))
        print(f"round {i + 1}: " + "  ".join(f"{t} save {rows[t][-1]['save']:.3f} load {rows[t][-1]['load']:.3f}"
                                          for t in TOOLS), flush=True)
    shutil.rmtree(cfg)
    print(f"\n{a.procs} processes, {rows['ours'][0]['GiB']:.2f} GiB per checkpoint "
          f"(DLIO: {rows['dlio'][0]['GiB']:.2f}), "
          f"{a.checkpoints} writes then reads per run, {a.rounds} rounds, host {os.uname().nodename}; "
          "GiB/s as each tool reports it, median [quartiles]")
    for op in ("save", "load"):
        for tool in TOOLS:
            q1, med, q3 = quartiles([r[op] for r in rows[tool]])
            line = f"  {op} {tool:9s} {med:.3f} [{q1:.3f}, {q3:.3f}]"
            if tool != "dlio":
                q1, med, q3 = quartiles([r[op] / d[op] for r, d in zip(rows[tool], rows["dlio"], strict=True)])
                line += f"   / DLIO {med:.2f} [{q1:.2f}, {q3:.2f}]"
            print(line)


if __name__ == "__main__":
    main()
