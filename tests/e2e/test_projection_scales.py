"""A projection does not depend on the scale it was made at (issue 51, item 1, held at small sizes): a sweep
over ``checkpoint.scale`` projects the same full-size save and load from two small scales as from two large
ones, on a storage whose rate is known, where dividing one run's time by its bytes ratio does not.

The storage is the local file system with each data call held for its bytes at a set rate (a sleep): a
storage that keeps its rate at every size, so the full-size time is known, and what the fit must take apart
is the run's own time per file, item and call. The 64-rank case on real storage is in bench/miniature.py."""

from __future__ import annotations

import threading
import time

import pytest

from dlio_ckpt.io.backends import local_fs
from dlio_ckpt.results.projection import ScalePoint, across_scales
from tests.support.cli import load, run_here

WRITE_RATE, READ_RATE = 20e6, 40e6  # bytes per second
LOW, HIGH = ("0.05", "0.25"), ("0.5", "0.95")


def metered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every data call of the local file system takes its bytes over the rate, in all: what a call owes is
    slept once 2 ms are owed (a sleep per call would add the scheduler's wake-up to each, a time per call)."""
    owed = threading.local()

    def held(method, rate: float, size):
        def call(self, data, *rest):
            started = time.perf_counter()
            done = method(self, data, *rest)
            owed.s = getattr(owed, "s", 0.0) + size(data, done) / rate - (time.perf_counter() - started)
            if owed.s > 0.002:
                slept = time.perf_counter()
                time.sleep(owed.s)
                owed.s -= time.perf_counter() - slept
            return done
        return call

    written = lambda data, _: sum(len(p) for p in data) if isinstance(data, list) else len(data)  # noqa: E731
    for name in ("write", "writev", "write_at"):
        monkeypatch.setattr(local_fs.LocalWriter, name, held(getattr(local_fs.LocalWriter, name), WRITE_RATE,
                                                            written))
    for name in ("readinto", "read_at"):
        monkeypatch.setattr(local_fs.LocalReader, name, held(getattr(local_fs.LocalReader, name), READ_RATE,
                                                            lambda _, n: n))


def test_two_small_scales_project_what_two_large_ones_do(tmp_path, monkeypatch, capfd):
    metered(monkeypatch)
    r = run_here(["sweep", "workload=tiny", "--world-size", "4", "++workload.checkpoint.layout=dcp",
                  "++workload.model.parallelism.tensor=1", "++workload.checkpoint.num_checkpoints_write=1",
                  "++workload.checkpoint.num_checkpoints_read=1", "++workload.checkpoint.fsync=false",
                  f"++workload.checkpoint.scale={','.join(LOW + HIGH)}", "++hydra.sweep.dir=sw",
                  "++workload.checkpoint.checkpoint_folder=ck"], tmp_path, monkeypatch, capfd)
    assert r.returncode == 0, r.stderr
    body = load(tmp_path / "sw" / "sweep.json")
    [whole] = body["projection"]
    assert len(whole["save"]["points"]) == 4 and "projected: save" in r.stdout
    rows = {row["checkpoint.scale"]: row for row in body["points"]}
    for phase, rate in (("save", WRITE_RATE), ("load", READ_RATE)):
        full = rows[LOW[0]]["full_size_bytes" if phase == "save" else "full_size_load_bytes"]
        from_low, from_high = (fit(phase, [rows[s] for s in pair], full) for pair in (LOW, HIGH))
        assert from_low == pytest.approx(from_high, rel=0.2), phase
        assert from_high >= full / rate  # at least the storage's own time for the full size's bytes
        assert whole[phase]["projected_seconds"] == pytest.approx(from_high, rel=0.2)  # the sweep's, over all four
        one_run = load(tmp_path / "sw" / "1" / "summary.json")["io"]["scaled"]["projected_full_size"]
        assert one_run[f"{phase}_seconds"] > from_low  # one run scales its time per item and call too


def fit(phase: str, rows: list[dict], full: int) -> float:
    """The full-size time the sweep's rule projects from ``rows`` alone."""
    made = across_scales(phase, [ScalePoint(float(r["checkpoint.scale"]), r[f"{phase}_bytes"], r[f"{phase}_seconds"])
                                 for r in rows], full)
    assert made is not None and made.projected_seconds is not None
    return made.projected_seconds
