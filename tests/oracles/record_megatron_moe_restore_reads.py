"""Records what megatron-core's own save and load of a mixture of experts write and read, the oracle of
``tests/against_frameworks/test_megatron_moe_restore.py``, into ``tests/data/megatron_moe_restore_reads.json``
with the versions it was recorded with (torch, megatron-core)::

    PYTHONPATH=. .venv/bin/python tests/oracles/record_megatron_moe_restore_reads.py      # about 1.5 minutes

Per case of ``MEGATRON_MOE_CASES`` (``tests/support/restore_cases.py``, recorded beside the reads: the test refuses
a recording of other cases), a real save by ``tests/oracles/megatron_save.py`` (a GPTModel with MoE blocks, the
distributed optimizer after one Adam step, the fully parallel save, on CPU with gloo): every file's size and every
item ``.metadata`` places (file, offset, tensor, chunk, length); then megatron-core's default
``dist_checkpointing.load`` of it (``megatron_save.py load``) at each load ``TP:WORLD:MODEL_ONLY[:EP]``: per rank,
in order, the files it opened whole, then (file, offset, length) per item DCP's ``FileSystemReader`` read. The saves
and loads take about 1.5 minutes of forked ranks, for reads that change only with the frameworks; the test compares
in process.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

from tests.support import ORACLES, REPO
from tests.support.megatron_files import stored_items
from tests.support.recorded import dumps
from tests.support.restore_cases import MEGATRON_MOE_CASES, MEGATRON_MOE_READS


def run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"failed ({' '.join(cmd)}):\n{done.stderr[-3000:]}")


def record_case(tmp: Path, model: list[str], world: int, loads: list[str]) -> dict:
    step, out, oracle = tmp / "real", tmp / "reads.json", str(ORACLES / "megatron_save.py")
    run([sys.executable, oracle, str(step), str(world), *model])
    files = {p.name: p.stat().st_size for p in sorted(step.iterdir())}
    items = stored_items(step)
    run([sys.executable, oracle, "load", str(out), str(step), ",".join(loads), *model])
    return {"world": world, "model": model, "files": files, "items": items, "loads": json.loads(out.read_text())}


def main() -> None:
    found: dict = {"script": "tests/oracles/record_megatron_moe_restore_reads.py",
                   "versions": {p: version(p) for p in ("torch", "megatron-core")} |
                   {"python": platform.python_version()}, "cases": {}}
    for name, (model, world, loads) in MEGATRON_MOE_CASES.items():
        with tempfile.TemporaryDirectory() as tmp:
            found["cases"][name] = record_case(Path(tmp), model, world, loads)
        print(f"{name}: saved at {world}, loaded at {', '.join(loads)}")
    MEGATRON_MOE_READS.write_text(dumps(found) + "\n")
    print(os.path.relpath(MEGATRON_MOE_READS, REPO))


if __name__ == "__main__":
    main()
