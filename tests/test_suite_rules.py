"""The suite's own rule: under CI nothing skips but the GPU cases (a skip there would pass nothing)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import REPO

CASES = '''
import pytest

def test_needs_a_tool():
    pytest.skip("mpiexec is not installed")

@pytest.mark.gpu
def test_needs_a_gpu():
    pytest.skip("no CUDA GPU here")
'''


@pytest.mark.parametrize("ci, outcome", [("true", "1 failed, 1 skipped"), ("1", "1 failed, 1 skipped"),
                                         ("", "2 skipped"), ("false", "2 skipped")])
def test_under_ci_only_gpu_cases_may_skip(tmp_path, ci, outcome):
    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_runtest_makereport  # noqa: F401\n")
    (tmp_path / "test_cases.py").write_text(CASES)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
                        "-o", "markers=gpu: a GPU case", str(tmp_path)], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120, env={**os.environ, "CI": ci, "PYTHONPATH": str(REPO)})
    assert outcome in r.stdout, r.stdout
    if "failed" in outcome:
        assert "skipped under CI, where only GPU cases may skip: mpiexec is not installed" in r.stdout


def test_every_package_of_the_tool_is_installed_by_setup_py():
    """``pip install .`` installs the packages setup.py names: a new subpackage left out works in the
    editable checkout the tests use and fails for every user (dlio_ckpt.layouts once did)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    named = (root / "setup.py").read_text()
    for init in (root / "dlio_ckpt").rglob("__init__.py"):
        package = ".".join(init.parent.relative_to(root).parts)
        assert f'"{package}"' in named, f"{package} is not in setup.py's packages"
