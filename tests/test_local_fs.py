"""local_fs backend against the real file system: O_DIRECT tails, page-cache eviction, atomic puts."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from dlio_ckpt.backends import get_backend


def resident_bytes(path) -> int:
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip())


@pytest.mark.skipif(shutil.which("fincore") is None, reason="fincore (util-linux) not installed")
def test_evict_drops_a_written_file_from_the_page_cache(tmp_path):
    backend = get_backend("local_fs", str(tmp_path), {})
    path = backend.join("f.bin")
    with open(path, "wb") as fh:
        fh.write(os.urandom(8 << 20))
    if resident_bytes(path) == 0:
        pytest.skip("this file system does not keep written pages in the page cache")
    backend.evict(path)
    assert resident_bytes(path) == 0


def test_odirect_writer_handles_unaligned_tail(tmp_path):
    import mmap

    backend = get_backend("local_fs", str(tmp_path), {})
    buf = mmap.mmap(-1, 3 * 4096)
    buf[:] = os.urandom(3 * 4096)
    try:
        writer = backend.open_write(backend.join("d.bin"), odirect=True)
    except Exception as exc:  # tmpfs refuses O_DIRECT
        pytest.skip(f"O_DIRECT not supported here: {exc}")
    writer.write(memoryview(buf)[:2 * 4096 + 123])
    writer.finish(fsync=True)
    assert (tmp_path / "d.bin").read_bytes() == buf[:2 * 4096 + 123]


def test_put_small_is_atomic_and_get_small_reads_back(tmp_path):
    backend = get_backend("local_fs", str(tmp_path), {})
    backend.put_small(backend.join("m.json"), b"{}")
    assert backend.get_small(backend.join("m.json")) == b"{}"
    assert backend.get_small(backend.join("missing")) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]
