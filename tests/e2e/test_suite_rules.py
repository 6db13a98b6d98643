"""The suite's own rule: under CI nothing skips but the GPU cases (a skip there would pass nothing)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import REPO

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



@pytest.mark.parametrize("runner", [{}, {"CI": "false"}], ids=["CI-unset", "CI-false"])
def test_ci_runs_the_suite_under_ci_whatever_the_runner_exports(tmp_path, runner):
    """``.ci/run`` sets CI=true itself: a runner that exports no CI (or CI=false) still gets the rule above. A copy
    of it runs beside a stand-in scripts/test.sh that reports the CI it was given."""
    (tmp_path / ".ci").mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / ".ci" / "run").write_text((REPO / ".ci" / "run").read_text())
    (tmp_path / "scripts" / "test.sh").write_text('echo "CI=${CI:-}"\n')
    env = {k: v for k, v in os.environ.items() if k != "CI"} | runner
    r = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "CI=true", r.stdout + r.stderr


MISSING = "a_package_no_one_installed_here"  # importorskip's target: absent everywhere
SKIPPED_MODULES = {
    "test_needs_a_package.py": f'import pytest\n\npytest.importorskip("{MISSING}")\n\n\ndef test_it():\n    pass\n',
    "test_skips_itself.py": 'import pytest\n\npytest.skip("no tmpfs here", allow_module_level=True)\n',
    "test_needs_a_gpu_package.py": f'import pytest\n\npytestmark = [pytest.mark.gpu]\n'
                                   f'pytest.importorskip("{MISSING}_cuda")\n\n\ndef test_it():\n    pass\n',
    "test_runs.py": "def test_plain():\n    pass\n",
}


def _pytest(folder, ci: str) -> subprocess.CompletedProcess:
    (folder / "conftest.py").write_text(
        "from tests.conftest import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401\n")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-W",
                           "ignore", "-o", "markers=gpu: a GPU case", "-rs", str(folder)], capture_output=True,
                          text=True, cwd=folder, timeout=120, env={**os.environ, "CI": ci, "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize("ci", ["true", "", "false"])
def test_under_ci_a_module_skipped_at_collection_fails_too(tmp_path, ci):
    """A module-level ``importorskip`` (or ``skip(allow_module_level=True)``) skips at collection, where no
    test's report is made: under CI it is an error naming the reason, as a skipped test is a failure; a
    module marked ``gpu`` still skips; outside CI all three skip and the plain test passes."""
    for name, text in SKIPPED_MODULES.items():
        (tmp_path / name).write_text(text)
    r = _pytest(tmp_path, ci)
    out = r.stdout
    if ci == "true":
        assert r.returncode != 0 and "2 errors" in out and "1 skipped" in out, out
        assert f"skipped under CI, where only GPU cases may skip: could not import '{MISSING}'" in out, out
        assert "skipped under CI, where only GPU cases may skip: no tmpfs here" in out, out
        assert f"{MISSING}_cuda" in out and f"only GPU cases may skip: could not import '{MISSING}_cuda'" not in out
    else:
        assert r.returncode == 0 and "1 passed, 3 skipped" in out and "error" not in out, out


def test_a_plain_pip_install_installs_every_package_and_the_workloads(tmp_path):
    """``pip install .`` installs every package of the tool and the workloads: a subpackage or a YAML left
    out works in the editable checkout the tests use and fails for every user (dlio_ckpt.plan.layouts once
    did). The wheel pip would install is built and its files compared with the tree's."""
    import shutil
    import subprocess
    import sys
    import zipfile

    root = REPO
    source = tmp_path / "source"  # a copy: setuptools builds in the tree, and leaves build/ there
    for name in ("dlio_ckpt", "configs"):
        shutil.copytree(root / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(root / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path), str(source)], check=True, capture_output=True, cwd=tmp_path)
    (wheel,) = tmp_path.glob("dlio_ckpt-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    for source in (root / "dlio_ckpt").rglob("*.py"):
        if "__pycache__" not in source.parts:
            assert source.relative_to(root).as_posix() in shipped, f"{source.relative_to(root)} is not installed"
    for workload in (root / "configs").rglob("*.yaml"):
        assert f"dlio_ckpt/configs/{workload.relative_to(root / 'configs').as_posix()}" in shipped, workload
