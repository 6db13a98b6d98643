"""Checkpoint layouts: what files a training job's ranks write, as a framework lays them out.

Each layout is one module over the same model arithmetic (:mod:`dlio_ckpt.model.dense`) and the same plan
types (:mod:`dlio_ckpt.plan.types`), with three functions: ``check(workload)`` (the layout's rules, exit 2
naming key, value and rule), ``make_plan(workload, world_size)`` (every rank's files, their items, and
the coordinator's files) and ``file_format(workload)`` (the bytes of its files). This table is the only
list of their names: the config's ``checkpoint.layout`` choices derive from it, and a new layout is one
module and one line.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from dlio_ckpt.plan.collector import collector_paused

REGISTRY: dict[str, str] = {  # name: module, and what it emulates
    "dlio": "dlio_ckpt.plan.layouts.dlio",  # DLIO's model of a DeepSpeed job (MLPerf Storage v2.0), byte for byte
    "deepspeed": "dlio_ckpt.plan.layouts.deepspeed",  # what DeepSpeed 0.19.8 writes for ZeRO 1-3, its names
    "dcp": "dlio_ckpt.plan.layouts.dcp",  # torch.distributed.checkpoint of an FSDP2 job (torchtitan, Lightning FSDP)
    "megatron": "dlio_ckpt.plan.layouts.megatron",  # Megatron-core's torch_dist of a GPT job, distributed optimizer
}
NAMES = tuple(REGISTRY)


def load_layout(name: str) -> ModuleType:
    return importlib.import_module(REGISTRY[name])


def file_format(workload: Any) -> Any:
    """The bytes of the files the workload's layout writes (a ``formats.Format``; this registry imports
    nothing of the package but the leaf ``collector``, so the config can derive its choices from it)."""
    return load_layout(workload.checkpoint.layout).file_format(workload)


def make_plan(workload: Any, world_size: int) -> Any:
    """The whole job's files in the workload's ``checkpoint.layout`` (a ``planner.Plan``). Validation of
    the world size is the caller's (config.check_world_size). Built with the collector paused.

    A scaled plan (``checkpoint.scale`` < 1) is made a miniature of the full-size one, planned beside it
    (a few tenths of a second at thousands of ranks): its coordinator's files shrink by the same ratio as
    the ranks' bytes, so they keep their share of the checkpoint, and it carries the full size's figures
    for the summary's projection."""
    layout = load_layout(workload.checkpoint.layout)
    with collector_paused():
        plan = layout.make_plan(workload, world_size)
        if workload.checkpoint.scale == 1.0:
            return plan
        full = workload.model_copy(update={"checkpoint": workload.checkpoint.model_copy(update={"scale": 1.0})})
        return plan.miniature_of(layout.make_plan(full, world_size))

