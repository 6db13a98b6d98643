"""``trace-diff``'s parts, in process: the KS distance (values worked by hand), strace's lines as ``strace -f -ttt -T
-y -o FILE`` writes them (a call split by another thread's, a relative open, a failed call), DFTracer 2's own form
(numeric ``ph``, files by hash), and its refusals. Counterparts: ``against_frameworks/test_trace_diff.py`` (a real
save judged), ``unit/test_trace.py`` (the run's trace)."""

from __future__ import annotations

import gzip
import json

import pytest

from dlio_ckpt.tools.readers.trace_compare import (
    ITEM_KIND,
    Call,
    compare_phase,
    gaps,
    ks_distance,
    on_files,
    render_table,
    side,
    strace_calls,
    traced_calls,
)


@pytest.mark.parametrize(("a", "b", "d"), [
    ([1, 2, 3], [1, 2, 3], 0.0),
    ([1, 2, 3], [4, 5, 6], 1.0),
    ([1, 2, 3, 4], [3, 4, 5, 6], 0.5),  # F_a(2) = 1/2, F_b(2) = 0
    ([1, 1, 1, 2], [1, 2, 2, 2], 0.5),  # ties: F_a(1) = 3/4, F_b(1) = 1/4
    ([5], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.5),  # F_b(4) = 0.4 against 0, F_b(5) = 0.5 against 1
])
def test_the_ks_distance_is_the_largest_gap_between_the_two_distribution_functions(a, b, d):
    assert ks_distance([float(x) for x in a], [float(x) for x in b]) == pytest.approx(d)


def test_the_ks_distance_of_nothing_is_none_and_of_one_empty_side_is_one():
    assert ks_distance([], []) is None
    assert ks_distance([1.0], []) == 1.0


STRACE = """\
9441  1796583241.427793 write(7<socket:[200389]>, "HYD\\0", 4 <unfinished ...>
9468  1796583265.406963 openat(AT_FDCWD</tmp/x>, "ck/a.distcp", O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0666) = 36</tmp/x/ck/a.distcp> <0.000056>
9441  1796583241.427884 <... write resumed>) = 4 <0.000064>
9468  1796583265.407000 write(36</tmp/x/ck/a.distcp>, "PK\\3\\4"..., 704 <unfinished ...>
9469  1796583265.407010 openat(AT_FDCWD</tmp/x>, "/tmp/x/ck/gone", O_RDONLY) = -1 ENOENT (No such file or directory) <0.000014>
9468  1796583265.407100 <... write resumed>) = 704 <0.000090>
[pid  9469] 1796583265.407200 pwrite64(37</tmp/x/ck/b.distcp>, ""..., 256512, 4096) = 256512 <0.000300>
9468  1796583265.408000 fsync(36</tmp/x/ck/a.distcp>) = 0 <0.001000>
9468  1796583265.409000 rename("/tmp/x/ck/.metadata.tmp", "/tmp/x/ck/.metadata") = 0 <0.000088>
"""  # noqa: E501 - strace's lines as it writes them


def test_strace_lines_become_calls_with_their_thread_file_time_and_size(tmp_path):
    (tmp_path / "job.strace").write_text(STRACE)
    calls = strace_calls([tmp_path / "job.strace"])
    us = 1796583265.406963e6
    assert [(c.kind, c.file, c.thread, c.size) for c in calls] == [
        ("open", "/tmp/x/ck/a.distcp", 9468, 0),  # relative to the folder -y names beside AT_FDCWD
        ("write", "socket:[200389]", 9441, 4),  # joined again from its two lines
        ("write", "/tmp/x/ck/a.distcp", 9468, 704),  # the failed open is no call
        ("write", "/tmp/x/ck/b.distcp", 9469, 256512),
        ("fsync", "/tmp/x/ck/a.distcp", 9468, 0),
        ("rename", "/tmp/x/ck/.metadata.tmp", 9468, 0)]
    assert calls[0].start == pytest.approx(us) and calls[0].duration == pytest.approx(56)
    assert calls[2].start == pytest.approx(1796583265.407e6) and calls[2].duration == pytest.approx(90)


def test_dftracer_2s_own_form_is_read_too(tmp_path):
    """As DFTracer 2.2.0's preloaded library wrote a real ``dcp.save``'s calls (fields as seen): no ``[``, ``ph`` 1,
    the file as a hash named by an ``FH`` metadata event, a write's bytes as its result ``ret``; a seek is no call
    compared, a failed call none at all, and a forked process's empty file is passed over."""
    lines = [
        {"name": "FH", "cat": "dftracer", "type": 1, "pid": 3, "tid": 3, "ph": 4,
         "args": {"hhash": "h", "name": "/ck/a.distcp", "value": "f1"}},
        {"id": 7, "name": "lseek64", "cat": "POSIX", "type": 3, "pid": 3, "tid": 4, "ts": 90, "dur": 4, "ph": 1,
         "args": {"hhash": "h", "ret": 0, "whence": 1, "offset": 0, "fhash": "f1"}},
        {"id": 11, "name": "write", "cat": "POSIX", "type": 3, "pid": 3, "tid": 4, "ts": 100, "dur": 13, "ph": 1,
         "args": {"hhash": "h", "ret": 1261, "count": 1261, "fhash": "f1"}},
        {"id": 12, "name": "write", "cat": "POSIX", "type": 3, "pid": 3, "tid": 4, "ts": 105, "dur": 1, "ph": 1,
         "args": {"hhash": "h", "ret": -1, "count": 1261, "fhash": "f1"}},
        {"id": 661, "name": "fsync", "cat": "POSIX", "type": 3, "pid": 3, "tid": 4, "ts": 110, "dur": 3629, "ph": 1,
         "args": {"hhash": "h", "fhash": "f1"}}]
    with gzip.open(tmp_path / "job-1-preload.pfw.gz", "wt") as fh:
        fh.write("\n".join(json.dumps(e) for e in lines) + "\n")
    (tmp_path / "job-2-fork.pfw.gz").write_bytes(b"")
    assert on_files(traced_calls([tmp_path]), None) == [Call("write", "/ck/a.distcp", 4, 100.0, 13.0, 1261, process=3),
                                           Call("fsync", "/ck/a.distcp", 4, 110.0, 3629.0, 0, process=3)]


def test_the_gaps_are_between_data_calls_starts_every_thread_together():
    calls = [Call("write", "a", 1, 0.0, 5.0, 1), Call("write", "b", 2, 3.0, 1.0, 1), Call("fsync", "a", 1, 4.0, 9.0),
             Call("write", "a", 1, 10.0, 1.0, 1)]
    assert gaps(calls) == [3.0, 7.0]


def test_a_run_without_a_trace_is_refused_naming_the_key_that_makes_one(dlio_here, tmp_path):
    (tmp_path / "job.strace").write_text(STRACE)
    (tmp_path / "run").mkdir()
    r = dlio_here(["trace-diff", str(tmp_path / "job.strace"), str(tmp_path / "run")])
    assert r.returncode == 2 and "++workload.checkpoint.trace=True" in r.stderr and "RUN" in r.stderr, r.stderr


def test_a_job_trace_with_no_call_under_the_folder_asked_is_refused(dlio_here, tmp_path):
    (tmp_path / "job.strace").write_text(STRACE)
    run = tmp_path / "run"
    run.mkdir()
    with gzip.open(run / "0_trace.pfw.gz", "wt") as fh:
        fh.write("[\n]\n")
    r = dlio_here(["trace-diff", str(tmp_path / "job.strace"), str(run), "--under", "/elsewhere"])
    assert r.returncode == 2 and "under /elsewhere" in r.stderr, r.stderr


def test_a_trace_that_is_not_there_is_refused(dlio_here, tmp_path):
    r = dlio_here(["trace-diff", str(tmp_path / "nothing.pfw"), str(tmp_path)])
    assert r.returncode == 2 and "nothing.pfw" in r.stderr, r.stderr


def test_the_time_per_item_that_would_make_up_the_duration_is_spread_over_the_busiest_ranks_items():
    """The job's save took 0.2 s longer than the run's (0.5 s against 0.3 s); the run played 10 us before each of
    its items, 100 of them on rank 1 and 50 on rank 2: 10 + 200,000 / 100 = 2,010 us. A job faster than the
    run asks for nothing below 0. What was played is the shortest item's (a busy loop lasts at least what it was
    asked, longer where preempted). The items are no calls of the run's."""
    def writes(seconds: float) -> list[Call]:
        return [Call("write", "/ck/a", 1, 0.0, 1.0, 4096), Call("write", "/ck/a", 1, seconds * 1e6 - 1.0, 1.0, 4096)]

    items = [Call(ITEM_KIND, "/ck/a", 1, 0.0, 10.0 + k % 3 * 50, process=1) for k in range(100)] + \
        [Call(ITEM_KIND, "/ck/b", 2, 0.0, 10.0, process=2) for _ in range(50)]  # some preempted: longer
    slower = compare_phase("save", [writes(0.5)], [writes(0.3)], items)
    assert slower.item is not None and slower.run.calls == 2
    assert (slower.item.items_per_rank, slower.item.played_us) == (100, 10.0)
    assert slower.item.suggested_us == pytest.approx(2010.0)
    assert "++workload.checkpoint.framework_item_us=2010" in render_table([slower])
    assert compare_phase("save", [writes(0.1)], [writes(0.3)], items).item.suggested_us == 0.0
    assert compare_phase("save", [writes(0.1)], [writes(0.3)]).item is None


def test_checkpoints_pooled_have_the_gaps_within_each_a_checkpoints_mean_counts_and_their_median_duration():
    """Three saves: the first 2 writes of 100 bytes 10 us apart, lasting 11 us, and an fsync; the second 3 writes on
    two files by two threads, lasting 49 us; the third 1 write, stalled, lasting 1000 us. No gap spans two saves
    (990 us of training between the first two); each count is a save's mean (2 writes, 1/3 of an fsync, whole where
    it is), the duration the saves' median (49 us, where their mean is 353), the throughput a save's bytes over it."""
    first = [Call("write", "/ck/1/a", 1, 0.0, 1.0, 100), Call("write", "/ck/1/a", 1, 10.0, 1.0, 100),
             Call("fsync", "/ck/1/a", 1, 12.0, 1.0)]
    second = [Call("write", "/ck/2/a", 1, 1000.0, 1.0, 100), Call("write", "/ck/2/a", 1, 1030.0, 1.0, 100),
              Call("write", "/ck/2/b", 2, 1040.0, 9.0, 100)]
    stalled = [Call("write", "/ck/3/a", 1, 5000.0, 1000.0, 100)]
    assert gaps(first, second, stalled) == [10.0, 30.0, 10.0]
    pooled = side(first, second, stalled)
    assert (pooled.checkpoints, pooled.calls, pooled.writes, pooled.files, pooled.bytes) == (3, 7 / 3, 2, 4 / 3, 200)
    assert pooled.fsyncs == pytest.approx(1 / 3) and isinstance(pooled.bytes, int)
    assert pooled.seconds == pytest.approx(49e-6) and pooled.throughput == pytest.approx(200 / 49e-6)
    assert pooled.calls_per_file == 7 / 4 and pooled.threads_per_file == 1.0 and pooled.threads == 4 / 3


def _strace_of_saves(path, root, saves: int) -> None:
    """An strace of ``saves`` saves, one folder each (``root/s1``...), 1 s apart: 3 writes of 4096 bytes."""
    lines = [f"7  {1000.0 + k + w * 1e-4:.6f} write(3<{root}/s{k + 1}/a>, \"\"..., 4096) = 4096 <0.000010>"
             for k in range(saves) for w in range(3)]
    path.write_text("\n".join(lines) + "\n")


def _run_of_saves(run, root, saves: int) -> None:
    """A run folder whose trace (ours) has ``saves`` saves, checkpoints 1, 2...: 3 writes of 4096 bytes each."""
    run.mkdir()
    events = [{"name": "write", "cat": "POSIX", "ph": "X", "pid": 5, "tid": 5, "ts": 1e6 * k + 100 * w, "dur": 10,
               "args": {"fname": f"{root}/s{k}/a", "size": 4096, "rank": 0, "phase": "save", "checkpoint": k}}
              for k in range(1, saves + 1) for w in range(3)]
    with gzip.open(run / "0_trace.pfw.gz", "wt") as fh:
        fh.write("[\n" + "\n".join(json.dumps(e) for e in events) + "\n")


def test_each_under_folder_is_one_of_the_jobs_checkpoints_held_against_as_many_of_the_runs(dlio_here, tmp_path):
    """Two folders of the job's trace against the first two of the run's three saves, pooled; the checkpoints named
    are taken instead (a job's trace of ours: each folder its own); a run with fewer saves than the job's folders (a
    folder given twice is one), or a checkpoint it does not have, is refused."""
    _strace_of_saves(tmp_path / "job.strace", "/ck", 4)
    _run_of_saves(tmp_path / "run", "/run", 3)
    common = [str(tmp_path / "job.strace"), str(tmp_path / "run"), "--format", "json"]
    r = dlio_here(["trace-diff", *common, "--under", "/ck/s1", "--under", "/ck/s3"])
    (phase,) = json.loads(r.stdout)["phases"]
    assert (phase["job"]["checkpoints"], phase["run"]["checkpoints"]) == (2, 2), r.stderr
    assert (phase["job"]["writes"], phase["run"]["writes"], phase["job"]["bytes"]) == (3, 3, 3 * 4096)
    assert phase["gap_ks"] == 0.0  # 100 us apart in each save; a gap between saves (2 s, 1 s) would part them
    r = dlio_here(["trace-diff", *common, "--under", "/ck/s1", "--checkpoint", "2", "--checkpoint", "3",
                   "--checkpoint", "1"])
    (phase,) = json.loads(r.stdout)["phases"]
    assert (phase["job"]["checkpoints"], phase["run"]["checkpoints"]) == (1, 3), r.stderr
    # a job's trace of ours names its checkpoints: each folder is one, whatever --checkpoint names of the run's
    _run_of_saves(tmp_path / "ours", "/ck", 3)
    r = dlio_here(["trace-diff", str(tmp_path / "ours"), str(tmp_path / "run"), "--format", "json", "--under",
                   "/ck/s1", "--under", "/ck/s2/", "--under", "/ck/s2", "--checkpoint", "3", "--checkpoint", "1"])
    (phase,) = json.loads(r.stdout)["phases"]
    assert (phase["job"]["checkpoints"], phase["run"]["checkpoints"]) == (2, 2), r.stderr
    r = dlio_here(["trace-diff", *common, *(a for k in (1, 2, 3, 4, 2) for a in ("--under", f"/ck/s{k}"))])
    assert r.returncode == 2 and "has 3 checkpoints in phase save, fewer than the job's 4" in r.stderr, r.stderr
    r = dlio_here(["trace-diff", *common, "--checkpoint", "7"])
    assert r.returncode == 2 and "--checkpoint=7" in r.stderr and "(it has: 1, 2, 3)" in r.stderr, r.stderr
