"""The layouts run end to end under mpiexec: every layout on every backend, saved and loaded back verified with
the plan's files in each step, 1024 logical ranks on 4 processes, and a sweep over layouts with ``diff`` of its
points. The layouts' names and contents are held in tests/unit/test_layouts.py, to the frameworks' own saves in
tests/against_frameworks/."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.plan.layouts import file_format, make_plan
from tests.support.cli import dlio, load
from tests.support.workloads import DCP


@pytest.mark.mpi
@pytest.mark.parametrize("layout", ["deepspeed", "dcp", "megatron"])
def test_every_layout_on_every_backend(tmp_path, store, layout):
    """Two processes of 8 ranks, saved and loaded back verified; the step holds the plan's files."""
    extra = [f"++workload.checkpoint.layout={layout}", "++workload.checkpoint.scale=0.25",
             *(["++workload.model.parallelism.tensor=1", "++workload.checkpoint.files_per_rank=2"]
               if layout == "dcp" else [])]
    r = dlio(["workload=tiny", *extra, *store.overrides(), "--world-size", "8", f"hydra.run.dir={tmp_path / 'out'}"],
             tmp_path, nprocs=2, env=store.env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = load(tmp_path / "out" / "summary.json")
    assert summary["status"] == "ok" and summary["io"]["layout"] == layout
    assert summary["io"]["verified"] is (store.storage_type != "null")
    if store.storage_type != "null":
        workload, _, _ = compose(["workload=tiny", *extra], None)
        p, ext = make_plan(workload, 8), file_format(workload).extension
        backend = store.backend()
        found = {n.rsplit("/", 1)[-1] for n in backend.list_tree(backend.join("checkpoints/tiny/global_epoch1_step2"))}
        assert found == {f"{f.stem}{ext}" for r in p.ranks for f in r.files} | {c.name for c in p.coordinator}


@pytest.mark.mpi
@pytest.mark.parametrize("layout", ["dlio", "deepspeed", "dcp", "megatron"])
def test_1024_logical_ranks_on_4_processes_save_and_load_verified(tmp_path, layout):
    # Megatron's load: each of the 512 data-parallel replicas reads its whole tensor-parallel slice (half the
    # checkpoint here), as dist_checkpointing.load does: the model alone, its files shrunk, keep the test short.
    # DCP's load: each of the 1024 ranks unpickles .metadata, which lists every tensor's 1024 chunks (5 MB at 4
    # blocks: 10 of its 16 s here went to reading and verifying it 1024 times), and reads its items one by one:
    # one block has the same tensors' shapes and shards as four (blocks repeat), with a third of that to read
    scale = 0.02 if layout == "megatron" else 0.25
    extra = [f"++workload.checkpoint.layout={layout}", f"++workload.checkpoint.scale={scale}",
             *(["++workload.restore.model_only=True"] if layout == "megatron" else []),
             *(["++workload.model.parallelism.tensor=1", "++workload.model.num_layers=1"] if layout == "dcp" else [])]
    once = ["++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1"]  # not 2
    r = dlio(["workload=tiny", *extra, *once, "--world-size", "1024",
              f"++workload.storage.storage_root={tmp_path / 'store'}", f"hydra.run.dir={tmp_path / 'out'}"], tmp_path,
             nprocs=4, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = load(tmp_path / "out" / "summary.json")
    assert summary["io"]["layout"] == layout and summary["status"] == "ok"
    workload, _, _ = compose(["workload=tiny", *extra], None)
    p, ext = make_plan(workload, 1024), file_format(workload).extension
    step = tmp_path / "store" / "checkpoints" / "tiny" / "global_epoch1_step1"
    assert {f.name for f in step.iterdir()} == {f"{f.stem}{ext}" for r in p.ranks for f in r.files} | \
        {c.name for c in p.coordinator}  # DCP's .metadata.tmp renamed away


@pytest.mark.mpi
def test_a_sweep_over_layouts_and_diff_of_its_points(tmp_path, dlio_here):
    r = dlio(["sweep", *DCP, "++workload.checkpoint.layout=dlio,dcp", "++workload.checkpoint.scale=0.25",
              f"++workload.storage.storage_root={tmp_path / 'store'}", "++hydra.sweep.dir=sw"], tmp_path, nprocs=2)
    assert r.returncode == 0, r.stderr[-3000:]
    points = load(tmp_path / "sw" / "sweep.json")["points"]
    assert [p["status"] for p in points] == ["ok", "ok"]
    dirs = [Path(p["run_dir"]) for p in points]
    assert [load(d / "summary.json")["io"]["layout"] for d in dirs] == ["dlio", "dcp"]
    d = dlio_here(["diff", str(dirs[0]), str(dirs[1])])  # it reads the run folders: in this process
    assert "layouts differ: A dlio, B dcp" in d.stdout, d.stdout + d.stderr
