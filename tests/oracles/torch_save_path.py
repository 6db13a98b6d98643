"""Real ``torch.save(state_dict, path)`` and ``torch.load(path)`` of given state dicts, one process per rank: what
DeepSpeed's ``TorchCheckpointEngine`` does with each of a rank's files (``save``: ``torch.save(state_dict, path)``,
``load``: ``torch.load(path)``; deepspeed/runtime/checkpoint_engine/torch_checkpoint_engine.py, DeepSpeed 0.19.8),
traced under strace by tests/against_frameworks/test_io_patterns.py.

    python tests/oracles/torch_save_path.py OUT RANK0_FILE[,RANK0_FILE...][:NAME[,NAME...]] [RANK1_FILE... ...]

Each rank's process first loads its state dicts from the files given (the emulator's, which hold DeepSpeed's
names, nesting, dtypes and shapes), then saves each into OUT under the same name, in order; once every rank has
saved, it loads back from OUT the files named after the colon, in order (DeepSpeed's ``load_checkpoint`` reads
other ranks' files too: ``dlio_ckpt/plan/layouts/deepspeed.py``), or else its own: the calls on OUT are torch's
alone. DeepSpeed itself is not needed (nor installed in the test environment): its save and load are these two
calls.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
from pathlib import Path
from typing import Any

import torch


def rank(out: Path, files: list[str], loads: list[str], saved: Any) -> None:
    states = [(Path(f).name, torch.load(f, weights_only=False)) for f in files]
    for name, state in states:
        torch.save(state, out / name)
    saved.wait()  # every rank's files are on disk before any is loaded
    for name in loads or [name for name, _ in states]:
        torch.load(out / name, weights_only=False)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")
    groups = [group.partition(":") for group in sys.argv[2:]]
    saved = ctx.Barrier(len(groups))
    procs = [ctx.Process(target=rank, args=(out, files.split(","), loads.split(",") if loads else [], saved))
             for files, _, loads in groups]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        if p.exitcode:
            sys.exit(p.exitcode)


if __name__ == "__main__":
    main()
