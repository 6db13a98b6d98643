"""What a run folder holds: the files a run and its report write there (and nothing else is ours),
and the workload's keys as the dotted names the run records and the tools compare.

Why here, below the tools that read runs: the run itself needs the same list, to refuse a folder that
already holds a run and to replace one (``--replace-results``), and provenance the same dotted keys.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from dlio_ckpt.io.trace import TRACE_FILE

RESULT_FILES = ("summary.json", "provenance.json", "dlio_ckpt.log", ".hydra/config.yaml", ".hydra/overrides.yaml",
                # a repeated run's parent folder (tools.drivers.repeats); the calls' histograms (results.summary)
                "repeats.json", "latency_histograms.json")
FIGURES = ("throughput.png", "durations.png", "stragglers.png", "timeline.png", "requests.png",
           "latency.png")  # report's
REPORT_FILES = (*FIGURES, "report.html")  # what report may write into a run folder
PER_PROCESS = re.compile(r"(\d+)_per_epoch_stats\.json")


def results_in(folder: Path) -> list[Path]:
    """What a run and its report write in a run folder, of what is there now, and nothing else:
    a folder holding any of it holds a run."""
    if not folder.is_dir():
        return []
    named = [folder / n for n in (*RESULT_FILES, *REPORT_FILES)]
    per_process = [p for p in folder.iterdir() if PER_PROCESS.fullmatch(p.name) or TRACE_FILE.fullmatch(p.name)]
    return sorted([p for p in named if p.is_file()] + per_process)



def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as one level of dotted keys (``checkpoint.format``)."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}
