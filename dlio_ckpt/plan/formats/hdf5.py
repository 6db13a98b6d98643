"""HDF5 through h5py, streamed: one contiguous dataset per tensor, groups for nested dicts.

Why this way: h5py writes a file itself, which would mean holding the data or writing it twice.
Instead h5py builds the file's *metadata* against a recording file object: every dataset is
contiguous, allocated early and never filled, so the library writes only its headers, and each
dataset's offset in the file is known. The file is then those metadata bytes with the datasets'
payload streamed between them: the same bytes h5py would have produced, through any backend.

bf16 has no HDF5 type that numpy reads, so such tensors are stored as uint16 with a ``dtype``
attribute saying "bf16" (the bit patterns are bf16's).
"""

from __future__ import annotations

import io
from functools import lru_cache

import h5py
import numpy as np

from dlio_ckpt.model.dtypes import DTYPES
from dlio_ckpt.plan.formats import Segment
from dlio_ckpt.plan.types import FilePlan, TensorGroup


class _Recorder(io.RawIOBase):
    """A file object that keeps what is written to it (HDF5 metadata: kilobytes) and reads back
    zeros elsewhere, as a sparse file would."""

    def __init__(self) -> None:
        self.pos, self.size = 0, 0
        self.writes: list[tuple[int, bytes]] = []

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = (offset, self.pos + offset, self.size + offset)[whence]
        return self.pos

    def tell(self) -> int:
        return self.pos

    def write(self, data) -> int:  # noqa: ANN001 (any buffer)
        data = bytes(data)
        self.writes.append((self.pos, data))
        self.pos += len(data)
        self.size = max(self.size, self.pos)
        return len(data)

    def readinto(self, buf) -> int:  # noqa: ANN001
        n = max(0, min(len(buf), self.size - self.pos))
        view = memoryview(buf)
        view[:n] = bytes(n)
        for off, data in self.writes:
            lo, hi = max(off, self.pos), min(off + len(data), self.pos + n)
            if lo < hi:
                view[lo - self.pos:hi - self.pos] = data[lo - off:hi - off]
        self.pos += n
        return n

    def truncate(self, size: int | None = None) -> int:
        self.size = self.pos if size is None else size
        return self.size

    def region(self, start: int, end: int) -> bytes:
        out = bytearray(end - start)
        for off, data in self.writes:  # in order: later writes win, as in a file
            lo, hi = max(off, start), min(off + len(data), end)
            if lo < hi:
                out[lo - start:hi - start] = data[lo - off:hi - off]
        return bytes(out)


def _no_times(plist_class):  # noqa: ANN001, ANN202
    plist = h5py.h5p.create(plist_class)
    plist.set_obj_track_times(False)  # identical bytes on every rank and every run
    return plist


@lru_cache(maxsize=256)
def _layout(dtype: str, groups: tuple[TensorGroup, ...]) -> tuple[Segment, ...]:
    rec = _Recorder()
    extents: list[tuple[int, int]] = []
    fcpl = _no_times(h5py.h5p.FILE_CREATE)  # the root group's header
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_V18, h5py.h5f.LIBVER_LATEST)
    fapl.set_fileobj_driver(h5py.h5fd.fileobj_driver, rec)
    fapl.set_fclose_degree(h5py.h5f.CLOSE_STRONG)  # close() writes the superblock now, not at GC
    fid = h5py.h5f.create(b"in-memory", h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)
    try:
        root = h5py.h5g.open(fid, b"/")
        for group in groups:
            parent = root if group.key is None else h5py.h5g.create(
                root, group.key.encode(), gcpl=_no_times(h5py.h5p.GROUP_CREATE))
            for i, numel in enumerate(group.numels):
                dcpl = _no_times(h5py.h5p.DATASET_CREATE)
                dcpl.set_layout(h5py.h5d.CONTIGUOUS)
                dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
                dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
                h5type = getattr(h5py.h5t, DTYPES[dtype].hdf5)
                ds = h5py.h5d.create(parent, str(i).encode(), h5type, h5py.h5s.create_simple((numel,)), dcpl=dcpl)
                if dtype == "bf16":
                    h5py.AttributeManager(h5py.Dataset(ds))["dtype"] = np.bytes_(b"bf16")  # fixed length
                extents.append((ds.get_offset(), ds.get_storage_size()))
    finally:
        fid.close()
    extents.sort()
    out: list[Segment] = []
    pos = 0
    for offset, size in extents:
        if any(off < offset + size and off + len(d) > offset for off, d in rec.writes):
            raise RuntimeError("h5py wrote inside a dataset's extent; cannot stream this layout")
        if offset > pos:
            out.append(rec.region(pos, offset))
        out.append(size)
        pos = offset + size
    if rec.size > pos:
        out.append(rec.region(pos, rec.size))
    return tuple(out)


class HDF5Format:
    name = "hdf5"
    extension = ".h5"

    def segments(self, file: FilePlan) -> list[Segment]:
        return list(_layout(file.dtype, file.groups))
