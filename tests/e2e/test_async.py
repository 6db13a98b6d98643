"""Async checkpoints in the emulator and what they cost training: time held, stalls when the
interval is too short, time to durable, goodput in summary.json (the arithmetic and ``plan``'s what-if:
tests/unit/test_async.py)."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import dlio, load
from tests.support.workloads import LLAMA_7B_88MIB

pytestmark = pytest.mark.mpi


def run(tmp_path, name: str, *extra: str) -> dict:
    r = dlio([*LLAMA_7B_88MIB, f"++hydra.run.dir={name}", f"++workload.checkpoint.checkpoint_folder=ck_{name}", *extra],
             tmp_path, nprocs=2, timeout=240)
    assert r.returncode == 0, r.stderr
    return load(tmp_path / name / "summary.json")


def _seconds(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


def test_async_saves_count_holds_and_stalls_as_the_records_show_them(tmp_path, dlio_here):
    """No pass mark on speed (that is bench/tiers.py's): each process's own records must agree with
    what it reports, in orderings the code fixes (no tolerance a loaded machine could exceed): a
    checkpoint holds training at least until the previous background write ended, plus the modelled
    staging after that wait; its stall is part of its hold; its duration runs to the end of its
    background write. With no interval and CPU training, the writes cannot
    finish before the next checkpoint, so stalls are there to count."""
    sync = run(tmp_path, "sync", "++workload.checkpoint.time_between_checkpoints=0")
    slow = run(tmp_path, "async", "++workload.checkpoint.async_save=True",
               "++workload.checkpoint.time_between_checkpoints=1", "++workload.checkpoint.staging_gb_per_second=55")
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
    gate = dlio_here(["diff", "short/summary.json", "worse/summary.json", "--metrics", "held"])  # read-only: here
    assert gate.returncode == 1 and "REGRESSION in save_checkpoint_held_mean_seconds" in gate.stdout, gate.stdout
    report = dlio_here(["report", "short"])
    assert report.returncode == 0 and (tmp_path / "short" / "timeline.png").exists()
    g = slow["goodput"]
    assert g["interval_seconds"] == 1 and g["mtbf_hours"] == 8 and 0 < g["goodput"] <= g["goodput_at_optimal"] < 1
    assert g["held_seconds_per_checkpoint"] == slow["metric"]["save_checkpoint_held_mean_seconds"]
    assert sync["goodput"]["held_seconds_per_checkpoint"] == sync["metric"]["save_checkpoint_duration_mean_seconds"]


def test_real_staging_copies_the_shard_into_host_memory_and_says_how_much(tmp_path):
    """And with training memory written in every interval beside it (checkpoint.training_memory_gb): each
    process's figures gathered interval by interval, goodput worked out over the intervals as trained."""
    real = run(tmp_path, "real", "++workload.checkpoint.async_save=True", "++workload.checkpoint.staging=real",
               "++workload.checkpoint.time_between_checkpoints=1", "++workload.checkpoint.training_memory_gb=0.02")
    held = real["async_save"]["staging_bytes_per_process"]
    assert real["async_save"]["staging"] == "real" and len(held) == 2 and min(held) > 0
    assert sum(held) == real["metric"]["checkpoint_size_bytes"]  # every process's shards, in its memory
    assert all(rss > n for rss, n in zip(real["memory"]["peak_rss_bytes_per_process"], held, strict=True))
    assert all(c["async"]["held_seconds_max"] > 0 for c in real["checkpoints"]["save"])
    memory = real["training_memory"]
    assert memory["gb_per_process"] == 0.02 and memory["interval_seconds"] == 1 and len(memory["seconds_max"]) == 3
    assert real["goodput"]["interval_seconds"] > 1  # the intervals as trained (each past its 1 s), not as asked


def test_the_emulators_async_saves_report_the_fields_fsdps_do(tmp_path, dlio_here):
    """The emulator's async saves say, as fsdp's dcp.async_save does (its run of the same workload, tiny on 2
    processes, is test_real_modes.py's async one, held to the same fields and orderings there), how long training
    was held and when each checkpoint was durable; an MTBF, which only an emulated run models, refused in fsdp."""
    common = ["workload=tiny", "++workload.checkpoint.num_checkpoints_write=3",
              "++workload.checkpoint.num_checkpoints_read=1"]
    emulated = dlio([*common, "++workload.checkpoint.async_save=True", "++hydra.run.dir=emulated",
                     "++workload.checkpoint.time_between_checkpoints=0.2",
                     "++workload.checkpoint.checkpoint_folder=ck_emulated"], tmp_path, nprocs=2)
    assert emulated.returncode == 0, emulated.stderr
    s = load(tmp_path / "emulated" / "summary.json")
    assert {"save_checkpoint_held_mean_seconds", "save_checkpoint_time_to_durable_mean_seconds"} <= set(s["metric"])
    for c in s["checkpoints"]["save"]:
        a = c["async"]
        assert 0 <= a["stalled_seconds_max"] <= a["held_seconds_max"] <= a["time_to_durable_seconds"] + 1e-6
    refused = dlio_here([*common, "++workload.mode=fsdp", "++workload.checkpoint.mtbf_hours=8"])  # bad input: here
    assert refused.returncode == 2
    assert "workload.checkpoint.mtbf_hours=8.0: applies to emulated runs only" in refused.stderr
