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

Save by save (issue 50 item 1: what sets a real save's time from save to save, and whether the emulator does
the same). Besides the tables above, per save index 1..``--saves``, the median over runs of:

- the slowest process's total and each phase (the mean over processes), per save;
- the memory and disk before it, sampled by each process after the barrier and before the clock starts, and
  again right after its return (the tables show rank 0's, the system's figures being the same for all):
  ``/proc/meminfo``'s MemFree, Cached, Active(file), Inactive(file), Dirty and Writeback (MiB); from
  ``/proc/diskstats``, for the device holding ``--dir`` (``os.stat(dir).st_dev``, else the source of the mount
  in ``/proc/self/mountinfo`` holding it, else the vd*/sd*/nvme*/xvd* disk with the most sectors written; the
  report says which and how it was found): the I/Os in flight before the save, the MiB written, writes
  completed, ms spent writing and flushes completed during the save, and the MiB written between the end of
  the previous save and this one's start (the previous save's writeback still draining); the kernel's work to
  find memory during the save (``/proc/vmstat``: compaction stalls, direct reclaims and the pages they scanned,
  pages allocated and freed, huge pages faulted); and, on a virtual machine whose kernel counts it, the free
  memory handed back to the host during the save and since the previous one (free page reporting);
- the processes (summed over them): RSS, the malloc heap in use and free (glibc ``mallinfo2``: ``uordblks`` +
  ``hblkhd``; ``fordblks``, memory freed but kept by the allocator), the minor/major page faults taken and the RSS
  change during the save, and the optimizer's state (bytes of Adam's moments, local shards);
- the training before it (with ``--interval``; the set-up step before save 1 in any case): its steps, its seconds
  and the sleep that followed, and what the steps left behind: the RSS change, the heap's free-bytes change, the
  page faults they took, MemFree's change.
A Spearman rank correlation of the save's total with each figure over every (run, save) says what moves with
the time.

``--interval SECONDS`` (none by default: saves back to back, as before) makes a training job of it: before each
save the processes run ``--train-steps`` K training steps (forward, backward, ``opt.step``, ``zero_grad``; before
the first save the set-up step counts as one of them) and sleep what is left of the interval, counted from the end
of the previous save (the first: from before the set-up step): a job that saves every ``--interval`` seconds of
training. ``--interval 0`` runs the steps with no sleep.

``--emulated`` adds the emulator's counterpart to each run, alternating with it (the order rotated each run, a
``--settle`` before each): ``python -m dlio_ckpt run workload=tiny`` on ``--procs`` processes with the case
bench/framework_io.py runs as ``dcp emulated framework`` (``checkpoint.layout=dcp``, ``io_pattern=framework``,
host memory, ``files_per_rank=--threads``, bf16, fsync) of the same shape, ``--saves`` saves, ``--loads`` loads and
``checkpoint.time_between_checkpoints=--interval`` (the emulator sleeps it: ``checkpoint.training=sleep``). Each
save's duration is summary.json's ``checkpoints.save[].duration_seconds``; a thread here samples /proc/meminfo and
/proc/diskstats every 50 ms during the run, and the sample just before each save's start (summary.json's
``start``, the first process's) and the first after its end stand for the figures above; the processes' minor
faults during each save are per_epoch_stats.json's. A last table sets real and emulated side by side per save.
``--json FILE`` keeps every figure measured.

The measurement (issue 50 item 1):

    python bench/dcp_phases.py --dir /tmp/phases --runs 5 --saves 5 --interval 3 --train-steps 1 --emulated \\
        --markdown /tmp/phases.md --json /tmp/phases.json
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import json
import os
import platform
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import defaultdict
from datetime import datetime
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import framework_io  # noqa: E402  (the emulated dcp case, as bench/framework_io.py runs it)

warnings.filterwarnings("ignore")

SAVE = ["collectives: plan", "collectives: end of save", "collectives: other", "planning", "staging", "serialization",
        "writes", "fsync", "open/close", ".metadata", "S3 client", "other"]
LOAD = ["collectives: plan", "collectives: end of load", "collectives: other", "planning", ".metadata", "reads",
        "deserialization", "copy into the model", "open/close", "S3 client", "other"]


MEMINFO = ("MemFree", "Cached", "Active(file)", "Inactive(file)", "Dirty", "Writeback")
MIB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")


# A virtual machine's free page reporting (virtio-balloon): the guest hands free memory back to its host, and the
# next touch of it faults it in on the host again. The kernel counts what it has reported (where it says so)
REPORTED = Path("/sys/module/page_reporting/parameters/reported_kib")


def meminfo() -> dict[str, int]:
    """/proc/meminfo's figures in MEMINFO, kB; and ``Reported``, the kB of free memory handed back to the host so
    far, where the kernel counts it."""
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in MEMINFO:
                out[key] = int(rest.split()[0])
    with contextlib.suppress(OSError, ValueError):
        out["Reported"] = int(REPORTED.read_text())
    return out


def _diskstats() -> list[list[str]]:
    with open("/proc/diskstats") as f:
        return [line.split() for line in f]


def diskstats(name: str | None) -> dict[str, int]:
    """The device's writes completed, sectors (512 B) written, ms spent writing, I/Os in flight now, and (kernels
    5.5+) flushes completed and ms spent flushing."""
    for p in _diskstats() if name else []:
        if p[2] == name:
            v = [int(x) for x in p[3:]]
            out = {"writes": v[4], "sectors_written": v[6], "ms_writing": v[7], "in_flight": v[8]}
            if len(v) >= 17:
                out.update(flushes=v[15], ms_flushing=v[16])
            return out
    return {}


def disk_of(path: str) -> tuple[str | None, str]:
    """The /proc/diskstats device holding ``path``, and how it was found."""
    st = os.stat(path).st_dev
    dev = (os.major(st), os.minor(st))
    stats = _diskstats()
    names = {(int(p[0]), int(p[1])): p[2] for p in stats}
    if dev in names:
        return names[dev], f"{path} is on {dev[0]}:{dev[1]}"
    real, best = os.path.realpath(path), ("", "")
    with open("/proc/self/mountinfo") as f:
        for line in f:
            p = line.split()
            mount, source = p[4], p[p.index("-") + 2]
            if (real == mount or real.startswith(mount.rstrip("/") + "/")) and len(mount) > len(best[0]):
                best = (mount, source)
    if best[1].startswith("/dev/"):
        name = os.path.basename(os.path.realpath(best[1]))
        if name in names.values():
            return name, f"the source of {best[0]}, the mount holding {path} ({dev[0]}:{dev[1]}: no diskstats line)"
    disks = [p for p in stats if re.fullmatch(r"vd[a-z]+|sd[a-z]+|xvd[a-z]+|nvme\d+n\d+", p[2])]
    if not disks:
        return None, f"no device found for {path} ({dev[0]}:{dev[1]}): no disk figures"
    busiest = max(disks, key=lambda p: int(p[9]))
    return busiest[2], (f"{path} ({dev[0]}:{dev[1]}) is on no disk in /proc/diskstats or mountinfo: the disk with the "
                        "most sectors written stands for it")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                                "uordblks", "fordblks", "keepcost")]


try:
    _mallinfo2 = ctypes.CDLL(None).mallinfo2
    _mallinfo2.restype = _MallInfo2
except (AttributeError, OSError):  # not glibc 2.33+
    _mallinfo2 = None


def process() -> dict[str, int]:
    """This process's RSS (kB), page faults so far, and glibc malloc's heap: in use and free (kB; all arenas,
    the mmapped chunks counted in use)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * PAGE // 1024
    out = {"rss_kb": rss, "minflt": ru.ru_minflt, "majflt": ru.ru_majflt}
    if _mallinfo2 is not None:
        m = _mallinfo2()
        out.update(heap_used_kb=(m.uordblks + m.hblkhd) // 1024, heap_free_kb=m.fordblks // 1024)
    return out


# /proc/vmstat's counters of the kernel's work to find memory: compaction, direct reclaim, pages allocated
VMSTAT = ("compact_stall", "compact_fail", "pgscan_direct", "pgalloc_normal", "pgfree", "thp_fault_alloc")


def vmstat() -> dict[str, int]:
    out = {"allocstall": 0}  # direct reclaims, every zone's summed
    with open("/proc/vmstat") as f:
        for line in f:
            key, _, value = line.partition(" ")
            if key in VMSTAT:
                out[key] = int(value)
            elif key.startswith("allocstall"):
                out["allocstall"] += int(value)
    return out


def sample(disk: str | None, proc: bool = True) -> dict:
    out = {"t": time.time(), "mem": meminfo(), "disk": diskstats(disk), "vm": vmstat()}
    if proc:
        out["proc"] = process()
    return out


class Sampler(threading.Thread):
    """/proc/meminfo and /proc/diskstats every ``every`` seconds, from outside the emulator's processes."""

    def __init__(self, disk: str | None, every: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.disk, self.every, self.halt, self.samples = disk, every, threading.Event(), []

    def run(self) -> None:
        while not self.halt.is_set():
            self.samples.append(sample(self.disk, proc=False))
            self.halt.wait(self.every)
        self.samples.append(sample(self.disk, proc=False))

    def stop(self) -> None:
        self.halt.set()
        self.join()

    def before(self, t: float) -> dict:
        return next((x for x in reversed(self.samples) if x["t"] <= t), self.samples[0])

    def after(self, t: float) -> dict:
        return next((x for x in self.samples if x["t"] >= t), self.samples[-1])


def optimizer_bytes(opt: torch.optim.Optimizer) -> int:
    """Bytes of the optimizer's state on this process (its shards)."""
    n = 0
    for state in opt.state.values():
        for v in state.values():
            if torch.is_tensor(v):
                local = v.to_local() if hasattr(v, "to_local") else v
                n += local.numel() * local.element_size()
    return n


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

    def train_step() -> None:
        loss = torch.nn.functional.cross_entropy(model(tokens[:, :-1]).float().flatten(0, 1),
                                                 tokens[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    began, before = time.perf_counter(), sample(a.disk)  # the first interval: from before the set-up step
    train_step()  # the set-up step: Adam's state exists from here
    instrument()
    found: dict[str, list] = {"save": [], "load": [], "state": []}
    for i in range(1, a.saves + 1):
        steps, slept = 1 if i == 1 else 0, 0.0
        if a.interval is not None:
            for _ in range(a.train_steps - steps):
                train_step()
            steps = max(a.train_steps, steps)
        trained = time.perf_counter() - began
        after = sample(a.disk)
        if a.interval is not None:
            slept = max(0.0, a.interval - trained)
            time.sleep(slept)
        train = {"steps": steps, "seconds": trained, "slept": slept, "before": before, "after": after}
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd}
        step = f"{a.root}/global_epoch1_step{i}"
        dist.barrier()
        pre = sample(a.disk)
        P.take()
        P.on = True
        t0 = time.perf_counter()
        with P.region("other"):
            dcp.save(state, storage_writer=writer(a, step))
        total = time.perf_counter() - t0
        P.on = False
        post = sample(a.disk)
        began, before = time.perf_counter(), post
        found["save"].append({"total": total, **P.take()})
        found["state"].append({"before": pre, "after": post, "train": train, "optimizer_bytes": optimizer_bytes(opt)})
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
    ap.add_argument("--interval", type=float, help="seconds of training from a save's end to the next save: "
                    "--train-steps steps, then a sleep for the rest (default: none, saves back to back)")
    ap.add_argument("--train-steps", type=int, default=1, help="training steps per interval (with --interval)")
    ap.add_argument("--emulated", action="store_true", help="alternate each run with the emulator's "
                    "layout=dcp io_pattern=framework run of the same shape, saves and interval")
    ap.add_argument("--markdown")
    ap.add_argument("--json", help="write every figure measured here")
    ap.add_argument("--s3", action="store_true", help="on a local SeaweedFS (scripts/local_s3.py) through "
                    "s3torchconnector's S3StorageWriter/S3StorageReader; --dir holds the results alone")
    a = ap.parse_args()
    if a.s3 and a.emulated:
        sys.exit("--emulated runs on local files: leave out --s3")
    Path(a.dir).mkdir(parents=True, exist_ok=True)
    a.disk, a.disk_how = disk_of(a.dir)
    server = None
    if a.s3:
        local_s3 = [sys.executable, str(Path(__file__).resolve().parents[1] / "scripts" / "local_s3.py")]
        server = json.loads(subprocess.run([*local_s3, "--bucket", "bench", "--background", "--json", "--dir",
                                            a.dir.rstrip("/") + "_seaweedfs"], check=True, capture_output=True,
                                           text=True).stdout)
        os.environ.update(server["environment"])
    try:
        runs, emulated = measure(a)
    finally:
        if server:
            subprocess.run([*local_s3, "stop", str(server["pid"])], check=True)
    saves = [*table("save", SAVE, runs, slice(0, 1), " 1"), "", *table("save", SAVE, runs, slice(1, None), " 2+")] \
        if a.saves > 1 else table("save", SAVE, runs)
    machine = f"- {time.strftime('%Y-%m-%d %H:%M')} on {platform.node()} ({os.cpu_count()} cores), " \
        f"torch {torch.__version__}"
    lines = [machine, f"- `{' '.join(['python', *sys.argv])}`", "", *saves, "", *table("load", LOAD, runs),
             "", *save_by_save(a, runs, emulated)]
    print("\n".join(lines))
    if a.markdown:
        Path(a.markdown).write_text("\n".join(lines) + "\n")
    if a.json:
        Path(a.json).write_text(json.dumps({"argv": sys.argv, "disk": a.disk, "disk_how": a.disk_how, "real": runs,
                                            "emulated": emulated}))


def real_run(a: argparse.Namespace, r: int) -> list:
    """One run of the real job: per rank, each save's and load's phases and each save's state."""
    a.root = f"s3://bench/phases{r}" if a.s3 else a.dir
    Path(a.dir).mkdir(parents=True, exist_ok=True)
    out = os.path.join(a.dir, "phases.json")
    mp.start_processes(worker, args=(a.procs, _port(), a, out), nprocs=a.procs, join=True, start_method="fork")
    got = json.loads(Path(out).read_text())
    shutil.rmtree(a.dir)
    return got


def emulated_run(a: argparse.Namespace) -> list[dict]:
    """One run of the emulator's dcp case (bench/framework_io.py's ``emulated framework``) of the same shape and
    interval, sampled from here every 50 ms: per save, its duration, the samples before and after it and its
    processes' minor faults."""
    ns = argparse.Namespace(**{**vars(a), "frameworks": ["dcp"], "io_pattern": ["framework"]})
    args = framework_io.cases(ns, [])["dcp"]["emulated framework"][1]
    out, root = Path(tempfile.mkdtemp(prefix="bench_phases_")), os.path.join(a.dir, "emulated")
    cmd = [str(framework_io.BIN / "mpiexec"), "-n", str(a.procs), sys.executable, "-m", "dlio_ckpt", "run", *args,
           f"++workload.storage.storage_root={root}", f"++hydra.run.dir={out}", "++workload.checkpoint.overwrite=True",
           f"++workload.checkpoint.time_between_checkpoints={a.interval or 0}"]
    sampler = Sampler(a.disk)
    sampler.start()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=framework_io.ENV)
    finally:
        sampler.stop()
    if r.returncode:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    faults: dict[int, int] = defaultdict(int)
    for f in out.glob("*_per_epoch_stats.json"):
        for key, entry in json.loads(f.read_text())["1"].items():
            if m := re.fullmatch(r"save_ckpt(\d+)", key):
                faults[int(m[1])] += entry.get("minor_page_faults", 0)
    saves = []
    for c in summary["checkpoints"]["save"]:
        start, end = (datetime.fromisoformat(c[k]).timestamp() for k in ("start", "end"))
        before = sampler.before(start)
        saves.append({"total": c["duration_seconds"], "bytes": c["bytes"], "before": before,
                      "after": sampler.after(end), "stale": start - before["t"], "minflt": faults[c["index"]]})
    shutil.rmtree(out)
    shutil.rmtree(a.dir, ignore_errors=True)
    return saves


def measure(a: argparse.Namespace) -> tuple[list, list]:
    """``--runs`` runs, each its own processes; per run, per rank, each save's and load's phases. With
    ``--emulated``, each run has the emulator's beside it, the order rotated from run to run."""
    runs, emulated = [], []
    for r in range(a.runs):
        sides = ["real", "emulated"] if a.emulated else ["real"]
        for side in sides[r % len(sides):] + sides[:r % len(sides)]:
            time.sleep(a.settle)
            t0 = time.monotonic()
            if side == "real":
                runs.append(real_run(a, r))
                print(f"run {r + 1}/{a.runs}: save totals "
                      f"{[round(c['total'], 2) for rank in runs[-1] for c in rank['save']]}, load totals "
                      f"{[round(c['total'], 2) for rank in runs[-1] for c in rank['load']]} "
                      f"({time.monotonic() - t0:.0f} s wall)", file=sys.stderr, flush=True)
            else:
                emulated.append(emulated_run(a))
                print(f"run {r + 1}/{a.runs} emulated: save durations {[round(c['total'], 2) for c in emulated[-1]]}"
                      f" ({time.monotonic() - t0:.0f} s wall)", file=sys.stderr, flush=True)
    return runs, emulated


def _mib(kb: float) -> float:
    return kb / 1024


def system_figures(before: dict, after: dict, previous: dict | None) -> dict[str, float]:
    """The memory and disk figures of one save from the samples before and after it (and after the previous)."""
    m, d, d2 = before["mem"], before["disk"], after["disk"]
    out = {f"{k} MiB": _mib(m[k]) for k in MEMINFO if k in m}
    out.update({f"{k} after MiB": _mib(after["mem"][k]) for k in ("Dirty", "Writeback") if k in after["mem"]})
    out.update({f"{k} during": after["vm"][k] - before["vm"][k] for k in before.get("vm", {})})
    if "Reported" in m:  # free memory handed back to the host, from the previous save's end, and during this one
        out["reported during MiB"] = _mib(after["mem"]["Reported"] - m["Reported"])
        if previous is not None:
            out["reported between MiB"] = _mib(m["Reported"] - previous["mem"]["Reported"])
    if d:
        out["in flight"] = d["in_flight"]
        out["written during MiB"] = (d2["sectors_written"] - d["sectors_written"]) * 512 / MIB
        out["disk writes during"] = d2["writes"] - d["writes"]
        out["ms writing during"] = d2["ms_writing"] - d["ms_writing"]
        if "flushes" in d:
            out["flushes during"] = d2["flushes"] - d["flushes"]
        if previous is not None and previous["disk"]:
            out["written between MiB"] = (d["sectors_written"] - previous["disk"]["sectors_written"]) * 512 / MIB
    return out


def real_rows(run: list) -> list[dict[str, float]]:
    """One real run's saves as figures: the slowest total, each phase's mean over processes, rank 0's system
    samples, the processes' sums."""
    out = []
    for i, st in enumerate(run[0]["state"]):
        saves = [rank["save"][i] for rank in run]
        row = {"total": max(c["total"] for c in saves)}
        row.update({ph: statistics.fmean(c.get(ph, 0.0) for c in saves) for ph in SAVE})
        row.update(system_figures(st["before"], st["after"], run[0]["state"][i - 1]["after"] if i else None))
        states = [rank["state"][i] for rank in run]

        def total(f, states: list = states) -> float:  # noqa: ANN001
            return sum(f(x) for x in states)
        row["RSS MiB"] = _mib(total(lambda x: x["before"]["proc"]["rss_kb"]))
        if "heap_free_kb" in st["before"]["proc"]:
            row["heap free MiB"] = _mib(total(lambda x: x["before"]["proc"]["heap_free_kb"]))
            row["heap used MiB"] = _mib(total(lambda x: x["before"]["proc"]["heap_used_kb"]))
        row["save minor faults"] = total(lambda x: x["after"]["proc"]["minflt"] - x["before"]["proc"]["minflt"])
        row["save major faults"] = total(lambda x: x["after"]["proc"]["majflt"] - x["before"]["proc"]["majflt"])
        row["save RSS change MiB"] = _mib(total(lambda x: x["after"]["proc"]["rss_kb"] - x["before"]["proc"]["rss_kb"]))
        tr = st["train"]
        row["train steps"] = tr["steps"]
        row["trained s"] = max(x["train"]["seconds"] for x in states)
        row["slept s"] = min(x["train"]["slept"] for x in states)
        row["step RSS change MiB"] = _mib(total(lambda x: x["train"]["after"]["proc"]["rss_kb"]
                                                - x["train"]["before"]["proc"]["rss_kb"]))
        if "heap_free_kb" in tr["before"]["proc"]:
            row["step heap free change MiB"] = _mib(total(lambda x: x["train"]["after"]["proc"]["heap_free_kb"]
                                                          - x["train"]["before"]["proc"]["heap_free_kb"]))
        row["step minor faults"] = total(lambda x: x["train"]["after"]["proc"]["minflt"]
                                         - x["train"]["before"]["proc"]["minflt"])
        row["step major faults"] = total(lambda x: x["train"]["after"]["proc"]["majflt"]
                                         - x["train"]["before"]["proc"]["majflt"])
        row["step MemFree change MiB"] = _mib(tr["after"]["mem"]["MemFree"] - tr["before"]["mem"]["MemFree"])
        row["optimizer state MiB"] = total(lambda x: x["optimizer_bytes"]) / MIB
        out.append(row)
    return out


def emulated_rows(run: list[dict]) -> list[dict[str, float]]:
    out = []
    for i, c in enumerate(run):
        row = {"total": c["total"]}
        row.update(system_figures(c["before"], c["after"], run[i - 1]["after"] if i else None))
        row["save minor faults"] = c["minflt"]
        row["sample age ms"] = c["stale"] * 1000
        out.append(row)
    return out


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


def spearman(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return statistics.correlation(_ranks(xs), _ranks(ys))


def per_save_table(rows: list[list[dict]], columns: list[str], fmt: str = "{:.3f}") -> list[str]:
    """| save | column... |: per save index, the median over runs."""
    n = min(len(r) for r in rows)
    columns = [c for c in columns if any(c in r[i] for r in rows for i in range(n))]
    lines = ["| save | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for i in range(n):
        cells = []
        for c in columns:
            vs = [r[i][c] for r in rows if c in r[i]]
            v = statistics.median(vs) if vs else None
            cells.append("-" if v is None else f"{v:.3f}" if c == "total" else f"{v:.0f}" if abs(v) >= 100
                         else fmt.format(v))
        lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    return lines


def moves(rows: list[list[dict]], label: str) -> list[str]:
    """The Spearman rank correlation of the save's total with each figure, over every (run, save)."""
    flat = [row for run in rows for row in run]
    found = []
    for key in flat[0]:
        if key == "total" or not all(key in row for row in flat):
            continue
        rho = spearman([row[key] for row in flat], [row["total"] for row in flat])
        if rho is not None:
            found.append((rho, key))
    found.sort(key=lambda x: -abs(x[0]))
    return [f"{label}: the save's total against each figure, Spearman's rank correlation over {len(flat)} saves "
            f"(every run's, every index), strongest first: "
            + ("; ".join(f"{k} {rho:+.2f}" for rho, k in found) or "none varies")]


SYSTEM = ["Dirty MiB", "Writeback MiB", "MemFree MiB", "Cached MiB", "Active(file) MiB", "Inactive(file) MiB",
          "in flight", "written between MiB", "written during MiB", "disk writes during", "ms writing during",
          "flushes during", "Dirty after MiB", "Writeback after MiB", "reported between MiB", "reported during MiB",
          *(f"{k} during" for k in ("compact_stall", "allocstall", "pgscan_direct", "pgalloc_normal", "pgfree",
                                    "thp_fault_alloc"))]


def save_by_save(a: argparse.Namespace, runs: list, emulated: list) -> list[str]:
    real = [real_rows(run) for run in runs]
    shown = [ph for ph in SAVE if any(row[ph] > 0.0005 for run in real for row in run)]
    interval = "saves back to back" if a.interval is None else \
        f"every {a.interval:g} s of training ({a.train_steps} step(s), then a sleep)"
    lines = [f"Save by save, {interval}: medians over {len(runs)} runs per save index. Disk: {a.disk} ({a.disk_how}).",
             "", "Real (dcp.save): the slowest process's total and each phase's mean over processes, s", "",
             *per_save_table(real, ["total", *shown]), "",
             "Real: memory and disk before each save (rank 0's samples after the barrier; MiB; in flight: the "
             "device's I/Os; during/between: the device's counters over the save, and from the previous save's end)",
             "", *per_save_table(real, ["total", *SYSTEM], "{:.1f}"), "",
             "Real: the processes (summed) before each save, and the training before it (the set-up step before "
             "save 1)", "",
             *per_save_table(real, ["total", "RSS MiB", "heap used MiB", "heap free MiB", "save minor faults",
                                    "save major faults", "save RSS change MiB", "optimizer state MiB"], "{:.1f}"),
             "",
             *per_save_table(real, ["total", "train steps", "trained s", "slept s", "step RSS change MiB",
                                    "step heap free change MiB", "step minor faults", "step major faults",
                                    "step MemFree change MiB"], "{:.2f}"),
             "", *moves(real, "Real")]
    if emulated:
        emu = [emulated_rows(run) for run in emulated]
        lines += ["", "Emulated (layout=dcp, io_pattern=framework): summary.json's duration per save, and the 50 ms "
                  "sample of memory and disk just before its start (sample age: how long before) and after its end",
                  "", *per_save_table(emu, ["total", *SYSTEM, "save minor faults", "sample age ms"], "{:.1f}"), "",
                  *moves(emu, "Emulated"), "", "Real beside emulated, per save (median over runs; the ratio: the "
                  "median of the per-round ratios emulated/real of that save)", "",
                  "| save | real s | emulated s | emulated/real | real Dirty MiB | emulated Dirty MiB | "
                  "real written between MiB | emulated written between MiB |", "|---|---|---|---|---|---|---|---|"]
        med = statistics.median
        for i in range(min(len(real[0]), len(emu[0]))):
            pairs = list(zip(real, emu, strict=False))
            ratio = med(e[i]["total"] / x[i]["total"] for x, e in pairs)

            def fig(rows: list, key: str, i: int = i) -> str:
                vs = [r[i][key] for r in rows if key in r[i]]
                return f"{med(vs):.1f}" if vs else "-"
            lines.append(f"| {i + 1} | {med(x[i]['total'] for x in real):.3f} | "
                         f"{med(e[i]['total'] for e in emu):.3f} | {ratio:.2f} | {fig(real, 'Dirty MiB')} | "
                         f"{fig(emu, 'Dirty MiB')} | {fig(real, 'written between MiB')} | "
                         f"{fig(emu, 'written between MiB')} |")
    return lines


if __name__ == "__main__":
    main()
