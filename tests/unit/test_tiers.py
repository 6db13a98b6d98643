"""Tier lists refused before anything is written, naming key, value and rule, and ``plan`` checking every tier's
options without a client (in this process). Tiers run with real files and a real S3 server in
tests/e2e/test_tiers.py."""

from __future__ import annotations

import pytest

from tests.support.workloads import TINY_TIERED


@pytest.mark.parametrize("extra, key, rule", [
    (["'++workload.tiers=[{storage_type: local_fs, storage_root: local}]'"], "workload.tiers[0].storage_root",
     "same storage as workload.storage"),
    (["'++workload.tiers=[{storage_type: local_fs, storage_root: far, keep_last: 0}]'"], "keep_last",
     "greater than or equal to 1"),
    (["++workload.checkpoint.read_tier=2", "'++workload.tiers=[{storage_type: local_fs, storage_root: far}]'"],
     "workload.checkpoint.read_tier", "number of tiers (1)"),
    (["++workload.storage.keep_last=1"], "workload.storage.keep_last", "raise keep_last"),
    (["'++workload.tiers=[{storage_type: null, storage_root: x}]'"], "workload.tiers[0].storage_type",
     "cannot be a tier"),
    (["'++workload.tiers=[{storage_type: local_fs, storage_root: far, storage_options: {thread: 2}}]'"],
     "workload.tiers[0].storage_options.thread", "unknown option"),
])
def test_bad_tiers_are_refused_before_anything_is_written(tmp_path, dlio_here, extra, key, rule):
    r = dlio_here(["--world-size", "2", *TINY_TIERED, "++hydra.run.dir=run", *(e.strip("'") for e in extra)])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert key in r.stderr and rule in r.stderr, r.stderr
    assert r.stderr.count("error:") == 1, r.stderr
    assert not (tmp_path / "local").exists() and not (tmp_path / "far").exists() and not (tmp_path / "run").exists()


def test_plan_checks_every_tiers_options_without_a_client(tmp_path, dlio_here):
    r = dlio_here(["plan", "--world-size", "2", *TINY_TIERED,
                   "++workload.tiers=[{storage_type: s3, storage_root: b, storage_options: {read_sise: 1}}]"])
    assert r.returncode == 2 and "workload.tiers[0].storage_options.read_sise" in r.stderr, r.stderr
