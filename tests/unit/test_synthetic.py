"""Synthetic data: unique 4 KiB blocks across files and steps, incompressible, exact verification."""

from __future__ import annotations

import zlib

from dlio_ckpt.io.synthetic import BLOCK, SyntheticData, file_key, first_difference

MIB = 1 << 20


def test_no_block_repeats_across_files_steps_and_chunks():
    data = SyntheticData(run_key=7, max_window=MIB)
    seen = set()
    for step in (1, 2):
        for rank in (0, 1):
            for offset in range(0, 4 * MIB, MIB):
                w = bytes(data.window(file_key(step, rank, 0), offset, MIB))
                for i in range(0, MIB, BLOCK):
                    seen.add(w[i:i + BLOCK])
    assert len(seen) == 2 * 2 * 4 * MIB // BLOCK


def test_incompressible_and_reproducible():
    a = bytes(SyntheticData(run_key=11, max_window=MIB).window(file_key(1, 0, 0), 0, MIB))
    b = bytes(SyntheticData(run_key=11, max_window=MIB).window(file_key(1, 0, 0), 0, MIB))
    c = bytes(SyntheticData(run_key=12, max_window=MIB).window(file_key(1, 0, 0), 0, MIB))
    assert a == b != c
    assert len(zlib.compress(a, 9)) > 0.99 * len(a)


def test_first_difference_finds_the_byte():
    data = SyntheticData(run_key=3, max_window=MIB)
    want = bytes(data.window(file_key(1, 0, 0), 0, MIB - 5))
    got = bytearray(want)
    assert first_difference(memoryview(got), memoryview(want)) is None
    got[MIB - 7] ^= 1
    assert first_difference(memoryview(got), memoryview(want)) == MIB - 7


def test_a_files_bytes_do_not_depend_on_how_they_are_asked_for():
    """A framework's calls (a header, a tensor at an odd offset) and the stream's chunks write one file:
    any block-aligned window of it holds the bytes the whole file holds there, whatever pool it comes from."""
    key = file_key(1, 3, 0)
    whole = bytes(SyntheticData(run_key=5, max_window=4 * MIB).window(key, 0, 4 * MIB))
    small = SyntheticData(run_key=5, max_window=MIB)
    for offset, nbytes in ((0, MIB), (BLOCK, 5 * BLOCK), (3 * MIB - 7 * BLOCK, MIB), (MIB + 64 * BLOCK, 12345)):
        assert bytes(small.window(key, offset, nbytes)) == whole[offset:offset + nbytes], (offset, nbytes)
