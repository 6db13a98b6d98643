"""``checkpoint.scale`` makes a miniature of the job: at any scale every rank's share of the bytes is its share
at full size, every rank writes the same files holding the same items, the coordinator's files keep their share,
and the bytes are the scale's (within the rounding of each weight's last dimension); Megatron's weights still split
evenly over tensor-parallel ranks. Plans only: no process
(a scaled run: tests/e2e/test_scaling.py)."""

from __future__ import annotations

from math import prod

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.plan.layouts import check_job, make_plan
from dlio_ckpt.plan.types import ItemFile, shrink, shrink_shape

JOBS = [  # (workload, world size, overrides): every layout, dense and mixtures of experts
    ("llama3_70b", 64, ["++workload.checkpoint.layout=dcp", "++workload.model.parallelism.tensor=1"]),
    ("llama3_70b", 64, ["++workload.checkpoint.layout=megatron"]),
    ("llama3_70b", 64, []),
    ("llama3_70b", 64, ["++workload.checkpoint.layout=deepspeed"]),
    ("mixtral_8x7b", 64, []),
    ("qwen3_30b_a3b", 16, ["++workload.checkpoint.layout=dcp", "++workload.model.parallelism.tensor=1"]),
    ("tiny_moe", 4, ["++workload.checkpoint.layout=deepspeed"]),
]


def _plan(workload: str, world: int, extra: list[str], scale: float):
    w = compose([f"workload={workload}", *extra, f"++workload.checkpoint.scale={scale}"])[0]
    check_job(w, world)
    return make_plan(w, world)


def _contents(plan) -> list[tuple[tuple[str, int], ...]]:
    """Per rank: each file's name and how many items (or tensors) it holds."""
    return [tuple((f.stem, len(f.items) if isinstance(f, ItemFile) else f.num_tensors) for f in r.files)
            for r in plan.ranks]


@pytest.mark.parametrize(("workload", "world", "extra"), JOBS, ids=lambda v: v if isinstance(v, str) else None)
@pytest.mark.parametrize("scale", [0.002, 0.0005])
def test_a_scaled_plan_is_a_miniature_of_the_full_one(workload, world, extra, scale):
    full, small = _plan(workload, world, extra, 1.0), _plan(workload, world, extra, scale)
    assert _contents(small) == _contents(full)
    total, total_full = small.total_payload_bytes, full.total_payload_bytes
    for r, r_full in zip(small.ranks, full.ranks, strict=True):  # each rank's share of the payload, within 1 %
        assert r.payload_bytes / total == pytest.approx(r_full.payload_bytes / total_full, rel=0.01)
    assert small.scale_ratio == pytest.approx(scale, rel=0.02)
    assert small.full_size.total_payload_bytes == total_full
    share = sum(c.size for c in small.coordinator) / small.stored_bytes
    share_full = sum(c.size for c in full.coordinator) / full.stored_bytes
    assert share == pytest.approx(share_full, rel=0.01)


def test_fsdp2_chunks_of_a_scaled_dcp_job_leave_no_rank_empty():
    """The issue's case: llama3_70b over 64 ranks at 1/500 put 59.8 MB on ranks 0-15 and 0.79 MB on 57-63."""
    plan = _plan("llama3_70b", 64, JOBS[0][2], 0.002)
    sizes = [r.payload_bytes for r in plan.ranks]
    assert max(sizes) / min(sizes) < 1.01


def test_shrink_keeps_split_dimensions_whole_multiples():
    assert shrink(8192, 1 / 2000, 8) == 8  # nearest multiple of 8, at least one
    assert shrink(8192, 0.5, 8) == 4096
    assert shrink(100, 2.0) == 100
    assert shrink_shape((8192, 8192), 0.002, (64, 1)) == (384, 350)  # 64 x 6 rows, the columns absorb the rest
    assert shrink_shape((8, 4096, 1024), 0.01, (0, 4, 1)) == (8, 408, 103)  # experts whole
    assert shrink_shape((10, 10), 1.0, (1, 1)) == (10, 10)


# Megatron's layouts at tensor (and expert tensor) parallelism: dense at TP 8, experts at TP 2 and expert TP 2
TP_JOBS = [("llama3_70b", 64, ["++workload.checkpoint.layout=megatron"]),
           ("mixtral_8x7b", 64, ["++workload.model.parallelism.tensor=2",
                                 "++workload.model.parallelism.expert_tensor=2"])]


@pytest.mark.parametrize(("workload", "world", "extra"), TP_JOBS, ids=lambda v: v if isinstance(v, str) else None)
@pytest.mark.parametrize("scale", [0.002, 0.0005, 0.0001])
def test_scaled_megatron_weights_split_evenly_over_tensor_parallel_ranks(workload, world, extra, scale):
    """Megatron splits a weight's cut dimension into TP equal parts (``ensure_divisibility``: a width that TP does
    not divide is refused), so a miniature's cut widths stay multiples of TP: every tensor's chunks, one per TP rank
    and layer, all of one size, fill the whole tensor (a width rounded off TP's multiples leaves rows no rank
    writes)."""
    layout = _plan(workload, world, extra, scale).layout
    assert layout.name == "megatron" and layout.tensor > 1
    for t in layout.tensors():
        sizes = {prod(size) for _, size in t.chunks}
        assert len(sizes) == 1 and len(t.chunks) * sizes.pop() == prod(t.shape), (t.fqn, t.shape, t.chunks[:2])
