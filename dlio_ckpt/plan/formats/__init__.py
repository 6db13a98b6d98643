"""File formats: turn one planned file into a sequence of segments.

A segment is either ``bytes`` (format metadata: headers, a pickle, a zip directory) or an ``int``
(that many payload bytes, which the engine produces from the synthetic source). The engine never
knows which format it writes, and a format never touches storage (DCP's split of "what" and "where").
"""

from __future__ import annotations

import importlib
from typing import Protocol

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.plan.types import FilePlan, ItemFile, PlannedFile

Segment = bytes | int


class Format(Protocol):
    name: str
    extension: str

    def segments(self, file: PlannedFile) -> list[Segment]: ...


class RawFormat:
    """Payload bytes only: what the storage sees with no serialization overhead."""

    name = "raw"
    extension = ".bin"

    def segments(self, file: FilePlan) -> list[Segment]:
        return [file.payload_bytes]


_FORMATS = {  # name: (module, class, what to install)
    "pt": ("dlio_ckpt.plan.formats.pt", "PtFormat", ""),
    "safetensors": ("dlio_ckpt.plan.formats.safetensors", "SafetensorsFormat", ""),
    "hdf5": ("dlio_ckpt.plan.formats.hdf5", "HDF5Format", "h5py"),
}


def get_format(name: str) -> Format:
    if name == "raw":
        return RawFormat()
    if name not in _FORMATS:
        raise ConfigError("workload.checkpoint.format", name,
                          f"unknown format; choose one of raw, {', '.join(_FORMATS)}")
    module, cls, needs = _FORMATS[name]
    try:
        return getattr(importlib.import_module(module), cls)()
    except ImportError as exc:
        raise ConfigError("workload.checkpoint.format", name,
                          f"install {needs} to use format={name} (pip install 'dlio_ckpt[hdf5]'; "
                          f"missing module: {exc.name})") from None


def file_size(segments: list[Segment]) -> int:
    return sum(len(s) if isinstance(s, bytes) else s for s in segments)


def planned_size(fmt: Format, file: PlannedFile) -> int:
    """A planned file's bytes on storage: a file of items knows it (its layout sized it once for all the
    ranks that share it); a state-dict file is formatted to learn it."""
    return file.size if isinstance(file, ItemFile) else file_size(fmt.segments(file))
