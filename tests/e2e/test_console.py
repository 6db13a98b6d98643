"""What a user sees: ``--help`` and ``--version``, ``keys``, the progress display under mpiexec (a
bar when mpiexec's output is a terminal, log lines otherwise, in GiB and GiB/s only), console
durations equal to summary.json's, ``check --format json``, messages named right."""

from __future__ import annotations

import json
import re
import sys

import pytest

from dlio_ckpt import __version__
from tests.support.cli import MPIEXEC, dlio, in_a_terminal, load

BIG = ["workload=llama_7b_zero3", "--world-size", "2", "++workload.checkpoint.scale=0.002",
       "++workload.checkpoint.num_checkpoints_write=2", "++workload.checkpoint.num_checkpoints_read=2",
       "++workload.checkpoint.time_between_checkpoints=0"]  # the workload's 5 s of pretend training: not tested here


def test_help_lists_commands_workloads_and_where_keys_are(tmp_path):
    r = dlio(["--help"], tmp_path)
    assert r.returncode == 0, r.stderr
    for word in ("plan ", "sweep ", "diff A B", "report RUN", "check RUN", "keys ", "llama3_70b", "tiny",
                 "++workload.SECTION.KEY=VALUE", "--replace-results", "--world-size"):
        assert word in r.stdout, word
    assert "the only module that knows about processes" not in r.stdout  # no internal docstring
    version = dlio(["--version"], tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == f"dlio_ckpt {__version__}"
    keys = dlio(["keys", "checkpoint"], tmp_path)
    assert keys.returncode == 0
    assert ("++workload.checkpoint.chunk_size  (size: bytes, or with a unit (32MiB, 1.5GB), >= 4096, <= 67108864, "
            "a multiple of 4096; default 8388608)") in keys.stdout
    assert "++workload.checkpoint.format  (one of pt|raw|safetensors|hdf5; default 'pt')" in keys.stdout
    assert "++workload.storage" not in keys.stdout
    tiers = dlio(["keys", "tiers"], tmp_path)
    assert "++workload.tiers[N].keep_last  (int | None, >= 1; default None)" in tiers.stdout, tiers.stdout
    storage = dlio(["keys", "storage"], tmp_path).stdout
    assert "++workload.storage.storage_options.spread_prefixes  (int, >= 0, <= 4096; default 0)" in storage
    assert "storage_type s3, gcs" in storage and "(defaults: local_fs 1, parallel_fs 1, s3 2, gcs 4" in storage
    everything = dlio(["keys"], tmp_path).stdout
    undescribed = [k for k, nxt in zip(everything.splitlines(), everything.splitlines()[1:] + [""], strict=True)
                   if k.startswith("++") and not nxt.startswith("      ")]
    assert len(undescribed) <= 25, undescribed  # most keys say what they mean
    bad = dlio(["keys", "chekpoint"], tmp_path)
    assert bad.returncode == 2 and "names no key of the workload; one of accelerator_type, checkpoint," in bad.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.mpi
def test_console_durations_are_summary_durations_and_progress_lines_say_gib(tmp_path):
    r = dlio([*BIG, "++hydra.run.dir=out", "++workload.checkpoint.progress_interval=0.001"], tmp_path, nprocs=2)
    assert r.returncode == 0, r.stderr
    summary = load(tmp_path / "out" / "summary.json")
    for phase in ("save", "load"):
        said = [float(s) for s in re.findall(rf"\] {phase}_ckpt\d: ([0-9.]+) s", r.stdout)]
        assert said == [round(c["duration_seconds"], 3) for c in summary["checkpoints"][phase]], r.stdout
    progress = [line for line in r.stdout.splitlines() if "(rank 0's files)" in line]
    assert progress, r.stdout  # under mpiexec, output to a pipe: log lines
    assert all(re.search(r"GiB \(\d+%\) at [0-9.]+ GiB/s", line) for line in progress), progress
    assert not re.search(r"\b[KMG]B/s", r.stdout)


def test_at_a_terminal_the_bar_replaces_the_progress_lines(tmp_path):
    code, out = in_a_terminal([sys.executable, "-m", "dlio_ckpt", *BIG, "++hydra.run.dir=out"], tmp_path)
    assert code == 0, out[-2000:]
    assert "save_ckpt1 (rank 0)" in out and "GiB" in out and "(rank 0's files)" not in out


@pytest.mark.mpi
def test_under_mpiexec_at_a_terminal_rank_0_draws_the_bar_in_gib(tmp_path):
    code, out = in_a_terminal([str(MPIEXEC), "-n", "2", sys.executable, "-m", "dlio_ckpt", *BIG,
                               "++hydra.run.dir=out"], tmp_path)
    assert code == 0, out[-2000:]
    assert "save_ckpt1 (rank 0)" in out and "load_ckpt2 (rank 0)" in out  # rich's bar, drawn through mpiexec
    assert re.search(r"[0-9.]+/[0-9.]+ (MiB|GiB)", out) and re.search(r"[0-9.]+ GiB/s", out)  # binary units
    assert not re.search(r"\b[KMG]B/s", out), out[-2000:]


def test_check_says_its_verdicts_as_json_too(tmp_path):
    r = dlio(["--world-size", "2", "workload=tiny", "++hydra.run.dir=run"], tmp_path)
    assert r.returncode == 0, r.stderr
    table = dlio(["check", "run"], tmp_path)
    out = dlio(["check", "run", "--format", "json"], tmp_path)
    assert out.returncode == table.returncode == 1  # tiny is no MLPerf model
    body = json.loads(out.stdout)
    assert body["result"] == "FAIL" and body["runs"] == ["run"]
    assert {r["verdict"] for r in body["rules"]} == {"PASS", "FAIL"}
    for rule in body["rules"]:
        assert f"{rule['verdict']}  {rule['name']}" in table.stdout and rule["actual"] in table.stdout


def test_a_read_only_run_says_nothing_of_saves_and_a_write_only_run_nothing_of_loads(tmp_path):
    args = ["workload=tiny", "--world-size", "2", "++workload.storage.storage_root=data"]
    write = dlio([*args, "++workload.checkpoint.num_checkpoints_read=0", "++hydra.run.dir=w"], tmp_path)
    read = dlio([*args, "++workload.checkpoint.num_checkpoints_write=0", "++hydra.run.dir=r"], tmp_path)
    assert write.returncode == read.returncode == 0, write.stderr + read.stderr
    (wrote,) = [line for line in write.stdout.splitlines() if "] done: " in line]
    (done,) = [line for line in read.stdout.splitlines() if "] done: " in line]
    assert "save" not in done and "load" not in wrote, (wrote, done)
    m = load(tmp_path / "r" / "summary.json")["metric"]
    assert re.search(rf"load {m['load_checkpoint_duration_mean_seconds']:.3f} s mean "
                     rf"\({m['load_checkpoint_io_mean_GiB_per_second']:.3f} GiB/s of the checkpoint\)", done), done
