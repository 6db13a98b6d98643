"""Storage that cannot be used is refused before anything is written, with a message that says why (in this
process): these need no server; those against SeaweedFS and fake-gcs-server are in tests/e2e/test_backend_errors.py."""

from __future__ import annotations

import re

import pytest

RUN = ["workload=tiny", "++workload.checkpoint.time_between_checkpoints=0", "++hydra.run.dir=out"]


def on(kind: str, root: str, endpoint: str | None = None) -> list[str]:
    """The overrides that select a storage backend (and its server)."""
    out = [f"++workload.storage.storage_type={kind}", f"++workload.storage.storage_root={root}", "--world-size", "2"]
    return out + ([f"++workload.storage.storage_options.endpoint_url={endpoint}"] if endpoint else [])


def refused(dlio_here, tmp_path, extra: list[str], env: dict | None = None, code: int = 2) -> str:
    """A run of ``RUN`` and ``extra`` in this process (``dlio_here``), refused with ``code``, creating nothing:
    its message."""
    res = dlio_here([*RUN, *extra], env=env)
    assert res.returncode == code, res.stderr + res.stdout
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists(), "a refused run creates nothing"
    return res.stderr


def test_unknown_storage_option_names_key_and_allowed(tmp_path, dlio_here):
    err = refused(dlio_here, tmp_path, ["++workload.storage.storage_options.thread=4", "--world-size", "2"])
    assert "workload.storage.storage_options.thread=4: unknown option for storage_type=local_fs" in err
    assert "threads" in err


@pytest.mark.gpu
def test_gds_without_a_gpu_stops_at_start_up(tmp_path, dlio_here):
    from tests.support.storage import gpu_available

    if gpu_available():
        pytest.skip("this machine has a GPU")
    err = refused(dlio_here, tmp_path, on("gds", "store"))
    assert "workload.storage.storage_type='gds':" in err
    # the module found missing first, and the extra that provides both (the registry's install hint)
    missing = re.search(r"needs (cupy|kvikio), which is not installed \(pip install 'dlio_ckpt\[gds-cu13\]'", err)
    assert missing or "needs a CUDA GPU" in err, err


def test_s3_root_needs_a_bucket(tmp_path, dlio_here):
    err = refused(dlio_here, tmp_path, on("s3", "s3://"))
    assert "workload.storage.storage_root='s3://': storage_type=s3 needs a bucket name" in err
