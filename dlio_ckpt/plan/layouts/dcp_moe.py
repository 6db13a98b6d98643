"""DCP's layout of a mixture of experts trained as torchtitan trains one (``checkpoint.layout=dcp``,
``model.family=moe``): the parameters torchtitan v0.2.0 names, and where FSDP2 with expert parallelism puts them.

Derived from torchtitan v0.2.0 (``models/moe/moe.py``, ``models/deepseek_v3/model/model.py``,
``models/qwen3/model/model.py``, ``models/llama4/infra/parallelize.py`` ``apply_fsdp``,
``distributed/expert_parallel.py``) and held to a real ``dcp.save`` of those modules and placements on CPU
(``tests/oracles/dcp_moe_save.py``, ``tests/against_frameworks/test_dcp_layout.py``):

- Names and order: ``tok_embeddings``, per block the attention (DeepSeek's latent ``wq_a``, ``q_norm``, ``wq_b``,
  ``wkv_a``, ``kv_norm``, ``wkv_b``, ``wo``; Qwen3's ``q_norm``, ``k_norm``, ``wq``, ``wk``, ``wv``, ``wo``), the
  norms and the MLP (``feed_forward.w1/w2/w3`` or ``moe``: the ``expert_bias`` buffer, ``experts.w1`` (experts,
  width, dim), ``w2`` (experts, dim, width), ``w3``, ``router.gate``, ``shared_experts.w1/w2/w3``); DeepSeek puts
  the block's norms before its MLP, Qwen3 after; ``norm``, ``output``.
- Routed experts are sharded on dim 0 over the EP ranks (adjacent ranks), then by FSDP2 over the others
  (dp_shard_mod_ep = world / EP): on dim 0 again, which gives every rank ``experts / world`` whole experts (the
  same chunks as FSDP2 over every rank, in another order), or on dim 1 when dp_shard_mod_ep x EP exceeds the
  experts: every rank then holds its EP rank's experts, a 1/dp_shard_mod_ep slice of their rows each. The mesh is
  (dp_shard_mod_ep, EP), row-major: rank ``i * EP + j`` is EP rank j's i-th FSDP2 shard, and on dim 0 holds
  experts from ``j * experts / EP + i * experts / world`` (:func:`expert_box`; seen in a real save's ``.metadata``).
- A load at another world size places the same model on that size's meshes (the same EP; dp_shard_mod_ep and
  the dim FSDP2 splits follow the new size), and reads the stored chunks its own chunk overlaps
  (:mod:`.dcp_restore`; held to a real ``dcp.load`` in ``tests/against_frameworks/test_moe_restore.py``).
- Everything else is FSDP2 over every rank (dim 0, the last ranks short or empty); the ``expert_bias`` buffer
  is the same on every rank and written once (DCP's deduplication), with no optimizer state.
Not modelled: DeepSeek's MTP module (torchtitan has none: refused), tensor, pipeline and expert-tensor parallelism.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.model.moe import MoeShape

if TYPE_CHECKING:
    from dlio_ckpt.config import Workload

Param = tuple[str, tuple[int, ...], str]  # name, shape, kind: "param", "experts" or "buffer"


def check(workload: Workload) -> None:
    m, par = workload.model, workload.model.parallelism
    if m.mtp_layers:
        raise ConfigError("workload.model.mtp_layers", m.mtp_layers, "is not modelled with checkpoint.layout=dcp: "
                          "torchtitan's DeepSeek-V3 has no multi-token-prediction module (set 0, or use "
                          "checkpoint.layout=megatron)")
    if par.expert_tensor not in (None, 1):
        raise ConfigError("workload.model.parallelism.expert_tensor", par.expert_tensor, "must be 1 with "
                          "checkpoint.layout=dcp: without tensor parallelism torchtitan keeps each expert whole "
                          "before FSDP2 shards it (leave expert_tensor out)")


def check_world(workload: Workload, world_size: int) -> None:
    """FSDP2's shards of the experts must be alike on every rank (as in every recipe): refused otherwise."""
    s, ep = MoeShape.from_model(workload.model), workload.model.parallelism.expert
    if ep == 1:
        return  # the experts are ordinary parameters, FSDP2 over every rank
    rest = world_size // ep
    if rest * ep > s.num_experts:
        for name, value in (("moe.expert_ffn_hidden_size", s.expert_ffn_hidden_size),
                            ("transformer.hidden_size", s.hidden_size)):
            if value % rest:
                raise ConfigError(f"workload.model.{name}", value, f"must divide by world / expert = {rest} with "
                                  "checkpoint.layout=dcp: FSDP2 shards each expert's rows over those ranks "
                                  "(torchtitan's Shard(1) when they outnumber the experts per EP rank)")
    elif s.num_experts % world_size:
        raise ConfigError("workload.model.moe.num_experts", s.num_experts, f"must divide by the world size "
                          f"{world_size} with checkpoint.layout=dcp and expert={ep}: FSDP2 gives each rank whole "
                          "experts, the same number on every rank")


def expert_box(shape: tuple[int, ...], world: int, ep: int, rank: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """``rank``'s chunk of a routed expert tensor on torchtitan's expert mesh at ``world`` ranks, as (start,
    length) on dim 0 (experts) and dim 1 (each expert's rows); the other dims whole. Shapes must divide (the
    rules of :func:`check_world`)."""
    rest, (i, j) = world // ep, divmod(rank, ep)
    experts, rows = shape[0] // ep, shape[1]
    if rest * ep > shape[0]:  # FSDP2's Shard(1) over dp_shard_mod_ep: the EP rank's experts, a slice of their rows
        return (j * experts, experts), (i * (rows // rest), rows // rest)
    return (j * experts + i * (shape[0] // world), shape[0] // world), (0, rows)


def check_load(experts: list[tuple[int, ...]], ep: int, world: int, scaled: bool) -> None:
    """A load at ``world`` ranks must place the routed experts (``experts``: their stored shapes) as evenly
    as a save must (:func:`check_world`): refused otherwise, naming ``workload.restore.world_size``."""
    key = "workload.restore.world_size"
    if world % ep:
        raise ConfigError(key, world, f"must be a multiple of model.parallelism.expert ({ep}) with "
                          "checkpoint.layout=dcp: torchtitan's load places the routed experts on a (world / EP, EP) "
                          "mesh, with the save's EP")
    rest = world // ep
    for shape in experts:
        if rest * ep > shape[0] and shape[1] % rest:
            what = f"each routed expert's dim 1 ({shape[1]}{', as checkpoint.scale shrinks it' if scaled else ''})"
            raise ConfigError(key, world, f"makes FSDP2 split {what} over world / expert = {rest} ranks with "
                              "checkpoint.layout=dcp (torchtitan's Shard(1) when they outnumber the experts per EP "
                              f"rank): it must divide by {rest}, as a save's must")
        if rest * ep <= shape[0] and shape[0] % world:
            raise ConfigError(key, world, f"must divide model.moe.num_experts ({shape[0]}) with checkpoint.layout=dcp "
                              f"and expert={ep}: FSDP2 gives each loading rank whole experts, the same number on every "
                              "rank, as a save's must")


def torchtitan_params(s: MoeShape) -> list[Param]:
    """The state dict in torchtitan's names and module order."""
    h, v = s.hidden_size, s.vocab_size
    out: list[Param] = [("tok_embeddings.weight", (v, h), "param")]
    mla = s.attention == "mla"
    for layer in range(s.num_layers):
        p = f"layers.{layer}."
        attn: list[tuple[str, tuple[int, ...]]]
        if mla:
            n, qk = s.num_attention_heads, s.qk_nope_head_dim + s.qk_rope_head_dim
            attn = ([("wq_a.weight", (s.q_lora_rank, h)), ("q_norm.weight", (s.q_lora_rank,)),
                     ("wq_b.weight", (n * qk, s.q_lora_rank))] if s.q_lora_rank else [("wq.weight", (n * qk, h))])
            attn += [("wkv_a.weight", (s.kv_lora_rank + s.qk_rope_head_dim, h)), ("kv_norm.weight", (s.kv_lora_rank,)),
                     ("wkv_b.weight", (n * (s.qk_nope_head_dim + s.v_head_dim), s.kv_lora_rank)),
                     ("wo.weight", (h, n * s.v_head_dim))]
        else:
            d, n, kv = s.head_dim, s.num_attention_heads, s.num_kv_heads
            attn = [("q_norm.weight", (d,)), ("k_norm.weight", (d,))] if s.qk_norm else []
            attn += [("wq.weight", (n * d, h)), ("wk.weight", (kv * d, h)), ("wv.weight", (kv * d, h)),
                     ("wo.weight", (h, n * d))]
        norms = [(f"{p}attention_norm.weight", (h,), "param"), (f"{p}ffn_norm.weight", (h,), "param")]
        block = [(f"{p}attention.{name}", shape, "param") for name, shape in attn]
        block += norms if mla else []
        block += _mlp(s, p, s.is_moe_layer(layer))
        block += [] if mla else norms
        out += block
    out.append(("norm.weight", (h,), "param"))
    if not s.tie_embeddings:
        out.append(("output.weight", (v, h), "param"))
    return out


def _mlp(s: MoeShape, p: str, moe: bool) -> list[Param]:
    h = s.hidden_size
    if not moe:
        f = s.ffn_hidden_size
        return [(f"{p}feed_forward.w1.weight", (f, h), "param"), (f"{p}feed_forward.w2.weight", (h, f), "param"),
                (f"{p}feed_forward.w3.weight", (f, h), "param")]
    e, f, fs = s.num_experts, s.expert_ffn_hidden_size, s.expert_ffn_hidden_size * s.num_shared_experts
    out: list[Param] = [(f"{p}moe.expert_bias", (e,), "buffer")] if s.router_bias else []
    out += [(f"{p}moe.experts.w1", (e, f, h), "experts"), (f"{p}moe.experts.w2", (e, h, f), "experts"),
            (f"{p}moe.experts.w3", (e, f, h), "experts"), (f"{p}moe.router.gate.weight", (e, h), "param")]
    if fs:
        out += [(f"{p}moe.shared_experts.w1.weight", (fs, h), "param"),
                (f"{p}moe.shared_experts.w2.weight", (h, fs), "param"),
                (f"{p}moe.shared_experts.w3.weight", (fs, h), "param")]
    return out
