"""Async checkpoints' arithmetic: the measured goodput and the what-if model on values worked out by hand, and
``plan``'s answer in words; real staging and training memory larger than host memory refused, and the training
interval's memory written, handed back and reported (in this process). Async saves run under mpiexec in
tests/e2e/test_async.py."""

from __future__ import annotations

import json
import math

from tests.support.workloads import LLAMA_7B_88MIB


def test_the_measured_goodput_on_values_worked_out_by_hand():
    from dlio_ckpt.results.goodput import figures

    g = figures(600, held=2, durable=10, load=30, mtbf_hours=10)  # M = 36000 s; lost = 300 + 10 + 30
    assert g["lost_per_failure_seconds"] == 340
    assert math.isclose(g["goodput"], 0.987265, rel_tol=1e-6)  # 600/602 * (1 - 340/36000)
    assert g["optimal_interval_seconds"] == 379.4733192202055  # sqrt(2 * 2 * 36000) = sqrt(144000)


def test_real_staging_larger_than_host_memory_is_refused(tmp_path, dlio_here):
    r = dlio_here([*LLAMA_7B_88MIB, "++workload.checkpoint.scale=1", "++workload.checkpoint.async_save=True",
                   "++workload.checkpoint.staging=real", "++hydra.run.dir=big"])
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


def test_plan_answers_the_what_if_in_words_without_writing_anything(tmp_path, dlio_here):
    """The case that once reported goodput 0.80 for a 48.9 s write every 5 s: now the stall, the
    held time and the goodput that follow, and with a slow drain no goodput at all, saying why."""
    base = ["plan", "workload=llama3_70b", "--world-size", "64", "--write-bandwidth", "20GB/s",
            "--read-bandwidth", "40GB/s", "--mtbf-hours", "8", "++workload.checkpoint.async_save=True",
            "++workload.checkpoint.time_between_checkpoints=5"]
    r = dlio_here([*base, "--format", "json"])
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    g, size = out["goodput"], out["total_payload_bytes"]
    assert size == 978406572032 and math.isclose(g["write_seconds"], 48.9203286016)  # bytes / 20e9
    assert g["write_keeps_up"] is False and math.isclose(g["stalled_seconds_per_checkpoint"], 43.9203286016)
    assert g["goodput"] < 0.11
    table = dlio_here([*base, "--drain-bandwidth", "1GB/s"])
    assert table.returncode == 0, table.stderr
    assert "drain_keeps_up: False" in table.stdout and "goodput: none (see verdict)" in table.stdout
    assert "verdict: the background write (48.92 s) does not fit in the 5 s interval" in table.stdout
    assert "no steady goodput follows at this interval" in table.stdout
    bad = dlio_here(["plan", "workload=tiny", "--world-size", "2", "--write-bandwidth", "fast", "--read-bandwidth",
                     "1GB/s", "--mtbf-hours", "8"])
    assert bad.returncode == 2 and "--write-bandwidth='fast': must be a positive rate" in bad.stderr
    assert not list(tmp_path.iterdir())


def test_a_training_interval_writes_its_memory_afresh_and_hands_it_back():
    """checkpoint.training_memory_gb: every byte of it resident during the interval (the peak), none of it held
    after (the save's page cache takes the pages it freed)."""
    import threading

    from dlio_ckpt.cluster.host import peak_rss, proc_bytes, reset_peak_rss
    from dlio_ckpt.run.emulated.background import train

    size = 96 << 20

    def rss() -> int:
        return proc_bytes("/proc/self/status", "VmRSS") or 0

    train(0.0, "sleep", threading.Event(), size)  # once, so that what python keeps for itself is there already
    reset_peak_rss()
    held = rss()
    train(0.0, "sleep", threading.Event(), size)
    assert peak_rss() - held >= 0.9 * size  # (slack: the interpreter's own memory moves too)
    assert rss() - held < size // 4


def test_writing_the_training_memory_is_part_of_the_interval_and_a_failure_elsewhere_stops_it(monkeypatch):
    """The interval's sleep is what the writing left of it, not the whole interval on top (a clock that moves a
    second a reading: the writing read it twice); with the alarm up (a background thread failed) nothing is
    written and nothing is slept."""
    import threading

    from dlio_ckpt.cluster.host import peak_rss, reset_peak_rss
    from dlio_ckpt.run.emulated import background

    class Clock:
        now = 0.0

        def perf_counter(self) -> float:
            self.now += 1.0
            return self.now

    class Alarm:
        up, waited = False, []

        def is_set(self) -> bool:
            return self.up

        def wait(self, seconds: float) -> bool:
            self.waited.append(seconds)
            return self.up

    monkeypatch.setattr(background, "time", Clock())
    alarm = Alarm()
    writing, interval = background.train(10.0, "sleep", alarm, 1 << 20)  # type: ignore[arg-type]
    assert writing == 1.0 and alarm.waited == [8.0] and interval == 3.0  # readings 1 (start), 2 (written), 3 (wait)
    monkeypatch.undo()
    up = threading.Event()
    up.set()
    reset_peak_rss()
    before = peak_rss()
    background.train(60.0, "sleep", up, 4 * background.WARM_PIECE)  # returns at once: the test would hang otherwise
    assert peak_rss() - before < background.WARM_PIECE


def test_training_memory_that_would_leave_a_host_none_is_refused(tmp_path, dlio_here):
    r = dlio_here(["workload=tiny", "--world-size", "2", "++workload.checkpoint.training_memory_gb=100000",
                   f"++workload.storage.storage_root={tmp_path / 'root'}", "++hydra.run.dir=big"])
    assert r.returncode == 2, r.stderr
    assert "workload.checkpoint.training_memory_gb=100000.0: each process writes 100000 GB afresh" in r.stderr
    assert "at most 95% may be used" in r.stderr
    assert not list(tmp_path.iterdir())
    endless = dlio_here(["workload=tiny", "--world-size", "2", "++workload.checkpoint.training_memory_gb=inf",
                         "++hydra.run.dir=big"])
    assert endless.returncode == 2 and "workload.checkpoint.training_memory_gb" in endless.stderr, endless.stderr
    assert "finite" in endless.stderr and not list(tmp_path.iterdir())


def test_summary_gives_what_each_interval_spent_writing_its_training_memory(tmp_path, dlio_here):
    r = dlio_here(["workload=tiny", "--world-size", "2", "++workload.checkpoint.training_memory_gb=0.02",
                   "++workload.checkpoint.num_checkpoints_write=2", "++workload.checkpoint.num_checkpoints_read=0",
                   "++workload.checkpoint.time_between_checkpoints=0", "++workload.checkpoint.progress=False",
                   f"++workload.storage.storage_root={tmp_path / 'root'}", "++hydra.run.dir=out"])
    assert r.returncode == 0, r.stderr
    memory = json.loads((tmp_path / "out" / "summary.json").read_text())["training_memory"]
    assert memory["gb_per_process"] == 0.02 and memory["interval_seconds"] == 0 and len(memory["seconds_max"]) == 2
    none = dlio_here(["workload=tiny", "--world-size", "2", "++workload.checkpoint.training_memory_gb=0.02",
                      "++workload.checkpoint.num_checkpoints_write=0", "++workload.checkpoint.num_checkpoints_read=0",
                      "++workload.checkpoint.progress=False", f"++workload.storage.storage_root={tmp_path / 'root'}",
                      "++hydra.run.dir=none"])
    assert none.returncode == 0, none.stderr  # no interval trained, none reported
    assert "training_memory" not in json.loads((tmp_path / "none" / "summary.json").read_text())
