"""The run skeleton every mode shares, and the checks that come before anything is written:
config-only rules before storage is touched, option checks without the backend's package, a plan
validated once, the progress display without rich (in this process; room for the run, on a real small
file system: tests/e2e/test_skeleton.py)."""

from __future__ import annotations

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.plan.layouts import make_plan
from tests.support.workloads import TINY_CK_OUT


@pytest.mark.parametrize("extra,message", [
    (["++workload.checkpoint.format=raw"], "workload.checkpoint.format='raw': applies to emulated runs only"),
    (["++workload.storage.storage_options.spread_prefixes=4", "++workload.storage.storage_type=s3",
      "++workload.storage.storage_root=b"], "spread_prefixes=4: applies to emulated runs only"),
    (["++workload.model.model_datatype=int8"], "mode=fsdp trains in one of fp16, bf16, fp32, fp64"),
    (["++workload.storage.storage_type=null"], "mode=fsdp supports storage_type local_fs, parallel_fs, s3, gcs"),
])
def test_real_mode_rules_need_only_the_config(tmp_path, dlio_here, extra, message):
    """Checked when the workload is composed: ``plan`` (which builds no backend) refuses them too."""
    for command in (["plan"], []):
        r = dlio_here([*command, *TINY_CK_OUT, "++workload.mode=fsdp", *extra])
        assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_plan_checks_options_of_a_backend_whose_package_is_missing(dlio_here):
    r = dlio_here(["plan", "workload=tiny", "--world-size", "2", "++workload.storage.storage_type=gds",
                   "++workload.storage.storage_options.kvikio_thread=4"])
    assert r.returncode == 2
    assert "workload.storage.storage_options.kvikio_thread=4: unknown option for storage_type=gds" in r.stderr


def test_one_process_without_mpiexec_is_told_how_to_emulate_more_ranks(dlio_here):
    r = dlio_here(["workload=tiny"])
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
