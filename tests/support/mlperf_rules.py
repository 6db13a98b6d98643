"""What ``check``'s MLPerf Storage rules say of run folders, called in this process: each rule's verdict, or what
one rule found. The rules' tests on made run folders (tests/unit/test_mlperf_editions.py) and on real invocations
(tests/e2e/test_mlperf_editions.py) share them."""

from __future__ import annotations

from pathlib import Path

from dlio_ckpt.tools.readers.mlperf import check_runs
from dlio_ckpt.tools.readers.runfiles import load_run


def verdicts(runs: list[Path], edition: str = "4.0", division: str = "closed") -> dict[str, str]:
    rules = check_runs([load_run(str(r)) for r in runs], edition, division)
    return {r.name: r.verdict for r in rules}


def said(runs: list[Path], name: str, edition: str = "4.0", division: str = "closed") -> str:
    return next(r.actual for r in check_runs([load_run(str(r)) for r in runs], edition, division) if r.name == name)
