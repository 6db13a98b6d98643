"""diff, report and check on DLIO's own summary.json (NaN included) and on run folders of 1024 processes made
through the real result writers (tests/support/made_runs.py), in this process; on real runs of this machine, with
the progress display: tests/e2e/test_results_tools.py."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support import REPO
from tests.support.cli import load, run_here
from tests.support.figures import png_size
from tests.support.made_runs import LLAMA3_8B, dlio_summary, keep_phase, make_run


@pytest.fixture
def cli(monkeypatch, capfd):
    """``dlio_ckpt ARGS`` in this process, from the repository: diff, report and check read run folders, where a
    process of their own adds nothing (tests/e2e/test_results_tools.py runs them after real runs)."""
    def run(*args, cwd=REPO) -> subprocess.CompletedProcess:
        return run_here([str(a) for a in args], cwd, monkeypatch, capfd)
    return run


# -- diff ---------------------------------------------------------------------------------------

def test_diff_gates_a_throughput_drop_beyond_the_threshold(tmp_path, cli):
    a = make_run(tmp_path / "a", 8, 3)
    slower = make_run(tmp_path / "b", 8, 3, speed=0.9)  # 10% less throughput, 11% longer durations
    r = cli("diff", a, slower)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "REGRESSION in" in r.stdout and "save_checkpoint_io_mean_GB_per_second" in r.stdout.split("REGRESSION in")[1]
    assert cli("diff", a, slower, "--threshold", "20").returncode == 0
    faster = make_run(tmp_path / "c", 8, 3, speed=1.2)
    r = cli("diff", a, faster)
    assert r.returncode == 0 and "no regression" in r.stdout and "better" in r.stdout


def test_diff_a_duration_going_up_is_a_regression(tmp_path, cli):
    a = make_run(tmp_path / "a", 4, 2)
    b = make_run(tmp_path / "b", 4, 2, speed=0.8)
    r = cli("diff", a, b, "--metrics", "duration_mean", "--format", "json")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert set(out["regressions"]) == {f"{phase}_checkpoint_{which}duration_mean_seconds" for phase in ("save", "load")
                                       for which in ("", "steady_")}  # the later checkpoints' mean too
    assert all(m["direction"] == "lower" for m in out["metrics"])


def test_diff_reads_dlio_summaries_with_nan(tmp_path, cli):
    full = dlio_summary(tmp_path / "dlio_full" / "summary.json", save=2.0, load=4.0)
    read_only = dlio_summary(tmp_path / "dlio_read" / "summary.json", save=None, load=4.1)
    assert "NaN" in read_only.read_text()
    r = cli("diff", full, read_only, "--format", "json")
    assert r.returncode == 1  # the save figures vanished: a gate must not pass on that
    out = json.loads(r.stdout)
    verdicts = {m["name"]: m["verdict"] for m in out["metrics"]}
    assert verdicts["save_checkpoint_io_mean_GB_per_second"] == "missing in B"
    assert verdicts["load_checkpoint_io_mean_GB_per_second"] == "better"
    assert cli("diff", full, read_only, "--metrics", "^load").returncode == 0
    assert cli("diff", read_only, full).returncode == 0  # NaN in A: nothing to regress from
    # ours against DLIO's: the shared keys are compared
    ours = make_run(tmp_path / "ours", 8, 2)  # 8 x 2 GiB in ~4.15 s to save, ~2.09 s to load (made_runs.py)
    r = cli("diff", full, ours / "summary.json", "--format", "json")
    metrics = {m["name"]: m for m in json.loads(r.stdout)["metrics"]}
    assert r.returncode == 0, r.stdout  # DLIO's 2.0 and 4.0 GiB/s against ours: better, no regression
    assert [metrics[f"{p}_checkpoint_io_mean_GB_per_second"]["verdict"] for p in ("save", "load")] == ["better"] * 2
    assert round(metrics["save_checkpoint_io_mean_GB_per_second"]["b"], 2) == 3.85
    assert metrics["save_checkpoint_io_mean_GiB_per_second"]["verdict"] == "new in B"  # ours only, not judged


def test_diff_shows_config_keys_that_differ(tmp_path, cli):
    a = make_run(tmp_path / "a", 2, 1, config={"checkpoint": {"fsync": True, "format": "pt"}})
    b = make_run(tmp_path / "b", 2, 1, config={"checkpoint": {"fsync": False, "format": "pt"}})
    r = cli("diff", a, b, "--threshold", "50")
    assert "checkpoint.fsync: True -> False" in r.stdout and "format" not in r.stdout.split("config keys")[1]


@pytest.mark.parametrize("case", ["missing", "bad_json", "failed_run", "no_metric", "bad_regex", "threshold"])
def test_diff_unreadable_input_exits_2(tmp_path, cli, case):
    a = make_run(tmp_path / "a", 2, 1)
    b = tmp_path / "b.json"
    args = ["diff", a, b]
    if case == "bad_json":
        b.write_text("{not json")
    elif case == "failed_run":
        b.write_text(json.dumps({"status": "failed", "reason": "rank 3 on h: ENOSPC"}))
    elif case == "no_metric":
        b.write_text(json.dumps({"x": 1}))
    elif case in ("bad_regex", "threshold"):
        args = ["diff", a, a, "--metrics", "(" if case == "bad_regex" else ".", "--threshold",
                "-1" if case == "threshold" else "5"]
    r = cli(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("dlio_ckpt diff: error:") and len(r.stderr.strip().splitlines()) == 1
    if case == "failed_run":
        assert "ENOSPC" in r.stderr


# -- report ---------------------------------------------------------------------------------------

@pytest.mark.slow  # 2-5 s drawing 1024 processes
def test_report_at_1024_processes_names_the_stragglers(tmp_path, cli):
    from dlio_ckpt.tools.readers.report import _durations
    from dlio_ckpt.tools.readers.runfiles import load_run

    run = make_run(tmp_path / "big", 1024, 3, stragglers={77: 1.6, 900: 1.3})  # 3 saves, 3 loads: 1024 processes each
    r = cli("report", run)  # how long it takes is bench/'s to say, not a pass mark
    assert r.returncode == 0, r.stderr
    for png in ("durations.png", "stragglers.png", "timeline.png"):
        w, h = png_size(run / png)
        assert w <= 2500 and h <= 1600  # bounded, not one row or legend entry per process
    durations = _durations(load_run(str(run)))
    assert len(durations) == 6 and all(len(d) == 1024 for d in durations.values())
    assert all(max(d, key=d.get) == 77 for d in durations.values())


# -- check ----------------------------------------------------------------------------------------

def test_check_passes_a_conforming_run_rule_by_rule(tmp_path, cli):
    run = make_run(tmp_path / "ok", 8, 10, config=LLAMA3_8B, per_host=8)
    r = cli("check", run, "--edition", "2.0")
    assert r.returncode == 0, r.stdout
    verdicts = [line[:4] for line in r.stdout.splitlines() if line[:4] in ("PASS", "FAIL")]
    assert verdicts == ["PASS"] * 8 and "result: PASS" in r.stdout


def test_check_explains_each_failure(tmp_path, cli):
    config = {**LLAMA3_8B, "checkpoint": {"fsync": False}}
    run = make_run(tmp_path / "bad", 4, 3, config=config, fsync=False, read_cache="allowed", memory=512 << 30,
                   per_host=4)
    r = cli("check", run, "--edition", "2.0")
    assert r.returncode == 1
    out = r.stdout
    assert "FAIL  process count" in out and "8 MPI processes" in out and "4 processes for 4 simulated" in out
    assert "FAIL  10 writes then 10 reads" in out and "3 written, 3 read" in out
    assert "FAIL  fsync" in out and "FAIL  page cache" in out and "reads: allowed" in out
    assert "PASS  model" in out and "llama3_8b" in out


def test_check_recomputes_durations_from_every_process(tmp_path, cli):
    run = make_run(tmp_path / "r0", 8, 10, config=LLAMA3_8B)
    summary = load(run / "summary.json")
    summary["checkpoints"]["save"][0]["duration_seconds"] /= 2  # as if timed on one rank's clock
    (run / "summary.json").write_text(json.dumps(summary))
    r = cli("check", run, "--edition", "2.0")
    assert r.returncode == 1 and "FAIL  max duration" in r.stdout and "save_ckpt1: reported" in r.stdout


def test_check_two_invocations_and_subset_mode(tmp_path, cli):
    subset = {**LLAMA3_8B, "model": {**LLAMA3_8B["model"], "num_layers": 80, "parallelism": {
        "tensor": 8, "pipeline": 1, "zero_stage": 3, "data": 8}, "transformer": {
        **LLAMA3_8B["model"]["transformer"], "hidden_size": 8192, "ffn_hidden_size": 28672,
        "num_attention_heads": 128}}, "checkpoint": {"fsync": True, "mode": "subset"}}
    write = keep_phase(make_run(tmp_path / "w", 8, 10, config=subset), "save")  # one run writes, the next reads
    read = keep_phase(make_run(tmp_path / "r", 8, 10, config=subset), "load")
    r = cli("check", write, read, "--edition", "2.0")
    assert r.returncode == 0, r.stdout
    assert "llama3_70b" in r.stdout and "subset: 8 processes" in r.stdout
    assert "run 1: 10 written, 0 read; run 2: 0 written, 10 read" in r.stdout


def test_check_reads_a_dlio_run_folder_and_says_what_it_cannot_show(tmp_path, cli):
    import yaml

    folder = dlio_summary(tmp_path / "dlio" / "summary.json", save=2.0, load=4.0).parent
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"workload": LLAMA3_8B}))
    r = cli("check", folder, "--edition", "2.0")
    assert r.returncode == 1
    out = r.stdout
    assert "PASS  model" in out and "PASS  process count" in out and "PASS  10 writes then 10 reads" in out
    assert "FAIL  fsync" in out and "DLIO ignores checkpoint.fsync" in out
    assert "FAIL  max duration" in out and "rank 0's clock" in out


# -- a load is judged by its duration ---------------------------------------------------------------

def test_diff_judges_a_phase_by_its_duration_and_never_calls_one_change_better_and_a_regression():
    """A Megatron load that read 8 times the checkpoint in 3.56 times the time once showed "+278% better" (bytes
    read over time) beside "+256% regression" (its duration) in one table; and a mean of per-checkpoint rates can
    move against the mean duration even for the same bytes. A phase's rates take its mean duration's verdict."""
    from dlio_ckpt.tools.readers.compare import compare_metrics, regressions
    from dlio_ckpt.tools.readers.runfiles import Run

    a = Run("a", None, {"metric": {"load_checkpoint_io_mean_GB_per_second": 1.0,
                                   "load_checkpoint_io_mean_GiB_per_second": 1.0,
                                   "load_checkpoint_duration_mean_seconds": 1.0,
                                   "save_checkpoint_io_mean_GB_per_second": 0.667,  # durations 1 s and 3 s
                                   "save_checkpoint_duration_mean_seconds": 2.0}})
    b = Run("b", None, {"metric": {"load_checkpoint_io_mean_GB_per_second": 3.78,
                                   "load_checkpoint_io_mean_GiB_per_second": 3.78,
                                   "load_checkpoint_duration_mean_seconds": 3.56,
                                   "save_checkpoint_io_mean_GB_per_second": 0.526,  # 1.9 s and 1.9 s
                                   "save_checkpoint_duration_mean_seconds": 1.9}})
    verdicts = {c.name: c.verdict for c in compare_metrics(a, b, 5.0)}
    assert verdicts == {"load_checkpoint_io_mean_GB_per_second": "regression",
                        "load_checkpoint_io_mean_GiB_per_second": "regression",
                        "load_checkpoint_duration_mean_seconds": "regression",
                        "save_checkpoint_io_mean_GB_per_second": "better",
                        "save_checkpoint_duration_mean_seconds": "better"}
    selected = compare_metrics(a, b, 5.0, "^load_.*io_mean_GiB")  # a gate on the rate alone still closes
    assert [c.name for c in regressions(selected)] == ["load_checkpoint_io_mean_GiB_per_second"]
    assert {c.judged_by for c in selected} == {"load_checkpoint_duration_mean_seconds"}


def test_a_sweep_names_the_quickest_load_best_not_the_one_that_read_most(tmp_path):
    from dlio_ckpt.tools.drivers.sweep import Point, _row
    from dlio_ckpt.tools.drivers.sweep_files import short_line
    from dlio_ckpt.tools.readers.sweeps import best, draw

    def summary(load_gib: float, load_s: float, amplification: float) -> dict:
        return {"metric": {"checkpoint_size_GiB": 1.0, "load_checkpoint_io_mean_GiB_per_second": load_gib,
                           "load_checkpoint_io_mean_GB_decimal_per_second": load_gib * 1.074,
                           "load_checkpoint_duration_mean_seconds": load_s},
                "checkpoints": {"load": [{"slowest_process": 0}]}, "memory": {"peak_rss_bytes_max": 2**26},
                "io": {"restore": {"read_amplification": amplification}}, "run_dir": "x"}

    rows = [_row(Point(1, {"layout": "megatron"}, [], None), summary(4.1, 0.20, 8.0), None),
            _row(Point(2, {"layout": "dcp"}, [], None), summary(3.0, 0.10, 1.0), None)]
    assert rows[0]["load_read_amplification"] == 8.0
    assert best(rows, "load")["point"] == 2  # 0.10 s against 0.20 s
    assert "load 0.100 s" in short_line(["layout"], rows[1])
    draw(str(tmp_path), ["layout"], rows)
    assert (tmp_path / "sweep.png").stat().st_size > 0
