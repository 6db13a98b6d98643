"""GPU code paths on a machine without a GPU, as processes: a gds run under mpiexec against the CPU stand-ins for
cupy and kvikio (tests/standins/README.md), and the real modes' GPU choices (FSDP keeping gloo on the CPU, a
failure in training named as one, Lightning asked for a GPU). In this process: tests/unit/test_gds_standin.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support import REPO
from tests.support.cli import dlio, load


@pytest.mark.mpi
def test_a_gds_run_says_in_its_summary_and_log_that_it_ran_in_compatibility_mode(gpu_standin, tmp_path):
    args = ["workload=tiny", "++workload.storage.storage_type=gds", "++workload.storage.storage_root=store",
            "++workload.checkpoint.fsync=True", "++hydra.run.dir=out"]
    r = dlio(args, tmp_path, nprocs=2, env=gpu_standin)
    assert r.returncode == 0, r.stderr
    storage = load(tmp_path / "out" / "summary.json")["io"]["storage"]
    assert storage["transport"] == "posix (cuFile compatibility mode)"
    assert storage["kvikio_version"].endswith("+standin")
    assert "storage_type=gds moves bytes by posix (cuFile compatibility mode)" in r.stdout


# One process of mode=fsdp with torch.distributed.checkpoint.save returning what torch 2.11 returns
# (Metadata without storage_data) and fully_shard recording the mesh it was given.
FSDP_AS_ON_TORCH_2_11 = """
import dataclasses, json, sys
import torch.distributed.checkpoint as dcp
from dlio_ckpt.run.real import fsdp_mode
from dlio_ckpt.cli.main import main
save, shard, meshes = dcp.save, fsdp_mode.fully_shard, []
dcp.save = lambda *a, **k: dataclasses.replace(save(*a, **k), storage_data=None)
def recording(module, mesh=None, **k):
    meshes.append(mesh.device_type if mesh is not None else None)
    return shard(module, mesh=mesh, **k)
fsdp_mode.fully_shard = recording
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "meshes": sorted(set(map(str, meshes)))}))
"""


@pytest.mark.real
def test_fsdp_counts_bytes_without_storage_data_and_keeps_gloo_on_the_cpu(tmp_path):
    pytest.importorskip("torch")
    args = ["workload=tiny", "++workload.mode=fsdp", "++workload.checkpoint.num_checkpoints_write=2",
            "++workload.checkpoint.num_checkpoints_read=1", "++hydra.run.dir=out",
            "++workload.model.model_datatype=bf16"]  # not fp16, which a CPU trains 20x slower
    r = subprocess.run([sys.executable, "-c", FSDP_AS_ON_TORCH_2_11, *args], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {"rc": 0, "meshes": ["cpu"]}
    summary = load(tmp_path / "out" / "summary.json")
    for save in summary["checkpoints"]["save"]:
        folder = tmp_path / "checkpoints" / "tiny" / f"global_epoch1_step{save['index']}"
        assert save["bytes"] == sum(f.stat().st_size for f in folder.iterdir()) > 0


FSDP_FAILING_STEP = """
import sys
from dlio_ckpt.run.real import fsdp_mode
from dlio_ckpt.cli.main import main
def step(*a, **k):
    raise RuntimeError("Expected all tensors to be on the same device")
fsdp_mode.train_step = step
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.real
def test_a_failure_in_training_is_not_labelled_a_storage_check(tmp_path):
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-c", FSDP_FAILING_STEP, "workload=tiny", "++workload.mode=fsdp"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode != 0
    assert "during train:" in r.stderr and "storage checks" not in r.stderr, r.stderr


@pytest.mark.real
def test_lightning_on_a_gpu_needs_one(tmp_path):
    r = dlio(["workload=lightning_demo", "++workload.lightning.accelerator=gpu"], tmp_path)
    assert r.returncode == 2
    assert "workload.lightning.accelerator='gpu'" in r.stderr and "needs a CUDA GPU" in r.stderr
    assert not (tmp_path / "hydra_log").exists() and not (tmp_path / "checkpoints").exists()
