"""DLIO's layout (MLPerf Storage v2.0): its arithmetic, its file names, model state written by
data-parallel rank 0 (ZeRO 1/2) or by every rank (ZeRO 0/3). ``docs/concepts/dlio-layout-spec.md``
is the specification; every existing DLIO figure holds to the byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, cached_property
from typing import TYPE_CHECKING, ClassVar

from dlio_ckpt.model.dense import TransformerShape
from dlio_ckpt.plan.formats import Format, get_format
from dlio_ckpt.plan.layouts.base import Layout
from dlio_ckpt.plan.layouts.rules import dense_only
from dlio_ckpt.plan.types import FilePlan, Plan, RankPlan, TensorGroup, scaled

if TYPE_CHECKING:
    from dlio_ckpt.config import Workload

READS = "DLIO's read phase: each rank its own files, whole"
NO_RESTORE = ("DLIO's read phase reads each rank's own files whole at the save's world size; "
              "checkpoint.layout=dcp loads at another world size, or the model alone, as dcp.load does")




@dataclass(frozen=True)
class DlioParams:
    """Everything DLIO's file layout depends on, extracted from a workload: hashable, so the per-stage
    work can be cached."""

    name: ClassVar[str] = "dlio"

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
    def from_workload(cls, workload: Workload, world_size: int) -> DlioParams:
        m, par, ck = workload.model, workload.model.parallelism, workload.checkpoint
        mp = par.tensor * par.pipeline
        data = par.data if ck.mode == "subset" else world_size // mp
        assert data is not None  # a Workload is validated (config.rules): subset mode requires parallelism.data
        return cls(
            shape=TransformerShape.from_model(m),
            tensor=par.tensor, pipeline=par.pipeline,
            data=data,
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
        return scaled(numel, self.scale)

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

    def describe(self) -> str:
        return f"TP {self.tensor} × PP {self.pipeline} × DP {self.data}, ZeRO {self.zero_stage}"

    def problems(self, plan: Plan) -> list[str]:
        """Every layer in exactly one pipeline stage, and the model states of one replica (all its
        tensor-parallel ranks and ZeRO-3 shards) holding exactly the elements the model arithmetic gives."""
        shape, problems = self.shape, []
        layers = sorted(i for pp in range(self.pipeline) for i in shape.stage_layers(pp, self.pipeline))
        if layers != list(range(shape.num_layers + 3)):
            problems.append("pipeline stages do not cover every layer exactly once")
        if self.scale == 1.0 and self.data * self.mp == self.world_size:  # a whole replica is planned
            sf = self.data if self.zero_stage == 3 else 1
            replica = [f for r in plan.ranks if self.zero_stage == 3 or r.dp == 0 for f in r.files
                       if isinstance(f, FilePlan) and f.kind == "model"]
            elements = sum(sum(g.numels) for f in replica for g in f.groups)
            expected = self.tensor * sf * sum(sum(shape.layer_numels(i, self.tensor, sf)) for i in layers)
            if elements != expected:
                problems.append(f"one replica's model states hold {elements} elements, the model {expected}")
        return problems

    # DLIO's file names (its deepspeed checkpointing's, without DeepSpeed's zero padding and dashes)
    def layer_stem(self, layer: int, mp: int, tp: int) -> str:
        return f"layer_{layer}-model_{mp}_model_states"

    def model_stem(self, mp: int) -> str:
        return f"model_{mp}_model_states"

    def sharded_model_stem(self, dp: int, mp: int) -> str:
        return f"zero_pp_rank_{dp}_mp_rank_{mp}_model_states"

    def optimizer_stem(self, dp: int, mp: int) -> str:
        return f"zero_pp_rank_{dp}_mp_rank_{mp}_optim_states"

    def coordinates(self, rank: int) -> tuple[int, int, int, int]:
        """``rank``'s tensor-, pipeline- and data-parallel ranks, and its model-parallel rank."""
        return rank % self.tensor, (rank // self.tensor) % self.pipeline, rank // self.mp, rank % self.mp

    def rank_plan(self, rank: int) -> RankPlan:
        """Files of ``rank`` in the order it writes them (spec: "Who writes what")."""
        tp, pp, dp, mp = self.coordinates(rank)
        files: list[FilePlan] = []
        if self.is_writer(rank):
            md, z = self.model_dtype, self.zero_stage
            if z in (1, 2) and dp == 0 and self.pipeline > 1:
                layers = self.shape.stage_layers(pp, self.pipeline)
                for layer, group in zip(layers, self.stage_groups(pp, nested=False), strict=True):
                    files.append(FilePlan(self.layer_stem(layer, mp, tp), "model", md, (group,)))
            elif z in (1, 2) and dp == 0:
                files.append(FilePlan(self.model_stem(mp), "model", md, self.stage_groups(pp, True)))
            elif z in (0, 3):
                files.append(FilePlan(self.sharded_model_stem(dp, mp), "model", md,
                                      self.stage_groups(pp, True)))
            if self.optimizer_numel > 0:
                files.append(FilePlan(self.optimizer_stem(dp, mp), "optimizer",
                                      self.optimizer_dtype, (self.optimizer_group,)))
        return RankPlan(rank, tp, pp, dp, mp, tuple(files))


def make_plan(workload: Workload, world_size: int, kind: type[DlioParams] = DlioParams) -> Plan:
    layout = kind.from_workload(workload, world_size)
    return Plan(layout, tuple(layout.rank_plan(r) for r in range(world_size)))


def file_format(workload: Workload) -> Format:
    return get_format(workload.checkpoint.format)


def check(workload: Workload) -> None:
    """DLIO's rules (pipeline stages, ZeRO-3 without pipeline, subset mode) are the config's own
    (``Workload._layout_rules``): they came first and hold for every layout that has them. DLIO has no
    mixture of experts: its MLPerf layout is a dense Llama's."""
    dense_only(workload, "dlio", "DLIO's layout (MLPerf Storage) has no mixture of experts")


LAYOUT = Layout(make_plan=make_plan, file_format=file_format, check=check, reads=READS, no_restore=NO_RESTORE,
                whole_file_load=None)
