"""``mode=fsdp``: a llama-shaped model sharded with FSDP2 (``fully_shard``) over every process, its
model and optimizer state saved and loaded with torch.distributed.checkpoint (DCP).

Why "corrected" durations: a DCP benchmark's wall time is mostly process start, imports and model
set-up. Each save is timed from a barrier just before ``dcp.save`` to its return on each process,
and the checkpoint's duration is the slowest process's (as everywhere in dlio_ckpt); set-up is
reported apart (``per_process[].setup_seconds``). With ``async_save`` the training step is held only
while DCP stages the state; the save's duration runs until its upload completed, and the time held
is reported as ``blocking_seconds``. Every load is checked: the tensors read back have the same
per-tensor checksums (float64 sum and sum of squares of each local shard) as those saved.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import struct
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import Future
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from dlio_ckpt.cluster.comm import on_root
from dlio_ckpt.cluster.host import hostname
from dlio_ckpt.errors import ConfigError, StorageError, VerifyError
from dlio_ckpt.model.dense import TransformerShape
from dlio_ckpt.model.dtypes import DATATYPE_BYTES, DTYPES
from dlio_ckpt.results.schema import IO, Summary
from dlio_ckpt.results.summary import ProcessCost
from dlio_ckpt.run.context import Clock, RunContext, evict_before_read, record, say_done, timed, write_results
from dlio_ckpt.run.real.llama import Llama
from dlio_ckpt.run.real.predict import fsdp as predicted
from dlio_ckpt.run.steps import Writes

if TYPE_CHECKING:
    from dlio_ckpt.io.backends.s3 import S3Backend

log = logging.getLogger("dlio_ckpt")
# FSDP2 and DTensor warn about patterns of our own small model (views, RNG tracker) on every step
warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.distributed\.")


FSYNC = "sync_files=True: DCP fsyncs every shard before its save ends"


def needed_bytes(ctx: RunContext) -> int:
    return ctx.ck.num_checkpoints_write * predicted(ctx.workload, ctx.world_size)["payload_bytes"]


def preflight(ctx: RunContext) -> None:
    if ctx.workload.fsdp.backend == "nccl" and not torch.cuda.is_available():
        raise ConfigError("workload.fsdp.backend", "nccl", "needs CUDA GPUs; use backend=gloo on CPU")


def writes(ctx: RunContext) -> Writes:
    """DCP's names (torch/distributed/checkpoint/filesystem.py): a shard per rank and writer thread, and
    the coordinator's .metadata, written as .metadata.tmp and renamed."""
    shards = tuple(f"__{r}_{k}.distcp" for r in range(ctx.world_size) for k in range(ctx.workload.fsdp.thread_count))
    return Writes.of_run(ctx.ck, files=(".metadata", ".metadata.tmp", *shards))


def check_reads(ctx: RunContext) -> None:
    """Nothing: an FSDP run reads back what it saved."""


def init_distributed(ctx: RunContext, hosts: list[str]) -> torch.device:
    """One torch.distributed process per MPI rank (rendezvous address shared over MPI), or the
    process group torchrun's environment describes."""
    backend = ctx.workload.fsdp.backend
    if not dist.is_initialized():
        if ctx.comm.rank == 0:
            with socket.socket() as s:
                s.bind(("", 0))
                port = s.getsockname()[1]
            addr = "127.0.0.1" if len(set(hosts)) == 1 else socket.gethostbyname(hostname())
            where = (os.environ.get("MASTER_ADDR", addr), int(os.environ.get("MASTER_PORT", port)))
        where = ctx.comm.bcast(where if ctx.comm.rank == 0 else None)
        timeout = timedelta(seconds=max(ctx.ck.io_timeout, 60) if ctx.ck.io_timeout else 3600)
        dist.init_process_group(backend, init_method=f"tcp://{where[0]}:{where[1]}", rank=ctx.comm.rank,
                                world_size=ctx.comm.size, timeout=timeout)
    if backend == "nccl":
        torch.cuda.set_device(ctx.comm.local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")  # gloo: everything on the CPU, even where a GPU is present


def build_model(ctx: RunContext, device: torch.device) -> tuple[Llama, torch.optim.Optimizer]:
    m = ctx.workload.model
    shape = TransformerShape.from_model(m)
    with torch.device("meta"):
        model = Llama(shape).to(getattr(torch, DTYPES[m.model_datatype].torch))
    # The mesh names the device: left out, FSDP2 picks CUDA wherever a GPU exists, even under gloo
    mesh = init_device_mesh(device.type, (ctx.comm.size,))
    for block in model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device=device)
    torch.manual_seed(0)
    model.init_weights()
    s = ctx.workload.fsdp
    # fp16 cannot hold Adam's default eps (1e-8 rounds to 0: 0/0 for rows without gradient)
    eps = 1e-4 if m.model_datatype == "fp16" else 1e-8
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, eps=eps) if s.optimizer == "adam" else \
        torch.optim.SGD(model.parameters(), lr=1e-3)
    return model, opt


def train_step(ctx: RunContext, model: Llama, opt: torch.optim.Optimizer, device: torch.device,
               gen: torch.Generator) -> None:
    s, vocab = ctx.workload.fsdp, ctx.workload.model.transformer.vocab_size
    tokens = torch.randint(0, vocab, (s.batch_size, s.seq_len + 1), generator=gen).to(device)
    logits = model(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def train_for(ctx: RunContext, since: float, taken: int, model: Llama, opt: torch.optim.Optimizer,
              device: torch.device, gen: torch.Generator) -> int:
    """Training steps until ``checkpoint.time_between_checkpoints`` has passed since ``since`` (when this interval's
    training began), at least one counting the ``taken`` ones: a job trains between its checkpoints, and what that
    leaves in memory and the CPU's caches is part of the next save's time (our own checks around a save are not
    training, and do not count). Every rank takes as many steps as rank 0 (a step's collectives need them all):
    rank 0's clock decides after each step. Returns the steps of the interval."""
    until, steps = since + ctx.workload.checkpoint.time_between_checkpoints, taken
    while not (steps and ctx.comm.bcast(time.perf_counter() >= until)):
        train_step(ctx, model, opt, device, gen)
        steps += 1
    return steps


def _tensors(obj: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{prefix}.{i}")


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def fingerprint(state: dict[str, Any]) -> dict[str, bytes]:
    """Per tensor, the float64 sum and sum of squares of this process's shard: cheap, and equal
    bit for bit when the same bytes are summed the same way (compared as bytes, so NaN equals NaN)."""
    out = {}
    for key, t in _tensors(state):
        local = _local(t).detach().double()
        out[key] = struct.pack("<dd", local.sum().item(), local.square().sum().item())
    return out


def _scheme(ctx: RunContext) -> str:
    """``s3``: s3torchconnector's DCP classes (the benchmark reproduced); another URL scheme: DCP's
    fsspec classes with the backend's options; none: local files."""
    return ctx.backend.url(ctx.path(1)).partition("://")[0] if "://" in ctx.backend.url(ctx.path(1)) else ""


def _s3(ctx: RunContext) -> S3Backend:
    """The storage where its URLs are ``s3://``: the s3 backend, with its region and its clients."""
    return cast("S3Backend", ctx.backend)


def _writer(ctx: RunContext, step: int) -> Any:
    s, url = ctx.workload.fsdp, ctx.backend.url(ctx.path(step))
    if _scheme(ctx) == "s3":
        from s3torchconnector.dcp import S3StorageWriter

        writer = S3StorageWriter(_s3(ctx).options.region, url, thread_count=s.thread_count)
        _point_at_endpoint(ctx, writer, url)
        return writer
    if _scheme(ctx):
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

        return FsspecWriter(url, sync_files=False, thread_count=s.thread_count, **ctx.backend.fsspec_options())
    return dcp.FileSystemWriter(url, thread_count=s.thread_count, sync_files=ctx.ck.fsync)


def _reader(ctx: RunContext, step: int) -> Any:
    url = ctx.backend.url(ctx.path(step))
    if _scheme(ctx) == "s3":
        from s3torchconnector.dcp import S3StorageReader

        reader = S3StorageReader(_s3(ctx).options.region, url)
        _point_at_endpoint(ctx, reader, url)
        return reader
    if _scheme(ctx):
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

        return FsspecReader(url, **ctx.backend.fsspec_options())
    return dcp.FileSystemReader(url)


def _point_at_endpoint(ctx: RunContext, storage: Any, url: str) -> None:
    """s3torchconnector's DCP classes take a region but no endpoint or keys; give them a client built
    from our S3 options (endpoint, path style, part size, attempts, the storage's own keys) through
    S3FileSystem's own argument."""
    from s3torchconnector.dcp import S3FileSystem

    backend = _s3(ctx)
    client = backend.framework_client()
    reader_constructor = getattr(storage, "_reader_constructor", None)
    storage.fs = S3FileSystem(backend.options.region, s3_client=client, reader_constructor=reader_constructor)
    storage.path = storage.fs.init_path(url)


def written_by_rank(ctx: RunContext, step: int) -> dict[int, tuple[int, int]]:
    """(bytes, files) each rank wrote, from the ``.metadata`` DCP stored, read back by rank 0 after
    the save's time: the Metadata that ``dcp.save`` returns has no ``storage_data`` before torch 2.13,
    while the stored one always has it (loads need it)."""
    def read() -> dict[int, tuple[int, int]]:
        try:
            return bytes_by_rank(_reader(ctx, step).read_metadata())
        except DCP_ERRORS as exc:
            raise _fail("reading the .metadata of", ctx.backend.url(ctx.path(step)), exc) from None
    with ctx.watch():
        return on_root(ctx.comm, read)


def bytes_by_rank(metadata: Any) -> dict[int, tuple[int, int]]:
    """(bytes, files) each rank wrote, from DCP's metadata (files are ``__RANK_N.distcp``)."""
    per: dict[int, dict[str, int]] = {}
    for info in metadata.storage_data.values():
        m = re.search(r"__(\d+)_\d+\.distcp$", info.relative_path)
        if m:
            files = per.setdefault(int(m.group(1)), {})
            files[info.relative_path] = files.get(info.relative_path, 0) + info.length
    return {r: (sum(f.values()), len(f)) for r, f in per.items()}


# DCP reports a failure on any rank as CheckpointException, a BaseException: caught beside Exception
DCP_ERRORS = (Exception, CheckpointException)


def _fail(what: str, url: str, exc: BaseException) -> StorageError:
    """The cause in one line: for DCP's CheckpointException, each failed rank's own exception."""
    if isinstance(exc, CheckpointException):
        causes = "; ".join(f"rank {rank}: {type(e).__name__}: {_first_line(e)}"
                           for rank, (e, _trace) in sorted(exc.failures.items()))
        return StorageError(f"{what} {url} failed: {causes}")
    return StorageError(f"{what} {url} failed: {type(exc).__name__}: {_first_line(exc)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


class _Saves:
    """Saves in flight (async) and done: their records and what each process wrote."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.records: list = []
        self.blocking: list[float] = []
        self.written: dict[int, dict[int, tuple[int, int]]] = {}  # step -> rank -> (bytes, files)
        self.pending: tuple | None = None

    def finish(self, step: int, clock: Clock, end: float, stalled: float | None = None,
               ended: ProcessCost | None = None) -> None:
        """``stalled``: async saves only, the wait for the previous save before this one started;
        the record then says how long training was held (that wait + dcp.async_save's staging); ``ended``: this
        process's cost when an async save's write finished (its record is made after the next training step)."""
        ctx = self.ctx
        written = written_by_rank(ctx, step)
        nbytes, files = written.get(ctx.comm.rank, (0, 0))
        if ctx.comm.rank == 0:
            nbytes, files = nbytes + (ctx.backend.size(f"{ctx.path(step)}/.metadata") or 0), files + 1
            written[0] = (nbytes, files)
        self.written[step] = written
        held = None if stalled is None else clock.seconds + stalled
        self.records.append(record(ctx, "save", step, clock, nbytes, files, seconds=end - clock.t0, held=held,
                                   stalled=stalled or 0.0, ended=ended, framework_cpu=None))
        say_done(ctx, f"save_ckpt{step}", end - clock.t0, f"{self.blocking[-1]:.3f} s blocking on rank 0")

    def wait(self) -> float:
        """The save in flight finished (and its record made); returns the seconds waited for it."""
        if self.pending is None:
            return 0.0
        step, clock, future, done, stalled = self.pending
        t0 = time.perf_counter()
        with self.ctx.watch():
            try:
                future.result()
            except DCP_ERRORS as exc:
                raise _fail("dcp.async_save to", self.ctx.backend.url(self.ctx.path(step)), exc) from None
        self.pending = None
        waited = time.perf_counter() - t0
        self.finish(step, clock, done[0], stalled, done[1])
        return waited


def _stamp(done: list[Any], _future: Future) -> None:
    """When an async save's write finished, and this process's cost then (called in DCP's thread)."""
    done[:] = [time.perf_counter(), ProcessCost.now()]


def run(ctx: RunContext) -> Summary | None:
    w, s, ck = ctx.workload, ctx.workload.fsdp, ctx.workload.checkpoint
    hosts = ctx.comm.allgather(hostname())  # each process's host, gathered once
    device = init_distributed(ctx, hosts)
    model, opt = build_model(ctx, device)
    gen = torch.Generator().manual_seed(1 + ctx.comm.rank)  # data parallel: each rank its own tokens
    ctx.state.phase = "train"
    began = time.perf_counter()  # the first interval's training begins with the set-up step
    train_step(ctx, model, opt, device, gen)  # the optimizer has state before the first save
    async_group = dist.new_group(backend="gloo") if s.async_save else None
    setup = time.time() - ctx.started
    saves, sums = _Saves(ctx), {}
    for i in range(1, ck.num_checkpoints_write + 1):
        ctx.state.phase, ctx.state.step = "train", i
        steps = train_for(ctx, began if i == 1 else time.perf_counter(), 1 if i == 1 else 0, model, opt, device, gen)
        log.debug("%d training step(s) before save %d", steps, i)
        stalled = saves.wait()  # an async save must finish before the next one starts (as torchtitan does)
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd}
        sums[i] = fingerprint(state)
        url = ctx.backend.url(ctx.path(i))
        with timed(ctx, "save", i) as clock:
            try:
                if s.async_save:
                    future = dcp.async_save(state, storage_writer=_writer(ctx, i), process_group=async_group)
                    # a Future: DCP's writers stage before async_save returns (an AsyncSaveResponse is a stager's
                    # that stages in the background, which is not asked for here)
                    assert isinstance(future, Future)
                    done: list[Any] = [0.0, None]
                    future.add_done_callback(partial(_stamp, done))
                    saves.pending = (i, clock, future, done, stalled)
                else:
                    dcp.save(state, storage_writer=_writer(ctx, i))
            except DCP_ERRORS as exc:
                raise _fail("dcp.save to", url, exc) from None
        saves.blocking.append(clock.seconds)
        if not s.async_save:
            saves.finish(i, clock, clock.t0 + clock.seconds)
    saves.wait()
    records = saves.records
    first_on_host = hosts.index(hostname()) == ctx.comm.rank
    for i in range(1, ck.num_checkpoints_read + 1):
        ctx.state.phase, ctx.state.step = "load", i
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd}
        with torch.no_grad():
            for _, t in _tensors(state):
                _local(t).zero_()  # a load that reads nothing cannot pass the check
        url, step = ctx.backend.url(ctx.path(i)), ctx.path(i)
        if first_on_host:  # one process per host drops every shard from that host's cache
            evict_before_read(ctx, [f"{step}/{name}" for name in ctx.backend.list_names(step)])
        with timed(ctx, "load", i) as clock:
            try:
                dcp.load(state, storage_reader=_reader(ctx, i))
            except DCP_ERRORS as exc:
                raise _fail("dcp.load from", url, exc) from None
        loaded = ProcessCost.now()  # the check below is ours, and outside the load's time
        _check(fingerprint(state), sums[i], url)
        nbytes, files = saves.written[i].get(ctx.comm.rank, (0, 0))
        records.append(record(ctx, "load", i, clock, nbytes, files, ended=loaded, framework_cpu=None))
        say_done(ctx, f"load_ckpt{i}", clock.seconds, "checked")
    total = sum(b for b, _ in saves.written[1].values())
    params = sum(p.numel() for p in model.parameters())
    io = IO(format="torch.distributed.checkpoint (.distcp shards + .metadata)",
            writer={"s3": "S3StorageWriter", "": "FileSystemWriter"}.get(_scheme(ctx), "FsspecWriter"),
            thread_count=s.thread_count, async_save=s.async_save,
            verified="per-tensor checksums of every shard read back equal those saved",
            bytes_read_note="each process is credited with the bytes it saved for that step")
    extra = {"setup_seconds": setup, "blocking_save_seconds": saves.blocking, "host": hostname(),
             "model": {"parameters": params, "dtype": w.model.model_datatype, "optimizer": s.optimizer,
                       "parameter_bytes": params * DATATYPE_BYTES[w.model.model_datatype]},
             "versions": {"torch": torch.__version__, "backend": s.backend}}
    result = write_results(ctx, records, total, io, extra)
    dist.destroy_process_group()
    return result


def _check(got: dict[str, bytes], saved: dict[str, bytes], url: str) -> None:
    if got.keys() != saved.keys():
        raise VerifyError(f"{url}: tensors read back differ from those saved: "
                          f"{sorted(set(got) ^ set(saved))[:3]}")
    for key, value in saved.items():
        if got[key] != value:
            raise VerifyError(f"{url}: tensor {key} read back differs from the one saved "
                              f"(checksums {struct.unpack('<dd', got[key])} vs {struct.unpack('<dd', value)})")
