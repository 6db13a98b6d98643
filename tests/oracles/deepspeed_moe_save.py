"""Real DeepSpeed MoE saves on CPU (gloo), the oracle of ``checkpoint.layout=deepspeed`` for mixtures of experts:
records what ``engine.save_checkpoint`` wrote for ``workload=tiny_moe`` on 4 ranks, file by file and rank by
rank, into ``tests/data/deepspeed_moe.json``, which ``tests/unit/test_moe_layouts.py`` holds the layout to. The same
environment and machinery as ``tests/oracles/deepspeed_save.py`` (its docstring says how to build it); from
the repository root::

    DS_ACCELERATOR=cpu PYTHONPATH=. /tmp/dsenv/bin/python tests/oracles/deepspeed_moe_save.py \
        tests/data/deepspeed_moe.json

The model has tiny_moe's tensors (``dlio_ckpt.model.moe.MoeShape`` of the workload with the case's overrides: the
inputs only, their names and shapes held to transformers' classes in ``tests/unit/test_moe_model.py``): each dense
tensor a parameter of that shape, each MoE block a ``deepspeed.moe.layer.MoE`` (its gate is the router; each
expert two linears, the gate and up projection fused and the down projection) with ``ep_size`` the workload's
EP, and the router's bias a buffer. AdamW over DeepSpeed's MoE param groups, one step on a made-up loss, ZeRO
and dtype as the workload says, then ``save_checkpoint``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from deepspeed_save import record, write
from torch import nn

# (case id, overrides of workload=tiny_moe): 4 ranks, EP 2 with ZeRO 1 in bf16 (the workload as shipped), and
# EP 4 with ZeRO 2 in fp32
WORLD = 4
CASES = [
    ("ep2-zero1-bf16", []),
    ("ep4-zero2-fp32", ["++workload.model.parallelism.expert=4", "++workload.model.parallelism.zero_stage=2",
                        "++workload.model.model_datatype=fp32"]),
]


class Expert(nn.Module):
    def __init__(self, hidden: int, width: int) -> None:
        super().__init__()
        self.gate_up = nn.Linear(hidden, 2 * width, bias=False)
        self.down = nn.Linear(width, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.gate_up(x)[..., : self.down.in_features])


class Model(nn.Module):
    def __init__(self, s: object, ep: int) -> None:
        import deepspeed

        super().__init__()
        dense = [p for p in s.params if not p.experts and p.trainable and not p.name.endswith("mlp.gate.weight")]
        self.dense = nn.ParameterList(nn.Parameter(torch.randn(p.shape) * 0.02) for p in dense)
        blocks = len({p.name.rsplit("experts.", 1)[0] for p in s.params if p.experts})
        expert = Expert(s.hidden_size, s.expert_ffn_hidden_size)
        self.moe = nn.ModuleList(deepspeed.moe.layer.MoE(hidden_size=s.hidden_size, expert=expert,
                                                         num_experts=s.num_experts, ep_size=ep, k=2)
                                 for _ in range(blocks))
        for k, p in enumerate(p for p in s.params if not p.trainable):
            self.register_buffer(f"bias_{k}", torch.zeros(p.shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """A made-up loss over every parameter (ZeRO 1 and 2 keep them whole: nothing to gather)."""
        return x * sum((p.float() ** 2).sum() for p in self.parameters())


def moe(rank: int, world: int, overrides: list[str]) -> tuple[nn.Module, dict, None, list]:
    from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer

    from dlio_ckpt.config import compose
    from dlio_ckpt.model.moe import MoeShape

    w, _, _ = compose(["workload=tiny_moe", "++workload.checkpoint.layout=deepspeed", *overrides], None)
    torch.manual_seed(0)
    model = Model(MoeShape.from_model(w.model), w.model.parallelism.expert)
    config = {"train_micro_batch_size_per_gpu": 1, "steps_per_print": 1000,
              "bf16": {"enabled": w.model.model_datatype == "bf16"},
              "zero_optimization": {"stage": w.model.parallelism.zero_stage}}
    groups = split_params_into_different_moe_groups_for_optimizer({"params": list(model.parameters()), "name": "p"})
    return model, config, None, groups


def main() -> None:
    only = sys.argv[2:]
    write(Path(sys.argv[1]), {name: {"overrides": extra, **record(name, WORLD, moe, (extra,))}
                              for name, extra in CASES if not only or name in only})


if __name__ == "__main__":
    main()
