"""``checkpoint.layout=lightning`` as a user runs it, without torch in the run: the demo workload in the emulated mode
writes one ``.ckpt`` per step, of the plan's size (the real mode's prediction), played as Lightning's
TorchCheckpointIO writes it, and loads it back verified; torch.load then opens what it wrote. The layout's plan,
bytes and refusals are in tests/unit/test_lightning_layout.py."""

from __future__ import annotations

import torch

from dlio_ckpt.config import compose
from dlio_ckpt.model.lightning_demo import predict
from dlio_ckpt.plan.layouts import file_format, make_plan
from tests.support.cli import dlio, load

LIGHTNING = ["workload=lightning_demo", "++workload.mode=emulated", "++workload.checkpoint.layout=lightning",
             "++workload.model.num_layers=2"]


def test_the_demo_saves_one_ckpt_of_the_planned_size_and_loads_it_verified(tmp_path):
    once = ["++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1"]
    r = dlio([*LIGHTNING, *once, f"++workload.storage.storage_root={tmp_path / 'store'}",
              f"hydra.run.dir={tmp_path / 'out'}"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = load(tmp_path / "out" / "summary.json")
    assert summary["status"] == "ok" and summary["io"]["layout"] == "lightning"
    assert summary["io"]["verified"] is True
    assert summary["io"]["restore"]["frameworks_own_load"] is True
    assert summary["io"]["format"] == "ckpt" and summary["io"]["io_pattern"] == "framework"
    assert "TorchCheckpointIO" in summary["io"]["framework_writer"]  # the saves play its calls
    workload, _, _ = compose(LIGHTNING, None)
    f = make_plan(workload, 1).ranks[0].files[0]
    step = tmp_path / "store" / "checkpoints" / "lightning_demo" / "global_epoch1_step1"
    assert [(p.name, p.stat().st_size) for p in step.iterdir()] == \
        [(f"{f.stem}{file_format(workload).extension}", predict(workload).file_bytes)]
    loaded = torch.load(step / "checkpoint.ckpt", weights_only=True)  # the synthetic bytes as tensors
    assert len(loaded["state_dict"]) == predict(workload).num_tensors
