"""MLPerf Storage's facts that only real invocations record: a write run then a read run, and the gap between
them that ``check`` measures (the rules themselves: tests/unit/test_mlperf_editions.py)."""

from __future__ import annotations

from datetime import datetime

import pytest
import yaml

from dlio_ckpt.results.provenance import core_config
from tests.support.cli import dlio, load
from tests.support.mlperf_rules import said


@pytest.mark.mpi
def test_a_write_run_then_a_read_run_records_its_gap(tmp_path):
    """Two real invocations: the write-only run's end and the read-only run's start are recorded when
    each process started and ended, and check measures the gap between them."""
    base = ["workload=tiny", "++workload.checkpoint.checkpoint_folder=ck", "++workload.accelerator_type=b200"]
    w = dlio([*base, "++hydra.run.dir=w"], tmp_path, nprocs=2)
    assert w.returncode == 0, w.stderr
    r = dlio([*base, "++hydra.run.dir=r", "++workload.checkpoint.num_checkpoints_write=0",
              "++workload.checkpoint.num_checkpoints_read=1"], tmp_path, nprocs=2)
    assert r.returncode == 0, r.stderr
    write, read = load(tmp_path / "w" / "summary.json"), load(tmp_path / "r" / "summary.json")
    assert write["invocation_start_time"] < write["start"] < write["end"] <= write["invocation_end_time"]
    assert write["invocation_end_time"] < read["invocation_start_time"] < read["start"]
    assert write["file_systems"]["same_file_system"] is True and write["accelerator_type"] == "b200"
    gap = said([tmp_path / "w", tmp_path / "r"], "write-to-read gap")
    between = (datetime.fromisoformat(read["invocation_start_time"]) -
               datetime.fromisoformat(write["invocation_end_time"])).total_seconds()
    assert gap.startswith(f"{between:.1f} s from"), gap  # the gap the two summaries record, not a wall clock
    stamp = load(tmp_path / "w" / "provenance.json")
    assert stamp["core_config"]["hash"] == core_config(yaml.safe_load((tmp_path / "w" / ".hydra" / "config.yaml")
                                                                     .read_text())["workload"])["hash"]
    assert stamp["tool"]["algorithm"] == "sha256-tree" and len(stamp["tool"]["hash"]) == 64
