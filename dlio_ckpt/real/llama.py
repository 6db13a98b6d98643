"""A llama-shaped decoder built from the workload's transformer keys, for ``mode=fsdp``.

Why our own and not a model hub's: it must have exactly the tensors the emulator plans (fused QKV,
fused gate/up, RMSNorm weights, untied embedding and head: :class:`~dlio_ckpt.model.TransformerShape`),
so a real DCP checkpoint and an emulated one of the same workload hold the same parameters. It is
built on the meta device and materialized shard by shard after ``fully_shard``, so no process ever
holds the whole model.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional

from ..model import TransformerShape


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        return normed.to(x.dtype) * self.weight


class Block(nn.Module):
    def __init__(self, s: TransformerShape) -> None:
        super().__init__()
        h, f = s.hidden_size, s.ffn_hidden_size
        self.heads, self.kv_heads, self.head_dim = s.num_attention_heads, s.num_kv_heads, h // s.num_attention_heads
        self.input_norm = RMSNorm(h)
        self.qkv = nn.Linear(h, h + 2 * s.kv_dim, bias=False)
        self.out = nn.Linear(h, h, bias=False)
        self.post_norm = RMSNorm(h)
        self.gate_up = nn.Linear(h, 2 * f, bias=False)
        self.down = nn.Linear(f, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self._qkv(self.input_norm(x))
        attn = functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.out(attn.transpose(1, 2).reshape(b, t, h))
        gate, up = self.gate_up(self.post_norm(x)).chunk(2, dim=-1)
        return x + self.down(functional.silu(gate) * up)

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, h = x.shape
        kv = self.kv_heads * self.head_dim
        q, k, v = self.qkv(x).split([h, kv, kv], dim=-1)
        return (q.view(b, t, self.heads, self.head_dim).transpose(1, 2),
                k.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2),
                v.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2))


class Llama(nn.Module):
    def __init__(self, s: TransformerShape) -> None:
        super().__init__()
        self.embedding = nn.Embedding(s.vocab_size, s.hidden_size)
        self.layers = nn.ModuleList(Block(s) for _ in range(s.num_layers))
        self.norm = RMSNorm(s.hidden_size)
        self.head = nn.Linear(s.hidden_size, s.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))

    @torch.no_grad()
    def init_weights(self) -> None:
        """After ``to_empty``: norms at one, the rest small and random (works on sharded DTensors)."""
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02)
