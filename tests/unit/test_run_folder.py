"""No override is ignored and no path is empty: an override outside the workload names the likely key, a swept one
is no label, an empty path is refused (exit 2, one line, nothing created; in this process). The run folder and
every place a run writes, tried for real: tests/e2e/test_run_folder.py."""

from __future__ import annotations

import pytest

from tests.support.workloads import TINY_ONE_SAVE_ONE_LOAD


@pytest.mark.parametrize("override, key, rule", [
    ("++workload.checkpoint.checkpoint_folder=", "workload.checkpoint.checkpoint_folder=''", "must name a folder"),
    ("++workload.storage.storage_root=", "workload.storage.storage_root=''", "needs a folder or bucket"),
    ("++hydra.run.dir=", "hydra.run.dir=''", "must name a folder for the results"),
    ("++workload.tiers=[{storage_type: local_fs, storage_root: ''}]", "workload.tiers[0].storage_root=''",
     "needs a folder or bucket"),
])
def test_an_empty_path_is_refused(tmp_path, dlio_here, override, key, rule):
    r = dlio_here([*TINY_ONE_SAVE_ONE_LOAD, override])
    assert r.returncode == 2 and key in r.stderr and rule in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["run", "plan", "sweep"])
@pytest.mark.parametrize("override, said", [
    ("++checkpoint.format=raw", "checkpoint.format='raw': not a key of the configuration (did you mean "
                                "workload.checkpoint.format?"),
    ("++model.num_layers=40", "did you mean workload.model.num_layers?"),
    ("++foo=1", "foo='1': not a key of the configuration (workload keys are set as ++workload.SECTION.KEY=VALUE"),
    ("++chekpoint.fsync=True", "did you mean workload.checkpoint.fsync?"),
])
def test_an_override_outside_the_workload_is_an_error_naming_the_likely_key(tmp_path, dlio_here, command, override,
                                                                            said):
    sweep = ["++workload.checkpoint.format=pt,raw"] if command == "sweep" else []
    head = [] if command == "run" else [command]
    r = dlio_here([*head, *TINY_ONE_SAVE_ONE_LOAD, override, *sweep])
    assert r.returncode == 2 and said in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []


def test_a_swept_key_outside_the_workload_is_an_error_not_a_label(tmp_path, dlio_here):
    """``++checkpoint.format=pt,raw`` once ran pt twice under the labels pt and raw."""
    r = dlio_here(["sweep", *TINY_ONE_SAVE_ONE_LOAD, "++checkpoint.format=pt,raw"])
    assert r.returncode == 2 and "did you mean workload.checkpoint.format?" in r.stderr, r.stderr
    assert "(sweep point 1: checkpoint.format=pt)" in r.stderr and list(tmp_path.iterdir()) == []
