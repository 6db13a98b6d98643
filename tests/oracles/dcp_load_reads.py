"""A real ``dcp.load`` of a checkpoint that ``mode=fsdp`` saved, at any world size, recording what its
``FileSystemReader`` reads on each rank: the oracle of the emulated restore (``workload.restore``).

    python tests/oracles/dcp_load_reads.py STEP_FOLDER OUT_JSON SHAPE_JSON DTYPE LOAD...

LOAD: ``WORLD:MODEL_ONLY`` (``2:0``, ``4:1``), each a load by WORLD processes forked from this one (gloo, CPU;
forked, so torch is imported once). Each builds the ``fsdp`` mode's model (``dlio_ckpt.run.real.llama`` of the
``TransformerShape`` in SHAPE_JSON, in DTYPE; FSDP2 on every block and the root; Adam with its state made by
one step on zero gradients), takes ``get_state_dict`` as the mode does (``{"model", "optim"}``, or the model
alone when MODEL_ONLY is 1) and loads it with a ``FileSystemReader`` that records, in order, every file slice
it reads: ``.metadata`` whole, then (file name, offset, length) per read item (``_slice_file``).
OUT_JSON: ``{"WORLD:MODEL_ONLY": {rank: [[file, offset, length], ...]}}``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from dlio_ckpt.model.dense import TransformerShape
from dlio_ckpt.model.dtypes import DTYPES
from dlio_ckpt.run.real.llama import Llama


class Recording(dcp.FileSystemReader):
    """DCP's own reader, noting each slice it reads (the bytes ``torch.load`` then parses)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.reads: list[tuple[str, int, int]] = []

    def read_metadata(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201 - DCP's signature
        if kwargs.get("rank") is None:
            self.reads.append((".metadata", 0, os.path.getsize(Path(self.path) / ".metadata")))
        return super().read_metadata(*args, **kwargs)

    def _slice_file(self, file, sinfo):  # noqa: ANN001, ANN202
        self.reads.append((Path(file.name).name, sinfo.offset, sinfo.length))
        return super()._slice_file(file, sinfo)


def worker(rank: int, world: int, port: int, folder: str, out: str, model_only: bool, shape: dict,
           dtype: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    with torch.device("meta"):
        model = Llama(TransformerShape(**shape)).to(getattr(torch, DTYPES[dtype].torch))
    mesh = init_device_mesh("cpu", (world,))
    for block in model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device="cpu")
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()  # Adam's state exists, shaped as after a training step
    msd, osd = get_state_dict(model, opt)
    reader = Recording(folder)
    dcp.load({"model": msd} if model_only else {"model": msd, "optim": osd}, storage_reader=reader)
    gathered = [None] * world
    dist.all_gather_object(gathered, reader.reads)
    if rank == 0:
        Path(out).write_text(json.dumps({str(r): reads for r, reads in enumerate(gathered)}))
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    folder, out, shape, dtype, *loads = sys.argv[1:]
    found = {}
    for load in loads:
        world, model_only = (int(x) for x in load.split(":"))
        part = f"{out}.{world}-{model_only}"
        mp.start_processes(worker, (world, free_port(), folder, part, bool(model_only), json.loads(shape), dtype),
                           nprocs=world, start_method="fork")
        found[load] = json.loads(Path(part).read_text())
    Path(out).write_text(json.dumps(found))
