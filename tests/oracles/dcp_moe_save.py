"""A real ``dcp.save`` of a mixture of experts trained as torchtitan trains one, on CPU (gloo): the oracle of
``checkpoint.layout=dcp`` with ``model.family=moe``.

    python tests/oracles/dcp_moe_save.py OUT WORLD CONFIG_JSON [OUT WORLD CONFIG_JSON ...]

Several saves are made one after another, each its ranks forked afresh from this process (torch and its
distributed checkpoint imported once for all of them).

CONFIG_JSON: ``layers``, ``dense`` (first dense blocks), ``dim``, ``inter`` (dense MLP width), ``vocab``, ``heads``,
``experts``, ``moe_inter``, ``shared`` (shared experts), ``bias`` (the load-balancing buffer), ``ep``, ``threads``
(FileSystemWriter's thread_count), and either ``mla`` (``q_lora``, ``kv_lora``,
``nope``, ``rope``, ``v``) or ``kv_heads``, ``head_dim``, ``qk_norm`` for grouped-query attention.

The modules are torchtitan v0.2.0's in names, shapes and registration order (``models/deepseek_v3`` for latent
attention, ``models/qwen3`` for grouped-query; ``models/moe/moe.py``: GroupedExperts' 3-D ``w1``, ``w2``, ``w3``,
the router's gate, shared experts, the ``expert_bias`` buffer), without their forward passes, which a save does
not need. Parallelism is torchtitan's (``models/llama4/infra/parallelize.py``, ``distributed/expert_parallel.py``):
routed experts on a 2-D mesh (dp_shard_mod_ep, ep), sharded on dim 0 over EP, then FSDP2 over dp_shard_mod_ep on
dim 0, or dim 1 when dp_shard_mod_ep x ep exceeds the experts; every other parameter FSDP2 over all ranks. One
Adam step, then ``dcp.save`` of ``get_state_dict``, as our ``fsdp`` mode saves. Parameters are fp32 (FSDP2's
mixed precision casts only for compute: torchtitan saves fp32).
"""

from __future__ import annotations

import gc
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def linear(i: int, o: int) -> nn.Linear:
    return nn.Linear(i, o, bias=False)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1, self.w2, self.w3 = linear(dim, hidden), linear(hidden, dim), linear(dim, hidden)


class GroupedExperts(nn.Module):
    def __init__(self, dim: int, hidden: int, experts: int) -> None:
        super().__init__()
        self.num_experts = experts
        self.w1 = nn.Parameter(torch.randn(experts, hidden, dim) * 0.02)
        self.w2 = nn.Parameter(torch.randn(experts, dim, hidden) * 0.02)
        self.w3 = nn.Parameter(torch.randn(experts, hidden, dim) * 0.02)


class Router(nn.Module):
    def __init__(self, dim: int, experts: int) -> None:
        super().__init__()
        self.gate = linear(dim, experts)


class MoE(nn.Module):
    def __init__(self, c: dict) -> None:
        super().__init__()
        self.experts = GroupedExperts(c["dim"], c["moe_inter"], c["experts"])
        self.router = Router(c["dim"], c["experts"])
        if c["shared"]:
            self.shared_experts = FeedForward(c["dim"], c["moe_inter"] * c["shared"])
        if c["bias"]:
            self.register_buffer("expert_bias", torch.zeros(c["experts"]), persistent=True)
        self.register_buffer("tokens_per_expert", torch.zeros(c["experts"]), persistent=False)


class LatentAttention(nn.Module):
    def __init__(self, c: dict) -> None:
        super().__init__()
        m, dim, n = c["mla"], c["dim"], c["heads"]
        qk = m["nope"] + m["rope"]
        if m["q_lora"]:
            self.wq_a, self.q_norm, self.wq_b = linear(dim, m["q_lora"]), nn.RMSNorm(m["q_lora"]), \
                linear(m["q_lora"], n * qk)
        else:
            self.wq = linear(dim, n * qk)
        self.wkv_a = linear(dim, m["kv_lora"] + m["rope"])
        self.kv_norm = nn.RMSNorm(m["kv_lora"])
        self.wkv_b = linear(m["kv_lora"], n * (m["nope"] + m["v"]))
        self.wo = linear(n * m["v"], dim)


class GroupedQueryAttention(nn.Module):
    def __init__(self, c: dict) -> None:
        super().__init__()
        d, dim = c["head_dim"], c["dim"]
        if c["qk_norm"]:
            self.q_norm, self.k_norm = nn.RMSNorm(d), nn.RMSNorm(d)
        self.wq, self.wk, self.wv = linear(dim, c["heads"] * d), linear(dim, c["kv_heads"] * d), \
            linear(dim, c["kv_heads"] * d)
        self.wo = linear(c["heads"] * d, dim)


class Block(nn.Module):
    """DeepSeek-V3's order (attention, its norms, then the MLP) with latent attention, Qwen3's (attention, the
    MLP, then the norms) with grouped-query attention."""

    def __init__(self, c: dict, layer: int) -> None:
        super().__init__()
        self.moe_enabled = layer >= c["dense"]
        mla = "mla" in c
        self.attention = LatentAttention(c) if mla else GroupedQueryAttention(c)
        if mla:
            self.attention_norm, self.ffn_norm = nn.RMSNorm(c["dim"]), nn.RMSNorm(c["dim"])
        if self.moe_enabled:
            self.moe = MoE(c)
        else:
            self.feed_forward = FeedForward(c["dim"], c["inter"])
        if not mla:
            self.attention_norm, self.ffn_norm = nn.RMSNorm(c["dim"]), nn.RMSNorm(c["dim"])


class Model(nn.Module):
    def __init__(self, c: dict) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(c["vocab"], c["dim"])
        self.layers = nn.ModuleDict({str(i): Block(c, i) for i in range(c["layers"])})
        self.norm = nn.RMSNorm(c["dim"])
        self.output = linear(c["dim"], c["vocab"])


def trained(c: dict, world: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The model placed as torchtitan places it on ``world`` ranks (this process one of them, its process group
    up), and Adam after one step on zero gradients: what a save writes and what a load fills (a load at another
    world size places the same model on its own meshes)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard, distribute_tensor

    torch.manual_seed(0)
    model = Model(c)
    ep = c["ep"]
    mesh = init_device_mesh("cpu", (world // ep, ep), mesh_dim_names=("dp_shard_mod_ep", "ep"))
    dp = init_device_mesh("cpu", (world,), mesh_dim_names=("dp_shard",))
    for block in model.layers.values():
        if block.moe_enabled and ep > 1:
            experts = block.moe.experts
            for name, param in list(experts.named_parameters()):  # ExpertParallel: Shard(0) over the EP mesh
                experts.register_parameter(name, nn.Parameter(distribute_tensor(param.data, mesh["ep"], [Shard(0)])))
            wide = mesh["dp_shard_mod_ep"].size() * ep > c["experts"]  # then FSDP2 splits each expert's rows
            fully_shard(experts, mesh=mesh["dp_shard_mod_ep"], shard_placement_fn=(lambda _p: Shard(1)) if wide
                        else None)
        fully_shard(block, mesh=dp)
    fully_shard(model, mesh=dp)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for p in model.parameters():  # made-up gradients: the optimizer has state to save
        p.grad = torch.zeros_like(p)
    opt.step()
    return model, opt


def worker(rank: int, world: int, port: int, out: str, c: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, opt = trained(c, world)
    msd, osd = get_state_dict(model, opt)
    writer = dcp.FileSystemWriter(out, thread_count=c["threads"])
    dcp.save({"model": msd, "optim": osd}, storage_writer=writer)
    dist.barrier()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def save(out: str, world: int, c: dict) -> None:
    """The save by ``world`` processes forked from this one (torch imported once, not once per rank)."""
    mp.start_processes(worker, args=(world, free_port(), out, c), nprocs=world, join=True, start_method="fork")


def main() -> None:
    import torch.distributed.checkpoint  # noqa: F401 - imported once, before the ranks are forked
    args = sys.argv[1:]
    for k in range(0, len(args), 3):
        save(args[k], int(args[k + 1]), json.loads(args[k + 2]))


if __name__ == "__main__":
    main()
    # done and written: the interpreter's last collection would walk every object torch made (1 s of the exit)
    gc.freeze()
