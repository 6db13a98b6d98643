"""Real DeepSpeed loads on CPU (gloo), the oracle of ``checkpoint.layout=deepspeed``'s read phase: for each case of
``tests/oracles/deepspeed_save.py`` (tiny at TP 2, DP 2 and 3, ZeRO 1, 2 and 3, bf16 and fp32: its model, mpu
and config, imported from it), a save by ``engine.save_checkpoint``, then ``engine.load_checkpoint`` in fresh
engines, recording on every rank, in order, each file it ``torch.load``s. Written into
``tests/data/deepspeed_load_reads.json``, which ``tests/unit/test_deepspeed_restore.py`` holds the layout's
``restore`` to. The same environment as ``deepspeed_save.py`` (its docstring says how to build it; versions pinned by
``tests/oracles/deepspeed-requirements.txt``); from the repository root::

    DS_ACCELERATOR=cpu /tmp/dsenv/bin/python tests/oracles/deepspeed_load_reads.py tests/data/deepspeed_load_reads.json

(optionally followed by case ids to record only those). The loads of each case, each by a fresh engine (a ZeRO 3
engine cannot load right after its own save, DeepSpeed's docstring says):

- ``default``: ``load_checkpoint(dir, tag="global_step1")``, every other argument DeepSpeed's default;
- ``latest``: ``load_checkpoint(dir)``: the tag read from ``latest`` (with Python's ``open``, noted under
  ``opened``, what is opened beside ``torch.load``), which our layout does not write;
- ``module_only``: ``load_checkpoint(dir, tag="global_step1", load_module_only=True)``.

For each ``torch.load`` (DeepSpeed's ``TorchCheckpointEngine.load`` is ``torch.load(path)``): the file's name in
the step folder, its size, and the bytes the calling thread read while it ran (``rchar`` of
``/proc/thread-self/io``: every ``read`` of the file, page cache or not), so ``whole`` says ``torch.load`` read the
whole file (at least its size). Nothing of ``dlio_ckpt`` is imported: this runs in DeepSpeed's environment.
"""

from __future__ import annotations

import builtins
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import deepspeed_save  # noqa: E402  (beside this file: tiny's model, the mpu, the cases)

TAG = "global_step1"
LOADS = {"default": {"tag": TAG}, "latest": {}, "module_only": {"tag": TAG, "load_module_only": True}}


def rchar() -> int:
    """The bytes this thread has read (``read``, ``pread``) so far."""
    for line in Path("/proc/thread-self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/thread-self/io")


def engine_for(rank: int, world: int, case: tuple) -> object:
    """A fresh engine of the case's model (a new mpu's groups: every rank makes them in the same order)."""
    import deepspeed

    model, config, mpu, params = deepspeed_save.dense(rank, world, case)
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


def worker(rank: int, world: int, port: int, case: tuple, out: str) -> None:
    """One rank: a step and ``save_checkpoint`` (as ``deepspeed_save.py``'s worker), then each load of
    :data:`LOADS` by a fresh engine, recording its ``torch.load``s."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_SIZE=str(world))
    import deepspeed
    import deepspeed.comm as dist

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # gloo needs no shm op: nothing to build
    deepspeed.init_distributed(dist_backend="gloo")
    engine = engine_for(rank, world, case)
    loss = engine(torch.ones(()))
    engine.backward(loss)
    engine.step()
    engine.save_checkpoint(out, tag=TAG)
    del engine
    dist.barrier()
    loads = {}
    for name, kwargs in LOADS.items():
        engine = engine_for(rank, world, case)
        dist.barrier()
        loads[name] = recorded_load(engine, out, kwargs)
        del engine
        dist.barrier()
    Path(out, f"rank{rank}.json").write_text(json.dumps(loads))


def record(case: tuple) -> dict:
    """One case on its world of processes: the step folder's files, and each load's reads rank by rank."""
    name, world, tensor, pipeline, zero, dtype = case
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.monotonic()
        mp.spawn(worker, args=(world, port, case, tmp), nprocs=world, join=True)
        seconds = time.monotonic() - start
        files = {p.name: p.stat().st_size for p in sorted(Path(tmp, TAG).iterdir())}
        ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]
    print(f"{name}: {seconds:.1f} s", file=sys.stderr)
    return {"world": world, "tensor": tensor, "pipeline": pipeline, "zero_stage": zero, "dtype": dtype,
            "files": files, "loads": {load: [r[load] for r in ranks] for load in LOADS}}


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
    cases = {c[0]: record(c) for c in deepspeed_save.CASES if not only or c[0] in only}
    versions = {"deepspeed": deepspeed.__version__, "torch": torch.__version__, "python": sys.version.split()[0]}
    out.write_text(dumps({"versions": versions, "script": f"tests/oracles/{Path(sys.argv[0]).name}",
                          "tag": TAG, "loads": {k: {a: v for a, v in kw.items()} for k, kw in LOADS.items()},
                          "cases": cases}) + "\n")


if __name__ == "__main__":
    main()
