"""The decoder ``mode=fsdp`` trains and saves: Hugging Face transformers' ``LlamaForCausalLM`` itself, shaped by the
workload's transformer keys.

Why a framework's class and not our own: the real ``dcp.save`` it makes is the oracle of ``checkpoint.layout=dcp``,
and a module written to match the emulator would only prove the emulator agrees with itself. transformers'
Llama holds what a real FSDP2 Llama job saves: nine weights a block (``q_proj``, ``k_proj``, ``v_proj``,
``o_proj``, ``gate_proj``, ``up_proj``, ``down_proj`` and two RMSNorms), the embedding, the final norm and an
untied ``lm_head``; its rotary ``inv_freq`` buffers are not persistent (not saved).
:meth:`~dlio_ckpt.model.dense.TransformerShape.named_shapes` lists the same names and shapes, and
``tests/against_frameworks/test_dcp_layout.py`` holds the two together. This subclass adds no parameter: only the
interface
``fsdp_mode`` drives (``layers`` to shard block by block, ``forward`` from tokens to logits, ``init_weights``).
It is built on the meta device and materialized shard by shard after ``fully_shard``, so no process ever holds
the whole model.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from dlio_ckpt.model.dense import TransformerShape


def llama_config(s: TransformerShape) -> LlamaConfig:
    """transformers' config of this shape: grouped-query attention with ``hidden // heads`` per head, no biases,
    an untied head (DCP then saves embedding and head apart, as the layout plans)."""
    return LlamaConfig(vocab_size=s.vocab_size, hidden_size=s.hidden_size, intermediate_size=s.ffn_hidden_size,
                       num_hidden_layers=s.num_layers, num_attention_heads=s.num_attention_heads,
                       num_key_value_heads=s.num_kv_heads, head_dim=s.hidden_size // s.num_attention_heads,
                       tie_word_embeddings=False, attention_bias=False, mlp_bias=False, use_cache=False,
                       attn_implementation="sdpa")


class Llama(LlamaForCausalLM):
    """``LlamaForCausalLM`` with the few calls ``fsdp_mode`` makes; its parameters are transformers' own."""

    def __init__(self, s: TransformerShape) -> None:
        super().__init__(llama_config(s))

    @property
    def layers(self) -> nn.ModuleList:
        """The decoder blocks: FSDP2 shards each apart, as torchtitan and Lightning do."""
        return self.model.layers

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits of ``tokens`` (batch, sequence): what the training step's loss needs, no cache."""
        return super().forward(input_ids=tokens, use_cache=False).logits

    @torch.no_grad()
    def init_weights(self) -> None:
        """After ``to_empty``: norms at one, the rest small and random (works on sharded DTensors), and the rotary
        embedding's frequencies computed again: ``to_empty`` leaves every buffer uninitialized, and a rotation by
        whatever the memory held made the logits NaN from the first step (a bf16 model saved NaN state, which
        storage that compresses shrank to a few per cent)."""
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02)
        rotary = self.model.rotary_emb
        if rotary.rope_type != "default":  # llama_config asks none other; another would need its own init
            raise AssertionError(f"rope_type {rotary.rope_type!r}: init_weights computes the default's frequencies")
        inv_freq, _ = rotary.compute_default_rope_parameters(rotary.config)
        rotary.inv_freq.copy_(inv_freq)
        rotary.original_inv_freq.copy_(inv_freq)
