"""``checkpoint.reference``: a key set against the preset is refused, naming key, value and the preset's value (in
this process). What each preset does in its system calls, held to upstream DLIO's own:
tests/against_frameworks/test_references.py."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("args, said", [
    (["++workload.checkpoint.reference=mlcommons", "++workload.checkpoint.chunk_size=8388608"],
     "workload.checkpoint.chunk_size=8388608: checkpoint.reference=mlcommons sets it to 33554432"),
    (["++workload.checkpoint.reference=dlio-2.0", "++workload.storage.storage_options.queue_depth=8"],
     "workload.storage.storage_options.queue_depth=8: checkpoint.reference=dlio-2.0 sets it to 1"),
    (["++workload.checkpoint.reference=dlio-2.0", "++workload.storage.storage_type=s3",
      "++workload.storage.storage_root=b"], "models a file system's I/O (local_fs, parallel_fs); storage_type is s3"),
])
def test_a_key_set_against_the_preset_is_refused(tmp_path, dlio_here, args, said):
    r = dlio_here(["plan", "workload=tiny", "--world-size", "2", *args])
    assert r.returncode == 2 and said in r.stderr, r.stderr
