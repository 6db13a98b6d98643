"""Storage backends: move byte streams, know nothing of models.

Each backend declares :class:`Capabilities`; the engine asks them, never the backend's type
(fio's ioengine flags). Backends are registered by name and imported lazily, so a missing optional
package only matters to the user who asks for that backend.
"""

from __future__ import annotations

import importlib

from ..errors import ConfigError
from .base import Backend, Capabilities, DeviceMemory, Reader, Writer, parse_options
from .options import OPTIONS

_REGISTRY: dict[str, tuple[str, str, str, str]] = {
    # storage_type: (module, class, what to install, the pip command that provides it)
    "local_fs": ("dlio_ckpt.backends.local_fs", "LocalFSBackend", "", ""),
    "parallel_fs": ("dlio_ckpt.backends.local_fs", "LocalFSBackend", "", ""),  # DLIO's name for Lustre/GPFS
    "s3": ("dlio_ckpt.backends.s3", "S3Backend", "s3torchconnector", "pip install 'dlio_ckpt[s3]'"),
    "gcs": ("dlio_ckpt.backends.gcs", "GCSBackend", "gcsfs", "pip install 'dlio_ckpt[gcs]'"),
    "gds": ("dlio_ckpt.backends.gds", "GDSBackend", "kvikio and cupy built for your CUDA",
            "pip install 'dlio_ckpt[gds-cu13]' for CUDA 13, 'dlio_ckpt[gds-cu12]' for CUDA 12"),
    "null": ("dlio_ckpt.backends.null", "NullBackend", "", ""),
}


def check_options(storage_type: str, options: dict) -> None:
    """Validate ``storage_options`` without importing the backend's client or connecting (``plan``)."""
    parse_options(OPTIONS[storage_type], storage_type, options)


def get_backend(storage_type: str, root: str, options: dict, local_rank: int = 0) -> Backend:
    """``local_rank``: this process's index on its host, which picks its GPU where the backend
    moves device buffers."""
    try:
        module, cls, needs, install = _REGISTRY[storage_type]
    except KeyError:
        raise ConfigError("workload.storage.storage_type", storage_type,
                          f"unknown backend; choose one of {', '.join(sorted(_REGISTRY))}") from None
    try:
        backend_cls = getattr(importlib.import_module(module), cls)
    except ImportError as exc:
        raise ConfigError("workload.storage.storage_type", storage_type,
                          f"install {needs} to use storage_type={storage_type} "
                          f"({install}; missing module: {exc.name})") from None
    if backend_cls.capabilities.device_buffers:
        return backend_cls(root, options, local_rank=local_rank)
    return backend_cls(root, options)


__all__ = ["Backend", "Capabilities", "DeviceMemory", "Reader", "Writer", "check_options",
           "get_backend"]
