"""A synchronous save's copy of its tensors from the accelerators (``checkpoint.gpu_copy_gb_per_second``), modelled
where the saves play their framework's calls: tensor by tensor for DCP (its ``.cpu()`` of each tensor before
writing it), all of a rank's first for megatron-core (its preload before the writers start); and a load's copy of
what each rank needs back to its accelerator, after its reads; reported apart, within the operation's time, and said
on the console. Its worth is the rate's: the figure is the modelled time, worked out
from the bytes, which these tests hold to the plan's payload (no timer is a pass mark here)."""

from __future__ import annotations

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.plan.layouts import make_plan, restore_plan
from tests.support.cli import dlio, load

RATE = 0.2  # GB/s: slow enough that the copies are most of a tiny save
JOB = ["workload=tiny", "++workload.model.parallelism.tensor=1", "++workload.checkpoint.num_checkpoints_write=1",
       "++workload.checkpoint.num_checkpoints_read=1", f"++workload.checkpoint.gpu_copy_gb_per_second={RATE}"]


def saved(tmp_path, extra: list[str]) -> tuple[dict, dict, str]:
    """The save's and the load's figures of one run, and its console."""
    r = dlio([*JOB, *extra, "++workload.storage.storage_root=root", "hydra.run.dir=out"], tmp_path, nprocs=2)
    assert r.returncode == 0, r.stderr[-3000:]
    checkpoints = load(tmp_path / "out" / "summary.json")["checkpoints"]
    return checkpoints["save"][0], checkpoints["load"][0], r.stdout + r.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("layout", ["dcp", "megatron"])
def test_a_save_and_a_load_copy_each_ranks_tensors_at_the_rate_within_their_time(tmp_path, layout):
    """One rank a process, one writer thread each (dcp) or a writer per file (megatron: the copy first): the
    copy takes the rank's tensor bytes at the rate, the slowest rank's reported, within the save's duration; the
    load (at the save's world size) copies back what each rank needs: the restore's bytes needed per rank, the figure
    summary.json gives (held to the framework's own loads by the restore tests), at least the rank's own tensors
    (what this test knows apart from the restore)."""
    save, loaded, log = saved(tmp_path, [f"++workload.checkpoint.layout={layout}"])
    workload = compose([*JOB, f"++workload.checkpoint.layout={layout}"], None)[0]
    plan = make_plan(workload, 2)
    # a load needs its own tensors, and the replicated items and objects another rank's file holds
    needed = [r.needed for r in restore_plan(workload, plan).ranks]
    assert all(n >= r.payload_bytes for n, r in zip(needed, plan.ranks, strict=True))
    for op, nbytes, said in ((save, [r.payload_bytes for r in plan.ranks], "from"), (loaded, needed, "to")):
        assert op["device_copy_seconds_max"] == pytest.approx(max(nbytes) / (RATE * 1e9), rel=1e-9)
        assert op["duration_seconds"] > op["device_copy_seconds_max"]
        assert f"(of which {op['device_copy_seconds_max']:.3f} s copying {said} the accelerators)" in log


@pytest.mark.mpi
@pytest.mark.parametrize("extra", [["++workload.checkpoint.io_pattern=stream"],
                                   ["++workload.checkpoint.gpu_copy_gb_per_second=0"]],
                         ids=["stream", "host-memory"])
def test_no_copy_where_the_stream_measures_the_storage_or_the_state_is_in_host_memory(tmp_path, extra):
    save, loaded, log = saved(tmp_path, ["++workload.checkpoint.layout=dcp", *extra])
    assert "device_copy_seconds_max" not in save and "device_copy_seconds_max" not in loaded
    assert "copying from the accelerators" not in log and "copying to the accelerators" not in log
