"""``mode=gds``: one GPU tensor of ``gds.size_mib`` saved and loaded along each transfer path, with
a table per path like fio's and gdsio's summaries (MiB/s and MB/s, threads, I/O size).

The paths (``gds.paths``, the first one listed also fills save_ckpt/load_ckpt in summary.json):
- ``gds``: Storage<->GPU through kvikio's CuFile (GPUDirect Storage, or kvikio's compat mode).
- ``cpu``: Storage<->CPU only: a host tensor written and read in ``io_size`` requests (the baseline).
- ``cpu_gpu``: Storage<->CPU<->GPU: ``torch.save`` of the tensor copied to the host, ``torch.load``
  and a copy back to the GPU, as a framework without GDS does it.
- ``pinned_async``: pinned host buffers, device copies on a CUDA stream overlapped with file I/O,
  two buffers of ``io_size`` in turn.
- ``torch_gds``: ``torch.cuda.gds.GdsFile`` where this torch build has it (skipped with a note if not).
Reads follow ``checkpoint.read_from_page_cache``: false evicts the file's pages before each read.

A path the system cannot take (``torch_gds`` on a file system cuFile cannot register: "cuFileHandleRegister
failed") is reported as unsupported with its reason, decided by all processes together after the first
save, and the run goes on with the other paths. ``io.paths.gds.transport`` says whether cuFile really
used GDS or a POSIX compatibility mode.
"""

from __future__ import annotations

import logging
import os
import statistics
from collections.abc import Callable
from typing import Any

import torch

from dlio_ckpt.config import GDSSettings
from dlio_ckpt.errors import ConfigError, StorageError, VerifyError
from dlio_ckpt.io.backends.cufile_status import transport
from dlio_ckpt.results.schema import IO, Summary
from dlio_ckpt.results.summary import OpRecord
from dlio_ckpt.run.context import RunContext, evict_before_read, record, timed, write_results
from dlio_ckpt.run.steps import Writes

log = logging.getLogger("dlio_ckpt")
MIB = 1 << 20


FSYNC = "every file fsynced inside its save time"


def needed_bytes(ctx: RunContext) -> int:
    s = ctx.workload.gds
    return ctx.ck.num_checkpoints_write * len(s.paths) * ctx.comm.size * s.size_mib * MIB


def preflight(ctx: RunContext) -> None:
    if not torch.cuda.is_available():
        raise ConfigError("workload.mode", "gds", "needs a CUDA GPU, and torch sees none "
                          "(torch.cuda.is_available() is False); run it on a GPU machine")
    if "gds" in ctx.workload.gds.paths:
        try:
            import kvikio  # noqa: F401
        except ImportError:
            raise ConfigError("workload.gds.paths", "gds", "needs kvikio (pip install 'dlio_ckpt[gds-cu13]', or "
                              "[gds-cu12] for CUDA 12), "
                              "or leave gds out of the paths") from None


def writes(ctx: RunContext) -> Writes:
    return Writes.of_run(ctx.ck, files=tuple(f"{p}.{r}.bin" for p in ctx.workload.gds.paths
                                             for r in range(ctx.world_size)))


def check_reads(ctx: RunContext) -> None:
    """Nothing: a gds run reads back what it saved."""


class Paths:
    """Save and load of one device tensor along each path; every function returns after the bytes
    are on storage (fsync) or back in GPU memory (synchronized)."""

    def __init__(self, s: GDSSettings, sync: Callable[[str], None] | None, device: torch.device) -> None:
        """``sync``: the backend's fsync of a written file, or None when ``checkpoint.fsync`` is off."""
        self.io_size, self.device = s.io_size_mib * MIB, device
        self._sync = sync
        if "gds" in s.paths:
            from dlio_ckpt.io.backends.gds import configure_kvikio

            configure_kvikio(s.threads, self.io_size, None if s.compat_mode == "auto" else s.compat_mode == "on")

    def _sync_file(self, path: str) -> None:
        if self._sync is not None:
            self._sync(path)

    def save_gds(self, t: torch.Tensor, path: str) -> None:
        import kvikio

        with kvikio.CuFile(path, "w") as f:
            f.write(t)
        self._sync_file(path)

    def load_gds(self, t: torch.Tensor, path: str) -> None:
        import kvikio

        with kvikio.CuFile(path, "r") as f:
            f.read(t)
        _synchronize(t)

    def save_cpu(self, t: torch.Tensor, path: str) -> None:
        host = t.cpu() if t.is_cuda else t  # prepared once by the caller for this path
        view = host.numpy().data.cast("B")  # .data: the array's memoryview
        with open(path, "wb", buffering=0) as f:
            for off in range(0, len(view), self.io_size):
                f.write(view[off:off + self.io_size])
        self._sync_file(path)

    def load_cpu(self, t: torch.Tensor, path: str) -> None:
        view = t.numpy().data.cast("B")
        with open(path, "rb", buffering=0) as f:
            for off in range(0, len(view), self.io_size):
                f.readinto(view[off:off + self.io_size])

    def save_cpu_gpu(self, t: torch.Tensor, path: str) -> None:
        torch.save(t.cpu(), path)
        self._sync_file(path)

    def load_cpu_gpu(self, t: torch.Tensor, path: str) -> None:
        t.copy_(torch.load(path, weights_only=True).to(self.device))
        _synchronize(t)

    def save_pinned_async(self, t: torch.Tensor, path: str) -> None:
        flat, stream = t.view(torch.uint8).flatten(), torch.cuda.Stream()
        bufs = [torch.empty(self.io_size, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
        done = [torch.cuda.Event(), torch.cuda.Event()]
        chunks = [(off, min(self.io_size, flat.numel() - off)) for off in range(0, flat.numel(), self.io_size)]
        with open(path, "wb", buffering=0) as f:
            def start(i: int) -> None:
                off, n = chunks[i]
                with torch.cuda.stream(stream):
                    bufs[i % 2][:n].copy_(flat[off:off + n], non_blocking=True)
                    done[i % 2].record(stream)
            start(0)
            for i, (_, n) in enumerate(chunks):
                done[i % 2].synchronize()
                if i + 1 < len(chunks):
                    start(i + 1)  # the next device->host copy runs while this chunk is written
                f.write(bufs[i % 2][:n].numpy().data)
        self._sync_file(path)

    def load_pinned_async(self, t: torch.Tensor, path: str) -> None:
        flat, stream = t.view(torch.uint8).flatten(), torch.cuda.Stream()
        bufs = [torch.empty(self.io_size, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
        free = [torch.cuda.Event(), torch.cuda.Event()]
        with open(path, "rb", buffering=0) as f:
            for i, off in enumerate(range(0, flat.numel(), self.io_size)):
                n = min(self.io_size, flat.numel() - off)
                free[i % 2].synchronize()  # its previous host->device copy has finished
                f.readinto(bufs[i % 2][:n].numpy().data)
                with torch.cuda.stream(stream):
                    flat[off:off + n].copy_(bufs[i % 2][:n], non_blocking=True)
                    free[i % 2].record(stream)
        stream.synchronize()

    def save_torch_gds(self, t: torch.Tensor, path: str) -> None:
        f = torch.cuda.gds.GdsFile(path, os.O_CREAT | os.O_RDWR)
        # torch annotates a torch.types.Storage, a class its own storages do not derive from; its docs pass this
        f.save_storage(t.untyped_storage(), offset=0)  # type: ignore[arg-type]
        del f
        self._sync_file(path)

    def load_torch_gds(self, t: torch.Tensor, path: str) -> None:
        f = torch.cuda.gds.GdsFile(path, os.O_RDONLY)
        f.load_storage(t.untyped_storage(), offset=0)  # type: ignore[arg-type]  # as save_storage
        del f
        _synchronize(t)


def _synchronize(t: torch.Tensor) -> None:
    if t.is_cuda:
        torch.cuda.synchronize(t.device)


# Paths whose first save may find the system unable to take them (cuFile refusing the file system)
_MAY_BE_UNSUPPORTED = ("gds", "torch_gds")


def _available(name: str) -> str | None:
    """Why a path cannot run in this build, or None."""
    if name == "torch_gds" and not hasattr(getattr(torch.cuda, "gds", None), "GdsFile"):
        return f"torch {torch.__version__} has no torch.cuda.gds.GdsFile"
    return None


def _transfer(ctx: RunContext, phase: str, name: str, step: int, fn: Callable[[torch.Tensor, str], None],
              t: torch.Tensor, file: str, nbytes: int) -> OpRecord:
    """One timed save or load of one path, started together on every process."""
    ctx.state.file = file
    _synchronize(t)  # earlier device work is not this transfer's
    try:
        with timed(ctx, phase, step, name) as clock:
            fn(t, file)
    except OSError as exc:
        raise StorageError(f"{name} {phase} {'to' if phase == 'save' else 'from'} {file}: {exc}") from None
    return record(ctx, phase, step, clock, nbytes, 1)


def run(ctx: RunContext) -> Summary | None:
    s, ck = ctx.workload.gds, ctx.ck
    device = torch.device("cuda", ctx.comm.local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    source = torch.randint(0, 255, (s.size_mib * MIB,), dtype=torch.uint8, device=device)
    paths = Paths(s, ctx.backend.sync if ck.fsync else None, device)
    table: dict[str, dict[str, Any]] = {}
    records: list[OpRecord] = []
    for name in s.paths:
        why = _available(name)
        row, path_records = ({"skipped": why}, []) if why else measure_path(ctx, paths, name, source)
        table[name] = row
        if name == s.paths[0]:
            records = path_records
        if "write_MiB_per_s" in row:
            log.info("%-13s write %9.1f MiB/s  read %9.1f MiB/s", name, row["write_MiB_per_s"],
                     row.get("read_MiB_per_s", 0.0))
        else:
            log.info("%-13s %s", name, row.get("skipped") or f"unsupported here: {row['unsupported']}")
    if "gds" in table:
        table["gds"]["transport"] = transport(ctx.backend.join(ck.checkpoint_folder))
        log.info("gds transport: %s (%s)", table["gds"]["transport"]["transport"], table["gds"]["transport"]["why"])
    if not records:
        raise StorageError(f"the first of gds.paths ({s.paths[0]}) could not run here: "
                           f"{table[s.paths[0]].get('unsupported') or table[s.paths[0]].get('skipped')}; "
                           "list a path that can first")
    io = IO(format="raw device bytes", primary_path=s.paths[0], paths=table, verified=True)
    extra = {"device": torch.cuda.get_device_name(device), "versions": {"torch": torch.__version__}}
    return write_results(ctx, records, source.numel() * ctx.comm.size, io, extra)


def measure_path(ctx: RunContext, paths: Paths, name: str, source: torch.Tensor) -> tuple[dict[str, Any],
                                                                                           list[OpRecord]]:
    """Every save then every load of one path: its table row and timing records. If the first save
    fails on any process with a RuntimeError of a path that needs cuFile, the path is unsupported
    here (decided together, so every process skips it) and the run goes on."""
    s, ck = ctx.workload.gds, ctx.ck
    data = source.cpu() if name == "cpu" else source
    nbytes = data.numel()
    save, load = getattr(paths, f"save_{name}"), getattr(paths, f"load_{name}")
    records: list[OpRecord] = []
    for i in range(1, ck.num_checkpoints_write + 1):
        ctx.backend.makedirs(ctx.path(i))
        file = f"{ctx.path(i)}/{name}.{ctx.comm.rank}.bin"
        why = None
        try:
            records.append(_transfer(ctx, "save", name, i, save, data, file, nbytes))
        except RuntimeError as exc:
            if i > 1 or name not in _MAY_BE_UNSUPPORTED:
                raise
            why = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        if i == 1:
            reasons = [(r, w) for r, w in enumerate(ctx.comm.allgather(why)) if w]
            if reasons:
                ctx.backend.remove(file)
                return {"unsupported": "; ".join(f"rank {r}: {w}" for r, w in reasons[:4])}, []
    for i in range(1, ck.num_checkpoints_read + 1):
        file = f"{ctx.path(i)}/{name}.{ctx.comm.rank}.bin"
        target = torch.empty_like(data)
        evict_before_read(ctx, [file])
        records.append(_transfer(ctx, "load", name, i, load, target, file, nbytes))
        if not torch.equal(target, data):
            raise VerifyError(f"{file}: the {name} path read back other bytes than it wrote")
    seconds = {p: [r.duration for r in records if r.phase == p] for p in ("save", "load")}
    return _row(name, nbytes, seconds["save"], seconds["load"], s), records


def _row(name: str, nbytes: int, saves: list[float], loads: list[float], s: GDSSettings) -> dict[str, Any]:
    """One line of the table: medians, in both units, like fio's ``bw=`` and gdsio's ``Throughput``."""
    row: dict[str, Any] = {"io_size_bytes": s.io_size_mib * MIB, "threads": s.threads if name == "gds" else 1,
                           "bytes": nbytes}
    for kind, times in (("write", saves), ("read", loads)):
        if times:
            med = statistics.median(times)
            row[f"{kind}_MiB_per_s"] = nbytes / MIB / med
            row[f"{kind}_MB_per_s"] = nbytes / 1e6 / med
            row[f"{kind}_seconds_median"] = med
    return row
