"""Room for the run, checked before anything is written, on a real small file system (a tmpfs): a run that
cannot fit is refused, and overwriting counts the room the old checkpoints free."""

from __future__ import annotations

import shutil

from tests.support.cli import dlio
from tests.support.storage import tmpfs
from tests.support.workloads import TINY_CK_OUT


def test_a_run_that_cannot_fit_is_refused_before_writing(tmp_path):
    with tmpfs(tmp_path / "small", "size=16m") as mnt:
        r = dlio([*TINY_CK_OUT, f"++workload.storage.storage_root={mnt}"], tmp_path, nprocs=2)
        assert r.returncode == 2, r.stderr
        assert "workload.checkpoint.checkpoint_folder='ck': needs 0.09 GiB (" in r.stderr, r.stderr
        assert f"and {mnt}/ck has 0.02 GiB (" in r.stderr and "free" in r.stderr
        assert not (tmp_path / "out").exists() and not any(mnt.iterdir())


def test_overwrite_counts_the_room_the_old_checkpoints_free(tmp_path):
    """Two runs of tiny fit a 128 MiB tmpfs one after the other only if the first's files go first."""
    with tmpfs(tmp_path / "fs", "size=128m") as mnt:
        args = [*TINY_CK_OUT, f"++workload.storage.storage_root={mnt}", "--world-size", "2"]
        assert dlio(args, tmp_path).returncode == 0
        shutil.rmtree(tmp_path / "out")
        r = dlio([*args, "++workload.checkpoint.overwrite=True"], tmp_path)
        assert r.returncode == 0, r.stderr
