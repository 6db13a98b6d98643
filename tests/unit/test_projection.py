"""A projection across scales (``dlio_ckpt.results.projection``, a sweep over ``checkpoint.scale``): a time
made of a fixed part and a part per byte is recovered from two or more scales, where dividing one run's time
by its bytes ratio is not; a sweep fits each combination of its other keys apart."""

from __future__ import annotations

import pytest

from dlio_ckpt.results.projection import GIB, ScalePoint, across_scales, said
from dlio_ckpt.results.schema import Scaled
from dlio_ckpt.results.summary import OpRecord, projected
from dlio_ckpt.run.context import data_span, too_short
from dlio_ckpt.tools.drivers.sweep_files import projections

FULL = 800 * GIB
FIXED, PER_GIB = 6.0, 2.0  # a storage and a process: 6 s per save whatever its bytes, 2 s per GiB


def timed(scale: float) -> ScalePoint:
    moved = int(FULL * scale)
    return ScalePoint(scale, moved, FIXED + PER_GIB * moved / GIB)


def test_two_scales_recover_the_fixed_part_and_the_bandwidth_where_one_run_does_not():
    fit = across_scales("save", [timed(0.0002), timed(0.001)], FULL)
    assert fit is not None
    assert fit.fixed_seconds == pytest.approx(FIXED) and fit.seconds_per_GiB == pytest.approx(PER_GIB)
    assert fit.projected_seconds == pytest.approx(FIXED + PER_GIB * 800)
    assert fit.largest_residual_share == pytest.approx(0, abs=1e-9)
    one_run = timed(0.0002).seconds / 0.0002  # io.scaled.projected_full_size's rule: the whole time scaled
    assert one_run > 4 * fit.projected_seconds
    assert "1,606.0 s at full size, projected from scales 0.0002, 0.001" in said(fit)


def test_noise_is_shown_as_the_fits_largest_miss():
    points = [timed(0.0002), timed(0.001), ScalePoint(0.005, int(FULL * 0.005), 1.1 * timed(0.005).seconds)]
    fit = across_scales("load", points, FULL)
    assert fit is not None and 0.01 < fit.largest_residual_share < 0.1


def test_a_time_that_does_not_grow_with_the_bytes_is_not_projected():
    points = [ScalePoint(0.0002, 100, 7.0), ScalePoint(0.001, 500, 6.5)]
    fit = across_scales("load", points, FULL)
    assert fit is not None and fit.projected_seconds is None and "did not grow with the bytes" in fit.note
    assert "not projected" in said(fit)
    assert across_scales("save", [timed(0.001), timed(0.001)], FULL) is None  # one size: nothing to fit


def row(point: int, scale: float, layout: str, status: str = "ok") -> dict:
    p = timed(scale)
    return {"point": point, "checkpoint.scale": str(scale), "checkpoint.layout": layout, "status": status,
            "save_bytes": p.bytes, "load_bytes": p.bytes, "full_size_bytes": FULL, "full_size_load_bytes": FULL,
            "save_seconds": p.seconds, "load_seconds": 2 * p.seconds, "load_cpu_bound": layout == "dcp"}


def test_a_sweep_fits_each_combination_of_its_other_keys_apart():
    keys = ["checkpoint.layout", "checkpoint.scale"]
    rows = [row(1, 0.0002, "dcp"), row(2, 0.001, "dcp"), row(3, 0.0002, "megatron"),
            row(4, 0.001, "megatron", status="failed"), row(5, 0.005, "megatron")]
    made = projections(keys, rows)
    assert [m["points_with"] for m in made] == [{"checkpoint.layout": "dcp"}, {"checkpoint.layout": "megatron"}]
    assert [p["scale"] for p in made[1]["save"]["points"]] == [0.0002, 0.005]  # the failed point is left out
    assert made[0]["load"]["projected_seconds"] == pytest.approx(2 * (FIXED + PER_GIB * 800))
    assert made[0]["load"]["cpu_bound"] and not made[0]["save"]["cpu_bound"]
    assert made[0]["lines"][0].startswith("checkpoint.layout=dcp: save 1,606.0 s at full size")
    assert projections(["checkpoint.layout"], rows) == []  # no scale swept: no projection


def test_one_runs_projection_scales_the_span_of_the_ranks_files_the_coordinators_left_out():
    """``data_seconds``, what io.scaled.projected_full_size divides by the bytes ratio: from the first byte of the
    ranks' files to the last (times by hand), the coordinator's files (``.metadata``, written last) left out, never
    past the operation's own time; 0 where the process moved none of the ranks' files."""
    times = (("/s/step1/__0_0.distcp", 1.0, 3.0, 10), ("/s/step1/__1_0.distcp", 2.0, 4.5, 10),
             ("/s/step1/.metadata.tmp", 4.6, 6.0, 1))
    assert data_span(times, (".metadata", ".metadata.tmp"), 10.0) == pytest.approx(3.5)
    assert data_span(times, (), 10.0) == pytest.approx(5.0)
    assert data_span(times, (), 2.0) == 2.0
    assert data_span(times[2:], (".metadata", ".metadata.tmp"), 10.0) == 0.0  # nothing to scale: kept as measured
    assert data_span((), (), 10.0) == 0.0
    assert data_span(times, None, 10.0) is None  # a mode that keeps no file's times: all of it scaled


def _record(phase: str, index: int, process: int, duration: float, moving: float) -> OpRecord:
    return OpRecord(phase=phase, index=index, step=index, process=process, start=0.0, end=duration,
                    duration=duration, bytes=1, files=1, data_seconds=moving)


def test_a_projection_from_a_phase_moving_its_files_in_under_a_second_says_it_is_too_short():
    """Each checkpoint's slowest process (figures by hand): a save whose files moved in 0.2 s and 0.3 s is too
    short to measure the storage, a load whose moved in 2 s is not; the console says how much larger a run
    would move them for a second."""
    scaled = Scaled.model_construct(miniature="sample", bytes_ratio=0.001, load_bytes_ratio=None)
    records = [_record("save", 1, 0, 0.5, 0.2), _record("save", 1, 1, 0.4, 0.1),
               _record("save", 2, 0, 0.6, 0.3), _record("load", 1, 0, 2.5, 2.0)]
    ahead = projected(scaled, records, [])
    assert ahead.save_seconds == pytest.approx((0.3 + 200 + 0.3 + 300) / 2)
    assert ahead.data_seconds == pytest.approx({"save": 0.25, "load": 2.0})
    assert ahead.too_short == ["save"]
    assert "moved in: save 0.25 s)" in too_short(ahead) and "about 4 times the bytes" in too_short(ahead)
    assert too_short(projected(scaled, records[3:], [])) == ""
    nothing = projected(scaled, [_record("load", 1, 0, 0.5, 0.0)], [])  # no process moved the ranks' files
    assert nothing.load_seconds == 0.5 and nothing.too_short == ["load"]
    assert "load 0.00 s" in too_short(nothing) and "times the bytes" not in too_short(nothing)
    both = projected(scaled, [*records[:3], _record("load", 1, 0, 0.5, 0.0)], [])  # the save's 0.25 s still says
    assert both.too_short == ["save", "load"] and "about 4 times the bytes" in too_short(both)
