"""The real modes (``++workload.mode=lightning|fsdp|gds``): the framework's own checkpoint path,
timed and reported in the same result files as the emulator.

Why a separate package, imported lazily: torch and Lightning take seconds to import and gigabytes
to install; the emulator must start without them. A mode whose packages are missing stops with the
``pip install`` that provides them.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import ConfigError

_MODULES: dict[str, tuple[str, str]] = {
    # mode: (module, what provides its imports)
    "lightning": ("dlio_ckpt.real.lightning_mode", "pip install 'dlio_ckpt[lightning]'"),
    "fsdp": ("dlio_ckpt.real.fsdp_mode", "pip install 'dlio_ckpt[fsdp]'"),
    "gds": ("dlio_ckpt.real.gds_mode", "pip install 'dlio_ckpt[gds-cu13]' (CUDA 13) or 'dlio_ckpt[gds-cu12]' (CUDA 12) "
            "on a machine with a CUDA GPU"),
}


def load_mode(mode: str) -> ModuleType:
    """The module of a real mode; its ``preflight(ctx)`` and ``run(ctx)`` do the work."""
    module, hint = _MODULES[mode]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError("workload.mode", mode, f"needs {exc.name}, which is not installed ({hint})") from None
