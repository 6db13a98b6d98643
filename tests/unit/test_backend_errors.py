"""Storage that cannot be used is refused before anything is written, with a message that says why (in this
process): these need no server; those against SeaweedFS and fake-gcs-server are in tests/e2e/test_backend_errors.py."""

from __future__ import annotations

import sys

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


def test_gds_without_cupy_stops_at_start_up_naming_the_extra(tmp_path, dlio_here, monkeypatch):
    """A machine without cupy (made so here, whatever this one has: its import fails) is told which extra provides
    it, the registry's install hint."""
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy: ImportError
    monkeypatch.delitem(sys.modules, "dlio_ckpt.io.backends.gds", raising=False)  # imported afresh, without it
    err = refused(dlio_here, tmp_path, on("gds", "store"))
    assert "workload.storage.storage_type='gds': needs cupy, which is not installed (pip install " \
        "'dlio_ckpt[gds-cu13]'" in err, err


def test_gds_without_a_gpu_stops_at_start_up(tmp_path, dlio_here, gpu_standin, monkeypatch):
    """cupy installed and no device (the stand-in's count set to none, whatever this machine has): refused at
    start-up, saying so. Neither case needs a GPU or its absence, so neither skips."""
    import cupy

    monkeypatch.setattr(cupy.cuda.runtime, "device_count", 0)
    err = refused(dlio_here, tmp_path, on("gds", "store"))
    assert "workload.storage.storage_type='gds': needs a CUDA GPU; none found" in err, err


def test_s3_root_needs_a_bucket(tmp_path, dlio_here):
    err = refused(dlio_here, tmp_path, on("s3", "s3://"))
    assert "workload.storage.storage_root='s3://': storage_type=s3 needs a bucket name" in err
