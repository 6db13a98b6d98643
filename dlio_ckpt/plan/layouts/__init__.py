"""Checkpoint layouts: what files a training job's ranks write, as a framework lays them out.

Each layout is one module over the same model arithmetic (:mod:`dlio_ckpt.model`) and the same plan
types (:mod:`dlio_ckpt.plan.types`), declaring one :class:`~dlio_ckpt.plan.layouts.base.Layout` (its
docstring gives the call order). Their names are listed once, in :data:`dlio_ckpt.registry.LAYOUTS`
(another package adds one through the entry-point group ``dlio_ckpt.layouts``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dlio_ckpt.config.keys import layout_keys_set
from dlio_ckpt.config.world import check_world_size
from dlio_ckpt.errors import ConfigError
from dlio_ckpt.plan.collector import collector_paused
from dlio_ckpt.plan.layouts.base import FrameworkIO, Layout
from dlio_ckpt.plan.reads import RestorePlan, sample_reads, whole_files
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


def check_job(workload: Workload, world_size: int | None = None, processes: int | None = None) -> None:
    """Every rule a job keeps before anything is written, past the configuration's own (``config.compose``): the
    layout's (a key it does not read, set, is refused by name; then its ``check``), and with ``world_size`` the
    configuration's rules that need it (:func:`~dlio_ckpt.config.world.check_world_size`, ``processes`` the process
    count) and, in the emulated mode, the layout's own of them (``check_world``: DeepSpeed's experts within data
    parallelism; a real mode's framework lays out its own ranks, as ``check_world_size`` says). The plan
    layer's step, so that validating a workload runs no layout code: a layout is imported through the registry
    from here, above the configuration, never from below it."""
    layout = get_layout(workload.checkpoint.layout)
    for key, value, meaning in layout_keys_set(workload):
        if key not in layout.reads_keys:
            readers = [n for n in LAYOUTS.names if key in get_layout(n).reads_keys]
            raise ConfigError(f"workload.{key}", value, f"means nothing with checkpoint.layout="
                              f"{workload.checkpoint.layout}: it is {meaning}; set checkpoint.layout="
                              f"{' or '.join(readers)}, or leave it out")
    layout.check(workload)
    if world_size is None:
        return
    check_world_size(workload, world_size, processes)
    if workload.mode == "emulated" and layout.check_world is not None:
        layout.check_world(workload, world_size)


def file_format(workload: Workload) -> Format:
    """The bytes of the files the workload's layout writes."""
    return get_layout(workload.checkpoint.layout).file_format(workload)


def framework_io(workload: Workload) -> FrameworkIO | None:
    """How the workload's saves write when they play their framework's calls (``checkpoint.io_pattern=framework``
    and a layout that has them); None: they write the tuned stream."""
    if workload.checkpoint.io_pattern != "framework":
        return None
    return get_layout(workload.checkpoint.layout).framework_io


def make_plan(workload: Workload, world_size: int) -> Plan:
    """The whole job's files in the workload's ``checkpoint.layout``. Validation of the job is the caller's
    (:func:`check_job`). Built with the collector paused.

    A scaled plan (``checkpoint.scale`` < 1) is made a miniature of the full-size one, planned beside it
    (a few tenths of a second at thousands of ranks): its coordinator's files shrink by the same ratio as
    the ranks' bytes, so they keep their share of the checkpoint, and it carries the full size's figures
    for the summary's projection. With ``checkpoint.miniature=sample`` it keeps a sample of the full size's items
    whole instead (:mod:`dlio_ckpt.plan.sample`)."""
    layout, ck = get_layout(workload.checkpoint.layout), workload.checkpoint
    with collector_paused():
        if ck.scale == 1.0:
            return layout.make_plan(workload, world_size)
        full = layout.make_plan(workload.model_copy(update={"checkpoint": ck.model_copy(update={"scale": 1.0})}),
                                world_size)
        if ck.miniature == "sample" and layout.item_size is not None:
            return sampled(full, ck.scale, layout.item_size)
        return layout.make_plan(workload, world_size).miniature_of(full)


def at_saved_world(workload: Any, plan: Plan, world: int, why: str) -> None:
    """A load at another world size than the save's, refused where the layout's framework cannot reshard (``why``)."""
    if world != plan.world_size:
        raise ConfigError("workload.restore.world_size", world, f"must be the save's ({plan.world_size}) with "
                          f"checkpoint.layout={workload.checkpoint.layout}: {why}")


def restore_plan(workload: Any, plan: Plan, full: RestorePlan | None = None) -> RestorePlan:
    """What each rank of the read phase reads: the layout's own ``restore`` where its framework reshards or
    loads the model alone (DCP); elsewhere each rank's own files whole, at the save's world size, and a load
    asked otherwise is refused with the layout's reason (its ``no_restore``), exit 2. A sample's load reads what
    the full size's reads of the kept items (:func:`~dlio_ckpt.plan.reads.sample_reads`); ``full``: the full
    size's, where the caller has it already (planning it is most of the work)."""
    layout, asked = get_layout(workload.checkpoint.layout), workload.restore
    if plan.sample and plan.full_size is not None and layout.item_size is not None:
        return sample_reads(full if full is not None else restore_plan(workload, plan.full_size), plan,
                            layout.item_size)
    world = asked.world_size or plan.world_size
    if layout.restore is not None:
        return layout.restore(workload, plan, world, asked.model_only)
    at_saved_world(workload, plan, world, layout.no_restore)
    if asked.model_only:
        raise ConfigError("workload.restore.model_only", True, f"is not modelled with checkpoint.layout="
                          f"{workload.checkpoint.layout}: {layout.no_restore}")
    return whole_files(plan, layout.reads)


def load_caveat(workload: Any, restore: RestorePlan) -> str | None:
    """In plain words, where the read phase is not held to the framework's own load (None where it is).
    Why said: such a load is verified byte for byte all the same, and "verified" alone reads as if its
    pattern were the framework's. A load where every rank reads its own files whole, in a layout whose
    framework loads otherwise, stands in for a load not modelled; a layout says which of its modelled loads
    are not held to its framework's (:class:`~dlio_ckpt.plan.layouts.base.Layout`)."""
    layout = get_layout(workload.checkpoint.layout)
    own_whole = all(f.rank == r.rank and not f.ranges for r in restore.ranks for f in r.files)
    if own_whole and layout.whole_file_load is not None:
        return f"not the framework's own load ({layout.whole_file_load}): each rank reads its own files whole"
    return layout.load_caveat(workload) if layout.load_caveat is not None else None
