"""Reading a finished run back: its summary, its config and each process's stats, from a run
folder or a summary.json, ours or DLIO's.

Why lenient JSON: DLIO writes bare ``NaN`` (a read-only run's save metrics); Python's parser reads it
and the commands that compare runs treat it as "no figure". Why one reader: ``diff``, ``report`` and
``check`` must agree on what a run is, and fail the same way (exit 2, one message) on what is not.
Why through the model (:mod:`dlio_ckpt.results.schema`): the writer and every reader then name each
figure once, and a file that is not a summary is refused here, not half-read by each tool.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dlio_ckpt.errors import DlioCkptError
from dlio_ckpt.results.folder import PER_PROCESS, flatten
from dlio_ckpt.results.schema import FailedSummary, Metric, Summary, read_summary


class UnreadableRunError(DlioCkptError):
    """A path that is not a readable run: exit 2, naming the path and what is wrong."""

    exit_code = 2


@dataclass
class Run:
    """A finished run as the tools read it. ``summary`` may be given as parsed JSON (a test's figures): it is
    validated into the model, as :func:`load_run` does."""

    path: str  # as the user gave it
    folder: Path | None
    summary: Summary
    config: dict[str, Any] | None = None  # the workload section, flattened to dotted keys
    per_process: dict[int, dict[str, Any]] = field(default_factory=dict)  # {process: per_epoch_stats}
    # a repeated run (dlio_ckpt.tools.readers.repeated): each metric is its median, with this interval for it
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    repeats: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.summary, dict):
            self.summary = Summary.model_validate(self.summary)

    @property
    def ours(self) -> bool:
        return self.summary.ours

    @property
    def metric(self) -> Metric:
        return self.summary.metric

    @property
    def layout(self) -> str:
        """Whose files the run wrote: DLIO's layout for DLIO's own runs and ours before layouts existed."""
        io = self.summary.io
        return io.layout if io is not None and io.layout is not None else "dlio"




def number(value: Any) -> float | None:
    """A finite number, or None (NaN, missing, a string, a list)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def load_run(path: str, *, need_stats: bool = False) -> Run:
    p = Path(path)
    if p.is_dir():
        candidates = [p / "summary.json"] if (p / "summary.json").is_file() else sorted(p.glob("*summary.json"))
        if len(candidates) != 1:
            raise UnreadableRunError(f"{path}: no summary.json in this folder" if not candidates
                                else f"{path}: several *summary.json files; name one")
        summary_path, folder = candidates[0], p
    elif p.is_file():
        summary_path, folder = p, p.parent
    else:
        raise UnreadableRunError(f"{path}: no such file or folder")
    try:
        data = json.loads(summary_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UnreadableRunError(f"{summary_path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UnreadableRunError(f"{summary_path}: not a summary (a JSON object was expected)")
    if data.get("status") != "failed" and not isinstance(data.get("metric"), dict):
        raise UnreadableRunError(f"{summary_path}: no 'metric' section: not a DLIO or dlio_ckpt summary")
    try:
        summary = read_summary(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UnreadableRunError(f"{summary_path}: not a DLIO or dlio_ckpt summary: {where}: {first['msg']}"
                                 + (f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else "")) from None
    if isinstance(summary, FailedSummary):
        raise UnreadableRunError(f"{summary_path}: this run failed ({summary.reason or 'no reason given'}); "
                                 "it has no figures")
    run = Run(path, folder, summary, _config(folder))
    run.per_process = _stats(folder)
    _one_run(run, summary_path)
    if need_stats and not run.per_process:
        raise UnreadableRunError(f"{folder}: no {{process}}_per_epoch_stats.json files")
    return run


def _one_run(run: Run, summary_path: Path) -> None:
    """A folder whose files belong to different runs (a second run into the same ``hydra.run.dir``,
    by an older version or by hand) would mix their figures: refused, saying how they disagree."""
    processes = run.summary.processes
    found = sorted(run.per_process)
    if found and processes is not None and found != list(range(processes)):
        shown = f"{found[0]}-{found[-1]}" if found == list(range(found[0], found[-1] + 1)) else str(found)
        raise UnreadableRunError(f"{run.folder}: its files disagree on the run: {summary_path.name} counts {processes} "
                                 f"processes and the folder holds per_epoch_stats of processes {shown}; the results "
                                 "of different runs are mixed here (run again into an empty folder)")
    run_id = run.summary.run_id
    other = [p for p, stats in run.per_process.items()
             if run_id and isinstance(stats.get("1"), dict) and stats["1"].get("run_id") != run_id]
    if other:
        raise UnreadableRunError(f"{run.folder}: its files disagree on the run: {summary_path.name} is run {run_id}, "
                                 f"and the per_epoch_stats of processes {other[:5]} are of another run; the results "
                                 "of different runs are mixed here (run again into an empty folder)")


def _config(folder: Path) -> dict[str, Any] | None:
    """``.hydra/config.yaml`` (ours and DLIO's) or ``dlio_config/config.yaml`` (MLPerf's layout)."""
    for rel in (".hydra/config.yaml", "dlio_config/config.yaml"):
        f = folder / rel
        if f.is_file():
            import yaml

            try:
                data = yaml.safe_load(f.read_text())
            except yaml.YAMLError:
                return None
            if isinstance(data, dict):
                return flatten(data.get("workload", data))
    return None


def _stats(folder: Path) -> dict[int, dict[str, Any]]:
    out = {}
    for f in folder.glob("*per_epoch_stats.json"):
        m = PER_PROCESS.fullmatch(f.name)
        try:
            out[int(m.group(1)) if m else 0] = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UnreadableRunError(f"{f}: not readable JSON ({exc})") from None
    return dict(sorted(out.items()))


def operations(stats: dict[str, Any], pattern: str = r"(save|load)_ckpt\d+") -> dict[str, dict[str, Any]]:
    """``save_ckpt3`` -> its entry, over every epoch of one process's per_epoch_stats (``pattern``:
    which entries; tiered runs' drains are ``drain_tier1_ckpt3``)."""
    out = {}
    for epoch in stats.values():
        if isinstance(epoch, dict):
            out.update({k: v for k, v in epoch.items() if re.fullmatch(pattern, k)})
    return out
