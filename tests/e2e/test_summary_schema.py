"""summary.json through its model, on what real runs write: every summary a quick run, a read-only run and a
sweep point write validates and is, byte for byte, the model's dump of itself (the model itself, DLIO's
summaries and made runs: tests/unit/test_summary_schema.py)."""

from __future__ import annotations

import pytest

from dlio_ckpt.results.schema import Summary
from tests.support.cli import dlio, load
from tests.support.summary_model import assert_is_the_models_dump

TINY = ["workload=tiny", "--world-size", "2", "++workload.checkpoint.checkpoint_folder=ck"]
RUNS = {  # the quick runs' shapes: every section a run without a server or a GPU writes
    "plain": ["++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1"],
    "tiered_async_goodput_scaled": [
        "++workload.checkpoint.num_checkpoints_write=2", "++workload.checkpoint.num_checkpoints_read=1",
        "++workload.checkpoint.async_save=True", "++workload.checkpoint.mtbf_hours=8",
        "++workload.checkpoint.time_between_checkpoints=0.2", "++workload.checkpoint.scale=0.5",
        "++workload.storage.storage_root=local", "++workload.tiers=[{storage_type: local_fs, storage_root: far}]"],
}


@pytest.mark.parametrize("shape", sorted(RUNS))
def test_a_runs_summary_is_the_models_dump_of_itself(tmp_path, shape):
    r = dlio([*TINY, "++hydra.run.dir=out", *RUNS[shape]], tmp_path)
    assert r.returncode == 0, r.stderr
    summary = assert_is_the_models_dump(tmp_path / "out" / "summary.json")
    assert isinstance(summary, Summary) and summary.ours and summary.status == "ok" and summary.processes == 1
    assert summary.metric.checkpoint_size_GB == summary.metric.checkpoint_size_GiB  # DLIO's GB is GiB
    assert summary.io is not None and summary.io.restore is not None and summary.io.restore.caveat is None
    raw = load(tmp_path / "out" / "summary.json")
    assert raw["accelerator_type"] is None and raw["io"]["restore"]["caveat"] is None  # null, not left out
    asked = ["goodput"] if shape == "tiered_async_goodput_scaled" else []
    assert list(raw) == [  # the order the run wrote before the model, DLIO's keys where DLIO has them
        "workload", "run_id", "world_size", "run_dir", "command", "invocation_start_time", "accelerator_type",
        "file_systems", "status", "num_processes", "num_hosts", "hostname", "start", "end", "invocation_end_time",
        "host_memory_GB", "hosts", "memory", "mode", "num_accelerators", "save_world_size", "load_world_size", "io",
        *asked, "async_save", "retries", "metric", "checkpoints", "latency"]
    assert list(raw["checkpoints"]["load"][0]) == [
        "index", "step", "bytes", "files", "checkpoint_bytes", "duration_seconds", "slowest_process",
        "fastest_process_duration_seconds", "start", "end", "throughput_GiB_per_second", "throughput_GB_per_second",
        "read_GiB_per_second", "coordination", "cpu", "latency", "stonewall"]
    if shape == "tiered_async_goodput_scaled":
        assert summary.checkpoints is not None and summary.goodput is not None and summary.io.scaled is not None
        saves, drains = summary.checkpoints.save, summary.checkpoints.phase("drain_tier1")
        assert len(saves) == 2 and len(drains) == 2 and all(c.async_ is not None and c.tiers for c in saves)
        assert "async" in raw["checkpoints"]["save"][0] and "async_" not in raw["checkpoints"]["save"][0]
        assert summary.metric.figures()["save_checkpoint_time_to_durable_tier1_mean_seconds"] > 0
        assert summary.io.scaled.projected_full_size is not None and summary.goodput.durable_on_tiers == [0]
    else:
        assert summary.goodput is None and summary.io.scaled is None and "goodput" not in raw


def test_a_read_only_run_and_a_sweep_point_are_the_models_dumps(tmp_path):
    first = dlio([*TINY, "++hydra.run.dir=write", *RUNS["plain"]], tmp_path)
    assert first.returncode == 0, first.stderr
    read = dlio([*TINY, "++hydra.run.dir=read", "++workload.checkpoint.num_checkpoints_write=0",
                 "++workload.checkpoint.num_checkpoints_read=1"], tmp_path)
    assert read.returncode == 0, read.stderr
    only_read = assert_is_the_models_dump(tmp_path / "read" / "summary.json")
    assert isinstance(only_read, Summary) and only_read.checkpoints is not None
    assert only_read.checkpoints.save == [] and only_read.metric.save_checkpoint_io_mean_GB_per_second is None
    assert only_read.save_world_size is None and only_read.load_world_size == 2
    sweep = dlio(["sweep", "workload=tiny", "--world-size", "2", "++workload.checkpoint.checkpoint_folder=points",
                  *RUNS["plain"], "++workload.checkpoint.chunk_size=1048576,2097152", "++hydra.sweep.dir=sw"], tmp_path)
    assert sweep.returncode == 0, sweep.stderr
    points = sorted((tmp_path / "sw").glob("*/summary.json"))
    assert len(points) == 2
    for point in points:
        assert isinstance(assert_is_the_models_dump(point), Summary)
