"""Records what the real restores read, the oracles of ``tests/against_frameworks/test_restore.py``, into
``tests/data/dcp_restore_reads.json`` and ``tests/data/megatron_restore_reads.json``, each with the versions it
was recorded with (torch and transformers; torch and megatron-core). Both frameworks are in ``.venv``, but a
real save and its loads take 20-25 s of the suite per framework (forked ranks importing torch, each time), for
reads that change only when a framework does; so they are recorded, and ``tests/unit/test_recordings.py`` holds
the recording's versions to the installed ones: a bump of either fails there, naming this script, whose command
records both again::

    PYTHONPATH=. .venv/bin/python tests/oracles/record_restore_reads.py        # about a minute

The cases are the test's (``tests/support/restore_cases.py``, recorded beside the reads: the test refuses a
recording of other cases):

- DCP: a real ``dcp.save`` by ``mode=fsdp`` (transformers' Llama under FSDP2, Adam after one step) on
  ``DCP_SAVED`` processes, then ``dcp.load`` at each of ``DCP_LOADS`` (world size, model alone) through an
  instrumented ``FileSystemReader`` (``tests/oracles/dcp_load_reads.py``): per rank, in order, ``.metadata``
  whole, then (file, offset, length) per item read.
- Megatron: a real megatron-core save (``tests/oracles/megatron_save.py``, TP 2 x PP 2 x DP 2, the distributed
  optimizer): every file's size and every item ``.metadata`` places (file, offset, tensor, chunk, length);
  then ``dist_checkpointing.load`` at each of ``MEGATRON_LOADS`` (TP, world size, model alone): per rank, in
  order, the files it opened whole, then (file, offset, length) per item read.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path

from dlio_ckpt.config import compose
from dlio_ckpt.model.dense import TransformerShape
from tests.support import ORACLES, REPO
from tests.support import restore_cases as case
from tests.support.dcp_files import real_save
from tests.support.megatron_files import stored_items
from tests.support.recorded import dumps


def run(cmd: list[str], env: dict[str, str] | None = None) -> None:
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    if done.returncode:
        sys.exit(f"failed ({' '.join(cmd)}):\n{done.stderr[-3000:]}")


def versions(*packages: str) -> dict[str, str]:
    return {p: version(p) for p in packages} | {"python": platform.python_version()}


def record_dcp(tmp: Path) -> dict:
    """The save by ``mode=fsdp`` (``tests/support/dcp_files.py``'s ``real_save``, as the layout's tests make
    theirs), then the loads."""
    step = real_save(tmp, case.DCP_SAVED, 1, case.DCP_SHAPE)
    workload, _, _ = compose(["workload=tiny", "++workload.model.parallelism.tensor=1", *case.DCP_SHAPE], None)
    out = tmp / "reads.json"
    run([sys.executable, str(ORACLES / "dcp_load_reads.py"), str(step), str(out),
         json.dumps(asdict(TransformerShape.from_model(workload.model))), workload.model.model_datatype,
         *(f"{w}:{int(m)}" for w, m in case.DCP_LOADS)], {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    return {"script": "tests/oracles/record_restore_reads.py", "versions": versions("torch", "transformers"),
            "saved": case.DCP_SAVED, "shape": case.DCP_SHAPE, "loads": json.loads(out.read_text())}


def record_megatron(tmp: Path) -> dict:
    step, out = tmp / "real", tmp / "reads.json"
    oracle = str(ORACLES / "megatron_save.py")
    run([sys.executable, oracle, str(step), str(case.MEGATRON_WORLD), *case.MEGATRON_MODEL])
    files = {p.name: p.stat().st_size for p in sorted(step.iterdir())}
    items = stored_items(step)
    run([sys.executable, oracle, "load", str(out), str(step),
         ",".join(f"{tp}:{w}:{int(m)}" for tp, w, m in case.MEGATRON_LOADS), *case.MEGATRON_MODEL])
    return {"script": "tests/oracles/record_restore_reads.py", "versions": versions("torch", "megatron-core"),
            "world": case.MEGATRON_WORLD, "model": case.MEGATRON_MODEL, "files": files, "items": items,
            "loads": json.loads(out.read_text())}


def main() -> None:
    for name, record, path in (("dcp", record_dcp, case.DCP_READS), ("megatron", record_megatron, case.MEGATRON_READS)):
        if sys.argv[1:] and name not in sys.argv[1:]:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            found = record(Path(tmp))
        path.write_text(dumps(found) + "\n")
        print(f"{name}: {os.path.relpath(path, REPO)}")


if __name__ == "__main__":
    main()
