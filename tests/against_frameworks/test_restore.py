"""Restores as they really happen (``workload.restore``): a DCP checkpoint saved at one world size and loaded at
another, or the model alone, held to what a real ``dcp.load`` reads on each rank (``tests/oracles/
dcp_load_reads.py``, an instrumented ``FileSystemReader``), and Megatron's ``dist_checkpointing`` load to what
it reads (``tests/oracles/megatron_save.py``). The emulated loads run end to end: tests/e2e/test_restore.py."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.model.dense import TransformerShape
from dlio_ckpt.plan.layouts import make_plan
from dlio_ckpt.plan.restore import restore_plan
from tests.against_frameworks.test_dcp_layout import real_save
from tests.support import ORACLES, REPO
from tests.support.workloads import DCP, datatypes

ORACLE = ORACLES / "dcp_load_reads.py"
SHAPE = [*datatypes("fp32"), "++workload.model.transformer.vocab_size=1001"]  # dim 0 uneven over 3 and 4 ranks


def real_reads(step: Path, loads: list[tuple[int, bool]], tmp_path: Path,
               ) -> dict[tuple[int, bool], dict[int, list[tuple[str, int, int]]]]:
    """What dcp.load reads on each rank, per load (world size, model alone), from the oracle."""
    workload, _, _ = compose(["workload=tiny", "++workload.model.parallelism.tensor=1", *SHAPE], None)
    out = tmp_path / "reads.json"
    r = subprocess.run([sys.executable, str(ORACLE), str(step), str(out),
                        json.dumps(asdict(TransformerShape.from_model(workload.model))), workload.model.model_datatype,
                        *(f"{w}:{int(m)}" for w, m in loads)],
                       capture_output=True, text=True, timeout=300, cwd=REPO,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-3000:]
    found = json.loads(out.read_text())
    return {(w, m): {int(k): [tuple(x) for x in v] for k, v in found[f"{w}:{int(m)}"].items()} for w, m in loads}


def emulated_reads(saved: int, world: int, model_only: bool) -> dict[int, list[tuple[str, int, int]]]:
    workload, _, _ = compose([*DCP, *SHAPE, f"++workload.restore.world_size={world}",
                              f"++workload.restore.model_only={model_only}"], None)
    plan = make_plan(workload, saved)
    restore = restore_plan(workload, plan)
    (meta,) = plan.coordinator
    return {r.rank: [(meta.name, 0, meta.size)] + [(f"{plan.ranks[f.rank].files[f.index].stem}.distcp", o, n)
                                                    for f in r.files for o, n in f.ranges] for r in restore.ranks}


@pytest.mark.real
@pytest.mark.mpi
def test_the_emulated_restore_reads_what_dcp_load_reads(tmp_path):
    """Every rank's reads, in order: .metadata first, then each stored item's (file, offset, length) as DCP's
    FileSystemReader slices it; saved at 3 ranks (rows uneven), loaded resharded to 2 and to 4, at the same world
    size (replicated items read from the ranks that stored them), and the model alone."""
    saved, loads = 3, [(2, False), (4, False), (3, False), (2, True)]
    real_save(tmp_path, saved, 1, SHAPE)
    step = tmp_path / "real" / "checkpoints" / "tiny" / "global_epoch1_step1"
    every = real_reads(step, loads, tmp_path)
    for world, model_only in loads:
        real, ours = every[(world, model_only)], emulated_reads(saved, world, model_only)
        assert sorted(real) == sorted(ours) == list(range(world))
        for rank in range(world):
            (name, _, size), *items = real[rank]
            assert name == ".metadata" and abs(ours[rank][0][2] - size) <= 0.10 * size  # .metadata's size: ~
            assert ours[rank][1:] == items, (world, model_only, rank)


MEGATRON_ORACLE = ORACLES / "megatron_save.py"
# TP 2 x PP 2 x DP 2 (8 ranks), the first stage one block of 3 (Megatron's uneven split)
MEGATRON = ["workload=tiny", "++workload.checkpoint.layout=megatron", "++workload.model.parallelism.tensor=2",
            "++workload.model.parallelism.pipeline=2", "++workload.model.parallelism.first_stage_layers=1",
            "++workload.model.num_layers=3", "++workload.model.transformer.hidden_size=64",
            "++workload.model.transformer.ffn_hidden_size=96", "++workload.model.transformer.num_attention_heads=4",
            "++workload.model.transformer.num_kv_heads=2", "++workload.model.transformer.vocab_size=998",
            "++workload.model.model_datatype=fp32", "++workload.checkpoint.files_per_rank=1"]


@pytest.mark.real
def test_the_emulated_megatron_restore_reads_what_dist_checkpointing_load_reads(tmp_path):
    """A real megatron-core save with pipeline parallelism (TP 2 x PP 2 x DP 2, 3 blocks split 1 + 2, the
    distributed optimizer) holds our plan's items in our order, to the byte; then Megatron's default load at
    TP 1 on 4 ranks (PP 2 x DP 2, model and optimizer) and at TP 2 on 4 ranks (the model alone; data
    parallelism 2 -> 1) is run. The ranks that read are ours; each first opens metadata.json, common.pt and
    .metadata whole (the files our emulated load reads first, on every rank), then reads, on every rank, the
    (file, offset, length) our restore plan reads, in the same order. About 25 s (9 forked ranks and 8)."""
    pytest.importorskip("megatron.core")
    from tests.against_frameworks.test_megatron_layout import assert_same_files, assert_same_items

    step, out, world = tmp_path / "real", tmp_path / "reads.json", 8
    model = ["2x2x1", "3", "64", "96", "4", "2", "998", "fp32", "1"]  # TP x PP x the first stage's blocks
    r = subprocess.run([sys.executable, str(MEGATRON_ORACLE), str(step), str(world), *model],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    workload, _, _ = compose(MEGATRON, None)
    assert_same_files({p.name: p.stat().st_size for p in step.iterdir()}, workload, world)
    plan = make_plan(workload, world)
    assert_same_items(step, plan)
    loads = [(1, 4, False), (2, 4, True)]
    r = subprocess.run([sys.executable, str(MEGATRON_ORACLE), "load", str(out), str(step),
                        ",".join(f"{tp}:{w}:{int(m)}" for tp, w, m in loads), *model],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    found = json.loads(out.read_text())
    first = {c.name: c.size for c in plan.coordinator}  # what our emulated load reads whole before its ranges
    for tp, world, model_only in loads:
        w, _, _ = compose([*MEGATRON, f"++workload.restore.world_size={world}", f"++workload.restore.tensor={tp}",
                           f"++workload.restore.model_only={model_only}"], None)
        restore = restore_plan(w, plan)
        real = {int(rank): [tuple(x) for x in reads]
                for rank, reads in found[f"{tp}:{world}:{int(model_only)}"].items()}
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
