#!/usr/bin/env python3
"""Megatron-core's real save and load, timed as dlio_ckpt times a checkpoint (bench only).

The model is the oracle's (``tests/oracles/megatron_save.py``'s ``build``: a GPTModel on CPU with gloo, the
distributed optimizer after one Adam step), saved with the same strategy as the oracle (``torch_dist`` through
``TorchDistSaveShardedStrategy`` with ``THREADS`` writer threads, wrapped in the fully parallel save over the
data-parallel group, as Megatron-LM saves) and loaded as Megatron-LM loads by default
(``dist_checkpointing.load``, model and optimizer). Each save and load is timed on every rank from a barrier just
before it to its return, and a checkpoint's time is the slowest rank's, as dlio_ckpt's ``summary.json`` reports;
before each load, rank 0 writes back and drops every file of the step from the page cache (``fdatasync`` +
``POSIX_FADV_DONTNEED``, what ``checkpoint.read_from_page_cache=False`` does in the emulator).

    python bench/megatron_timed.py ROOT RESULT_JSON SAVES LOADS WORLD TP LAYERS HIDDEN FFN HEADS KV VOCAB DTYPE \
        THREADS [INTERVAL]

``ROOT/global_epoch1_step{i}`` are written; RESULT_JSON gets ``{"save": [s, ...], "load": [s, ...], "bytes": [...]}``,
and ``"read_data": [s, ...]``: per load, the slowest rank's time in DCP's ``FileSystemReader.read_data`` (its reads,
``torch.load`` of each item, the copy into the state dict): the rest of a load is megatron-core's and DCP's CPU
work before and after the data (metadata, validation, planning, collectives, the optimizer's state).
megatron-core's save writes with its own writer (sync files: its ``FileSystemWriterAsync`` fsyncs each file).

``INTERVAL`` seconds (0 by default: saves back to back after the oracle's one optimizer step) make a training job
of it, as ``mode=fsdp`` does with ``checkpoint.time_between_checkpoints``: before each save, real training steps
(forward and backward through the GPTModel on random tokens, the distributed optimizer's gradient sync and step)
for INTERVAL seconds, at least one; rank 0's clock decides for every rank. RESULT_JSON's ``"steps"``: the steps
before each save.

``--phases`` (anywhere among the arguments) times each save phase by phase in the caller's process (megatron-core's
functions of :data:`SAVE_PHASES` wrapped: validation, common.pt, the fully parallel split, DCP's planning, the
preload, the writer processes, the finalize and metadata.json; ``other`` what they leave: the barriers and the rest;
RESULT_JSON's ``"save_phases"``), and each load phase by phase, with ``bench/dcp_phases.py``'s wrappers
of torch's own functions (the same phases: collectives, planning, ``.metadata``, reads, deserialization, the copy
into the model; ``other`` is what is left: megatron-core's own work around DCP's load, the state dict's validation
and the distributed optimizer's state put back among it). RESULT_JSON's ``"load_phases"``: per load, each rank's
seconds by phase; the script prints the mean over ranks, the median over loads.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "oracles"))
import megatron_save  # noqa: E402  (the oracle's model, imported, not copied)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dcp_phases  # noqa: E402  (its wrappers of torch's own functions, for --phases)


def _evict(folder: str) -> None:
    for name in os.listdir(folder):
        fd = os.open(os.path.join(folder, name), os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _slowest(seconds: float) -> float:
    got: list[float | None] = [None] * dist.get_world_size()
    dist.all_gather_object(got, seconds)
    return max(x for x in got if x is not None)


def _decided(mine: bool) -> bool:
    """Rank 0's answer, for every rank (a training step's collectives need them all)."""
    got = [mine]
    dist.broadcast_object_list(got, src=0)
    return bool(got[0])


def trainer(gpt, opt, vocab: int, rank: int):  # noqa: ANN001, ANN201
    """One real training step of the oracle's model: forward and backward on 64 random tokens, the distributed
    optimizer's gradient sync (reduce-scatter) and its Adam step."""
    import torch
    from megatron.core.tensor_parallel import random as tp_random

    # the attention's dropout forks a CUDA RNG state per model-parallel rank; on the CPU there is none to fork:
    # the step draws from torch's CPU generator instead (as the oracle sends its other CUDA calls to the CPU)
    tp_random.get_cuda_rng_tracker().fork = lambda *_a, **_k: contextlib.nullcontext()
    (ddp,) = opt.model_chunks  # the DistributedDataParallel the optimizer was built over
    gen = torch.Generator().manual_seed(100 + rank)
    positions = torch.arange(64).unsqueeze(0)
    mask = torch.ones(1, 1, 64, 64, dtype=torch.bool).triu(1)  # True: not attended (causal)

    def step() -> None:
        tokens = torch.randint(0, vocab, (1, 65), generator=gen)
        loss = ddp(tokens[:, :-1], positions, mask, labels=tokens[:, 1:]).float().mean()
        loss.backward()
        ddp.finish_grad_sync()
        opt.step()
        ddp.zero_grad_buffer()
        opt.zero_grad()
    return step


SAVE_PHASES = {  # megatron-core 0.16.1's save, in its caller's process: (module, owner or None, name) -> phase
    ("megatron.core.dist_checkpointing.serialization", None, "save_preprocess"): "validation",
    ("megatron.core.dist_checkpointing.strategies.common", "TorchCommonSaveStrategy", "save_common"): "common.pt",
    ("megatron.core.dist_checkpointing.strategies.fully_parallel", "FullyParallelSaveStrategyWrapper",
     "apply_saving_parallelization"): "fully parallel: which rank saves what",
    ("megatron.core.dist_checkpointing.strategies.torch", None, "save_state_dict_async_plan"): "DCP planning",
    ("megatron.core.dist_checkpointing.strategies.filesystem_async", "FileSystemWriterAsync", "prepare_write_data"):
        "the write buckets (views cloned)",
    ("megatron.core.dist_checkpointing.strategies.filesystem_async", "FileSystemWriterAsync", "preload_tensors"):
        "preload (the copy to host memory)",
    ("megatron.core.dist_checkpointing.strategies.torch", None, "save_state_dict_async_finalize"):
        "finalize: results gathered, .metadata",
    ("megatron.core.dist_checkpointing.serialization", None, "save_config"): "metadata.json",
}


def _time_save_phases(into: dict[str, float]) -> None:
    """Wrap each of :data:`SAVE_PHASES`'s functions where megatron-core looks it up, adding its own seconds to
    ``into[phase]``: less those of the wrapped functions it calls (the writer processes are timed by ``worker``'s
    own wrapper)."""
    import importlib

    inner: list[float] = []  # per wrapped call in progress, the seconds of the wrapped calls within it

    for (module, owner, name), phase in SAVE_PHASES.items():
        holder = importlib.import_module(module)
        if owner is not None:
            holder = getattr(holder, owner)
        raw = holder.__dict__[name]
        static = isinstance(raw, staticmethod)
        fn = raw.__func__ if static else raw

        def timed(*a, _fn=fn, _phase=phase, **kw):  # noqa: ANN002, ANN003, ANN202 (a wrapper of megatron-core's)
            t = time.perf_counter()
            inner.append(0.0)
            try:
                return _fn(*a, **kw)
            finally:
                took = time.perf_counter() - t
                into[_phase] = into.get(_phase, 0.0) + took - inner.pop()
                if inner:
                    inner[-1] += took

        setattr(holder, name, staticmethod(timed) if static else timed)


def worker(rank: int, world: int, port: int, root: str, result: str, saves: int, loads: int,
           args: list[str]) -> None:
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.strategies import filesystem_async
    from megatron.core.dist_checkpointing.strategies.filesystem_async import FileSystemWriterAsync
    from megatron.core.dist_checkpointing.strategies.fully_parallel import FullyParallelSaveStrategyWrapper
    from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy
    from torch.distributed.checkpoint.filesystem import FileSystemReader

    in_read_data = [0.0]
    read_data = FileSystemReader.read_data

    def timed_read_data(self, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202 (a wrapper of torch's own)
        t = time.perf_counter()
        try:
            return read_data(self, *a, **kw)
        finally:
            in_read_data[0] += time.perf_counter() - t

    FileSystemReader.read_data = timed_read_data
    in_writers = [0.0]
    multiproc = FileSystemWriterAsync.write_preloaded_data_multiproc

    def timed_writers(*a, **kw):  # noqa: ANN002, ANN003, ANN202 (a wrapper of megatron-core's own)
        t = time.perf_counter()
        try:
            return multiproc(*a, **kw)
        finally:
            in_writers[0] += time.perf_counter() - t

    FileSystemWriterAsync.write_preloaded_data_multiproc = staticmethod(timed_writers)
    in_queue = [0.0]  # the first save's one-time start of a spawned multiprocessing Manager for the results queue
    get_queue = filesystem_async._get_write_results_queue

    def timed_queue():  # noqa: ANN202
        t = time.perf_counter()
        try:
            return get_queue()
        finally:
            in_queue[0] += time.perf_counter() - t

    filesystem_async._get_write_results_queue = timed_queue
    phased = "--phases" in args
    save_phases: dict[str, float] = {}
    if phased:
        _time_save_phases(save_phases)
    args = [x for x in args if x != "--phases"]
    if phased:
        dcp_phases.instrument()  # wraps torch's functions in this process: the loads are timed here
    gpt, opt, ps = megatron_save.build(rank, world, port, args[:9])  # args[9]: the interval, not an MoE
    threads, interval = int(args[8]), float(args[9]) if len(args) > 9 else 0.0
    train_step = trainer(gpt, opt, int(args[6]), rank) if interval else None  # steps only with an interval
    meta = {"distrib_optim_sharding_type": "fully_reshardable"}
    out: dict[str, list] = {"save": [], "load": [], "bytes": [], "read_data": [], "writers": [], "results_queue": [],
                            "steps": [], "load_phases": [], "save_phases": []}
    for i in range(1, saves + 1):
        steps, began = 0, time.perf_counter()
        while interval and not (steps and _decided(time.perf_counter() >= began + interval)):
            train_step()
            steps += 1
        out["steps"].append(steps)
        step = os.path.join(root, f"global_epoch1_step{i}")
        if rank == 0:
            os.makedirs(step, exist_ok=True)
        model_sd = gpt.sharded_state_dict()
        state = {"model": model_sd, "iteration": i,
                 "optimizer": opt.sharded_state_dict(model_sd, is_loading=False, metadata=meta)}
        writer = TorchDistSaveShardedStrategy("torch_dist", 1, thread_count=threads)
        strategy = FullyParallelSaveStrategyWrapper(writer, ps.get_data_parallel_group(with_context_parallel=True),
                                                    True)
        dist.barrier()
        in_writers[0] = in_queue[0] = 0.0
        t0 = time.perf_counter()
        dist_checkpointing.save(state, step, sharded_strategy=strategy)
        took = time.perf_counter() - t0
        out["save"].append(_slowest(took))
        if phased:  # this rank's phases, "other" what they leave of its save
            mine = {**save_phases, "writer processes": in_writers[0]}
            mine["other"] = took - sum(mine.values())
            ranks_phases: list = [None] * dist.get_world_size()
            dist.all_gather_object(ranks_phases, mine)
            out["save_phases"].append(ranks_phases)
            save_phases.clear()
        out["writers"].append(_slowest(in_writers[0]))
        out["results_queue"].append(_slowest(in_queue[0]))
        out["bytes"].append(sum(os.path.getsize(os.path.join(step, n)) for n in os.listdir(step)))
    for i in range(1, loads + 1):
        step = os.path.join(root, f"global_epoch1_step{i}")
        model_sd = gpt.sharded_state_dict()
        state = {"model": model_sd, "optimizer": opt.sharded_state_dict(model_sd, is_loading=True, metadata=meta)}
        if rank == 0:
            _evict(step)
        dist.barrier()
        in_read_data[0] = 0.0
        if phased:
            dcp_phases.P.take()
            dcp_phases.P.on = True
        t0 = time.perf_counter()
        with dcp_phases.P.region("other") if phased else contextlib.nullcontext():
            dist_checkpointing.load(state, step)
        out["load"].append(_slowest(time.perf_counter() - t0))
        out["read_data"].append(_slowest(in_read_data[0]))
        if phased:
            dcp_phases.P.on = False
            ranks: list = [None] * dist.get_world_size()
            dist.all_gather_object(ranks, dcp_phases.P.take())
            out["load_phases"].append(ranks)
    if rank == 0:
        Path(result).write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    import megatron.core.dist_checkpointing  # noqa: F401 - imported once, before the ranks are forked
    root, result, saves, loads, world, rest = (sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                                               int(sys.argv[5]), sys.argv[6:])
    mp.start_processes(worker, args=(world, megatron_save._port(), root, result, saves, loads, rest), nprocs=world,
                       join=True, start_method="fork")
    got = json.loads(Path(result).read_text())
    if got["load_phases"]:  # the mean over ranks, the median over loads
        med = statistics.median
        print(f"load phases (mean over {world} ranks, median over {len(got['load'])} loads), s; the load's slowest "
              f"process: {med(got['load']):.3f} s, its read_data {med(got['read_data']):.3f} s")
        for phase in dcp_phases.LOAD:
            by_load = [statistics.fmean(r.get(phase, 0.0) for r in ranks) for ranks in got["load_phases"]]
            print(f"  {phase}: {statistics.median(by_load):.3f}")
    if got["save_phases"]:  # the mean over ranks; the first save, then the median over the later ones
        saves = got["save_phases"]
        print(f"save phases (mean over {world} ranks), s: the first save, then the median over saves 2 to "
              f"{len(saves)}; the saves' slowest process: {got['save'][0]:.3f} s, then "
              f"{statistics.median(got['save'][1:] or got['save'][:1]):.3f} s")
        for phase in [*SAVE_PHASES.values(), "writer processes", "other"]:
            by_save = [statistics.fmean(r.get(phase, 0.0) for r in ranks) for ranks in saves]
            print(f"  {phase}: {by_save[0]:.3f}, {statistics.median(by_save[1:] or by_save[:1]):.3f}")


if __name__ == "__main__":
    main()
