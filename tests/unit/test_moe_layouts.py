"""Mixtures of experts in the layouts: DeepSpeed's MoE files (from its source: names, writers, partitions),
the rules that refuse what a layout cannot write (exit 2 naming key, value and rule), the shipped MoE
workloads planned at their recipes' scale (runs end to end, with 2048 logical ranks on 4 processes:
tests/e2e/test_moe_layouts.py). Megatron's MoE files are held to its own saves in
``tests/against_frameworks/test_megatron_layout.py``, DCP's to ``dcp.save`` of torchtitan's placements in
``tests/against_frameworks/test_dcp_layout.py``."""

from __future__ import annotations

import json

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.errors import ConfigError
from dlio_ckpt.model.moe import MoeShape
from dlio_ckpt.plan.layouts import check_job, make_plan
from tests.support import DATA

RECIPES = {"deepseek_v3": 2048, "mixtral_8x7b": 64, "qwen3_235b_a22b": 128, "qwen3_30b_a3b": 16,
           "llama4_maverick": 512}


def tiny(*extra: str):
    """tiny_moe with ``extra``, checked as a job's (its layout's own rules too)."""
    workload = compose(["workload=tiny_moe", *extra], None)[0]
    check_job(workload)
    return workload


def test_deepspeed_writes_one_file_per_expert_and_moe_layer_from_expert_data_parallel_rank_0():
    """tiny_moe at 4 ranks: EP 2 (experts 0-3 on DP ranks 0 and 2, 4-7 on 1 and 3), 3 MoE blocks and the MTP
    module's, so 4 x 8 expert files, written by DP ranks 0 and 1 (expert-data-parallel rank 0)."""
    w = tiny()
    plan = make_plan(w, 4)
    plan.validate()
    names = {r.rank: [f.stem for f in r.files] for r in plan.ranks}
    assert names[0][-2] == "mp_rank_00_model_states"  # after its experts, as DeepSpeed saves them
    experts = {(r, n) for r, files in names.items() for n in files if "_expert_" in n}
    assert {r for r, _ in experts} == {0, 1}
    assert {n for r, n in experts if r == 1} == {f"layer_{L}_expert_{e}_mp_rank_00_model_states"
                                                 for L in range(4) for e in range(4, 8)}
    assert all(names[r][-1] == f"bf16_zero_pp_rank_{r}_mp_rank_00_optim_states" for r in range(4))
    s = MoeShape.from_model(w.model)
    one_expert = 3 * s.expert_ffn_hidden_size * s.hidden_size
    assert all(f.payload_bytes == 2 * one_expert for r in plan.ranks for f in r.files if "_expert_" in f.stem)
    dense = sum(p.numel for p in s.params if not p.experts and p.trainable)
    experts_local = one_expert * 4 * 4  # 4 experts per EP rank, 4 MoE blocks
    optimizer = [f for f in plan.ranks[3].files if f.kind == "optimizer"][0]
    # each group flattened and padded to a multiple of twice the ranks it is partitioned over (DP 4, EDP 2)
    assert optimizer.groups[0].numels == (-(-dense // 8) * 2,) * 3 + (1,) + (-(-experts_local // 4) * 2,) * 3 + (1,)


# What DeepSpeed 0.19.8 wrote for tiny_moe on 4 ranks (CPU accelerator, gloo, torch 2.13.0; its MoE layer per
# MoE block, AdamW, one step, save_checkpoint), EP 2 ZeRO 1 bf16 and EP 4 ZeRO 2 fp32: recorded by
# tests/oracles/deepspeed_moe_save.py (how to record again: tests/oracles/deepspeed_save.py's docstring)
DEEPSPEED_MOE = json.loads((DATA / "deepspeed_moe.json").read_text())
# DeepSpeed's own keys (ds_config, param_shapes, the experts' key names, the optimizer's bookkeeping, ...),
# which we do not write, measured in those saves: the bytes its files hold beyond ours, at most
THEIR_MOE_KEYS = {"model": 6208, "expert": 128, "optimizer": 4032}


@pytest.mark.parametrize("case", sorted(DEEPSPEED_MOE["cases"]))
def test_deepspeed_moe_files_are_what_deepspeed_wrote(case):
    """Rank by rank the names DeepSpeed's save wrote, and beside the step folder; every file's tensors to the
    byte, but for one thing DeepSpeed does that we do not: in a bf16 run it keeps fp32 buffers fp32
    (``engine.py`` ``_cast_module_mixed_precision``), here the router biases, which we write in the model's
    dtype; the rest within the measured size of DeepSpeed's own keys."""
    from dlio_ckpt.plan.formats import planned_size
    from dlio_ckpt.plan.formats.pt import PtFormat

    real = DEEPSPEED_MOE["cases"][case]
    w = tiny("++workload.checkpoint.layout=deepspeed", *real["overrides"])
    plan = make_plan(w, real["world"])
    assert [[f"{f.stem}.pt" for f in r.files] for r in plan.ranks] == real["ranks"]
    assert sorted(plan.folder_names) == real["beside_the_step"]  # written beside the step folder
    s = MoeShape.from_model(w.model)
    buffers = sum(p.numel for p in s.params if not p.trainable)
    for f in (f for r in plan.ranks for f in r.files):
        theirs = real["files"][f"{f.stem}.pt"]
        fp32_buffers = buffers * (4 - f.itemsize) if f.stem == "mp_rank_00_model_states" else 0
        assert f.payload_bytes + fp32_buffers == theirs["storage_bytes"], (f.stem, f.payload_bytes, theirs)
        assert sum(len(g.numels) for g in f.groups) == theirs["storages"], f.stem  # its records of data
        kind = "expert" if "_expert_" in f.stem else f.kind
        extra = theirs["bytes"] - fp32_buffers - planned_size(PtFormat(by_path=True), f)
        assert 0 <= extra <= THEIR_MOE_KEYS[kind], (f.stem, extra)


@pytest.mark.parametrize(("extra", "key", "rule"), [
    (["++workload.model.parallelism.zero_stage=3"], "workload.model.parallelism.zero_stage=3",
     "DeepSpeed refuses native MoE under ZeRO 3"),
    (["++workload.model.parallelism.pipeline=2"], "workload.model.parallelism.pipeline=2",
     "pipeline engine is not modelled"),
    (["++workload.model.parallelism.expert_tensor=2"], "workload.model.parallelism.expert_tensor=2",
     "must equal parallelism.tensor"),
    (["++workload.model.parallelism.expert=3"], "workload.model.parallelism.expert=3", "must divide moe.num_experts"),
    (["++workload.checkpoint.layout=dlio"], "workload.model.family='moe'", "has no mixture of experts"),
    (["++workload.checkpoint.layout=dcp"], "workload.model.mtp_layers=1", "torchtitan's DeepSeek-V3 has no"),
    (["~workload.model.transformer.kv_lora_rank"], "workload.model.transformer.kv_lora_rank=None",
     "is required with transformer.attention=mla"),
    (["++workload.model.moe.first_dense_layers=4"], "workload.model.moe.first_dense_layers=4", "leaves no MoE layer"),
    (["++workload.model.moe.experts_per_token=9"], "workload.model.moe.experts_per_token=9", "must be <="),
    (["++workload.model.family=dense"], "workload.model.moe={'num_experts': 8,", "applies to model.family=moe only"),
    (["++workload.model.parallelism.first_stage_layers=1"], "workload.model.parallelism.first_stage_layers=1",
     "means nothing with checkpoint.layout=deepspeed"),
    (["++workload.mode=fsdp"], "workload.model.family='moe'", "MoE models run emulated"),
    (["++workload.checkpoint.mode=subset", "++workload.model.parallelism.data=8"], "workload.checkpoint.mode='subset'",
     "with checkpoint.layout=deepspeed every rank writes"),
    (["++workload.model.transformer.qk_norm=true"], "workload.model.transformer.qk_norm=True",
     "applies to transformer.attention=gqa only"),
    (["++workload.checkpoint.layout=megatron", "++workload.model.transformer.tie_embeddings=true"],
     "workload.model.transformer.tie_embeddings=True", "is not modelled with checkpoint.layout=megatron"),
    (["++workload.checkpoint.layout=megatron", "++workload.model.parallelism.expert_tensor=3"],
     "workload.model.moe.expert_ffn_hidden_size=128", "multiple of model.parallelism.expert_tensor (3)"),
])
def test_what_a_layout_cannot_write_is_refused_naming_key_value_and_rule(extra, key, rule):
    with pytest.raises(ConfigError) as info:
        tiny(*extra)
    assert key in str(info.value) and rule in str(info.value)


@pytest.mark.parametrize(("extra", "message"), [
    (["++workload.model.transformer.qk_norm=true"], "transformer.qk_norm=True: applies to model.family=moe only"),
    (["++workload.model.parallelism.expert_tensor=2"], "parallelism.expert_tensor=2: applies to model.family=moe"),
])
def test_a_dense_workload_refuses_the_moe_keys(extra, message):
    with pytest.raises(ConfigError, match=message):
        compose(["workload=tiny", *extra], None)


@pytest.mark.parametrize(("extra", "world", "key", "rule"), [
    (["++workload.model.parallelism.tensor=2"], 12, "parallelism.expert=4",
     "must divide the data-parallel size 6"),  # DeepSpeed: EP within each data-parallel group
    (["++workload.checkpoint.layout=megatron", "++workload.model.parallelism.expert_tensor=4"], 4,
     "parallelism.expert=4", "x expert_tensor (4) must divide the 4 ranks of a pipeline stage"),
    (["++workload.checkpoint.layout=dcp", "++workload.model.mtp_layers=0", "++workload.model.moe.num_experts=12"], 8,
     "moe.num_experts=12", "FSDP2 gives each rank whole experts"),  # torchtitan's Shard(0): alike on every rank
    (["++workload.checkpoint.layout=dcp", "++workload.model.mtp_layers=0",
      "++workload.model.moe.expert_ffn_hidden_size=100"], 32, "moe.expert_ffn_hidden_size=100",
     "must divide by world / expert = 8"),  # torchtitan's Shard(1): each expert's rows over the other ranks
])
def test_expert_parallelism_that_does_not_fold_into_the_job_is_refused(extra, world, key, rule):
    w = tiny("++workload.model.parallelism.expert=4", *extra)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as info:
        check_job(w, world)
    assert rule in str(info.value)


@pytest.mark.parametrize("workload", sorted(RECIPES))
def test_every_shipped_moe_workload_plans_at_its_recipes_scale(workload):
    w = compose([f"workload={workload}"], None)[0]
    check_job(w, RECIPES[workload])
    plan = make_plan(w, RECIPES[workload])
    plan.validate()
    assert plan.num_parameters == MoeShape.from_model(w.model).num_parameters


@pytest.mark.parametrize("layout", ["dcp", "megatron"])
def test_bf16_moments_beside_fp32_master_weights_as_deepseek_v3_trains(layout):
    """DeepSeek-V3's report: AdamW's moments in bf16, master weights in fp32 (``model.moments_datatype``)."""
    extra = ["++workload.model.mtp_layers=0"] if layout == "dcp" else []
    both = [make_plan(tiny(f"++workload.checkpoint.layout={layout}", *extra, *m), 4)
            for m in ([], ["++workload.model.moments_datatype=bf16"])]
    items = [{(i.fqn, i.offsets, i.shape): i.dtype for r in p.ranks for f in r.files for i in f.items if i.dtype}
             for p in both]
    moments = [k for k in items[0] if ".exp_avg" in k[0]]
    masters = [k for k in items[0] if "state.param." in k[0] or (layout == "dcp" and k[0].startswith("model."))]
    assert moments and masters
    assert {items[1][k] for k in moments} == {"bf16"} and {items[0][k] for k in moments} == {"fp32"}
    assert {items[1][k] for k in masters} == {items[0][k] for k in masters}


def test_moments_datatype_is_refused_where_the_optimizer_files_hold_one_dtype():
    with pytest.raises(ConfigError, match="moments_datatype='bf16': means nothing with checkpoint.layout=deepspeed"):
        tiny("++workload.model.moments_datatype=bf16")
