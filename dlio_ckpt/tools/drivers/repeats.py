"""``run --repeat N``: the job run N times, each repeat an ordinary run in ``<run folder>/repeat<k>/``, and
``repeats.json`` written beside them (its figures: :mod:`dlio_ckpt.tools.readers.repeated`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.results.summary import dumps, write_result
from dlio_ckpt.tools.readers.repeated import REPEATS, summarize
from dlio_ckpt.tools.readers.runfiles import load_run


def repeat_folder(run_dir: str, k: int) -> str:
    return str(Path(run_dir) / f"repeat{k}")


def write_repeats(run_dir: str, count: int) -> Path:
    """Read the ``count`` repeats in ``run_dir`` and write ``repeats.json`` beside them; its path."""
    runs = [load_run(repeat_folder(run_dir, k)) for k in range(1, count + 1)]
    path = Path(run_dir) / REPEATS
    write_result(str(path), dumps(summarize(runs)))
    return path


def check_repeat(count: int) -> None:
    if count < 1:
        raise ConfigError("--repeat", count, "must be at least 1 (the number of times the job runs)")


def replaced(workload: Any, raw: dict) -> tuple[Any, dict]:
    """A repeat after the first: the same job, its checkpoint folder's earlier repeat replaced (overwrite, which
    removes only what the run record of that repeat names), as a sweep's point replaces an interrupted attempt."""
    ck = workload.checkpoint.model_copy(update={"overwrite": True})
    return workload.model_copy(update={"checkpoint": ck}), \
        {**raw, "checkpoint": {**raw.get("checkpoint", {}), "overwrite": True}}
