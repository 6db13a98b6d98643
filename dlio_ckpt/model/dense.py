"""Parameter and tensor arithmetic of DLIO's llama-shaped transformer. Allocates nothing.

Why separate from the planner: the same shape feeds the emulated layout, the ``plan`` command and,
later, the real training modes; none of them should re-derive a formula.
All ``//`` are floor divisions applied left to right: the truncation is part of DLIO's layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dlio_ckpt.config import Model



@dataclass(frozen=True)
class TransformerShape:
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    vocab_size: int
    num_attention_heads: int
    num_kv_heads: int

    @classmethod
    def from_model(cls, m: Model) -> TransformerShape:
        """The shape a workload's ``model`` section describes (the emulator's and fsdp's alike)."""
        t = m.transformer
        return cls(m.num_layers, t.hidden_size, t.ffn_hidden_size, t.vocab_size, t.num_attention_heads,
                   t.num_kv_heads)

    @property
    def kv_dim(self) -> int:
        return (self.hidden_size // self.num_attention_heads) * self.num_kv_heads

    @property
    def num_parameters(self) -> int:
        h, f, v, dkv = self.hidden_size, self.ffn_hidden_size, self.vocab_size, self.kv_dim
        per_layer = h + h * (h + 2 * dkv) + h * h + h + 2 * f * h + f * h
        return v * h + self.num_layers * per_layer + h + v * h

    def layer_numels(self, layer: int, tp: int, sf: int) -> tuple[int, ...]:
        """Element counts of the 1-D tensors one rank holds for ``layer``.

        ``tp`` is the tensor-parallel size, ``sf`` the ZeRO-3 shard factor (DP, else 1).
        Layer 0 is the embedding, 1..L the blocks, L+1 the output head, L+2 the final norm.
        """
        h, f, v, dkv, n = self.hidden_size, self.ffn_hidden_size, self.vocab_size, self.kv_dim, self.num_layers
        if layer in (0, n + 1):
            return (h * v // tp // sf,)
        if layer == n + 2:
            return (h // sf,)
        if not 1 <= layer <= n:
            raise ValueError(f"layer {layer} is outside 0..{n + 2}")
        return (
            h // sf,
            h * (h + 2 * dkv) // tp // sf,
            h * h // tp // sf,
            h // sf,
            h * 2 * f // tp // sf,
            h * f // tp // sf,
        )

    def named_shapes(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Every parameter's name and 2-D (or 1-D) shape in module order, as a real FSDP2 Llama saves them:
        Hugging Face transformers' ``LlamaForCausalLM`` (``real/llama.py`` is that class), nine weights a block
        (q, k, v, o; gate, up, down; two norms), an untied ``lm_head``. The other layouts keep their own
        tensors (Megatron's fused QKV and fc1, DLIO's arithmetic in :meth:`layer_numels`)."""
        h, f, v, dkv = self.hidden_size, self.ffn_hidden_size, self.vocab_size, self.kv_dim
        dq = (h // self.num_attention_heads) * self.num_attention_heads
        block = (("self_attn.q_proj.weight", (dq, h)), ("self_attn.k_proj.weight", (dkv, h)),
                 ("self_attn.v_proj.weight", (dkv, h)), ("self_attn.o_proj.weight", (h, dq)),
                 ("mlp.gate_proj.weight", (f, h)), ("mlp.up_proj.weight", (f, h)), ("mlp.down_proj.weight", (h, f)),
                 ("input_layernorm.weight", (h,)), ("post_attention_layernorm.weight", (h,)))
        return (("model.embed_tokens.weight", (v, h)),
                *((f"model.layers.{i}.{name}", shape) for i in range(self.num_layers) for name, shape in block),
                ("model.norm.weight", (h,)), ("lm_head.weight", (v, h)))

    def stage_layers(self, pp_rank: int, pipeline: int) -> range:
        """Layers owned by pipeline stage ``pp_rank``; the first and last stages take the extras."""
        n, rem = divmod(self.num_layers, pipeline)
        if pp_rank < rem:
            start = pp_rank * (n + 1) + 1
            end = start + n
        else:
            start = rem * (n + 1) + (pp_rank - rem) * n + 1
            end = start + n - 1
        if pp_rank == pipeline - 1:
            end = self.num_layers + 2
        if pp_rank == 0:
            start = 0
        return range(start, end + 1)
