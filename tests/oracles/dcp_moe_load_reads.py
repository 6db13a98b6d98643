"""A real ``dcp.load`` of a mixture of experts placed as torchtitan places it (routed experts on the 2-D expert
mesh), at the save's world size and at others, recording what its ``FileSystemReader`` reads on each rank: the
oracle of the emulated restore of ``checkpoint.layout=dcp`` with ``model.family=moe`` and expert parallelism
(``tests/against_frameworks/test_moe_restore.py``), which it records, with the versions it ran with, into
``tests/data/dcp_moe_restore_reads.json``::

    PYTHONPATH=. .venv/bin/python tests/oracles/dcp_moe_load_reads.py        # about 20 s on 2 cores

Per case of ``DCP_MOE_CASES`` (``tests/support/restore_cases.py``, recorded beside the reads: the test refuses a
recording of other cases): a real ``dcp.save`` on the case's world size by ``tests/oracles/dcp_moe_save.py``
(torchtitan v0.2.0's modules and placements, reimplemented on torch: torchtitan itself is not installed here), the
saved files' sizes and every item ``.metadata`` places (file, offset, length, name, the stored chunk's offsets),
then, for each load (world size, model alone), that many processes forked from this one (gloo, CPU) place the same
model on their own meshes (``dcp_moe_save.trained``: at the load's world size the expert mesh is (world / EP, EP), and
FSDP2 splits the experts on dim 0 or on dim 1 by torchtitan's rule at that size), take ``get_state_dict`` and
load it through DCP's ``FileSystemReader`` instrumented as ``tests/oracles/dcp_load_reads.py``'s: per rank, in
order, ``.metadata`` whole, then (file, offset, length) per item read (``_slice_file``).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).parent))
import dcp_moe_save  # noqa: E402 - the save's placement, shared
from dcp_load_reads import Recording  # noqa: E402 - DCP's reader, noting each slice it reads

TORCHTITAN = "0.2.0"  # the release whose placements dcp_moe_save.py reimplements


def worker(rank: int, world: int, port: int, folder: str, out: str, model_only: bool, c: dict) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, opt = dcp_moe_save.trained(c, world)
    msd, osd = get_state_dict(model, opt)
    reader = Recording(folder)
    dcp.load({"model": msd} if model_only else {"model": msd, "optim": osd}, storage_reader=reader)
    gathered: list[object] = [None] * world
    dist.all_gather_object(gathered, reader.reads)
    if rank == 0:
        Path(out).write_text(json.dumps({str(r): reads for r, reads in enumerate(gathered)}))
    dist.destroy_process_group()


def load(folder: Path, world: int, model_only: bool, c: dict) -> dict:
    out = folder.parent / f"reads-{world}-{int(model_only)}.json"
    mp.start_processes(worker, (world, dcp_moe_save.free_port(), str(folder), str(out), model_only, c),
                       nprocs=world, start_method="fork")
    return json.loads(out.read_text())


def stored(folder: Path) -> tuple[dict[str, int], list[list]]:
    """The saved files' sizes, and every item as ``.metadata`` places it: file, offset, length, name, and the
    stored chunk's offsets in its tensor (none for an object), in file and offset order."""
    import torch.distributed.checkpoint as dcp

    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir())}
    items = [[info.relative_path, info.offset, info.length, index.fqn, list(index.offset or ())]
             for index, info in dcp.FileSystemReader(str(folder)).read_metadata().storage_data.items()]
    return files, sorted(items)


def record(tmp: Path, c: dict, saved: int, loads: list[tuple[int, bool]]) -> dict:
    folder = tmp / "saved"
    dcp_moe_save.save(str(folder), saved, c)
    files, items = stored(folder)
    return {"config": c, "saved": saved, "files": files, "items": items,
            "loads": {f"{w}:{int(m)}": load(folder, w, m, c) for w, m in loads}}


def main() -> None:
    from tests.support.restore_cases import DCP_MOE_CASES, DCP_MOE_READS
    found = {}
    for name, (c, saved, loads) in DCP_MOE_CASES.items():
        with tempfile.TemporaryDirectory() as tmp:
            found[name] = record(Path(tmp), c, saved, loads)
        print(f"{name}: saved at {saved}, loaded at {', '.join(f'{w}:{int(m)}' for w, m in loads)}")
    from tests.support.recorded import dumps
    recording = {"script": "tests/oracles/dcp_moe_load_reads.py",
                 "versions": {"torch": version("torch"), "torchtitan": TORCHTITAN,
                              "python": platform.python_version()}, "cases": found}
    DCP_MOE_READS.write_text(dumps(recording) + "\n")
    print(os.path.relpath(DCP_MOE_READS))


if __name__ == "__main__":
    main()
