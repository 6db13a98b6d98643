#!/usr/bin/env python3
"""Where the time goes in a real ``dcp.save`` and ``dcp.load`` (issue 38), per process, phase by phase (bench only).

The job is ``mode=fsdp``'s (``dlio_ckpt/run/real/fsdp_mode.py``): transformers' Llama of the shape given, FSDP2
``fully_shard`` per block and over the model on ``--procs`` CPU processes (gloo), Adam after one training step,
``get_state_dict`` of model and optimizer, ``dcp.save`` through ``FileSystemWriter(thread_count, sync_files=True)``,
and ``dcp.load`` through ``FileSystemReader`` after rank 0 dropped the step's files from the page cache. Timed as
dlio_ckpt times them: from a barrier to the return, per process. torch's own functions are wrapped (nothing in
them changed) and each wrapped call's *exclusive* time (its own, less the wrapped calls inside it) goes to a phase:

save
- ``collectives``: torch.distributed's object collectives DCP calls (gather, scatter, broadcast, all_gather,
  barrier), waiting for the other processes included: ``plan`` (the plans gathered and scattered back),
  ``end of save`` (the write results gathered, rank 0's ``.metadata`` awaited, the result broadcast: a fast
  process waits here for the slowest), ``other`` (e.g. ``dcp.load``'s gathering of the state dict's keys);
- ``planning``: the save planner's set-up, local and global plans, ``finish_plan``, and the writer's
  ``prepare_local_plan``/``prepare_global_plan``;
- ``staging``: ``resolve_data`` and the loader handing out each tensor (``.detach().cpu()``, a clone where the
  shard is a view of a larger storage);
- ``serialization``: ``torch.save`` of each item, less its writes (pickling, the zip records, their CRC-32);
- ``writes``: ``write``/``flush`` calls on the checkpoint's files (the buffered file DCP opens);
- ``fsync``: ``os.fsync`` of each ``.distcp``;
- ``open/close``: opening and closing the files;
- ``.metadata``: ``FileSystemWriter.finish`` on rank 0, all of it (pickle into ``.metadata.tmp``, its fsync,
  the rename);
- ``other``: what is left of ``dcp.save`` (state-dict flattening, dedup, the loop itself).

load
- ``collectives`` and ``planning`` as above (the load planner and reader; ``end of load``: the all_gather after
  the reads);
- ``.metadata``: ``read_metadata`` (each process unpickles ``.metadata``);
- ``reads``: ``read``/``readinto``/``seek`` on the ``.distcp`` files;
- ``deserialization``: ``torch.load`` of each item, less its reads;
- ``copy into the model``: the rest of ``read_data`` (narrowing, ``resolve_tensor``, ``copy_`` into the
  state dict's tensors, ``commit_tensor``);
- ``open/close``, ``other`` as above.

    python bench/dcp_phases.py --dir /path/on/storage [--procs 2] [--runs 3] [--no-crc32] [--markdown FILE]

``--no-crc32`` turns off torch.save's CRC-32 of each record (``torch.serialization.set_crc32_options(False)``),
to show what that part of serialization costs.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import warnings
from collections import defaultdict
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.checkpoint import default_planner, filesystem
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dlio_ckpt.model.dense import TransformerShape  # noqa: E402
from dlio_ckpt.run.real.llama import Llama  # noqa: E402

warnings.filterwarnings("ignore")

SAVE = ["collectives: plan", "collectives: end of save", "collectives: other", "planning", "staging", "serialization",
        "writes", "fsync", "open/close", ".metadata", "S3 client", "other"]
LOAD = ["collectives: plan", "collectives: end of load", "collectives: other", "planning", ".metadata", "reads",
        "deserialization", "copy into the model", "open/close", "S3 client", "other"]


class Phases:
    """Exclusive time per phase, per thread stack; a ``scope`` (``.metadata``) takes everything inside it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.local = threading.local()
        self.lock = threading.Lock()
        self.on = False

    @contextlib.contextmanager
    def region(self, name: str, scope: bool = False):  # noqa: ANN201
        if not self.on:
            yield
            return
        stack = self.local.__dict__.setdefault("stack", [])
        outer_scope = next((f[3] for f in reversed(stack) if f[3]), None)
        frame = [name, time.perf_counter(), 0.0, name if scope else outer_scope]
        stack.append(frame)
        try:
            yield
        finally:
            stack.pop()
            elapsed = time.perf_counter() - frame[1]
            key = frame[3] or name
            with self.lock:
                self.seconds[key] += elapsed - frame[2]
                self.calls[name] += 1
            if stack:
                stack[-1][2] += elapsed

    def wrap(self, owner: object, attr: str, name: str, scope: bool = False) -> None:
        original = getattr(owner, attr)

        @functools.wraps(original)
        def timed(*a, **k):  # noqa: ANN002, ANN003, ANN202
            with self.region(name, scope):
                return original(*a, **k)
        setattr(owner, attr, timed)

    def take(self) -> dict[str, float]:
        out = dict(self.seconds)
        self.seconds.clear()
        self.calls.clear()
        return out


P = Phases()


class Timed:
    """The file DCP opened, each call timed as writes or reads; everything else passed through."""

    def __init__(self, f) -> None:  # noqa: ANN001
        self._f = f

    def write(self, b):  # noqa: ANN001, ANN201
        with P.region("writes"):
            return self._f.write(b)

    def flush(self):  # noqa: ANN201
        with P.region("writes"):
            return self._f.flush()

    def read(self, *a):  # noqa: ANN002, ANN201
        with P.region("reads"):
            return self._f.read(*a)

    def readinto(self, b):  # noqa: ANN001, ANN201
        with P.region("reads"):
            return self._f.readinto(b)

    def readline(self, *a):  # noqa: ANN002, ANN201
        with P.region("reads"):
            return self._f.readline(*a)

    def seek(self, *a):  # noqa: ANN002, ANN201
        with P.region("reads"):
            return self._f.seek(*a)

    def close(self):  # noqa: ANN201
        with P.region("open/close"):
            return self._f.close()

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._f, name)


def timed_stream(create_stream):  # noqa: ANN001, ANN201
    """A file system's ``create_stream`` (a ``@contextmanager``) whose opening and closing count as open/close and
    whose file's calls are timed (:class:`Timed`)."""
    plain_open = create_stream.__wrapped__  # the generator under @contextmanager

    @contextlib.contextmanager
    def timed(self, path, mode):  # noqa: ANN001, ANN202
        with P.region("open/close"):
            gen = plain_open(self, path, mode)
            f = next(gen)
        try:
            yield Timed(f)
        finally:
            with P.region("open/close"):
                with contextlib.suppress(StopIteration):
                    next(gen)
    return timed


def instrument() -> None:
    from torch.distributed.checkpoint.utils import _DistWrapper

    labels = {"reduce_scatter": "collectives: plan", "all_reduce": "collectives: end of save",
              "all_gather": "collectives: end of load"}
    for m, label in labels.items():
        original = getattr(_DistWrapper, m)

        def labelled(*a, _f=original, _label=label, **k):  # noqa: ANN002, ANN003, ANN202
            P.local.label = _label
            try:
                return _f(*a, **k)
            finally:
                P.local.label = None
        setattr(_DistWrapper, m, labelled)
    for name in ("gather_object", "scatter_object_list", "broadcast_object_list", "all_gather_object", "barrier",
                 "all_reduce", "broadcast"):
        original = getattr(dist, name)

        def collective(*a, _f=original, **k):  # noqa: ANN002, ANN003, ANN202
            with P.region(getattr(P.local, "label", None) or "collectives: other"):
                return _f(*a, **k)
        setattr(dist, name, collective)
    for cls in (default_planner.DefaultSavePlanner, default_planner.DefaultLoadPlanner):
        for m in ("set_up_planner", "create_local_plan", "create_global_plan", "finish_plan"):
            P.wrap(cls, m, "planning")
    for cls in (filesystem.FileSystemWriter, filesystem.FileSystemReader):
        for m in ("prepare_local_plan", "prepare_global_plan"):
            P.wrap(cls, m, "planning")
    P.wrap(filesystem.FileSystemReader, "set_up_storage_reader", "planning")
    P.wrap(default_planner.DefaultSavePlanner, "resolve_data", "staging")
    P.wrap(default_planner.DefaultLoadPlanner, "resolve_tensor", "copy into the model")
    P.wrap(default_planner.DefaultLoadPlanner, "commit_tensor", "copy into the model")
    P.wrap(filesystem.FileSystemWriter, "finish", ".metadata", scope=True)
    P.wrap(filesystem.FileSystemReader, "read_metadata", ".metadata", scope=True)
    P.wrap(filesystem.FileSystemReader, "read_data", "copy into the model")
    P.wrap(filesystem.FileSystemWriter, "write_data", "other")
    P.wrap(torch, "save", "serialization")
    P.wrap(torch, "load", "deserialization")
    P.wrap(os, "fsync", "fsync")
    values = filesystem._SerialCpuLoader.values

    def staged(self):  # noqa: ANN001, ANN202
        it = values(self)
        while True:
            with P.region("staging"):
                try:
                    item = next(it)
                except StopIteration:
                    return
            yield item
    filesystem._SerialCpuLoader.values = staged
    filesystem.FileSystem.create_stream = timed_stream(filesystem.FileSystem.create_stream)
    with contextlib.suppress(ImportError):  # --s3: s3torchconnector's file system, and its client's making
        from s3torchconnector._s3client import S3Client
        from s3torchconnector.dcp import S3FileSystem

        S3FileSystem.create_stream = timed_stream(S3FileSystem.create_stream)
        P.wrap(S3Client, "_client_builder", "S3 client")


def _on_s3(storage, url: str):  # noqa: ANN001, ANN202
    """s3torchconnector's DCP writer or reader pointed at the local server (its classes take no endpoint): a new
    client per save and load, built on its first request inside the timed call, as ``mode=fsdp`` builds one."""
    from s3torchconnector import S3ClientConfig
    from s3torchconnector._s3client import S3Client
    from s3torchconnector.dcp import S3FileSystem

    client = S3Client("us-east-1", endpoint=os.environ["AWS_ENDPOINT_URL_S3"],
                      s3client_config=S3ClientConfig(force_path_style=True))
    storage.fs = S3FileSystem("us-east-1", s3_client=client,
                              reader_constructor=getattr(storage, "_reader_constructor", None))
    storage.path = storage.fs.init_path(url)
    return storage


def writer(a: argparse.Namespace, step: str):  # noqa: ANN201
    if not a.s3:
        return dcp.FileSystemWriter(step, thread_count=a.threads, sync_files=True)
    from s3torchconnector.dcp import S3StorageWriter

    return _on_s3(S3StorageWriter("us-east-1", step, thread_count=a.threads), step)


def reader(a: argparse.Namespace, step: str):  # noqa: ANN201
    if not a.s3:
        return dcp.FileSystemReader(step)
    from s3torchconnector.dcp import S3StorageReader

    return _on_s3(S3StorageReader("us-east-1", step), step)


def evict(folder: str) -> None:
    for name in os.listdir(folder):
        fd = os.open(os.path.join(folder, name), os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def worker(rank: int, world: int, port: int, a: argparse.Namespace, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    if a.no_crc32:
        torch.serialization.set_crc32_options(False)
    shape = TransformerShape(a.layers, a.hidden, a.ffn, a.vocab, a.heads, a.kv_heads)
    with torch.device("meta"):
        model = Llama(shape).to(torch.bfloat16)
    mesh = init_device_mesh("cpu", (world,))
    for block in model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_weights()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, eps=1e-8)
    gen = torch.Generator().manual_seed(1 + rank)
    tokens = torch.randint(0, a.vocab, (1, 65), generator=gen)
    loss = torch.nn.functional.cross_entropy(model(tokens[:, :-1]).float().flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    instrument()
    found: dict[str, list] = {"save": [], "load": []}
    for i in range(1, a.saves + 1):
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd}
        step = f"{a.root}/global_epoch1_step{i}"
        dist.barrier()
        P.take()
        P.on = True
        t0 = time.perf_counter()
        with P.region("other"):
            dcp.save(state, storage_writer=writer(a, step))
        total = time.perf_counter() - t0
        P.on = False
        found["save"].append({"total": total, **P.take()})
    for i in range(1, a.loads + 1):
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd}
        step = f"{a.root}/global_epoch1_step{i}"
        if rank == 0 and not a.s3:
            evict(step)
        dist.barrier()
        P.take()
        P.on = True
        t0 = time.perf_counter()
        with P.region("other"):
            dcp.load(state, storage_reader=reader(a, step))
        total = time.perf_counter() - t0
        P.on = False
        found["load"].append({"total": total, **P.take()})
    everyone: list = [None] * world
    dist.all_gather_object(everyone, found)
    if rank == 0:
        Path(out).write_text(json.dumps(everyone))
    dist.destroy_process_group()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def table(kind: str, phases: list[str], runs: list[list[dict]], which: slice | None = None,
          label: str = "") -> list[str]:
    """runs[run][rank] = {"save": [...], "load": [...]}; per rank, the median over runs of each phase's mean over
    the run's checkpoints (``which`` of them: the first save apart, as it pays once what later saves do not), and
    the slowest process's total."""
    runs = [[{**rank, kind: rank[kind][which or slice(None)]} for rank in run] for run in runs]
    world = len(runs[0])
    med = statistics.median

    def per(rank: int, key: str) -> float:
        return med(statistics.fmean(c.get(key, 0.0) for c in run[rank][kind]) for run in runs)
    slowest = med(statistics.fmean(max(run[r][kind][i]["total"] for r in range(world))
                                   for i in range(len(run[0][kind]))) for run in runs)
    head = f"| {kind}{label} phase | " + " | ".join(f"rank {r} s | share" for r in range(world)) + " |"
    lines = [head, "|---|" + "---|---|" * world]
    for ph in [*phases, "total"]:
        cells = []
        for r in range(world):
            v, t = per(r, ph), per(r, "total")
            cells.append(f"{v:.3f} | {v / t:.0%}")
        lines.append(f"| {ph} | " + " | ".join(cells) + " |")
    lines.append(f"\n{kind}{label}: the slowest process's total, median over runs of the mean over checkpoints: "
                 f"{slowest:.3f} s")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3, help="runs (each its own processes); medians over them")
    ap.add_argument("--saves", type=int, default=2)
    ap.add_argument("--loads", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--ffn", type=int, default=2816)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--no-crc32", action="store_true")
    ap.add_argument("--settle", type=float, default=10.0)
    ap.add_argument("--markdown")
    ap.add_argument("--s3", action="store_true", help="on a local SeaweedFS (scripts/local_s3.py) through "
                    "s3torchconnector's S3StorageWriter/S3StorageReader; --dir holds the results alone")
    a = ap.parse_args()
    server = None
    if a.s3:
        local_s3 = [sys.executable, str(Path(__file__).resolve().parents[1] / "scripts" / "local_s3.py")]
        server = json.loads(subprocess.run([*local_s3, "--bucket", "bench", "--background", "--json", "--dir",
                                            a.dir.rstrip("/") + "_seaweedfs"], check=True, capture_output=True,
                                           text=True).stdout)
        os.environ.update(server["environment"])
    try:
        runs = measure(a)
    finally:
        if server:
            subprocess.run([*local_s3, "stop", str(server["pid"])], check=True)
    saves = [*table("save", SAVE, runs, slice(0, 1), " 1"), "", *table("save", SAVE, runs, slice(1, None), " 2+")] \
        if a.saves > 1 else table("save", SAVE, runs)
    machine = f"- {time.strftime('%Y-%m-%d %H:%M')} on {platform.node()} ({os.cpu_count()} cores), " \
        f"torch {torch.__version__}"
    lines = [machine, f"- `{' '.join(['python', *sys.argv])}`", "", *saves, "", *table("load", LOAD, runs)]
    print("\n".join(lines))
    if a.markdown:
        Path(a.markdown).write_text("\n".join(lines) + "\n")


def measure(a: argparse.Namespace) -> list:
    """``--runs`` runs, each its own processes; per run, per rank, each save's and load's phases."""
    runs = []
    for r in range(a.runs):
        time.sleep(a.settle)
        a.root = f"s3://bench/phases{r}" if a.s3 else a.dir
        Path(a.dir).mkdir(parents=True, exist_ok=True)
        out = os.path.join(a.dir, "phases.json")
        mp.start_processes(worker, args=(a.procs, _port(), a, out), nprocs=a.procs, join=True, start_method="fork")
        runs.append(json.loads(Path(out).read_text()))
        shutil.rmtree(a.dir)
        print(f"run {r + 1}/{a.runs}: save totals "
              f"{[round(c['total'], 2) for rank in runs[-1] for c in rank['save']]}, load totals "
              f"{[round(c['total'], 2) for rank in runs[-1] for c in rank['load']]}", file=sys.stderr, flush=True)
    return runs


if __name__ == "__main__":
    main()
