"""Storage refused before anything is written, as the backend-error tests ask for it: the overrides that select a
backend (and its server), and a run refused in this process, its message. tests/unit/test_backend_errors.py (no
server) and tests/e2e/test_backend_errors.py (SeaweedFS, fake-gcs-server) share them."""

from __future__ import annotations

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
