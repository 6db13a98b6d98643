"""Restores planned (``workload.restore``): what each loading rank reads of a save made at another world size or
tensor parallelism, which loads are not held to their framework's own, and the loads a layout's framework cannot
do, refused before anything is written (in this process; the one rule that depends on the job's processes is in
tests/e2e/test_restore.py, with the restores run end to end)."""

from __future__ import annotations

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.plan.layouts import make_plan, restore_plan
from tests.support.workloads import DCP

# tiny_moe in DCP's layout (torchtitan's: 8 routed experts over EP 2), saved at 4 ranks below
MOE_DCP = ["workload=tiny_moe", "++workload.checkpoint.layout=dcp", "++workload.model.mtp_layers=0"]


@pytest.mark.parametrize(("extra", "message"), [
    (["++workload.checkpoint.layout=deepspeed", "++workload.restore.world_size=2"],
     "workload.restore.world_size=2: must be the save's (4) with checkpoint.layout=deepspeed: DeepSpeed loads"),
    # ZeRO 3's load_module_only reads only empty placeholders (ZeRO 1 and 2's is modelled)
    (["++workload.checkpoint.layout=deepspeed", "++workload.model.parallelism.zero_stage=3",
      "++workload.restore.model_only=True"],
     "workload.restore.model_only=True: is not modelled with checkpoint.layout=deepspeed and "
     "model.parallelism.zero_stage=3"),
    (["++workload.checkpoint.layout=megatron", "++workload.restore.tensor=3"],
     "workload.restore.tensor=3: must divide model.transformer.num_attention_heads (8)"),
    ([*DCP[1:], "++workload.restore.tensor=2"], "workload.restore.tensor=2: means nothing with checkpoint.layout=dcp"),
    # torchtitan's expert mesh at the load's size, (world / EP, EP), must place the saved experts evenly
    ([*MOE_DCP, "++workload.restore.world_size=3"],
     "workload.restore.world_size=3: must be a multiple of model.parallelism.expert (2)"),
    ([*MOE_DCP, "++workload.restore.world_size=6"],
     "workload.restore.world_size=6: must divide model.moe.num_experts (8)"),
    ([*MOE_DCP, "++workload.model.moe.expert_ffn_hidden_size=100", "++workload.restore.world_size=16"],
     "workload.restore.world_size=16: makes FSDP2 split each routed expert's dim 1 (100) over world / expert = 8"),
])
def test_a_load_its_framework_cannot_do_is_refused_before_anything_is_written(tmp_path, dlio_here, extra, message):
    workload = [] if extra[0].startswith("workload=") else ["workload=tiny"]
    r = dlio_here([*workload, *extra, "--world-size", "4", "++workload.checkpoint.num_checkpoints_read=1",
                   f"++workload.storage.storage_root={tmp_path / 'store'}"])
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "store").exists()


def test_a_scaled_megatron_save_loads_at_another_tensor_parallelism_with_the_shapes_it_saved():
    """checkpoint.scale rounds widths to the save's TP: a load at TP 1 asks for the tensors as saved."""
    from dlio_ckpt.plan.layouts.megatron_restore import load_layout

    w, _, _ = compose(["workload=tiny", "++workload.checkpoint.layout=megatron", "++workload.checkpoint.scale=0.3",
                       "++workload.restore.tensor=1", "++workload.restore.world_size=2"], None)
    plan = make_plan(w, 4)
    loaded = load_layout(w, plan.layout, 2)
    assert {t.fqn: t.shape for t in loaded.tensors()} == {t.fqn: t.shape for t in plan.layout.tensors()}
    restore = restore_plan(w, plan)
    # at TP 1 every loading rank needs every tensor and object the save wrote, and reads every stored archive
    # whole: exact counts from the save's files, not from the restore's own figures
    saved_items = [i for r in plan.ranks for f in r.files for i in f.items]
    assert [r.needed for r in restore.ranks] == [sum(i.nbytes + len(i.pickled) for i in saved_items)] * 2
    stored = sum(f.size for r in plan.ranks for f in r.files)
    assert [sum(n for f in r.files for _, n in f.ranges) for r in restore.ranks] == [stored] * 2


@pytest.mark.parametrize(("extra", "caveat"), [
    (MOE_DCP, None),  # torchtitan's expert-parallel placement: tests/against_frameworks/test_moe_restore.py
    ([*MOE_DCP, "++workload.restore.world_size=2"], None),
    (["workload=tiny_moe", "++workload.checkpoint.layout=deepspeed"], None),  # test_deepspeed_restore.py
    (["workload=tiny", "++workload.checkpoint.layout=deepspeed", "++workload.model.parallelism.pipeline=2"],
     "not the framework's own load (DeepSpeed"),
    (DCP, None), (["workload=tiny", "++workload.checkpoint.layout=megatron"], None), (["workload=tiny"], None),
])
def test_which_loads_are_not_held_to_their_frameworks_own(extra, caveat):
    from dlio_ckpt.plan.layouts import load_caveat

    w, _, _ = compose(extra, None)
    said = load_caveat(w, restore_plan(w, make_plan(w, 4)))
    assert said == caveat if caveat is None else said.startswith(caveat), said
