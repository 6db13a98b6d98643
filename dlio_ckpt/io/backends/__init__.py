"""Storage backends: move byte streams, know nothing of models.

Each backend declares :class:`Capabilities`; the engine asks them, never the backend's type
(fio's ioengine flags). Backends are registered by name in :data:`dlio_ckpt.registry.BACKENDS`, with
the facts about their storage, and imported lazily, so a missing optional package only matters to the
user who asks for that backend; another package adds one through the entry-point group
``dlio_ckpt.backends``.
"""

from __future__ import annotations

from collections.abc import Callable

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.io.backends.base import (
    Backend,
    Capabilities,
    DeviceMemory,
    Options,
    PositionalReader,
    PositionalWriter,
    RangedReader,
    Reader,
    Source,
    SyncingWriter,
    VectorWriter,
    ViewsReader,
    Writer,
    parse_options,
)
from dlio_ckpt.registry import BACKENDS


def options_model(storage_type: str) -> type[Options]:
    """The backend's ``storage_options`` model, imported without its client."""
    model = BACKENDS.load(storage_type, BACKENDS[storage_type].options)
    if not (isinstance(model, type) and issubclass(model, Options)):
        raise ConfigError(BACKENDS.key, storage_type, f"{BACKENDS[storage_type].options} must be a subclass of "
                          "dlio_ckpt.io.backends.base.Options")
    return model


def check_options(storage_type: str, options: dict) -> Options:
    """``storage_options`` validated by the backend's own model, without importing its client or
    connecting (``plan`` and the config checks)."""
    return parse_options(options_model(storage_type), storage_type, options)


def get_backend(storage_type: str, root: str, options: dict, local_rank: int = 0) -> Backend:
    """``local_rank``: this process's index on its host, which picks its GPU where the backend
    moves device buffers."""
    parsed = check_options(storage_type, options)
    backend_cls = BACKENDS.load(storage_type)
    if not (isinstance(backend_cls, type) and issubclass(backend_cls, Backend)):
        raise ConfigError(BACKENDS.key, storage_type, f"{BACKENDS[storage_type].target} must be a subclass of "
                          "dlio_ckpt.io.backends.base.Backend")
    # every backend is made as (root, options), and one that moves device buffers also takes local_rank=;
    # Backend itself declares no constructor (each takes its own options' model)
    make: Callable[..., Backend] = backend_cls
    if backend_cls.capabilities.device_buffers:
        return make(root, parsed, local_rank=local_rank)
    return make(root, parsed)


__all__ = ["Backend", "Capabilities", "DeviceMemory", "Options", "PositionalReader", "PositionalWriter", "RangedReader",
           "Reader", "Source", "SyncingWriter", "VectorWriter", "ViewsReader", "Writer", "check_options", "get_backend",
           "options_model"]
