"""The PyTorch checkpoint format (``torch.save``'s zip), streamed without torch and without RAM.

Why by hand: DLIO builds every tensor and calls ``torch.save``, which is why it needs the whole state
in memory. A torch file is a zip of stored (uncompressed) entries: ``data.pkl`` (the nested dict,
whose tensors point at storages by key), one ``data/<key>`` entry per tensor, and a few small
records. Every size is known from the plan, so all headers are computed up front and the payload
flows straight from the synthetic source. Each storage starts 64-byte aligned with torch's own "FB"
padding field, so the bytes beyond the payload stay near torch.save's (the engine writes them over
the synthetic window of their chunk for the write, so O_DIRECT needs no staging copy).

CRC-32 fields are written as 0: computing them would cost a pass over every byte, and PyTorch's zip
reader is built with MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS, so ``torch.load`` does not read them.
Generic zip tools (``unzip -t``) will report CRC mismatches.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import cache
from hashlib import blake2b
from math import prod
from typing import Any

from dlio_ckpt.model.dtypes import DTYPES
from dlio_ckpt.plan.formats import Calls, Segment
from dlio_ckpt.plan.types import FilePlan, Item, PlannedFile

ALIGN = 64  # torch.save's own storage alignment: overhead stays ~100-200 bytes per tensor
_U32 = 0xFFFFFFFF


# -- pickle (protocol 2, as torch.save's pickler writes it) ------------------------------------------

def pickled_int(n: int) -> bytes:
    """An int as Python's pickler writes it (``_pickle.c``'s ``save_long``, any protocol from 2): the shortest of
    BININT1, BININT2 and BININT (signed 32 bits), else LONG1. DCP's ``.metadata`` prices its ints by it too."""
    if 0 <= n < 256:
        return b"K" + bytes([n])
    if 0 <= n < 65536:
        return b"M" + struct.pack("<H", n)
    if -(1 << 31) <= n < 1 << 31:
        return b"J" + struct.pack("<i", n)
    raw = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def _str(s: str) -> bytes:
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def pickle_state(file: FilePlan) -> bytes:
    """data.pkl of ``torch.save`` of the file's (possibly nested) dict of 1-D tensors, storages keyed 0, 1,
    2, ..., byte for byte as torch.save's pickler writes it (held to DLIO's own files in
    tests/against_frameworks/test_references.py and to torch.save in tests/unit/test_pt_format.py)."""
    p, key = Pickler(), iter(range(sum(len(g.numels) for g in file.groups)))

    def group(numels: tuple[int, ...]) -> None:
        p.dict([(str(i), n) for i, n in enumerate(numels)], lambda n: p.tensor(file.dtype, str(next(key)), (n,)))

    if file.groups[0].key is not None:
        p.dict([(g.key or "", g.numels) for g in file.groups], group)
    else:
        group(file.groups[0].numels)
    return p.done()


class OrderedItems(list[tuple[str, Any]]):
    """An ``OrderedDict``'s items (a module's state_dict), which :meth:`Pickler.value` pickles as one."""


class Pickler:
    """Python's C pickler at protocol 2, as ``torch.save`` runs it, for the objects a checkpoint holds: the one
    writer of the package's ``torch.save`` pickles (DLIO's and DeepSpeed's state dicts, a tensor's archive,
    Lightning's checkpoint; DCP's and megatron-core's small objects are ``pickle.dumps``' own, protocol 4):
    every dict, string, tuple and reduced object memoized as it first appears; what is the same object each
    time (``torch._utils._rebuild_tensor_v2``, the storage class, ``OrderedDict``, the strings "storage" and
    "cpu", a value's strings in :meth:`value`) fetched from the memo after; a list's and a dict's items batched as
    ``batch_list`` and ``batch_dict_exact`` batch them."""

    def __init__(self) -> None:
        self.m, self.out = _Memo(), [b"\x80\x02"]
        self.seen: dict[tuple[str, ...], int] = {}  # a shared object's memo index
        # the tensors :meth:`value` pickled, whose storages it keys "0", "1", ... in order of appearance: a pickle is
        # made by :meth:`value` or by :meth:`tensor` with keys of the caller's, not both (the keys would repeat)
        self.storages = 0

    def once(self, key: tuple[str, ...], first: bytes) -> None:
        """A shared object: pickled and memoized the first time, fetched from the memo after."""
        if key in self.seen:
            self.out.append(_get(self.seen[key]))
        else:
            self.seen[key] = self.m.n
            self.out.append(first + self.m.put())

    def tensor(self, dtype: str, storage_key: str, shape: tuple[int, ...]) -> None:
        """A contiguous CPU tensor: ``_rebuild_tensor_v2(storage, 0, shape, strides, False, OrderedDict())``."""
        m, numel = self.m, prod(shape)
        strides = tuple(prod(shape[i + 1:]) for i in range(len(shape)))
        self.once(("torch._utils", "_rebuild_tensor_v2"), _global("torch._utils", "_rebuild_tensor_v2"))
        self.out.append(b"((")
        self.once(("storage",), _str("storage"))
        storage = DTYPES[dtype].storage
        self.once(("torch", storage), _global("torch", storage))
        self.out.append(m.str(storage_key))
        self.once(("cpu",), _str("cpu"))
        self.out.append(pickled_int(numel) + b"t" + m.put() + b"Q" + pickled_int(0))
        self._tuple(shape)
        self._tuple(strides)
        self.out.append(b"\x89")
        self.once(("collections", "OrderedDict"), _global("collections", "OrderedDict"))
        self.out.append(b")R" + m.put() + b"t" + m.put() + b"R" + m.put())

    def dict(self, entries: list[tuple[str, Any]], value: Callable[[Any], None]) -> None:
        """A dict of string keys, each a string of its own (memoized, never fetched), each value by ``value``."""
        self.out.append(b"}" + self.m.put())

        def item(entry: tuple[str, Any]) -> None:
            self.out.append(self.m.str(entry[0]))
            value(entry[1])

        self._batches(entries, item, b"s", b"u", lone=len(entries) == 1, after_full=True)

    def value(self, v: Any) -> None:
        """A plain value: a tensor (an :class:`~dlio_ckpt.plan.types.Item`, its storage keyed by the tensors
        before it), None, a bool, int, float or string (a string fetched from the memo when seen before), a tuple,
        list or dict of values, or an ``OrderedDict``'s items (:class:`OrderedItems`)."""
        out = self.out
        if isinstance(v, Item):
            self.tensor(v.dtype, str(self.storages), v.shape)
            self.storages += 1
        elif v is None:
            out.append(b"N")
        elif isinstance(v, bool):
            out.append(b"\x88" if v else b"\x89")
        elif isinstance(v, int):
            out.append(pickled_int(v))
        elif isinstance(v, float):
            out.append(b"G" + struct.pack(">d", v))
        elif isinstance(v, str):
            self.once(("str", v), _str(v))
        elif isinstance(v, tuple):
            self._tuple(v)
        elif isinstance(v, OrderedItems):  # reduced: OrderedDict(), then its items as an iterator's (batch_dict)
            self.once(("collections", "OrderedDict"), _global("collections", "OrderedDict"))
            out.append(b")R" + self.m.put())
            self._batches(v, self._pair, b"s", b"u", lone=True, after_full=False)
        elif isinstance(v, list):
            out.append(b"]" + self.m.put())
            self._batches(v, self.value, b"a", b"e", lone=len(v) == 1, after_full=False)
        elif isinstance(v, dict):
            out.append(b"}" + self.m.put())
            self._batches(list(v.items()), self._pair, b"s", b"u", lone=len(v) == 1, after_full=bool(v))
        else:
            raise TypeError(f"no pickle for {type(v).__name__}")

    def _pair(self, kv: tuple[Any, Any]) -> None:
        self.value(kv[0])
        self.value(kv[1])

    def _tuple(self, v: tuple[Any, ...]) -> None:
        """EMPTY_TUPLE; TUPLE1, 2 or 3 after its items; else MARK, its items, TUPLE (each memoized)."""
        if not v:
            self.out.append(b")")
            return
        if len(v) > 3:
            self.out.append(b"(")
        for x in v:
            self.value(x)
        self.out.append((b"\x85\x86\x87"[len(v) - 1:len(v)] if len(v) <= 3 else b"t") + self.m.put())

    def _batches(self, entries: list[Any], write: Callable[[Any], None], one: bytes, many: bytes, lone: bool,
                 after_full: bool) -> None:
        """A list's items or a dict's (key, value) pairs as CPython's pickler adds them (``_pickle.c``): in
        batches of 1000 entries, MARK ... APPENDS or SETITEMS (``many``), each entry by ``write``. ``lone``: a
        batch of one entry goes by APPEND or SETITEM alone (``one``: a list or dict of one; any reduced object's
        items); ``after_full``: a full last batch is followed by an empty one (an exact dict's
        ``batch_dict_exact``)."""
        starts = list(range(0, len(entries), 1000))
        if after_full and entries and len(entries) % 1000 == 0:
            starts.append(len(entries))
        for start in starts:
            batch = entries[start:start + 1000]
            single = lone and len(batch) == 1
            if not single:
                self.out.append(b"(")
            for entry in batch:
                write(entry)
            self.out.append(one if single else many)

    def done(self) -> bytes:
        return b"".join([*self.out, b"."])


def _get(index: int) -> bytes:
    """BINGET / LONG_BINGET: a memoized object again."""
    return b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index)


class _Memo:
    """The pickler's memo: each object memoized gets the next index (BINPUT); a string written here is memoized."""

    def __init__(self) -> None:
        self.n = 0

    def put(self) -> bytes:
        self.n += 1
        n = self.n - 1
        return b"q" + bytes([n]) if n < 256 else b"r" + struct.pack("<I", n)

    def str(self, s: str) -> bytes:
        return _str(s) + self.put()


def tensor_pickle(dtype: str, shape: tuple[int, ...]) -> bytes:
    """``data.pkl`` of ``torch.save(tensor)`` for a contiguous CPU tensor of ``shape``: storage "0"."""
    p = Pickler()
    p.tensor(dtype, "0", shape)
    return p.done()


# -- zip -------------------------------------------------------------------------------------

class _Zip:
    """Lays out stored entries at known offsets as PyTorch's writer (miniz) does: local headers with
    zero sizes and flag 0x0808, each entry's data padded to 64 bytes by an "FB" extra field and
    followed by a data descriptor (none after an empty one), then the central directory and, always,
    the zip64 end records. The size of a ``torch.save`` file is then the real one to the byte.

    Each method returns the pieces in the calls miniz makes on the file: per entry its 30-byte header,
    its name, its extra field, then (the caller's) its data and its 16-byte descriptor; at the end the
    directory, the zip64 end record, its locator and the end record."""

    def __init__(self) -> None:
        self.offset = 0
        self.entries: list[tuple[bytes, int, int]] = []  # name, size, local header offset
        self.descriptor = b""  # the previous entry's, written after its data

    def header(self, name: str, size: int, align: int) -> list[bytes]:
        n, lead = name.encode(), self.descriptor
        start = self.offset + len(lead)
        big = size >= _U32 or start >= _U32
        z64 = struct.pack("<HHQQ", 1, 16, 0, 0) if big else b""
        pad = (-(start + 30 + len(n) + len(z64) + 4)) % align
        extra = z64 + struct.pack("<HH", 0x4246, pad) + b"Z" * pad
        head = struct.pack("<IHHHHHIIIHH", 0x04034B50, 45 if big else 0, 0x0808, 0, 0, 0, 0, 0, 0,
                           len(n), len(extra))
        # miniz writes no descriptor after an empty entry
        self.descriptor = struct.pack("<IIQQ" if big else "<IIII", 0x08074B50, 0, size, size) if size else b""
        self.entries.append((n, size, start))
        self.offset = start + len(head) + len(n) + len(extra) + size
        return [lead, head, n, extra]

    def directory(self) -> list[bytes]:
        lead, self.descriptor = self.descriptor, b""
        cd_start, parts = self.offset + len(lead), []
        for name, size, off in self.entries:
            big_size, big_off = size >= _U32, off >= _U32
            z64 = (struct.pack("<QQ", size, size) if big_size else b"") + (struct.pack("<Q", off) if big_off else b"")
            extra = struct.pack("<HH", 1, len(z64)) + z64 if z64 else b""
            ver = 45 if z64 else 0
            parts.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, ver, ver, 0x0808, 0, 0, 0, 0,
                                     _U32 if big_size else size, _U32 if big_size else size, len(name),
                                     len(extra), 0, 0, 0, 0, _U32 if big_off else off) + name + extra)
        cd = b"".join(parts)
        count, end = len(self.entries), cd_start + len(cd)
        record = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 45, 0, 0, count, count, len(cd), cd_start)
        locator = struct.pack("<IIQI", 0x07064B50, 0, end, 1)
        eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, min(count, 0xFFFF), min(count, 0xFFFF),
                           min(len(cd), _U32), min(cd_start, _U32), 0)
        self.offset = end + len(record) + len(locator) + len(eocd)
        return [lead, cd, record, locator, eocd]


def archive_calls(pickled: bytes, storages: list[int], serialization_id: bytes, name: str = "archive",
                  ) -> list[Segment]:
    """One ``torch.save`` zip as the calls its writer makes on the file object it saves into, in order:
    ``bytes`` for the format's, an ``int`` for a storage's payload (the engine's synthetic bytes).
    ``torch.save`` into an open file makes these and then flushes it (``torch/serialization.py``,
    ``_open_zipfile_writer_buffer``, torch 2.13.0). Its records are named under ``name``: ``archive`` for a
    file object; for a path, the file's name up to its last dot (``caffe2/serialize/inline_container.cc``,
    ``basename``)."""
    z, calls = _Zip(), list[Segment]()
    prefix = name + "/"

    def small(name: str, data: bytes) -> None:
        calls.extend(z.header(prefix + name, len(data), 64) + [data])

    small("data.pkl", pickled)
    small(".format_version", b"1")
    small(".storage_alignment", b"64")
    small("byteorder", b"little")
    for key, nbytes in enumerate(storages):
        calls.extend(z.header(f"{prefix}data/{key}", nbytes, ALIGN))
        calls.append(nbytes)
    small("version", b"3\n")
    small(".data/serialization_id", serialization_id)
    calls.extend(z.directory())
    return [c for c in calls if c]  # miniz writes nothing of an empty piece


def archive(pickled: bytes, storages: list[int], serialization_id: bytes, name: str = "archive") -> list[Segment]:
    """The segments of one ``torch.save`` zip: ``data.pkl``, the small records, one stored entry of
    payload per storage (the engine's synthetic bytes), the trailing records and the directory (its
    calls, :func:`archive_calls`, with the format's bytes between payloads joined)."""
    out: list[Segment] = []
    for call in archive_calls(pickled, storages, serialization_id, name):
        if isinstance(call, bytes) and out and isinstance(out[-1], bytes):
            out[-1] += call
        else:
            out.append(call)
    return out


# the records torch.load reads first, in its order (``torch/serialization.py``, ``_load``, torch 2.13.0);
# then each storage it unpickles (``data/<key>``), none of an empty one
_LOAD_ORDER = (".data/serialization_id", "version", ".format_version", "byteorder", ".storage_alignment", "data.pkl")


def archive_records(length: int, fmt: Callable[[int, int], bytes]) -> tuple[int, dict[str, tuple[int, int]]]:
    """A ``torch.save`` archive's central directory read as miniz reads it: where it starts, and each record's
    local header offset and size by name (``data.pkl``, ``data/0``...). ``fmt(lo, hi)``: the archive's bytes
    there (its headers and directory are the format's, known from the plan)."""
    cd_size, cd_start = struct.unpack_from("<QQ", fmt(length - 98, length - 42), 40)
    cd, pos, entries = fmt(cd_start, cd_start + cd_size), 0, {}
    while pos < len(cd):
        size, nlen, xlen, clen = struct.unpack_from("<IHHH", cd, pos + 24)
        (offset,) = struct.unpack_from("<I", cd, pos + 42)
        name = cd[pos + 46:pos + 46 + nlen].decode()
        extra = cd[pos + 46 + nlen:pos + 46 + nlen + xlen]
        big = list(struct.unpack_from(f"<{(len(extra) - 4) // 8}Q", extra, 4)) if extra else []
        if size == _U32:
            size = big.pop(0)
            big.pop(0)  # the compressed size, the same when stored
        if offset == _U32:
            offset = big.pop(0)
        entries[name.split("/", 1)[1]] = (offset, size)
        pos += 46 + nlen + xlen + clen
    return cd_start, entries


def load_reads(length: int, fmt: Callable[[int, int], bytes]) -> list[tuple[int, int]]:
    """The reads ``torch.load`` makes on a file object holding one ``torch.save`` archive of ``length`` bytes,
    as (offset, bytes) from the archive's start, in order (torch 2.13.0 and its miniz, seen through a logging
    file object and held to it in tests/unit/test_pt_format.py): the magic, a seek to the end to learn the size
    (``(length, 0)``: no bytes, but a buffered file drops its buffer), the first 8 bytes, the last 4 KiB
    (or all of a smaller archive), the end records, the central directory; then per record it loads (the
    small ones, ``data.pkl``, each storage it unpickles but an empty one) its 30-byte local header and its data."""
    tail = min(4096, length)
    cd_start, entries = archive_records(length, fmt)
    reads = [(0, 4), (length, 0), (0, 8), (length - tail, tail), (length - 22, 22), (length - 42, 20),
             (length - 98, 56), (cd_start, length - 98 - cd_start)]
    storages = sorted((n for n in entries if n.startswith("data/")), key=lambda n: int(n.split("/")[1]))
    for name in (*_LOAD_ORDER, *storages):
        offset, size = entries[name]
        if size or not name.startswith("data/"):
            nlen, xlen = struct.unpack_from("<HH", fmt(offset, offset + 30), 26)
            reads += [(offset, 30), (offset + 30 + nlen + xlen, size)]
    return reads


def _archive_of(file: FilePlan, by_path: bool) -> tuple[bytes, list[int], bytes, str]:
    """What ``torch.save`` of a state-dict file is made of: its pickle, its storages' bytes, its serialization id,
    and its records' folder (the file's stem when saved to a path, else ``archive``)."""
    storages = [numel * file.itemsize for group in file.groups for numel in group.numels]
    # torch.save's serialization id is 40 characters
    sid = blake2b(file.stem.encode(), digest_size=20).hexdigest().encode()
    return pickle_state(file), storages, sid, file.stem if by_path else "archive"


@cache
def save_calls(file: FilePlan) -> Calls:
    """The writes ``torch.save(state_dict, path)`` makes on its stream for a state-dict file (the pieces of
    :func:`archive_calls`, records named by the path), in order, with no flush: its stream writes what is
    pending when it closes."""
    return tuple(len(c) if isinstance(c, bytes) else c for c in archive_calls(*_archive_of(file, True)))


class PtFormat:
    """``torch.save`` of each file's state dict: into an open file (DLIO's, ``with open(path, "wb") as f``), or
    to the file's path (``by_path``: DeepSpeed's ``torch.save(state_dict, path)``, its records named by the
    file)."""

    name = "pt"
    extension = ".pt"

    def __init__(self, by_path: bool = False) -> None:
        self.by_path = by_path

    def segments(self, file: PlannedFile) -> list[Segment]:
        assert isinstance(file, FilePlan)  # a state dict's file (a file of items is its layout's format)
        return archive(*_archive_of(file, self.by_path))
