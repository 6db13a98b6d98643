"""Extensions from other packages: without one, an unknown storage type names the registered ones (in this
process; a backend registered by another package, end to end: tests/e2e/test_plugins.py)."""

from __future__ import annotations


def test_an_unknown_storage_type_names_the_registered_ones(tmp_path, dlio_here):
    res = dlio_here(["plan", "--world-size", "2", "workload=tiny", "++workload.storage.storage_type=flatfs"])
    assert res.returncode == 2
    assert "workload.storage.storage_type" in res.stderr and "local_fs" in res.stderr
