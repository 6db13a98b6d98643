"""``mode=lightning``'s run: Lightning's demo transformer trained on synthetic tokens, a checkpoint saved
through a CheckpointIO after every step, then read back (the mode's contract, which imports neither torch nor
Lightning, is :mod:`~dlio_ckpt.run.real.lightning_mode`).

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
from dataclasses import replace
from importlib import metadata
from typing import TYPE_CHECKING, Any, cast

import fsspec
import lightning as lit
import torch
from lightning.pytorch.demos import Transformer
from lightning.pytorch.plugins.io import AsyncCheckpointIO, CheckpointIO, TorchCheckpointIO
from torch.nn import functional
from torch.utils.data import DataLoader, TensorDataset

from dlio_ckpt.config import LightningSettings
from dlio_ckpt.errors import DlioCkptError, StorageError, VerifyError
from dlio_ckpt.model.lightning_demo import predict
from dlio_ckpt.results.schema import IO, Summary
from dlio_ckpt.results.summary import ProcessCost
from dlio_ckpt.run.context import Clock, RunContext, evict_before_read, record, timed, write_results

if TYPE_CHECKING:
    from dlio_ckpt.io.backends.gcs import GCSBackend
    from dlio_ckpt.io.backends.s3 import S3Backend

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
        self.finished: dict[str, tuple[float, ProcessCost]] = {}  # when, and the process's cost then

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        self.inner.save_checkpoint(checkpoint, path, storage_options)
        if self.sync is not None:  # Lightning never fsyncs; checkpoint.fsync asks for it, inside the timed save
            self.sync(str(path))
        self.finished[str(path)] = (time.perf_counter(), ProcessCost.now())

    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The inner CheckpointIO's load, given what it was given (as Lightning's own wrapper does): Dataflux's
        takes no ``weights_only``."""
        return self.inner.load_checkpoint(path, *args, **kwargs)

    def remove_checkpoint(self, path: Any) -> None:
        self.inner.remove_checkpoint(path)


class SaveEveryStep(lit.Callback):
    """After each optimizer step: one checkpoint, timed around the save alone. ``finish`` makes a synchronous
    save's record as soon as it returns, so its requests, storage calls and process cost are its own, not those
    of the training and saves after it; an async save's record waits for its background write."""

    def __init__(self, ctx: RunContext, finish: Callable[[int, str, Clock], None] | None) -> None:
        self.ctx, self.finish = ctx, finish
        self.saves: list[tuple[int, str, Clock]] = []  # step, url, clock (its seconds: training held)
        self.device = torch.device("cpu")  # where the model was when it was saved

    def on_train_batch_end(self, trainer: lit.Trainer, module: lit.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step, self.device = trainer.global_step, module.device
        url = self.ctx.backend.url(self.ctx.path(step, ".ckpt"))
        with timed(self.ctx, "save", step) as clock, _storage_errors("save to", url):
            trainer.save_checkpoint(url)
        self.saves.append((step, url, clock))
        if self.finish is not None:
            self.finish(step, url, clock)


def _checkpoint_io(ctx: RunContext) -> CheckpointIO:
    s = ctx.workload.lightning
    if s.checkpoint_io == "s3":
        from s3torchconnector._user_agent import UserAgent
        from s3torchconnector.lightning import S3LightningCheckpoint

        s3 = cast("S3Backend", ctx.backend)  # checkpoint_io=s3 runs on storage_type=s3 alone (config rules)
        o = s3.options
        io = S3LightningCheckpoint(o.region, s3client_config=s3.client_config(), endpoint=o.endpoint_url)
        # it takes no keys: its client (built lazily, so not yet made) becomes one with the storage's own
        io._client = s3.framework_client(UserAgent(["lightning", lit.__version__]))
        return io
    if s.checkpoint_io == "dataflux":
        from dataflux_pytorch.lightning import DatafluxLightningCheckpoint

        client = cast("GCSBackend", ctx.backend).storage_client()  # on storage_type=gcs alone (config rules)
        return DatafluxLightningCheckpoint(client.project, storage_client=client,
                                           disable_multipart=not s.dataflux_multipart)
    # Lightning opens s3:// and gs:// with fsspec.url_to_fs(path) and no options: they must be the
    # protocol's defaults
    scheme, sep, _ = ctx.backend.url(ctx.path(1)).partition("://")
    if sep:
        fsspec.config.conf[scheme] = ctx.backend.fsspec_options()
    return TorchCheckpointIO()


def _saved_size(ctx: RunContext, step: int) -> int:
    """The bytes of the ``.ckpt`` of ``step``, which this run saved."""
    path = ctx.path(step, ".ckpt")
    size = ctx.backend.size(path)
    if size is None:
        raise StorageError(f"{ctx.backend.url(path)}: not found on the storage after Lightning saved it")
    return size


def run(ctx: RunContext) -> Summary | None:
    """Train, saving after every step, then load the checkpoints back and check them."""
    w, s, ck = ctx.workload, ctx.workload.lightning, ctx.workload.checkpoint
    torch.manual_seed(0)
    steps = ck.num_checkpoints_write
    tokens = torch.randint(0, s.vocab_size, (steps * s.batch_size, s.seq_len + 1))
    data = DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=s.batch_size)
    syncs = ck.fsync and ctx.backend.capabilities.fsync  # object stores commit on close
    io = TimedIO(_checkpoint_io(ctx), ctx.backend.sync if syncs else None)
    plugin: CheckpointIO = AsyncCheckpointIO(io) if s.async_save else io
    records, blocking = [], []

    def finish(step: int, url: str, clock: Clock) -> None:
        end, ended = io.finished[url]
        duration = max(end - clock.t0, clock.seconds)  # sync: the whole save_checkpoint call
        held = clock.seconds if s.async_save else None  # AsyncCheckpointIO: the training loop's wait
        # its bytes once every save is done: a stat (a HEAD on S3) now would be a request of this save
        records.append(record(ctx, "save", step, clock, 0, 1, seconds=duration, held=held, ended=ended,
                              framework_cpu=None))
        blocking.append(clock.seconds)

    saver = SaveEveryStep(ctx, None if s.async_save else finish)
    module = DemoModule(s, w.model.num_layers)
    trainer = lit.Trainer(max_steps=steps, accelerator=s.accelerator, devices=1, logger=False,
                          enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                          callbacks=[saver], plugins=[plugin], num_sanity_val_steps=0)
    setup = time.time() - ctx.started
    trainer.fit(module, data)
    last = ctx.backend.url(ctx.path(steps, ".ckpt"))
    with ctx.watch(), _storage_errors("background save to", f"{last} (or earlier)"):
        plugin.teardown()  # AsyncCheckpointIO: wait for the last background write
    if s.async_save:
        for step, url, clock in saver.saves:
            finish(step, url, clock)
    for k, (step, _, _) in enumerate(saver.saves):
        records[k] = replace(records[k], bytes=_saved_size(ctx, step))
        log.info("save_ckpt%d: %.3f s (%.3f s blocking), %d bytes", step, records[k].duration, blocking[k],
                 records[k].bytes)
    final = {k: v.detach().cpu() for k, v in module.state_dict().items()}  # loads map to the CPU
    # our own files: unpickled whole, as Lightning's Trainer does; Dataflux's load takes no such argument
    # (it calls torch.load with torch's default, weights_only=True)
    trusted = {} if s.checkpoint_io == "dataflux" else {"weights_only": False}
    for i in range(1, ck.num_checkpoints_read + 1):
        url = saver.saves[i - 1][1]
        evict_before_read(ctx, [ctx.path(i, ".ckpt")])
        with timed(ctx, "load", i) as clock, _storage_errors("load from", url):
            loaded = io.load_checkpoint(url, map_location="cpu", **trusted)
        ended = ProcessCost.now()  # the check below is ours, and outside the load's time
        _check(loaded, i, final if i == steps else None, url)
        records.append(record(ctx, "load", i, clock, _saved_size(ctx, i), 1, ended=ended, framework_cpu=None))
        log.info("load_ckpt%d: %.3f s, checked", i, clock.seconds)
    predicted = predict(w)
    io_meta = IO(format="lightning .ckpt (torch.save)",
                 checkpoint_io=type(io.inner).__name__ + (" in AsyncCheckpointIO" if s.async_save else ""),
                 dataflux_multipart=s.dataflux_multipart if s.checkpoint_io == "dataflux" else None,
                 verified="global_step of every checkpoint read; the last one tensor by tensor")
    extra = {"setup_seconds": setup, "blocking_save_seconds": blocking,
             "accelerator": {"asked": s.accelerator, "saved_from": str(saver.device),
                             "name": torch.cuda.get_device_name(saver.device) if saver.device.type == "cuda"
                             else "cpu"},
             "model": {"nlayers": w.model.num_layers, "parameters": predicted.num_parameters,
                       "optimizer": s.optimizer, "predicted_checkpoint_bytes": predicted.file_bytes},
             "versions": {"torch": torch.__version__, "lightning": lit.__version__, **_client_versions(s)}}
    return write_results(ctx, records, records[0].bytes, io_meta, extra)


def _client_versions(s: LightningSettings) -> dict[str, str]:
    """The versions of the storage client under the CheckpointIO, where it is not Lightning's own."""
    names = {"s3": ["s3torchconnector"], "dataflux": ["gcs-torch-dataflux", "google-cloud-storage"]}
    return {name: metadata.version(name) for name in names.get(s.checkpoint_io, [])}


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
