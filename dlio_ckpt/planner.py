"""A pure function from (workload, world size) to a Plan: which files each rank writes, what they hold.

Why frozen data: like PyTorch DCP's SavePlanner, the plan is computed and checked before any byte
is written, prints and compares, and needs no MPI or disk to test. Identical structures are shared
(the tensors of a pipeline stage are one tuple for all its ranks), so a 4096-rank llama_1t plan is
cheap to build.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, cached_property
from typing import Literal

from .config import Workload
from .model import DATATYPE_BYTES, TransformerShape

GIB = 1 << 30


@dataclass(frozen=True)
class TensorGroup:
    """A dict of 1-D tensors ``{"0": t0, "1": t1, ...}``; ``key`` is its name in the file's
    top-level dict, or None when the group *is* the top-level dict."""

    key: str | None
    numels: tuple[int, ...]


@dataclass(frozen=True)
class FilePlan:
    stem: str  # file name without the format's extension
    kind: Literal["model", "optimizer"]
    dtype: str
    groups: tuple[TensorGroup, ...]

    @property
    def itemsize(self) -> int:
        return DATATYPE_BYTES[self.dtype]

    @property
    def num_tensors(self) -> int:
        return sum(len(g.numels) for g in self.groups)

    @property
    def payload_bytes(self) -> int:
        return self.itemsize * sum(sum(g.numels) for g in self.groups)


@dataclass(frozen=True)
class RankPlan:
    rank: int
    tp: int
    pp: int
    dp: int
    mp: int
    files: tuple[FilePlan, ...]

    @property
    def payload_bytes(self) -> int:
        return sum(f.payload_bytes for f in self.files)


@dataclass(frozen=True)
class Layout:
    """Everything the file layout depends on, extracted from a workload: hashable, so the per-stage
    work can be cached."""

    shape: TransformerShape
    tensor: int
    pipeline: int
    data: int
    zero_stage: int
    model_dtype: str
    optimizer_dtype: str
    world_size: int
    scale: float = 1.0

    @classmethod
    def from_workload(cls, workload: Workload, world_size: int) -> Layout:
        m, par, ck = workload.model, workload.model.parallelism, workload.checkpoint
        mp = par.tensor * par.pipeline
        return cls(
            shape=TransformerShape.from_model(m),
            tensor=par.tensor, pipeline=par.pipeline,
            data=par.data if ck.mode == "subset" else world_size // mp,
            zero_stage=par.zero_stage, model_dtype=m.model_datatype,
            optimizer_dtype=m.optimizer_datatype, world_size=world_size, scale=ck.scale,
        )

    @property
    def mp(self) -> int:
        return self.tensor * self.pipeline

    @property
    def optimizer_numel(self) -> int:
        p = self.shape.num_parameters
        return p // (self.data * self.mp) if self.zero_stage >= 1 else p // self.mp

    def scaled(self, numel: int) -> int:
        """``checkpoint.scale``: shrink a tensor, keeping at least one element of a non-empty one."""
        if self.scale == 1.0 or numel == 0:
            return numel
        return max(1, int(numel * self.scale))

    def is_writer(self, rank: int) -> bool:
        return self.zero_stage >= 1 or rank < self.mp

    @cache  # noqa: B019 - Layout is frozen and few exist per process
    def layer_group(self, layer: int, key: str | None) -> TensorGroup:
        sf = self.data if self.zero_stage == 3 else 1
        numels = self.shape.layer_numels(layer, self.tensor, sf)
        return TensorGroup(key, tuple(self.scaled(n) for n in numels))

    @cache  # noqa: B019
    def stage_groups(self, pp: int, nested: bool) -> tuple[TensorGroup, ...]:
        layers = self.shape.stage_layers(pp, self.pipeline)
        return tuple(self.layer_group(i, str(i) if nested else None) for i in layers)

    @cached_property
    def optimizer_group(self) -> TensorGroup:
        p, h = self.optimizer_numel, self.shape.hidden_size
        return TensorGroup(None, tuple(self.scaled(n) for n in (p, 5 * h) * 3))

    def rank_plan(self, rank: int) -> RankPlan:
        """Files of ``rank`` in the order it writes them (spec: "Who writes what")."""
        tp, pp, dp, mp = rank % self.tensor, (rank // self.tensor) % self.pipeline, rank // self.mp, rank % self.mp
        files: list[FilePlan] = []
        if self.is_writer(rank):
            md, z = self.model_dtype, self.zero_stage
            if z in (1, 2) and dp == 0 and self.pipeline > 1:
                layers = self.shape.stage_layers(pp, self.pipeline)
                for layer, group in zip(layers, self.stage_groups(pp, nested=False), strict=True):
                    files.append(FilePlan(f"layer_{layer}-model_{mp}_model_states", "model", md, (group,)))
            elif z in (1, 2) and dp == 0:
                files.append(FilePlan(f"model_{mp}_model_states", "model", md, self.stage_groups(pp, True)))
            elif z in (0, 3):
                files.append(FilePlan(f"zero_pp_rank_{dp}_mp_rank_{mp}_model_states", "model", md,
                                      self.stage_groups(pp, True)))
            if self.optimizer_numel > 0:
                files.append(FilePlan(f"zero_pp_rank_{dp}_mp_rank_{mp}_optim_states", "optimizer",
                                      self.optimizer_dtype, (self.optimizer_group,)))
        return RankPlan(rank, tp, pp, dp, mp, tuple(files))


@dataclass(frozen=True)
class Plan:
    layout: Layout
    ranks: tuple[RankPlan, ...]

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    @property
    def num_parameters(self) -> int:
        return self.layout.shape.num_parameters

    @cached_property
    def total_payload_bytes(self) -> int:
        return sum(r.payload_bytes for r in self.ranks)

    @property
    def checkpoint_size_GB(self) -> float:  # noqa: N802 - DLIO's key name (it is GiB)
        return self.total_payload_bytes / GIB

    def validate(self) -> None:
        """Check the job's plan once, before a byte is written (as DCP validates its global plan):
        one plan per rank in order, no file written by two ranks, every layer in exactly one pipeline
        stage, and the model states of one replica (all its tensor-parallel ranks and ZeRO-3 shards)
        holding exactly the elements the model arithmetic gives. A failure is our bug, not input."""
        lay, shape = self.layout, self.layout.shape
        problems = []
        if [r.rank for r in self.ranks] != list(range(self.world_size)):
            problems.append("ranks are not 0..world_size-1 in order")
        stems = [f.stem for r in self.ranks for f in r.files]
        if len(set(stems)) != len(stems):
            problems.append("two ranks write the same file")
        layers = sorted(i for pp in range(lay.pipeline) for i in shape.stage_layers(pp, lay.pipeline))
        if layers != list(range(shape.num_layers + 3)):
            problems.append("pipeline stages do not cover every layer exactly once")
        if lay.scale == 1.0 and lay.data * lay.mp == self.world_size:  # a whole replica is planned
            sf = lay.data if lay.zero_stage == 3 else 1
            replica = [f for r in self.ranks if lay.zero_stage == 3 or r.dp == 0 for f in r.files if f.kind == "model"]
            elements = sum(sum(g.numels) for f in replica for g in f.groups)
            expected = lay.tensor * sf * sum(sum(shape.layer_numels(i, lay.tensor, sf)) for i in layers)
            if elements != expected:
                problems.append(f"one replica's model states hold {elements} elements, the model {expected}")
        if problems:
            raise RuntimeError(f"inconsistent plan for world size {self.world_size}: {'; '.join(problems)}")


def make_plan(workload: Workload, world_size: int) -> Plan:
    """The whole job's layout. Validation of the world size is the caller's (config.check_world_size)."""
    layout = Layout.from_workload(workload, world_size)
    return Plan(layout, tuple(layout.rank_plan(r) for r in range(world_size)))
