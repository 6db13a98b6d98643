"""DeepSpeed's files for a mixture-of-experts model (``checkpoint.layout=deepspeed``, ``model.family=moe``).

Derived from DeepSpeed 0.19.8's source (``deepspeed/runtime/engine.py``: ``_save_moe_checkpoint``,
``_get_expert_ckpt_name``, ``_get_non_moe_state_dict``, ``_get_zero_ckpt_name``, ``_configure_moe_settings``;
``deepspeed/utils/groups.py`` ``_create_expert_data_and_model_parallel``) and held to real DeepSpeed 0.19.8 MoE
saves on this machine (``tests/oracles/deepspeed_moe_save.py``, recorded in ``tests/unit/test_moe_layouts.py``):

- Each data-parallel group is cut into expert-parallel groups of ``parallelism.expert`` consecutive ranks
  (EP rank = DP rank mod EP); the ranks holding the same experts form the expert-data-parallel group (DP / EP).
- Data-parallel rank 0 of each model-parallel rank writes ``mp_rank_{mp:02d}_model_states.pt``: the module's
  weights without the experts (attention, router, shared experts, norms, embedding and head).
- Every rank of expert-data-parallel rank 0 (DP rank < EP) writes, for each MoE layer and each of its experts,
  ``layer_{L}_expert_{E}_mp_rank_{mp:02d}_model_states.pt``: that one expert's weights. ``L`` counts MoE layers
  only (in module order, the MTP module's last), ``E`` is the global expert id (EP rank x local experts + j).
- Every rank writes ``[bf16_]zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt``: fp32 master weights and
  Adam's two moments of its partition of the dense parameters (over DP) and of its EP rank's experts (over DP/EP).
  Since 0.19.5 no ``expp_rank_*_optim_states.pt`` is written under ZeRO.
- The load (``engine.load_checkpoint(dir, tag)``, :meth:`DeepSpeedMoeParams.load_stems`, held to real loads of these
  saves by ``tests/oracles/deepspeed_load_reads.py``): each rank ``torch.load``s, whole, model-parallel rank 0's
  model file and its own MP rank's, as for a dense model; then (``load_moe_state_dict``) for each MoE layer in module
  order, each expert of its EP rank, ``layer_{L}_expert_{E}_mp_rank_{mp:02d}_model_states.pt``, written by its EP
  rank's expert-data-parallel rank 0; then its own optimizer partition alone. ``load_module_only=True``: the same
  without the optimizer partition.
- ZeRO 3 refuses native MoE (DeepSpeed: "Native DeepSpeed MoE is not supported with ZeRO Stage 3"); pipeline
  parallelism with MoE is not modelled (refused). Experts are split over tensor-parallel ranks like the dense
  MLP (expert tensor parallelism); DeepSpeed's alternative, experts whole on every TP rank, is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, ClassVar

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.model.moe import MoeShape, Param
from dlio_ckpt.plan.layouts.deepspeed_files import (
    expert_stem,
    flat_partition,
    loaded_models,
    model_states,
    model_stem,
    optimizer_states,
    optimizer_stem,
)
from dlio_ckpt.plan.types import FilePlan, Plan, RankPlan, TensorGroup, scaled

if TYPE_CHECKING:
    from dlio_ckpt.config import Workload


def check(workload: Workload) -> None:
    par = workload.model.parallelism
    if par.zero_stage in (0, 3):
        raise ConfigError("workload.model.parallelism.zero_stage", par.zero_stage, "must be 1 or 2 for an MoE model "
                          "with checkpoint.layout=deepspeed: DeepSpeed refuses native MoE under ZeRO 3 (its AutoEP "
                          "path is not modelled), and without ZeRO keeps the optimizer in the model files (not "
                          "measured)")
    if par.pipeline != 1:
        raise ConfigError("workload.model.parallelism.pipeline", par.pipeline, "must be 1 for an MoE model with "
                          "checkpoint.layout=deepspeed: DeepSpeed's MoE save with its pipeline engine is not modelled "
                          "(checkpoint.layout=megatron models pipelined MoE jobs)")
    if par.expert_tensor not in (None, par.tensor):
        raise ConfigError("workload.model.parallelism.expert_tensor", par.expert_tensor, "must equal "
                          f"parallelism.tensor ({par.tensor}) with checkpoint.layout=deepspeed: its experts are split "
                          "over the tensor-parallel ranks like the dense MLP (leave expert_tensor out)")
    problems = MoeShape.from_model(workload.model).tp_problems(par.tensor)
    if problems:
        raise ConfigError("workload.model.parallelism.tensor", par.tensor, "must divide every tensor-parallel "
                          f"dimension; it does not divide {problems[0]}")


def check_world(workload: Workload, world_size: int) -> None:
    """DeepSpeed cuts each data-parallel group into expert-parallel groups: EP divides DP."""
    par = workload.model.parallelism
    data = world_size // (par.tensor * par.pipeline)
    if data % par.expert:
        raise ConfigError("workload.model.parallelism.expert", par.expert, f"must divide the data-parallel size "
                          f"{data} (world {world_size} / tensor {par.tensor}) with checkpoint.layout=deepspeed: "
                          "DeepSpeed cuts each data-parallel group into expert-parallel groups")


@dataclass(frozen=True)
class DeepSpeedMoeParams:
    name: ClassVar[str] = "deepspeed"
    shape: MoeShape
    world_size: int
    tensor: int
    expert: int
    model_dtype: str
    optimizer_dtype: str
    scale: float = 1.0

    @classmethod
    def from_workload(cls, workload: Workload, world_size: int) -> DeepSpeedMoeParams:
        m, par = workload.model, workload.model.parallelism
        return cls(MoeShape.from_model(m), world_size, par.tensor, par.expert, m.model_datatype,
                   m.optimizer_datatype, workload.checkpoint.scale)

    @property
    def data(self) -> int:
        return self.world_size // self.tensor

    @property
    def local_experts(self) -> int:
        return self.shape.num_experts // self.expert

    def describe(self) -> str:
        return (f"TP {self.tensor} × DP {self.data}, experts over EP {self.expert} ({self.local_experts} per rank, "
                f"expert DP {self.data // self.expert}), ZeRO 1/2; {len(self.moe_blocks)} MoE layers × "
                f"{self.shape.num_experts} expert files per TP rank")

    def scaled(self, numel: int) -> int:
        return scaled(numel, self.scale)

    @cached_property
    def moe_blocks(self) -> tuple[tuple[Param, ...], ...]:
        """Each MoE layer's expert tensors, in module order (DeepSpeed's ``L``)."""
        blocks: dict[str, list[Param]] = {}
        for p in self.shape.params:
            if p.experts:
                blocks.setdefault(p.name.rsplit("experts.", 1)[0], []).append(p)
        return tuple(tuple(b) for b in blocks.values())

    @cached_property
    def dense_numels(self) -> tuple[int, ...]:
        """One TP rank's non-expert tensors (buffers included: they are in the module's state dict)."""
        return tuple(self.scaled(self.shape.tp_numel(p, self.tensor)) for p in self.shape.params if not p.experts)

    @cached_property
    def dense_trainable(self) -> int:
        return sum(self.scaled(self.shape.tp_numel(p, self.tensor)) for p in self.shape.params
                   if not p.experts and p.trainable)

    @cached_property
    def expert_numels(self) -> tuple[int, ...]:
        """One expert's tensors on one TP rank (its slice of each 3-D expert tensor)."""
        return tuple(self.scaled(self.shape.tp_numel(p, self.tensor) // self.shape.num_experts)
                     for p in self.moe_blocks[0])

    def optimizer_file(self, dp: int, tp: int) -> FilePlan:
        experts = sum(self.expert_numels) * self.local_experts * len(self.moe_blocks)
        return optimizer_states(optimizer_stem(dp, tp, self.model_dtype), self.optimizer_dtype,
                                (flat_partition(self.dense_trainable, self.data),
                                 flat_partition(experts, self.data // self.expert)))

    def rank_plan(self, rank: int) -> RankPlan:
        tp, dp = rank % self.tensor, rank // self.tensor
        files = []  # in DeepSpeed's order (``_save_moe_checkpoint``): the experts, the model, the optimizer
        if dp < self.expert:  # expert-data-parallel rank 0 of EP rank dp
            for layer in range(len(self.moe_blocks)):
                for j in range(self.local_experts):
                    files.append(FilePlan(expert_stem(layer, dp * self.local_experts + j, tp), "model",
                                          self.model_dtype, (TensorGroup(None, self.expert_numels),)))
        if dp == 0:
            files.append(model_states(model_stem(tp), self.model_dtype, self.dense_numels))
        files.append(self.optimizer_file(dp, tp))
        return RankPlan(rank, tp, 0, dp, tp, tuple(files))

    def load_stems(self, rank: RankPlan, model_only: bool) -> list[str]:
        """The files DeepSpeed 0.19.8's ``load_checkpoint(dir, tag)`` has ``rank`` ``torch.load``, in order
        (``runtime/engine.py``): ``_load_checkpoint``'s model files (``_get_all_ckpt_names``' glob of
        ``mp_rank_*_model_states.pt``, sorted: the first loaded whole by ``SDLoaderBase.check_ckpt_list``, then this
        MP rank's by ``SDLoaderBase.load``); ``load_moe_state_dict``'s expert files, MoE layer by layer in module
        order, each of the EP rank's local experts (``global_expert_id = expp_rank * num_local_experts + j``, EP
        rank = DP rank mod EP); ``_load_zero_checkpoint``'s own partition alone (unless ``model_only``:
        ``load_module_only=True`` skips it)."""
        ep = rank.dp % self.expert
        stems = loaded_models([model_stem(m) for m in range(self.tensor)], rank.mp, self.tensor)
        stems += [expert_stem(layer, ep * self.local_experts + j, rank.mp) for layer in range(len(self.moe_blocks))
                  for j in range(self.local_experts)]
        if not model_only:
            stems.append(optimizer_stem(rank.dp, rank.mp, self.model_dtype))
        return stems

    def problems(self, plan: Plan) -> list[str]:
        """Every expert of every MoE layer written once per TP rank; the optimizer partitions cover the model."""
        problems = []
        experts = [f.stem for r in plan.ranks for f in r.files if "_expert_" in f.stem]
        if len(experts) != len(self.moe_blocks) * self.shape.num_experts * self.tensor:
            problems.append(f"{len(experts)} expert files, expected one per expert, MoE layer and TP rank")
        if self.scale == 1.0:
            held = sum(f.groups[0].numels[0] + f.groups[0].numels[4] for r in plan.ranks for f in r.files
                       if f.kind == "optimizer")  # master weights: dense over DP, each EP rank's experts over DP/EP
            need = self.tensor * (self.dense_trainable + sum(self.expert_numels) * self.shape.num_experts
                                  * len(self.moe_blocks))
            if held < need:
                problems.append(f"optimizer partitions hold {held} of {need} parameters")
        return problems


def make_plan(workload: Workload, world_size: int) -> Plan:
    layout = DeepSpeedMoeParams.from_workload(workload, world_size)
    return Plan(layout, tuple(layout.rank_plan(r) for r in range(world_size)))
