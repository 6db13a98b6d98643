"""DeepSpeed's own files: what its engine's ``save_checkpoint`` writes for ZeRO 1, 2 and 3, named as it
names them, over the same model arithmetic and parallelism as DLIO's layout.

Held to real saves of DeepSpeed 0.19.8 (CPU accelerator, gloo; tiny at TP 2, DP 2 and 3, ZeRO 1, 2, 3, bf16
and fp32: every name rank by rank, every tensor byte), recorded by ``tests/oracles/deepspeed_save.py``, and to
its source for the names
(``deepspeed/runtime/engine.py`` ``_get_ckpt_name``, ``_get_rank_zero_ckpt_name``; ``runtime/pipe/module.py``
``ckpt_layer_path``). What DeepSpeed writes, and where DLIO's arithmetic differs:

- ZeRO 1 and 2: data-parallel rank 0 of each model-parallel rank writes ``mp_rank_{mp:02d}_model_states.pt``,
  the module's weights in the training dtype (with pipeline parallelism
  ``layer_{i:02d}-model_{tp:02d}-model_states.pt`` per layer, from the source: not saved here).
- ZeRO 3: every rank writes ``zero_pp_rank_{dp}_mp_rank_{mp:02d}_model_states.pt`` holding an empty placeholder
  per parameter (8 KB for tiny's 27): the weights are only in the optimizer files. DLIO's layout writes each rank's
  shard of the weights there, 2 bytes a parameter DeepSpeed does not write.
- Every rank writes ``[bf16_]zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt``: its equal partition of the
  model-parallel rank's parameters (ZeRO 1/2: flattened and padded to a multiple of twice the data-parallel
  size, the model file holding that padded buffer; ZeRO 3: each parameter padded to divide) as fp32 master weights and
  Adam's two moments, and a one-element ``step``: 12 bytes a parameter (``bf16_`` when training in bf16).
- ZeRO 0 keeps the optimizer inside the model files: not measured here, refused (use ``layout=dlio``).
Left out (small, beside the step folder): ``latest`` (12 B), ``zero_to_fp32.py`` (38,580 B) and
``zero_to_torch.py`` (2,490 B), which every save writes; steps are ``global_epoch1_step{N}`` in every layout
(DeepSpeed's tag is ``global_step{N}``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.plan.formats import Calls, Format
from dlio_ckpt.plan.formats.pt import PtFormat, save_calls
from dlio_ckpt.plan.layouts import deepspeed_moe, dlio
from dlio_ckpt.plan.layouts.base import FrameworkIO, Layout
from dlio_ckpt.plan.layouts.deepspeed_files import (
    flat_partition,
    model_states,
    model_stem,
    optimizer_states,
    optimizer_stem,
    per_parameter_partition,
    placeholder_states,
)
from dlio_ckpt.plan.layouts.rules import every_rank_writes, torch_save_only
from dlio_ckpt.plan.types import FilePlan, Plan, PlannedFile, RankPlan

if TYPE_CHECKING:
    from dlio_ckpt.config import Workload

READS = "each rank its own files, whole (as DLIO reads them; DeepSpeed's load_checkpoint is not modelled)"
NO_RESTORE = ("DeepSpeed loads ZeRO partitions only at the parallelism they were saved with (another "
              "needs the universal-checkpoint conversion, ds_to_universal.py, not emulated), and its "
              "weights-only load is not modelled yet; checkpoint.layout=dcp does both")



def check(workload: Workload) -> None:
    torch_save_only(workload, "deepspeed", "DeepSpeed")
    every_rank_writes(workload, "deepspeed")  # subset mode is DLIO's: DeepSpeed's partitions are the job's
    if workload.model.family == "moe":
        deepspeed_moe.check(workload)
    stage = workload.model.parallelism.zero_stage
    if stage == 0:
        raise ConfigError("workload.model.parallelism.zero_stage", stage, "must be 1, 2 or 3 with "
                          "checkpoint.layout=deepspeed (without ZeRO DeepSpeed keeps the optimizer inside the model "
                          "files, not measured here; layout=dlio models it)")


@dataclass(frozen=True)
class DeepSpeedLayout(dlio.DlioLayout):
    name: ClassVar[str] = "deepspeed"

    def layer_stem(self, layer: int, mp: int, tp: int) -> str:
        return f"layer_{layer:02d}-model_{tp:02d}-model_states"

    def model_stem(self, mp: int) -> str:
        return model_stem(mp)

    def sharded_model_stem(self, dp: int, mp: int) -> str:
        return f"zero_pp_rank_{dp}_mp_rank_{mp:02d}_model_states"

    def optimizer_stem(self, dp: int, mp: int) -> str:
        return optimizer_stem(dp, mp, self.model_dtype)

    def problems(self, plan: Plan) -> list[str]:
        """Every model-parallel rank's parameters in its data-parallel ranks' optimizer partitions."""
        problems = []
        for pp in range(self.pipeline):
            need = self.stage_elements(pp)
            held = sum(f.groups[0].numels[0] for r in plan.ranks if r.pp == pp and r.tp == 0 for f in r.files
                       if isinstance(f, FilePlan) and f.kind == "optimizer")
            if self.scale == 1.0 and held < need:
                problems.append(f"stage {pp}: optimizer partitions hold {held} of {need} parameters")
        return problems

    def stage_numels(self, pp: int) -> tuple[int, ...]:
        """The parameters of one model-parallel rank of stage ``pp`` (unsharded: ZeRO partitions them)."""
        return tuple(self.scaled(n) for layer in self.shape.stage_layers(pp, self.pipeline)
                     for n in self.shape.layer_numels(layer, self.tensor, 1))

    def stage_elements(self, pp: int) -> int:
        return sum(self.stage_numels(pp))

    def partition(self, pp: int) -> int:
        """Each data-parallel rank's share of stage ``pp``'s model-parallel rank, padded as DeepSpeed pads it."""
        if self.zero_stage == 3:
            return per_parameter_partition(self.stage_numels(pp), self.data)
        return flat_partition(self.stage_elements(pp), self.data)

    def rank_plan(self, rank: int) -> RankPlan:
        tp, pp, dp, mp = self.coordinates(rank)
        files: list[FilePlan] = []
        groups = self.stage_groups(pp, nested=True)
        if self.zero_stage in (1, 2) and dp == 0 and self.pipeline > 1:
            layers = self.shape.stage_layers(pp, self.pipeline)
            for layer, group in zip(layers, self.stage_groups(pp, nested=False), strict=True):
                files.append(model_states(self.layer_stem(layer, mp, tp), self.model_dtype, group.numels))
        elif self.zero_stage in (1, 2) and dp == 0:
            # the weights are views of ZeRO's flat buffer: torch.save writes it whole, padding and all, as the
            # one storage of the file (DeepSpeed's saves: one record of data)
            files.append(model_states(self.model_stem(mp), self.model_dtype, (self.data * self.partition(pp),)))
        elif self.zero_stage == 3:
            files.append(placeholder_states(self.sharded_model_stem(dp, mp), self.model_dtype,
                                            sum(len(g.numels) for g in groups)))
        files.append(optimizer_states(self.optimizer_stem(dp, mp), self.optimizer_dtype, (self.partition(pp),)))
        return RankPlan(rank, tp, pp, dp, mp, tuple(files))


def make_plan(workload: Workload, world_size: int) -> Plan:
    if workload.model.family == "moe":
        return deepspeed_moe.make_plan(workload, world_size)
    return dlio.make_plan(workload, world_size, DeepSpeedLayout)


def check_world(workload: Workload, world_size: int) -> None:
    if workload.model.family == "moe":
        deepspeed_moe.check_world(workload, world_size)


def file_format(workload: Workload) -> Format:
    """``torch.save(state_dict, path)``: pt, its records named by the file (``checkpoint.format=pt`` is checked)."""
    return PtFormat(by_path=True)


def file_calls(file: PlannedFile) -> Calls:
    """A file as DeepSpeed's ``TorchCheckpointEngine.save`` writes it: ``torch.save(state_dict, path)``."""
    assert isinstance(file, FilePlan)  # DeepSpeed's files are state dicts
    return save_calls(file)


# deepspeed/runtime/checkpoint_engine/torch_checkpoint_engine.py (deepspeedai/DeepSpeed, 0.19.x): save() is
# torch.save(state_dict, path), each of a rank's files in turn on its own thread; load() is torch.load(path).
# torch.save of a path writes through C++'s std::ofstream, and nothing syncs the file.
FRAMEWORK_IO = FrameworkIO(writer="DeepSpeed TorchCheckpointEngine: torch.save(state_dict, path) (torch 2.13.0)",
                           file_calls=file_calls, thread_per_file=False, stream="c++", syncs_files=False,
                           archives=True)


LAYOUT = Layout(make_plan=make_plan, file_format=file_format, check=check, check_world=check_world,
                reads=READS, no_restore=NO_RESTORE, framework_io=FRAMEWORK_IO,
                whole_file_load="DeepSpeed's load_checkpoint is not modelled")
