"""Storage that cannot be used is refused before anything is written, with a message that says why (in this
process): these need no server; those against SeaweedFS and fake-gcs-server are in tests/e2e/test_backend_errors.py."""

from __future__ import annotations

import sys

import pytest

from tests.support.refusals import on, refused


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


def test_the_crts_lost_endpoint_is_said_as_one_it_cannot_connect_to():
    """The CRT's words when the endpoint (127.0.0.1 behind the fault proxy) went away mid-load, seen once in the
    fault matrix: a resolver failure, said as what it means for the user, and a retry may help."""
    from dlio_ckpt.io.backends.s3 import failure

    crt = RuntimeError("Client error: Unknown CRT error: CRT error 1058: aws-c-io: AWS_IO_DNS_QUERY_FAILED, A query "
                       "to dns failed to resolve.")
    said = failure("cannot open", "s3://b/k", crt)
    assert str(said).startswith("cannot open s3://b/k: cannot connect: the client has no address for "
                                "storage_options.endpoint_url"), said
    assert "AWS_IO_DNS_QUERY_FAILED" in str(said) and said.transient


def test_a_gcs_request_is_tried_max_attempts_times():
    """gcsfs fixes its own count (6, some 30 s of backoff against a server gone); ``max_attempts`` sets it. A server
    that takes each connection and closes it at once counts the tries: twice as many for 2 as for 1 (aiohttp
    itself opens a connection again once where the first is closed unanswered)."""
    import socket
    import threading

    from dlio_ckpt.errors import StorageError
    from dlio_ckpt.io.backends import get_backend

    with socket.create_server(("127.0.0.1", 0)) as server:
        accepted: list[int] = []

        def serve() -> None:
            while True:
                try:
                    connection, _ = server.accept()
                except OSError:  # closed at the end of the test
                    return
                accepted.append(1)
                connection.close()

        threading.Thread(target=serve, daemon=True).start()
        endpoint = f"http://127.0.0.1:{server.getsockname()[1]}"
        tries = {}
        for attempts in (1, 2):
            accepted.clear()
            store = get_backend("gcs", "bucket/k", {"endpoint_url": endpoint, "max_attempts": attempts})
            with pytest.raises(StorageError, match="cannot read gs://bucket/k/object"):
                store.get_small(store.join("object"))
            tries[attempts] = len(accepted)
    assert tries[1] >= 1 and tries[2] == 2 * tries[1], tries
