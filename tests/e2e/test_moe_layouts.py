"""Mixtures of experts run end to end: each layout saves and loads, the files on disk are the plan's (and what a
load reports read is what the kernel returned, under strace), and 2048 logical ranks run on 4 processes. The
layouts' MoE files and rules: tests/unit/test_moe_layouts.py."""

from __future__ import annotations

import json
import shutil

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.plan.layouts import make_plan
from tests.support.cli import dlio, load
from tests.support.strace_calls import traced_load


def tiny(*extra: str):
    return compose(["workload=tiny_moe", *extra], None)[0]



@pytest.mark.parametrize("layout", ["deepspeed", "megatron", "dcp"])
def test_an_moe_job_saves_and_loads_end_to_end(tmp_path, layout):
    extra = ["++workload.model.mtp_layers=0"] if layout == "dcp" else []  # torchtitan has no MTP module
    r = dlio(["workload=tiny_moe", f"++workload.checkpoint.layout={layout}", "++workload.storage.storage_root=data",
              "++hydra.run.dir=run", "--world-size", "4", *extra], tmp_path, nprocs=2)
    assert r.returncode == 0, r.stderr
    summary = load(tmp_path / "run" / "summary.json")
    assert summary["status"] == "ok"
    steps = sorted((tmp_path / "data" / "checkpoints" / "tiny_moe").glob("global_epoch1_step*[0-9]"))
    saves, loads = summary["checkpoints"]["save"], summary["checkpoints"]["load"]
    assert len(steps) == len(saves) > 0 and len(loads) > 0
    for step in steps:
        on_disk = {p.name: p.stat().st_size for p in step.iterdir()}
        if layout == "deepspeed":  # names held to DeepSpeed's own in the tests above
            plan = make_plan(tiny(f"++workload.checkpoint.layout={layout}", *extra), 4)
            assert sorted(on_disk) == sorted([f.stem + ".pt" for r in plan.ranks for f in r.files])
            # and what every save writes beside the steps (latest: a step's name, as long for each step here)
            on_disk |= {name: (step.parent / name).stat().st_size for name in plan.folder_names}
        else:  # torch.distributed.checkpoint's names: .metadata and a file per rank and writer thread (Megatron's
            # torch_dist: 2 threads, and its metadata.json and common.pt beside them)
            threads, beside = (2, ["metadata.json", "common.pt"]) if layout == "megatron" else (1, [])
            assert sorted(on_disk) == sorted([f"__{r}_{t}.distcp" for r in range(4) for t in range(threads)]
                                             + [".metadata", *beside])
        # what each save reports written is what lies on disk, to the byte
        assert {c["bytes"] for c in saves} == {sum(on_disk.values())}, (saves, on_disk)
    assert all(c["duration_seconds"] > 0 for c in saves + loads)
    # what a load reports read is what the kernel returned to its read calls on the step's files (strace): exact
    shutil.copytree(steps[0], tmp_path / "ck" / steps[0].name)
    shutil.copy(steps[0].with_name(steps[0].name + ".manifest.json"), tmp_path / "ck")
    traced, read = traced_load(tmp_path, ["workload=tiny_moe", f"++workload.checkpoint.layout={layout}",
                                           "++workload.checkpoint.checkpoint_folder=ck", "--world-size", "4",
                                           "++workload.checkpoint.num_checkpoints_write=0",
                                           "++workload.checkpoint.num_checkpoints_read=1", "++hydra.run.dir=traced",
                                           *extra])
    (loaded,) = traced["checkpoints"]["load"]
    assert loaded["bytes"] == read > 0


def test_2048_logical_ranks_of_an_moe_job_run_on_4_processes(tmp_path):
    """Every rank's files saved and loaded back verified. The model is tiny_moe cut to one dense and one MoE block
    (no MTP module) and its files to 2% (``checkpoint.scale``): what is held is 2048 ranks' files on 4 processes,
    which no byte count changes, while at full size every rank's load of the dense model's whole file (DeepSpeed's)
    made 22 GB to read and verify (the test took 35 s here at full size, 19 s cut)."""
    r = dlio(["workload=tiny_moe", "++workload.model.parallelism.expert=8", "++workload.model.num_layers=2",
              "++workload.model.mtp_layers=0", "++workload.checkpoint.scale=0.02",
              "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1",
              "++workload.storage.storage_root=data", "++hydra.run.dir=run", "--world-size", "2048"], tmp_path,
             nprocs=4, timeout=300)
    assert r.returncode == 0, r.stderr
    step = tmp_path / "data" / "checkpoints" / "tiny_moe" / "global_epoch1_step1"
    assert len(list(step.iterdir())) == 2048 + 1 + 8  # optimizer files, the dense model, 1 MoE layer x 8 experts
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "ok" and (summary["num_accelerators"], summary["num_processes"]) == (2048, 4)
    assert summary["io"]["verified"] and len(summary["checkpoints"]["load"]) == 1
