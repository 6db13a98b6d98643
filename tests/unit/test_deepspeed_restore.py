"""``checkpoint.layout=deepspeed``'s load held to DeepSpeed's own: every file each rank ``torch.load``s in
``engine.load_checkpoint(dir, tag)``, in order, whole, as real DeepSpeed 0.19.8 loads of its own saves read them
(tiny at TP 2, DP 2 and 3, ZeRO 1, 2 and 3, bf16 and fp32; CPU, gloo), recorded by
``tests/oracles/deepspeed_load_reads.py`` (its docstring: how to record again) into
``tests/data/deepspeed_load_reads.json``. In this process: the restore is the plan's, no run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlio_ckpt.config import check_world_size, compose
from dlio_ckpt.errors import ConfigError
from dlio_ckpt.plan.layouts import make_plan
from dlio_ckpt.plan.restore import load_caveat, restore_plan
from tests.support import DATA
from tests.support.recorded import assert_made_with_installed

RECORDED = json.loads((DATA / "deepspeed_load_reads.json").read_text())
RECORD = "DS_ACCELERATOR=cpu /tmp/dsenv/bin/python tests/oracles/deepspeed_load_reads.py " \
    "tests/data/deepspeed_load_reads.json"
PINNED = Path(__file__).parents[1] / "oracles" / "deepspeed-requirements.txt"
# a recorded load, and restore.model_only as it asks it (load_module_only=True)
LOADS = {"default": False, "module_only": True}


def workload(case: dict, *extra: str):
    w, _, _ = compose(["workload=tiny", "++workload.checkpoint.layout=deepspeed",
                       f"++workload.model.parallelism.tensor={case['tensor']}",
                       f"++workload.model.parallelism.pipeline={case['pipeline']}",
                       f"++workload.model.parallelism.zero_stage={case['zero_stage']}",
                       f"++workload.model.model_datatype={case['dtype']}",
                       "++workload.checkpoint.num_checkpoints_read=1", *extra], None)
    return w


def read_names(w, world: int) -> tuple[object, list[list[str]]]:
    p = make_plan(w, world)
    restore = restore_plan(w, p)
    assert restore.world_size == restore.saved_world_size == world
    return restore, [[f"{p.ranks[f.rank].files[f.index].stem}.pt" for f in r.files] for r in restore.ranks]


def test_the_recording_was_made_with_the_pinned_deepspeed_and_the_installed_torch():
    """The versions the recording notes: DeepSpeed and torch as the oracles' requirements pin them, and torch the one
    installed here (DeepSpeed is not: its own environment, the docstring of tests/oracles/deepspeed_save.py)."""
    versions = RECORDED["versions"]
    pins = dict(line.split("==") for line in PINNED.read_text().splitlines() if "==" in line and line[0] != "#")
    assert versions["deepspeed"] == pins["deepspeed"] and versions["torch"].split("+")[0] == pins["torch"]
    assert RECORDED["script"] == "tests/oracles/deepspeed_load_reads.py" and RECORDED["tag"] == "global_step1"
    assert_made_with_installed(versions, "deepspeed_load_reads.json", RECORD, missing="ignore")


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


@pytest.mark.parametrize("case", sorted(RECORDED["cases"]))
def test_without_a_tag_deepspeed_reads_latest_first_and_then_the_same_files(case):
    """load_checkpoint(dir) opens ``latest`` for the tag (not a torch.load; our layout does not write it), then reads
    what the tagged load reads: the tagged load is the one modelled."""
    loads = RECORDED["cases"][case]["loads"]
    assert [r["opened"] for r in loads["latest"]] == [["latest"]] * len(loads["latest"])
    assert [[f["file"] for f in r["torch_load"]] for r in loads["latest"]] == \
        [[f["file"] for f in r["torch_load"]] for r in loads["default"]]


@pytest.mark.parametrize("case", sorted(RECORDED["cases"]))
def test_a_rank_needs_its_model_parallel_ranks_weights_and_its_own_partition(case):
    """The bytes of state a rank keeps: its MP rank's model file's tensors (ZeRO 3: empty placeholders) and its own
    optimizer partition; model-parallel rank 0's model file read first is read beyond it."""
    real = RECORDED["cases"][case]
    w = workload(real)
    p = make_plan(w, real["world"])
    files = {f.stem: f for r in p.ranks for f in r.files}
    for r, reads in zip(restore_plan(w, p).ranks, real["loads"]["default"], strict=True):
        kept = [f["file"].removesuffix(".pt") for f in reads["torch_load"][1:]]
        assert r.needed == sum(files[s].payload_bytes for s in kept)


@pytest.mark.parametrize(("extra", "message"), [
    (["++workload.restore.world_size=2"], "workload.restore.world_size=2: must be the save's (4) with "
     "checkpoint.layout=deepspeed: DeepSpeed loads ZeRO partitions only at the parallelism"),
    (["++workload.storage.scope=node"], "workload.storage.scope='node': DeepSpeed's load_checkpoint has every rank"),
])
def test_what_deepspeeds_load_cannot_do_is_refused(extra, message):
    w, _, _ = compose(["workload=tiny", "++workload.checkpoint.layout=deepspeed",
                       "++workload.checkpoint.num_checkpoints_read=1", *extra], None)
    with pytest.raises(ConfigError) as e:
        check_world_size(w, 4)
        restore_plan(w, make_plan(w, 4))
    assert message in str(e.value)


@pytest.mark.parametrize(("extra", "caveat"), [
    (["workload=tiny_moe"], "DeepSpeed's load_checkpoint of a mixture of experts"),
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
