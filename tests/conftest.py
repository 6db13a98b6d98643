"""The suite's rules (pytest hooks) and its shared fixtures. Helpers that are neither live in
``tests/support/`` (tests/README.md says where each kind of test and helper is)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.support import STANDINS, TESTS
from tests.support.cli import run_here
from tests.support.storage import BACKENDS, Store, gpu_available, tmpfs


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


SLOW_FOLDERS = ("e2e", "against_frameworks")  # tests that run the tool as processes, or the frameworks themselves


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under ``tests/e2e/`` and ``tests/against_frameworks/`` is marked ``slow`` by where it is (the fast
    lane, ``-m "not slow"``, is the in-process tests of ``tests/unit/``; a slow one there is marked by hand).
    Then the slowest tests first: the frameworks' real saves and loads (marked ``real``) and tune's grids, then the
    other slow ones, the in-process tests last. With the workers stealing work, the suite then ends on short tests
    on each, not on one long test running alone."""
    for item in items:
        if item.path.is_relative_to(TESTS) and item.path.relative_to(TESTS).parts[0] in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)

    def rank(item: pytest.Item) -> int:
        slow = item.get_closest_marker("slow") is not None
        if item.get_closest_marker("real") or (slow and item.path.name == "test_tune.py"):
            return 0
        return 1 if slow else 2
    items.sort(key=rank)


# -- the command line in this process ------------------------------------------------------------

@pytest.fixture
def dlio_here(tmp_path, monkeypatch, capfd):
    """``dlio_ckpt ARGS`` in this process (``tests.support.cli.run_here``), in the test's folder unless ``cwd`` is
    given, with ``env`` added to the environment: a ``CompletedProcess`` as ``dlio()`` returns. For bad input and
    read-only commands, where a process of its own (1-2 s of interpreter and Hydra start) adds nothing; the real
    entry point is held by tests/e2e/."""
    def run(args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None):
        return run_here(args, cwd or tmp_path, monkeypatch, capfd, env)
    return run


# -- storage backends: every conformance test runs once per backend -------------------------------

@pytest.fixture(scope="session")
def s3_server():
    from tests.support.servers import seaweedfs

    with seaweedfs() as server:
        yield server


@pytest.fixture(scope="session")
def gcs_server():
    from tests.support.servers import fake_gcs

    with fake_gcs() as server:
        yield server


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

@pytest.fixture
def small_fs(tmp_path):
    """A 128 MiB tmpfs: room for tiny's two 45 MiB checkpoints until a test fills it."""
    with tmpfs(tmp_path / "small", "size=128m") as mnt:
        yield mnt
