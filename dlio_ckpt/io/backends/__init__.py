"""Storage backends: move byte streams, know nothing of models.

Each backend declares :class:`Capabilities`; the engine asks them, never the backend's type
(fio's ioengine flags). Backends are registered by name and imported lazily, so a missing optional
package only matters to the user who asks for that backend.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.io.backends.base import Backend, Capabilities, DeviceMemory, Options, Reader, Writer, parse_options
from dlio_ckpt.io.backends.options import MIB, GCSOptions, GDSOptions, LocalFSOptions, S3Options


@dataclass(frozen=True)
class Entry:
    """One backend: where its class lives (imported on use), its options model (checked without the
    client, for ``plan``), what to install for it, and two facts the configuration's rules need."""

    module: str
    cls: str
    options: type[Options]
    needs: str = ""  # what to install
    install: str = ""  # the pip command that provides it
    local_folder: bool = False  # storage_root is a folder of this host's (compared as an absolute path)
    tier: bool = True  # a drain can read its files back and verify them on the host
    tuning: tuple[tuple[str, tuple], ...] = ()  # what ``tune`` tries: workload keys and their values


_FILE_SYSTEM_TUNING = (("checkpoint.odirect", (False, True)),
                       ("checkpoint.chunk_size", (1 * MIB, 4 * MIB, 8 * MIB, 32 * MIB)),
                       ("storage.storage_options.queue_depth", (1, 4, 16)))


REGISTRY: dict[str, Entry] = {  # the only list of storage types: the config's choices derive from it
    "local_fs": Entry("dlio_ckpt.io.backends.local_fs", "LocalFSBackend", LocalFSOptions, local_folder=True,
                      tuning=_FILE_SYSTEM_TUNING),
    "parallel_fs": Entry("dlio_ckpt.io.backends.local_fs", "LocalFSBackend", LocalFSOptions,  # DLIO's Lustre/GPFS
                         local_folder=True, tuning=_FILE_SYSTEM_TUNING),
    "s3": Entry("dlio_ckpt.io.backends.s3", "S3Backend", S3Options, "s3torchconnector", "pip install 'dlio_ckpt[s3]'",
                tuning=(("storage.storage_options.part_size", (8 * MIB, 16 * MIB, 32 * MIB)),
                        ("storage.storage_options.threads", (1, 2, 4)))),
    "gcs": Entry("dlio_ckpt.io.backends.gcs", "GCSBackend", GCSOptions, "gcsfs", "pip install 'dlio_ckpt[gcs]'",
                 tuning=(("storage.storage_options.block_size", (8 * MIB, 16 * MIB, 32 * MIB)),
                         ("storage.storage_options.threads", (1, 2, 4)))),
    "gds": Entry("dlio_ckpt.io.backends.gds", "GDSBackend", GDSOptions, "kvikio and cupy built for your CUDA",
                 "pip install 'dlio_ckpt[gds-cu13]' for CUDA 13, 'dlio_ckpt[gds-cu12]' for CUDA 12",
                 local_folder=True, tier=False),
    "null": Entry("dlio_ckpt.io.backends.null", "NullBackend", Options, tier=False),
}
NAMES = tuple(REGISTRY)


def check_options(storage_type: str, options: dict) -> Options:
    """``storage_options`` validated by the backend's own model, without importing its client or
    connecting (``plan`` and the config checks)."""
    return parse_options(REGISTRY[storage_type].options, storage_type, options)


def get_backend(storage_type: str, root: str, options: dict, local_rank: int = 0) -> Backend:
    """``local_rank``: this process's index on its host, which picks its GPU where the backend
    moves device buffers."""
    try:
        entry = REGISTRY[storage_type]
    except KeyError:
        raise ConfigError("workload.storage.storage_type", storage_type,
                          f"unknown backend; choose one of {', '.join(sorted(REGISTRY))}") from None
    parsed = check_options(storage_type, options)
    try:
        backend_cls = getattr(importlib.import_module(entry.module), entry.cls)
    except ImportError as exc:
        raise ConfigError("workload.storage.storage_type", storage_type,
                          f"install {entry.needs} to use storage_type={storage_type} "
                          f"({entry.install}; missing module: {exc.name})") from None
    if backend_cls.capabilities.device_buffers:
        return backend_cls(root, parsed, local_rank=local_rank)
    return backend_cls(root, parsed)


__all__ = ["NAMES", "REGISTRY", "Backend", "Capabilities", "DeviceMemory", "Reader", "Writer", "check_options",
           "get_backend"]
