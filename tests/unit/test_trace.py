"""``checkpoint.trace``: a run's DFTracer trace, read back by dftracer-utils (the reader dftracer-analyzer reads
traces with), holds every storage call summary.json counts, kind by kind, with its file, offset, size, rank, thread,
phase and checkpoint; the phases and checkpoints are events too. Its counterparts: ``unit/test_trace_diff.py``
(the comparison's arithmetic), ``against_frameworks/test_trace_diff.py`` (a real save's trace judged)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.support.cli import load

# a DCP save of two writer threads a rank, two ranks in this process, then a load: every thread of the engine
JOB = ["workload=tiny", "--world-size", "2", "++workload.model.parallelism.tensor=1",
       "++workload.checkpoint.layout=dcp", "++workload.checkpoint.files_per_rank=2",
       "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1",
       "++workload.checkpoint.fsync=True"]


def events(run: Path) -> list[dict]:
    """Every event of the run's traces as dftracer-utils reads them (its TraceViewer: the scan dftracer-analyzer's
    reader is built on), one dict per event with its args as ``args.NAME``."""
    utils = pytest.importorskip("dftracer.utils")
    traces = sorted(str(p) for p in run.glob("*_trace.pfw.gz"))
    assert traces, "no trace written"
    return [row for trace in traces for row in utils.TraceViewer(trace).collect().to_dicts()]


def test_a_trace_holds_every_call_summary_json_counts_with_its_file_offset_and_size(dlio_here, tmp_path):
    r = dlio_here([*JOB, "++workload.checkpoint.trace=True", "++workload.storage.storage_root=root",
                   "hydra.run.dir=out"])
    assert r.returncode == 0, r.stderr
    seen = events(tmp_path / "out")
    calls = [e for e in seen if e["cat"] == "POSIX"]
    summary = load(tmp_path / "out" / "summary.json")
    assert Counter(e["name"] for e in calls) == Counter(
        {kind: f["count"] for kind, f in summary["latency"]["run"]["kinds"].items()})
    for kind, f in summary["latency"]["run"]["kinds"].items():  # and the bytes each kind moved
        if f.get("bytes"):
            assert sum(e["args.size"] for e in calls if e["name"] == kind) == f["bytes"], kind
    assert all(e["args.rank"] == 0 and e["args.phase"] and e["pid"] and e["tid"] and e["ph"] for e in calls)
    saves = [e for e in calls if e["args.phase"] == "save"]
    assert {e["args.checkpoint"] for e in saves} == {1}
    assert len({e["tid"] for e in saves if e["name"] == "write"}) == 2  # the caller's thread and one more
    # each file's writes tile it: offsets and sizes as the bytes lie on storage (paths as the storage was asked:
    # under the relative storage_root here)
    step = Path("root", "checkpoints", "tiny", "global_epoch1_step1")
    files = [f for f in (tmp_path / step).iterdir() if f.name.endswith((".distcp", ".metadata"))]
    assert len(files) == 5
    for f in files:  # DCP writes .metadata as .metadata.tmp, then renames it
        written = str(step / (f.name + ".tmp" if f.name == ".metadata" else f.name))
        spans = sorted((e["args.offset"], e["args.size"]) for e in calls
                       if e["name"].endswith("write") and e["args.fname"] == written)
        assert spans[0][0] == 0 and all(a + n == b for (a, n), (b, _) in zip(spans, spans[1:], strict=False)), f.name
        assert spans[-1][0] + spans[-1][1] == f.stat().st_size, f.name
    loads = {e["args.fname"] for e in calls if e["name"] == "read" and e["args.phase"] == "load"}
    assert loads == {str(step / f.name) for f in files if f.suffix == ".distcp"}
    # the timed save and load are events, and the phases the run went through
    checkpoints = sorted((e["name"], e["args.checkpoint"]) for e in seen if e["cat"] == "checkpoint")
    assert checkpoints == [("load", 1), ("save", 1)]
    phases = [e["name"] for e in sorted((e for e in seen if e["cat"] == "phase"), key=lambda e: e["ts"])]
    assert phases[:3] == ["starting", "storage checks", "setup"] and "save" in phases and phases[-1] == "results"
    writes = [e for e in saves if e["name"] == "write"]  # (the step's folder is made before the clock starts)
    first, last = min(e["ts"] for e in writes), max(e["ts"] + e["dur"] for e in writes)
    save = next(e for e in seen if e["cat"] == "checkpoint" and e["name"] == "save")
    assert save["ts"] <= first and last <= save["ts"] + save["dur"] + 1  # its calls within it (microseconds)


def test_a_trace_is_written_only_when_asked(dlio_here, tmp_path):
    r = dlio_here([*JOB, "++workload.storage.storage_root=root", "hydra.run.dir=out"])
    assert r.returncode == 0, r.stderr
    assert not list((tmp_path / "out").glob("*trace*"))


def test_a_trace_is_the_format_dftracer_writes(dlio_here, tmp_path):
    """A line ``[``, then one complete Chrome trace event a line with DFTracer's fields, then ``]``."""
    import gzip

    r = dlio_here([*JOB, "++workload.checkpoint.trace=True", "++workload.storage.storage_root=root",
                   "hydra.run.dir=out"])
    assert r.returncode == 0, r.stderr
    lines = gzip.open(tmp_path / "out" / "0_trace.pfw.gz", "rt").read().splitlines()
    assert lines[0] == "[" and lines[-1] == "]"
    for line in lines[1:-1]:
        event = json.loads(line)
        assert list(event)[:9] == ["id", "name", "cat", "pid", "tid", "ts", "dur", "ph", "args"], event
        assert event["ph"] == "X" and event["ts"] > 1_600_000_000 * 10**6  # microseconds since the epoch


def test_a_trace_holds_at_most_a_batch_in_memory_and_loses_no_line_of_concurrent_threads(tmp_path):
    """Four threads tracing at once: every line reaches the file, and memory never holds more than a batch."""
    import gzip
    import threading

    from dlio_ckpt.io.trace import BATCH, Tracer

    tracer, held = Tracer(3), []
    tracer.start(str(tmp_path))

    def calls(k: int) -> None:
        for i in range(3 * BATCH):
            tracer.call("write", f"f{k}", i * 1000, 1000, 4096, i * 4096)
            held.append(len(tracer._lines))

    threads = [threading.Thread(target=calls, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tracer.close()
    assert max(held) <= BATCH + 4  # a batch, and a line per thread appended while it is taken
    events = [json.loads(line) for line in gzip.open(tmp_path / "3_trace.pfw.gz", "rt") if line.startswith("{")]
    writes = [e for e in events if e["cat"] == "POSIX"]
    assert len(writes) == 4 * 3 * BATCH and len({e["id"] for e in events}) == len(events)
    assert Counter(e["args"]["fname"] for e in writes) == {f"f{k}": 3 * BATCH for k in range(4)}


def test_a_failed_runs_trace_is_whole_up_to_the_fault(dlio_here, tmp_path, monkeypatch):
    """The storage fills in the middle of the save: the run fails, and its trace is a whole file holding the save's
    calls up to the fault (the trace of a failed run is the one a user asks for)."""
    import errno

    from dlio_ckpt.io.backends import local_fs

    write, seen = local_fs.LocalWriter.write, []

    def full_after_ten(self, data):
        seen.append(self.path)
        if len(seen) > 10 and self.path.endswith(".distcp"):
            raise local_fs._fail("write failed on", self.path, OSError(errno.ENOSPC, "No space left on device"))
        write(self, data)

    monkeypatch.setattr(local_fs.LocalWriter, "write", full_after_ten)
    r = dlio_here([*JOB, "++workload.checkpoint.trace=True", "++workload.storage.storage_root=root",
                   "hydra.run.dir=out"])
    assert r.returncode == 1 and "No space left on device" in r.stderr, r.stderr
    assert load(tmp_path / "out" / "summary.json")["status"] == "failed"
    seen_events = events(tmp_path / "out")
    writes = [e for e in seen_events if e["cat"] == "POSIX" and e["name"] == "write" and e["args.phase"] == "save"]
    assert 0 < len(writes) <= 10
    assert [e["name"] for e in seen_events if e["cat"] == "phase"][-1] == "save"


def test_a_save_played_item_by_item_shows_each_item_before_its_calls_as_long_as_asked(dlio_here, tmp_path):
    """``checkpoint.framework_item_us``: an ``item`` event (category ``framework``) for each item of each file, as
    many as the file holds ``torch.save`` archives (each ends with one end-of-central-directory record, as the bytes
    on storage show; against a real save's ``.metadata``: ``against_frameworks/test_trace_diff.py``), also where
    nothing is played (trace-diff counts them); each at least as long as asked, ended before its thread's next
    write."""
    for us in (0, 300):
        out, root = tmp_path / f"out{us}", tmp_path / f"root{us}"
        r = dlio_here([*JOB, f"++workload.checkpoint.framework_item_us={us}", "++workload.checkpoint.trace=True",
                       "++workload.checkpoint.num_checkpoints_read=0", f"++workload.storage.storage_root={root}",
                       f"hydra.run.dir={out}"])
        assert r.returncode == 0, r.stderr
        seen = events(out)
        items = [e for e in seen if e["cat"] == "framework"]
        assert all(e["name"] == "item" and e["args.phase"] == "save" and e["dur"] >= us for e in items)
        archives = {f.name: f.read_bytes().count(b"PK\x05\x06")
                    for f in (root / "checkpoints" / "tiny" / "global_epoch1_step1").glob("*.distcp")}
        assert Counter(Path(e["args.fname"]).name for e in items) == Counter(archives) and len(archives) == 4
        writes = sorted((e["ts"], e["tid"]) for e in seen if e["cat"] == "POSIX" and e["name"] == "write")
        for e in items:  # its thread's next write comes after it
            after = next(ts for ts, tid in writes if tid == e["tid"] and ts >= e["ts"])
            assert after >= e["ts"] + e["dur"], e


def test_the_time_per_item_is_refused_where_no_framework_plays_items(dlio_here, tmp_path):
    """Only DCP's writer threads (one interpreter, an item at a time) play it: megatron-core's writers are
    processes, a stream has no items."""
    for extra, rule in ((["++workload.checkpoint.layout=megatron"], "checkpoint.layout=megatron with "
                         "io_pattern=framework plays none"),
                        (["++workload.checkpoint.io_pattern=stream"], "io_pattern=stream plays none")):
        r = dlio_here([*JOB, *extra, "++workload.checkpoint.framework_item_us=50",
                       f"++workload.storage.storage_root={tmp_path / 'root'}", f"hydra.run.dir={tmp_path / 'out'}"])
        assert r.returncode == 2, r.stderr
        assert "workload.checkpoint.framework_item_us=50.0: is played item by item" in r.stderr and rule in r.stderr
        assert not (tmp_path / "root").exists() and not (tmp_path / "out").exists()
