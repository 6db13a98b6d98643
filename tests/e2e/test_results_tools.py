"""diff, report, check and the progress display after real runs of this machine, as a user runs them (on DLIO's
summaries and on made run folders: tests/unit/test_results_tools.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.support import REPO
from tests.support.cli import dlio, load
from tests.support.figures import png_size


@pytest.fixture
def cli(dlio_here):
    """diff, report and check on the real runs' folders, in this process (``dlio_here``): they only read them, so a
    process of their own adds 1-2 s of start each and nothing else (their entry point as a process: test_sweep's
    report and diff, test_console's check)."""
    def run(*args, cwd=REPO) -> subprocess.CompletedProcess:
        return dlio_here([str(a) for a in args], cwd)
    return run


@pytest.mark.mpi
def test_diff_two_real_runs_as_a_ci_gate(tmp_path, cli):
    args = ["workload=tiny", "++workload.checkpoint.num_checkpoints_write=2",
            "++workload.checkpoint.num_checkpoints_read=2"]
    for name in ("base", "new"):
        r = dlio(args + [f"++hydra.run.dir={tmp_path / name}", f"++workload.checkpoint.checkpoint_folder=ck_{name}"],
                 tmp_path, nprocs=2)
        assert r.returncode == 0, r.stderr
    r = cli("diff", tmp_path / "base", tmp_path / "base")  # a run against itself: nothing moved
    assert r.returncode == 0 and "result: no regression" in r.stdout, r.stdout + r.stderr
    r = cli("diff", tmp_path / "base", tmp_path / "new", "--format", "json")  # two real runs, whichever way they went:
    body = json.loads(r.stdout)  # the exit status is the verdict the report gives
    assert r.returncode == (1 if body["regressions"] else 0)
    assert body["result"] == ("regression" if r.returncode else "ok")
    assert "checkpoint.checkpoint_folder" in json.dumps(body["config_differences"])
    slower = tmp_path / "slower"  # the new run 10% slower than the baseline: the gate must close
    shutil.copytree(tmp_path / "base", slower)
    summary = load(slower / "summary.json")
    summary["metric"]["save_checkpoint_io_mean_GiB_per_second"] *= 0.9
    (slower / "summary.json").write_text(json.dumps(summary))
    gate = cli("diff", tmp_path / "base", slower, "--threshold", "5", "--metrics", "^save_.*io_mean_GiB")
    assert gate.returncode == 1 and "REGRESSION in save_checkpoint_io_mean_GiB_per_second" in gate.stdout, gate.stdout
    assert cli("diff", tmp_path / "base", slower, "--threshold", "11", "--metrics", "^save_.*io_mean_GiB"
               ).returncode == 0


@pytest.mark.mpi
def test_report_of_a_real_four_process_run(tmp_path, cli):
    r = dlio(["workload=tiny", "++workload.checkpoint.num_checkpoints_write=3", f"++hydra.run.dir={tmp_path / 'run'}"],
             tmp_path, nprocs=4)
    assert r.returncode == 0, r.stderr
    r = cli("report", tmp_path / "run")
    assert r.returncode == 0, r.stderr
    names = {"throughput.png", "durations.png", "stragglers.png", "timeline.png", "latency.png", "report.html"}
    assert {os.path.basename(p) for p in r.stdout.split()} == names
    for png in names - {"report.html"}:
        w, h = png_size(tmp_path / "run" / png)
        assert 600 <= w <= 2500 and 250 <= h <= 1600
    page = (tmp_path / "run" / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 5 and "save_checkpoint_io_mean_GB_per_second" in page
    stats = load(tmp_path / "run" / "0_per_epoch_stats.json")["1"]["save_ckpt1"]
    assert len(stats["file_times"]) >= stats["files"]  # the timeline's data: every file, with its fsync


@pytest.mark.mpi
def test_check_a_real_llama3_8b_run_scaled_down(tmp_path, cli):
    """8 real processes, 10 writes and 10 reads: every rule holds except the full size (scale)."""
    r = dlio(["workload=llama3_8b", "++workload.checkpoint.scale=0.0001", f"++hydra.run.dir={tmp_path / 'run'}",
              "++workload.accelerator_type=b200",
              "++workload.checkpoint.time_between_checkpoints=0"], tmp_path, nprocs=8, timeout=300)
    assert r.returncode == 0, r.stderr
    r = cli("check", tmp_path / "run", "--edition", "2.0")
    assert r.returncode == 1, r.stdout
    failed = [line for line in r.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and "full-size checkpoint" in failed[0], r.stdout
    assert "scale=0.0001" in r.stdout and "80 checkpoints" not in r.stdout
    # 4.0's rules too: what this machine cannot meet is the size and one file system for both folders, and a
    # scaled run with no wait between checkpoints is not the CLOSED class's configuration (its hash differs);
    # the accelerator and the invocation hold, and the recorded hash is recomputed equal
    r = cli("check", tmp_path / "run")
    verdicts = {line[6:].split("  expected:")[0].strip(): line[:4] for line in r.stdout.splitlines()
                if line[:4] in ("PASS", "FAIL", "WARN")}
    assert {k for k, v in verdicts.items() if v != "PASS"} == {"checkpoint size", "separate file systems",
                                                                "provenance"}, r.stdout
    assert "checkpoint.scale=0.0001 (not in DLIO's template)" in r.stdout
    assert "8 x b200 at 180 GB = 1440 vs a 0.01 GiB checkpoint" in r.stdout
    assert "core_config " in r.stdout and "recomputed equal" in r.stdout


def test_progress_lines_when_output_is_not_a_terminal(tmp_path):
    r = dlio(["workload=tiny", "--world-size", "4", "++workload.checkpoint.progress_interval=0.001",
              "++workload.checkpoint.num_checkpoints_read=1"], tmp_path)
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if "(rank 0's files)" in line]
    assert any("save_ckpt1:" in line and "GiB/s" in line and "left" in line for line in lines)
    assert any("load_ckpt1:" in line for line in lines)


def test_report_shows_the_layout_the_restore_and_the_checkpoint_folder(tmp_path):
    """report.html says whose files, where they were and what the load read, not only the metrics."""
    from dlio_ckpt.tools.readers.report import write_report

    folder = tmp_path / "elsewhere" / "ck"
    r = dlio(["workload=tiny", "++workload.checkpoint.layout=dcp", "++workload.model.parallelism.tensor=1",
              "--world-size", "4", "++workload.restore.world_size=2", "++workload.checkpoint.num_checkpoints_write=1",
              "++workload.checkpoint.num_checkpoints_read=1", f"++workload.checkpoint.checkpoint_folder={folder}",
              "++hydra.run.dir=run"], tmp_path)
    assert r.returncode == 0, r.stderr
    write_report(str(tmp_path / "run"))
    page = (tmp_path / "run" / "report.html").read_text()
    restore = load(tmp_path / "run" / "summary.json")["io"]["restore"]
    assert "<th>layout</th><td>dcp</td>" in page and f"<td>{folder}</td>" in page
    assert "<th>load world size</th><td>2 (saved at 4: resharded)</td>" in page
    assert f"{restore['read_amplification']:.3f}" in page and "FileSystemReader" in page
    assert "bytes read per rank" in page and "heaviest rank" in page
