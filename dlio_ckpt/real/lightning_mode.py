"""``mode=lightning``: Lightning's demo transformer trained on synthetic tokens, a checkpoint saved
through a CheckpointIO after every step, then read back.

Why this model: it is the one the published Lightning checkpointing benchmark uses (10, 100 and 1000
layers give 75.6, 298 and 2500 MiB with SGD), so figures compare with it; tokens are random instead
of WikiText2, so nothing is downloaded. Save time is measured around ``trainer.save_checkpoint``
alone (state collection and the CheckpointIO's write), never the training step. With AsyncCheckpointIO
a save's duration runs until its write finished in the background; the time the training loop was
held is reported beside it as ``blocking_seconds``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import lightning as lit
import torch
from lightning.pytorch.demos import Transformer
from lightning.pytorch.plugins.io import AsyncCheckpointIO, CheckpointIO, TorchCheckpointIO
from torch.nn import functional
from torch.utils.data import DataLoader, TensorDataset

from ..config import LightningSettings
from ..errors import ConfigError, DlioCkptError, StorageError, VerifyError
from .context import (
    ModeContext,
    clear_old,
    evict_before_read,
    fsync_meaning,
    read_cache,
    record,
    storage_preflight,
    write_results,
)
from .demo_shapes import predict
from .fsspec_config import configure_fsspec

log = logging.getLogger("dlio_ckpt")
for _name in ("lightning.pytorch", "lightning.fabric"):  # "GPU available", tips: not our results
    logging.getLogger(_name).setLevel(logging.WARNING)


class DemoModule(lit.LightningModule):
    """The demo's LightningTransformer with our sizes and optimizer choice."""

    def __init__(self, s: LightningSettings, nlayers: int) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=s.vocab_size, ninp=s.ninp, nhead=s.nhead, nhid=s.nhid,
                                 nlayers=nlayers)
        self.optimizer_name = s.optimizer

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, target = batch
        return functional.nll_loss(self.model(inputs, target), target.view(-1))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self.optimizer_name == "adam":
            return torch.optim.Adam(self.model.parameters(), lr=1e-3)
        return torch.optim.SGD(self.model.parameters(), lr=0.1)  # the demo's


class TimedIO(CheckpointIO):
    """Wraps the chosen CheckpointIO and notes when each write really finished (in AsyncCheckpointIO's
    thread, that is after ``save_checkpoint`` returned to the training loop)."""

    def __init__(self, inner: CheckpointIO, sync: Callable[[str], None] | None) -> None:
        self.inner, self.sync = inner, sync
        self.finished: dict[str, float] = {}

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        self.inner.save_checkpoint(checkpoint, path, storage_options)
        if self.sync is not None:  # Lightning never fsyncs; checkpoint.fsync asks for it, inside the timed save
            self.sync(str(path))
        self.finished[str(path)] = time.perf_counter()

    def load_checkpoint(self, path: Any, map_location: Any = None, **kwargs: Any) -> dict[str, Any]:
        return self.inner.load_checkpoint(path, map_location=map_location, **kwargs)

    def remove_checkpoint(self, path: Any) -> None:
        self.inner.remove_checkpoint(path)


class SaveEveryStep(lit.Callback):
    """After each optimizer step: one checkpoint, timed around the save alone."""

    def __init__(self, ctx: ModeContext) -> None:
        self.ctx = ctx
        self.saves: list[tuple[int, str, float, float, float]] = []  # step, url, wall start, t0, blocking
        self.device = torch.device("cpu")  # where the model was when it was saved

    def on_train_batch_end(self, trainer: lit.Trainer, module: lit.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step, self.device = trainer.global_step, module.device
        url = self.ctx.url(self.ctx.path(step, ".ckpt"))
        self.ctx.state.phase, self.ctx.state.step = "save", step
        start, t0 = time.time(), time.perf_counter()
        with self.ctx.watch(), _storage_errors("save to", url):
            trainer.save_checkpoint(url)
        self.saves.append((step, url, start, t0, time.perf_counter() - t0))


def _checkpoint_io(ctx: ModeContext) -> CheckpointIO:
    s = ctx.workload.lightning
    if s.checkpoint_io == "s3":
        from s3torchconnector import S3ClientConfig
        from s3torchconnector.lightning import S3LightningCheckpoint

        o = ctx.backend.options
        path_style = o.force_path_style if o.force_path_style is not None else o.endpoint_url is not None
        config = S3ClientConfig(throughput_target_gbps=o.throughput_target_gbps, part_size=o.part_size,
                                force_path_style=path_style, max_attempts=o.max_attempts)
        return S3LightningCheckpoint(o.region, s3client_config=config, endpoint=o.endpoint_url)
    configure_fsspec(ctx.backend)
    return TorchCheckpointIO()


def preflight(ctx: ModeContext) -> None:
    s, w = ctx.workload.lightning, ctx.workload
    if ctx.comm.size > 1:
        raise ConfigError("workload.mode", "lightning", f"runs one process (the benchmark it reproduces "
                          f"trains on one device); this job has {ctx.comm.size}: run it without mpiexec -n")
    if s.accelerator == "gpu" and not torch.cuda.is_available():
        raise ConfigError("workload.lightning.accelerator", "gpu", "needs a CUDA GPU, and torch sees none "
                          "(torch.cuda.is_available() is False); use cpu or auto")
    if s.checkpoint_io == "s3" and w.storage.storage_type != "s3":
        raise ConfigError("workload.lightning.checkpoint_io", "s3",
                          f"needs storage_type=s3 (storage_type is {w.storage.storage_type})")
    storage_preflight(ctx, supported=("local_fs", "s3", "gcs"))


def run(ctx: ModeContext) -> dict[str, Any] | None:
    w, s, ck = ctx.workload, ctx.workload.lightning, ctx.workload.checkpoint
    clear_old(ctx)
    torch.manual_seed(0)
    steps = ck.num_checkpoints_write
    tokens = torch.randint(0, s.vocab_size, (steps * s.batch_size, s.seq_len + 1))
    data = DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=s.batch_size)
    syncs = ck.fsync and ctx.backend.capabilities.fsync  # object stores commit on close
    io = TimedIO(_checkpoint_io(ctx), ctx.backend.sync if syncs else None)
    plugin: CheckpointIO = AsyncCheckpointIO(io) if s.async_save else io
    saver = SaveEveryStep(ctx)
    module = DemoModule(s, w.model.num_layers)
    trainer = lit.Trainer(max_steps=steps, accelerator=s.accelerator, devices=1, logger=False,
                          enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                          callbacks=[saver], plugins=[plugin], num_sanity_val_steps=0)
    setup = time.time() - ctx.started
    trainer.fit(module, data)
    with ctx.watch(), _storage_errors("background save to", ctx.url(ctx.path(steps, ".ckpt")) + " (or earlier)"):
        plugin.teardown()  # AsyncCheckpointIO: wait for the last background write
    records, blocking = [], []
    for step, url, start, t0, held in saver.saves:
        duration = max(io.finished[url] - t0, held)  # sync: the whole save_checkpoint call
        nbytes = ctx.backend.size(ctx.path(step, ".ckpt"))
        records.append(record(ctx, "save", step, start, duration, nbytes, 1))
        blocking.append(held)
        log.info("save_ckpt%d: %.3f s (%.3f s blocking), %d bytes", step, duration, held, nbytes)
    final = {k: v.detach().cpu() for k, v in module.state_dict().items()}  # loads map to the CPU
    for i in range(1, ck.num_checkpoints_read + 1):
        ctx.state.phase, ctx.state.step = "load", i
        url = saver.saves[i - 1][1]
        evict_before_read(ctx, [ctx.path(i, ".ckpt")])
        start, t0 = time.time(), time.perf_counter()
        with ctx.watch(), _storage_errors("load from", url):
            loaded = io.load_checkpoint(url, map_location="cpu", weights_only=False)
        duration = time.perf_counter() - t0
        _check(loaded, i, final if i == steps else None, url)
        records.append(record(ctx, "load", i, start, duration, ctx.backend.size(ctx.path(i, ".ckpt")), 1))
        log.info("load_ckpt%d: %.3f s, checked", i, duration)
    predicted = predict(w)
    io_meta = {
        "format": "lightning .ckpt (torch.save)",
        "checkpoint_io": type(io.inner).__name__ + (" in AsyncCheckpointIO" if s.async_save else ""),
        "fsync": fsync_meaning(ctx, "every .ckpt fsynced before its save time ends"),
        "read_cache": read_cache(ctx),
        "verified": "global_step of every checkpoint read; the last one tensor by tensor",
    }
    extra = {"setup_seconds": setup, "blocking_save_seconds": blocking,
             "accelerator": {"asked": s.accelerator, "saved_from": str(saver.device),
                             "name": torch.cuda.get_device_name(saver.device) if saver.device.type == "cuda"
                             else "cpu"},
             "model": {"nlayers": w.model.num_layers, "parameters": predicted.num_parameters,
                       "optimizer": s.optimizer, "predicted_checkpoint_bytes": predicted.file_bytes},
             "versions": {"torch": torch.__version__, "lightning": lit.__version__}}
    return write_results(ctx, records, records[0].bytes, io_meta, extra)


@contextmanager
def _storage_errors(what: str, url: str) -> Iterator[None]:
    """A failed save or load names the checkpoint and the cause in one line (no traceback)."""
    try:
        yield
    except DlioCkptError:
        raise
    except Exception as exc:
        text = str(exc).strip()
        raise StorageError(f"{what} {url} failed: {type(exc).__name__}: {text.splitlines()[0] if text else ''}") \
            from None


def _check(loaded: dict[str, Any], step: int, final: dict[str, torch.Tensor] | None, url: str) -> None:
    """What was read is the checkpoint of that step: its step count, and for the last one every tensor."""
    if loaded.get("global_step") != step:
        raise VerifyError(f"{url}: global_step is {loaded.get('global_step')}, expected {step}")
    state = loaded["state_dict"]
    if final is not None:
        if state.keys() != final.keys():
            raise VerifyError(f"{url}: state_dict keys differ from the model's")
        for key, value in final.items():
            if not torch.equal(state[key], value):
                raise VerifyError(f"{url}: tensor {key} differs from the model's")
