"""DLIO's keys agree with each other: ``checkpoint_size_GB`` and every save's and load's figure are taken over one
count of the checkpoint, DLIO's (its ``StatsCounter`` takes both throughputs as ``checkpoint_size`` over the
duration, and that size is the payload its ranks' states hold: docs/concepts/dlio-layout-spec.md). The stored
bytes a load restores (headers and ``.metadata`` too) are ours, named apart (``io.restore.bytes_restored``). Runs
in this process; the same keys of a run under mpiexec: tests/e2e/test_restore.py."""

from __future__ import annotations

import json

import pytest

from tests.support.workloads import DCP, datatypes

GIB = 1 << 30


def dlio_keys_agree(summary: dict, loaded_payload: int) -> None:
    """Each save over ``checkpoint_size_bytes``, each load over ``loaded_payload``, DLIO's means over those."""
    m = summary["metric"]
    assert m["checkpoint_size_GB"] == m["checkpoint_size_bytes"] / GIB
    for phase, payload in (("save", m["checkpoint_size_bytes"]), ("load", loaded_payload)):
        done = summary["checkpoints"][phase]
        if not done:
            continue
        for c in done:
            assert c["checkpoint_bytes"] == payload, (phase, c["checkpoint_bytes"], payload)
            assert c["throughput_GiB_per_second"] == pytest.approx(payload / GIB / c["duration_seconds"])
        assert m[f"{phase}_checkpoint_io_mean_GB_per_second"] == pytest.approx(
            sum(payload / GIB / c["duration_seconds"] for c in done) / len(done))


def test_a_resharded_load_and_its_read_only_restart_take_dlios_figures_over_checkpoint_size(tmp_path, dlio_here):
    """DCP saved at 4 ranks, loaded at 2 in the same run and again by a read-only run: checkpoint_size_GB, the save's
    and the load's figures all over the payload (40,971,420 B for tiny's dcp), while the stored bytes the load
    restores (41,908,341 B: the archives' headers and .metadata too) are io.restore.bytes_restored."""
    args = [*DCP, *datatypes("fp32"), "--world-size", "4", "++workload.restore.world_size=2",
            "++workload.checkpoint.num_checkpoints_read=1", "++workload.checkpoint.checkpoint_folder=ck",
            f"++workload.storage.storage_root={tmp_path / 'store'}"]
    for writes, folder in ((1, "both"), (0, "restart")):
        r = dlio_here([*args, f"++workload.checkpoint.num_checkpoints_write={writes}", f"++hydra.run.dir={folder}"])
        assert r.returncode == 0, r.stderr
        summary = json.loads((tmp_path / folder / "summary.json").read_text())
        size = summary["metric"]["checkpoint_size_bytes"]
        dlio_keys_agree(summary, size)
        restored = summary["io"]["restore"]["bytes_restored"]
        assert (size, restored) == (40_971_420, 41_908_341)  # the other count, named apart: headers and .metadata
        if writes:
            assert restored == summary["checkpoints"]["save"][0]["bytes"]  # every stored byte the save wrote, once


def test_a_model_only_load_is_taken_over_the_models_payload(tmp_path, dlio_here):
    """restore.model_only: the load's DLIO figure over the model's payload, its parameters at 4 bytes each (fp32),
    not over the checkpoint's."""
    from dlio_ckpt.config.compose import compose
    from dlio_ckpt.plan.layouts import make_plan

    over = [*DCP, *datatypes("fp32"), "++workload.restore.world_size=2", "++workload.restore.model_only=True"]
    r = dlio_here([*over, "--world-size", "4", "++workload.checkpoint.num_checkpoints_read=1", "++hydra.run.dir=run",
                   f"++workload.storage.storage_root={tmp_path / 'store'}"])
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    w, _, _ = compose(over)
    model = make_plan(w, 4).num_parameters * 4
    assert model < summary["metric"]["checkpoint_size_bytes"]
    dlio_keys_agree(summary, model)
