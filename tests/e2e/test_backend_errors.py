"""Storage that cannot be used is refused before anything is written, with a message that says why."""

from __future__ import annotations

import pytest

from .conftest import dlio

RUN = ["workload=tiny", "++workload.checkpoint.time_between_checkpoints=0", "++hydra.run.dir=out"]


def on(kind: str, root: str, endpoint: str | None = None) -> list[str]:
    """The overrides that select a storage backend (and its server)."""
    out = [f"++workload.storage.storage_type={kind}", f"++workload.storage.storage_root={root}", "--world-size", "2"]
    return out + ([f"++workload.storage.storage_options.endpoint_url={endpoint}"] if endpoint else [])


def refused(tmp_path, extra, env=None, code=2):
    res = dlio([*RUN, *extra], tmp_path, env=env, timeout=120)
    assert res.returncode == code, res.stderr + res.stdout
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists(), "a refused run creates nothing"
    return res.stderr


def test_unknown_storage_option_names_key_and_allowed(tmp_path):
    err = refused(tmp_path, ["++workload.storage.storage_options.thread=4", "--world-size", "2"])
    assert "workload.storage.storage_options.thread=4: unknown option for storage_type=local_fs" in err
    assert "threads" in err


def test_option_of_wrong_type_is_refused(tmp_path, s3_server):
    err = refused(tmp_path, [*on("s3", "b"), "++workload.storage.storage_options.part_size=1000"], env=s3_server.env)
    assert "workload.storage.storage_options.part_size=1000" in err and "greater than or equal" in err


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_missing_bucket_is_named(tmp_path, request, kind):
    server = request.getfixturevalue(f"{kind}_server")
    err = refused(tmp_path, on(kind, "no-such-bucket", server.endpoint), env=server.env)
    assert "workload.storage.storage_root='no-such-bucket': bucket does not exist" in err


def test_s3_without_credentials_says_so(tmp_path, s3_server, monkeypatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.aws either
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    err = refused(tmp_path, on("s3", s3_server.bucket, s3_server.endpoint))
    assert "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in err


def test_unreachable_server_is_named(tmp_path):
    from .servers import S3_ENV, free_ports

    (port,) = free_ports(1)
    tries = "++workload.storage.storage_options.max_attempts=2"
    err = refused(tmp_path, [*on("s3", "b", f"http://127.0.0.1:{port}"), tries], env=S3_ENV, code=1)
    assert f"cannot use s3://b at http://127.0.0.1:{port}: connection refused" in err


def test_odirect_on_an_object_store_is_refused(tmp_path, s3_server):
    err = refused(tmp_path, [*on("s3", s3_server.bucket, s3_server.endpoint), "++workload.checkpoint.odirect=True"],
                  env=s3_server.env)
    assert "workload.checkpoint.odirect=True: storage_type=s3 has no O_DIRECT" in err


@pytest.mark.gpu
def test_gds_without_a_gpu_stops_at_start_up(tmp_path):
    from .conftest import gpu_available

    if gpu_available():
        pytest.skip("this machine has a GPU")
    err = refused(tmp_path, on("gds", "store"))
    assert "workload.storage.storage_type='gds':" in err
    assert "install kvikio and cupy" in err or "needs a CUDA GPU" in err


def test_s3_root_needs_a_bucket(tmp_path):
    err = refused(tmp_path, on("s3", "s3://"))
    assert "workload.storage.storage_root='s3://': storage_type=s3 needs a bucket name" in err
