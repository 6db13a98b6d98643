"""A real ``dcp.save``'s files held to the emulated plan of the same job: the save itself (``mode=fsdp``), the
items its ``.metadata`` places and the plan's, and the comparison of the two. The DCP layout's tests
(tests/against_frameworks/test_dcp_layout.py), the save traced under strace (test_io_patterns.py), the MoE
restores (test_moe_restore.py) and the restores' recording (tests/oracles/record_restore_reads.py) share them."""

from __future__ import annotations

from pathlib import Path

from dlio_ckpt.config import compose
from dlio_ckpt.plan.layouts import make_plan
from dlio_ckpt.plan.layouts.dcp import item_size
from dlio_ckpt.plan.types import ItemFile, Plan
from tests.support.bounds import DCP_METADATA
from tests.support.cli import dlio
from tests.support.workloads import DCP


def real_save(tmp_path: Path, world: int, threads: int, extra: list[str]) -> Path:
    """The folder of one real dcp.save (mode=fsdp: transformers' Llama under FSDP2, Adam after one step)."""
    root = tmp_path / "real"
    r = dlio(["workload=tiny", "++workload.mode=fsdp", "++workload.model.parallelism.tensor=1", *extra,
              f"++workload.fsdp.thread_count={threads}", f"++workload.storage.storage_root={root}",
              "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=0",
              f"hydra.run.dir={tmp_path / 'out'}"], tmp_path, nprocs=world, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return root / "checkpoints" / "tiny" / "global_epoch1_step1"


def real_saves(tmp_path: Path, world: int, cases: dict[str, tuple[int, list[str]]]) -> dict[str, Path]:
    """Several real dcp.saves on ``world`` processes (``cases``: name -> (writer threads, extra overrides), each the
    job :func:`real_save` runs), as the points of one sweep: one job, so each process imports torch and
    transformers once, not once per case; each point an ordinary run of mode=fsdp, its model built afresh (the
    process group, once made, serves every point). Each case's workload is its composed configuration written as a
    workload file (``--config-dir``). The folder of each case's save, by name."""
    import json

    folder = tmp_path / "workloads" / "workload"
    folder.mkdir(parents=True)
    files = [f"dcp_case{i}" for i in range(1, len(cases) + 1)]  # workload names Hydra's sweep syntax takes as given
    for file, (threads, extra) in zip(files, cases.values(), strict=True):
        _, raw, _ = compose(["workload=tiny", "++workload.mode=fsdp", "++workload.model.parallelism.tensor=1", *extra,
                             f"++workload.fsdp.thread_count={threads}", "++workload.checkpoint.num_checkpoints_write=1",
                             "++workload.checkpoint.num_checkpoints_read=0"], None)
        (folder / f"{file}.yaml").write_text(json.dumps(raw))  # JSON is YAML
    root = tmp_path / "real"
    r = dlio(["sweep", f"workload={','.join(files)}", "--config-dir", str(tmp_path / "workloads"), "--keep-checkpoints",
              f"++workload.storage.storage_root={root}", f"++hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path,
             nprocs=world, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return {name: root / "checkpoints" / "tiny" / "sweep" / f"point{i}" / "global_epoch1_step1"
            for i, name in enumerate(cases, 1)}


def real_items(folder: Path) -> dict[str, list[tuple[int, int, str]]]:
    """Per ``.distcp`` file, its items as the real ``.metadata`` places them: (offset, length, name), in file order."""
    import torch.distributed.checkpoint as dcp

    out: dict[str, list[tuple[int, int, str]]] = {}
    for index, info in dcp.FileSystemReader(str(folder)).read_metadata().storage_data.items():
        out.setdefault(info.relative_path, []).append((info.offset, info.length, index.fqn))
    return {name: sorted(items) for name, items in out.items()}


def emulated_items(plan: Plan) -> dict[str, list[tuple[int, int, str]]]:
    """The same from the plan: each file's items back to back, each as long as its ``torch.save`` archive."""
    out: dict[str, list[tuple[int, int, str]]] = {}
    for r in plan.ranks:
        for f in r.files:
            assert isinstance(f, ItemFile)
            lengths = [item_size(i) for i in f.items]
            offsets = [sum(lengths[:k]) for k in range(len(lengths))]
            if f.items:  # DCP lists no item of an empty file
                out[f"{f.stem}.distcp"] = [(o, n, i.fqn) for o, n, i in zip(offsets, lengths, f.items, strict=True)]
    return out


def assert_files_are_dcps(folder: Path, world: int, threads: int, extra: list[str]) -> None:
    """The files of a real dcp.save (``folder``) against the emulated plan of the same job."""
    real = {p.name: p.stat().st_size for p in folder.iterdir()}
    workload, _, _ = compose([*DCP, *extra, f"++workload.checkpoint.files_per_rank={threads}"], None)
    plan = make_plan(workload, world)
    plan.validate()
    emulated = {f"{f.stem}.distcp": f.size for r in plan.ranks for f in r.files}
    emulated |= {c.name: c.size for c in plan.coordinator}
    assert sorted(emulated) == sorted(real)
    for name, size in real.items():
        print(f"{name}: emulated {emulated[name]} real {size} ({(emulated[name] - size) / size:+.2%})")
    data = {n: s for n, s in real.items() if n != ".metadata"}
    assert {n: s for n, s in emulated.items() if n != ".metadata"} == data
    assert emulated_items(plan) == real_items(folder)
    assert abs(emulated[".metadata"] - real[".metadata"]) <= DCP_METADATA * real[".metadata"]
