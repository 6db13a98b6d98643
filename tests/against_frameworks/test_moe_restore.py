"""Mixture-of-experts restores as the frameworks do them: DCP's layout of torchtitan's expert-parallel placement
(``checkpoint.layout=dcp``, ``model.family=moe``, ``model.parallelism.expert`` > 1: routed experts on the 2-D
expert mesh) loaded at the save's world size and at others, held to what a real ``dcp.load`` of that placement
reads on each rank (``tests/oracles/dcp_moe_load_reads.py``: torchtitan v0.2.0's modules and meshes on torch,
gloo on CPU, DCP's ``FileSystemReader`` instrumented). The real saves and loads are recorded, with the versions
they ran with, into ``tests/data/dcp_moe_restore_reads.json`` (four saves and their loads, by up to 8 forked ranks,
cost about 15 s, for reads that change only with the frameworks); the comparisons run in this process, with
torch's own resharding (``create_read_items_for_chunk_list``) over larger meshes than the recording's."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.plan.layouts import make_plan, restore_plan
from tests.support.bounds import DCP_METADATA
from tests.support.dcp_files import emulated_items
from tests.support.dcp_moe_model import moe_overrides
from tests.support.recorded import assert_made_with_installed
from tests.support.restore_cases import DCP_MOE_CASES, DCP_MOE_READS

if TYPE_CHECKING:
    from dlio_ckpt.config import Workload
    from dlio_ckpt.plan.types import Plan

RECORD = "PYTHONPATH=. .venv/bin/python tests/oracles/dcp_moe_load_reads.py"


def recorded() -> dict:
    return json.loads(DCP_MOE_READS.read_text())


def test_an_installed_torchtitan_is_the_release_the_recording_follows():
    """Beyond tests/unit/test_recordings.py, which holds the recording's torch to the installed one and its torchtitan
    to the release the oracle reimplements: torchtitan is not installed here (the oracle rebuilds v0.2.0's modules
    and placements on torch); where it is installed at another release, its placements may differ, and the
    recording is made again once the oracle follows them."""
    versions = recorded()["versions"]
    assert_made_with_installed({"torchtitan": versions["torchtitan"]}, DCP_MOE_READS.name, RECORD, missing="ignore",
                               hint={"torchtitan": ", once tests/oracles/dcp_moe_save.py places as it does"})


def test_the_recording_is_of_these_cases():
    found = recorded()["cases"]
    assert sorted(found) == sorted(DCP_MOE_CASES), f"recorded for other cases: {RECORD}"
    for name, (c, saved, loads) in DCP_MOE_CASES.items():
        assert (found[name]["config"], found[name]["saved"]) == (c, saved), \
            f"{name}: recorded for another save: {RECORD}"
        assert sorted(found[name]["loads"]) == sorted(f"{w}:{int(m)}" for w, m in loads), \
            f"{name}: recorded for other loads: {RECORD}"


def saved_plan(c: dict, saved: int, load: tuple[int, bool] | None = None) -> tuple[Workload, Plan]:
    """The oracle's model in DCP's layout, and the emulated save's plan at ``saved`` ranks, loaded as ``load`` asks."""
    extra = [] if load is None else [f"++workload.restore.world_size={load[0]}",
                                     f"++workload.restore.model_only={load[1]}"]
    workload, _, _ = compose([*moe_overrides(c), *extra], None)
    return workload, make_plan(workload, saved)


@pytest.mark.parametrize("name", sorted(DCP_MOE_CASES))
def test_the_saved_files_are_the_emulated_plans(name):
    """What the loads read from: the real save's files, each ``.distcp`` equal to the byte and item by item (name,
    offset, length, file), ``.metadata`` within its tolerance; and every routed expert chunk where the emulated
    restore looks for it, on torchtitan's expert mesh (:func:`~dlio_ckpt.plan.layouts.dcp_moe.expert_box`): its
    offsets in the tensor as the real ``.metadata`` lists them for the rank that stored it."""
    from dlio_ckpt.plan.layouts.dcp_moe import expert_box

    case = recorded()["cases"][name]
    c, saved, _ = DCP_MOE_CASES[name]
    _, plan = saved_plan(c, saved)
    plan.validate()
    emulated = {f"{f.stem}.distcp": f.size for r in plan.ranks for f in r.files}
    real = dict(case["files"])
    metadata = real.pop(".metadata")
    assert emulated == real
    assert abs(plan.coordinator[0].size - metadata) <= DCP_METADATA * metadata
    items: dict[str, list[tuple[int, int, str]]] = {}
    for file, offset, length, fqn, _ in case["items"]:
        items.setdefault(file, []).append((offset, length, fqn))
    assert emulated_items(plan) == {f: sorted(i) for f, i in items.items()}
    experts = {t.fqn: t for t in plan.layout.tensors() if t.ep > 1}
    checked = 0
    for file, _, _, fqn, offsets in case["items"]:
        if fqn in experts:
            rank = int(file.split("_")[2])
            (a0, _), (a1, _) = expert_box(experts[fqn].shape, saved, c["ep"], rank)
            assert offsets == [a0, a1, 0], (fqn, file)
            checked += 1
    assert checked == len(experts) * saved


def emulated_reads(c: dict, saved: int, load: tuple[int, bool]) -> dict[int, list[tuple[str, int, int]]]:
    """The emulated restore, planned in this process: per loading rank, .metadata whole, then each range it reads."""
    workload, plan = saved_plan(c, saved, load)
    restore = restore_plan(workload, plan)
    (meta,) = plan.coordinator
    return {r.rank: [(meta.name, 0, meta.size)] + [(f"{plan.ranks[f.rank].files[f.index].stem}.distcp", o, n)
                                                    for f in r.files for o, n in f.ranges] for r in restore.ranks}


@pytest.mark.parametrize("name", sorted(DCP_MOE_CASES))
def test_the_emulated_moe_restore_reads_what_dcp_load_reads(name):
    """Every rank's reads, in order: .metadata first (its size within the tolerance), then each stored item's (file,
    offset, length) as DCP's FileSystemReader slices it, equal: at the save's world size and at others, the experts'
    chunks moving between dim 0 and dim 1 with the load's expert mesh, and the model alone."""
    case = recorded()["cases"][name]
    c, saved, loads = DCP_MOE_CASES[name]
    for world, model_only in loads:
        real = {int(k): [tuple(x) for x in v] for k, v in case["loads"][f"{world}:{int(model_only)}"].items()}
        ours = emulated_reads(c, saved, (world, model_only))
        assert sorted(real) == sorted(ours) == list(range(world))
        for rank in range(world):
            (meta, _, size), *items = real[rank]
            assert meta == ".metadata" and abs(ours[rank][0][2] - size) <= DCP_METADATA * size
            assert ours[rank][1:] == items, (world, model_only, rank)


# (experts, EP, the save's world size, the load's, an expert tensor's dims 1 and 2): dim 0 to dim 0 (fewer and more
# experts a rank), dim 0 to dim 1 and back, dim 1 to dim 1 over other splits, and experts the longest dim
MESHES = [(8, 2, 4, 8, 32, 64), (8, 2, 8, 4, 64, 32), (8, 4, 8, 32, 48, 16), (8, 4, 32, 8, 16, 48),
          (4, 2, 8, 16, 32, 64), (4, 2, 16, 8, 64, 32), (16, 4, 64, 8, 32, 8), (16, 2, 4, 64, 64, 12),
          (256, 8, 64, 32, 16, 8), (256, 8, 512, 1024, 128, 16), (6, 3, 12, 6, 12, 4)]


@pytest.mark.parametrize(("experts", "ep", "saved", "loaded", "d1", "d2"), MESHES)
def test_the_expert_reads_are_dcps_resharding_over_other_meshes(experts, ep, saved, loaded, d1, d2):
    """Beyond the recorded loads: for every loading rank, the stored expert chunks the emulated restore reads, in its
    order and with the bytes it needs of each, are those DCP's own resharding (torch's
    ``create_read_items_for_chunk_list``) reads, given the chunks of torchtitan's expert mesh at both sizes (the
    chunks the recording holds)."""
    pytest.importorskip("torch")
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, TensorStorageMetadata
    from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list

    from dlio_ckpt.plan.layouts.dcp_metadata import Tensor
    from dlio_ckpt.plan.layouts.dcp_moe import check_load, expert_box
    from dlio_ckpt.plan.layouts.dcp_restore import _expert_reads

    shape = (experts, d1, d2)
    for world in (saved, loaded):
        check_load([shape], ep, world, False)  # shapes both meshes place evenly

    def chunk(world: int, rank: int) -> ChunkStorageMetadata:
        (a0, n0), (a1, n1) = expert_box(shape, world, ep, rank)
        return ChunkStorageMetadata(offsets=(a0, a1, 0), sizes=(n0, n1, d2))

    stored = TensorStorageMetadata(None, shape, [chunk(saved, k) for k in range(saved)])  # type: ignore[arg-type]
    t = Tensor("w", shape, "fp32", True, None, ep)
    for q in range(loaded):
        theirs = [(item.storage_index.index, 4 * item.lengths.numel())
                  for item in create_read_items_for_chunk_list("w", stored, [chunk(loaded, q)])]
        assert [(k, n) for k, _, n in _expert_reads(t, saved, loaded, q)] == theirs, q
