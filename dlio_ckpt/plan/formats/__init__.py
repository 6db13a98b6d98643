"""File formats: turn one planned file into a sequence of segments.

A segment is either ``bytes`` (format metadata: headers, a pickle, a zip directory) or an ``int``
(that many payload bytes, which the engine produces from the synthetic source). The engine never
knows which format it writes, and a format never touches storage (DCP's split of "what" and "where").
"""

from __future__ import annotations

from typing import Protocol

from dlio_ckpt.plan.types import FilePlan, ItemFile, PlannedFile
from dlio_ckpt.registry import FORMATS

Segment = bytes | int

FLUSH = 0
Calls = tuple[int, ...]
"""A file's bytes as its framework hands them to a buffered file object, in order: each a ``write()`` of
that many bytes, :data:`FLUSH` a ``flush()`` (``torch.save`` into an open file flushes it when done)."""


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


def get_format(name: str) -> Format:
    """The format registered as ``name`` (:data:`dlio_ckpt.registry.FORMATS`), imported on first use."""
    return FORMATS.load(name)()


def file_size(segments: list[Segment]) -> int:
    return sum(len(s) if isinstance(s, bytes) else s for s in segments)


def planned_size(fmt: Format, file: PlannedFile) -> int:
    """A planned file's bytes on storage: a file of items knows it (its layout sized it once for all the
    ranks that share it); a state-dict file is formatted to learn it."""
    return file.size if isinstance(file, ItemFile) else file_size(fmt.segments(file))
