"""Megatron-core's ``torch_dist`` files of a mixture of experts (``checkpoint.layout=megatron``, ``model.family=moe``).

Held to megatron-core 0.16.1's own saves on CPU (``tests/oracles/megatron_save.py`` with an MoE config: local
specs, SequentialMLP experts, the distributed optimizer, the fully parallel save;
``tests/against_frameworks/test_megatron_layout.py``):

- Keys are Megatron's: a block's tensors are stacked on a leading layer dimension when every block has the
  same kind (``decoder.layers.mlp.experts.experts.linear_fc1.weight``, (layers, experts, 2 x width, hidden)),
  or one key per block when some are dense (``moe_layer_freq`` a list or > 1: DeepSeek's first dense blocks,
  Llama 4's interleaving): ``decoder.layers.{l}.mlp...``. Every expert is its own chunk, cut further over
  expert tensor parallelism (``parallelism.expert_tensor``), the gate and up halves of fc1 apart.
- Ranks are numbered tensor-parallel fastest for the dense part (tp-dp-pp) and expert-tensor fastest for the
  experts (etp-ep-edp-pp): an expert's chunk is held by the ranks of its expert-parallel rank (expert data
  parallelism), its main replica on expert-data-parallel rank 0. The fully parallel save spreads each chunk
  over the ranks of its main replica's data-parallel group that hold it, fewest holders first.
- The router's weight is replicated (written from tensor-parallel rank 0's group), DeepSeek's expert bias too
  (fp32, a buffer: no optimizer state). The distributed optimizer keeps two chained optimizers, so its
  state is ``chained_0.optimizer.state.{param,exp_avg,exp_avg_sq}.<key>`` for the dense parameters and
  ``chained_1...`` for the experts, chunked as the weights: fp32 parameters, moments in ``moments_datatype``
  (fp32 unless set).
- Latent attention on the local spec: ``linear_q_down_proj``, ``linear_q_up_proj``, ``linear_kv_down_proj``,
  ``linear_kv_up_proj`` (all split on rows over tensor parallelism; TransformerEngine's spec keeps the down
  projections whole on every rank), ``q_layernorm``, ``kv_layernorm``, ``input_layernorm``, ``pre_mlp_layernorm``.
- DeepSeek's MTP module (``mtp_layers``) on the last stage: ``mtp.layers.{k}.enorm``, ``hnorm``, ``eh_proj``
  (split on rows), ``transformer_layer.*`` (one MoE block, keys never stacked) and ``final_layernorm``.
Not modelled: TransformerEngine's grouped experts' extra state (one object
per expert as the local SequentialMLP writes), virtual pipeline stages.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, ClassVar

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.model.moe import MoeShape
from dlio_ckpt.plan.layouts.dcp_metadata import Chunked
from dlio_ckpt.plan.layouts.megatron_files import (
    EXTRA_STATE,
    FILES_PER_RANK,
    Chunk,
    Shard,
    layer_stages,
    miniature,
    rank_of,
    tp_cuts,
)
from dlio_ckpt.plan.types import Item, ItemFile, Plan

if TYPE_CHECKING:
    from dlio_ckpt.config import Workload

COMMON_PT_BYTES = 2087  # common.pt with two chained optimizers' param groups (megatron-core 0.16.1)
Placed = tuple[Chunk, tuple[int, int], tuple[int, ...] | None]  # a chunk, its group (tp, pp), its holders


def check(workload: Workload) -> None:
    """Megatron's rules for an MoE model: every dimension it splits divides by what splits it; a tied head
    is not modelled."""
    m, par = workload.model, workload.model.parallelism
    s = MoeShape.from_model(m)
    etp = par.expert_tensor or par.tensor
    if s.tie_embeddings:
        raise ConfigError("workload.model.transformer.tie_embeddings", True, "is not modelled with "
                          "checkpoint.layout=megatron (its shared output layer has not been held to a real save): "
                          "leave it out, or use checkpoint.layout=dcp or deepspeed")
    t = m.transformer
    # (key, its value, the width it gives, what splits it): a width is what must divide
    rules: list[tuple[str, int | None, int, str]] = [
        ("transformer.num_attention_heads", t.num_attention_heads, s.num_attention_heads, "tensor"),
        ("transformer.vocab_size", t.vocab_size, s.vocab_size, "tensor"),
        ("moe.expert_ffn_hidden_size", s.expert_ffn_hidden_size, s.expert_ffn_hidden_size, "expert_tensor"),
        ("moe.num_shared_experts", s.num_shared_experts, s.expert_ffn_hidden_size * s.num_shared_experts, "tensor")]
    if not all(s.is_moe_layer(i) for i in range(s.num_layers)):  # dense blocks split their MLP too
        rules.append(("transformer.ffn_hidden_size", t.ffn_hidden_size, s.ffn_hidden_size, "tensor"))
    if s.mtp_layers:  # the MTP module's projection is split on its rows, the hidden size
        rules.append(("transformer.hidden_size", t.hidden_size, s.hidden_size, "tensor"))
    if s.attention == "gqa":
        rules.append(("transformer.num_kv_heads", t.num_kv_heads, s.num_kv_heads, "tensor"))
    else:
        rules += [("transformer.q_lora_rank", t.q_lora_rank, s.q_lora_rank, "tensor"),
                  ("transformer.kv_lora_rank", t.kv_lora_rank, s.kv_lora_rank + s.qk_rope_head_dim, "tensor")]
    for name, value, width, by in rules:
        divisor = etp if by == "expert_tensor" else par.tensor
        if width % divisor:
            raise ConfigError(f"workload.model.{name}", value, f"gives a split width of {width}, which must be a "
                              f"multiple of model.parallelism.{by} ({divisor}) with checkpoint.layout=megatron")


def check_world(workload: Workload, world_size: int) -> None:
    """Megatron folds each stage's ranks (TP x DP) into expert tensor x expert x expert data parallelism."""
    par = workload.model.parallelism
    etp = par.expert_tensor or par.tensor
    stage = world_size // par.pipeline
    if stage % (par.expert * etp):
        raise ConfigError("workload.model.parallelism.expert", par.expert, f"x expert_tensor ({etp}) must divide the "
                          f"{stage} ranks of a pipeline stage with checkpoint.layout=megatron (Megatron refolds them "
                          "into expert tensor x expert x expert data parallelism)")


@dataclass(frozen=True)
class MegatronMoeLayout:
    name: ClassVar[str] = "megatron"
    common_pt_bytes: ClassVar[int] = COMMON_PT_BYTES
    shape: MoeShape
    world_size: int
    tensor: int
    pipeline: int
    expert: int
    expert_tensor: int
    model_dtype: str
    files_per_rank: int
    stages: tuple[int, ...]  # each block's pipeline stage
    scale: float = 1.0
    moments_dtype: str = "fp32"  # the distributed optimizer's exp_avg and exp_avg_sq (its precision-aware option)

    @classmethod
    def from_workload(cls, workload: Workload, world_size: int) -> MegatronMoeLayout:
        m, par, ck = workload.model, workload.model.parallelism, workload.checkpoint
        return cls(MoeShape.from_model(m), world_size, par.tensor, par.pipeline, par.expert,
                   par.expert_tensor or par.tensor, m.model_datatype, ck.files_per_rank or FILES_PER_RANK,
                   layer_stages(m.num_layers, par.pipeline, par.first_stage_layers, par.last_stage_layers), ck.scale,
                   m.moments_datatype or "fp32")

    @cached_property
    def data(self) -> int:
        return self.world_size // (self.tensor * self.pipeline)

    @cached_property
    def local_experts(self) -> int:
        return self.shape.num_experts // self.expert

    @property
    def homogeneous(self) -> bool:
        """Every block an MoE block (``moe_layer_freq`` 1): keys stacked on a leading layer dimension."""
        return all(self.shape.is_moe_layer(i) for i in range(self.shape.num_layers))

    def describe(self) -> str:
        return (f"TP {self.tensor} × PP {self.pipeline} × DP {self.data}; experts over EP {self.expert} × expert TP "
                f"{self.expert_tensor} ({self.local_experts} per rank, expert DP "
                f"{self.tensor * self.data // (self.expert * self.expert_tensor)}); the fully parallel save, the "
                f"distributed optimizer (fp32 parameters, {self.moments_dtype} moments); {self.files_per_rank} files "
                "per rank, .metadata, common.pt, metadata.json")

    def sized(self, shape: tuple[int, ...], cut: str) -> tuple[int, ...]:
        """A weight's shape at ``checkpoint.scale`` (:func:`.megatron_files.miniature`)."""
        return miniature(shape, cut, self.scale, self.tensor, self.expert_tensor)

    # -- the tensors of one block, as (key, shape, how it is cut) ---------------------------------------------
    def block(self, moe: bool, fused_norms: bool = True) -> list[tuple[str, tuple[int, ...], str]]:
        """A block's tensors, each a miniature at ``checkpoint.scale`` (see :meth:`full_block`)."""
        return [(name, self.sized(shape, cut), cut) for name, shape, cut in self.full_block(moe, fused_norms)]

    def full_block(self, moe: bool, fused_norms: bool = True) -> list[tuple[str, tuple[int, ...], str]]:
        """A block's tensors. ``fused_norms``: the decoder's local spec names GQA's norms after the linears they
        precede (``linear_qkv.layer_norm_weight``); the MTP module's block keeps ``input_layernorm`` and
        ``pre_mlp_layernorm``. Cuts: ``whole`` (replicated over TP: TP rank 0's group writes it), ``rows`` and
        ``cols`` (over TP), ``halves`` (fc1: gate and up rows over TP apart), ``bias`` (whole, fp32, no optimizer
        state), ``experts_fc1`` and ``experts_fc2`` (per expert, over expert TP)."""
        s = self.shape
        h = s.hidden_size
        out: list[tuple[str, tuple[int, ...], str]] = []
        if s.attention == "mla":
            n, qk = s.num_attention_heads, s.qk_nope_head_dim + s.qk_rope_head_dim
            out += [("input_layernorm.weight", (h,), "whole"),
                    ("self_attention.linear_proj.weight", (s.hidden_size, n * s.v_head_dim), "cols")]
            if s.q_lora_rank:
                out += [("self_attention.linear_q_down_proj.weight", (s.q_lora_rank, h), "rows"),
                        ("self_attention.linear_q_up_proj.weight", (n * qk, s.q_lora_rank), "rows")]
            else:
                out.append(("self_attention.linear_q_proj.weight", (n * qk, h), "rows"))
            out += [("self_attention.linear_kv_down_proj.weight", (s.kv_lora_rank + s.qk_rope_head_dim, h), "rows"),
                    ("self_attention.linear_kv_up_proj.weight",
                     (n * (s.qk_nope_head_dim + s.v_head_dim), s.kv_lora_rank), "rows")]
            if s.q_lora_rank:
                out.append(("self_attention.q_layernorm.weight", (s.q_lora_rank,), "whole"))
            out += [("self_attention.kv_layernorm.weight", (s.kv_lora_rank,), "whole"),
                    ("pre_mlp_layernorm.weight", (h,), "whole")]
            pre_mlp = []
        else:
            d, n = s.head_dim, s.num_attention_heads
            out += [("self_attention.linear_qkv.layer_norm_weight" if fused_norms else "input_layernorm.weight", (h,),
                     "whole"),
                    ("self_attention.linear_proj.weight", (s.hidden_size, n * d), "cols"),
                    ("self_attention.linear_qkv.weight", ((n + 2 * s.num_kv_heads) * d, h), "rows")]
            if s.qk_norm:
                out += [("self_attention.q_layernorm.weight", (d,), "whole"),
                        ("self_attention.k_layernorm.weight", (d,), "whole")]
            pre_mlp = [("mlp.linear_fc1.layer_norm_weight" if fused_norms else "pre_mlp_layernorm.weight", (h,),
                        "whole")]
        out += pre_mlp
        if not moe:
            f = s.ffn_hidden_size
            return out + [("mlp.linear_fc1.weight", (2 * f, h), "halves"),
                          ("mlp.linear_fc2.weight", (s.hidden_size, f), "cols")]
        e, f, fs = s.num_experts, s.expert_ffn_hidden_size, s.expert_ffn_hidden_size * s.num_shared_experts
        out.append(("mlp.router.weight", (e, h), "whole"))
        if s.router_bias:
            out.append(("mlp.router.expert_bias", (e,), "bias"))
        out += [("mlp.experts.experts.linear_fc1.weight", (e, 2 * f, h), "experts_fc1"),
                ("mlp.experts.experts.linear_fc2.weight", (e, s.hidden_size, f),
                 "experts_fc2")]
        if fs:
            out += [("mlp.shared_experts.linear_fc1.weight", (2 * fs, h), "halves"),
                    ("mlp.shared_experts.linear_fc2.weight", (s.hidden_size, fs), "cols")]
        return out

    def linears(self, moe: bool) -> list[str]:
        """A block's linears with an ``_extra_state`` object each (the experts': one per expert)."""
        attn = (["self_attention.linear_proj", "self_attention.linear_qkv"] if self.shape.attention == "gqa" else
                ["self_attention.linear_proj",
                 *(["self_attention.linear_q_down_proj", "self_attention.linear_q_up_proj"] if self.shape.q_lora_rank
                   else ["self_attention.linear_q_proj"]),
                 "self_attention.linear_kv_down_proj", "self_attention.linear_kv_up_proj"])
        if not moe:
            return [*attn, "mlp.linear_fc1", "mlp.linear_fc2"]
        shared = ["mlp.shared_experts.linear_fc1", "mlp.shared_experts.linear_fc2"] if self.shape.num_shared_experts \
            else []
        return [*attn, "mlp.experts.experts.linear_fc1", "mlp.experts.experts.linear_fc2", *shared]

    def cuts(self, shape: tuple[int, ...], cut: str) -> list[tuple[Chunk, int, int | None]]:
        """A block tensor's chunks, each with the tensor-parallel rank of its group (dense) or its
        (expert-tensor rank, expert) (experts: returned as etp and the expert's index)."""
        et = self.expert_tensor
        if not cut.startswith("experts"):
            return [(chunk, tp, None) for chunk, tp in tp_cuts(shape, "whole" if cut == "bias" else cut, self.tensor)]
        e, rows, cols = shape
        if cut == "experts_fc1":
            f = rows // 2
            return [(((x, half * f + p * f // et, 0), (1, f // et, cols)), p, x)
                    for x in range(e) for p in range(et) for half in (0, 1)]
        return [(((x, 0, p * cols // et), (1, rows, cols // et)), p, x) for x in range(e) for p in range(et)]

    # -- ranks ---------------------------------------------------------------------------------------------------
    def expert_rank(self, etp: int, ep: int, edp: int, pp: int) -> int:
        """Megatron's expert rank order etp-ep-edp-pp."""
        per_stage = self.tensor * self.data
        return etp + self.expert_tensor * (ep + self.expert * edp) + per_stage * pp

    @cached_property
    def _expert_groups(self) -> dict[tuple[int, int], tuple[int, tuple[int, ...]]]:
        """Per (expert-tensor rank, expert-parallel rank): the tensor-parallel rank of its main replica and the
        data-parallel ranks of that group holding it (the same in every stage)."""
        t, et, ep, groups = self.tensor, self.expert_tensor, self.expert, {}
        for p in range(et):
            for e in range(ep):
                tp = (p + et * e) % t
                within = [(dp, tp + t * dp) for dp in range(self.data)]
                groups[(p, e)] = (tp, tuple(dp for dp, q in within if q % et == p and (q // et) % ep == e))
        return groups

    def expert_holders(self, etp: int, expert: int, pp: int) -> tuple[tuple[int, int], tuple[int, ...]]:
        """The data-parallel group of an expert chunk's main replica, and the ranks of that group holding it."""
        tp, holders = self._expert_groups[(etp, expert // self.local_experts)]
        return (tp, pp), holders

    # -- what the plan needs -------------------------------------------------------------------------------------
    def place(self, shape: tuple[int, ...], cut: str, layer: int | None, pp: int) -> list[Placed]:
        """A tensor's chunks, each with its group and holders; ``layer``: stacked on a leading layer dimension."""
        placed = []
        for (off, size), p, expert in self.cuts(shape, cut):
            where, holders = ((p, pp), None) if expert is None else self.expert_holders(p, expert, pp)
            if layer is not None:
                off, size = (layer, *off), (1, *size)
            placed.append(((off, size), where, holders))
        return placed

    @cached_property
    def _entries(self) -> list[tuple[Chunked, str, list[Placed]]]:
        """Every weight: its listed chunks, its cut, and each chunk's group and holders."""
        s, n, v = self.shape, self.shape.num_layers, self.shape.vocab_size
        h, last = s.hidden_size, self.pipeline - 1
        layers: list[tuple[str, tuple[int, ...], str, list[Placed]]] = []
        if self.homogeneous:
            stacked: dict[str, tuple[tuple[int, ...], str, list[Placed]]] = {}
            for layer in range(n):
                for name, shape, cut in self.block(True):
                    entry = stacked.setdefault(name, ((n, *shape), cut, []))
                    entry[2].extend(self.place(shape, cut, layer, self.stages[layer]))
            layers = [(f"decoder.layers.{name}", *entry) for name, entry in stacked.items()]
        else:
            layers = [(f"decoder.layers.{layer}.{name}", shape, cut, self.place(shape, cut, None, self.stages[layer]))
                      for layer in range(n) for name, shape, cut in self.block(s.is_moe_layer(layer))]
        mtp = []
        for k in range(s.mtp_layers):  # the MTP module, on the last stage; its keys are never stacked
            prefix = f"mtp.layers.{k}."
            ends = [(name, self.sized(shape, cut), cut) for name, shape, cut in (
                ("enorm.weight", (h,), "whole"), ("hnorm.weight", (h,), "whole"),
                ("eh_proj.weight", (s.hidden_size, 2 * s.hidden_size), "rows"),
                ("final_layernorm.weight", (h,), "whole"))]
            block = [(f"transformer_layer.{name}", shape, cut) for name, shape, cut in self.block(True, False)]
            parts = [*ends[:3], *block, ends[3]]
            mtp += [(prefix + name, shape, cut, self.place(shape, cut, None, last)) for name, shape, cut in parts]
        vh, norm = self.sized((v, h), "rows"), self.sized((h,), "whole")
        listed = [("embedding.word_embeddings.weight", vh, "rows", self.place(vh, "rows", None, 0)),
                  *layers,
                  ("decoder.final_layernorm.weight", norm, "whole", self.place(norm, "whole", None, last)),
                  ("output_layer.weight", vh, "rows", self.place(vh, "rows", None, last)),
                  *mtp]
        return [(Chunked(key, shape, tuple(c for c, _, _ in placed)), cut, placed)
                for key, shape, cut, placed in listed]

    def _optimizer_key(self, state: str, t: Chunked, cut: str) -> str:
        chain = 1 if cut.startswith("experts") else 0
        return f"chained_{chain}.optimizer.state.{state}.{t.fqn}"

    def tensors(self) -> list[Chunked]:
        weights = [t for t, _, _ in self._entries]
        trainable = [(t, cut) for t, cut, _ in self._entries if cut != "bias"]
        return weights + [Chunked(self._optimizer_key(state, t, cut), t.shape, t.chunks)
                          for state in ("param", "exp_avg", "exp_avg_sq") for t, cut in trainable]

    def shards(self) -> Iterator[Shard]:
        for t, cut, placed in self._entries:
            dtype = "fp32" if cut == "bias" else self.model_dtype
            for (off, size), where, holders in placed:
                yield Shard(Item(t.fqn, dtype, size, offsets=off), where, holders)
        for state in ("param", "exp_avg", "exp_avg_sq"):
            for t, cut, placed in self._entries:
                if cut != "bias":
                    key = self._optimizer_key(state, t, cut)
                    for (off, size), where, holders in placed:
                        dtype = "fp32" if state == "param" else self.moments_dtype
                        yield Shard(Item(key, dtype, size, offsets=off), where, holders)

    def objects(self) -> Iterator[tuple[Item, int]]:
        """Each linear's ``_extra_state``: the dense ones from rank 0 of the block's stage, an expert's from its
        expert-parallel rank's main replica; suffixed with the block (stacked keys) and the expert."""
        n, e, last = self.shape.num_layers, self.shape.num_experts, self.pipeline - 1
        blocks = [("decoder.layers." if self.homogeneous else f"decoder.layers.{layer}.", self.stages[layer],
                   self.shape.is_moe_layer(layer), layer if self.homogeneous else None) for layer in range(n)]
        blocks += [(f"mtp.layers.{k}.transformer_layer.", last, True, None) for k in range(self.shape.mtp_layers)]
        for prefix, pp, moe, stacked in blocks:
            for linear in self.linears(moe):
                if linear.startswith("mlp.experts."):
                    for x in range(e):
                        where = f"{stacked}.{x}_{n}.{e}" if stacked is not None else f"{x}_{e}"
                        yield (Item(f"{prefix}{linear}._extra_state/shard_{where}", "", (), pickled=EXTRA_STATE),
                               self.expert_rank(0, x // self.local_experts, 0, pp))
                else:
                    where = f"{stacked}_{n}" if stacked is not None else "0_1"
                    yield (Item(f"{prefix}{linear}._extra_state/shard_{where}", "", (), pickled=EXTRA_STATE),
                           rank_of(self.tensor, self.data, 0, 0, pp))
        for k in range(self.shape.mtp_layers):
            yield (Item(f"mtp.layers.{k}.eh_proj._extra_state/shard_0_1", "", (), pickled=EXTRA_STATE),
                   rank_of(self.tensor, self.data, 0, 0, last))

    def problems(self, plan: Plan) -> list[str]:
        """Every chunk of every tensor written exactly once, every object once."""
        seen = Counter((i.fqn, i.offsets) for r in plan.ranks for f in r.files if isinstance(f, ItemFile)
                       for i in f.items)
        problems = [f"{fqn} {off} written {k} times" for (fqn, off), k in seen.items() if k != 1]
        chunks = {(t.fqn, off) for t in self.tensors() for off, _ in t.chunks}
        if {k for k in seen if "._extra_state/" not in k[0]} != chunks:
            problems.append("the chunks written are not the tensors' chunks")
        return problems
