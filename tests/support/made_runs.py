"""Run folders made from OpRecords through the real result writers (results.summary and
per_epoch_stats), for testing diff, report and check at process counts this machine cannot run
(1024 processes). The figures are invented; the files are exactly what a run writes."""

from __future__ import annotations

import json
import random
from pathlib import Path

from dlio_ckpt.results.summary import OpRecord, dumps, hosts_summary, per_epoch_stats, summary

GIB = 1 << 30
# a run's workload as its .hydra/config.yaml keeps it (make_run's ``config``): llama3_8b's model, 10 saves and loads
LLAMA3_8B = {"model": {"name": "llama3_8b", "num_layers": 32, "model_datatype": "fp16", "optimizer_datatype": "fp32",
                       "parallelism": {"tensor": 1, "pipeline": 1, "zero_stage": 3},
                       "transformer": {"vocab_size": 128256, "hidden_size": 4096, "ffn_hidden_size": 14336,
                                       "num_attention_heads": 32, "num_kv_heads": 8}},
             "checkpoint": {"fsync": True, "num_checkpoints_write": 10, "num_checkpoints_read": 10}}


def make_run(folder: Path, processes: int, checkpoints: int = 10, stragglers: dict[int, float] | None = None,
             bytes_per_process: int = 2 * GIB, files: int = 6, config: dict | None = None, seed: int = 0,
             speed: float = 1.0, fsync: str | bool = "every file fsynced before the process's end time",
             read_cache: str = "evicted", memory: int = 256 * GIB, per_host: int = 8) -> Path:
    rng = random.Random(seed)
    stragglers = stragglers or {}
    folder.mkdir(parents=True, exist_ok=True)
    t = 1_700_000_000.0
    records: dict[int, list[OpRecord]] = {p: [] for p in range(processes)}
    for phase in ("save", "load"):
        for i in range(1, checkpoints + 1):
            for p in range(processes):
                base = (4.0 if phase == "save" else 2.0) / speed
                d = base * rng.uniform(0.95, 1.05) * stragglers.get(p, 1.0)
                per_file = bytes_per_process // files
                spans = tuple((f"f{p}_{k}.pt", t + k * d / files, t + (k + 1) * d / files, per_file)
                              for k in range(files))
                records[p].append(OpRecord(phase=phase, index=i, step=i, process=p, start=t, end=t + d, duration=d,
                                           bytes=per_file * files, files=files, file_times=spans))
            t += 12.0
    all_records = [r for rs in records.values() for r in rs]
    hosts = [(f"node{p // per_host:04d}", memory) for p in range(processes)]
    meta = {"workload": "made", "world_size": processes, "status": "ok", "num_accelerators": processes,
            "num_processes": processes, "num_hosts": len({h for h, _ in hosts}), **hosts_summary(hosts),
            "io": {"fsync": fsync, "read_cache": read_cache, "storage": {"root": "/x"}, "format": "pt"}}
    total = sum(r.bytes for r in all_records if r.phase == "save" and r.index == 1)
    (folder / "summary.json").write_text(dumps(summary(all_records, checkpoint_bytes=total, meta=meta)))
    for p, rs in records.items():
        (folder / f"{p}_per_epoch_stats.json").write_text(dumps(per_epoch_stats(rs, t, t + 1)))
    if config is not None:
        (folder / ".hydra").mkdir(exist_ok=True)
        import yaml

        (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"workload": config}))
    return folder


def keep_phase(run: Path, phase: str) -> Path:
    """A made run with one phase (save or load) left: a write-only or a read-only invocation."""
    drop = "load" if phase == "save" else "save"
    summary = json.loads((run / "summary.json").read_text())
    summary["checkpoints"][drop] = []
    (run / "summary.json").write_text(json.dumps(summary))
    for f in run.glob("*_per_epoch_stats.json"):
        stats = json.loads(f.read_text())
        stats["1"] = {k: v for k, v in stats["1"].items() if not k.startswith(drop)}
        f.write_text(json.dumps(stats))
    return run


def dlio_summary(path: Path, *, save: float | None, load: float, size_gb: float = 100.0) -> Path:
    """A summary.json as DLIO writes it; ``save=None`` is a read-only run (DLIO's bare NaN)."""
    nan = float("nan")
    metric = {"checkpoint_size_GB": size_gb,
              "save_checkpoint_io_mean_GB_per_second": nan if save is None else save,
              "save_checkpoint_io_stdev_GB_per_second": nan if save is None else 0.1,
              "save_checkpoint_duration_mean_seconds": nan if save is None else size_gb / save,
              "save_checkpoint_duration_stdev_seconds": nan if save is None else 0.2,
              "load_checkpoint_io_mean_GB_per_second": load, "load_checkpoint_io_stdev_GB_per_second": 0.1,
              "load_checkpoint_duration_mean_seconds": size_gb / load,
              "load_checkpoint_duration_stdev_seconds": 0.1}
    body = {"num_accelerators": 8, "num_hosts": 1, "hostname": "h", "metric": metric, "host_memory_GB": [512.0],
            "host_cpu_count": [64], "start": "2025-05-01T10:00:00", "end": "2025-05-01T10:10:00", "epochs": 1}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body, indent=4))  # json writes NaN as DLIO does
    return path
