"""``dlio_ckpt tune``'s bad input, refused before anything is written (in this process), and its rule for the
finalists it runs again. tune's grids run in tests/e2e/test_tune.py."""

from __future__ import annotations

import pytest

from dlio_ckpt.tools.sweep import Point
from dlio_ckpt.tools.tune import _rerun_points, finalists
from tests.e2e.test_tune import TINY


@pytest.mark.parametrize("args, key, rule", [
    (["++workload.storage.storage_type=null"], "workload.storage.storage_type", "tune has no settings to try there"),
    (["--max-gib", "0"], "--max-gib", "must be more than 0"),
    (["--max-seconds", "-1"], "--max-seconds", "must be more than 0"),
    (["++workload.checkpoint.odirect=True", "++workload.checkpoint.chunk_size=1048576",
      "++workload.storage.storage_options.queue_depth=4"], "tune=", "every setting tune tries is fixed"),
])
def test_tune_refuses_bad_input_before_anything_is_written(tmp_path, dlio_here, args, key, rule):
    r = dlio_here(["tune", *TINY, "++hydra.sweep.dir=tn", "--world-size", "2", *args])
    assert r.returncode == 2 and key in r.stderr and rule in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "tn").exists() and not (tmp_path / "ck").exists()


def test_the_finalists_are_the_best_quarter_and_run_again_alternating():
    """Which points are run again and in what order (no processes: the rule itself)."""
    rows = [{"point": i, "status": "ok", "save_seconds": 1.0, "load_seconds": float(s)}
            for i, s in enumerate([5, 3, 9, 1, 7, 2, 8, 6, 4, 10, 11, 12], start=1)]
    assert finalists(rows[:4]) == [4, 2]  # 4 points: 2 at least
    assert finalists(rows) == [4, 6, 2]  # 12: the best quarter, 3
    assert finalists(rows[:1]) == [1] and finalists([{**rows[0], "status": "failed"}]) == []
    grid = [Point(i, {"k": str(i)}, [f"++workload.k={i}", "++hydra.sweep.dir=sw"], None) for i in range(1, 13)]
    folder, again = _rerun_points(grid, [4, 6, 2], "/sw")
    assert folder == "/sw/finalists_4_6_2"
    assert [(p.values["finalist"], p.values["sample"]) for p in again] == [
        ("4", "2"), ("6", "2"), ("2", "2"), ("2", "3"), ("6", "3"), ("4", "3")]
    assert [p.index for p in again] == [1, 2, 3, 4, 5, 6] and again[0].values["k"] == "4"
    assert again[0].overrides == ["++workload.k=4", "++hydra.sweep.dir=/sw/finalists_4_6_2"]
