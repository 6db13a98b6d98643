"""Megatron-core's ``torch_dist`` layout (Megatron-LM, NeMo): a GPT model's weights and the distributed
optimizer's state, saved by ``dist_checkpointing.save`` with the fully parallel save strategy.

Derived from megatron-core 0.16.1 (the newest release for Python 3.11; 0.17-0.19 need 3.12) and held to
its own saves on CPU (gloo) in ``tests/test_megatron_layout.py``:

- Tensors are Megatron's ShardedTensors: a layer's weights are stacked on a leading layer dimension with
  one chunk per layer (``decoder.layers.self_attention.linear_qkv.weight``, shape (L, q+2kv, h)); tensor
  parallelism splits qkv, fc1 (its gate and up halves apart: two chunks) and the vocabulary on rows,
  linear_proj and fc2 on their last dimension; the layer norms (``...layer_norm_weight``, ``final_layernorm``)
  are replicated over TP and written from TP rank 0 only. Each linear has an ``_extra_state`` object per
  layer, written by rank 0 of its stage.
- The distributed optimizer's state in its ``fully_reshardable`` form: ``optimizer.state.{param,exp_avg,
  exp_avg_sq}.<key>`` for every weight, chunked as the weight: fp32, the moments in ``moments_datatype`` if set.
- The fully parallel save (``FullyParallelSaveStrategyWrapper``, Megatron-LM's default) spreads the chunks
  each data-parallel group holds over its ranks: largest first, each to the least loaded rank
  (``exchange_utils.distribute_shards_to_ranks``), so every rank writes about total/world.
- Each rank splits its items into ``checkpoint.files_per_rank`` files (``thread_count`` 2 by default,
  ``strategies/torch.py``), objects round-robin and tensors largest first into the emptiest
  (``filesystem_async._split_by_size_and_type``); a file with nothing to hold is not written. Every item is
  a ``torch.save`` archive. Rank 0 writes ``.metadata`` (DCP's, without planner data), ``common.pt`` (the
  non-sharded state: iteration, the optimizer's param groups) and ``metadata.json``.
Not modelled: the ``iter_{N:07d}`` step folder (steps are ``global_epoch1_step{N}`` in every layout),
``latest_checkpointed_iteration.txt``, Megatron-LM's vocabulary padding (give the padded ``vocab_size``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..errors import ConfigError
from ..formats import Format
from ..model import TransformerShape
from ..planner import Item, ItemFile, Plan
from . import megatron_moe
from .dcp import DistcpFormat
from .dcp_metadata import Chunked
from .megatron_files import (
    COMMON_PT_BYTES,
    EXTRA_STATE,
    FILES_PER_RANK,
    Chunk,
    Shard,
    check_stages,
    layer_stages,
    plan_of,
    rank_of,
    tp_cuts,
)
from .rules import every_rank_writes, torch_save_only

if TYPE_CHECKING:
    from ..config import Workload

LINEARS = ("self_attention.linear_proj", "self_attention.linear_qkv", "mlp.linear_fc1", "mlp.linear_fc2")

READS = "each rank its own files, whole (Megatron's dist_checkpointing load is not modelled yet)"
NO_RESTORE = ("Megatron's dist_checkpointing reshards at load, but that load is not modelled yet; "
              "checkpoint.layout=dcp loads at another world size, or the model alone, as dcp.load does")



def check(workload: Workload) -> None:
    m, par = workload.model, workload.model.parallelism
    t = m.transformer
    key = "workload.model"
    torch_save_only(workload, "megatron", "Megatron")
    every_rank_writes(workload, "megatron")
    check_stages(m.num_layers, par.pipeline, par.first_stage_layers, par.last_stage_layers)
    if m.family == "moe":
        megatron_moe.check(workload)
        return
    for name, value in (("num_attention_heads", t.num_attention_heads), ("num_kv_heads", t.num_kv_heads),
                        ("ffn_hidden_size", t.ffn_hidden_size), ("vocab_size", t.vocab_size)):
        if value % par.tensor:
            raise ConfigError(f"{key}.transformer.{name}", value, f"must be a multiple of model.parallelism.tensor "
                              f"({par.tensor}) with checkpoint.layout=megatron (for vocab_size: give Megatron-LM's "
                              "padded size, a multiple of 128 x tensor)")


@dataclass(frozen=True)
class MegatronLayout:
    name: ClassVar[str] = "megatron"
    shape: TransformerShape
    world_size: int
    tensor: int
    pipeline: int
    data: int
    model_dtype: str
    files_per_rank: int
    stages: tuple[int, ...]  # each block's pipeline stage
    scale: float = 1.0
    moments_dtype: str = "fp32"  # the distributed optimizer's exp_avg and exp_avg_sq (its precision-aware option)
    common_pt_bytes: ClassVar[int] = COMMON_PT_BYTES

    @classmethod
    def from_workload(cls, workload: Workload, world_size: int) -> MegatronLayout:
        m, par, ck = workload.model, workload.model.parallelism, workload.checkpoint
        return cls(TransformerShape.from_model(m), world_size, par.tensor, par.pipeline,
                   world_size // (par.tensor * par.pipeline), m.model_datatype, ck.files_per_rank or FILES_PER_RANK,
                   layer_stages(m.num_layers, par.pipeline, par.first_stage_layers, par.last_stage_layers), ck.scale,
                   m.moments_datatype or "fp32")

    def describe(self) -> str:
        return (f"TP {self.tensor} × PP {self.pipeline} × DP {self.data}, the fully parallel save over DP, the "
                f"distributed optimizer (fp32 parameters, {self.moments_dtype} moments); {self.files_per_rank} files "
                "per rank, .metadata, common.pt, metadata.json")

    def problems(self, plan: Plan) -> list[str]:
        """Every chunk of every tensor written exactly once, every object once."""
        seen = Counter((i.fqn, i.offsets) for r in plan.ranks for f in r.files if isinstance(f, ItemFile)
                       for i in f.items)
        problems = [f"{fqn} {off} written {n} times" for (fqn, off), n in seen.items() if n != 1]
        chunks = {(t.fqn, off) for t in self.tensors() for off, _ in t.chunks}
        if {k for k in seen if not k[0].split("/")[0].endswith("._extra_state")} != chunks:
            problems.append("the chunks written are not the tensors' chunks")
        return problems

    def cols(self, n: int) -> int:
        """``checkpoint.scale`` shrinks each tensor's last dimension (kept a multiple of TP)."""
        if self.scale == 1.0:
            return n
        return max(self.tensor, int(n * self.scale) // self.tensor * self.tensor)

    def tensors(self) -> list[Chunked]:
        """Every weight with its chunks over (tensor-parallel rank, layer), then the optimizer's three
        fp32 copies of each, chunked alike."""
        s, t, c = self.shape, self.tensor, self.cols
        h, f, v, q, n = c(s.hidden_size), s.ffn_hidden_size, s.vocab_size, s.hidden_size + 2 * s.kv_dim, s.num_layers
        rows = tuple(chunk for chunk, _ in tp_cuts((v, h), "rows", t))
        out = [Chunked("embedding.word_embeddings.weight", (v, h), rows)]
        per_layer = {  # name: (one layer's shape, its cut over TP ranks)
            "self_attention.linear_proj.weight": ((s.hidden_size, h), "cols"),
            "self_attention.linear_qkv.weight": ((q, h), "rows"),
            "mlp.linear_fc1.weight": ((2 * f, h), "halves"),
            "mlp.linear_fc2.weight": ((s.hidden_size, c(f)), "cols"),
            "self_attention.linear_qkv.layer_norm_weight": ((h,), "whole"),
            "mlp.linear_fc1.layer_norm_weight": ((h,), "whole"),
        }
        for name, (shape, cut) in per_layer.items():
            chunks = [chunk for chunk, _ in tp_cuts(shape, cut, t)]
            out.append(Chunked(f"decoder.layers.{name}", (n, *shape),
                               tuple(((layer, *off), (1, *size)) for layer in range(n) for off, size in chunks)))
        out.append(Chunked("decoder.final_layernorm.weight", (h,), (((0,), (h,)),)))
        out.append(Chunked("output_layer.weight", (v, h), rows))
        weights = list(out)
        for state in ("param", "exp_avg", "exp_avg_sq"):
            out += [Chunked(f"optimizer.state.{state}.{w.fqn}", w.shape, w.chunks) for w in weights]
        return out

    def shards(self) -> Iterator[Shard]:
        """Every chunk, in the group of its owner: weights in the model dtype, the optimizer's parameters in
        fp32 and its moments in ``moments_dtype``."""
        for t in self.tensors():
            kind = (self.moments_dtype if t.fqn.startswith(("optimizer.state.exp_avg.", "optimizer.state.exp_avg_sq."))
                    else "fp32" if t.fqn.startswith("optimizer.") else self.model_dtype)
            for chunk in t.chunks:
                yield Shard(Item(t.fqn, kind, chunk[1], offsets=chunk[0]), self.owner(t, chunk))

    def objects(self) -> Iterator[tuple[Item, int]]:
        """Each linear's ``_extra_state`` per layer, written by rank 0 of the layer's stage."""
        n = self.shape.num_layers
        for layer in range(n):
            for linear in LINEARS:
                yield (Item(f"decoder.layers.{linear}._extra_state/shard_{layer}_{n}", "", (), pickled=EXTRA_STATE),
                       rank_of(self.tensor, self.data, 0, 0, self.stages[layer]))

    def owner(self, t: Chunked, chunk: Chunk) -> tuple[int, int]:
        """The (tensor-parallel rank, pipeline stage) whose data-parallel group writes ``chunk``."""
        fqn = t.fqn.removeprefix("optimizer.state.").split(".", 1)[-1] if t.fqn.startswith("optimizer.") else t.fqn
        off, size = chunk
        if fqn.startswith("decoder.layers."):
            pp = self.stages[off[0]]
        elif fqn.startswith("embedding."):
            pp = 0
        else:
            pp = self.pipeline - 1
        if "layer_norm" in fqn or fqn == "decoder.final_layernorm.weight":
            return 0, pp  # replicated over TP: the main replica is TP rank 0's
        if fqn.endswith(("linear_proj.weight", "linear_fc2.weight")):
            return off[-1] // size[-1], pp
        dim = 1 if fqn.startswith("decoder.layers.") else 0
        rows = t.shape[dim] // (2 if fqn.endswith("linear_fc1.weight") else 1)
        return (off[dim] % rows) // size[dim], pp


def make_plan(workload: Workload, world_size: int) -> Plan:
    if workload.model.family == "moe":
        return plan_of(megatron_moe.MegatronMoeLayout.from_workload(workload, world_size))
    return plan_of(MegatronLayout.from_workload(workload, world_size))


def check_world(workload: Workload, world_size: int) -> None:
    if workload.model.family == "moe":
        megatron_moe.check_world(workload, world_size)


def file_format(workload: Workload) -> Format:
    return DistcpFormat()

