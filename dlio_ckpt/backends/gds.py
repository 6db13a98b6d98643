"""GPUDirect Storage through kvikio: files written from and read into GPU memory with cuFile.

Every write goes from a device buffer; every read lands in one, and is copied back to the host only
to be verified (after the timed I/O of that chunk, like the page-cache-free reads of local_fs). The
engine's synthetic chunks are produced on the host, so each chunk makes one host-to-device copy
into a device buffer allocated once per writer thread; kvikio then moves it to storage with its own
thread pool (``threads``, ``task_size``), by GDS where the file system supports it and in kvikio's
compatibility mode (POSIX through a bounce buffer) where not: ``summary.json`` says which.

Without a CUDA GPU this backend stops at start-up with a message saying so.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import cupy
import kvikio
import numpy as np
from pydantic import Field

from ..errors import ConfigError, StorageError
from .base import Capabilities, Options
from .local_fs import LocalFSBackend

MIB = 1 << 20


class GDSOptions(Options):
    threads: int = Field(1, ge=1, le=256, description="files in flight per process")
    kvikio_threads: int = Field(16, ge=1, le=1024, description="kvikio's I/O thread pool size")
    task_size: int = Field(4 * MIB, ge=4096, multiple_of=4096, description="bytes per kvikio task")
    device: int = Field(0, ge=0, description="CUDA device of this process (default: local rank mod GPUs)")
    compat_mode: bool | None = Field(None, description="kvikio compatibility mode: None lets kvikio decide")


def _configure(o: GDSOptions) -> None:
    settings = {"num_threads": o.kvikio_threads, "task_size": o.task_size}
    if o.compat_mode is not None:
        settings["compat_mode"] = o.compat_mode
    if hasattr(kvikio.defaults, "set"):
        kvikio.defaults.set(settings)
    else:  # kvikio < 25.02
        kvikio.defaults.num_threads_reset(o.kvikio_threads)
        kvikio.defaults.task_size_reset(o.task_size)
        if o.compat_mode is not None:
            kvikio.defaults.compat_mode_reset(o.compat_mode)


def _device_count() -> int:
    try:
        return cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, no device: CUDARuntimeError
        raise ConfigError("workload.storage.storage_type", "gds",
                          f"needs a CUDA GPU and driver; none usable here ({exc})") from None


class GDSWriter:
    def __init__(self, path: str, staging: cupy.ndarray) -> None:
        self.path, self._dev, self._offset = path, staging, 0
        try:
            self._fh = kvikio.CuFile(path, "w")
        except Exception as exc:
            raise StorageError(f"cannot create {path}: {exc}") from None

    def write(self, data: memoryview) -> None:
        try:
            while data:
                n = min(len(data), self._dev.size)
                self._dev[:n].set(_host_array(data[:n]))
                self._offset += self._fh.pwrite(self._dev[:n], n, self._offset).get()
                data = data[n:]
        except Exception as exc:
            raise StorageError(f"write failed on {self.path}: {exc}") from None

    def finish(self, fsync: bool) -> None:
        self._fh.close()

    def abort(self) -> None:
        self._fh.close()


class GDSReader:
    def __init__(self, path: str, staging: cupy.ndarray) -> None:
        self.path, self._dev, self._offset = path, staging, 0
        try:
            self._fh = kvikio.CuFile(path, "r")
        except Exception as exc:
            raise StorageError(f"cannot open {path}: {exc}") from None

    def readinto(self, buf: memoryview) -> int:
        """Read into device memory, then copy to ``buf`` for verification."""
        total = 0
        try:
            while total < len(buf):
                want = min(len(buf) - total, self._dev.size)
                n = self._fh.pread(self._dev[:want], want, self._offset).get()
                if n == 0:
                    break
                self._dev[:n].get(out=_host_array(buf[total:total + n]))
                self._offset += n
                total += n
        except Exception as exc:
            raise StorageError(f"read failed on {self.path}: {exc}") from None
        return total

    def close(self) -> None:
        self._fh.close()


def _host_array(view: memoryview) -> np.ndarray:
    return np.frombuffer(view, dtype=np.uint8)


class GDSBackend(LocalFSBackend):
    """Paths, folders, eviction and manifests as local_fs; bulk data through cuFile."""

    name = "gds"
    capabilities = Capabilities(fsync=True, durable_on_close=False, odirect=True, alignment=4096,
                                evict_cache=True, ranged_reads=True, device_buffers=True)

    options_model = GDSOptions

    def __init__(self, root: str, options: dict[str, Any]) -> None:
        super().__init__(root, options)
        count = _device_count()
        if count == 0:
            raise ConfigError("workload.storage.storage_type", "gds", "needs a CUDA GPU; none found")
        local_rank = int(os.environ.get("MPI_LOCALRANKID", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))
        self.device = self.options.device or local_rank % count
        cupy.cuda.Device(self.device).use()
        _configure(self.options)
        self._staging: dict[int, cupy.ndarray] = {}

    def _buffer(self) -> cupy.ndarray:
        """One device buffer per thread, allocated on first use and reused."""
        ident = threading.get_ident()
        if ident not in self._staging:
            self._staging[ident] = cupy.empty(16 * MIB, dtype=cupy.uint8)
        return self._staging[ident]

    def describe(self) -> dict[str, Any]:
        compat = kvikio.defaults.get("compat_mode") if hasattr(kvikio.defaults, "get") else \
            kvikio.defaults.compat_mode()
        return {**super().describe(), "device": self.device, "kvikio_version": kvikio.__version__,
                "compat_mode": str(compat), "kvikio_threads": self.options.kvikio_threads,
                "task_size": self.options.task_size}

    def open_write(self, path: str, odirect: bool) -> GDSWriter:
        return GDSWriter(path, self._buffer())

    def open_read(self, path: str, odirect: bool) -> GDSReader:
        return GDSReader(path, self._buffer())
