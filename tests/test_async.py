"""Async checkpoints in the emulator and what they cost training: time held, stalls when the
interval is too short, time to durable, goodput in summary.json and from ``plan``."""

from __future__ import annotations

import json
import math

import pytest

from .conftest import dlio, load

pytestmark = pytest.mark.mpi
SHAPE = ["workload=llama_7b_zero3", "--world-size", "2", "++workload.checkpoint.scale=0.004",
         "++workload.checkpoint.num_checkpoints_write=3", "++workload.checkpoint.num_checkpoints_read=1",
         "++workload.checkpoint.fsync=True", "++workload.checkpoint.mtbf_hours=8"]


def run(tmp_path, name: str, *extra: str) -> dict:
    r = dlio([*SHAPE, f"++hydra.run.dir={name}", f"++workload.checkpoint.checkpoint_folder=ck_{name}", *extra],
             tmp_path, nprocs=2, timeout=240)
    assert r.returncode == 0, r.stderr
    return load(tmp_path / name / "summary.json")


def test_async_saves_hold_training_briefly_and_count_the_waits_when_the_interval_is_short(tmp_path):
    sync = run(tmp_path, "sync", "++workload.checkpoint.time_between_checkpoints=0")
    slow = run(tmp_path, "async", "++workload.checkpoint.async_save=True",
               "++workload.checkpoint.time_between_checkpoints=2", "++workload.checkpoint.staging_gb_per_second=55")
    fast = run(tmp_path, "short", "++workload.checkpoint.async_save=True",
               "++workload.checkpoint.time_between_checkpoints=0", "++workload.checkpoint.training=cpu")
    save = sum(c["duration_seconds"] for c in sync["checkpoints"]["save"]) / 3
    for c in slow["checkpoints"]["save"]:
        assert c["async"]["overlapped"] and c["async"]["held_seconds_max"] < 0.25 * save, (c, save)
        assert c["async"]["time_to_durable_seconds"] == c["duration_seconds"] > c["async"]["held_seconds_max"]
    assert slow["async_save"] == {"staging": "modelled", "staging_gb_per_second": 55.0, "training": "sleep"}
    assert sync["async_save"] is False
    later = fast["checkpoints"]["save"][1:]
    assert any(c["async"]["stalled_seconds_max"] > 0 and not c["async"]["overlapped"] for c in later)
    stats = load(tmp_path / "short" / "0_per_epoch_stats.json")["1"]["save_ckpt2"]
    assert stats["held"] >= stats["stalled"] >= 0
    assert slow["metric"]["save_checkpoint_held_mean_seconds"] < 0.25 * save
    assert "save_checkpoint_held_mean_seconds" not in sync["metric"]  # DLIO's keys as they were
    gate = dlio(["diff", "async", "short", "--metrics", "held"], tmp_path)  # the short interval held longer
    assert gate.returncode == 1 and "REGRESSION in save_checkpoint_held_mean_seconds" in gate.stdout, gate.stdout
    report = dlio(["report", "short"], tmp_path)
    assert report.returncode == 0 and (tmp_path / "short" / "timeline.png").exists()
    g = slow["goodput"]
    assert g["interval_seconds"] == 2 and 0 < g["goodput"] < 1 and g["mtbf_hours"] == 8
    assert math.isclose(g["optimal_interval_seconds"], math.sqrt(2 * g["held_seconds_per_checkpoint"] * 8 * 3600))
    assert g["goodput_at_optimal"] >= g["goodput"]
    assert sync["goodput"]["held_seconds_per_checkpoint"] > g["held_seconds_per_checkpoint"]


def test_real_staging_copies_the_shard_into_host_memory_and_says_how_much(tmp_path):
    real = run(tmp_path, "real", "++workload.checkpoint.async_save=True", "++workload.checkpoint.staging=real",
               "++workload.checkpoint.time_between_checkpoints=1")
    held = real["async_save"]["staging_bytes_per_process"]
    assert real["async_save"]["staging"] == "real" and len(held) == 2 and min(held) > 0
    assert sum(held) == real["metric"]["checkpoint_size_bytes"]  # every process's shards, in its memory
    assert all(rss > n for rss, n in zip(real["memory"]["peak_rss_bytes_per_process"], held, strict=True))
    assert all(c["async"]["held_seconds_max"] > 0 for c in real["checkpoints"]["save"])


def test_real_staging_larger_than_host_memory_is_refused(tmp_path):
    r = dlio([*SHAPE, "++workload.checkpoint.scale=1", "++workload.checkpoint.async_save=True",
              "++workload.checkpoint.staging=real", "++hydra.run.dir=big"], tmp_path)
    assert r.returncode == 2 and "workload.checkpoint.staging='real'" in r.stderr and "available" in r.stderr, r.stderr
    assert not (tmp_path / "big").exists()


def test_plan_answers_the_what_if_without_writing_anything(tmp_path):
    r = dlio(["plan", "workload=llama3_70b", "--world-size", "64", "--write-bandwidth", "20GB/s",
              "--read-bandwidth", "40GB/s", "--mtbf-hours", "8", "--format", "json",
              "++workload.checkpoint.time_between_checkpoints=1800"], tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    g, size = out["goodput"], out["total_payload_bytes"]
    assert math.isclose(g["held_seconds_per_checkpoint"], size / 20e9)
    assert math.isclose(g["load_seconds"], size / 40e9)
    lost = 1800 / 2 + size / 20e9 + size / 40e9
    assert math.isclose(g["lost_per_failure_seconds"], lost)
    assert math.isclose(g["goodput"], 1800 / (1800 + size / 20e9) * (1 - lost / (8 * 3600)))
    assert math.isclose(g["optimal_interval_seconds"], math.sqrt(2 * size / 20e9 * 8 * 3600))
    tiered = dlio(["plan", "workload=llama3_70b", "--world-size", "64", "--write-bandwidth", "20GB/s",
                   "--read-bandwidth", "40GB/s", "--mtbf-hours", "8", "--drain-bandwidth", "5GB/s", "--format", "json",
                   "++workload.checkpoint.time_between_checkpoints=1800", "++workload.checkpoint.async_save=True"],
                  tmp_path)
    t = json.loads(tiered.stdout)["goodput"]
    assert math.isclose(t["drain_seconds"], size / 5e9) and t["drain_keeps_up"] is (size / 5e9 <= 1800 + t[
        "held_seconds_per_checkpoint"])
    assert math.isclose(t["time_to_durable_seconds"], size / 20e9 + size / 5e9)  # written, then drained
    assert t["held_seconds_per_checkpoint"] < g["held_seconds_per_checkpoint"]  # async: staging only
    bad = dlio(["plan", "workload=tiny", "--world-size", "2", "--write-bandwidth", "fast", "--read-bandwidth",
                "1GB/s", "--mtbf-hours", "8"], tmp_path)
    assert bad.returncode == 2 and "--write-bandwidth='fast': must be a positive rate" in bad.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.real
def test_the_frameworks_async_saves_report_the_same_fields_as_the_emulators(tmp_path):
    """fsdp's dcp.async_save beside the emulator's async saves of the same workload: both say how long
    training was held and when each checkpoint was durable."""
    pytest.importorskip("torch")
    common = ["workload=tiny", "++workload.checkpoint.num_checkpoints_write=3",
              "++workload.checkpoint.num_checkpoints_read=1"]
    real = dlio([*common, "++workload.mode=fsdp", "++workload.fsdp.async_save=True", "++hydra.run.dir=real",
                 "++workload.checkpoint.checkpoint_folder=ck_real"], tmp_path, nprocs=2, timeout=300)
    assert real.returncode == 0, real.stderr
    emulated = dlio([*common, "++workload.checkpoint.async_save=True", "++hydra.run.dir=emulated",
                     "++workload.checkpoint.time_between_checkpoints=0.2",
                     "++workload.checkpoint.checkpoint_folder=ck_emulated"], tmp_path, nprocs=2)
    assert emulated.returncode == 0, emulated.stderr
    for name in ("real", "emulated"):
        s = load(tmp_path / name / "summary.json")
        assert {"save_checkpoint_held_mean_seconds", "save_checkpoint_time_to_durable_mean_seconds"} <= set(s["metric"])
        for c in s["checkpoints"]["save"]:
            a = c["async"]
            assert 0 <= a["stalled_seconds_max"] <= a["held_seconds_max"] <= a["time_to_durable_seconds"] + 1e-6
    refused = dlio([*common, "++workload.mode=fsdp", "++workload.checkpoint.mtbf_hours=8"], tmp_path)
    assert refused.returncode == 2
    assert "workload.checkpoint.mtbf_hours=8.0: applies to emulated runs only" in refused.stderr
