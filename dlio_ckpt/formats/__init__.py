"""File formats: turn one planned file into a sequence of segments.

A segment is either ``bytes`` (format metadata: headers, a pickle, a zip directory) or an ``int``
(that many payload bytes, which the engine produces from the synthetic source). The engine never
knows which format it writes, and a format never touches storage (DCP's split of "what" and "where").
"""

from __future__ import annotations

from typing import Protocol

from ..errors import ConfigError
from ..planner import FilePlan

Segment = bytes | int


class Format(Protocol):
    name: str
    extension: str

    def segments(self, file: FilePlan) -> list[Segment]: ...


class RawFormat:
    """Payload bytes only: what the storage sees with no serialization overhead."""

    name = "raw"
    extension = ".bin"

    def segments(self, file: FilePlan) -> list[Segment]:
        return [file.payload_bytes]


def get_format(name: str) -> Format:
    if name == "raw":
        return RawFormat()
    if name == "pt":
        from .pt import PtFormat

        return PtFormat()
    raise ConfigError("workload.checkpoint.format", name, "unknown format; choose pt or raw")


def file_size(segments: list[Segment]) -> int:
    return sum(len(s) if isinstance(s, bytes) else s for s in segments)
