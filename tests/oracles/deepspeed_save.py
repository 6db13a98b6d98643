"""Real DeepSpeed saves on CPU (gloo), the oracle of ``checkpoint.layout=deepspeed`` for dense models: records
what ``engine.save_checkpoint`` wrote for ``workload=tiny``'s tensors, file by file and rank by rank, into
``tests/data/deepspeed_dense.json``, which ``tests/unit/test_layouts.py`` holds the layout to. DeepSpeed is not a
test dependency (it needs its own environment, pinned in ``tests/oracles/deepspeed-requirements.txt``), so
its saves are recorded, and this script is how to record them again::

    python3.11 -m venv /tmp/dsenv
    /tmp/dsenv/bin/pip install torch==2.13.0
    DS_BUILD_OPS=0 /tmp/dsenv/bin/pip install -r tests/oracles/deepspeed-requirements.txt
    DS_ACCELERATOR=cpu /tmp/dsenv/bin/python tests/oracles/deepspeed_save.py tests/data/deepspeed_dense.json

The model is tiny's (configs/workload/tiny.yaml, written out below, not read from our code) as
Megatron-DeepSpeed's GPT holds it: 4 blocks (hidden 256, SwiGLU FFN 688, 8 heads and 4 KV heads of 32, fused
QKV and fused gate and up projections, RMSNorms), a 1000-word embedding and an untied head, each tensor a
module of its own. Tensor parallelism is DeepSpeed's ``mpu`` (Megatron's interface: TP groups
of adjacent ranks, DP groups across them), each TP rank holding its Megatron shard of every tensor. AdamW, one
step on a made-up loss, then ``save_checkpoint``. For every file: its bytes on disk and the bytes of the
tensor storages in its zip (``archive/data/*``), so that the test can compare the tensors exactly and the
rest (DeepSpeed's own keys) with a measured bound.

DeepSpeed's CPU accelerator builds its shared-memory all-reduce op (``deepspeed_shm_comm``, C++, ~60 s with
ninja and g++) on the first ``init_distributed``; gloo does every collective without it, so it is switched off
here (``deepspeed.ops.__compatible_ops__``): nothing is compiled, and nothing a save writes depends on it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.multiprocessing as mp
from torch import nn

# tiny (configs/workload/tiny.yaml)
LAYERS, HIDDEN, FFN, VOCAB, HEADS, KV_HEADS = 4, 256, 688, 1000, 8, 4
HEAD_DIM = HIDDEN // HEADS

# (case id, world size, tensor parallel, pipeline parallel, ZeRO stage, dtype): the cases of
# tests/unit/test_layouts.py (tiny at 4 ranks, TP 2 x DP 2), and DP 3 (6 ranks), where partitions do not divide
CASES = [
    ("tp2-zero1-bf16", 4, 2, 1, 1, "bf16"),
    ("tp2-zero2-fp32", 4, 2, 1, 2, "fp32"),
    ("tp2-zero3-fp32", 4, 2, 1, 3, "fp32"),
    ("tp2-zero3-bf16", 4, 2, 1, 3, "bf16"),
    ("tp2-dp3-zero1-fp32", 6, 2, 1, 1, "fp32"),
    ("tp2-dp3-zero3-fp32", 6, 2, 1, 3, "fp32"),
]


def shard_shapes(tp: int) -> list[tuple[str, tuple[int, ...]]]:
    """One TP rank's tensors of Megatron-DeepSpeed's GPT (the model DLIO's DeepSpeed job trains): per block the
    input norm, the fused QKV projection and SwiGLU's fused gate and up projection (split by output rows), the
    attention's output and the down projection (split by input columns), the second norm; the embedding and
    untied head split by vocabulary; the norms whole."""
    qkv, ffn = (HEADS + 2 * KV_HEADS) * HEAD_DIM // tp, FFN // tp
    out = [("embedding", (VOCAB // tp, HIDDEN))]
    for i in range(LAYERS):
        out += [(f"layers.{i}.{n}", s) for n, s in (
            ("input_layernorm", (HIDDEN,)), ("query_key_value", (qkv, HIDDEN)), ("dense", (HIDDEN, HIDDEN // tp)),
            ("post_attention_layernorm", (HIDDEN,)), ("dense_h_to_4h", (2 * ffn, HIDDEN)),
            ("dense_4h_to_h", (HIDDEN, ffn)))]
    return out + [("final_layernorm", (HIDDEN,)), ("output_layer", (VOCAB // tp, HIDDEN))]


class Leaf(nn.Module):
    """One tensor in a module of its own: ZeRO 3 gathers a module's parameters around its ``forward``."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(shape) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * (self.weight.float() ** 2).sum()


class Model(nn.Module):
    def __init__(self, tp: int) -> None:
        super().__init__()
        self.tensors = nn.ModuleDict({n.replace(".", "_"): Leaf(s) for n, s in shard_shapes(tp)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum(leaf(x) for leaf in self.tensors.values())


class Mpu:
    """Megatron's ``mpu`` interface, which DeepSpeed asks for its model- and data-parallel groups."""

    def __init__(self, rank: int, world: int, tp: int) -> None:
        import torch.distributed as dist

        self.tp, self.dp = tp, world // tp
        for d in range(self.dp):  # every rank creates every group, in the same order
            g = dist.new_group(list(range(d * tp, (d + 1) * tp)))
            if rank // tp == d:
                self.tp_group = g
        for t in range(tp):
            ranks = list(range(t, world, tp))
            g = dist.new_group(ranks)
            if rank % tp == t:
                self.dp_group, self.dp_ranks = g, ranks
        self.rank = rank

    def get_model_parallel_rank(self) -> int:
        return self.rank % self.tp

    def get_model_parallel_world_size(self) -> int:
        return self.tp

    def get_model_parallel_group(self):
        return self.tp_group

    def get_data_parallel_rank(self) -> int:
        return self.rank // self.tp

    def get_data_parallel_world_size(self) -> int:
        return self.dp

    def get_data_parallel_group(self):
        return self.dp_group

    def get_data_parallel_group_ranks(self) -> list[int]:
        return self.dp_ranks


def storages(path: Path) -> tuple[int, int]:
    """The number and bytes of the tensor storages ``torch.save`` put in a file (its zip's ``data/`` records)."""
    with zipfile.ZipFile(path) as z:
        data = [i.file_size for i in z.infolist() if i.filename.split("/")[-2:-1] == ["data"]]
    return len(data), sum(data)


def dense(rank: int, world: int, case: tuple) -> tuple[nn.Module, dict, Mpu | None, list]:
    """tiny's TP shard for this rank, and the case's DeepSpeed config."""
    _, _, tp, _, zero, dtype = case
    torch.manual_seed(rank % tp)
    mpu, model = Mpu(rank, world, tp), Model(tp)
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "steps_per_print": 1000,
              "bf16": {"enabled": dtype == "bf16"}, "zero_optimization": {"stage": zero}}
    return model, config, mpu, list(model.parameters())


def worker(rank: int, world: int, port: int, setup: Callable, args: tuple, out: str) -> None:
    """One rank: ``setup(rank, world, *args)`` builds the model, config, mpu and AdamW's parameters (or param
    groups); one step, then ``save_checkpoint``, recording the files this rank's ``torch.save`` writes."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_SIZE=str(world))
    import deepspeed

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # gloo needs no shm op: nothing to build
    deepspeed.init_distributed(dist_backend="gloo")
    model, config, mpu, params = setup(rank, world, *args)
    opt = torch.optim.AdamW(params, lr=1e-3)
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=config, mpu=mpu)
    loss = engine(torch.ones(()))
    engine.backward(loss)
    engine.step()
    written: list[str] = []  # every checkpoint file goes through torch.save (DeepSpeed's TorchCheckpointEngine)
    save = torch.save

    def recording(obj: object, f: str, *a: object, **k: object) -> None:
        written.append(Path(f).name)
        save(obj, f, *a, **k)

    torch.save = recording
    engine.save_checkpoint(out, tag="global_step1")
    torch.save = save
    Path(out, f"rank{rank}.json").write_text(json.dumps(written))


@contextmanager
def spawned(worker: Callable, world: int, setup: Callable, args: tuple) -> Iterator[tuple[str, float]]:
    """``worker(rank, world, port, setup, args, folder)`` on ``world`` processes (gloo on a free local port), in a
    new temporary folder: the folder, removed after the block, and the seconds the processes took."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.monotonic()
        mp.spawn(worker, args=(world, port, setup, args, tmp), nprocs=world, join=True)
        yield tmp, time.monotonic() - start


def record(name: str, world: int, setup: Callable, args: tuple) -> dict:
    """Run one case on ``world`` processes; every file of its step folder, and what each rank wrote."""
    with spawned(worker, world, setup, args) as (tmp, seconds):
        files = {}
        for p in sorted((Path(tmp) / "global_step1").iterdir()):
            n, b = storages(p)
            files[p.name] = {"bytes": p.stat().st_size, "storages": n, "storage_bytes": b}
        ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]
        beside = sorted(p.name for p in Path(tmp).iterdir() if p.is_file() and not p.name.startswith("rank"))
    print(f"{name}: {len(files)} files, {seconds:.1f} s", file=sys.stderr)
    return {"world": world, "ranks": ranks, "files": files, "beside_the_step": beside, "seconds": round(seconds, 1)}


def write(out: Path, cases: dict[str, dict]) -> None:
    import deepspeed

    out.write_text(json.dumps({"deepspeed": deepspeed.__version__, "torch": torch.__version__,
                               "python": sys.version.split()[0], "script": f"tests/oracles/{Path(sys.argv[0]).name}",
                               "cases": cases}, indent=1) + "\n")


def main() -> None:
    only = sys.argv[2:]
    write(Path(sys.argv[1]), {c[0]: {"tensor": c[2], "pipeline": c[3], "zero_stage": c[4], "dtype": c[5],
                                     **record(c[0], c[1], dense, (c,))} for c in CASES if not only or c[0] in only})


if __name__ == "__main__":
    main()
