"""Planner values derived by hand from docs/concepts/dlio-layout-spec.md."""

from __future__ import annotations

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.plan.layouts import make_plan


def plan(workload: str, world: int, *overrides: str):
    w, _, _ = compose([f"workload={workload}", *overrides])
    return make_plan(w, world)


def files(p, rank):
    return [(f.stem, f.payload_bytes, f.num_tensors) for f in p.ranks[rank].files]


def test_worked_example_llama_7b_zero3_on_8_ranks():
    p = plan("llama_7b_zero3", 8)
    assert p.num_parameters == 6_738_415_616
    for r in range(8):
        assert [f.stem for f in p.ranks[r].files] == [
            f"zero_pp_rank_{r}_mp_rank_0_model_states", f"zero_pp_rank_{r}_mp_rank_0_optim_states"]
        assert p.ranks[r].payload_bytes == 11_792_473_088
    assert p.total_payload_bytes == 94_339_784_704
    assert round(p.checkpoint_size_GB, 6) == 87.860771


# tiny: h=256 V=1000 F=688 nh=8 nkv=4 L=4 -> dkv=128, block params 725,504, P=3,414,272.
# With TP=2: embedding/head 128,000 each; a block [256, 65536, 32768, 256, 176128, 88064] = 363,008.


def test_zero1_tp2_pp1_by_hand():
    p = plan("tiny", 4)  # TP 2, DP 2, ZeRO 1
    assert p.num_parameters == 3_414_272
    model = 2 * (128_000 + 4 * 363_008 + 128_000 + 256)  # 3,416,576
    optim = 4 * (3 * (3_414_272 // 4) + 15 * 256)  # 10,258,176
    assert files(p, 0) == [("model_0_model_states", model, 1 + 4 * 6 + 1 + 1),
                           ("zero_pp_rank_0_mp_rank_0_optim_states", optim, 6)]
    assert files(p, 1)[0][0] == "model_1_model_states"
    assert files(p, 2) == [("zero_pp_rank_1_mp_rank_0_optim_states", optim, 6)]  # dp 1: no model file
    assert p.total_payload_bytes == 2 * (model + optim) + 2 * optim == 47_865_856


def test_zero2_counts_only_what_is_written():
    p = plan("tiny", 4, "++workload.model.parallelism.zero_stage=2")
    assert p.total_payload_bytes == 47_865_856  # DLIO would count DP times the model bytes


def test_zero0_only_model_parallel_ranks_write():
    p = plan("tiny", 4, "++workload.model.parallelism.zero_stage=0")
    model = 2 * (128_000 + 4 * 363_008 + 128_000 + 256)
    optim = 4 * (3 * (3_414_272 // 2) + 15 * 256)  # P' = P // MP
    assert files(p, 0) == [("zero_pp_rank_0_mp_rank_0_model_states", model, 27),
                           ("zero_pp_rank_0_mp_rank_0_optim_states", optim, 6)]
    assert files(p, 2) == [] and files(p, 3) == []


def test_zero3_shards_by_data_parallel_size():
    p = plan("tiny", 8, "++workload.model.parallelism.zero_stage=3")  # TP 2, DP 4, sf 4
    block = 256 // 4 + 131_072 // 2 // 4 + 65_536 // 2 // 4 + 256 // 4 + 352_256 // 2 // 4 + 176_128 // 2 // 4
    model = 2 * (2 * (256_000 // 2 // 4) + 4 * block + 256 // 4)
    optim = 4 * (3 * (3_414_272 // 8) + 15 * 256)
    for r in range(8):
        assert files(p, r) == [(f"zero_pp_rank_{r // 2}_mp_rank_{r % 2}_model_states", model, 27),
                               (f"zero_pp_rank_{r // 2}_mp_rank_{r % 2}_optim_states", optim, 6)]


def test_uneven_pipeline_stages_write_layer_files():
    # L=5, PP=2: n=2, rem=1 -> stage 0 owns 0..3, stage 1 owns 4..7 (blocks 4,5 + head 6 + norm 7).
    p = plan("tiny", 4, "++workload.model.num_layers=5", "++workload.model.parallelism.pipeline=2")
    assert [f.stem for f in p.ranks[0].files] == [
        "layer_0-model_0_model_states", "layer_1-model_0_model_states", "layer_2-model_0_model_states",
        "layer_3-model_0_model_states", "zero_pp_rank_0_mp_rank_0_optim_states"]
    assert [f.stem for f in p.ranks[3].files] == [
        "layer_4-model_3_model_states", "layer_5-model_3_model_states", "layer_6-model_3_model_states",
        "layer_7-model_3_model_states", "zero_pp_rank_0_mp_rank_3_optim_states"]
    assert [f.payload_bytes for f in p.ranks[3].files[2:4]] == [2 * 128_000, 2 * 256]
    assert (p.ranks[3].tp, p.ranks[3].pp, p.ranks[3].dp) == (1, 1, 0)


def test_grouped_query_attention_shrinks_qkv():
    # llama_8b_zero3: h 4096, nh 32, nkv 8 -> dkv 1024; fused qkv = 4096*(4096+2048).
    p = plan("llama_8b_zero3", 8)
    dkv = 1024
    block = 4096 + 4096 * (4096 + 2 * dkv) + 4096 * 4096 + 4096 + 2 * 14336 * 4096 + 14336 * 4096
    assert p.num_parameters == 2 * 128_256 * 4096 + 32 * block + 4096 == 8_030_261_248


def test_subset_mode_writes_first_ranks_of_larger_job():
    p = plan("llama3_405b", 8, "++workload.checkpoint.mode=subset", "++workload.model.parallelism.data=2")
    lay = p.layout
    assert (lay.data, lay.mp) == (2, 256)
    assert p.ranks[0].files[-1].stem == "zero_pp_rank_0_mp_rank_0_optim_states"
    assert p.ranks[0].files[-1].payload_bytes == 4 * (3 * (p.num_parameters // 512) + 15 * 16384)
    assert p.ranks[7].pp == 0 and p.ranks[7].files[0].stem == "layer_0-model_7_model_states"


def test_scale_keeps_names_and_counts():
    full, small = plan("tiny", 4), plan("tiny", 4, "++workload.checkpoint.scale=0.01")
    for a, b in zip(full.ranks, small.ranks, strict=True):
        assert [(f.stem, f.num_tensors) for f in a.files] == [(f.stem, f.num_tensors) for f in b.files]
    assert 0.009 < small.total_payload_bytes / full.total_payload_bytes < 0.011


@pytest.mark.parametrize("name,world", [("llama_70b", 64), ("llama_405b", 512), ("llama_1t", 1024)])
def test_every_rank_writes_optimizer_and_dp0_writes_model(name, world):
    p = plan(name, world)
    mp = p.layout.mp
    for r in p.ranks:
        stems = [f.stem for f in r.files]
        assert stems[-1] == f"zero_pp_rank_{r.dp}_mp_rank_{r.mp}_optim_states"
        assert (len(stems) > 1) == (r.dp == 0)
    assert sum(len(r.files) for r in p.ranks) == world + sum(
        len(p.layout.shape.stage_layers(pp, p.layout.pipeline)) * p.layout.tensor for pp in range(p.layout.pipeline))
    assert mp * p.layout.data == world


def test_llama_1t_at_4096_ranks_plans_every_rank():
    """How fast (and how large a world ``plan`` takes) is bench/plan_scale.py's to say, not a pass mark."""
    p = plan("llama_1t", 4096)
    assert [r.rank for r in p.ranks] == list(range(4096)) and p.total_payload_bytes > 0


# -- plan and the restore (workload.restore.*) -----------------------------------------------------

DCP_70B = ["plan", "workload=llama3_70b", "--world-size", "64", "++workload.checkpoint.layout=dcp",
           "++workload.model.parallelism.tensor=1"]


@pytest.mark.slow  # 3-5 s: llama3_70b at 64 ranks planned, restored on 48, four times
def test_plan_prints_the_restore_it_would_read(tmp_path, dlio_here):
    """llama3_70b saved by 64 FSDP2 ranks, restored on 48: the README's table, from the same restore plan
    and figures a run reports in summary.json's io.restore; what-if loads take the heaviest rank's reads."""
    import json

    from dlio_ckpt.plan.formats import planned_size
    from dlio_ckpt.plan.layouts import file_format, restore_plan
    from dlio_ckpt.results.restore import figures
    r = dlio_here([*DCP_70B, "++workload.restore.world_size=48", "--read-bandwidth", "40GB/s"])
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "restore: 48 ranks from the save's 64 (resharded), model and optimizer" in out
    assert "needed per rank: mean 16.27 GiB" in out and "read per rank:   mean 28.12 GiB" in out
    assert "max 36.28 GiB" in out and "read amplification 1.728 (read / needed)" in out
    assert "metadata: 24.3 MiB read first by every rank" in out
    assert "reads per rank 704-1356, files per rank 63-64" in out and "heaviest rank 2: reads 36.28 GiB" in out
    assert "load_heaviest_rank: 2" in out and f"load_seconds: {38_951_874_275 * 48 / 40e9:.4g}" in out

    j = dlio_here([*DCP_70B, "++workload.restore.world_size=48", "--format", "json"])
    assert j.returncode == 0, j.stderr
    restore = json.loads(j.stdout)["restore"]
    w, _, _ = compose(["workload=llama3_70b", *DCP_70B[4:], "++workload.restore.world_size=48"])
    p, fmt = make_plan(w, 64), file_format(w)
    run_says = figures(restore_plan(w, p), lambda rank, k: planned_size(fmt, p.ranks[rank].files[k]),
                       sum(c.size for c in p.coordinator), w.checkpoint.chunk_size)  # a run's io.restore figures
    assert {k: v for k, v in restore.items() if k in run_says} == run_says
    assert restore["heaviest_rank_bytes_needed"] == 17_500_838_840
    assert restore["bytes_restored"] == p.total_payload_bytes + sum(c.size for c in p.coordinator) + \
        sum(planned_size(fmt, f) - f.payload_bytes for r in p.ranks for f in r.files)  # every stored byte, once
    assert round(restore["read_amplification"], 3) == 1.728

    model = dlio_here([*DCP_70B, "++workload.restore.world_size=48", "++workload.restore.model_only=True"])
    assert "the model alone" in model.stdout and "read amplification 1.731" in model.stdout, model.stderr

    same = dlio_here([*DCP_70B, "--read-bandwidth", "40GB/s"])  # no restore asked: the save's ranks, as a run loads
    assert same.returncode == 0 and "restore: 64 ranks, the save's, model and optimizer" in same.stdout
    heaviest = max(sum(planned_size(fmt, f) for f in r.files) for r in p.ranks)  # each rank its own files whole,
    metadata = sum(c.size for c in p.coordinator)  # after .metadata
    assert f"load_seconds: {(heaviest + metadata) * 64 / 40e9:.4g}" in same.stdout
    assert list(tmp_path.iterdir()) == []


def test_plan_refuses_a_restore_the_layout_cannot_do(tmp_path, dlio_here):
    """As a run refuses it: DLIO's read phase loads only at the save's world size."""
    r = dlio_here(["plan", "workload=tiny", "--world-size", "4", "++workload.restore.world_size=2"])
    assert r.returncode == 2 and "workload.restore.world_size=2: must be the save's (4)" in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []
