"""Per-request latency, metadata calls, stonewall and repeats (issue 39), in this process: the histogram against
exact order statistics, a run whose storage calls take known times (a clock the test moves, so every figure is
known exactly, and one slow request the test makes happen), outliers and the stonewall from made-up records, the
repeats' interval and ``diff``'s use of it, ``--repeat`` and ``report``'s latency figure on a run made here.
(No e2e counterpart: the timing wrapper is the same object under mpiexec; processes add only the merge, which
``outliers`` and the histograms' addition are tested for here.)"""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import pytest

from dlio_ckpt.io.backends import SyncingWriter, VectorWriter, ViewsReader
from dlio_ckpt.io.backends import timed as timed_module
from dlio_ckpt.io.backends.local_fs import LocalFSBackend, LocalReader, LocalWriter
from dlio_ckpt.io.backends.options import LocalFSOptions
from dlio_ckpt.io.backends.timed import TimedBackend
from dlio_ckpt.io.latency import Histogram, LatencyRecorder, merged
from dlio_ckpt.results.latency import outliers, stonewall
from dlio_ckpt.results.summary import GIB, OpRecord
from dlio_ckpt.tools.readers.compare import compare_metrics, regressions
from dlio_ckpt.tools.readers.repeated import order_interval
from dlio_ckpt.tools.readers.runfiles import Run

MS = 1_000_000


def _histogram(values_ns: list[int]) -> Histogram:
    rec = LatencyRecorder()
    for v in values_ns:
        rec.record("x", v, 1)
    return rec.take()["x"]


def test_histogram_percentiles_are_within_0_4_percent_of_the_exact_ones_and_merge_exactly():
    rng = random.Random(39)
    values = [int(rng.lognormvariate(13, 1.5)) for _ in range(20_000)]  # ~0.4 ms median, a long tail
    h = _histogram(values)
    exact = sorted(values)
    for q in (0.5, 0.9, 0.99, 0.999):
        want = exact[-(-int(q * len(exact) * 1_000_000) // 1_000_000) - 1]  # the request of rank ceil(q n)
        assert abs(h.quantile_ns(q) - want) <= 0.004 * want + 1, q
    assert (h.count, h.total_ns, h.min_ns, h.max_ns, h.bytes) == (len(values), sum(values), exact[0], exact[-1],
                                                                 len(values))
    halves = merged([{"x": _histogram(values[:7000])}, {"x": _histogram(values[7000:])}])["x"]
    assert halves == h


def test_a_percentile_is_within_1_256_of_the_value_at_the_widest_buckets():
    """io/latency.py's bound at its worst: the two ends of the buckets widest against their values (low = 128 *
    2**e, width 2**e), each the true percentile of a histogram of the two; a bucket's edge would be 1/128 off."""
    worst = 0.0
    for e in range(41):
        low, top = 128 << e, (129 << e) - 1
        h = _histogram([low, top])
        for q, value in ((0.5, low), (1.0, top)):
            error = abs(h.quantile_ns(q) - value) / value
            assert error < 1 / 256, (e, q, error)
            worst = max(worst, error)
    assert worst > 0.99 / 256  # the bound is met, not loose


def test_the_wrapper_keeps_the_writers_and_readers_shape(tmp_path):
    """The engine asks a writer whether it syncs (a runtime protocol check) and a reader whether it lends views."""
    backend = TimedBackend(LocalFSBackend(str(tmp_path), LocalFSOptions()), LatencyRecorder())
    writer = backend.open_write(str(tmp_path / "f"), False)
    assert isinstance(writer, SyncingWriter)
    writer.write(memoryview(b"abc"))
    writer.finish()
    reader = backend.open_read(str(tmp_path / "f"), False)
    assert not hasattr(reader, "views") and reader.size() == 3
    reader.close()
    assert backend.root == str(tmp_path)  # the wrapped backend's own attributes, asked through
    assert {k: h.count for k, h in backend.recorder.take().items()} == \
        {"create": 1, "write": 1, "close": 2, "open": 1, "stat": 1}


class _Gathering:
    """A plugin's writer that gathers pieces into one call but has no descriptor of its own to sync."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def write(self, data: memoryview) -> None:
        self.calls.append(len(data))

    def writev(self, parts: list[memoryview]) -> None:
        self.calls.append(sum(len(p) for p in parts))

    def finish(self) -> None: ...
    def abort(self) -> None: ...


class _Views:
    def views(self):
        yield memoryview(b"ab")

    def readinto(self, buf: memoryview) -> int:
        return 0

    def close(self) -> None: ...


def test_the_wrapper_keeps_every_further_call_its_writer_or_reader_offers_in_any_combination(tmp_path, monkeypatch):
    """A writer that gathers but does not sync keeps its ``writev``, timed as one write of all its bytes (a wrapper
    chosen by whether the writer syncs first would have dropped it); a reader lending its buffers keeps ``views``."""
    inner = LocalFSBackend(str(tmp_path), LocalFSOptions())
    gathering = _Gathering()
    monkeypatch.setattr(inner, "open_write", lambda path, odirect: gathering)
    monkeypatch.setattr(inner, "open_read", lambda path, odirect: _Views())
    backend = TimedBackend(inner, LatencyRecorder())
    writer = backend.open_write(str(tmp_path / "f"), False)
    assert isinstance(writer, VectorWriter) and not isinstance(writer, SyncingWriter)
    writer.writev([memoryview(b"ab"), memoryview(b"cde")])
    writer.finish()
    reader = backend.open_read(str(tmp_path / "f"), False)
    assert isinstance(reader, ViewsReader) and [bytes(v) for v in reader.views()] == [b"ab"]
    assert gathering.calls == [5]
    took = backend.recorder.take()
    assert (took["write"].count, took["write"].bytes, took["read"].bytes) == (1, 5, 2)


class _Clock:
    """A clock per thread that only the storage's calls move: each call then takes exactly what the test says."""

    def __init__(self) -> None:
        self._local = threading.local()

    def now(self) -> int:
        return getattr(self._local, "t", 0)

    def advance(self, ns: int) -> None:
        self._local.t = self.now() + ns


@pytest.fixture
def known_latencies(monkeypatch):
    """Every write and read request takes 3 ms, a rename 40 ms, a folder 5 ms; the first write of rank 1's file
    takes 250 ms (the slow request the test makes happen)."""
    clock = _Clock()
    monkeypatch.setattr(timed_module, "perf_counter_ns", clock.now)
    slow: list[str] = []

    def taking(ns: int, original, first_slow: bool = False):
        def call(self, *args):
            path = getattr(self, "path", "")
            if first_slow and "__1_0" in path and not slow:
                slow.append(path)
                clock.advance(250 * MS)
            else:
                clock.advance(ns)
            return original(self, *args)
        return call
    monkeypatch.setattr(LocalWriter, "write", taking(3 * MS, LocalWriter.write, first_slow=True))
    monkeypatch.setattr(LocalWriter, "write_at", taking(3 * MS, LocalWriter.write_at, first_slow=True))
    monkeypatch.setattr(LocalReader, "read_at", taking(3 * MS, LocalReader.read_at))
    monkeypatch.setattr(LocalFSBackend, "rename", taking(40 * MS, LocalFSBackend.rename))
    monkeypatch.setattr(LocalFSBackend, "makedirs", taking(5 * MS, LocalFSBackend.makedirs))
    return slow


DCP = ["workload=tiny", "++workload.checkpoint.layout=dcp", "++workload.model.parallelism.tensor=1",
       "--world-size", "2", "++workload.checkpoint.checkpoint_folder=ck", "++hydra.run.dir=out",
       "++workload.checkpoint.num_checkpoints_read=1"]


def test_summary_reports_latencies_injected_at_known_values(tmp_path, dlio_here, known_latencies):
    r = dlio_here(DCP)
    assert r.returncode == 0, r.stderr
    assert known_latencies and known_latencies[0].endswith("__1_0.distcp")  # the slow request happened
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    save, load = s["checkpoints"]["save"][0]["latency"], s["checkpoints"]["load"][0]["latency"]
    write = save["kinds"]["write"]
    assert write["max_ms"] == 250.0  # exact: the slow request
    assert write["min_ms"] == 3.0  # exact: every other request took 3 ms
    assert write["p50_ms"] == write["p90_ms"] == pytest.approx(3.0, rel=0.004)  # a bucket's midpoint: within 0.4 %
    assert write["count"] > 100 and write["of"] == "data" and write["bytes"] > 0
    assert write["mean_ms"] == pytest.approx((3.0 * (write["count"] - 1) + 250) / write["count"])
    assert load["kinds"]["read"]["p50_ms"] == load["kinds"]["read"]["max_ms"] == 3.0  # within [min, max]: exact
    # DCP's .metadata: written by rank 0 as .metadata.tmp and renamed (40 ms), read by every rank first
    assert save["kinds"]["coordinator rename"] == {**save["kinds"]["coordinator rename"], "count": 1, "max_ms": 40.0,
                                                   "p50_ms": 40.0, "of": "metadata"}
    assert save["kinds"]["coordinator write"]["count"] >= 1 and load["kinds"]["coordinator read"]["p99_ms"] == 3.0
    assert save["metadata"]["by_kind"]["coordinator rename"] == 1 and save["metadata"]["coordinator_calls"] > 2
    assert save["kinds"]["create"]["max_ms"] == 0.0  # the calls the test left alone took no time on its clock
    # the step folders are made before the save's clock starts: outside the checkpoints, 5 ms each
    outside = s["latency"]["outside_checkpoints"]["kinds"]
    assert outside["mkdir"]["p50_ms"] == outside["mkdir"]["max_ms"] == 5.0
    assert s["latency"]["run"]["kinds"]["write"]["count"] == write["count"] + s["checkpoints"]["save"][1][
        "latency"]["kinds"]["write"]["count"]
    assert s["metric"]["save_checkpoint_write_p99_ms"] == pytest.approx(3.0, rel=0.004)  # one slow write: not p99
    assert s["metric"]["save_checkpoint_metadata_p99_ms"] == pytest.approx(40.0, rel=0.004)
    wall = s["checkpoints"]["save"][0]["stonewall"]
    assert wall["first_done_process"] == wall["last_done_process"] == 0 and wall["first_to_last_seconds"] == 0.0
    hist = json.loads((tmp_path / "out" / "latency_histograms.json").read_text())["phases"]
    assert sum(n for _, n in hist["save"]["write"]["buckets"]) == hist["save"]["write"]["count"]
    assert "save_ckpt1 (" in r.stdout and "p99 write 3 ms" in r.stdout  # the console says it too


def _ms(*values: float) -> Histogram:
    return _histogram([int(v * MS) for v in values])


def test_a_process_far_slower_than_the_others_is_named():
    fast, slow = _ms(*[1.0] * 100), _ms(*[1.0] * 90, *[10.0] * 10)
    found = outliers({0: {"write": fast}, 1: {"write": fast}, 2: {"write": slow}, 3: {"write": fast}}, slowest=2)
    assert [(o.process, o.kind, o.p99_ms, o.others_p99_ms, o.slowest_process) for o in found] == \
        [(2, "write", pytest.approx(10.0, rel=0.004), pytest.approx(1.0, rel=0.004), True)]
    jitter = _ms(*[0.004] * 100)  # 4 us against 1 us is no finding
    assert not outliers({0: {"open": _ms(*[0.001] * 100)}, 1: {"open": jitter}})


def _record(process: int, duration: float, nbytes: int, files: tuple = ()) -> OpRecord:
    return OpRecord(phase="save", index=1, step=1, process=process, start=100.0, end=100.0 + duration,
                    duration=duration, bytes=nbytes, files=len(files) or 1, file_times=files)


def test_stonewall_is_what_every_process_moved_until_the_first_was_done():
    # process 0 writes one file over 1 s; process 1 two files, the second still half written at 1 s
    a = _record(0, 1.0, 4 * GIB, (("a", 100.0, 101.0, 4 * GIB),))
    b = _record(1, 2.0, 4 * GIB, (("b", 100.0, 100.5, 2 * GIB), ("c", 100.5, 102.0, 2 * GIB)))
    wall = stonewall([a, b])
    assert wall is not None
    assert wall.bytes_by_first_done == pytest.approx(4 * GIB + 2 * GIB + 2 * GIB / 3, abs=1)
    assert wall.estimated_from == "file_times"
    assert wall.GiB_per_second == pytest.approx(4 + 2 + 2 / 3)
    assert (wall.first_done_process, wall.last_done_process, wall.first_to_last_seconds) == (0, 1, 1.0)
    untimed = stonewall([_record(0, 1.0, 100), _record(1, 4.0, 100)])  # real modes: no file times
    assert untimed is not None and untimed.bytes_by_first_done == 125 and untimed.estimated_from == "process_bytes"
    idle = stonewall([_record(0, 2.0, 100), _record(1, 0.001, 0)])  # process 1 has nothing to write (Lightning's)
    assert idle is not None and (idle.first_done_process, idle.bytes_by_first_done) == (0, 100)


def test_the_medians_interval_is_the_order_statistic_one():
    assert order_interval([5.0, 1.0, 3.0, 2.0, 4.0]) == (1.0, 5.0, 1 - 2 / 32)  # 5 repeats: 93.75 % at best
    lo, hi, coverage = order_interval([float(x) for x in range(1, 11)])
    assert (lo, hi) == (2.0, 9.0) and coverage == pytest.approx(1 - 2 * 11 / 1024)


def _run(path: str, mean_gib: float, duration: float, intervals: dict | None = None) -> Run:
    metric = {"save_checkpoint_io_mean_GiB_per_second": mean_gib, "save_checkpoint_duration_mean_seconds": duration}
    return Run(path, None, {"metric": metric}, intervals=intervals or {})  # type: ignore[arg-type]


def test_diff_calls_a_change_a_regression_only_where_the_intervals_separate():
    name = "save_checkpoint_io_mean_GiB_per_second"
    a = _run("A", 10.0, 1.0, {name: (9.0, 11.0)})
    overlapping = _run("B", 8.0, 1.0, {name: (7.5, 9.5)})  # -20 %, but inside the spread of both
    [c] = compare_metrics(a, overlapping, 5.0, name)
    assert c.verdict == "same (intervals overlap)" and not regressions([c])
    apart = _run("B", 8.0, 1.0, {name: (7.5, 8.5)})
    assert [c.name for c in regressions(compare_metrics(a, apart, 5.0, name))] == [name]
    one_sided = _run("B", 8.0, 1.0)  # B was run once: the threshold alone judges
    assert [c.name for c in regressions(compare_metrics(a, one_sided, 5.0, name))] == [name]


@pytest.mark.slow  # two runs, a diff and a report: about 8 s
def test_repeat_runs_the_job_n_times_and_reports_intervals_that_diff_and_report_read(tmp_path, dlio_here):
    r = dlio_here([*DCP, "--repeat", "2"])
    assert r.returncode == 0, r.stderr
    body = json.loads((tmp_path / "out" / "repeats.json").read_text())
    assert body["repeats"] == 2 and [Path(p).name for p in body["runs"]] == ["repeat1", "repeat2"]
    m = body["metrics"]["save_checkpoint_duration_mean_seconds"]
    assert len(m["values"]) == 2 and m["low"] == min(m["values"]) and m["high"] == max(m["values"])
    assert m["coverage"] == 0.5 and "order-statistic" in body["interval"]
    d = dlio_here(["diff", "out", "out", "--format", "json"])
    assert d.returncode == 0, d.stdout + d.stderr
    changes = {c["name"]: c for c in json.loads(d.stdout)["metrics"]}
    assert changes["save_checkpoint_duration_mean_seconds"]["a_interval"] == [m["low"], m["high"]]
    assert changes["save_checkpoint_duration_mean_seconds"]["a"] == m["median"]
    # the same from repeats run as jobs of their own: `repeats DIR` over their folders writes the same file
    (tmp_path / "out" / "repeats.json").unlink()
    again = dlio_here(["repeats", "out"])
    assert again.returncode == 0 and again.stdout.strip().endswith("repeats.json"), again.stderr
    assert json.loads((tmp_path / "out" / "repeats.json").read_text()) == body
    one = dlio_here(["repeats", "out/repeat1"])
    assert one.returncode == 2 and "DIR='out/repeat1': holds 0 repeat folder(s)" in one.stderr, one.stderr
    rep = dlio_here(["report", "out/repeat2"])
    assert rep.returncode == 0, rep.stderr
    assert (tmp_path / "out" / "repeat2" / "latency.png").stat().st_size > 10_000
    assert dlio_here([*DCP, "--repeat", "0"]).stderr.strip().endswith(
        "--repeat=0: must be at least 1 (the number of times the job runs)")
