"""The layouts side by side: DeepSpeed's names over DLIO's files (worked out by hand from DeepSpeed's
source), the same bytes as DLIO's, and one registry behind the config's choices."""

from __future__ import annotations

import pytest

from dlio_ckpt.config import Checkpoint, compose
from dlio_ckpt.layouts import REGISTRY, file_format, make_plan

from .conftest import dlio, load


def plan(layout: str, world: int, *extra: str):
    workload, _, _ = compose(["workload=tiny", f"++workload.checkpoint.layout={layout}", *extra], None)
    p = make_plan(workload, world)
    p.validate()
    return p


def names(p) -> list[list[str]]:
    return [[f.stem for f in r.files] for r in p.ranks]


@pytest.mark.parametrize(("extra", "expected"), [
    (["++workload.model.model_datatype=bf16"],  # TP 2 x DP 2, ZeRO 1: DP rank 0 writes each TP rank's model states
     [["mp_rank_00_model_states", "bf16_zero_pp_rank_0_mp_rank_00_optim_states"],
      ["mp_rank_01_model_states", "bf16_zero_pp_rank_0_mp_rank_01_optim_states"],
      ["bf16_zero_pp_rank_1_mp_rank_00_optim_states"], ["bf16_zero_pp_rank_1_mp_rank_01_optim_states"]]),
    (["++workload.model.parallelism.zero_stage=3"],  # every rank its model and optimizer shards (fp16: no prefix)
     [["zero_pp_rank_0_mp_rank_00_model_states", "zero_pp_rank_0_mp_rank_00_optim_states"],
      ["zero_pp_rank_0_mp_rank_01_model_states", "zero_pp_rank_0_mp_rank_01_optim_states"],
      ["zero_pp_rank_1_mp_rank_00_model_states", "zero_pp_rank_1_mp_rank_00_optim_states"],
      ["zero_pp_rank_1_mp_rank_01_model_states", "zero_pp_rank_1_mp_rank_01_optim_states"]]),
    (["++workload.model.parallelism.tensor=1", "++workload.model.parallelism.pipeline=2"],  # a file per layer
     [["layer_00-model_00-model_states", "layer_01-model_00-model_states", "layer_02-model_00-model_states",
       "zero_pp_rank_0_mp_rank_00_optim_states"],
      ["layer_03-model_00-model_states", "layer_04-model_00-model_states", "layer_05-model_00-model_states",
       "layer_06-model_00-model_states", "zero_pp_rank_0_mp_rank_01_optim_states"],
      ["zero_pp_rank_1_mp_rank_00_optim_states"], ["zero_pp_rank_1_mp_rank_01_optim_states"]]),
])
def test_deepspeed_names_and_what_its_files_hold(extra, expected):
    ds = plan("deepspeed", 4, *extra)
    assert names(ds) == expected
    lay = ds.layout
    for r in ds.ranks:  # every rank: its partition of its model-parallel rank's parameters, 12 bytes each and step
        (optim,) = [f for f in r.files if f.kind == "optimizer"]
        assert optim.payload_bytes == 4 * (3 * -(-lay.stage_elements(r.pp) // lay.data) + 1)
        for f in r.files:  # ZeRO 3's model files are placeholders; ZeRO 1/2's hold the weights
            if f.kind == "model":
                assert (f.payload_bytes == 0) is (lay.zero_stage == 3)


# What DeepSpeed 0.19.8 wrote on this machine (CPU accelerator, gloo, torch 2.13.0) for a 3-Linear model of
# 1,181,440 parameters (512->1024->512->256 with biases), AdamW, one step, save_checkpoint: ZeRO 1 and 2 alike.
MLP = (1024 * 512, 1024, 512 * 1024, 512, 256 * 512, 256)
DEEPSPEED_0_19_8 = [  # (file, dtype, ranks, its bytes)
    ("model_states", "bf16", 1, 2366041), ("model_states", "fp32", 1, 4728857),
    ("optim_states", "bf16", 1, 14181445), ("optim_states", "bf16", 2, 7092677),
    ("optim_states", "fp32", 1, 14181395), ("optim_states", "fp32", 2, 7092627),
    ("placeholder", "bf16", 2, 4361), ("placeholder", "fp32", 2, 4297),  # ZeRO 3
]


@pytest.mark.parametrize(("kind", "dtype", "ranks", "real"), DEEPSPEED_0_19_8)
def test_deepspeed_files_hold_what_deepspeed_wrote_here(kind, dtype, ranks, real):
    from dlio_ckpt.formats import get_format, planned_size
    from dlio_ckpt.layouts.deepspeed import model_states, optimizer_states, placeholder_states

    stem = f"zero_pp_rank_0_mp_rank_00_{kind}"
    file = {"model_states": lambda: model_states("mp_rank_00_model_states", dtype, MLP),
            "optim_states": lambda: optimizer_states(stem, "fp32", sum(MLP), ranks),
            "placeholder": lambda: placeholder_states(stem, dtype, len(MLP))}[kind]()
    size = planned_size(get_format("pt"), file)
    # DeepSpeed's own keys (ds_config, param_shapes, ...) are 3-4 KB we do not write: within 0.5%, and for
    # ZeRO 3's placeholder files (no payload) within 4 KB
    assert abs(size - real) <= max(0.005 * real, 4096), (size, real)


def test_the_config_choices_are_the_registries():
    from dlio_ckpt import modes
    from dlio_ckpt.config import Workload

    assert Checkpoint.model_fields["layout"].annotation.__args__ == tuple(REGISTRY)
    assert Workload.model_fields["mode"].annotation.__args__ == tuple(modes.REGISTRY)


@pytest.mark.mpi
@pytest.mark.parametrize("layout", ["deepspeed", "dcp", "megatron"])
def test_every_layout_on_every_backend(tmp_path, store, layout):
    """Two processes of 8 ranks, saved and loaded back verified; the step holds the plan's files."""
    extra = [f"++workload.checkpoint.layout={layout}", "++workload.checkpoint.scale=0.25",
             *(["++workload.model.parallelism.tensor=1", "++workload.checkpoint.files_per_rank=2"]
               if layout == "dcp" else [])]
    r = dlio(["workload=tiny", *extra, *store.overrides(), "--world-size", "8", f"hydra.run.dir={tmp_path / 'out'}"],
             tmp_path, nprocs=2, env=store.env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = load(tmp_path / "out" / "summary.json")
    assert summary["status"] == "ok" and summary["io"]["layout"] == layout
    assert summary["io"]["verified"] is (store.storage_type != "null")
    if store.storage_type != "null":
        workload, _, _ = compose(["workload=tiny", *extra], None)
        p, ext = make_plan(workload, 8), file_format(workload).extension
        backend = store.backend()
        found = {n.rsplit("/", 1)[-1] for n in backend.list_tree(backend.join("checkpoints/tiny/global_epoch1_step2"))}
        assert found == {f"{f.stem}{ext}" for r in p.ranks for f in r.files} | {c.name for c in p.coordinator}


@pytest.mark.mpi
@pytest.mark.parametrize("layout", ["dlio", "deepspeed", "dcp", "megatron"])
def test_1024_logical_ranks_on_4_processes_save_and_load_verified(tmp_path, layout):
    # Megatron's load: each of the 512 data-parallel replicas reads its whole tensor-parallel slice (half the
    # checkpoint here), as dist_checkpointing.load does: the model alone, its files shrunk, keep the test short
    scale = 0.02 if layout == "megatron" else 0.25
    extra = [f"++workload.checkpoint.layout={layout}", f"++workload.checkpoint.scale={scale}",
             *(["++workload.restore.model_only=True"] if layout == "megatron" else []),
             *(["++workload.model.parallelism.tensor=1"] if layout == "dcp" else [])]
    r = dlio(["workload=tiny", *extra, "--world-size", "1024", f"++workload.storage.storage_root={tmp_path / 'store'}",
              f"hydra.run.dir={tmp_path / 'out'}"], tmp_path, nprocs=4, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = load(tmp_path / "out" / "summary.json")
    assert summary["io"]["layout"] == layout and summary["status"] == "ok"
    workload, _, _ = compose(["workload=tiny", *extra], None)
    p, ext = make_plan(workload, 1024), file_format(workload).extension
    step = tmp_path / "store" / "checkpoints" / "tiny" / "global_epoch1_step1"
    assert {f.name for f in step.iterdir()} == {f"{f.stem}{ext}" for r in p.ranks for f in r.files} | \
        {c.name for c in p.coordinator}  # DCP's .metadata.tmp renamed away
