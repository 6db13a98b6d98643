"""What the tests share that is not a pytest hook or fixture (those are in ``tests/conftest.py``).

- :mod:`tests.support.cli`: the tool as a user runs it (``python -m dlio_ckpt``, under mpiexec, at a terminal)
  and in this process (:func:`~tests.support.cli.run_here`, for bad input and read-only commands);
- :mod:`tests.support.jobs`: MPI jobs started in the background, to be signalled, killed or cut off mid-run;
- :mod:`tests.support.storage`: the storage backends a test runs against, and a real small file system;
- :mod:`tests.support.servers`, :mod:`tests.support.proxy`: the object-store servers and a proxy in front of them;
- :mod:`tests.support.made_runs`: run folders made through the real result writers, at any process count;
- :mod:`tests.support.strace_calls`: reading strace's record of a run;
- the rest, each named for what it holds, is what two test files share (tests/README.md lists them): a test
  module never imports another (tests/unit/test_suite_layout.py).

The paths below are the repository's and the tests' folders, computed once here: a test file may move
between ``tests/``'s folders without its data's paths changing.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
DATA = TESTS / "data"  # files the frameworks and DLIO wrote, kept as test data
DLIO_RUN = DATA / "dlio_run"  # a real run folder of upstream DLIO (its SOURCE.md says how it was made)
ORACLES = TESTS / "oracles"  # scripts that run the real frameworks and record what they do
STANDINS = TESTS / "standins"  # CPU stand-ins for cupy and kvikio
PLUGINS = TESTS / "plugins"  # a package registering a storage backend from outside the tool
