"""Shared helpers: run the CLI as a user does, in a temporary folder."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def under_ci() -> bool:
    """CI=true, CI=1, CI=yes...: every CI system's way of saying it (only "", 0, false and no are not)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI nothing may skip but what needs a GPU (marked ``gpu``): a missing mpiexec, server,
    tmpfs, torch or tool would otherwise turn a test into a quiet pass of nothing."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and under_ci() and item.get_closest_marker("gpu") is None:
        reason = (report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)).removeprefix(
            "Skipped: ")
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, where only GPU cases may skip: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """The same rule for a module skipped while it is collected (``pytest.importorskip`` or
    ``pytest.skip(allow_module_level=True)`` at its top): that skip has no test to hang on, so the
    per-test hook above never sees it and CI would pass a whole file of nothing. Under CI it becomes a
    collection error, unless the module says it is a GPU module (``pytestmark`` holding ``pytest.mark.gpu``)."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and under_ci() and not _marked_gpu(collector):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, where only GPU cases may skip: {reason.removeprefix('Skipped: ')}"


def _marked_gpu(collector: pytest.Collector) -> bool:
    """Whether a module that skipped while importing carries ``pytestmark = pytest.mark.gpu`` (or a list with it).
    Its markers are lost with the failed import, so its source is read: the assignment, not the import, decides."""
    if collector.get_closest_marker("gpu") is not None:  # a package or class above it marked gpu
        return True
    path = getattr(collector, "path", None)
    if not isinstance(collector, pytest.Module) or path is None:
        return False
    import ast

    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return False
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets) and any(
                isinstance(n, ast.Attribute) and n.attr == "gpu" and isinstance(n.value, ast.Attribute)
                and n.value.attr == "mark" for n in ast.walk(value)):
            return True
    return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest tests first: the frameworks' real saves and loads (marked ``real``) and tune's grids. With two
    workers stealing work, the suite then ends on short tests on both, not on one long test running alone."""
    items.sort(key=lambda item: 0 if item.get_closest_marker("real") or item.path.name == "test_tune.py" else 1)


BIN = Path(sys.executable).parent
MPIEXEC = BIN / "mpiexec"  # the venv's MPICH; a Debian mpiexec on PATH belongs to another MPI


def dlio(args: list[str], cwd: Path, nprocs: int | None = None, timeout: float = 120,
         env: dict | None = None, python: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m dlio_ckpt ARGS`` as a user runs it (``python``: another environment's interpreter)."""
    cmd = [str(python or sys.executable), "-m", "dlio_ckpt", *args]
    if nprocs is not None:
        if not MPIEXEC.exists():
            pytest.skip("mpiexec from the mpich wheel is not installed in this environment")
        cmd = [str(MPIEXEC), "-n", str(nprocs), *cmd]
    extra = env or {}  # a PYTHONPATH given here (the GPU stand-ins) goes before the repository
    paths = [p for p in (extra.get("PYTHONPATH"), str(REPO)) if p]
    env = {**os.environ, **extra, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def in_a_terminal(cmd: list[str], cwd) -> tuple[int, str]:
    """Run ``cmd`` with a pseudo-terminal as its output, as a user at a shell does."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, cwd=cwd,
                            env={**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm"})
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # the terminal closed: the job ended
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=60), out.decode(errors="replace")


def load(path: Path) -> dict:
    return json.loads(path.read_text())


# -- storage backends: every conformance test runs once per backend -------------------------------

@pytest.fixture(scope="session")
def s3_server():
    from .servers import seaweedfs

    with seaweedfs() as server:
        yield server


@pytest.fixture(scope="session")
def gcs_server():
    from .servers import fake_gcs

    with fake_gcs() as server:
        yield server


@dataclass
class Store:
    """One backend ready for a test: the workload keys that select it, the environment a
    subprocess needs, and a backend instance for direct checks."""

    storage_type: str
    root: str
    options: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)

    def overrides(self) -> list[str]:
        out = [f"++workload.storage.storage_type={self.storage_type}", f"++workload.storage.storage_root={self.root}"]
        return out + [f"++workload.storage.storage_options.{k}={v}" for k, v in self.options.items()]

    def backend(self, **options):
        from dlio_ckpt.io.backends import get_backend

        return get_backend(self.storage_type, self.root, {**self.options, **options})


def gpu_available() -> bool:
    try:
        import cupy
    except ImportError:
        return False
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except cupy.cuda.runtime.CUDARuntimeError:  # no driver, no device
        return False


STANDINS = Path(__file__).resolve().parent / "standins"


def backends(*names: str) -> list:
    """Backend parameters; ``gds`` (a real GPU) marked ``gpu``: the one case that may skip under CI."""
    return [pytest.param(n, marks=pytest.mark.gpu) if n == "gds" else n for n in names]


BACKENDS = backends("local_fs", "s3", "gcs", "null", "gds", "gds_standin")
STORING = backends("local_fs", "s3", "gcs", "gds", "gds_standin")  # those that keep what is written


@pytest.fixture
def gpu_standin(monkeypatch):
    """cupy and kvikio replaced by CPU stand-ins that behave as the real ones did on an H100 without
    nvidia-fs (tests/standins/README.md); the real modules come back afterwards."""
    def purge() -> None:
        for name in list(sys.modules):
            if name.split(".")[0] in ("cupy", "kvikio") or name == "dlio_ckpt.io.backends.gds":
                del sys.modules[name]

    saved = {k: v for k, v in sys.modules.items()
             if k.split(".")[0] in ("cupy", "kvikio") or k == "dlio_ckpt.io.backends.gds"}
    purge()
    monkeypatch.syspath_prepend(str(STANDINS))
    yield {"PYTHONPATH": str(STANDINS)}
    purge()
    sys.modules.update(saved)


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path, monkeypatch):
    kind, name = request.param, request.node.name.split("[")[0][:40]
    if kind == "local_fs":
        yield Store("local_fs", str(tmp_path / "storage"))
    elif kind == "null":
        yield Store("null", "")
    elif kind == "gds":
        if not gpu_available():
            pytest.skip("gds needs a CUDA GPU with kvikio and cupy; none here")
        yield Store("gds", str(tmp_path / "storage"))
    elif kind == "gds_standin":
        yield Store("gds", str(tmp_path / "storage"), env=request.getfixturevalue("gpu_standin"))
    else:
        server = request.getfixturevalue(f"{kind}_server")
        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        prefix = f"{name}-{os.getpid()}-{time.monotonic_ns()}"
        yield Store(kind, f"{server.bucket}/{prefix}", {"endpoint_url": server.endpoint}, dict(server.env))


# -- a real, small file system ---------------------------------------------------------------------

@contextmanager
def tmpfs(folder: Path, options: str) -> Iterator[Path]:
    """A real, small file system of our own (tests run as root here; skip where mounting is not allowed)."""
    folder.mkdir()
    if shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture
def small_fs(tmp_path):
    """A 128 MiB tmpfs: room for tiny's two 45 MiB checkpoints until a test fills it."""
    with tmpfs(tmp_path / "small", "size=128m") as mnt:
        yield mnt
