"""Restores as they really happen (``workload.restore``): a DCP checkpoint saved at one world size and loaded at
another, or the model alone, held to what a real ``dcp.load`` reads on each rank (``tests/oracles/
dcp_load_reads.py``, an instrumented ``FileSystemReader``), and Megatron's ``dist_checkpointing`` load to what
it reads (``tests/oracles/megatron_save.py``). Both are recorded (``tests/oracles/record_restore_reads.py``, into
``tests/data/*_restore_reads.json``: a real save and its loads cost 20-25 s a framework, for reads that change
only with the framework), with the versions they were recorded with, which tests/unit/test_recordings.py holds to
the installed ones; the comparisons run in this process (the cases, shared with the recording script:
tests/support/restore_cases.py). The emulated loads run end to end: tests/e2e/test_restore.py."""

from __future__ import annotations

import json
from pathlib import Path

from dlio_ckpt.config import compose
from dlio_ckpt.plan.layouts import make_plan, restore_plan
from tests.support.bounds import DCP_METADATA
from tests.support.megatron_files import assert_same_files, assert_same_items
from tests.support.restore_cases import (
    DCP_LOADS,
    DCP_READS,
    DCP_SAVED,
    DCP_SHAPE,
    MEGATRON,
    MEGATRON_LOADS,
    MEGATRON_MODEL,
    MEGATRON_READS,
    MEGATRON_WORLD,
)
from tests.support.workloads import DCP

RECORD = "PYTHONPATH=. .venv/bin/python tests/oracles/record_restore_reads.py"


def recorded(path: Path) -> dict:
    """An oracle's recording (``tests/oracles/record_restore_reads.py`` says how it is made)."""
    return json.loads(path.read_text())


def emulated_reads(saved: int, world: int, model_only: bool) -> dict[int, list[tuple[str, int, int]]]:
    workload, _, _ = compose([*DCP, *DCP_SHAPE, f"++workload.restore.world_size={world}",
                              f"++workload.restore.model_only={model_only}"], None)
    plan = make_plan(workload, saved)
    restore = restore_plan(workload, plan)
    (meta,) = plan.coordinator
    return {r.rank: [(meta.name, 0, meta.size)] + [(f"{plan.ranks[f.rank].files[f.index].stem}.distcp", o, n)
                                                    for f in r.files for o, n in f.ranges] for r in restore.ranks}


def test_the_emulated_restore_reads_what_dcp_load_reads():
    """Every rank's reads, in order: .metadata first, then each stored item's (file, offset, length) as DCP's
    FileSystemReader slices it; saved at 3 ranks (rows uneven), loaded resharded to 2 and to 4, at the same world
    size (replicated items read from the ranks that stored them), and the model alone: as
    tests/oracles/record_restore_reads.py recorded the real loads."""
    found = recorded(DCP_READS)
    assert (found["saved"], found["shape"]) == (DCP_SAVED, DCP_SHAPE), f"recorded for other cases: {RECORD}"
    assert sorted(found["loads"]) == sorted(f"{w}:{int(m)}" for w, m in DCP_LOADS), \
        f"recorded for other loads: {RECORD}"
    for world, model_only in DCP_LOADS:
        real = {int(k): [tuple(x) for x in v] for k, v in found["loads"][f"{world}:{int(model_only)}"].items()}
        ours = emulated_reads(DCP_SAVED, world, model_only)
        assert sorted(real) == sorted(ours) == list(range(world))
        for rank in range(world):
            (name, _, size), *items = real[rank]
            assert name == ".metadata" and abs(ours[rank][0][2] - size) <= DCP_METADATA * size
            assert ours[rank][1:] == items, (world, model_only, rank)


def test_the_emulated_megatron_restore_reads_what_dist_checkpointing_load_reads():
    """A real megatron-core save with pipeline parallelism (TP 2 x PP 2 x DP 2, 3 blocks split 1 + 2, the
    distributed optimizer) holds our plan's items in our order, to the byte; then Megatron's default load at
    TP 1 on 4 ranks (PP 2 x DP 2, model and optimizer) and at TP 2 on 4 ranks (the model alone; data
    parallelism 2 -> 1) is run. The ranks that read are ours; each first opens metadata.json, common.pt and
    .metadata whole (the files our emulated load reads first, on every rank), then reads, on every rank, the
    (file, offset, length) our restore plan reads, in the same order. The save's files and items and the loads'
    reads as tests/oracles/record_restore_reads.py recorded them."""
    found, world = recorded(MEGATRON_READS), MEGATRON_WORLD
    assert (found["model"], found["world"]) == (MEGATRON_MODEL, world), f"recorded for another save: {RECORD}"
    assert sorted(found["loads"]) == sorted(f"{tp}:{w}:{int(m)}" for tp, w, m in MEGATRON_LOADS), \
        f"recorded for other loads: {RECORD}"
    workload, _, _ = compose(MEGATRON, None)
    assert_same_files(found["files"], workload, world)
    plan = make_plan(workload, world)
    assert_same_items([(f, o, fqn, tuple(chunk), n) for f, o, fqn, chunk, n in found["items"]], plan)
    first = {c.name: c.size for c in plan.coordinator}  # what our emulated load reads whole before its ranges
    for tp, world, model_only in MEGATRON_LOADS:
        w, _, _ = compose([*MEGATRON, f"++workload.restore.world_size={world}", f"++workload.restore.tensor={tp}",
                           f"++workload.restore.model_only={model_only}"], None)
        restore = restore_plan(w, plan)
        real = {int(rank): [tuple(x) for x in reads]
                for rank, reads in found["loads"][f"{tp}:{world}:{int(model_only)}"].items()}
        assert sorted(real) == [rr.rank for rr in restore.ranks] == list(range(world)), (tp, world, model_only)
        for rr in restore.ranks:
            whole, items = real[rr.rank][:3], real[rr.rank][3:]
            assert [name for name, _, _ in whole] == ["metadata.json", "common.pt", ".metadata"], whole
            assert sorted(first) == sorted(name for name, _, _ in whole)
            for name, offset, size in whole:
                bound = 0.10 * size if name == ".metadata" else 0  # .metadata's size: ~ (the others to the byte)
                assert offset == 0 and abs(first[name] - size) <= bound, (name, first[name], size)
            mine = [(f"{plan.ranks[f.rank].files[f.index].stem}.distcp", o, n) for f in rr.files for o, n in f.ranges]
            assert mine == items, (tp, world, model_only, rr.rank)
