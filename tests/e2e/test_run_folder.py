"""One run, one folder, and every place a run writes tried before it starts: a run folder that
already holds a run is refused unless the user asks to replace it (then only a run's files go);
``report``, ``diff`` and ``check`` refuse a folder whose files disagree on the run; a read-only or
immutable run folder, checkpoint folder or tier, and an empty path, are bad input (exit 2, one line
naming key, path and cause, nothing left behind); no override is ignored."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.support.cli import dlio, load
from tests.support.storage import tmpfs
from tests.support.workloads import TINY_ONE_SAVE_ONE_LOAD


def run(cwd, *extra: str, nprocs: int | None = None):
    return dlio([*TINY_ONE_SAVE_ONE_LOAD, *extra], cwd, nprocs=nprocs)


def snapshot(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- one run, one folder ------------------------------------------------------------------------------

@pytest.mark.mpi
def test_a_second_run_into_a_held_run_folder_is_refused_unless_replaced(tmp_path, dlio_here):
    first = dlio(["workload=tiny", "++hydra.run.dir=results/new", "++workload.checkpoint.checkpoint_folder=ck1"],
                 tmp_path, nprocs=4)
    assert first.returncode == 0, first.stderr
    (tmp_path / "results" / "new" / "notes.txt").write_text("mine")
    before = snapshot(tmp_path / "results" / "new")
    again = dlio_here([*TINY_ONE_SAVE_ONE_LOAD, "++hydra.run.dir=results/new",  # refused
                       "++workload.checkpoint.checkpoint_folder=ck2"])
    assert again.returncode == 2 and again.stderr.count("error:") == 1, again.stderr
    assert "hydra.run.dir='results/new': already holds a run (" in again.stderr and "--replace-results" in again.stderr
    assert snapshot(tmp_path / "results" / "new") == before and not (tmp_path / "ck2").exists()
    replaced = dlio(["workload=tiny", "++hydra.run.dir=results/new", "++workload.checkpoint.checkpoint_folder=ck2",
                     "--replace-results"], tmp_path, nprocs=2)
    assert replaced.returncode == 0, replaced.stderr
    folder = tmp_path / "results" / "new"
    assert sorted(p.name for p in folder.glob("*_per_epoch_stats.json")) == ["0_per_epoch_stats.json",
                                                                              "1_per_epoch_stats.json"]
    assert (folder / "notes.txt").read_text() == "mine"  # not a file a run writes: left alone
    assert (folder / "dlio_ckpt.log").read_text().count("done: checkpoint") == 1
    summary = load(folder / "summary.json")
    assert summary["num_processes"] == 2 and summary["run_id"]
    assert {load(folder / f"{p}_per_epoch_stats.json")["1"]["run_id"] for p in (0, 1)} == {summary["run_id"]}
    for command in (["report", str(folder)], ["check", str(folder)], ["diff", str(folder), str(folder)]):
        r = dlio_here(command)  # read-only commands, in this process: a process of their own adds only its start
        assert r.returncode in (0, 1) and "disagree" not in r.stderr, r.stderr  # check: 1, rules not met


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two runs, a and b, each a folder of its own: each case below mixes copies of them (the same two runs for
    both cases, made once)."""
    tmp = tmp_path_factory.mktemp("two_runs")
    for name in ("a", "b"):
        r = dlio(["workload=tiny", "--world-size", "2", f"++hydra.run.dir={name}",
                  f"++workload.checkpoint.checkpoint_folder=ck_{name}"], tmp)
        assert r.returncode == 0, r.stderr
    return tmp


@pytest.mark.parametrize("mix", ["more_processes", "another_run"])
def test_report_diff_and_check_refuse_a_folder_whose_files_disagree_on_the_run(tmp_path, mix, two_runs, dlio_here):
    for name in ("a", "b"):
        shutil.copytree(two_runs / name, tmp_path / name)
    if mix == "more_processes":  # what a second run of more processes left beside this one's files
        shutil.copy(tmp_path / "b" / "0_per_epoch_stats.json", tmp_path / "a" / "1_per_epoch_stats.json")
        shutil.copy(tmp_path / "b" / "0_per_epoch_stats.json", tmp_path / "a" / "3_per_epoch_stats.json")
        said = "summary.json counts 1 processes and the folder holds per_epoch_stats of processes [0, 1, 3]"
    else:
        shutil.copy(tmp_path / "b" / "0_per_epoch_stats.json", tmp_path / "a" / "0_per_epoch_stats.json")
        said = "the per_epoch_stats of processes [0] are of another run"
    for command in (["report", "a"], ["check", "a"], ["diff", "b", "a"]):
        r = dlio_here(command)  # bad input: in this process
        assert r.returncode == 2, (command, r.stdout, r.stderr)
        assert "its files disagree on the run" in r.stderr and said in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


# -- every place a run writes, tried first -------------------------------------------------------------

def _refused(r, key: str, cause: str, *absent) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.count("dlio_ckpt: error:") == 1 and f"{key}=" in r.stderr and cause in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    for path in absent:
        assert not path.exists(), path


@pytest.mark.mpi
def test_a_read_only_run_folder_is_bad_input_before_anything_is_written(tmp_path):
    with tmpfs(tmp_path / "ro", "ro,size=1m") as ro:
        r = run(tmp_path, f"++hydra.run.dir={ro}/run", "++workload.checkpoint.checkpoint_folder=ck", nprocs=2)
        _refused(r, "hydra.run.dir", f"cannot write {ro}/run: Read-only file system (errno 30)", tmp_path / "ck")


@pytest.mark.mpi
def test_a_read_only_checkpoint_folder_outside_storage_root_leaves_no_run_folder(tmp_path):
    with tmpfs(tmp_path / "ro", "ro,size=1m") as ro:
        r = run(tmp_path, "++hydra.run.dir=run", f"++workload.checkpoint.checkpoint_folder={ro}/ck", nprocs=2)
        _refused(r, "workload.checkpoint.checkpoint_folder", "Read-only file system (errno 30)", tmp_path / "run")
        assert "(on host " in r.stderr and ", rank 0)" in r.stderr


@pytest.fixture
def immutable(tmp_path):
    folder = tmp_path / "immutable"
    folder.mkdir()
    made = subprocess.run(["chattr", "+i", str(folder)], capture_output=True)
    assert made.returncode == 0, f"chattr +i failed here: {made.stderr!r}"  # the suite runs as root on ext4
    yield folder
    subprocess.run(["chattr", "-i", str(folder)], check=True)


@pytest.mark.parametrize("where", ["checkpoint_folder", "storage_root", "tier", "run_dir"])
def test_an_immutable_folder_is_bad_input_before_step_1(tmp_path, immutable, where, dlio_here):
    args, key = {"checkpoint_folder": ([f"++workload.checkpoint.checkpoint_folder={immutable}/ck"],
                                       "workload.checkpoint.checkpoint_folder"),
                 "storage_root": ([f"++workload.storage.storage_root={immutable}"],
                                  "workload.checkpoint.checkpoint_folder"),
                 "tier": ([f"++workload.tiers=[{{storage_type: local_fs, storage_root: {immutable}}}]"],
                          "workload.tiers[0].storage_root"),
                 "run_dir": ([f"++hydra.run.dir={immutable}/run"], "hydra.run.dir")}[where]
    r = dlio_here([*TINY_ONE_SAVE_ONE_LOAD, "++hydra.run.dir=run", *args])  # bad input: in this process
    _refused(r, key, "Operation not permitted (errno 1)", tmp_path / "run", tmp_path / "checkpoints")
    assert list(immutable.iterdir()) == []


# -- no override is ignored (the other cases: tests/unit/test_run_folder.py) ---------------------------

def test_hydras_own_keys_and_a_tier_typo(tmp_path, dlio_here):
    r = run(tmp_path, "++hydra.run.dir=out", "++hydra.job.chdir=False")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["status"] == "ok"
    r = dlio_here(["plan", *TINY_ONE_SAVE_ONE_LOAD,
                   "++workload.tiers=[{storage_type: local_fs, storage_root: far, keep_lst: 1}]"])
    assert r.returncode == 2, r.stderr
    assert "workload.tiers[0].keep_lst=1: unknown key (did you mean 'keep_last'?); allowed keys here: keep_last, " \
           "replicas, replication, scope, storage_options, storage_root, storage_type" in r.stderr


# -- where the run wrote, said right ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory):
    """One run from a folder of its own into an absolute checkpoint folder elsewhere, for the tests below."""
    tmp = tmp_path_factory.mktemp("elsewhere")
    (tmp / "cwd").mkdir()
    r = run(tmp / "cwd", f"++workload.checkpoint.checkpoint_folder={tmp / 'far' / 'ck'}", "++hydra.run.dir=run")
    assert r.returncode == 0, r.stderr
    return tmp


def test_an_absolute_checkpoint_folder_is_where_the_summary_says_the_storage_is(elsewhere):
    io = load(elsewhere / "cwd" / "run" / "summary.json")["io"]
    assert io["storage"]["root"] == str(elsewhere / "far")  # not the folder the run started in
    assert io["checkpoint_folder"] == str(elsewhere / "far" / "ck")


def test_each_file_is_listed_once_with_its_bytes_and_its_fsync_or_eviction_beside(elsewhere):
    """The engine times a file's fsync (a load's eviction) as a pass of 0 bytes: it was listed as the file again."""
    stats = load(elsewhere / "cwd" / "run" / "0_per_epoch_stats.json")["1"]
    for name, later in (("save_ckpt1", "fsync_times"), ("load_ckpt1", "evict_times")):
        entry = stats[name]
        names = [f[0] for f in entry["file_times"]]
        assert len(names) == len(set(names)) == entry["files"], (name, entry["file_times"])
        assert all(f[3] > 0 for f in entry["file_times"]) and sum(f[3] for f in entry["file_times"]) == entry["bytes"]
        assert sorted(f[0] for f in entry[later]) == sorted(names)  # tiny fsyncs; a load evicts each file first
        assert all(len(f) == 3 and f[1] <= f[2] for f in entry[later])
