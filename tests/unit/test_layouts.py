"""The layouts side by side: DeepSpeed's names and files held to its real saves (recorded by
``tests/oracles/deepspeed_save.py``), the same bytes as DLIO's, and one registry behind the config's choices."""

from __future__ import annotations

import json

import pytest

from dlio_ckpt.config import Checkpoint, compose
from dlio_ckpt.plan.layouts import make_plan
from tests.support import DATA


def plan(layout: str, world: int, *extra: str):
    workload, _, _ = compose(["workload=tiny", f"++workload.checkpoint.layout={layout}", *extra], None)
    p = make_plan(workload, world)
    p.validate()
    return p


def names(p) -> list[list[str]]:
    return [[f.stem for f in r.files] for r in p.ranks]


# tiny's parameters counted by hand (configs/workload/tiny.yaml: hidden 256, FFN 688, vocab 1000, 8 heads and 4 KV
# heads of 32): a block's TP-split weights (q and o 256x256, k and v 256x128, gate, up, down 256x688), its two
# replicated RMSNorms, the embedding and output head (1000x256 each, split by vocabulary under TP) and the final norm
H, FFN, VOCAB, KV = 256, 688, 1000, 4 * 32
SPLIT, NORMS, TABLE = 2 * H * H + 2 * H * KV + 3 * H * FFN, 2 * H, VOCAB * H
TP2 = 4 * (SPLIT // 2 + NORMS) + 2 * TABLE // 2 + H  # each TP rank's share of the 4 blocks: 1,708,288
STAGE0, STAGE1 = TABLE + 2 * (SPLIT + NORMS), 2 * (SPLIT + NORMS) + H + TABLE  # PP 2: embedding+2, 2+norm+head


@pytest.mark.parametrize(("extra", "expected", "parameters"), [
    (["++workload.model.model_datatype=bf16"],  # TP 2 x DP 2, ZeRO 1: DP rank 0 writes each TP rank's model states
     [["mp_rank_00_model_states", "bf16_zero_pp_rank_0_mp_rank_00_optim_states"],
      ["mp_rank_01_model_states", "bf16_zero_pp_rank_0_mp_rank_01_optim_states"],
      ["bf16_zero_pp_rank_1_mp_rank_00_optim_states"], ["bf16_zero_pp_rank_1_mp_rank_01_optim_states"]], [TP2] * 4),
    (["++workload.model.parallelism.zero_stage=3"],  # every rank its model and optimizer shards (fp16: no prefix)
     [["zero_pp_rank_0_mp_rank_00_model_states", "zero_pp_rank_0_mp_rank_00_optim_states"],
      ["zero_pp_rank_0_mp_rank_01_model_states", "zero_pp_rank_0_mp_rank_01_optim_states"],
      ["zero_pp_rank_1_mp_rank_00_model_states", "zero_pp_rank_1_mp_rank_00_optim_states"],
      ["zero_pp_rank_1_mp_rank_01_model_states", "zero_pp_rank_1_mp_rank_01_optim_states"]], [TP2] * 4),
    (["++workload.model.parallelism.tensor=1", "++workload.model.parallelism.pipeline=2"],  # a file per layer
     [["layer_00-model_00-model_states", "layer_01-model_00-model_states", "layer_02-model_00-model_states",
       "zero_pp_rank_0_mp_rank_00_optim_states"],
      ["layer_03-model_00-model_states", "layer_04-model_00-model_states", "layer_05-model_00-model_states",
       "layer_06-model_00-model_states", "zero_pp_rank_0_mp_rank_01_optim_states"],
      ["zero_pp_rank_1_mp_rank_00_optim_states"], ["zero_pp_rank_1_mp_rank_01_optim_states"]],
     [STAGE0, STAGE1, STAGE0, STAGE1]),
])
def test_deepspeed_names_and_what_its_files_hold(extra, expected, parameters):
    """``parameters``: each rank's model-parallel share of the model, counted by hand above, not by the layout."""
    ds = plan("deepspeed", 4, *extra)
    assert names(ds) == expected
    lay = ds.layout
    for r, mine in zip(ds.ranks, parameters, strict=True):  # DP 2: each rank half its share (rounded up), fp32
        (optim,) = [f for f in r.files if f.kind == "optimizer"]  # master weight, exp_avg, exp_avg_sq, and a step
        assert optim.payload_bytes == 4 * (3 * -(-mine // 2) + 1), (r.rank, optim.payload_bytes, mine)
        for f in r.files:  # ZeRO 3's model files are placeholders; ZeRO 1/2's hold the weights
            if f.kind == "model":
                assert (f.payload_bytes == 0) is (lay.zero_stage == 3)


# What DeepSpeed 0.19.8 wrote (CPU accelerator, gloo, torch 2.13.0) for tiny's tensors at TP 2, ZeRO 1, 2 and 3,
# bf16 and fp32, DP 2 and 3: recorded by tests/oracles/deepspeed_save.py (its docstring: how to record again)
DEEPSPEED_DENSE = json.loads((DATA / "deepspeed_dense.json").read_text())
# DeepSpeed's own keys, which we do not write (ds_config, param_shapes, ds_version, the optimizer's settings
# and partition bookkeeping, the model's parameter names and views of its flat buffer, ...), measured in those
# saves: the bytes its files hold beyond ours, at most
THEIR_KEYS = {"model": 6656, "placeholder": 5056, "optimizer": 2112}


@pytest.mark.parametrize("case", sorted(DEEPSPEED_DENSE["cases"]))
def test_deepspeed_files_are_what_deepspeed_wrote(case):
    """Rank by rank the names DeepSpeed's save wrote, and those beside the step folder; every file's tensors to
    the byte (the storages in its zip, as many); the rest within the measured size of DeepSpeed's own keys."""
    from dlio_ckpt.plan.formats import planned_size
    from dlio_ckpt.plan.formats.pt import PtFormat
    from dlio_ckpt.plan.view import plan_table

    real = DEEPSPEED_DENSE["cases"][case]
    p = plan("deepspeed", real["world"], f"++workload.model.parallelism.tensor={real['tensor']}",
             f"++workload.model.parallelism.zero_stage={real['zero_stage']}",
             f"++workload.model.model_datatype={real['dtype']}")
    assert [[f"{f.stem}.pt" for f in r.files] for r in p.ranks] == real["ranks"]
    assert sorted(p.folder_names) == real["beside_the_step"]
    assert "beside the step folders, at every save: zero_to_fp32.py (38,580 B), zero_to_torch.py (2,490 B), latest " \
           "(the step's name)" in plan_table(p, PtFormat(by_path=True))
    for f in (f for r in p.ranks for f in r.files):
        theirs = real["files"][f"{f.stem}.pt"]
        assert f.payload_bytes == theirs["storage_bytes"], (f.stem, f.payload_bytes, theirs)
        assert sum(len(g.numels) for g in f.groups) == theirs["storages"], f.stem  # its records of data
        kind = "placeholder" if f.kind == "model" and f.payload_bytes == 0 else f.kind
        extra = theirs["bytes"] - planned_size(PtFormat(by_path=True), f)
        assert 0 <= extra <= THEIR_KEYS[kind], (f.stem, extra)


def test_the_config_choices_are_the_registries():
    from dlio_ckpt.config import Storage, Workload
    from dlio_ckpt.registry import BACKENDS, FORMATS, LAYOUTS, MODES

    layouts = ("dlio", "deepspeed", "dcp", "megatron", "lightning")
    assert Checkpoint.model_fields["layout"].annotation.__args__ == layouts
    assert Checkpoint.model_fields["layout"].annotation.__args__ == LAYOUTS.names
    assert Checkpoint.model_fields["format"].annotation.__args__ == ("pt", "raw", "safetensors", "hdf5")
    assert Checkpoint.model_fields["format"].annotation.__args__ == FORMATS.names
    assert Workload.model_fields["mode"].annotation.__args__ == ("emulated", "lightning", "fsdp", "gds")
    assert Workload.model_fields["mode"].annotation.__args__ == MODES.names
    assert Storage.model_fields["storage_type"].annotation.__args__ == BACKENDS.names


@pytest.mark.parametrize(("layout", "order"), [
    ("dlio", "tp-pp-dp"), ("deepspeed", "tp-pp-dp"),
    # megatron-core 0.16.1's initialize_model_parallel(order="tp-cp-ep-dp-pp") (megatron/core/parallel_state.py)
    ("megatron", "tp-dp-pp"),
])
def test_each_ranks_coordinates_are_its_place_in_the_frameworks_rank_order(layout, order):
    """TP 2 x PP 2 x DP 2 on 8 ranks: each rank's coordinates are those of its rank in the order its framework
    numbers ranks (the fastest-varying first), worked out here from that order alone."""
    p = plan(layout, 8, "++workload.model.parallelism.tensor=2", "++workload.model.parallelism.pipeline=2")
    size = {"tp": 2, "pp": 2, "dp": 2}
    for r in p.ranks:
        place, rest = {}, r.rank
        for dim in order.split("-"):
            place[dim], rest = rest % size[dim], rest // size[dim]
        mp = place["tp"] + 2 * place["pp"]
        assert (r.tp, r.pp, r.dp, r.mp) == (place["tp"], place["pp"], place["dp"], mp), r.rank


@pytest.mark.parametrize("args", [["workload=tiny", "++workload.checkpoint.layout=dcp",
                                   "++workload.model.parallelism.tensor=1"],
                                  ["workload=lightning_demo", "++workload.checkpoint.layout=lightning",
                                   "++workload.mode=emulated"]], ids=["dcp", "lightning"])
def test_a_layout_without_model_parallelism_puts_each_rank_at_its_data_parallel_rank(args):
    workload, _, _ = compose(args, None)
    assert [(r.tp, r.pp, r.dp, r.mp) for r in make_plan(workload, 4).ranks] == [(0, 0, r, 0) for r in range(4)]
