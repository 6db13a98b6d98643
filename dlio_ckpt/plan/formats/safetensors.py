"""The safetensors format, streamed: an 8-byte header length, a JSON header, then the tensors.

The header lists every tensor's dtype, shape and byte range; the data that follows is the tensors
back to back in that order, with nothing between them (``safe_open`` checks that the ranges tile
the buffer exactly). Nested keys are flattened with dots (``optimizer.state.0``), as
``safetensors.torch.save_file`` users do for state dicts.
"""

from __future__ import annotations

import json
import struct

from dlio_ckpt.model.dtypes import DTYPES
from dlio_ckpt.plan.formats import Segment
from dlio_ckpt.plan.types import FilePlan


def tensor_names(file: FilePlan) -> list[str]:
    """One name per tensor, in file order: "<group>.<i>", or "<i>" for a flat file."""
    return [f"{g.key}.{i}" if g.key is not None else str(i) for g in file.groups for i in range(len(g.numels))]


class SafetensorsFormat:
    name = "safetensors"
    extension = ".safetensors"

    def segments(self, file: FilePlan) -> list[Segment]:
        header: dict[str, object] = {"__metadata__": {"format": "pt", "writer": "dlio_ckpt", "kind": file.kind}}
        offset = 0
        numels = [n for g in file.groups for n in g.numels]
        for name, numel in zip(tensor_names(file), numels, strict=True):
            nbytes = numel * file.itemsize
            header[name] = {"dtype": DTYPES[file.dtype].safetensors, "shape": [numel],
                            "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-(8 + len(text)) % 8)  # the data starts 8-byte aligned, as the writer's
        return [struct.pack("<Q", len(text)) + text, offset]  # the tensors, one run of payload
