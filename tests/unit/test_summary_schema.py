"""summary.json through its model (dlio_ckpt.results.schema): every summary a quick run writes validates and
is, byte for byte, the model's dump of itself (nothing lost, nothing reordered, no key the model does not
name); DLIO's own summary validates with its keys, names and values as DLIO wrote them, NaN included; a run
written before the later sections existed still loads and is judged; a failed run's summary is the model's
too; and an OpRecord is built by keyword only."""

from __future__ import annotations

import json
import math

import pytest

from dlio_ckpt.results.schema import Checkpoints, FailedSummary, Metric, Summary, written
from dlio_ckpt.results.summary import OpRecord, dumps
from tests.support import DLIO_RUN
from tests.support.cli import load
from tests.support.made_runs import dlio_summary, make_run
from tests.support.summary_model import assert_is_the_models_dump, unnamed_keys


def test_a_failed_runs_summary_is_the_models_dump(tmp_path):
    from dlio_ckpt.run.failure import RunState, write_failed_summary

    state = RunState(run_dir=str(tmp_path), run_id=None, phase="save", step=2, committed=[1],
                     durable={0: [1], 1: []})
    write_failed_summary(state, 3, "rank 3 on h, during save of step 2: No space left on device")
    failed = assert_is_the_models_dump(tmp_path / "summary.json")
    assert isinstance(failed, FailedSummary) and failed.failed_rank == 3 and failed.steps_committed == [1]
    raw = load(tmp_path / "summary.json")
    assert raw["run_id"] is None and raw["steps_durable_per_tier"] == {"0": [1], "1": []}
    assert list(raw) == ["status", "run_id", "reason", "failed_rank", "host", "during", "time", "note",
                         "steps_committed", "steps_durable_per_tier"]


def test_made_runs_are_the_models_dumps(tmp_path):
    """The runs the tools' tests make (up to 1024 processes) are written by the run's own writers."""
    run = make_run(tmp_path / "made", 16, 2, per_host=4)
    summary = assert_is_the_models_dump(run / "summary.json")
    assert isinstance(summary, Summary) and summary.hosts is not None and len(summary.hosts) == 4
    assert summary.checkpoints is not None and [c.index for c in summary.checkpoints.load] == [1, 2]


def test_dlios_own_summary_validates_with_its_keys_names_and_values():
    data = json.loads((DLIO_RUN / "summary.json").read_text())
    summary = Summary.model_validate(data)
    assert not summary.ours and summary.status is None and summary.processes == 2
    assert summary.metric.checkpoint_size_GB == data["metric"]["checkpoint_size_GB"]
    assert summary.host_cpuinfo is not None and summary.host_cpuinfo["vendor_id"] == "AuthenticAMD"
    assert written(summary) == data  # every key DLIO wrote, under its name, with its value
    assert unnamed_keys(summary) == []


def test_dlios_nan_is_no_figure_and_is_never_written(tmp_path):
    """DLIO writes a read-only run's save means as bare NaN: read, they stay NaN (no figure to the tools);
    the strict writer refuses to write one."""
    path = dlio_summary(tmp_path / "summary.json", save=None, load=2.0)
    summary = Summary.model_validate(json.loads(path.read_text()))
    assert math.isnan(summary.metric.save_checkpoint_io_mean_GB_per_second)
    assert math.isnan(summary.metric.figures()["save_checkpoint_duration_mean_seconds"])
    with pytest.raises(ValueError, match="not JSON compliant"):
        dumps(summary)


def test_a_run_written_before_the_later_sections_still_loads_and_is_judged(tmp_path):
    """A summary of the first versions (no run_id, file systems, memory, coordination or CPU figures, no
    io.restore): the missing sections are None and diff, check and report read it as before."""
    from dlio_ckpt.tools.readers.compare import compare_metrics
    from dlio_ckpt.tools.readers.mlperf import check_runs
    from dlio_ckpt.tools.readers.report import write_report
    from dlio_ckpt.tools.readers.runfiles import load_run

    run = make_run(tmp_path / "old", 8, 2)
    body = json.loads((run / "summary.json").read_text())
    for phase in ("save", "load"):
        for c in body["checkpoints"][phase]:
            for key in ("coordination", "cpu", "checkpoint_bytes", "read_GiB_per_second"):
                c.pop(key, None)
    body["io"] = {"fsync": body["io"]["fsync"]}
    (run / "summary.json").write_text(json.dumps(body))
    old = load_run(str(run))
    assert old.summary.run_id is None and old.summary.file_systems is None and old.summary.memory is None
    assert old.summary.io is not None and old.summary.io.restore is None and old.layout == "dlio"
    assert {c.verdict for c in compare_metrics(old, old, 5.0)} <= {"same", "not judged"}
    rules = {r.name: r for r in check_runs([old], "3.0")}
    assert rules["separate file systems"].actual == "not recorded"
    assert rules["max duration, min throughput"].ok
    assert (run / "report.html") in write_report(str(run))


def test_an_op_record_is_built_by_keyword_only():
    with pytest.raises(TypeError):
        OpRecord("save", 1, 1, 0, 0.0, 1.0, 1.0, 10, 1)  # type: ignore[misc]
    record = OpRecord(phase="save", index=1, step=1, process=0, start=0.0, end=1.0, duration=1.0, bytes=10, files=1)
    assert record.held is None and record.file_times == ()


def test_fields_absent_from_a_run_are_left_out_and_unknown_keys_are_kept():
    metric = Metric(checkpoint_size_GB=1.0, train_au_percentage=[99.0])  # a DLIO training metric: kept as is
    assert written(metric) == {"checkpoint_size_GB": 1.0, "train_au_percentage": [99.0]}
    checkpoints = Checkpoints.model_validate({"save": [], "load": [], "drain_tier2": []})
    assert written(checkpoints) == {"save": [], "load": [], "drain_tier2": []}
    assert checkpoints.phase("drain_tier2") == [] and checkpoints.phase("drain_tier3") == []


def test_the_first_checkpoint_and_the_steady_state_are_said_apart(tmp_path):
    """metric's first and steady-state durations: the first checkpoint's own, then the mean of the later ones,
    each its slowest process's (as checkpoints[] has them); a single checkpoint has no steady state."""
    made = load(make_run(tmp_path / "run", processes=3, checkpoints=4) / "summary.json")
    for phase in ("save", "load"):
        durations = [c["duration_seconds"] for c in made["checkpoints"][phase]]
        assert made["metric"][f"{phase}_checkpoint_first_duration_seconds"] == durations[0]
        assert made["metric"][f"{phase}_checkpoint_steady_duration_mean_seconds"] == pytest.approx(
            sum(durations[1:]) / 3)
    one = load(make_run(tmp_path / "one", processes=2, checkpoints=1) / "summary.json")["metric"]
    assert "save_checkpoint_first_duration_seconds" in one and "save_checkpoint_steady_duration_mean_seconds" not in one
