"""Storage backends: move byte streams, know nothing of models.

Each backend declares :class:`Capabilities`; the engine asks them, never the backend's type
(fio's ioengine flags). Backends are registered by name and imported lazily, so a missing optional
package only matters to the user who asks for that backend.
"""

from __future__ import annotations

import importlib

from ..errors import ConfigError
from .base import Backend, Capabilities, Reader, Writer

_REGISTRY: dict[str, tuple[str, str, str, str]] = {
    # storage_type: (module, class, what to install, pip extra that provides it)
    "local_fs": ("dlio_ckpt.backends.local_fs", "LocalFSBackend", "", ""),
    "parallel_fs": ("dlio_ckpt.backends.local_fs", "LocalFSBackend", "", ""),  # DLIO's name for Lustre/GPFS
    "s3": ("dlio_ckpt.backends.s3", "S3Backend", "s3torchconnector", "s3"),
    "gcs": ("dlio_ckpt.backends.gcs", "GCSBackend", "gcsfs", "gcs"),
    "gds": ("dlio_ckpt.backends.gds", "GDSBackend", "kvikio and cupy (CUDA 12 builds)", "gds"),
    "null": ("dlio_ckpt.backends.null", "NullBackend", "", ""),
}
STORAGE_TYPES = tuple(_REGISTRY)


def get_backend(storage_type: str, root: str, options: dict) -> Backend:
    try:
        module, cls, needs, extra = _REGISTRY[storage_type]
    except KeyError:
        raise ConfigError("workload.storage.storage_type", storage_type,
                          f"unknown backend; choose one of {', '.join(sorted(_REGISTRY))}") from None
    try:
        backend_cls = getattr(importlib.import_module(module), cls)
    except ImportError as exc:
        raise ConfigError("workload.storage.storage_type", storage_type,
                          f"install {needs} to use storage_type={storage_type} "
                          f"(pip install 'dlio_ckpt[{extra}]'; missing module: {exc.name})") from None
    return backend_cls(root, options)


__all__ = ["STORAGE_TYPES", "Backend", "Capabilities", "Reader", "Writer", "get_backend"]
