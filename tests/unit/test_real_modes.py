"""The real training modes' bad input, refused before anything is written (in this process). The modes run for
real in tests/e2e/test_real_modes.py."""

from __future__ import annotations

import pytest

from tests.e2e.test_real_modes import FSDP


@pytest.mark.parametrize("extra,message", [
    (["++workload.storage.storage_type=null"], "mode=fsdp supports storage_type local_fs, parallel_fs, s3, gcs"),
    (["++workload.checkpoint.num_checkpoints_write=0"], "must be >= 1 in mode=fsdp"),
    (["++workload.fsdp.thread_count=0"], "workload.fsdp.thread_count"),
    (["++workload.fsdp.backend=mpi"], "workload.fsdp.backend"),
    (["++workload.storage.storage_type=s3", "++workload.storage.storage_root=b",
      "++workload.storage.storage_options.endpoint_url=http://127.0.0.1:1",
      "++workload.storage.storage_options.spread_prefixes=4"], "applies to emulated runs only"),
    (["++workload.checkpoint.format=safetensors"], "workload.checkpoint.format='safetensors': applies to emulated"),
    (["++workload.checkpoint.odirect=True"], "workload.checkpoint.odirect=True: applies to emulated"),
])
def test_fsdp_bad_input_exits_2_before_anything_is_written(tmp_path, dlio_here, extra, message):
    r = dlio_here(FSDP + extra)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "hydra_log").exists()
