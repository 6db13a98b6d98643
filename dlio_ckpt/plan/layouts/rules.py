"""Rules several layouts share, with one wording: a format the framework does not write, MLPerf's subset mode,
which only DLIO's layout has, and a load that reads other ranks' files from a tier that keeps hosts apart."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlio_ckpt.errors import ConfigError

if TYPE_CHECKING:
    from dlio_ckpt.config import Workload


def torch_save_only(workload: Workload, layout: str, framework: str) -> None:
    """The framework writes every file (or item) with torch.save: checkpoint.format means nothing."""
    if workload.checkpoint.format != "pt":
        raise ConfigError("workload.checkpoint.format", workload.checkpoint.format,
                          f"means nothing with checkpoint.layout={layout}: {framework} writes with torch.save "
                          "(leave checkpoint.format out)")


def every_rank_writes(workload: Workload, layout: str) -> None:
    if workload.checkpoint.mode == "subset":
        raise ConfigError("workload.checkpoint.mode", "subset", "is MLPerf's mode of DLIO's layout; with "
                          f"checkpoint.layout={layout} every rank writes")


def dense_only(workload: Workload, layout: str, why: str) -> None:
    """A layout that does not (yet) write mixtures of experts says so, and which layout does."""
    if workload.model.family != "dense":
        raise ConfigError("workload.model.family", workload.model.family, f"is not modelled with "
                          f"checkpoint.layout={layout}: {why}; checkpoint.layout=megatron, dcp or deepspeed writes "
                          "one as that framework does")


def shared_read_tier(workload: Workload, why: str) -> None:
    """A load whose ranks read files other ranks wrote (``why``: whose) cannot read from a node-scoped tier, which
    holds each host's files on that host alone; so no lost-host restore either (it reads a node tier)."""
    ck = workload.checkpoint
    reader = workload.storages[ck.read_tier]
    if ck.num_checkpoints_read and workload.restore.lost_hosts:
        raise ConfigError("workload.restore.lost_hosts", workload.restore.lost_hosts, f"is not modelled with "
                          f"checkpoint.layout={ck.layout}: {why}, which a node-scoped read tier (what a lost-host "
                          "restore reads) holds on the writer's host alone")
    if ck.num_checkpoints_read and reader.scope != "shared":
        raise ConfigError(f"{workload.tier_key(ck.read_tier)}.scope", reader.scope, f"{why}, which a node-scoped "
                          "tier holds on the writer's host alone: read from a shared tier (checkpoint.read_tier)")
