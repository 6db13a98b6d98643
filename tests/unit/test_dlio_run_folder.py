"""diff, check and report on a run folder that DLIO itself wrote (tests/data/dlio_run: upstream DLIO
v2.0.1's checkpointing workflow, 2 MPI processes, 10 checkpoints written then read; SOURCE.md there says
how it was made). The other tests read hand-made DLIO-like files; this one reads DLIO's own, unedited."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.support import DLIO_RUN
from tests.support.cli import load

DLIO_FILES = {"summary.json", "0_per_epoch_stats.json", "1_per_epoch_stats.json", "0_output.json", "1_output.json",
              "dlio.log", ".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml"}
METRICS = ("save_checkpoint_io_mean_GB_per_second", "save_checkpoint_io_stdev_GB_per_second",
           "save_checkpoint_duration_mean_seconds", "save_checkpoint_duration_stdev_seconds",
           "load_checkpoint_io_mean_GB_per_second", "load_checkpoint_io_stdev_GB_per_second",
           "load_checkpoint_duration_mean_seconds", "load_checkpoint_duration_stdev_seconds", "checkpoint_size_GB")


def _files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} - {"SOURCE.md"}


def test_the_folder_is_dlios_as_it_wrote_it():
    """What the other tests rely on: DLIO's layout and keys, small, and no checkpoint data."""
    assert _files(DLIO_RUN) == DLIO_FILES
    assert sum(p.stat().st_size for p in DLIO_RUN.rglob("*") if p.is_file()) < 100_000
    summary = load(DLIO_RUN / "summary.json")
    assert set(summary["metric"]) == set(METRICS) and "checkpoints" not in summary  # DLIO's means, not ours
    assert summary["num_accelerators"] == 2 and summary["host_memory_GB"]
    for rank in (0, 1):
        epoch = load(DLIO_RUN / f"{rank}_per_epoch_stats.json")["1"]
        assert {f"{p}_ckpt{i}" for p in ("save", "load") for i in range(1, 11)} <= set(epoch)
    source = (DLIO_RUN / "SOURCE.md").read_text()
    assert "b56c74183c6490ae84096645498281e21d9cabfe" in source and "unedited" in source


def test_diff_of_the_dlio_run_against_itself(tmp_path, dlio_here):
    r = dlio_here(["diff", str(DLIO_RUN), str(DLIO_RUN)])
    assert r.returncode == 0, r.stdout + r.stderr
    # metric, A, B, change, verdict (one or two words)
    rows = {cols[0]: cols for cols in (line.split(None, 4) for line in r.stdout.splitlines()) if cols[:1] and
            cols[0] in METRICS}
    assert set(rows) == set(METRICS)
    assert all(rows[m][3] == "+0.0%" for m in METRICS)
    assert all(rows[m][4] == "same" for m in METRICS if "_mean_" in m)  # judged: throughputs and durations
    assert all(rows[m][4] == "not judged" for m in METRICS if "_mean_" not in m)  # stdevs and the size
    assert "config: identical" in r.stdout  # DLIO's .hydra/config.yaml was read
    assert r.stdout.rstrip().endswith("result: no regression")
    assert _files(DLIO_RUN) == DLIO_FILES  # diff writes nothing

    r = dlio_here(["diff", str(DLIO_RUN / "summary.json"), str(DLIO_RUN), "--format", "json"])
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    figures = {m["name"]: m for m in out["metrics"]}
    summary = load(DLIO_RUN / "summary.json")["metric"]
    assert set(figures) == set(METRICS)
    assert all(figures[m]["a"] == figures[m]["b"] == summary[m] for m in METRICS)


def test_check_names_the_rules_a_dlio_run_cannot_meet(tmp_path, dlio_here):
    r = dlio_here(["check", str(DLIO_RUN), "--edition", "2.0"])
    assert r.returncode == 1, r.stdout + r.stderr
    out = r.stdout
    verdicts = {line[6:].split("  expected:")[0].strip(): line[:4] for line in out.splitlines()
                if line[:4] in ("PASS", "FAIL")}
    assert verdicts == {"model": "FAIL", "process count": "FAIL", "emulated I/O": "PASS",
                        "10 writes then 10 reads": "PASS", "fsync": "FAIL", "full-size checkpoint": "PASS",
                        "page cache": "FAIL", "max duration, min throughput": "FAIL"}
    # the count comes from DLIO's config (its summary has only means)
    assert "10 written, 10 read in one run" in out
    # a scaled-down model: named against the closest MLPerf one
    assert "closest is llama3_8b, but num_layers=4 (not 32), hidden_size=256 (not 4096)" in out
    assert "2 (model not recognized)" in out
    # what DLIO cannot meet whatever the workload: it records no fsync (and ignores checkpoint.fsync) ...
    assert "checkpoint.fsync=True; DLIO's summary does not record it (and DLIO ignores checkpoint.fsync)" in out
    # ... times each checkpoint on rank 0's clock alone ...
    assert "DLIO's summary times each checkpoint on rank 0's clock alone" in out
    # ... and says nothing of the page cache before reads (host memory is read from its summary)
    assert "0.06 GiB per host, 23.5 GiB memory; reads: not recorded" in out
    assert out.rstrip().endswith("result: FAIL (model, process count, fsync, page cache, max duration, min throughput)")
    assert _files(DLIO_RUN) == DLIO_FILES  # check writes nothing


def test_report_of_the_dlio_run(tmp_path, dlio_here):
    """DLIO's per-process files hold every checkpoint's duration and throughput on each rank: the
    figures per checkpoint and per process can be drawn from them (there are no per-file times)."""
    run = tmp_path / "dlio_run"
    shutil.copytree(DLIO_RUN, run)
    r = dlio_here(["report", str(run)])
    assert r.returncode == 0, r.stdout + r.stderr
    written = {Path(p).name for p in r.stdout.split()}
    assert {"throughput.png", "durations.png", "stragglers.png", "report.html"} <= written
    from PIL import Image

    for name in written - {"report.html"}:
        with Image.open(run / name) as im:
            w, h = im.size
        assert 600 <= w <= 2500 and 250 <= h <= 1600
    page = (run / "report.html").read_text()
    assert page.count("data:image/png;base64,") == len(written) - 1
    assert "save_checkpoint_io_mean_GB_per_second" in page
    assert _files(run) == DLIO_FILES | written  # DLIO's files untouched, only the report added
    assert all((run / f).read_bytes() == (DLIO_RUN / f).read_bytes() for f in DLIO_FILES)
