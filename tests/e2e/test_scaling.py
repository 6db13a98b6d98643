"""A scaled run (``checkpoint.scale``) as a user runs it: its summary gives the full size beside what it wrote,
and a projection to full size labelled as one (tests/unit/test_scaling.py holds the plans themselves)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.plan.layouts import make_plan, restore_plan
from tests.support.cli import dlio, load, run_here


def test_a_scaled_run_reports_the_full_size_beside_its_own_and_a_labelled_projection(tmp_path):
    args = ["workload=llama3_8b", "++workload.checkpoint.layout=dcp", "++workload.model.parallelism.tensor=1",
            "--world-size", "8", "++workload.checkpoint.scale=0.001"]
    r = dlio([*args, "++workload.storage.storage_root=data", "++hydra.run.dir=run",
              "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1"],
             tmp_path)
    assert r.returncode == 0, r.stderr
    summary = load(tmp_path / "run" / "summary.json")
    scaled, metric = summary["io"]["scaled"], summary["metric"]
    full = make_plan(compose(["workload=llama3_8b", *args[1:3], "++workload.checkpoint.scale=1"])[0], 8)
    assert scaled["full_size"]["checkpoint_size_GiB"] == full.checkpoint_size_GB
    assert scaled["full_size"]["coordinator_bytes"] == sum(c.size for c in full.coordinator)
    step = tmp_path / "data" / "checkpoints" / "llama3_8b" / "global_epoch1_step1"
    written = sum(p.stat().st_size for p in step.iterdir())
    assert scaled["this_run"]["bytes_per_checkpoint"] == written  # what is on storage, headers and .metadata too
    assert scaled["bytes_ratio"] == written / scaled["full_size"]["bytes_per_checkpoint"]
    ahead = scaled["projected_full_size"]
    assert scaled["load_bytes_ratio"] == summary["io"]["restore"]["bytes_read"] / scaled["full_size_load_bytes_read"]
    for phase, ratio in (("save", scaled["bytes_ratio"]), ("load", scaled["load_bytes_ratio"])):
        assert ahead[f"{phase}_seconds"] == pytest.approx(projected(tmp_path / "run", phase, ratio), rel=1e-9)
        # the barrier, the metadata and the coordinator's files are kept, not scaled with the bytes
        assert ahead[f"{phase}_seconds"] < metric[f"{phase}_checkpoint_duration_mean_seconds"] / ratio
    assert ahead["basis"].startswith("a projection, not a measurement")
    assert "projected at full size, not measured" in r.stdout + r.stderr


def test_a_sampled_run_writes_whole_items_of_the_plan_and_reads_back_what_its_load_plans(tmp_path, monkeypatch,
                                                                                         capfd):
    """checkpoint.miniature=sample as a user runs it (one process playing 8 ranks, in this process): the files on
    storage are the sample's, each its planned size, its load verified and reading what the plan's restore reads."""
    args = ["workload=llama3_8b", "++workload.checkpoint.layout=dcp", "++workload.model.parallelism.tensor=1",
            "--world-size", "8", "++workload.checkpoint.scale=0.002", "++workload.checkpoint.miniature=sample"]
    r = run_here([*args, "++workload.storage.storage_root=data", "++hydra.run.dir=run",
                  "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1"],
                 tmp_path, monkeypatch, capfd)
    assert r.returncode == 0, r.stderr
    summary = load(tmp_path / "run" / "summary.json")
    scaled = summary["io"]["scaled"]
    plan = make_plan(compose(["workload=llama3_8b", *args[1:3], *args[5:]])[0], 8)
    step = tmp_path / "data" / "checkpoints" / "llama3_8b" / "global_epoch1_step1"
    on_storage = {p.name: p.stat().st_size for p in step.iterdir()}
    planned = {f"{f.stem}.distcp": f.size for r in plan.ranks for f in r.files}
    assert {k: v for k, v in on_storage.items() if k.endswith(".distcp")} == planned
    assert scaled["miniature"] == "sample" and scaled["this_run"]["items"] < scaled["full_size"]["items"]
    assert scaled["this_run"]["bytes_per_checkpoint"] == sum(on_storage.values())
    assert summary["io"]["verified"] is True  # every byte read compared: a mismatch fails the run (exit 1)
    assert summary["io"]["restore"]["bytes_read"] == sum(n for rank in restore_plan(compose(
        ["workload=llama3_8b", *args[1:3], *args[5:]])[0], plan).ranks for f in rank.files for _, n in f.ranges) + \
        8 * summary["io"]["restore"]["metadata_bytes_per_rank"]
    assert "items whole, on" in r.stdout + r.stderr


def projected(run: Path, phase: str, ratio: float) -> float:
    """io.scaled.projected_full_size's rule, from the run's per-process files: each checkpoint's slowest process's
    time, its time moving the ranks' files (``data_seconds``) over the bytes ratio and the rest as measured."""
    stats = [json.loads(p.read_text())["1"] for p in run.glob("*_per_epoch_stats.json")]
    names = sorted({k for s in stats for k in s if k.startswith(f"{phase}_ckpt")})
    return statistics.fmean(max(e["duration"] - e["data_seconds"] + e["data_seconds"] / ratio
                                for s in stats if (e := s.get(name))) for name in names)
