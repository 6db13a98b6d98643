"""A real DeepSpeed 0.19.8 MoE save on CPU (gloo), run by hand: what ``tests/test_moe_layouts.py`` records
as DeepSpeed's files for ``workload=tiny_moe`` (DeepSpeed is not a test dependency: its first
``init_distributed`` on a CPU compiles a C++ op and it needs packages of its own).

    pip install --target /tmp/dspkgs --no-deps deepspeed==0.19.8 hjson ninja py-cpuinfo msgpack einops
    PYTHONPATH=/tmp/dspkgs:. DS_ACCELERATOR=cpu python tests/oracles/deepspeed_moe_save.py OUT WORLD [OVERRIDES...]

The model has tiny_moe's tensors (``dlio_ckpt.moe.MoeShape``, the workload with OVERRIDES): each dense tensor a
parameter of that shape, each MoE block a ``deepspeed.moe.layer.MoE`` (its gate is the router; each expert
two linears, the gate and up projection fused and the down projection) with ``ep_size`` the workload's EP,
and the router's bias a buffer. AdamW, one step on a made-up loss, ZeRO as the workload says (bf16), then
``save_checkpoint``; prints every file's name and size as JSON.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import torch
import torch.multiprocessing as mp
from torch import nn


class Expert(nn.Module):
    def __init__(self, hidden: int, width: int) -> None:
        super().__init__()
        self.gate_up = nn.Linear(hidden, 2 * width, bias=False)
        self.down = nn.Linear(width, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.gate_up(x)[..., : self.down.in_features])


def build(overrides: list[str]) -> tuple[nn.Module, dict]:
    import deepspeed

    from dlio_ckpt.config import compose
    from dlio_ckpt.moe import MoeShape

    w, _, _ = compose(["workload=tiny_moe", "++workload.checkpoint.layout=deepspeed", *overrides], None)
    s = MoeShape.from_model(w.model)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            dense = [p for p in s.params if not p.experts and p.trainable and not p.name.endswith("mlp.gate.weight")]
            self.dense = nn.ParameterList(nn.Parameter(torch.randn(p.shape) * 0.02) for p in dense)
            blocks = len({p.name.rsplit("experts.", 1)[0] for p in s.params if p.experts})
            expert = Expert(s.hidden_size, s.expert_ffn_hidden_size)
            self.moe = nn.ModuleList(deepspeed.moe.layer.MoE(hidden_size=s.hidden_size, expert=expert,
                                                             num_experts=s.num_experts,
                                                             ep_size=w.model.parallelism.expert, k=2)
                                     for _ in range(blocks))
            for k, p in enumerate(p for p in s.params if not p.trainable):
                self.register_buffer(f"bias_{k}", torch.zeros(p.shape))

    config = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": w.model.model_datatype == "bf16"},
              "zero_optimization": {"stage": w.model.parallelism.zero_stage}, "steps_per_print": 1000}
    return Model(), config


def worker(rank: int, world: int, port: int, out: str, overrides: list[str]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_SIZE=str(world))
    import deepspeed
    from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer

    deepspeed.init_distributed(dist_backend="gloo")
    model, config = build(overrides)
    groups = split_params_into_different_moe_groups_for_optimizer({"params": list(model.parameters()), "name": "p"})
    opt = torch.optim.AdamW(groups, lr=1e-3)
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    loss = sum((p.float() ** 2).sum() for p in engine.module.parameters())
    engine.backward(loss)
    engine.step()
    engine.save_checkpoint(out, tag="global_step1")
    if rank == 0:
        step = Path(out) / "global_step1"
        print(json.dumps({p.name: p.stat().st_size for p in sorted(step.iterdir())}))


def main() -> None:
    out, world, overrides = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(world, port, out, overrides), nprocs=world, join=True)


if __name__ == "__main__":
    main()
