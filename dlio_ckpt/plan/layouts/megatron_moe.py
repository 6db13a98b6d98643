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
- Without expert parallelism (``expert`` 1) the experts are ordinary parameters of the one optimizer:
  ``optimizer.state.{param,exp_avg,exp_avg_sq}.<key>``, no chain, and ``common.pt`` the dense model's.
- Each rank's items lie in its files in the order of its sharded state dict (``MegatronMoeParams.traversal``:
  held item for item, offsets included, to real saves' ``.metadata``), which the load follows too: a load
  (:func:`load_layout`, :mod:`.megatron_restore`) at another world size, ``restore.tensor`` or
  ``restore.expert`` reads, on each rank, the stored chunks of what it holds at the load's parallelism
  (``tests/against_frameworks/test_megatron_moe_restore.py``: four recorded saves, fifteen loads).
Not modelled: TransformerEngine's grouped experts' extra state (one object
per expert as the local SequentialMLP writes), virtual pipeline stages.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cache, cached_property
from typing import TYPE_CHECKING, ClassVar

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.model.moe import MoeShape
from dlio_ckpt.plan.layouts.dcp_metadata import Chunked
from dlio_ckpt.plan.layouts.megatron_files import (
    COMMON_PT_BYTES as DENSE_COMMON_PT_BYTES,
)
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
    par = workload.model.parallelism
    if workload.model.transformer.tie_embeddings:
        raise ConfigError("workload.model.transformer.tie_embeddings", True, "is not modelled with "
                          "checkpoint.layout=megatron (its shared output layer has not been held to a real save): "
                          "leave it out, or use checkpoint.layout=dcp or deepspeed")
    if (broken := not_split(workload, par.tensor, par.expert_tensor or par.tensor)) is not None:
        name, value, width, by, divisor = broken
        raise ConfigError(f"workload.model.{name}", value, f"gives a split width of {width}, which must be a "
                          f"multiple of model.parallelism.{by} ({divisor}) with checkpoint.layout=megatron")


def not_split(workload: Workload, tensor: int, expert_tensor: int) -> tuple[str, int | None, int, str, int] | None:
    """The first width that tensor parallelism ``tensor`` (expert tensor parallelism ``expert_tensor``) cannot
    split: its key under ``model``, value, the width it gives, what splits it and by how many; or None.
    Megatron's rule for a save and for a load alike."""
    m = workload.model
    s, t = MoeShape.from_model(m), m.transformer
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
        divisor = expert_tensor if by == "expert_tensor" else tensor
        if width % divisor:
            return name, value, width, by, divisor
    return None


def check_world(workload: Workload, world_size: int) -> None:
    """Megatron folds each stage's ranks (TP x DP) into expert tensor x expert x expert data parallelism."""
    par = workload.model.parallelism
    etp = par.expert_tensor or par.tensor
    stage = world_size // par.pipeline
    if stage % (par.expert * etp):
        raise ConfigError("workload.model.parallelism.expert", par.expert, f"x expert_tensor ({etp}) must divide the "
                          f"{stage} ranks of a pipeline stage with checkpoint.layout=megatron (Megatron refolds them "
                          "into expert tensor x expert x expert data parallelism)")


def load_layout(workload: Workload, saved: MegatronMoeParams, world: int) -> MegatronMoeParams:
    """The layout at the load's parallelism: ``restore.tensor`` and ``restore.expert`` (default the save's) over
    ``world`` ranks, the save's stages, expert tensor parallelism ``model.parallelism.expert_tensor`` (default:
    the load's tensor parallelism, as Megatron's); its rules checked as the save's are (exit 2 naming the
    restore's keys)."""
    par, asked = workload.model.parallelism, workload.restore
    tensor, expert = asked.tensor or saved.tensor, asked.expert or saved.expert
    etp = par.expert_tensor or tensor
    if (broken := not_split(workload, tensor, etp)) is not None:
        name, value, width, by, _ = broken
        raise ConfigError("workload.restore.tensor", tensor, f"must divide the split width model.{name}={value} "
                          f"gives ({width}{', over expert tensor parallelism' if by == 'expert_tensor' else ''}) "
                          "with checkpoint.layout=megatron")
    if saved.shape.num_experts % expert:
        raise ConfigError("workload.restore.expert", expert, f"must divide model.moe.num_experts "
                          f"({saved.shape.num_experts}) with checkpoint.layout=megatron")
    if (expert > 1) != (saved.expert > 1) and not asked.model_only:
        raise ConfigError("workload.restore.expert", expert, f"cannot load the optimizer's state saved at expert "
                          f"parallelism {saved.expert}: Megatron chains a second optimizer for the experts only "
                          "where expert parallelism is above 1, so the state's keys differ (megatron-core 0.16.1's "
                          "load fails on them); keep both above 1 or both 1, or load the model alone "
                          "(restore.model_only)")
    load = replace(saved, world_size=world, tensor=tensor, expert=expert, expert_tensor=etp,
                   widths=saved.widths or (saved.tensor, saved.expert_tensor))
    for name, shape, cut in load.split_weights():
        if cut in ("whole", "bias"):
            continue
        width = {"rows": shape[0], "cols": shape[-1], "halves": shape[0] // 2, "experts_fc1": shape[-2] // 2,
                 "experts_fc2": shape[-1]}[cut]
        experts = cut.startswith("experts")  # (expert TP changes at the load only where it follows TP)
        if width % (etp if experts else tensor):
            raise ConfigError("workload.restore.tensor", tensor, f"must divide {name}'s width split over "
                              f"{'expert ' if experts else ''}tensor parallelism as checkpoint.scale={saved.scale} "
                              f"saved it ({width}) with checkpoint.layout=megatron")
    if world % (tensor * saved.pipeline):
        raise ConfigError("workload.restore.world_size", world, f"must be a multiple of tensor x pipeline "
                          f"({tensor} x {saved.pipeline}) with checkpoint.layout=megatron")
    if (world // saved.pipeline) % (expert * etp):
        raise ConfigError("workload.restore.world_size", world, f"must give each pipeline stage a multiple of "
                          f"expert x expert_tensor ({expert} x {etp}) ranks with checkpoint.layout=megatron "
                          "(Megatron refolds a stage's ranks into expert tensor x expert x expert data parallelism)")
    return load


@dataclass(frozen=True)
class MegatronMoeParams:
    name: ClassVar[str] = "megatron"
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
    widths: tuple[int, int] | None = None  # a load's: the save's (TP, expert TP), which scaled widths were rounded to

    @classmethod
    def from_workload(cls, workload: Workload, world_size: int) -> MegatronMoeParams:
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
        return miniature(shape, cut, self.scale, *(self.widths or (self.tensor, self.expert_tensor)))

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

    @property
    def common_pt_bytes(self) -> int:
        """``common.pt``: two chained optimizers' param groups, or one where nothing is expert parallel."""
        return COMMON_PT_BYTES if self.expert > 1 else DENSE_COMMON_PT_BYTES

    def _optimizer_key(self, state: str, fqn: str, expert: bool) -> str:
        """Megatron chains a second optimizer for the expert-parallel parameters (``chained_1``; the others
        ``chained_0``); without expert parallelism (``expert`` 1) the experts are ordinary parameters of the one
        optimizer, whose keys have no prefix (megatron-core 0.16.1: ``allreduce`` is False only where EP > 1)."""
        if self.expert == 1:
            return f"optimizer.state.{state}.{fqn}"
        return f"chained_{int(expert)}.optimizer.state.{state}.{fqn}"

    def tensors(self) -> list[Chunked]:
        weights = [t for t, _, _ in self._entries]
        trainable = [(t, cut) for t, cut, _ in self._entries if cut != "bias"]
        return weights + [Chunked(self._optimizer_key(state, t.fqn, cut.startswith("experts")), t.shape, t.chunks)
                          for state in ("param", "exp_avg", "exp_avg_sq") for t, cut in trainable]

    def shards(self) -> Iterator[Shard]:
        for t, cut, placed in self._entries:
            dtype = "fp32" if cut == "bias" else self.model_dtype
            for (off, size), where, holders in placed:
                yield Shard(Item(t.fqn, dtype, size, offsets=off), where, holders)
        for state in ("param", "exp_avg", "exp_avg_sq"):
            for t, cut, placed in self._entries:
                if cut != "bias":
                    key = self._optimizer_key(state, t.fqn, cut.startswith("experts"))
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

    def split_weights(self) -> list[tuple[str, tuple[int, ...], str]]:
        """One of each kind of weight a load splits (its blocks', the vocabulary's, the MTP module's projection),
        as saved: what a load's parallelism must divide."""
        s = self.shape
        kinds = {s.is_moe_layer(i) for i in range(s.num_layers)} | ({True} if s.mtp_layers else set())
        out = [(f"decoder.layers.{name}", shape, cut) for moe in sorted(kinds) for name, shape, cut in self.block(moe)]
        out.append(("output_layer.weight", self.sized((s.vocab_size, s.hidden_size), "rows"), "rows"))
        if s.mtp_layers:
            out.append(("mtp.layers.0.eh_proj.weight", self.sized((s.hidden_size, 2 * s.hidden_size), "rows"), "rows"))
        return out

    # -- what a rank's sharded state dict holds, in order (the save's plan and a load's reads follow it) ----------
    def coords(self, rank: int) -> tuple[int, int, int, int]:
        """A rank's (tensor-parallel rank, expert-tensor rank, expert-parallel rank, pipeline stage)."""
        pp, q = divmod(rank, self.tensor * self.data)
        return q % self.tensor, q % self.expert_tensor, (q // self.expert_tensor) % self.expert, pp

    def alike(self, rank: int) -> tuple[int, ...]:
        """Ranks with the same state dict (data-parallel and expert-data-parallel replicas) read alike."""
        return self.coords(rank)

    def order(self, rank: int) -> dict[tuple[str, tuple[int, ...]], int]:
        return self.traversal(*self.coords(rank))

    @cache  # noqa: B019 - one per (TP, expert TP, EP rank, stage), asked by every rank of a plan and a restore
    def traversal(self, tp: int, etp: int, ep: int, pp: int) -> dict[tuple[str, tuple[int, ...]], int]:
        """What a rank holds, in the order of its sharded state dict (megatron-core 0.16.1, held to real saves'
        files and loads' reads): the model in registration order (the embedding; per block of the stage its
        attention, norms, the dense MLP or the router, its bias, each local expert's fc1 and fc2, the shared
        experts; each linear's ``_extra_state`` after its weight, an expert's after each of its two; the final
        norm, the MTP module, the output layer), then the distributed optimizer's ``fully_reshardable`` state of
        the two chained optimizers: the dense parameters (``chained_0``) in reverse, then the experts'
        (``chained_1``, one parameter per expert and block) in reverse, each as param, exp_avg, exp_avg_sq.
        Entries (fqn, offsets) in order, each with its position; an object's offsets are ()."""
        s, n, e, last = self.shape, self.shape.num_layers, self.shape.num_experts, self.pipeline - 1
        model: list[tuple[str, tuple[int, ...]]] = []
        params: list[tuple[int, str, list[tuple[int, ...]]]] = []  # per parameter: its chain, key and chunks held

        def tensor(key: str, shape: tuple[int, ...], cut: str, layer: int | None) -> None:
            held = [off for (off, _), p, _ in self.cuts(shape, cut) if cut in ("whole", "bias") or p == tp]
            held = [(layer, *off) for off in held] if layer is not None else held
            model.extend((key, off) for off in held)
            if cut != "bias":  # a buffer: no optimizer state
                params.append((0, key, held))

        def extra(key: str, where: str) -> None:
            model.append((f"{key.removesuffix('.weight')}._extra_state/shard_{where}", ()))

        def block(prefix: str, moe: bool, layer: int | None, fused: bool = True) -> None:
            """One block's entries; ``layer``: its index on the stacked keys' leading dimension, or None."""
            listed = self.block(moe, fused)
            linears = {f"{linear}.weight" for linear in self.linears(moe)}
            for name, shape, cut in listed:
                if cut == "experts_fc2":
                    continue
                if cut != "experts_fc1":
                    tensor(prefix + name, shape, cut, layer)
                    if name in linears:
                        extra(prefix + name, f"{layer}_{n}" if layer is not None else "0_1")
                    continue
                # the local experts, each its fc1 (gate and up halves) and fc2, at this expert-tensor rank
                (fc2, fc2_shape, _), = ((nm, sh, c) for nm, sh, c in listed if c == "experts_fc2")
                for x in range(ep * self.local_experts, (ep + 1) * self.local_experts):
                    for key, sh, c in ((name, shape, cut), (fc2, fc2_shape, "experts_fc2")):
                        offs = self._expert_cuts(sh, c)[(etp, x)]
                        held = [(layer, *off) for off in offs] if layer is not None else offs
                        model.extend((prefix + key, off) for off in held)
                        params.append((1, prefix + key, held))
                        extra(prefix + key, f"{layer}.{x}_{n}.{e}" if layer is not None else f"{x}_{e}")

        vh, norm = self.sized((s.vocab_size, s.hidden_size), "rows"), self.sized((s.hidden_size,), "whole")
        if pp == 0:
            tensor("embedding.word_embeddings.weight", vh, "rows", None)
        for layer in range(n):
            if self.stages[layer] == pp:
                if self.homogeneous:
                    block("decoder.layers.", True, layer)
                else:
                    block(f"decoder.layers.{layer}.", s.is_moe_layer(layer), None)
        if pp == last:
            tensor("decoder.final_layernorm.weight", norm, "whole", None)
            for k in range(s.mtp_layers):  # the MTP module: its norms, projection and block; keys never stacked
                prefix = f"mtp.layers.{k}."
                tensor(prefix + "enorm.weight", norm, "whole", None)
                tensor(prefix + "hnorm.weight", norm, "whole", None)
                tensor(prefix + "eh_proj.weight", self.sized((s.hidden_size, 2 * s.hidden_size), "rows"), "rows", None)
                extra(prefix + "eh_proj.weight", "0_1")
                block(prefix + "transformer_layer.", True, None, False)
                tensor(prefix + "final_layernorm.weight", norm, "whole", None)
            tensor("output_layer.weight", vh, "rows", None)
        out = model
        for chain in ((0, 1),) if self.expert == 1 else ((0,), (1,)):  # one optimizer without EP
            for c, key, held in reversed(params):
                if c in chain:
                    for state in ("param", "exp_avg", "exp_avg_sq"):
                        out += [(self._optimizer_key(state, key, c == 1), off) for off in held]
        return {entry: k for k, entry in enumerate(out)}

    @cache  # noqa: B019 - per expert tensor's shape, asked by every traversal
    def _expert_cuts(self, shape: tuple[int, ...], cut: str) -> dict[tuple[int, int], list[tuple[int, ...]]]:
        """An expert tensor's chunks' offsets by (expert-tensor rank, expert)."""
        out: dict[tuple[int, int], list[tuple[int, ...]]] = {}
        for (off, _), p, x in self.cuts(shape, cut):
            out.setdefault((p, x or 0), []).append(off)
        return out

    def dtype_of(self, fqn: str) -> str:
        """A tensor's stored dtype: weights in the model dtype (the router's bias in fp32), the optimizer's
        parameters in fp32 and its moments in ``moments_dtype``."""
        if fqn.startswith(("optimizer.state.", "chained_")):  # one optimizer (no EP), or two chained
            return "fp32" if ".state.param." in fqn else self.moments_dtype
        return "fp32" if fqn.endswith(".expert_bias") else self.model_dtype

    def problems(self, plan: Plan) -> list[str]:
        """Every chunk of every tensor written exactly once, every object once."""
        seen = Counter((i.fqn, i.offsets) for r in plan.ranks for f in r.files if isinstance(f, ItemFile)
                       for i in f.items)
        problems = [f"{fqn} {off} written {k} times" for (fqn, off), k in seen.items() if k != 1]
        chunks = {(t.fqn, off) for t in self.tensors() for off, _ in t.chunks}
        if {k for k in seen if "._extra_state/" not in k[0]} != chunks:
            problems.append("the chunks written are not the tensors' chunks")
        return problems
