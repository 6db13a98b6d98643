"""Real DeepSpeed loads on CPU (gloo), the oracle of ``checkpoint.layout=deepspeed``'s read phase: for each case of
``tests/oracles/deepspeed_save.py`` (tiny at TP 2, DP 2 and 3, ZeRO 1, 2 and 3, bf16 and fp32: its model, mpu
and config, imported from it) and of ``tests/oracles/deepspeed_moe_save.py`` (``workload=tiny_moe`` on 4 ranks, EP
2 with ZeRO 1 in bf16 and EP 4 with ZeRO 2 in fp32: its ``deepspeed.moe.layer.MoE`` model and param groups), a save
by ``engine.save_checkpoint``, then ``engine.load_checkpoint`` in fresh engines, recording on every rank, in order,
each file it ``torch.load``s. Written into ``tests/data/deepspeed_load_reads.json`` (dense cases under ``cases``,
mixtures of experts under ``moe_cases``), which ``tests/unit/test_deepspeed_restore.py`` holds the layout's
``restore`` to. The same environment as ``deepspeed_save.py`` (its docstring says how to build it; versions pinned by
``tests/oracles/deepspeed-requirements.txt``); from the repository root::

    DS_ACCELERATOR=cpu /tmp/dsenv/bin/python tests/oracles/deepspeed_load_reads.py tests/data/deepspeed_load_reads.json

(optionally followed by case ids to record only those: the other cases already in the file are kept as they are).
The loads of each case, each by a fresh engine (a ZeRO 3 engine cannot load right after its own save, DeepSpeed's
docstring says):

- ``default``: ``load_checkpoint(dir, tag="global_step1")``, every other argument DeepSpeed's default;
- ``latest``: ``load_checkpoint(dir)``: the tag read from ``latest`` (with Python's ``open``, noted under
  ``opened``, what is opened beside ``torch.load``), which our layout does not write;
- ``module_only``: ``load_checkpoint(dir, tag="global_step1", load_module_only=True)``.

For each ``torch.load`` (DeepSpeed's ``TorchCheckpointEngine.load`` is ``torch.load(path)``): the file's name in
the step folder, its size, and the bytes the calling thread read while it ran (``rchar`` of
``/proc/thread-self/io``: every ``read`` of the file, page cache or not), so ``whole`` says ``torch.load`` read the
whole file (at least its size). The dense cases import nothing of ``dlio_ckpt``; the MoE cases' model is
``deepspeed_moe_save.py``'s, whose shapes come from ``dlio_ckpt.config.compose`` of ``workload=tiny_moe`` (pure
Python, importable in DeepSpeed's environment: the repository root is put on ``sys.path`` here).
"""

from __future__ import annotations

import builtins
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # the repository root: deepspeed_moe_save's dlio_ckpt
import deepspeed_moe_save  # noqa: E402  (beside this file: tiny_moe's model and param groups, its cases)
import deepspeed_save  # noqa: E402  (beside this file: tiny's model, the mpu, the cases)

TAG = "global_step1"
LOADS = {"default": {"tag": TAG}, "latest": {}, "module_only": {"tag": TAG, "load_module_only": True}}


def rchar() -> int:
    """The bytes this thread has read (``read``, ``pread``) so far."""
    for line in Path("/proc/thread-self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/thread-self/io")


def engine_for(rank: int, world: int, setup: Callable, args: tuple) -> object:
    """A fresh engine of the case's model, ``setup(rank, world, *args)``'s (``deepspeed_save.dense``: a new mpu's
    groups, every rank making them in the same order; ``deepspeed_moe_save.moe``: DeepSpeed's expert groups, made
    once per process)."""
    import deepspeed

    model, config, mpu, params = setup(rank, world, *args)
    opt = torch.optim.AdamW(params, lr=1e-3)
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=config, mpu=mpu)
    return engine


def recorded_load(engine: object, folder: str, kwargs: dict) -> dict:
    """``engine.load_checkpoint(folder, **kwargs)``, noting every ``torch.load`` and every ``open`` under
    ``folder``, in order."""
    step, loads, opened, inside = Path(folder, TAG), [], [], []
    load, python_open = torch.load, builtins.open

    def recording(f: object, *a: object, **k: object) -> object:
        if not isinstance(f, str | os.PathLike):
            loads.append({"file": repr(f), "whole": None})
            return load(f, *a, **k)
        path, before = Path(f), rchar()
        inside.append(True)
        try:
            out = load(f, *a, **k)
        finally:
            inside.pop()
        read = rchar() - before
        name = str(path.relative_to(step)) if path.is_relative_to(step) else str(path)
        size = path.stat().st_size
        loads.append({"file": name, "bytes": size, "bytes_read": read, "whole": read >= size and not k.get("mmap")})
        return out

    def noting(file: object, *a: object, **k: object) -> object:  # what is opened beside torch.load (latest)
        if not inside and isinstance(file, str | os.PathLike) and Path(file).is_relative_to(folder):
            opened.append(str(Path(file).relative_to(folder)))
        return python_open(file, *a, **k)

    torch.load, builtins.open = recording, noting
    try:
        result = engine.load_checkpoint(folder, **kwargs)
    finally:
        torch.load, builtins.open = load, python_open
    return {"torch_load": loads, "opened": opened, "loaded": result[0] is not None}


def worker(rank: int, world: int, port: int, setup: Callable, args: tuple, out: str) -> None:
    """One rank: a step and ``save_checkpoint`` (as ``deepspeed_save.py``'s worker), then each load of
    :data:`LOADS` by a fresh engine, recording its ``torch.load``s."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_SIZE=str(world))
    import deepspeed
    import deepspeed.comm as dist

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # gloo needs no shm op: nothing to build
    deepspeed.init_distributed(dist_backend="gloo")
    engine = engine_for(rank, world, setup, args)
    loss = engine(torch.ones(()))
    engine.backward(loss)
    engine.step()
    engine.save_checkpoint(out, tag=TAG)
    del engine
    dist.barrier()
    loads = {}
    for name, kwargs in LOADS.items():
        engine = engine_for(rank, world, setup, args)
        dist.barrier()
        loads[name] = recorded_load(engine, out, kwargs)
        del engine
        dist.barrier()
    Path(out, f"rank{rank}.json").write_text(json.dumps(loads))


def record(name: str, world: int, setup: Callable, args: tuple) -> dict:
    """One case on its world of processes: the step folder's files, and each load's reads rank by rank."""
    with deepspeed_save.spawned(worker, world, setup, args) as (tmp, seconds):
        files = {p.name: p.stat().st_size for p in sorted(Path(tmp, TAG).iterdir())}
        ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]
    print(f"{name}: {seconds:.1f} s", file=sys.stderr)
    return {"files": files, "loads": {load: [r[load] for r in ranks] for load in LOADS}}


def dense_case(case: tuple) -> dict:
    name, world, tensor, pipeline, zero, dtype = case
    return {"world": world, "tensor": tensor, "pipeline": pipeline, "zero_stage": zero, "dtype": dtype,
            **record(name, world, deepspeed_save.dense, (case,))}


def moe_case(name: str, overrides: list[str]) -> dict:
    """A case of ``deepspeed_moe_save.py``: ``workload=tiny_moe`` with its overrides, on its world."""
    from dlio_ckpt.config import compose

    w, _, _ = compose(["workload=tiny_moe", "++workload.checkpoint.layout=deepspeed", *overrides], None)
    par, world = w.model.parallelism, deepspeed_moe_save.WORLD
    return {"world": world, "overrides": overrides, "tensor": par.tensor, "expert": par.expert,
            "zero_stage": par.zero_stage, "dtype": w.model.model_datatype,
            **record(name, world, deepspeed_moe_save.moe, (overrides,))}


def dumps(value: object, level: int = 0) -> str:
    """JSON with each rank's reads, and each read, on a line of its own (as ``tests/support/recorded.py``
    writes recordings, which this environment does not import)."""
    pad = " " * (level + 1)
    if isinstance(value, dict) and any(isinstance(v, dict | list) for v in value.values()):
        return "{\n" + ",\n".join(f"{pad}{json.dumps(k)}: {dumps(v, level + 1)}" for k, v in value.items()) + \
            "\n" + " " * level + "}"
    if isinstance(value, list) and value and all(isinstance(v, list | dict) for v in value):
        return "[\n" + ",\n".join(pad + dumps(v, level + 1) for v in value) + "\n" + " " * level + "]"
    return json.dumps(value)


def main() -> None:
    import deepspeed

    out, only = Path(sys.argv[1]), sys.argv[2:]
    versions = {"deepspeed": deepspeed.__version__, "torch": torch.__version__, "python": sys.version.split()[0]}
    kept = json.loads(out.read_text()) if only and out.exists() else {}  # the cases not named, as they are
    if kept:
        assert kept["versions"] == versions, f"{out} was recorded with {kept['versions']}: record every case"
    cases = {c[0]: dense_case(c) if c[0] in only or not only else kept["cases"][c[0]]
             for c in deepspeed_save.CASES if not only or c[0] in only or c[0] in kept.get("cases", {})}
    moe = {n: moe_case(n, extra) if n in only or not only else kept["moe_cases"][n]
           for n, extra in deepspeed_moe_save.CASES if not only or n in only or n in kept.get("moe_cases", {})}
    out.write_text(dumps({"versions": versions, "script": f"tests/oracles/{Path(sys.argv[0]).name}",
                          "tag": TAG, "loads": {k: {a: v for a, v in kw.items()} for k, kw in LOADS.items()},
                          "cases": cases, "moe_cases": moe}) + "\n")


if __name__ == "__main__":
    main()
