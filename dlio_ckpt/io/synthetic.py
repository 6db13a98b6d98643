"""Synthetic checkpoint bytes: incompressible, no 4 KiB block repeated in a run, at memory speed.

Why this way: a random generator per write runs far below storage speed (bench/cpu.py). We fill a
random pool once, then for each request take a 4 KiB-aligned window of it and stamp the first 32 bytes
of every 4 KiB block with (run key, file key, block index, a mix of the three). The pool repeats a
1 MiB period of random blocks, and block ``i`` of file ``key`` always takes the body of period block
``(h(key) + i) mod 256``: so a file's bytes do not depend on how they are asked for. A framework's
calls (a 704-byte header, a 32 MiB tensor at an odd offset) and the tuned stream's 8 MiB chunks
write the same file, and a read of any range in any request size verifies it.
Stamping touches 32 bytes per block, so a chunk is ready in microseconds and is written straight
from the pool (no copy). Every block carries its own identity, so deduplicating storage finds no
repeat and the read phase can say exactly which file and offset came back wrong.

The same source works in GPU memory (``device``: an array module such as cupy) for backends that
move device buffers (GDS): the pool is made once on the host and copied to the device once, then
every window is stamped there, so bulk data never crosses PCIe just to be made, and the bytes are
exactly those of the host generator (a file written from the GPU verifies on the host).
"""

from __future__ import annotations

import ctypes
import mmap
from typing import Any

import numpy as np

BLOCK = 4096
SLACK = 1 << 20  # pool bytes beyond one window: one period of random block bodies
_PERIOD_BLOCKS = SLACK // 4096
STAMP_WORDS = 4
_WORDS_PER_BLOCK = BLOCK // 8
_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def file_key(step: int, rank: int, index: int, phase_bit: int = 0) -> int:
    """A 64-bit id unique per (checkpoint step, rank, file index) within a run."""
    if not (0 <= step < 1 << 19 and 0 <= rank < 1 << 28 and 0 <= index < 1 << 16):
        raise ValueError(f"file key out of range: step={step} rank={rank} index={index}")
    return (phase_bit << 63) | (step << 44) | (rank << 16) | index


class SyntheticData:
    """One process's source of checkpoint bytes: a pool allocated once, stamped per window.

    A window returned by :meth:`window` stays valid only until the next call, which may restamp
    overlapping blocks: consume (write or compare) it first.
    """

    def __init__(self, run_key: int, max_window: int, device: Any = None, like: SyntheticData | None = None) -> None:
        if max_window % BLOCK:
            raise ValueError("max_window must be a multiple of 4096")
        # A window beyond a period of 256 random blocks (stamps make every block unique): a process keeps
        # one pool per request in flight, so the pool is what in-flight bytes cost. The period repeats
        # through the pool, so a window may start at any of its blocks and read on without wrapping.
        pool_bytes = max_window + SLACK
        self.run_key = run_key & _MASK64
        mm = mmap.mmap(-1, pool_bytes)  # page-aligned: usable for O_DIRECT
        self._mm: mmap.mmap | None = mm  # None once the pool lives on the device
        words = np.frombuffer(mm, dtype=np.uint64)
        if like is not None and like.run_key == self.run_key and like._mm is not None and len(like._mm) == pool_bytes:
            mm[:] = like._mm  # the same bytes, a copy being faster than generating them again
        else:
            period = SLACK // 8
            words[:period] = np.random.default_rng(self.run_key).integers(0, _MASK64, size=period, dtype=np.uint64,
                                                                          endpoint=True)
            for i in range(period, words.size, period):
                words[i:i + period] = words[:min(period, words.size - i)]
        self._max_blocks = max_window // BLOCK
        self._blocks: Any  # a numpy array, or the device array module's; None once closed
        if device is None:
            self._blocks = words.reshape(-1, _WORDS_PER_BLOCK)
            self._view: Any = memoryview(mm)
            self._arange = np.arange(self._max_blocks, dtype=np.uint64)
        else:  # one host-to-device copy of the pool, here and never again
            self._blocks = device.asarray(words).reshape(-1, _WORDS_PER_BLOCK)
            self._view = self._blocks.reshape(-1).view(device.uint8)
            self._arange = device.arange(self._max_blocks, dtype=device.uint64)
            del words
            mm.close()
            self._mm = None

    def window(self, key: int, offset: int, nbytes: int, skip: int = 0) -> Any:
        """Bytes ``[offset, offset + nbytes)`` of the payload stream of file ``key``: a memoryview,
        or a device array when made with ``device``. ``skip``: bytes at its start the caller will not
        look at, left unstamped (a restore comparing a few KiB of a chunk stamps only those blocks).

        ``offset`` and ``skip`` must be block-aligned; ``nbytes`` at most the ``max_window`` given at creation.
        """
        if offset % BLOCK or skip % BLOCK or nbytes > self._max_blocks * BLOCK or nbytes < 0:
            raise ValueError(f"bad window offset={offset} nbytes={nbytes} skip={skip}")
        first, skipped = offset // BLOCK, skip // BLOCK
        nblocks = -(-nbytes // BLOCK)
        start = (_splitmix64(self.run_key ^ _splitmix64(key)) + first) % _PERIOD_BLOCKS  # block first's body
        rows = self._blocks[start + skipped:start + nblocks]
        index = self._arange[:nblocks - skipped] + np.uint64(first + skipped)
        rows[:, 0] = np.uint64(self.run_key)  # numpy scalars: a device array module takes them as they are
        rows[:, 1] = np.uint64(key)
        rows[:, 2] = index
        rows[:, 3] = (index * np.uint64(0xD6E8FEB86659FD93)) ^ np.uint64(self.run_key ^ key)
        return self._view[start * BLOCK:start * BLOCK + nbytes]

    def close(self) -> None:
        """Drop the pool now rather than at garbage collection (windows must no longer be used)."""
        self._blocks = self._view = None
        try:
            if self._mm is not None:
                self._mm.close()
        except BufferError:  # a window is still referenced somewhere; GC frees it later
            pass


def _libc_memcmp() -> Any:
    try:
        fn = ctypes.CDLL(None).memcmp
    except (OSError, AttributeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return fn


_MEMCMP = _libc_memcmp()


def first_difference(got: memoryview, want: memoryview) -> int | None:
    """Offset of the first differing byte, or None when equal; at memory speed. libc's memcmp
    (no temporary array, the GIL released) says whether they differ; numpy finds
    where only when they do."""
    a = np.frombuffer(got, dtype=np.uint8)
    b = np.frombuffer(want, dtype=np.uint8)
    if a.size != b.size:
        return min(a.size, b.size)
    if _MEMCMP is not None:
        if a.size == 0 or _MEMCMP(a.ctypes.data, b.ctypes.data, a.size) == 0:
            return None
    else:
        whole = a.size // 8 * 8  # 8 bytes at a time: several times memoryview =='s speed
        if np.array_equal(a[:whole].view(np.uint64), b[:whole].view(np.uint64)) and np.array_equal(
            a[whole:], b[whole:]
        ):
            return None
    return int(np.flatnonzero(a != b)[0])


def first_difference_on_device(xp: Any, got: Any, want: Any) -> int | None:
    """:func:`first_difference` for a device buffer ``got``: the compare runs on the device and only
    its answer comes back (a bool, and the offset when a block is wrong). ``want`` may be host bytes
    (format metadata), copied over first."""
    if isinstance(want, memoryview | bytes):
        want = xp.asarray(np.frombuffer(want, dtype=np.uint8))
    if got.size != want.size:
        return min(got.size, want.size)
    differs = got != want
    if not bool(differs.any()):
        return None
    return int(differs.argmax())
