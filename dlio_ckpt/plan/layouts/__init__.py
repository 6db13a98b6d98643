"""Checkpoint layouts: what files a training job's ranks write, as a framework lays them out.

Each layout is one module over the same model arithmetic (:mod:`dlio_ckpt.model`) and the same plan
types (:mod:`dlio_ckpt.plan.types`), declaring one :class:`~dlio_ckpt.plan.layouts.base.Layout` (its
docstring gives the call order). Their names are listed once, in :data:`dlio_ckpt.registry.LAYOUTS`
(another package adds one through the entry-point group ``dlio_ckpt.layouts``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.plan.collector import collector_paused
from dlio_ckpt.plan.layouts.base import FrameworkIO, Layout
from dlio_ckpt.plan.sample import sampled
from dlio_ckpt.registry import LAYOUTS

if TYPE_CHECKING:
    from dlio_ckpt.config import Workload
    from dlio_ckpt.plan.formats import Format
    from dlio_ckpt.plan.types import Plan


def get_layout(name: str) -> Layout:
    """The layout registered as ``name``, imported on first use."""
    layout = LAYOUTS.load(name)
    if not isinstance(layout, Layout):
        raise ConfigError(LAYOUTS.key, name, f"{LAYOUTS[name].target} must be a dlio_ckpt.plan.layouts.base.Layout, "
                          f"not {type(layout).__name__}")
    return layout


def file_format(workload: Workload) -> Format:
    """The bytes of the files the workload's layout writes."""
    return get_layout(workload.checkpoint.layout).file_format(workload)


def framework_io(workload: Workload) -> FrameworkIO | None:
    """How the workload's saves write when they play their framework's calls (``checkpoint.io_pattern=framework``
    and a layout that has them); None: they write the tuned stream."""
    if workload.checkpoint.io_pattern != "framework":
        return None
    return get_layout(workload.checkpoint.layout).framework_io


def make_plan(workload: Workload, world_size: int, processes: int = 1) -> Plan:
    """The whole job's files in the workload's ``checkpoint.layout``. Validation of the world size is the
    caller's (config.check_world_size). Built with the collector paused.

    A scaled plan (``checkpoint.scale`` < 1) is made a miniature of the full-size one, planned beside it
    (a few tenths of a second at thousands of ranks): its coordinator's files shrink by the same ratio as
    the ranks' bytes, so they keep their share of the checkpoint, and it carries the full size's figures
    for the summary's projection."""
    layout, ck = get_layout(workload.checkpoint.layout), workload.checkpoint
    with collector_paused():
        if ck.scale == 1.0:
            return layout.make_plan(workload, world_size)
        full = layout.make_plan(workload.model_copy(update={"checkpoint": ck.model_copy(update={"scale": 1.0})}),
                                world_size)
        if ck.miniature == "sample" and layout.item_size is not None:
            return sampled(full, ck.scale, layout.item_size, processes)
        return layout.make_plan(workload, world_size).miniature_of(full)
