"""The run skeleton every mode shares, and the checks that come before anything is written:
config-only rules before storage is touched, room for the run, option checks without the
backend's package, a plan validated once, the progress display without rich."""

from __future__ import annotations

import shutil

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.plan.layouts import make_plan

from .conftest import dlio
from .test_faults import tmpfs

BASE = ["workload=tiny", "++workload.checkpoint.checkpoint_folder=ck", "++hydra.run.dir=out"]


def test_a_run_that_cannot_fit_is_refused_before_writing(tmp_path):
    with tmpfs(tmp_path / "small", "size=16m") as mnt:
        r = dlio([*BASE, f"++workload.storage.storage_root={mnt}"], tmp_path, nprocs=2)
        assert r.returncode == 2, r.stderr
        assert "workload.checkpoint.checkpoint_folder='ck': needs 0.09 GiB (" in r.stderr, r.stderr
        assert f"and {mnt}/ck has 0.02 GiB (" in r.stderr and "free" in r.stderr
        assert not (tmp_path / "out").exists() and not any(mnt.iterdir())


def test_overwrite_counts_the_room_the_old_checkpoints_free(tmp_path):
    """Two runs of tiny fit a 128 MiB tmpfs one after the other only if the first's files go first."""
    with tmpfs(tmp_path / "fs", "size=128m") as mnt:
        args = [*BASE, f"++workload.storage.storage_root={mnt}", "--world-size", "2"]
        assert dlio(args, tmp_path).returncode == 0
        shutil.rmtree(tmp_path / "out")
        r = dlio([*args, "++workload.checkpoint.overwrite=True"], tmp_path)
        assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("extra,message", [
    (["++workload.checkpoint.format=raw"], "workload.checkpoint.format='raw': applies to emulated runs only"),
    (["++workload.storage.storage_options.spread_prefixes=4", "++workload.storage.storage_type=s3",
      "++workload.storage.storage_root=b"], "spread_prefixes=4: applies to emulated runs only"),
    (["++workload.model.model_datatype=int8"], "mode=fsdp trains in one of fp16, bf16, fp32, fp64"),
    (["++workload.storage.storage_type=null"], "mode=fsdp supports storage_type local_fs, parallel_fs, s3, gcs"),
])
def test_real_mode_rules_need_only_the_config(tmp_path, extra, message):
    """Checked when the workload is composed: ``plan`` (which builds no backend) refuses them too."""
    for command in (["plan"], []):
        r = dlio([*command, *BASE, "++workload.mode=fsdp", *extra], tmp_path)
        assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_plan_checks_options_of_a_backend_whose_package_is_missing(tmp_path):
    r = dlio(["plan", "workload=tiny", "--world-size", "2", "++workload.storage.storage_type=gds",
              "++workload.storage.storage_options.kvikio_thread=4"], tmp_path)
    assert r.returncode == 2
    assert "workload.storage.storage_options.kvikio_thread=4: unknown option for storage_type=gds" in r.stderr


def test_one_process_without_mpiexec_is_told_how_to_emulate_more_ranks(tmp_path):
    r = dlio(["workload=tiny"], tmp_path, env={"PYTHONPATH": ""})
    assert r.returncode == 2
    assert "tensor*pipeline=2 must divide the world size 1; or run 2 ranks in this one process with " \
           "--world-size 2" in r.stderr


def test_the_plan_is_validated_once_and_catches_a_broken_layout():
    plan = make_plan(compose(["workload=llama3_70b"])[0], 64)
    plan.validate()
    broken = type(plan)(plan.layout, plan.ranks[:-1] + (plan.ranks[0],))
    with pytest.raises(RuntimeError, match="ranks are not 0..world_size-1 in order; two ranks write the same file"):
        broken.validate()


def test_progress_falls_back_to_lines_without_rich(monkeypatch):
    from dlio_ckpt.run import progress

    monkeypatch.setattr(progress.sys.stdout, "isatty", lambda: True)
    assert isinstance(progress.progress_display(True), progress.ProgressBar)
    monkeypatch.setattr(progress, "find_spec", lambda name: None)
    assert isinstance(progress.progress_display(True), progress.ProgressLines)
