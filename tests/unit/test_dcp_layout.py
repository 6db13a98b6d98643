"""``checkpoint.layout=dcp`` planned: a real FSDP2 job's tensors at full scale, what ``plan`` says of the layout,
and the input the layout refuses before anything is written (in this process). Held to a real ``dcp.save``,
``torch.save`` and transformers' Llama in tests/against_frameworks/test_dcp_layout.py."""

from __future__ import annotations

import json

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.plan.layouts import make_plan
from dlio_ckpt.plan.types import ItemFile
from tests.support.workloads import DCP


def test_llama3_70b_at_64_ranks_writes_a_real_fsdp2_jobs_tensors():
    """The issue's figure: 723 parameters (80 blocks of 9, embedding, norm, head) and Adam's two moments, sharded
    over every rank: 2,169 tensor chunks a rank (the replicated steps and the param group on a few ranks only)."""
    workload, _, _ = compose(["workload=llama3_70b", "++workload.checkpoint.layout=dcp",
                              "++workload.model.parallelism.tensor=1"], None)
    plan = make_plan(workload, 64)
    counts = [sum(len(f.items) for f in r.files if isinstance(f, ItemFile)) for r in plan.ranks]
    assert min(counts) == 2169 and sum(c - 2169 for c in counts) == 723 + 12  # a step per parameter, 12 group keys


@pytest.mark.parametrize(("extra", "message"), [
    (["++workload.model.parallelism.tensor=2"],
     "workload.model.parallelism.tensor=2: must be 1 with checkpoint.layout=dcp"),
    (["++workload.checkpoint.format=raw"],
     "workload.checkpoint.format='raw': means nothing with checkpoint.layout=dcp"),
    (["++workload.checkpoint.layout=dlio", "++workload.checkpoint.files_per_rank=2"],
     "workload.checkpoint.files_per_rank=2: means nothing with checkpoint.layout=dlio"),
    (["++workload.mode=fsdp"], "workload.checkpoint.layout='dcp': applies to emulated runs only"),
    (["++workload.checkpoint.layout=orbax"], "workload.checkpoint.layout"),
])
def test_bad_layout_input_exits_2_before_anything_is_written(tmp_path, dlio_here, extra, message):
    r = dlio_here([*DCP, *extra, f"++workload.storage.storage_root={tmp_path / 'store'}", "--world-size", "2"])
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert not (tmp_path / "store").exists()


def test_plan_names_the_layout_and_its_metadata(dlio_here):
    r = dlio_here(["plan", *DCP, "--world-size", "4", "--format", "json"])
    assert r.returncode == 0, r.stderr
    view = json.loads(r.stdout)
    assert view["layout"] == "dcp" and view["format"] == "distcp"
    assert [f["name"] for f in view["ranks"][3]["files"]] == ["__3_0.distcp"]
    (meta,) = view["coordinator_files"]
    assert meta["name"] == ".metadata" and meta["written_as"] == ".metadata.tmp" and meta["bytes"] > 10_000


def test_llama3_405b_at_16384_ranks_plans_with_realistic_metadata():
    workload, _, _ = compose(["workload=llama3_405b", "++workload.checkpoint.layout=dcp",
                              "++workload.model.parallelism.tensor=1", "++workload.model.parallelism.pipeline=1"], None)
    plan = make_plan(workload, 16384)
    plan.validate()
    per_rank = [r.payload_bytes for r in plan.ranks]
    assert max(per_rank) < 1.3 * plan.total_payload_bytes / 16384  # about total/world each
    # every tensor (1,137 of them, 3 states each) has a chunk per rank: gigabytes that every rank reads first
    assert 4e9 < plan.coordinator[0].size < 8e9
