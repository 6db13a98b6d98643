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


def _seconds(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


def test_async_saves_count_holds_and_stalls_as_the_records_show_them(tmp_path):
    """No pass mark on speed (that is bench/tiers.py's): each process's own records must agree with
    what it reports, in orderings the code fixes (no tolerance a loaded machine could exceed): a
    checkpoint holds training at least until the previous background write ended, plus the modelled
    staging after that wait; its stall is part of its hold; its duration runs to the end of its
    background write. With no interval and CPU training, the writes cannot
    finish before the next checkpoint, so stalls are there to count."""
    sync = run(tmp_path, "sync", "++workload.checkpoint.time_between_checkpoints=0")
    slow = run(tmp_path, "async", "++workload.checkpoint.async_save=True",
               "++workload.checkpoint.time_between_checkpoints=2", "++workload.checkpoint.staging_gb_per_second=55")
    fast = run(tmp_path, "short", "++workload.checkpoint.async_save=True",
               "++workload.checkpoint.time_between_checkpoints=0", "++workload.checkpoint.training=cpu")
    assert slow["async_save"] == {"staging": "modelled", "staging_gb_per_second": 55.0, "training": "sleep"}
    assert sync["async_save"] is False and "save_checkpoint_held_mean_seconds" not in sync["metric"]
    for name, summary in (("async", slow), ("short", fast)):
        rate = summary["async_save"]["staging_gb_per_second"] * 1e9
        for c in summary["checkpoints"]["save"]:
            a = c["async"]
            assert a["time_to_durable_seconds"] == c["duration_seconds"] >= a["held_seconds_max"] >= 0
            assert a["overlapped"] is (a["stalled_seconds_max"] < 0.001)
        for process in range(2):
            stats = load(tmp_path / name / f"{process}_per_epoch_stats.json")["1"]
            for i in (1, 2, 3):
                save = stats[f"save_ckpt{i}"]
                assert save["held"] >= save["stalled"] + save["bytes"] / rate - 1e-6, save
                if i > 1:  # the previous write ran past this start: the hold, less its staging, covers that
                    # (the wait is inside the hold and the staging after it; 1 ms: time.time against perf_counter)
                    ran_past = max(0.0, _seconds(stats[f"save_ckpt{i - 1}"]["end"]) - _seconds(save["start"]))
                    assert save["held"] - save["bytes"] / rate >= ran_past - 1e-3, (name, process, i, save, ran_past)
                    assert save["stalled"] <= save["held"], (name, process, i, save)
    later = fast["checkpoints"]["save"][1:]
    assert all(c["async"]["stalled_seconds_max"] > 0 and not c["async"]["overlapped"] for c in later)
    assert "save_checkpoint_held_mean_seconds" in fast["metric"]
    worse = tmp_path / "worse"  # diff gates on the time training was held
    (worse / ".hydra").mkdir(parents=True)
    summary = load(tmp_path / "short" / "summary.json")
    summary["metric"]["save_checkpoint_held_mean_seconds"] *= 1.5
    (worse / "summary.json").write_text(json.dumps(summary))
    gate = dlio(["diff", "short/summary.json", "worse/summary.json", "--metrics", "held"], tmp_path)
    assert gate.returncode == 1 and "REGRESSION in save_checkpoint_held_mean_seconds" in gate.stdout, gate.stdout
    report = dlio(["report", "short"], tmp_path)
    assert report.returncode == 0 and (tmp_path / "short" / "timeline.png").exists()
    g = slow["goodput"]
    assert g["interval_seconds"] == 2 and g["mtbf_hours"] == 8 and 0 < g["goodput"] <= g["goodput_at_optimal"] < 1
    assert g["held_seconds_per_checkpoint"] == slow["metric"]["save_checkpoint_held_mean_seconds"]
    assert sync["goodput"]["held_seconds_per_checkpoint"] == sync["metric"]["save_checkpoint_duration_mean_seconds"]


def test_the_measured_goodput_on_values_worked_out_by_hand():
    from dlio_ckpt.results.goodput import figures

    g = figures(600, held=2, durable=10, load=30, mtbf_hours=10)  # M = 36000 s; lost = 300 + 10 + 30
    assert g["lost_per_failure_seconds"] == 340
    assert math.isclose(g["goodput"], 0.987265, rel_tol=1e-6)  # 600/602 * (1 - 340/36000)
    assert g["optimal_interval_seconds"] == 379.4733192202055  # sqrt(2 * 2 * 36000) = sqrt(144000)


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


def test_the_what_if_model_on_values_worked_out_by_hand():
    """Round inputs, answers worked out on paper: M = 8 h = 28800 s."""
    from dlio_ckpt.results.goodput import what_if

    sync = what_if(1800, write=5, load=2.5, mtbf_hours=8)  # held 5, durable 5, lost 900 + 5 + 2.5
    assert sync["held_seconds_per_checkpoint"] == 5 and sync["time_to_durable_seconds"] == 5
    assert sync["lost_per_failure_seconds"] == 907.5
    assert math.isclose(sync["goodput"], 0.965807, rel_tol=1e-6)  # 1800/1805 * (1 - 907.5/28800)
    assert math.isclose(sync["optimal_interval_seconds"], 536.656, rel_tol=1e-6)  # sqrt(2 * 5 * 28800)
    assert sync["optimal_interval_bound_by"] == "Young/Daly" and "write_keeps_up" not in sync

    stall = what_if(5, write=48, load=24, mtbf_hours=8, staging=1)  # the write cannot finish in 5 s
    assert stall["write_keeps_up"] is False and stall["stalled_seconds_per_checkpoint"] == 43
    assert stall["held_seconds_per_checkpoint"] == 44 and stall["time_to_durable_seconds"] == 49
    assert math.isclose(stall["goodput"], 0.101773, rel_tol=1e-5)  # 5/49 * (1 - 75.5/28800)
    assert stall["optimal_interval_seconds"] == 240 and stall["optimal_interval_bound_by"] == "Young/Daly"
    assert "does not fit in the 5 s interval" in stall["verdict"] and "holds training 44 s" in stall["verdict"]

    behind = what_if(5, write=48, load=24, mtbf_hours=8, staging=1, drain=1000)  # 1000 s of drain every 49 s
    assert behind["drain_keeps_up"] is False and behind["drain_falls_behind_seconds_per_checkpoint"] == 951
    assert behind["goodput"] is None and behind["lost_per_failure_seconds"] is None
    assert "grows without bound" in behind["verdict"]
    assert behind["optimal_interval_seconds"] == 999 and behind["optimal_interval_bound_by"] == "the drain"
    assert math.isclose(behind["goodput_at_optimal"], 0.944454, rel_tol=1e-5)  # 999/1000 * (1 - 1572.5/28800)

    easy = what_if(1800, write=48, load=24, mtbf_hours=8, staging=1, drain=1000)
    assert easy["write_keeps_up"] and easy["drain_keeps_up"] and easy["stalled_seconds_per_checkpoint"] == 0
    assert easy["time_to_durable_seconds"] == 1049 and easy["held_seconds_per_checkpoint"] == 1


def test_plan_answers_the_what_if_in_words_without_writing_anything(tmp_path):
    """The case that once reported goodput 0.80 for a 48.9 s write every 5 s: now the stall, the
    held time and the goodput that follow, and with a slow drain no goodput at all, saying why."""
    base = ["plan", "workload=llama3_70b", "--world-size", "64", "--write-bandwidth", "20GB/s",
            "--read-bandwidth", "40GB/s", "--mtbf-hours", "8", "++workload.checkpoint.async_save=True",
            "++workload.checkpoint.time_between_checkpoints=5"]
    r = dlio([*base, "--format", "json"], tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    g, size = out["goodput"], out["total_payload_bytes"]
    assert size == 978406572032 and math.isclose(g["write_seconds"], 48.9203286016)  # bytes / 20e9
    assert g["write_keeps_up"] is False and math.isclose(g["stalled_seconds_per_checkpoint"], 43.9203286016)
    assert g["goodput"] < 0.11
    table = dlio([*base, "--drain-bandwidth", "1GB/s"], tmp_path)
    assert table.returncode == 0, table.stderr
    assert "drain_keeps_up: False" in table.stdout and "goodput: none (see verdict)" in table.stdout
    assert "verdict: the background write (48.92 s) does not fit in the 5 s interval" in table.stdout
    assert "no steady goodput follows at this interval" in table.stdout
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
