"""A synchronous save's copy of its tensors from the accelerators (``checkpoint.gpu_copy_gb_per_second``), modelled
where the saves play their framework's calls: tensor by tensor for DCP (its ``.cpu()`` of each tensor before
writing it), all of a rank's first for megatron-core (its preload before the writers start); reported apart, within
the save's time, and said on the console. Its worth is the rate's: the figure is the modelled time, worked out
from the bytes, which these tests hold to the plan's payload (no timer is a pass mark here)."""

from __future__ import annotations

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.plan.layouts import make_plan
from tests.support.cli import dlio, load

RATE = 0.2  # GB/s: slow enough that the copies are most of a tiny save
JOB = ["workload=tiny", "++workload.model.parallelism.tensor=1", "++workload.checkpoint.num_checkpoints_write=1",
       "++workload.checkpoint.num_checkpoints_read=0", f"++workload.checkpoint.gpu_copy_gb_per_second={RATE}"]


def saved(tmp_path, extra: list[str]) -> tuple[dict, str]:
    r = dlio([*JOB, *extra, "++workload.storage.storage_root=root", "hydra.run.dir=out"], tmp_path, nprocs=2)
    assert r.returncode == 0, r.stderr[-3000:]
    return load(tmp_path / "out" / "summary.json")["checkpoints"]["save"][0], r.stdout + r.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("layout", ["dcp", "megatron"])
def test_a_synchronous_save_copies_each_ranks_tensors_at_the_rate_within_its_time(tmp_path, layout):
    """One rank a process, one writer thread each (dcp) or a writer per file (megatron: the copy first): the
    copy takes the rank's tensor bytes at the rate, the slowest rank's reported, within the save's duration."""
    save, log = saved(tmp_path, [f"++workload.checkpoint.layout={layout}"])
    plan = make_plan(compose([*JOB, f"++workload.checkpoint.layout={layout}"], None)[0], 2)
    want = max(r.payload_bytes for r in plan.ranks) / (RATE * 1e9)
    assert save["device_copy_seconds_max"] == pytest.approx(want, rel=1e-9)
    assert save["duration_seconds"] > save["device_copy_seconds_max"]
    assert f"(of which {save['device_copy_seconds_max']:.3f} s copying from the accelerators)" in log


@pytest.mark.mpi
@pytest.mark.parametrize("extra", [["++workload.checkpoint.io_pattern=stream"],
                                   ["++workload.checkpoint.gpu_copy_gb_per_second=0"]],
                         ids=["stream", "host-memory"])
def test_no_copy_where_the_stream_measures_the_storage_or_the_state_is_in_host_memory(tmp_path, extra):
    save, log = saved(tmp_path, ["++workload.checkpoint.layout=dcp", *extra])
    assert "device_copy_seconds_max" not in save and "copying from the accelerators" not in log
