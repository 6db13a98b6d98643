"""Sizes and rates as people write them: ``32MiB``, ``1.5GB``, ``20GB/s``, or plain bytes.

Why pydantic's :class:`~pydantic.ByteSize` rather than a parser of our own: it already knows decimal
(kB, MB, GB) and binary (KiB, MiB, GiB) units, both spellings of each, and bare numbers, and it is what
validates the workload's keys, so a size means the same in YAML, in an override and on the command line.
A rate is a size followed by ``/s``. This module imports nothing of the package.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ByteSize, PlainSerializer, TypeAdapter, ValidationError

# A workload key holding a size: written with or without a unit, stored and serialized as whole bytes
# (summary.json and the run record keep integers, as before units were accepted).
Bytes = Annotated[ByteSize, PlainSerializer(int, return_type=int)]

_SIZE = TypeAdapter(ByteSize)
RATE_RULE = "must be a positive rate such as 20GB/s, 500MiB/s or 1.5TB/s"


def parse_size(text: str | int) -> int:
    """Bytes from ``32MiB``, ``1.5GB`` or ``4096``; ``ValueError`` naming what it read otherwise."""
    try:
        return int(_SIZE.validate_python(text))
    except ValidationError:
        raise ValueError(f"not a size: {text!r}") from None


def parse_rate(text: str) -> float:
    """Bytes per second from ``20GB/s`` (the ``/s`` is required: a rate without it is a size, a mistake
    worth naming); ``ValueError`` when it is not a positive rate."""
    size, slash, per = text.strip().rpartition("/")
    if not slash or per.strip().lower() != "s":
        raise ValueError(f"not a rate: {text!r}")
    try:
        value = float(_SIZE.validate_python(size.strip()))
    except ValidationError:
        raise ValueError(f"not a rate: {text!r}") from None
    if value <= 0:
        raise ValueError(f"not a positive rate: {text!r}")
    return value
