"""Record what upstream DLIO v2.0.1 itself does to a checkpoint's files, in its system calls, for
``tests/against_frameworks/test_references.py`` to hold the ``dlio-2.0`` preset to (the preset reproduces
DLIO's I/O; this is that I/O seen from the kernel, not read from DLIO's source).

Run by hand (DLIO and TensorFlow are not the project's dependencies), from the repository root:

    bash scripts/dlio_reference_env.sh /tmp/dlio_venv DLIO_SOURCE   # DLIO at b56c741 (tag v2.0.1), pinned
    .venv/bin/python -m tests.oracles.dlio_reference_trace /tmp/dlio_venv tests/data/dlio_reference_trace.json

The workload is the one of the DLIO run kept as test data (``tests/data/dlio_run/SOURCE.md``: 4 layers,
hidden 256, ZeRO-3, 2 processes, ``fsync: True`` in its YAML), written and read once. Its output: per
checkpoint file, how DLIO opened, wrote, read and synced it (``tests/support/strace_calls.summary``), every
``sync``/``syncfs`` of the run, and the versions that made it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support import strace_calls

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "tests" / "data" / "dlio_run" / "SOURCE.md"
FOLDER = "ck_dlio_trace"  # the checkpoint folder, relative to the run's folder: what the trace is filtered by


def workload_yaml(checkpoint_folder: str) -> str:
    """SOURCE.md's workload YAML, its checkpoint folder replaced and written and read once."""
    text = SOURCE.read_text()
    yaml = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    yaml = re.sub(r"checkpoint_folder: .*", f"checkpoint_folder: {checkpoint_folder}", yaml)
    return re.sub(r"num_checkpoints_(write|read): 10", r"num_checkpoints_\1: 1", yaml)


def record(venv: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "cfg" / "workload").mkdir(parents=True)
        (work / "cfg" / "workload" / "tiny_llama_ckpt.yaml").write_text(workload_yaml(str(work / FOLDER)))
        prefix = work / "trace"
        cmd = [*strace_calls.command(prefix), str(venv / "bin" / "mpiexec"), "-n", "2",
               str(venv / "bin" / "dlio_benchmark"), "--config-dir", str(work / "cfg"), "workload=tiny_llama_ckpt",
               f"++hydra.run.dir={work / 'run'}"]
        r = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            sys.exit(f"DLIO failed ({r.returncode}):\n{r.stderr[-3000:]}")
        files = strace_calls.summary(strace_calls.calls_on(prefix, f"/{FOLDER}/"), (".pt",))
        sizes = {p.name: p.stat().st_size for p in (work / FOLDER).rglob("*.pt")}
        if set(sizes) != set(files):
            sys.exit(f"the trace saw {sorted(files)}, the folder holds {sorted(sizes)}")
        for name, size in sizes.items():
            files[name]["size"] = size
        frozen = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "freeze"], capture_output=True,
                                text=True, check=True).stdout.splitlines()
        wanted = ("torch", "mpi4py", "mpich", "tensorflow", "numpy", "hydra")  # DLIO itself: a local archive
        return {"tool": "upstream DLIO at b56c741 (tag v2.0.1), scripts/dlio_reference_env.sh",
                "command": "mpiexec -n 2 dlio_benchmark workload=tiny_llama_ckpt (tests/data/dlio_run/SOURCE.md's "
                           "YAML, written and read once) under " + " ".join(strace_calls.command(Path("trace"))),
                "versions": sorted(v for v in frozen if v.lower().startswith(wanted)),
                "unattached_syncs": dict(strace_calls.unattached_syncs(prefix)), "files": files}


if __name__ == "__main__":
    venv, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.write_text(json.dumps(record(venv), indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}")
