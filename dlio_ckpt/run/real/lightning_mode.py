"""``mode=lightning``: Lightning's demo transformer trained on synthetic tokens, a checkpoint saved
through a CheckpointIO after every step, then read back.

This module is the mode's contract (:class:`dlio_ckpt.run.context.Mode`). Its run, which imports torch and
Lightning (3 to 4 s here), is :mod:`~dlio_ckpt.run.real.lightning_job`, imported when the run starts, so that a run
refused before it (bad input, a folder holding another run's checkpoints) ends at once; that both are installed
is checked in :func:`preflight`, as the registry checks any mode's imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.model.lightning_demo import predict
from dlio_ckpt.registry import MODES
from dlio_ckpt.run.steps import Writes

if TYPE_CHECKING:
    from dlio_ckpt.results.schema import Summary
    from dlio_ckpt.run.context import RunContext

FSYNC = "every .ckpt fsynced before its save time ends"


def needed_bytes(ctx: RunContext) -> int:
    return ctx.ck.num_checkpoints_write * predict(ctx.workload).file_bytes


def preflight(ctx: RunContext) -> None:
    MODES.require("lightning", "torch", "lightning")
    if ctx.workload.lightning.accelerator == "gpu":
        import torch  # torch alone (about 1 s), not Lightning: whether it sees a GPU

        if not torch.cuda.is_available():
            raise ConfigError("workload.lightning.accelerator", "gpu", "needs a CUDA GPU, and torch sees none "
                              "(torch.cuda.is_available() is False); use cpu or auto")
    if ctx.workload.lightning.checkpoint_io == "dataflux":
        try:
            import dataflux_pytorch.lightning  # noqa: F401
        except ImportError as exc:  # not installed, or beside google-cloud-storage 3, which it cannot import
            raise ConfigError("workload.lightning.checkpoint_io", "dataflux", f"needs gcs-torch-dataflux with "
                              f"google-cloud-storage<3 ({exc}); run from .venv-dataflux, which scripts/setup.sh "
                              "makes, or pip install 'dlio_ckpt[dataflux]' in an environment of its own") from None


def writes(ctx: RunContext) -> Writes:
    return Writes.of_run(ctx.ck, beside=(".ckpt",))


def check_reads(ctx: RunContext) -> None:
    """Nothing: a Lightning run reads back what it saved."""


def run(ctx: RunContext) -> Summary | None:
    # through the registry: an install that preflight found but that fails to import is refused as any mode's is
    run_job = MODES.load("lightning", "dlio_ckpt.run.real.lightning_job:run")
    return run_job(ctx)
