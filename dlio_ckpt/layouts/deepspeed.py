"""DeepSpeed's own file names over DLIO's model of a DeepSpeed job: the same files per rank and the same
bytes as ``layout=dlio``, named as DeepSpeed's engine names them.

Derived from DeepSpeed's source, not from a save (DeepSpeed's ZeRO needs an accelerator; none saves
here): ``deepspeed/runtime/engine.py`` (``_get_ckpt_name``, ``_get_rank_zero_ckpt_name``,
``_get_zero_ckpt_prefix``) and ``deepspeed/runtime/pipe/module.py`` (``ckpt_layer_path``), microsoft/DeepSpeed
v0.16-0.19:

- ZeRO 0-2: ``mp_rank_{mp:02d}_model_states.pt``, written by data-parallel rank 0 of each model-parallel rank;
  ZeRO 3: ``zero_pp_rank_{dp}_mp_rank_{mp:02d}_model_states.pt`` by every rank.
- Pipeline parallelism: ``layer_{layer:02d}-model_{tp:02d}-model_states.pt`` per layer.
- Optimizer: ``[bf16_]zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt`` (``bf16_`` when the model trains in bf16).
What DLIO leaves out is left out here too, and said: the ``latest`` file beside the step folder, the engine's
small ``mp_rank_*`` file of a pipeline job, and DeepSpeed's step folder name ``global_step{N}`` (steps are
``global_epoch1_step{N}`` in every layout, so a run's record and manifests read the same).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..formats import Format, get_format
from ..planner import Plan
from . import dlio
from .rules import torch_save_only

if TYPE_CHECKING:
    from ..config import Workload



def check(workload: Workload) -> None:
    torch_save_only(workload, "deepspeed", "DeepSpeed")


@dataclass(frozen=True)
class DeepSpeedLayout(dlio.DlioLayout):
    name: ClassVar[str] = "deepspeed"

    def layer_stem(self, layer: int, mp: int, tp: int) -> str:
        return f"layer_{layer:02d}-model_{tp:02d}-model_states"

    def model_stem(self, mp: int) -> str:
        return f"mp_rank_{mp:02d}_model_states"

    def sharded_model_stem(self, dp: int, mp: int) -> str:
        return f"zero_pp_rank_{dp}_mp_rank_{mp:02d}_model_states"

    def optimizer_stem(self, dp: int, mp: int) -> str:
        return f"{'bf16_' if self.model_dtype == 'bf16' else ''}zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states"


def make_plan(workload: Workload, world_size: int) -> Plan:
    return dlio.make_plan(workload, world_size, DeepSpeedLayout)


def file_format(workload: Workload) -> Format:
    return get_format("pt")
