"""Storage backends: move byte streams, know nothing of models.

Each backend declares :class:`Capabilities`; the engine asks them, never the backend's type
(fio's ioengine flags). Backends are registered by name and imported lazily, so a missing optional
package only matters to the user who asks for that backend.
"""

from __future__ import annotations

import importlib

from ..errors import ConfigError
from .base import Backend, Capabilities, Reader, Writer

_REGISTRY: dict[str, tuple[str, str, str]] = {
    # storage_type: (module, class, pip extra that provides it)
    "local_fs": ("dlio_ckpt.backends.local_fs", "LocalFSBackend", ""),
}


def get_backend(storage_type: str, root: str, options: dict) -> Backend:
    try:
        module, cls, extra = _REGISTRY[storage_type]
    except KeyError:
        raise ConfigError("workload.storage.storage_type", storage_type,
                          f"unknown backend; choose one of {', '.join(sorted(_REGISTRY))}") from None
    try:
        backend_cls = getattr(importlib.import_module(module), cls)
    except ImportError as exc:
        raise ConfigError("workload.storage.storage_type", storage_type,
                          f"needs {exc.name}: pip install 'dlio_ckpt[{extra}]'") from None
    return backend_cls(root, options)


__all__ = ["Backend", "Capabilities", "Reader", "Writer", "get_backend"]
