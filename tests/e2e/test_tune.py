"""``dlio_ckpt tune`` as a user runs it: a bounded grid on local files (with fio's best beside it) and on
S3 (SeaweedFS), whose printed command, run again, gives the winner's settings and a figure like its
own; bad input refused before anything is written."""

from __future__ import annotations

import csv
import os
import shutil
import statistics
import subprocess
import sys

import pytest

from dlio_ckpt.tools.drivers.tune import SAMPLES
from tests.support import REPO
from tests.support.cli import MPIEXEC, dlio, load
from tests.support.storage import tmpfs
from tests.support.workloads import TINY_CK

pytestmark = pytest.mark.mpi


def rerun(result: dict, tmp_path, env: dict | None = None) -> dict:
    """The printed command to reproduce the winner's figure, run as printed (its own run folder): this
    environment's mpiexec and Python, never a bare ``mpiexec`` (a Debian one belongs to another MPI)."""
    cmd = result["reproduce"]
    assert cmd[:6] == [str(MPIEXEC), "-n", "2", sys.executable, "-m", "dlio_ckpt"]
    r = subprocess.run([*cmd, "++hydra.run.dir=again"], cwd=tmp_path, capture_output=True, text=True, timeout=240,
                       env={**os.environ, **(env or {}), "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    return load(tmp_path / "again" / "summary.json")


def chosen_by_median(result: dict, folder) -> dict:
    """Every finalist has its samples (the first pass's and its re-runs, in their own sweep folder); the
    winner is the one of least median save + load time, and its figures are its medians."""
    final = result["finalists"]
    assert len(final) == 2  # a 4-point grid: its best quarter, but 2 at least
    for f in final:
        totals = [s["save_seconds"] + s["load_seconds"] for s in f["samples"]]
        assert len(totals) == SAMPLES >= 3 and f["median_seconds"] == statistics.median(totals)
        assert f["save_GiB_per_second"] == statistics.median(s["save_GiB_per_s"] for s in f["samples"])
    win = result["winner"]
    assert win["point"] == final[0]["point"] and win["median_seconds"] == min(f["median_seconds"] for f in final)
    with open(folder / f"finalists_{'_'.join(str(f) for f in result['chosen'])}" / "sweep.csv") as fh:
        again = list(csv.DictReader(fh))
    assert [(r["finalist"], r["sample"], r["status"]) for r in again] == [
        (str(result["chosen"][0]), "2", "ok"), (str(result["chosen"][1]), "2", "ok"),
        (str(result["chosen"][1]), "3", "ok"), (str(result["chosen"][0]), "3", "ok")]  # alternating
    return win


def close(a: float, b: float) -> bool:
    """Two figures of one setting, 0.1 GiB each, on a 2-core machine running another test beside
    them: within a factor of five (a test states no speed; this says the figure is the setting's)."""
    return 1 / 5 < a / b < 5


def test_tune_on_local_files_finds_settings_that_reproduce_their_figure_beside_fios_best(tmp_path):
    if not shutil.which("fio"):  # under CI a skip fails (tests/conftest.py): scripts/setup.sh installs fio
        pytest.skip("fio is not installed (scripts/setup.sh installs it): tune's figure beside fio's best is not "
                    "checked")
    r = dlio(["tune", "workload=llama_7b_zero3", "++workload.checkpoint.checkpoint_folder=ck",
              "++workload.checkpoint.odirect=True", "++workload.checkpoint.chunk_size=1048576,4194304",
              "++workload.storage.storage_options.queue_depth=1,4", "++hydra.sweep.dir=tn", "--max-gib", "0.05"],
             tmp_path, nprocs=2, timeout=400)
    assert r.returncode == 0, r.stderr
    result = load(tmp_path / "tn" / "tune.json")
    assert result["points"] == result["ok"] == 4 and result["reruns"] == result["reruns_ok"] == 4
    win = chosen_by_median(result, tmp_path / "tn")
    assert set(win["settings"]) == {"checkpoint.chunk_size", "storage.storage_options.queue_depth"}
    assert "settings to paste:  " + " ".join(result["overrides"]) in r.stdout
    assert f"median {win['median_seconds']:.3f} s of 3 samples" in r.stdout
    summary = load(tmp_path / "tn" / str(win["point"]) / "summary.json")
    assert summary["io"]["odirect"] is True and 0.04 < summary["metric"]["checkpoint_size_GiB"] <= 0.05
    for op, phase in (("write", "save"), ("read", "load")):
        assert result["fio"][op]["GiB_per_second"] > 0 and result["fio"][op][f"{phase}_ratio"] > 0
        assert f"fio's best {op} here ({result['fio'][op]['engine']} " in r.stdout
    assert result["fio"]["odirect"] is True
    assert not list((tmp_path / "ck").rglob("*.pt")) and not list((tmp_path / "ck").rglob("ckpt.*"))
    again = rerun(result, tmp_path)
    assert again["io"]["chunk_size"] == int(win["settings"]["checkpoint.chunk_size"])
    assert again["io"]["storage"]["queue_depth"] == int(win["settings"]["storage.storage_options.queue_depth"])
    assert close(again["metric"]["save_checkpoint_io_mean_GiB_per_second"], win["save_GiB_per_second"])
    assert close(again["metric"]["load_checkpoint_io_mean_GiB_per_second"], win["load_GiB_per_second"])


def test_tune_on_s3_tries_part_sizes_and_objects_in_flight(tmp_path, s3_server):
    env = {**s3_server.env, "AWS_ENDPOINT_URL": s3_server.endpoint}
    r = dlio(["tune", *TINY_CK, "++workload.storage.storage_type=s3",
              f"++workload.storage.storage_root={s3_server.bucket}",
              "++workload.storage.storage_options.part_size=8388608,16777216",
              "++workload.storage.storage_options.threads=1,2", "++hydra.sweep.dir=tn", "--max-gib", "0.05"],
             tmp_path, nprocs=2, env=env, timeout=400)
    assert r.returncode == 0, r.stderr
    result = load(tmp_path / "tn" / "tune.json")
    assert result["ok"] == 4 and "fio" not in result  # no fio on an object store
    win = chosen_by_median(result, tmp_path / "tn")
    assert set(win["settings"]) == {"storage.storage_options.part_size", "storage.storage_options.threads"}
    again = rerun(result, tmp_path, env)
    assert again["io"]["storage"]["part_size"] == int(win["settings"]["storage.storage_options.part_size"])
    assert again["io"]["storage"]["threads"] == int(win["settings"]["storage.storage_options.threads"])
    assert close(again["metric"]["save_checkpoint_io_mean_GiB_per_second"], win["save_GiB_per_second"])


def test_tune_refuses_a_grid_the_storage_has_no_room_for(tmp_path):
    with tmpfs(tmp_path / "small", "size=8m") as small:  # tiny's checkpoint is ~45 MiB
        r = dlio(["tune", *TINY_CK, f"++workload.storage.storage_root={small}", "++hydra.sweep.dir=tn",
                  "--world-size", "2"], tmp_path)
        assert r.returncode == 2 and "--max-gib" in r.stderr and "GiB free: lower --max-gib" in r.stderr, r.stderr
        assert not any(small.iterdir()) and not (tmp_path / "tn").exists()
