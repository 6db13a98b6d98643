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
def test_deepspeed_names_over_dlio_files(extra, expected):
    ds, ours = plan("deepspeed", 4, *extra), plan("dlio", 4, *extra)
    assert names(ds) == expected
    assert [[f.payload_bytes for f in r.files] for r in ds.ranks] == [[f.payload_bytes for f in r.files]
                                                                      for r in ours.ranks]


def test_the_config_choices_are_the_registry():
    assert Checkpoint.model_fields["layout"].annotation.__args__ == tuple(REGISTRY)


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
    extra = [f"++workload.checkpoint.layout={layout}", "++workload.checkpoint.scale=0.25",
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
