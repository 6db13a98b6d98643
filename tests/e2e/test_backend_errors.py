"""Storage that cannot be used is refused before anything is written, with a message that says why: against
SeaweedFS and fake-gcs-server (a missing bucket, no credentials, a server not there), in this process; those that
need no server are in tests/unit/test_backend_errors.py."""

from __future__ import annotations

import pytest

from tests.support.refusals import on, refused


def test_option_of_wrong_type_is_refused(tmp_path, dlio_here, s3_server):
    err = refused(dlio_here, tmp_path, [*on("s3", "b"), "++workload.storage.storage_options.part_size=1000"],
                  env=s3_server.env)
    assert "workload.storage.storage_options.part_size=1000" in err and "greater than or equal" in err


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_missing_bucket_is_named(tmp_path, dlio_here, request, kind):
    server = request.getfixturevalue(f"{kind}_server")
    err = refused(dlio_here, tmp_path, on(kind, "no-such-bucket", server.endpoint), env=server.env)
    assert "workload.storage.storage_root='no-such-bucket': bucket does not exist" in err


def test_s3_without_credentials_says_so(tmp_path, dlio_here, s3_server, monkeypatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.aws either
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    err = refused(dlio_here, tmp_path, on("s3", s3_server.bucket, s3_server.endpoint))
    assert "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in err


def test_unreachable_server_is_named(tmp_path, dlio_here):
    from tests.support.servers import S3_ENV, free_ports

    (port,) = free_ports(1)
    tries = "++workload.storage.storage_options.max_attempts=2"
    err = refused(dlio_here, tmp_path, [*on("s3", "b", f"http://127.0.0.1:{port}"), tries], env=S3_ENV, code=1)
    assert f"cannot use s3://b at http://127.0.0.1:{port}: connection refused" in err


def test_odirect_on_an_object_store_is_refused(tmp_path, dlio_here, s3_server):
    err = refused(dlio_here, tmp_path, [*on("s3", s3_server.bucket, s3_server.endpoint),
                                        "++workload.checkpoint.odirect=True"], env=s3_server.env)
    assert "workload.checkpoint.odirect=True: storage_type=s3 has no O_DIRECT" in err
