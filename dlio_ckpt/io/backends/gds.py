"""GPUDirect Storage through kvikio: files written from and read into GPU memory with cuFile.

The engine makes and checks the synthetic payload in GPU memory (:meth:`GDSBackend.device_memory`),
so bulk data crosses PCIe only along the storage path being measured; the small format metadata
(headers, trailers) is staged through one device buffer per thread. kvikio moves the bytes with
its own thread pool (``kvikio_threads``, ``task_size``), by GDS where the system supports it and
through POSIX otherwise: ``summary.json`` (``io.storage.transport``) says which, and why.

Without a CUDA GPU this backend stops at start-up with a message saying so.
"""

from __future__ import annotations

import os
import threading
from contextlib import AbstractContextManager
from typing import Any

import cupy
import kvikio
import kvikio.defaults  # kvikio >= 26 no longer imports its submodules with the package
import numpy as np

from dlio_ckpt.errors import ConfigError, StorageError
from dlio_ckpt.io.backends.base import Capabilities
from dlio_ckpt.io.backends.cufile_status import transport
from dlio_ckpt.io.backends.local_fs import LocalFSBackend
from dlio_ckpt.io.backends.options import GDSOptions

MIB = 1 << 20


def configure_kvikio(threads: int, task_size: int, compat_mode: bool | None) -> None:
    """kvikio's thread pool, task size and compatibility mode (None: kvikio's AUTO)."""
    settings: dict[str, Any] = {"num_threads": threads, "task_size": task_size}
    if compat_mode is not None:
        settings["compat_mode"] = compat_mode
    if hasattr(kvikio.defaults, "set"):
        kvikio.defaults.set(settings)
    else:  # kvikio < 25.02
        kvikio.defaults.num_threads_reset(threads)
        kvikio.defaults.task_size_reset(task_size)
        if compat_mode is not None:
            kvikio.defaults.compat_mode_reset(compat_mode)


def _device_count() -> int:
    try:
        return cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, no device: CUDARuntimeError
        raise ConfigError("workload.storage.storage_type", "gds",
                          f"needs a CUDA GPU and driver; none usable here ({exc})") from None


def _host(view: memoryview) -> np.ndarray:
    return np.frombuffer(view, dtype=np.uint8)


class GDSWriter:
    """Writes sequentially: device arrays go to cuFile as they are; host bytes (format metadata)
    are staged through the thread's device buffer first."""

    def __init__(self, path: str, staging: Any) -> None:
        self.path, self._dev, self._offset = path, staging, 0
        try:
            self._fh = kvikio.CuFile(path, "w")
        except Exception as exc:
            raise StorageError(f"cannot create {path}: {exc}") from None

    def write(self, data: Any) -> None:
        try:
            if not isinstance(data, memoryview | bytes):
                self._put(data, data.size)
                return
            data = memoryview(data)
            while len(data):
                n = min(len(data), self._dev.size)
                self._dev[:n] = cupy.asarray(_host(data[:n]))
                self._put(self._dev[:n], n)
                data = data[n:]
        except Exception as exc:
            raise StorageError(f"write failed on {self.path}: {exc}") from None

    def _put(self, device_bytes: Any, n: int) -> None:
        self._offset += self._fh.pwrite(device_bytes, n, self._offset).get()

    def finish(self) -> None:
        self._fh.close()

    def abort(self) -> None:
        self._fh.close()


class GDSReader:
    """Reads sequentially into a device array (the engine's), or into host memory through the
    thread's device buffer. Never asks cuFile for bytes past the end of the file: kvikio raises
    ("POSIX error on pread: EOF") where POSIX would return a short read."""

    def __init__(self, path: str, staging: Any) -> None:
        self.path, self._dev, self._offset = path, staging, 0
        try:
            self._size = os.stat(path).st_size
            self._fh = kvikio.CuFile(path, "r")
        except Exception as exc:
            raise StorageError(f"cannot open {path}: {exc}") from None

    def readinto(self, buf: Any) -> int:
        """Fill ``buf`` unless the file ends first; the bytes read (0 at the end)."""
        try:
            if not isinstance(buf, memoryview | bytearray):
                return self._get(buf, min(buf.size, self._size - self._offset))
            buf, total = memoryview(buf), 0
            while total < len(buf) and (n := self._get(self._dev, min(len(buf) - total, self._dev.size,
                                                                       self._size - self._offset))):
                cupy.asnumpy(self._dev[:n], out=_host(buf[total:total + n]))
                total += n
            return total
        except Exception as exc:
            raise StorageError(f"read failed on {self.path}: {exc}") from None

    def read_at(self, buf: Any, offset: int) -> int:
        """Fill the device array ``buf`` from ``offset`` unless the file ends first (a restore's ranges)."""
        want = min(buf.size, self._size - offset)
        if want <= 0:
            return 0
        try:
            return self._fh.pread(buf[:want], want, offset).get()
        except Exception as exc:
            raise StorageError(f"read failed on {self.path}: {exc}") from None

    def _get(self, device_buf: Any, want: int) -> int:
        if want <= 0:
            return 0
        n = self._fh.pread(device_buf[:want], want, self._offset).get()
        self._offset += n
        return n

    def close(self) -> None:
        self._fh.close()


class CupyMemory:
    """This process's GPU, lent to the engine (see :class:`~dlio_ckpt.io.backends.base.DeviceMemory`)."""

    xp = cupy

    def __init__(self, device: int) -> None:
        self.device = device

    def scope(self) -> AbstractContextManager:
        return cupy.cuda.Device(self.device)


class GDSBackend(LocalFSBackend):
    """Paths, folders, eviction and manifests as local_fs; bulk data through cuFile."""

    name = "gds"
    capabilities = Capabilities(fsync=True, durable_on_close=False, odirect=True, alignment=4096,
                                evict_cache=True, device_buffers=True, rename=True)

    options: GDSOptions

    def __init__(self, root: str, options: GDSOptions, local_rank: int = 0) -> None:
        super().__init__(root, options)
        count = _device_count()
        if count == 0:
            raise ConfigError("workload.storage.storage_type", "gds", "needs a CUDA GPU; none found")
        self.device = self.options.device if self.options.device is not None else local_rank % count
        if self.device >= count:
            raise ConfigError("workload.storage.storage_options.device", self.device,
                              f"this host has {count} GPU(s): 0 to {count - 1}")
        cupy.cuda.Device(self.device).use()
        configure_kvikio(self.options.kvikio_threads, self.options.task_size, self.options.compat_mode)
        self._staging: dict[int, Any] = {}
        self._lock = threading.Lock()

    def device_memory(self) -> CupyMemory:
        return CupyMemory(self.device)

    def _buffer(self) -> Any:
        """One device buffer per thread for format metadata and host reads, made on first use."""
        ident = threading.get_ident()
        with self._lock:
            if ident not in self._staging:
                with cupy.cuda.Device(self.device):
                    self._staging[ident] = cupy.empty(16 * MIB, dtype=cupy.uint8)
            return self._staging[ident]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "device": self.device, "kvikio_version": kvikio.__version__,
                "kvikio_threads": self.options.kvikio_threads, "task_size": self.options.task_size,
                **transport(self.root)}

    def open_write(self, path: str, odirect: bool) -> GDSWriter:
        return GDSWriter(path, self._buffer())

    def open_read(self, path: str, odirect: bool) -> GDSReader:
        return GDSReader(path, self._buffer())

    def open_ranged(self, path: str, odirect: bool) -> GDSReader:
        return GDSReader(path, self._buffer())
