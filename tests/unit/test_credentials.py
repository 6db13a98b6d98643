"""A key given to a storage without keys is refused without showing it (in this process). Keys reaching their
own storage's clients, against a SeaweedFS that checks signatures: tests/e2e/test_credentials.py."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("given", ["++workload.storage.storage_options.secret_access_key=SEKRETzz",
                                   "++workload.storage.storage_options={secret_access_key: SEKRETzz, bogus: 1}"])
def test_a_key_given_to_a_storage_without_keys_is_refused_without_showing_it(tmp_path, dlio_here, given):
    """A local_fs told secret_access_key=... names the option unknown (exit 2) and does not print the key."""
    r = dlio_here(["plan", "workload=tiny", "--world-size", "4", given])
    assert r.returncode == 2 and "unknown option" in r.stderr, r.stderr
    assert "SEKRETzz" not in r.stderr + r.stdout and "'***'" in r.stderr
