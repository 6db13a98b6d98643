"""Synthetic checkpoint bytes that no storage can shrink (unless asked to), made at memory speed.

Why this way: storage built for training reduces data inline (compression, deduplication at 512 B to
32 KiB, similarity), so bytes a storage can shrink would measure our bytes, not the storage. And a
random generator per write runs below storage speed (``bench/cpu.py``). So each process fills a random
pool of one period (256 blocks of 4 KiB) once, and makes block ``i`` of file ``key`` as:

- its identity ``j``: ``i``; with a deduplication ratio ``d`` (:class:`Reduction`), in groups of 32 blocks
  (128 KiB), group ``g`` takes the identities of group ``floor(g / d)``: a 4 KiB deduplicator keeps 1/d of the
  blocks (of whole groups), and a repeat lies 128 KiB or more from its first copy, beyond a short-window
  compressor's reach (lz4's 64 KiB), as dgen-py's repeats do;
- its first 32 bytes, a stamp (run key, file key, ``j``, a mix of the three): a block read back where it
  does not belong is named (another file's, rank's, checkpoint's, run's: :meth:`SyntheticData.foreign`);
- the rest, the body of pool block ``(h(key) + j) mod 256`` XORed with a 64-bit key drawn (splitmix64)
  from (run key, file key, ``lap``), ``lap = (h(key) + j) // 256`` the times the file has gone round the pool:
  a pool body comes back once per lap, under another key each time, so no two blocks, 512-byte sectors or
  longer runs of bytes are equal anywhere in a run or between runs, and no byte-matching compressor finds
  anything to shrink (the pool is random; a body's other copies differ from it in every 8-byte word). A key
  per lap rather than per block: a lap is one contiguous XOR with one key, at copy speed, where a key per
  block (a broadcast XOR) costs twice as much (``bench/cpu.py``: "a key per block");
- with a compression ratio ``c``, only the first ``4096 / c`` bytes (and the stamp's bytes zstd finds again)
  are so made and the rest are zeros, which zstd and its like store in next to nothing.

With ``Reduction.values="torch_rand"`` the tensors' bytes are as reducible as ``torch.rand``'s of their datatype,
what DLIO v2.0.1 writes (a tensor's datatype is the window's ``dtype``): an entropy coder shrinks them by their
few exponent bits (zstd -19: fp16 1.18x, bf16 1.42x or 1.53x by the bytes, fp32 1.12x), and nothing repeats. The
pool of each datatype is filled as torch 2.13's CPU ``uniform_kernel`` fills a tensor
(``aten/src/ATen/native/cpu/DistributionTemplates.h``:
a float ``k / 2**24``, ``k`` uniform below ``2**24``, rounded to the nearest value of the datatype, a 1.0 made 0; a
double ``k / 2**53``), and the key of a lap is a row of 512 words (one per word of a block, drawn from the lap's
key), each masked to mantissa bits (:data:`_TORCH_RAND_MASK`): XOR with a constant permutes the mantissas within
each binade, so every lap holds values of torch.rand's distribution, exponents and all, and differs from the
others in all but the elements whose masked keys agree by chance (1 in 2**7 of bf16, fewer of the others). A row rather
than one 64-bit key: masked keys of 28 to 44 bits would repeat between laps of a long run (a lap's data then
repeating whole); rows of 512 masked words do not. int8 and uint8 tensors
(torch.randint's bytes, uniform) and bytes of no datatype are made as by default.

A file's bytes depend only on (run key, file key, offset), not on how they are asked for: a framework's
calls (a 704-byte header, a 32 MiB tensor at an odd offset) and the tuned stream's 8 MiB chunks write the
same file, and a read of any range in any request size verifies it (made again, then compared: a copy and a
compare, where un-XORing the read bytes would be a copy and a compare too and change the caller's buffer).
Each window is made into a buffer of its own, one XOR pass over the pool per chunk (a few hundredths of a
CPU second per GiB): the pool (1 MiB) and the buffer (a window) cost the memory the stamped pool did.

The same source works in GPU memory (``device``: an array module such as cupy) for backends that
move device buffers (GDS): the pool is made on the host and copied to the device once, then every
window is made there by the same arithmetic, so bulk data never crosses PCIe just to be made, and the
bytes are exactly those of the host generator (a file written from the GPU verifies on the host).
"""

from __future__ import annotations

import ctypes
import mmap
import struct
from typing import Any, NamedTuple

import numpy as np

BLOCK = 4096
SLACK = 1 << 20  # the pool: one period of random block bodies, beside each window's own buffer
_PERIOD_BLOCKS = SLACK // BLOCK
STAMP_WORDS = 4
STAMP_BYTES = STAMP_WORDS * 8
_WORDS_PER_BLOCK = BLOCK // 8
_MASK64 = (1 << 64) - 1
_MIX = 0xD6E8FEB86659FD93
_UNIT = 1 << 20  # a deduplication ratio in fixed point: exact, and the same on any device
_GROUP = 32  # blocks deduplicated together (128 KiB): repeats lie twice lz4's window apart or more
MAX_COMPRESSION = 64.0
# bytes of each block's stamp a compressor finds again in the blocks before (the run and file keys, the block
# index's high bytes): about 21 with zstd at levels 3 and 19 (bench/cpu.py --reduction), counted out of the body
_STAMP_REPEATS = 21
_SLAB = 16  # torch_rand, on the host: pool rows XORed with a lap's key row per call (:meth:`SyntheticData._xor_row`)


class Reduction(NamedTuple):
    """What a storage may reduce the data by, as dgen-py and the MLCommons fork mean it: 2 means the
    storage may store half. ``compression``: what a compressor (zstd) gains on the unique blocks;
    ``dedup``: what a 4 KiB deduplicator gains. Both 1: irreducible. ``values``: what the tensors' values
    are, "random" (irreducible) or "torch_rand" (torch.rand's of each tensor's datatype, DLIO v2.0.1's: an
    entropy coder shrinks them by their exponents; ``compression`` then zeros the blocks' tails on top)."""

    compression: float = 1.0
    dedup: float = 1.0
    values: str = "random"


IRREDUCIBLE = Reduction()
VALUES = ("random", "torch_rand")

_LANES16, _LANES32 = 0x0001_0001_0001_0001, 0x0000_0001_0000_0001
# torch_rand: the bits of each 64-bit word a lap's key may flip, the mantissa bits of each element. fp16 and bf16:
# all of them (their torch.rand values fill every mantissa of a binade). fp32 and fp64: all but the low byte, which
# torch.rand leaves zero-ended below 0.5 (a float k / 2**24 has e - 1 low zero bits in binade [2**-e, 2**(1-e));
# flipping them would add about a bit of entropy an element), while the bits flipped are uniform in 99.6 % of
# the elements (values of 2**-8 and up); entropy is kept exactly either way (a XOR permutes a binade's mantissas)
_TORCH_RAND_MASK = {"fp16": 0x03FF * _LANES16, "bf16": 0x007F * _LANES16, "fp32": 0x007F_FF00 * _LANES32,
                    "fp64": 0x000F_FFFF_FFFF_FF00}


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _splitmix64_array(x: Any) -> Any:
    """:func:`_splitmix64` of every element of an array of uint64 (numpy's, or a device array module's:
    operators only, wrapping as unsigned 64-bit arithmetic does)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def torch_rand_pool(dtype: str, seed: int) -> np.ndarray:
    """One pool (256 blocks of 512 words) of ``dtype`` values distributed as torch 2.13's CPU ``torch.rand``
    makes them (the module's docstring), bit for bit the same on every host: numpy rounds to nearest-even as
    c10's Half does, bf16 by the same integer rounding as c10's ``round_to_nearest_even``."""
    rng = np.random.default_rng([seed, 1 + list(_TORCH_RAND_MASK).index(dtype)])
    if dtype == "fp64":
        values: np.ndarray = rng.integers(0, 1 << 53, size=SLACK // 8, dtype=np.uint64).astype(np.float64)
        values *= 2.0 ** -53
    else:
        count = SLACK // (4 if dtype == "fp32" else 2)
        uniform = rng.integers(0, 1 << 24, size=count, dtype=np.uint32).astype(np.float32)
        uniform *= np.float32(2.0 ** -24)  # exact: what torch's float uniform_real makes of a 24-bit draw
        if dtype == "fp32":
            values = uniform
        elif dtype == "fp16":
            values = uniform.astype(np.float16)
            values[values == 1] = 0  # as the kernel does where the cast rounded up to its upper bound
        else:  # bf16: the float's top 16 bits, rounded to nearest-even
            bits = uniform.view(np.uint32)
            values = ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
                      ).astype(np.uint16)
            values[values == 0x3F80] = 0  # 1.0 in bf16
    return values.view(np.uint64).reshape(_PERIOD_BLOCKS, _WORDS_PER_BLOCK)


def file_key(step: int, rank: int, index: int, phase_bit: int = 0) -> int:
    """A 64-bit id unique per (checkpoint step, rank, file index) within a run."""
    if not (0 <= step < 1 << 19 and 0 <= rank < 1 << 28 and 0 <= index < 1 << 16):
        raise ValueError(f"file key out of range: step={step} rank={rank} index={index}")
    return (phase_bit << 63) | (step << 44) | (rank << 16) | index


def body_words(compression: float) -> int:
    """8-byte words of a block made of the pool (the stamp included) for a compressor to keep ``1 / compression``
    of it; the rest of the block is zeros."""
    return min(_WORDS_PER_BLOCK, round((BLOCK / compression + _STAMP_REPEATS) / 8))


class SyntheticData:
    """One process's source of checkpoint bytes: a pool made once, and a buffer each window is made in.

    A window returned by :meth:`window` stays valid only until the next call, which remakes the buffer:
    consume (write or compare) it first.
    """

    def __init__(self, run_key: int, max_window: int, device: Any = None, like: SyntheticData | None = None,
                 reduction: Reduction = IRREDUCIBLE) -> None:
        if max_window % BLOCK:
            raise ValueError("max_window must be a multiple of 4096")
        if not (1 <= reduction.compression <= MAX_COMPRESSION and reduction.dedup >= 1
                and reduction.values in VALUES):
            raise ValueError(f"bad reduction {reduction}")
        self.run_key = run_key & _MASK64
        self.reduction = reduction
        self._body = body_words(reduction.compression)
        self._dedup = round(reduction.dedup * _UNIT)
        self._max_blocks = max_window // BLOCK
        self._xp: Any = device or np
        self._mm: mmap.mmap | None = None
        if like is not None and like.run_key == self.run_key and like._xp is self._xp:
            self._pool: Any = like._pool.copy()  # the same bytes, a copy being faster than making them again
        else:
            pool = np.random.default_rng(self.run_key).integers(0, _MASK64, size=(_PERIOD_BLOCKS, _WORDS_PER_BLOCK),
                                                                dtype=np.uint64, endpoint=True)
            self._pool = pool if device is None else device.asarray(pool)  # one host-to-device copy, here only
        # torch_rand: a pool per datatype, made at its first window (a dlio checkpoint has two: the model's, the
        # optimizer's), and each lap's key row is masked to its mantissa bits
        self._pools: dict[str, Any] = {}
        if like is not None and like.run_key == self.run_key and like._xp is self._xp:
            self._pools = {dtype: pool.copy() for dtype, pool in like._pools.items()}
        self._made = set(self._pools)  # the datatypes whose pools were held (still counted once closed)
        self._words = self._xp.arange(_WORDS_PER_BLOCK, dtype=self._xp.uint64)
        self._out: Any  # each window's buffer, (blocks, words); zeros where a compressible block has none
        if device is None:
            self._mm = mmap.mmap(-1, max_window)  # zeros, page-aligned: usable for O_DIRECT
            self._out = np.frombuffer(self._mm, dtype=np.uint64).reshape(-1, _WORDS_PER_BLOCK)
            self._view: Any = memoryview(self._mm)
        else:
            self._out = device.empty((self._max_blocks, _WORDS_PER_BLOCK), dtype=device.uint64)
            self._out[...] = 0
            self._view = self._out.reshape(-1).view(device.uint8)
        self._arange = self._xp.arange(self._max_blocks, dtype=self._xp.uint64)
        self._stamps = self._xp.empty((self._max_blocks, STAMP_WORDS), dtype=self._xp.uint64)

    @property
    def value_pool_bytes(self) -> int:
        """Memory of the datatypes' pools made so far (torch_rand), beyond the 1 MiB pool every source holds."""
        return len(self._made) * SLACK

    def window(self, key: int, offset: int, nbytes: int, skip: int = 0, dtype: str = "") -> Any:
        """Bytes ``[offset, offset + nbytes)`` of the payload stream of file ``key``: a memoryview,
        or a device array when made with ``device``. ``skip``: bytes at its start the caller will not
        look at, left unmade (a restore comparing a few KiB of a chunk makes only those blocks). ``dtype``:
        the datatype of the file's tensors, which ``values="torch_rand"`` makes their values of ("": none).

        ``offset`` and ``skip`` must be block-aligned; ``nbytes`` at most the ``max_window`` given at creation.
        """
        if offset % BLOCK or skip % BLOCK or nbytes > self._max_blocks * BLOCK or nbytes < 0:
            raise ValueError(f"bad window offset={offset} nbytes={nbytes} skip={skip}")
        first, skipped = offset // BLOCK, skip // BLOCK
        nblocks = -(-nbytes // BLOCK)
        if skipped < nblocks:
            self._make(key, first + skipped, self._out[skipped:nblocks], dtype)
        return self._view[:nbytes]

    def _values_pool(self, dtype: str) -> tuple[Any, int]:
        """The pool the blocks of a tensor of ``dtype`` are made of, and the mask of its keys (0: none, the
        random pool's whole 64-bit key per lap)."""
        if self.reduction.values != "torch_rand" or dtype not in _TORCH_RAND_MASK:
            return self._pool, 0
        if dtype not in self._pools:
            pool = torch_rand_pool(dtype, self.run_key)
            self._pools[dtype] = pool if self._xp is np else self._xp.asarray(pool)  # one copy to the device
            self._made.add(dtype)
        return self._pools[dtype], _TORCH_RAND_MASK[dtype]

    def _make(self, key: int, first: int, rows: Any, dtype: str = "") -> None:
        """Blocks ``first``, ``first + 1``, ... of file ``key`` into ``rows`` (one per block)."""
        xp, n, body = self._xp, rows.shape[0], self._body
        pool, mask = self._values_pool(dtype)
        seed = _splitmix64(self.run_key ^ _splitmix64(key))
        start = seed % _PERIOD_BLOCKS  # the pool block of identity 0
        index = self._arange[:n] + np.uint64(first)
        if self._dedup == _UNIT:  # a lap of the pool at a time: one contiguous XOR with one key (or row) each
            ident, done = index, 0
            while done < n:
                lap, at = divmod(start + first + done, _PERIOD_BLOCKS)
                take = min(_PERIOD_BLOCKS - at, n - done)
                lap_key = np.uint64(_splitmix64(seed ^ lap))
                if mask:
                    self._xor_row(pool[at:at + take, :body], self._row(lap_key, mask, body),
                                  rows[done:done + take, :body])
                else:
                    xp.bitwise_xor(pool[at:at + take, :body], lap_key, out=rows[done:done + take, :body])
                done += take
        else:  # identities repeat: gathered from the pool, each block with its lap's key
            ident = self._identity(index)
            if mask:  # runs of blocks whose pool rows follow on within one lap (at most a group): a row's XOR each
                made: dict[int, Any] = {}
                i = 0
                while i < n:
                    lap, at = divmod(self._identity(first + i) + start, _PERIOD_BLOCKS)
                    take = min(_GROUP - (first + i) % _GROUP, n - i, _PERIOD_BLOCKS - at)
                    if lap not in made:
                        made[lap] = self._row(np.uint64(_splitmix64(seed ^ lap)), mask, body)
                    self._xor_row(pool[at:at + take, :body], made[lap], rows[i:i + take, :body])
                    i += take
            else:
                place = ident + np.uint64(start)
                keys = _splitmix64_array(place // np.uint64(_PERIOD_BLOCKS) ^ np.uint64(seed))[:, None]
                xp.bitwise_xor(pool[place % np.uint64(_PERIOD_BLOCKS), :body], keys, out=rows[:, :body])
        stamps = self._stamps[:n]  # made apart and written in one pass: a third of the time of four columns
        stamps[:, 0] = np.uint64(self.run_key)  # numpy scalars: a device array module takes them as they are
        stamps[:, 1] = np.uint64(key)
        stamps[:, 2] = ident
        stamps[:, 3] = (ident * np.uint64(_MIX)) ^ np.uint64(self.run_key ^ key)
        rows[:, :STAMP_WORDS] = stamps

    def _row(self, lap_key: Any, mask: int, body: int) -> Any:
        """torch_rand: the words a lap's blocks are XORed with, one per word of a block (``lap_key``: a lap's key,
        or a column of each block's), masked to the datatype's mantissa bits."""
        return _splitmix64_array(self._words[:body] ^ lap_key) & np.uint64(mask)

    def _xor_row(self, src: Any, row: Any, out: Any) -> None:
        """``out = src ^ row`` for every row of ``src``. On the host in slabs of :data:`_SLAB` rows against a tile
        of the row: numpy's broadcast of one 4 KiB row calls its inner loop once a row, which costs as much as
        the XOR (78 against 41 microseconds a MiB); a device's kernel broadcasts at no such cost."""
        n, width = src.shape
        whole = n - n % _SLAB if self._xp is np else 0
        if whole:  # splitting the first axis of a (rows, words) slice is always a view: out is written in place
            np.bitwise_xor(src[:whole].reshape(-1, _SLAB, width), np.tile(row, (_SLAB, 1)),
                           out=out[:whole].reshape(-1, _SLAB, width))
        if whole < n:
            self._xp.bitwise_xor(src[whole:], row, out=out[whole:])

    def _identity(self, index: Any) -> Any:
        """The identity of block ``index`` (an int, or an array of uint64): its own, unless blocks repeat."""
        if self._dedup == _UNIT:
            return index
        group, at = index // _GROUP, index % _GROUP  # the same arithmetic on ints and on arrays of uint64
        return group * _UNIT // self._dedup * _GROUP + at

    def foreign(self, stamp: Any, key: int, block: int) -> str | None:
        """Whose block ``stamp`` (the first 32 bytes of a block read back at block ``block`` of file ``key``)
        comes from, when it is a block of this tool's but not the one written there (another file's, rank's,
        checkpoint's, run's, or another offset's); None when it has no stamp or the expected one."""
        raw = self._xp.asnumpy(stamp).tobytes() if self._xp is not np else bytes(stamp)
        if len(raw) < STAMP_BYTES:
            return None
        run, k, j, mix = struct.unpack("<4Q", raw[:STAMP_BYTES])
        if mix != ((j * _MIX) & _MASK64) ^ run ^ k:
            return None
        expected = self._identity(block)
        if (run, k, j) == (self.run_key, key & _MASK64, expected):
            return None
        file = f"step {(k >> 44) & ((1 << 19) - 1)}, rank {(k >> 16) & ((1 << 28) - 1)}, file {k & 0xFFFF}"
        whose = "this run" if run == self.run_key else f"another run (run key {run})"
        return f"block {j} of the file of {file} of {whose}"

    def close(self) -> None:
        """Drop the buffers now rather than at garbage collection (windows must no longer be used)."""
        self._out = self._view = self._pool = None
        self._pools = {}
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
_SMALL = 4096  # first_difference compares pairs up to this size as bytes (copied: cheaper than two arrays)


def first_difference(got: memoryview, want: memoryview) -> int | None:
    """Offset of the first differing byte, or None when equal; at memory speed. libc's memcmp
    (no temporary array, the GIL released) says whether they differ; numpy finds
    where only when they do. A small pair (a framework's header read: torch.load reads an archive in some 30 calls)
    is compared as bytes, a few hundred nanoseconds against the arrays' ten microseconds."""
    if len(got) <= _SMALL and len(got) == len(want) and bytes(got) == bytes(want):
        return None
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
