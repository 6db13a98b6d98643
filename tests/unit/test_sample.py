"""``checkpoint.miniature=sample`` (issue 51, item 1): a scaled plan that keeps a sample of the full plan's items
whole, on ranks spread over the job, and a load that reads what the full-size load reads of them. Held to the
full-size plan and its restore (each built by the layout as at full size, never by the sampler): every kept item
is one of the full plan's, of the same rank and file, in its order and at its size; each load rank's reads, taken
back to items by walking the sample's files, are the full load's reads of the kept items, in order; and a time
made of a part per item and a part per byte, projected by one run's rule (its time over the bytes ratio), agrees
within 20 % between scales 0.0002 and 0.005 with a sample, where with every tensor shrunk it is thousands of
times off. Plans only: no process (a sampled run: tests/e2e/test_scaling.py)."""

from __future__ import annotations

import math
import random

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.errors import ConfigError
from dlio_ckpt.plan.layouts import check_job, get_layout, make_plan, restore_plan
from dlio_ckpt.plan.sample import KeptByHalves, runs
from dlio_ckpt.plan.types import ItemFile

DCP = ["++workload.checkpoint.layout=dcp", "++workload.model.parallelism.tensor=1"]
JOBS = {  # the job under each layout whose files are many items, a mixture of experts, a resharded load
    "dcp": ("llama3_70b", 64, DCP),
    "megatron": ("llama3_70b", 64, ["++workload.checkpoint.layout=megatron"]),
    "dcp_moe": ("qwen3_30b_a3b", 16, DCP),
    "dcp_resharded": ("llama3_8b", 8, [*DCP, "++workload.restore.world_size=6"]),
    "megatron_tp": ("llama3_8b", 8, ["++workload.checkpoint.layout=megatron", "++workload.restore.tensor=2"]),
    "dcp_model_only": ("llama3_8b", 8, [*DCP, "++workload.restore.model_only=true"]),
}


def _workload(job: str, scale: float, miniature: str = "sample"):
    name, world, extra = JOBS[job]
    w = compose([f"workload={name}", *extra, f"++workload.checkpoint.scale={scale}",
                 f"++workload.checkpoint.miniature={miniature}"])[0]
    check_job(w, world)
    return w, world


def _plan(job: str, scale: float, miniature: str = "sample"):
    w, world = _workload(job, scale, miniature)
    return w, make_plan(w, world)


def _items_read(plan, restore, item_size) -> list[list[tuple[int, str, int]]]:
    """Each load rank's reads as the items they cover: (writer rank, file name, id of the item), walking the files'
    items by their stored sizes (a read must cover its items whole, as DCP reads a stored archive)."""
    out = []
    for reader in restore.ranks:
        mine = []
        for f in reader.files:
            file = plan.ranks[f.rank].files[f.index]
            assert isinstance(file, ItemFile)
            starts, at = {}, 0
            for item in file.items:
                starts[at], at = item, at + item_size(item)
            for offset, length in f.ranges or ((0, file.size),):
                while length > 0:
                    item = starts[offset]  # a read starts where an item does
                    mine.append((f.rank, file.stem, id(item)))
                    offset, length = offset + item_size(item), length - item_size(item)
                assert length == 0
        out.append(mine)
    return out


@pytest.mark.parametrize("job", JOBS)
def test_a_sample_keeps_whole_items_of_the_full_plan_and_its_load_reads_what_the_full_load_reads_of_them(job):
    w, sample = _plan(job, 0.002)
    sample.validate()
    full = sample.full_size
    assert sample.sample and full is not None and not full.sample
    kept: set[tuple[int, str, int]] = set()  # (rank, file, item): alike ranks share one Item object
    for r, whole in zip(sample.ranks, full.ranks, strict=True):
        for f in r.files:
            same = next(g for g in whole.files if g.stem == f.stem)
            places = [next(k for k, i in enumerate(same.items) if i is item) for item in f.items]
            assert places == sorted(places) and f.items  # the full file's items, in its order, none written twice
            kept |= {(r.rank, f.stem, id(i)) for i in f.items}
    item_size = get_layout(w.checkpoint.layout).item_size
    whole_load = restore_plan(w, full)
    given = restore_plan(w, sample, whole_load)  # as a run plans it, the full size's load at hand
    assert given == restore_plan(w, sample)
    mapped = _items_read(sample, given, item_size)
    at_full = _items_read(full, whole_load, item_size)
    assert len(mapped) == len(at_full)
    assert mapped == [[read for read in reads if read in kept] for reads in at_full]
    assert any(mapped)


@pytest.mark.parametrize("job", ["dcp", "megatron"])
@pytest.mark.parametrize("scale", [0.0002, 0.005])
def test_the_sample_holds_the_scales_share_of_bytes_and_items_on_ranks_spread_over_every_process(job, scale):
    _, plan = _plan(job, scale)
    writers = [r.rank for r in plan.ranks if r.files]
    for processes in (1, 2, 4, 8, 16, 32):  # each plays a contiguous block of the 64 ranks
        if (len(writers) == 8 and processes <= 8) or len(writers) >= 2 * processes:
            assert {rank // (64 // processes) for rank in writers} == set(range(processes))
    full = plan.full_size
    items, full_items = (sum(len(f.items) for r in p.ranks for f in r.files) for p in (plan, full))
    bytes_share, items_share = plan.stored_bytes / full.stored_bytes, items / full_items
    # an item at least on each of 8 writing ranks: Megatron's 0.0002 is 2.8 items' worth, so it holds more (5.7x)
    assert 0.8 < bytes_share / scale < 1.25 if items >= 20 else bytes_share / scale > 1
    assert 0.8 < items_share / bytes_share < 1.25 if items >= 20 else True  # stratified by size: alike shares


def test_runs_cover_every_position_once_in_runs_of_about_every():
    for n, every in ((1000, 1.5), (1000, 7.3), (5, 10.0), (0, 3.0), (10, 1.0)):
        got = runs(n, every)
        assert [p for lo, hi in got for p in range(lo, hi)] == list(range(n))
        assert len(got) == math.ceil(n / every) if n else got == []
        assert all(math.floor(every) <= hi - lo <= math.ceil(every) for lo, hi in got[:-1])


def _halves(weight: list[int]) -> KeptByHalves:
    halves = KeptByHalves(len(weight))
    for j, nbytes in enumerate(weight):
        halves.add(j, nbytes)
    return halves


def test_the_lightest_half_takes_the_next_item_down_to_one_rank():
    rng = random.Random(1)
    assert _halves([5, 0, 0, 0]).lightest([0, 1, 2, 3], rng) in (2, 3)  # the right half is lighter; then a tie
    assert _halves([0, 9, 1, 0]).lightest([0, 1, 2, 3], rng) == 3  # halves 9 and 1, then 1 and 0
    assert _halves([0, 0, 0, 0]).lightest([1], rng) == 1  # only one rank has an item of this size
    assert _halves([4, 4, 0]).lightest([0, 1, 2], rng) == 2  # halves of 1 and 2 ranks, by bytes a rank
    assert _halves([3, 1, 0, 8]).lacking(1) == 4.0 and _halves([3, 1, 0, 8]).lacking(2) == -4.0
    assert _halves([7]).lacking(0) == 0.0  # no other half


def test_a_sample_at_the_full_size_is_refused():
    with pytest.raises(ConfigError) as refused:
        compose(["workload=llama3_8b", *DCP, "++workload.checkpoint.miniature=sample"])
    assert "workload.checkpoint.miniature" in str(refused.value) and "checkpoint.scale=1" in str(refused.value)


def _one_run_projection(plan, per_item: float, per_byte: float) -> float:
    """A time of ``per_item`` s an item and ``per_byte`` s a byte, measured on ``plan`` and taken to its full size by
    the one-run rule where all of it moves the ranks' files (io.scaled.projected_full_size: data_seconds over the
    bytes ratio, nothing else measured)."""
    items = sum(len(f.items) for r in plan.ranks for f in r.files)
    return (per_item * items + per_byte * plan.stored_bytes) * plan.full_size.stored_bytes / plan.stored_bytes


@pytest.mark.parametrize("job", ["dcp", "megatron"])
def test_one_runs_projection_of_a_time_per_item_and_per_byte_holds_across_scales_with_a_sample(job):
    """The issue's figures: some 240 us of CPU an item (DCP's pattern on 2 processes), a disk of about 1 GB/s."""
    per_item, per_byte = 240e-6, 1e-9
    small, large = (_one_run_projection(_plan(job, s)[1], per_item, per_byte) for s in (0.0002, 0.005))
    assert small == pytest.approx(large, rel=0.2)
    shrunk_small, shrunk_large = (_one_run_projection(_plan(job, s, "shrink")[1], per_item, per_byte)
                                  for s in (0.0002, 0.005))
    assert shrunk_small > 3 * shrunk_large  # every item kept, shrunk: the time per item is scaled with the bytes


def test_a_sample_is_refused_where_the_layouts_files_are_not_many_items():
    with pytest.raises(ConfigError) as refused:
        check_job(compose(["workload=llama3_70b", "++workload.checkpoint.layout=deepspeed",
                           "++workload.checkpoint.scale=0.01", "++workload.checkpoint.miniature=sample"])[0])
    assert "workload.checkpoint.miniature" in str(refused.value) and "dcp or megatron" in str(refused.value)


def test_the_sample_spreads_its_bytes_over_the_processes_as_the_full_size_does_and_says_where_it_cannot():
    """Megatron's llama3_70b at 0.0002: its share is 2.8 items' worth, most bytes in items of 16 to 112 MB, and it
    keeps 9 items on 8 ranks. Placed largest first on the lighter half of the chosen ranks, they spread over 2 and
    4 processes within a tenth of the full size's share (left to chance, 74 % lay on one of 2); on 8 processes,
    one rank each, a rank's one item cannot match, and the console says so. DCP's 28 items spread likewise."""
    from dlio_ckpt.plan.layouts import file_format
    from dlio_ckpt.plan.view import scaled_figures
    from dlio_ckpt.run.context import uneven

    for job in ("megatron", "dcp"):
        w, plan = _plan(job, 0.0002)
        for processes in (2, 4):
            figures = scaled_figures(plan, file_format(w), processes)
            here, full = (figures[k]["busiest_process_share"] for k in ("this_run", "full_size"))
            assert full == pytest.approx(1 / processes, abs=0.01) and here < 1.1 * full, (job, processes)
            assert uneven(here, full, processes) == ""
    w, plan = _plan("megatron", 0.0002)
    figures = scaled_figures(plan, file_format(w), 8)
    said = uneven(figures["this_run"]["busiest_process_share"], figures["full_size"]["busiest_process_share"], 8)
    assert said.startswith("; one of the 8 processes holds 23% of these bytes (13% at full size)"), said
