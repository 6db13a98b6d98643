"""``checkpoint.layout=deepspeed``'s load held to DeepSpeed's own: every file each rank ``torch.load``s in
``engine.load_checkpoint(dir, tag)``, in order, whole, as real DeepSpeed 0.19.8 loads of its own saves read them
(tiny at TP 2, DP 2 and 3, ZeRO 1, 2 and 3, bf16 and fp32; tiny_moe on 4 ranks at EP 2, ZeRO 1, bf16 and EP 4,
ZeRO 2, fp32; CPU, gloo), recorded by ``tests/oracles/deepspeed_load_reads.py`` (its docstring: how to record
again) into ``tests/data/deepspeed_load_reads.json``. In this process: the restore is the plan's, no run."""

from __future__ import annotations

import json

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.errors import ConfigError
from dlio_ckpt.plan.layouts import check_job, load_caveat, make_plan, restore_plan
from tests.support import DATA
from tests.support.recorded import assert_made_with_installed

RECORDED = json.loads((DATA / "deepspeed_load_reads.json").read_text())
RECORD = "DS_ACCELERATOR=cpu /tmp/dsenv/bin/python tests/oracles/deepspeed_load_reads.py " \
    "tests/data/deepspeed_load_reads.json"
# a recorded load, and restore.model_only as it asks it (load_module_only=True)
LOADS = {"default": False, "module_only": True}
MOE = RECORDED["moe_cases"]


def workload(case: dict, *extra: str):
    w, _, _ = compose(["workload=tiny", "++workload.checkpoint.layout=deepspeed",
                       f"++workload.model.parallelism.tensor={case['tensor']}",
                       f"++workload.model.parallelism.pipeline={case['pipeline']}",
                       f"++workload.model.parallelism.zero_stage={case['zero_stage']}",
                       f"++workload.model.model_datatype={case['dtype']}",
                       "++workload.checkpoint.num_checkpoints_read=1", *extra], None)
    return w


def moe_workload(case: dict, *extra: str):
    w, _, _ = compose(["workload=tiny_moe", "++workload.checkpoint.layout=deepspeed", *case["overrides"],
                       "++workload.checkpoint.num_checkpoints_read=1", *extra], None)
    par = w.model.parallelism
    assert (par.tensor, par.expert, par.zero_stage, w.model.model_datatype) == \
        (case["tensor"], case["expert"], case["zero_stage"], case["dtype"])
    return w


def read_names(w, world: int) -> tuple[object, list[list[str]]]:
    p = make_plan(w, world)
    restore = restore_plan(w, p)
    assert restore.world_size == restore.saved_world_size == world
    return restore, [[f"{p.ranks[f.rank].files[f.index].stem}.pt" for f in r.files] for r in restore.ranks]


def test_the_recording_is_of_the_load_script_at_a_tag_with_the_installed_torch():
    """Beyond tests/unit/test_recordings.py, which holds the recording's DeepSpeed and torch to the oracles' pins
    (tests/oracles/deepspeed-requirements.txt): it was made by the load script, loading by tag, and its torch is
    also the one installed here (DeepSpeed is not: its own environment, the docstring of
    tests/oracles/deepspeed_save.py)."""
    assert RECORDED["script"] == "tests/oracles/deepspeed_load_reads.py" and RECORDED["tag"] == "global_step1"
    assert_made_with_installed(RECORDED["versions"], "deepspeed_load_reads.json", RECORD, missing="ignore")


@pytest.mark.parametrize("case", sorted(RECORDED["cases"]))
@pytest.mark.parametrize("load", sorted(LOADS))
def test_each_rank_reads_the_files_deepspeeds_load_checkpoint_reads_in_its_order(case, load):
    """Rank by rank, every file DeepSpeed torch.loaded, in order (model-parallel rank 0's model file, then its own
    MP rank's, then its own optimizer partition alone; with load_module_only the model files alone), each whole:
    the restore's files, all read whole. ZeRO 3's module-only load reads empty placeholders and restores no weights:
    refused, saying so."""
    real = RECORDED["cases"][case]
    recorded = real["loads"][load]
    assert all(r["loaded"] and not r["opened"] for r in recorded)  # a tag given: nothing but torch.load, no latest
    assert all(f["whole"] and f["bytes_read"] >= f["bytes"] for r in recorded for f in r["torch_load"])
    w = workload(real, f"++workload.restore.model_only={LOADS[load]}")
    if LOADS[load] and real["zero_stage"] == 3:
        with pytest.raises(ConfigError, match="zero_stage=3: DeepSpeed's load_module_only then reads only"):
            restore_plan(w, make_plan(w, real["world"]))
        return
    restore, names = read_names(w, real["world"])
    assert names == [[f["file"] for f in r["torch_load"]] for r in recorded]
    assert all(not f.ranges for r in restore.ranks for f in r.files)  # torch.load(path): whole
    assert restore.model_only is LOADS[load] and load_caveat(w, restore) is None


def test_the_moe_loads_were_recorded_for_the_moe_saves_cases():
    """The MoE cases are deepspeed_moe_save.py's (its recording, deepspeed_moe.json: the same overrides, world and
    files saved), so that the load is held to the saves the layout's files are held to."""
    saves = json.loads((DATA / "deepspeed_moe.json").read_text())["cases"]
    assert sorted(MOE) == sorted(saves) and MOE
    for name, case in MOE.items():
        assert case["overrides"] == saves[name]["overrides"] and case["world"] == saves[name]["world"]
        assert case["files"] == {f: v["bytes"] for f, v in saves[name]["files"].items()}


@pytest.mark.parametrize("case", sorted(MOE))
@pytest.mark.parametrize("load", sorted(LOADS))
def test_each_rank_of_a_mixture_of_experts_reads_what_deepspeeds_load_checkpoint_reads_in_its_order(case, load):
    """Rank by rank, every file DeepSpeed torch.loaded, in order: model-parallel rank 0's model file, its own MP
    rank's, its expert-parallel rank's experts layer by layer (load_moe_state_dict), then its own optimizer partition
    (with load_module_only the model and expert files alone), each whole; the framework's own load, no caveat."""
    real = MOE[case]
    recorded = real["loads"][load]
    assert all(r["loaded"] and not r["opened"] for r in recorded)
    assert all(f["whole"] and f["bytes_read"] >= f["bytes"] for r in recorded for f in r["torch_load"])
    w = moe_workload(real, f"++workload.restore.model_only={LOADS[load]}")
    restore, names = read_names(w, real["world"])
    assert names == [[f["file"] for f in r["torch_load"]] for r in recorded]
    assert all(not f.ranges for r in restore.ranks for f in r.files)  # torch.load(path): whole
    assert restore.model_only is LOADS[load] and load_caveat(w, restore) is None
    assert "mixture of experts" in restore.follows
    # every file saved is read by some rank (the optimizer partitions: none with load_module_only)
    p = make_plan(w, real["world"])
    read = {(f.rank, f.index) for r in restore.ranks for f in r.files}
    assert read == {(r.rank, k) for r in p.ranks for k, f in enumerate(r.files)
                    if not (LOADS[load] and f.kind == "optimizer")}


@pytest.mark.parametrize("case", sorted(MOE))
def test_a_rank_of_a_mixture_of_experts_needs_its_dense_weights_its_experts_and_its_own_partition(case):
    """The bytes a rank keeps: its MP rank's dense weights (the model file), its EP rank's experts and its own
    optimizer partition, to the payload byte; model-parallel rank 0's model file read first is read beyond it."""
    real = MOE[case]
    for load, model_only in LOADS.items():
        w = moe_workload(real, f"++workload.restore.model_only={model_only}")
        p = make_plan(w, real["world"])
        files = {f.stem: f for r in p.ranks for f in r.files}
        for r, reads in zip(restore_plan(w, p).ranks, real["loads"][load], strict=True):
            kept = [f["file"].removesuffix(".pt") for f in reads["torch_load"][1:]]
            assert r.needed == sum(files[s].payload_bytes for s in kept)
            assert sum(1 for s in kept if "_expert_" in s) == len(p.layout.moe_blocks) * p.layout.local_experts


@pytest.mark.parametrize("case", sorted(RECORDED["cases"]) + [f"moe:{c}" for c in sorted(MOE)])
def test_without_a_tag_deepspeed_reads_latest_first_and_then_the_same_files(case):
    """load_checkpoint(dir) opens ``latest`` for the tag (not a torch.load; our layout does not write it), then reads
    what the tagged load reads: the tagged load is the one modelled."""
    loads = MOE[case[4:]]["loads"] if case.startswith("moe:") else RECORDED["cases"][case]["loads"]
    assert [r["opened"] for r in loads["latest"]] == [["latest"]] * len(loads["latest"])
    assert [[f["file"] for f in r["torch_load"]] for r in loads["latest"]] == \
        [[f["file"] for f in r["torch_load"]] for r in loads["default"]]


@pytest.mark.parametrize("case", sorted(RECORDED["cases"]))
def test_a_rank_needs_its_model_parallel_ranks_weights_and_its_own_partition(case):
    """The bytes of state a rank keeps, as the restore counts them: the tensors of every file the recorded load read
    after its first (its MP rank's model file, ZeRO 3's empty placeholders, its own optimizer partition);
    model-parallel rank 0's model file, read first, is read beyond it."""
    real = RECORDED["cases"][case]
    w = workload(real)
    p = make_plan(w, real["world"])
    files = {f.stem: f for r in p.ranks for f in r.files}
    for r, reads in zip(restore_plan(w, p).ranks, real["loads"]["default"], strict=True):
        kept = [f["file"].removesuffix(".pt") for f in reads["torch_load"][1:]]
        assert r.needed == sum(files[s].payload_bytes for s in kept)


@pytest.mark.parametrize(("extra", "message"), [
    (["workload=tiny", "++workload.restore.world_size=2"], "workload.restore.world_size=2: must be the save's (4) "
     "with checkpoint.layout=deepspeed: DeepSpeed loads ZeRO partitions only at the parallelism"),
    (["workload=tiny", "++workload.storage.scope=node"], "workload.storage.scope='node': DeepSpeed's load_checkpoint "
     "has every rank torch.load model-parallel rank 0's model file and its own model-parallel rank's (written by "
     "data-parallel rank 0), which"),
    (["workload=tiny_moe", "++workload.restore.world_size=2"], "workload.restore.world_size=2: must be the save's "
     "(4) with checkpoint.layout=deepspeed: DeepSpeed loads ZeRO partitions only at the parallelism"),
    (["workload=tiny_moe", "++workload.storage.scope=node"], "workload.storage.scope='node': DeepSpeed's "
     "load_checkpoint has every rank torch.load model-parallel rank 0's model file and its own model-parallel rank's "
     "(written by data-parallel rank 0), and its expert-parallel rank's expert files (written by expert-data-parallel "
     "rank 0)"),
    # ZeRO 3 at TP 2: each rank's own data-parallel rank's placeholder of model-parallel rank 0
    (["workload=tiny", "++workload.model.parallelism.zero_stage=3", "++workload.model.parallelism.tensor=2",
      "++workload.storage.scope=node"], "workload.storage.scope='node': DeepSpeed's load_checkpoint has every rank "
     "torch.load model-parallel rank 0's placeholder file of its own data-parallel rank, which"),
    # a lost-host restore reads a node tier: the advice to read from a shared one would not do
    (["workload=tiny", "++workload.storage.scope=node", "++workload.restore.lost_hosts=[1]", "++workload.tiers=["
      "{storage_type: local_fs, storage_root: /nonexistent/shared, scope: shared}]", "++workload.hosts.simulate=2"],
     "workload.restore.lost_hosts=[1]: is not modelled with checkpoint.layout=deepspeed: DeepSpeed's load_checkpoint"),
])
def test_what_deepspeeds_load_cannot_do_is_refused(extra, message):
    w, _, _ = compose([*extra, "++workload.checkpoint.layout=deepspeed",
                       "++workload.checkpoint.num_checkpoints_read=1"], None)
    with pytest.raises(ConfigError) as e:
        check_job(w, 4)
        restore_plan(w, make_plan(w, 4))
    assert message in str(e.value)


@pytest.mark.parametrize(("extra", "caveat"), [
    (["workload=tiny", "++workload.model.parallelism.pipeline=2"], "DeepSpeed's pipeline engine's load_checkpoint"),
])
def test_a_load_not_modelled_reads_its_own_files_whole_and_says_so(extra, caveat):
    w, _, _ = compose([*extra, "++workload.checkpoint.layout=deepspeed"], None)
    p = make_plan(w, 4)
    restore = restore_plan(w, p)
    assert all(f.rank == r.rank and not f.ranges for r in restore.ranks for f in r.files)
    said = load_caveat(w, restore)
    assert said.startswith(f"not the framework's own load ({caveat}") and \
        said.endswith("is not modelled): each rank reads its own files whole"), said
