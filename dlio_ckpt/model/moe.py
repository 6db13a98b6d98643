"""Tensors of a mixture-of-experts transformer (DeepSeek-V3, Mixtral, Qwen3-MoE, Llama 4). Allocates nothing.

Why apart from :mod:`dlio_ckpt.model.dense`: the dense Llamas keep DLIO's arithmetic (its floor divisions and
fused tensors are part of MLPerf's layout), while an MoE model is held to the published model classes:
every tensor below, its name (Hugging Face transformers' without the ``model.`` prefix) and shape, equals
what transformers 5.23's ``DeepseekV3ForCausalLM``, ``MixtralForCausalLM``, ``Qwen3MoeForCausalLM`` and
``Llama4ForCausalLM`` build from the published configs (``tests/unit/test_moe_model.py``, on the meta device).
Routed experts are one 3-D tensor per projection, (experts, out, in), as transformers and torchtitan keep
them (Llama 4's class stores them transposed, (experts, in, out): the same elements). DeepSeek-V3's
multi-token-prediction module, which transformers leaves out, is listed apart (``mtp.{k}.``): one more
decoder block, two norms and a projection; it shares the embedding and output head with the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from math import prod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dlio_ckpt.config import Model



def is_moe_block(layer: int, first_dense: int, step: int) -> bool:
    """Whether block ``layer`` (0-based) is MoE: DeepSeek's first dense blocks, Llama 4's interleaving (every
    ``step``-th block). The configuration's rules ask it before a shape exists; :class:`MoeShape` asks it too."""
    return layer >= first_dense and (layer + 1) % step == 0

@dataclass(frozen=True)
class Param:
    """One tensor of the state dict. ``experts``: dim 0 counts routed experts (expert parallelism shards
    it); ``tp_dim``: split over tensor-parallel ranks on that dimension (embedding and head on the vocabulary,
    column-parallel projections on their output rows, row-parallel ones on their input columns; norms, the
    router and MLA's down-projections whole on every rank); ``trainable``: a parameter (optimizer state is kept
    for it), else a buffer saved with the model."""

    name: str
    shape: tuple[int, ...]
    tp_dim: int | None = None  # the dimension tensor parallelism splits (Megatron's column/row linears); None: whole
    experts: bool = False
    trainable: bool = True

    @property
    def numel(self) -> int:
        return prod(self.shape)


@dataclass(frozen=True)
class MoeShape:
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int  # the dense layers' MLP
    vocab_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    attention: str  # gqa or mla
    qk_norm: bool
    q_lora_rank: int  # mla: 0 for a plain query projection
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    tie_embeddings: bool
    num_experts: int
    num_shared_experts: int
    expert_ffn_hidden_size: int
    first_dense_layers: int
    layer_step: int
    router_bias: bool
    mtp_layers: int

    @classmethod
    def from_model(cls, m: Model) -> MoeShape:
        t, e = m.transformer, m.moe
        assert e is not None, "an MoE shape needs model.moe (the config requires it with family=moe)"
        return cls(m.num_layers, t.hidden_size, t.ffn_hidden_size, t.vocab_size, t.num_attention_heads,
                   t.num_kv_heads, t.head_dim or t.hidden_size // t.num_attention_heads, t.attention, t.qk_norm,
                   t.q_lora_rank or 0, t.kv_lora_rank or 0, t.qk_rope_head_dim or 0, t.qk_nope_head_dim or 0,
                   t.v_head_dim or 0, t.tie_embeddings, e.num_experts, e.num_shared_experts,
                   e.expert_ffn_hidden_size, e.first_dense_layers, e.layer_step, e.router_bias, m.mtp_layers)

    def is_moe_layer(self, layer: int) -> bool:
        return is_moe_block(layer, self.first_dense_layers, self.layer_step)

    def attention_params(self, prefix: str) -> list[Param]:
        h, n = self.hidden_size, self.num_attention_heads
        if self.attention == "mla":
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = ([Param(f"{prefix}q_a_proj.weight", (self.q_lora_rank, h)),
                  Param(f"{prefix}q_a_layernorm.weight", (self.q_lora_rank,)),
                  Param(f"{prefix}q_b_proj.weight", (n * qk, self.q_lora_rank), 0)] if self.q_lora_rank
                 else [Param(f"{prefix}q_proj.weight", (n * qk, h), 0)])
            return [*q, Param(f"{prefix}kv_a_proj_with_mqa.weight", (self.kv_lora_rank + self.qk_rope_head_dim, h)),
                    Param(f"{prefix}kv_a_layernorm.weight", (self.kv_lora_rank,)),
                    Param(f"{prefix}kv_b_proj.weight", (n * (self.qk_nope_head_dim + self.v_head_dim),
                                                        self.kv_lora_rank), 0),
                    Param(f"{prefix}o_proj.weight", (h, n * self.v_head_dim), 1)]
        d, kv = self.head_dim, self.num_kv_heads * self.head_dim
        out = [Param(f"{prefix}q_proj.weight", (n * d, h), 0), Param(f"{prefix}k_proj.weight", (kv, h), 0),
               Param(f"{prefix}v_proj.weight", (kv, h), 0), Param(f"{prefix}o_proj.weight", (h, n * d), 1)]
        if self.qk_norm:
            out += [Param(f"{prefix}q_norm.weight", (d,)), Param(f"{prefix}k_norm.weight", (d,))]
        return out

    def mlp_params(self, prefix: str, width: int) -> list[Param]:
        h = self.hidden_size
        return [Param(f"{prefix}gate_proj.weight", (width, h), 0), Param(f"{prefix}up_proj.weight", (width, h), 0),
                Param(f"{prefix}down_proj.weight", (h, width), 1)]

    def moe_params(self, prefix: str) -> list[Param]:
        h, e, f = self.hidden_size, self.num_experts, self.expert_ffn_hidden_size
        out = [Param(f"{prefix}gate.weight", (e, h))]
        if self.router_bias:  # DeepSeek's load-balancing bias: a buffer, updated outside the optimizer
            out.append(Param(f"{prefix}gate.e_score_correction_bias", (e,), trainable=False))
        out += [Param(f"{prefix}experts.gate_up_proj", (e, 2 * f, h), 1, experts=True),
                Param(f"{prefix}experts.down_proj", (e, h, f), 2, experts=True)]
        if self.num_shared_experts:
            out += self.mlp_params(f"{prefix}shared_experts.", f * self.num_shared_experts)
        return out

    def block_params(self, prefix: str, moe: bool) -> list[Param]:
        h = self.hidden_size
        mlp = self.moe_params(f"{prefix}mlp.") if moe else self.mlp_params(f"{prefix}mlp.", self.ffn_hidden_size)
        return [*self.attention_params(f"{prefix}self_attn."), *mlp,
                Param(f"{prefix}input_layernorm.weight", (h,)), Param(f"{prefix}post_attention_layernorm.weight", (h,))]

    def layer_params(self, layer: int) -> list[Param]:
        """Block ``layer`` (0-based) of the main model."""
        return self.block_params(f"layers.{layer}.", self.is_moe_layer(layer))

    def mtp_params(self) -> list[Param]:
        """DeepSeek-V3's MTP module, as its released checkpoint keeps it without the embedding and head it
        shares with the model: normed embedding and hidden state, their projection, one MoE block, a norm."""
        h, out = self.hidden_size, []
        for k in range(self.mtp_layers):
            p = f"mtp.{k}."
            out += [Param(f"{p}enorm.weight", (h,)), Param(f"{p}hnorm.weight", (h,)),
                    Param(f"{p}eh_proj.weight", (h, 2 * h), 0), *self.block_params(f"{p}layer.", True),
                    Param(f"{p}norm.weight", (h,))]
        return out

    @cached_property
    def params(self) -> tuple[Param, ...]:
        """The whole state dict in module order: embedding, blocks, final norm, head, then the MTP module."""
        h, v = self.hidden_size, self.vocab_size
        head = [] if self.tie_embeddings else [Param("lm_head.weight", (v, h), 0)]
        blocks = (p for i in range(self.num_layers) for p in self.layer_params(i))
        return (Param("embed_tokens.weight", (v, h), 0), *blocks,
                Param("norm.weight", (h,)), *head, *self.mtp_params())

    @cached_property
    def num_parameters(self) -> int:
        """What transformers' class counts: its parameters, without buffers and without the MTP module."""
        return sum(p.numel for p in self.params if p.trainable and not p.name.startswith("mtp."))

    @cached_property
    def mtp_parameters(self) -> int:
        return sum(p.numel for p in self.params if p.trainable and p.name.startswith("mtp."))

    @cached_property
    def expert_parameters(self) -> int:
        return sum(p.numel for p in self.params if p.experts)

    def tp_numel(self, p: Param, tensor: int) -> int:
        """Elements of ``p`` one tensor-parallel rank holds."""
        return p.numel if p.tp_dim is None else p.numel // tensor

    def tp_problems(self, tensor: int) -> list[str]:
        """Tensors whose split dimension does not divide by ``tensor`` (named once per kind of tensor)."""
        seen: dict[str, str] = {}
        for p in self.params:
            if p.tp_dim is not None and p.shape[p.tp_dim] % tensor:
                kind = ".".join(part for part in p.name.split(".") if not part.isdigit())
                seen.setdefault(kind, f"{kind} {p.shape} on dimension {p.tp_dim}")
        return list(seen.values())
