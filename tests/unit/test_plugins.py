"""Extensions from other packages: without one, an unknown storage type names the registered ones (in this
process; a backend registered by another package, end to end: tests/e2e/test_plugins.py)."""

from __future__ import annotations

import pytest


def test_an_unknown_storage_type_names_the_registered_ones(tmp_path, dlio_here):
    res = dlio_here(["plan", "--world-size", "2", "workload=tiny", "++workload.storage.storage_type=flatfs"])
    assert res.returncode == 2
    assert "workload.storage.storage_type" in res.stderr and "local_fs" in res.stderr


def test_a_mode_that_imports_its_framework_when_it_runs_is_refused_as_load_refuses_it():
    """``require`` finds packages without importing them, and a missing one is the message ``load`` gives: the key,
    the mode, the package and the install command."""
    from dlio_ckpt.errors import ConfigError
    from dlio_ckpt.registry import MODES

    MODES.require("lightning", "json")  # installed: nothing
    with pytest.raises(ConfigError) as found:
        MODES.require("lightning", "json", "no_such_package_dlio")
    assert str(found.value) == ("workload.mode='lightning': needs no_such_package_dlio, which is not installed "
                                "(pip install 'dlio_ckpt[lightning]')")
