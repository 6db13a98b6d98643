#!/usr/bin/env python3
"""Where a real Lightning save's time goes: ``Trainer.save_checkpoint`` of Lightning's demo transformer through
``TorchCheckpointIO`` (Lightning 2.6.6, torch 2.13.0), its phases timed by wrapping Lightning's own functions:
``dump_checkpoint`` (collecting the state), ``torch.save`` into a ``BytesIO`` (pickling, copying every storage
into memory, the CRC-32 of each record), ``BytesIO.getvalue`` (a second copy of the whole file), and the rest of
``_atomic_save`` (fsspec's temporary file in ``$TMPDIR``: the one write, the move into place). What the emulated
``layout=lightning`` plays of it is the CRC-32 and the write (docs/concepts/io-patterns.md).

    python bench/lightning_phases.py --dir /path/on/storage [--layers 10] [--saves 5] [--in-loop]

Prints each save's phases in seconds and their medians over saves 2 and on (the first pays one-time costs: it
is shown apart). ``--in-loop`` saves as ``mode=lightning`` does, from a callback after each training step (one step
per save), instead of after training.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import statistics
import time
from pathlib import Path

import lightning as lit
import torch
from lightning.fabric.utilities import cloud_io
from lightning.pytorch.demos import Transformer, WikiText2  # noqa: F401 (the demo module's home)
from torch.nn import functional
from torch.utils.data import DataLoader, TensorDataset

PHASES = ("dump_checkpoint", "torch.save to memory", "getvalue", "write and move", "total")


class Demo(lit.LightningModule):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=33278, ninp=200, nhead=2, nhid=200, nlayers=layers)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, target = batch
        return functional.nll_loss(self.model(inputs, target), target.view(-1))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.model.parameters(), lr=0.1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--saves", type=int, default=5)
    ap.add_argument("--in-loop", action="store_true", help="save after each training step, as mode=lightning")
    ap.add_argument("--keep", action="store_true", help="keep every file, as mode=lightning does (else each is "
                    "removed once timed: the next save's page cache reuses its pages)")
    a = ap.parse_args()
    folder = Path(a.dir)
    folder.mkdir(parents=True, exist_ok=True)
    spent: dict[str, float] = {}

    def timed(name: str, fn):  # noqa: ANN001, ANN202
        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0
        return wrapper

    class TimedBytesIO(io.BytesIO):
        def getvalue(self) -> bytes:
            return timed("getvalue", super().getvalue)()

    real_save = torch.save
    cloud_io.io = type("io", (), {"BytesIO": TimedBytesIO})  # _atomic_save's io.BytesIO()
    cloud_io.torch = type("torch", (), {"save": staticmethod(timed("torch.save to memory", real_save)),
                                        "load": torch.load})
    atomic = timed("atomic", cloud_io._atomic_save)
    cloud_io._atomic_save = atomic
    import lightning.fabric.plugins.io.torch_io as torch_io
    torch_io._atomic_save = atomic
    rows: list[dict[str, float]] = []

    def save(trainer: lit.Trainer) -> None:
        spent.clear()
        path = folder / f"save{len(rows)}.ckpt"
        t0 = time.perf_counter()
        trainer.save_checkpoint(path)
        total = time.perf_counter() - t0
        inner = spent.get("torch.save to memory", 0.0) + spent.get("getvalue", 0.0)
        rows.append({"dump_checkpoint": spent.get("dump_checkpoint", 0.0),
                     "torch.save to memory": spent.get("torch.save to memory", 0.0),
                     "getvalue": spent.get("getvalue", 0.0),
                     "write and move": spent.get("atomic", 0.0) - inner, "total": total,
                     "MiB": path.stat().st_size / 2**20})
        if not a.keep:
            path.unlink()

    class SaveEveryStep(lit.Callback):
        def on_train_batch_end(self, trainer: lit.Trainer, *args: object) -> None:
            save(trainer)

    steps = a.saves if a.in_loop else 1
    data = TensorDataset(torch.randint(0, 33278, (2 * steps, 16)), torch.randint(0, 33278, (2 * steps, 16)))
    trainer = lit.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                          enable_model_summary=False, accelerator="cpu", devices=1,
                          callbacks=[SaveEveryStep()] if a.in_loop else [])
    module = Demo(a.layers)
    connector = trainer._checkpoint_connector
    connector.dump_checkpoint = timed("dump_checkpoint", connector.dump_checkpoint)
    trainer.fit(module, DataLoader(data, batch_size=2))
    while not a.in_loop and len(rows) < a.saves:
        save(trainer)
    print(f"- {time.strftime('%Y-%m-%d %H:%M')} on {platform.node()} ({os.cpu_count()} cores), {a.dir}, "
          f"{a.layers} layers, torch {torch.__version__}, lightning {lit.__version__}"
          f"{', saved after each training step' if a.in_loop else ', saved after training'}")
    print("| save | MiB | " + " | ".join(PHASES) + " |")
    print("|---|---|" + "---|" * len(PHASES))
    for i, r in enumerate(rows):
        print(f"| {i + 1} | {r['MiB']:.1f} | " + " | ".join(f"{r[p]:.3f}" for p in PHASES) + " |")
    steady = rows[1:]
    print("| median of 2+ | | " + " | ".join(f"{statistics.median(r[p] for r in steady):.3f}" for p in PHASES) + " |")


if __name__ == "__main__":
    main()
