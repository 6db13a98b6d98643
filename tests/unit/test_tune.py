"""``dlio_ckpt tune``'s bad input, refused before anything is written (in this process), and its rule for the
finalists it runs again. tune's grids run in tests/e2e/test_tune.py."""

from __future__ import annotations

import pytest

from dlio_ckpt.tools.drivers.sweep import Point
from dlio_ckpt.tools.drivers.tune import _rerun_points, finalists
from tests.support.workloads import TINY_CK


@pytest.mark.parametrize("args, key, rule", [
    (["++workload.storage.storage_type=null"], "workload.storage.storage_type", "tune has no settings to try there"),
    (["--max-gib", "0"], "--max-gib", "must be more than 0"),
    (["--max-seconds", "-1"], "--max-seconds", "must be more than 0"),
    (["++workload.checkpoint.odirect=True", "++workload.checkpoint.chunk_size=1048576",
      "++workload.storage.storage_options.queue_depth=4"], "tune=", "every setting tune tries is fixed"),
])
def test_tune_refuses_bad_input_before_anything_is_written(tmp_path, dlio_here, args, key, rule):
    r = dlio_here(["tune", *TINY_CK, "++hydra.sweep.dir=tn", "--world-size", "2", *args])
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


def test_fios_search_climbs_each_ladder_of_depths_only_while_deeper_pays(tmp_path, monkeypatch):
    """fio's best (tune's yardstick) without fio: which configurations it runs, given made-up speeds. An engine and
    request size go deeper only while the deeper queue is DEPTH_GAIN faster; no deeper than a file has requests;
    then the fastest run again and the median decides."""
    from dlio_ckpt.tools.drivers import fio

    mib = fio.MIB
    assert [[(j.engine, j.iodepth, j.bs // mib) for j in rungs] for rungs in fio.ladders(9 * mib)] == [
        [("psync", 1, 1)], [("psync", 1, 4)], [("psync", 1, 8)],
        [("libaio", 1, 1), ("libaio", 4, 1), ("libaio", 16, 1)],  # 9 requests: 16 holds them all, 32 adds none
        [("libaio", 1, 4), ("libaio", 4, 4)], [("libaio", 1, 8), ("libaio", 4, 8)],
        [("io_uring", 1, 1), ("io_uring", 4, 1), ("io_uring", 16, 1)],
        [("io_uring", 1, 4), ("io_uring", 4, 4)], [("io_uring", 1, 8), ("io_uring", 4, 8)]]
    assert len(fio.grid(1024 * mib)) == 4 + 2 * 4 * 4  # files of 32 requests of 32 MiB: the whole grid may run

    def speed(job: fio.FioJob) -> float:  # libaio gains with depth up to 16; nothing else gains from it
        if job.engine == "libaio":
            return {1: 1.0, 4: 2.0, 16: 2.1, 32: 4.0}[job.iodepth] * job.bs / mib
        return 1.0 + (job.iodepth > 1) * 0.05
    ran: list[tuple[str, fio.FioJob]] = []

    def run(folder, procs, size, op, job, direct, fsync, seconds=None):  # noqa: ANN001, ANN202 - fio.run's
        ran.append((op, job))
        return speed(job)
    monkeypatch.setattr(fio, "run", run)
    best = fio.best(tmp_path / "fio", 2, 1024 * mib, direct=True, fsync=False, finalists=2, again=2)
    first = [(job.engine, job.iodepth, job.bs // mib) for op, job in ran[:len(ran) // 2]]
    assert first[:4] == [("psync", 1, b) for b in (1, 4, 8, 32)]
    # libaio climbs 1 -> 4 (twice as fast) -> 16 (5 % more: stop), never 32, which would have been faster still
    assert [d for e, d, b in first if e == "libaio" and b == 1] == [1, 4, 16]
    assert [d for e, d, b in first if e == "io_uring" and b == 1] == [1, 4]  # 5 % faster at 4: stop
    assert len(first) == 4 + 4 * 3 + 4 * 2 + 2 * 2  # the pass, then the 2 finalists twice more
    assert best["write"] == best["read"] == (2.1 * 32, fio.FioJob("libaio", 16, 32 * mib))
    assert [op for op, _ in ran] == ["write"] * len(first) + ["read"] * len(first)
    assert not list((tmp_path / "fio").iterdir())


def test_a_point_is_sized_as_planned_a_sample_holding_more_than_its_scales_share():
    """tune's free-space check and message size a point by its plan: Megatron's llama3_70b, its sample at 64
    ranks holding whole items on each of 8 ranks, writes 2 to 3.5 times a 0.0002 share (the scale's share alone,
    what was counted before, under-counted it); a point shrunk writes its share."""
    from dlio_ckpt.config import compose
    from dlio_ckpt.plan.layouts import check_job, make_plan
    from dlio_ckpt.tools.drivers.tune import point_size

    for miniature, low, high in (("sample", 2.0, 3.5), ("shrink", 0.95, 1.05)):
        workload = compose(["workload=llama3_70b", "++workload.checkpoint.layout=megatron",
                            f"++workload.checkpoint.miniature={miniature}", "++workload.checkpoint.scale=0.5"])[0]
        check_job(workload, 64)
        full = make_plan(workload, 64).full_size
        assert full is not None
        scale, point_bytes = point_size(workload, 64, full.total_payload_bytes * 0.0002 / (1 << 30))
        assert scale == pytest.approx(0.0002)
        assert low < point_bytes / (scale * full.total_payload_bytes) < high, miniature
