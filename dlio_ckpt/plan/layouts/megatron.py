"""Megatron-core's ``torch_dist`` layout (Megatron-LM, NeMo): a GPT model's weights and the distributed
optimizer's state, saved by ``dist_checkpointing.save`` with the fully parallel save strategy.

Derived from megatron-core 0.16.1 (the newest release for Python 3.11; 0.17-0.19 need 3.12) and held to
its own saves on CPU (gloo) in ``tests/against_frameworks/test_megatron_layout.py``:

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
- Each rank's items come in the order of its sharded state dict (``MegatronParams.traversal``: the model, then
  the optimizer's state in reverse parameter order, a tensor's chunks merged where its first one comes), as
  megatron-core's save plan lists them; held item for item to real saves' ``.metadata`` (a load reads by
  these offsets: :mod:`.megatron_restore`).
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
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.model.dense import TransformerShape
from dlio_ckpt.plan.formats import Format
from dlio_ckpt.plan.layouts import megatron_moe, megatron_restore
from dlio_ckpt.plan.layouts.base import FrameworkIO, Layout
from dlio_ckpt.plan.layouts.dcp import DistcpFormat, file_calls, item_size
from dlio_ckpt.plan.layouts.dcp_metadata import Chunked, pickle_calls, pickle_reads
from dlio_ckpt.plan.layouts.megatron_files import (
    COMMON_PT_BYTES,
    EXTRA_STATE,
    FILES_PER_RANK,
    Chunk,
    Shard,
    check_stages,
    layer_stages,
    miniature,
    not_split_by,
    plan_of,
    rank_of,
    tp_cuts,
)
from dlio_ckpt.plan.layouts.rules import every_rank_writes, torch_save_only
from dlio_ckpt.plan.pattern import Copies, Threads
from dlio_ckpt.plan.reads import RestorePlan
from dlio_ckpt.plan.types import CoordinatorFile, Item, ItemFile, Plan

if TYPE_CHECKING:
    from dlio_ckpt.config import Workload

LINEARS = ("self_attention.linear_proj", "self_attention.linear_qkv", "mlp.linear_fc1", "mlp.linear_fc2")
# a block's parameters in registration order (its state dict's, less the linears' _extra_state)
BLOCK_PARAMETERS = ("self_attention.linear_qkv.layer_norm_weight", "self_attention.linear_proj.weight",
                    "self_attention.linear_qkv.weight", "mlp.linear_fc1.layer_norm_weight", "mlp.linear_fc1.weight",
                    "mlp.linear_fc2.weight")


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
    if workload.restore.expert is not None:
        raise ConfigError("workload.restore.expert", workload.restore.expert, "means nothing for a dense model: it is "
                          "a mixture of experts' expert parallelism at the load (model.family=moe)")
    if (broken := not_split_by(t, par.tensor)) is not None:
        name, value = broken
        raise ConfigError(f"{key}.transformer.{name}", value, f"must be a multiple of model.parallelism.tensor "
                          f"({par.tensor}) with checkpoint.layout=megatron (for vocab_size: give Megatron-LM's "
                          "padded size, a multiple of 128 x tensor)")


@dataclass(frozen=True)
class MegatronParams:
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
    widths_tensor: int | None = None  # a load's: the save's TP, which scaled widths were rounded to
    common_pt_bytes: ClassVar[int] = COMMON_PT_BYTES

    @classmethod
    def from_workload(cls, workload: Workload, world_size: int) -> MegatronParams:
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

    def weights(self) -> list[tuple[str, tuple[int, ...], str, bool]]:
        """Every weight as saved: (key, shape, cut over TP ranks, stacked over the layers), each a miniature of
        the full size's at ``checkpoint.scale`` (:func:`.megatron_files.miniature`)."""
        s = self.shape
        h, f, v, q = s.hidden_size, s.ffn_hidden_size, s.vocab_size, s.hidden_size + 2 * s.kv_dim
        listed = [("embedding.word_embeddings.weight", (v, h), "rows", False),
                  ("decoder.layers.self_attention.linear_proj.weight", (h, h), "cols", True),
                  ("decoder.layers.self_attention.linear_qkv.weight", (q, h), "rows", True),
                  ("decoder.layers.mlp.linear_fc1.weight", (2 * f, h), "halves", True),
                  ("decoder.layers.mlp.linear_fc2.weight", (h, f), "cols", True),
                  ("decoder.layers.self_attention.linear_qkv.layer_norm_weight", (h,), "whole", True),
                  ("decoder.layers.mlp.linear_fc1.layer_norm_weight", (h,), "whole", True),
                  ("decoder.final_layernorm.weight", (h,), "whole", False),
                  ("output_layer.weight", (v, h), "rows", False)]
        tp = self.widths_tensor or self.tensor
        return [(key, miniature(shape, cut, self.scale, tp), cut, stacked) for key, shape, cut, stacked in listed]

    def tensors(self) -> list[Chunked]:
        """Every weight with its chunks over (tensor-parallel rank, layer), then the optimizer's three
        fp32 copies of each, chunked alike."""
        t, n = self.tensor, self.shape.num_layers
        out = []
        for key, shape, cut, stacked in self.weights():
            chunks = [chunk for chunk, _ in tp_cuts(shape, cut, t)]
            out.append(Chunked(key, (n, *shape), tuple(((layer, *off), (1, *size)) for layer in range(n)
                                                       for off, size in chunks)) if stacked else
                       Chunked(key, shape, tuple(chunks)))
        weights = list(out)
        for state in ("param", "exp_avg", "exp_avg_sq"):
            out += [Chunked(f"optimizer.state.{state}.{w.fqn}", w.shape, w.chunks) for w in weights]
        return out

    def shards(self) -> Iterator[Shard]:
        """Every chunk, in the group of its owner: weights in the model dtype, the optimizer's parameters in
        fp32 and its moments in ``moments_dtype``."""
        for t in self.tensors():
            kind = self.dtype_of(t.fqn)
            for chunk in t.chunks:
                yield Shard(Item(t.fqn, kind, chunk[1], offsets=chunk[0]), self.owner(t, chunk))

    def dtype_of(self, fqn: str) -> str:
        """A tensor's stored dtype: weights in the model dtype, the optimizer's parameters in fp32 and its
        moments in ``moments_dtype``."""
        if fqn.startswith(("optimizer.state.exp_avg.", "optimizer.state.exp_avg_sq.")):
            return self.moments_dtype
        return "fp32" if fqn.startswith("optimizer.") else self.model_dtype

    def objects(self) -> Iterator[tuple[Item, int]]:
        """Each linear's ``_extra_state`` per layer, written by rank 0 of the layer's stage."""
        n = self.shape.num_layers
        for layer in range(n):
            for linear in LINEARS:
                yield (Item(f"decoder.layers.{linear}._extra_state/shard_{layer}_{n}", "", (), pickled=EXTRA_STATE),
                       rank_of(self.tensor, self.data, 0, 0, self.stages[layer]))

    def alike(self, rank: int) -> tuple[int, ...]:
        """Ranks with the same state dict (data-parallel replicas: the same TP rank and stage) read alike."""
        return rank % self.tensor, rank // self.tensor // self.data

    def order(self, rank: int) -> dict[tuple[str, tuple[int, ...]], int]:
        return self.traversal(*self.alike(rank))

    @cache  # noqa: B019 - one per (TP rank, stage), asked by every rank of a plan and of a restore
    def traversal(self, tp: int, pp: int) -> dict[tuple[str, tuple[int, ...]], int]:
        """What a rank of tensor-parallel rank ``tp`` and stage ``pp`` holds, in the order of its sharded state
        dict (megatron-core 0.16.1, worked out from its source and held to a real save's files): the model
        (the embedding; per block of the stage its attention's norm, linear_proj, linear_qkv, the MLP's norm,
        linear_fc1's gate and up halves, linear_fc2, each linear's ``_extra_state`` after its weight; the final
        norm, the output layer), then the distributed optimizer's ``fully_reshardable`` state: the model's
        parameters in reverse (its buffers' order, ``param_and_grad_buffer``'s ``params[::-1]``), each as
        param, exp_avg, exp_avg_sq. Entries (fqn, offsets) in order, each with its position; an object's
        offsets are ()."""
        n = self.shape.num_layers
        # (fqn, layer or None): this rank's chunks of it (their offsets), in listed order
        mine: dict[tuple[str, int | None], list[tuple[int, ...]]] = {}
        for t in self.tensors():
            if not t.fqn.startswith("optimizer."):
                stacked = t.fqn.startswith("decoder.layers.")
                for chunk in t.chunks:
                    tp_owner, stage = self.owner(t, chunk)
                    if stage == pp and (tp_owner == tp or _replicated(t.fqn)):
                        mine.setdefault((t.fqn, chunk[0][0] if stacked else None), []).append(chunk[0])

        def held(fqn: str, layer: int | None = None, prefix: str = "") -> list[tuple[str, tuple[int, ...]]]:
            return [(prefix + fqn, off) for off in mine.get((fqn, layer), [])]
        blocks = [layer for layer in range(n) if self.stages[layer] == pp]
        params: list[tuple[str, int | None]] = [("embedding.word_embeddings.weight", None)] if pp == 0 else []
        params += [(f"decoder.layers.{name}", layer) for layer in blocks for name in BLOCK_PARAMETERS]
        params += [(name, None) for name in ("decoder.final_layernorm.weight", "output_layer.weight")
                   if pp == self.pipeline - 1]
        out = []
        for fqn, layer in params:
            out += held(fqn, layer)
            linear = fqn.removeprefix("decoder.layers.").removesuffix(".weight")
            if linear in LINEARS:
                out.append((f"decoder.layers.{linear}._extra_state/shard_{layer}_{n}", ()))
        for fqn, layer in reversed(params):
            for state in ("param", "exp_avg", "exp_avg_sq"):
                out += held(fqn, layer, f"optimizer.state.{state}.")
        return {entry: k for k, entry in enumerate(out)}

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
        if _replicated(fqn):
            return 0, pp  # replicated over TP: the main replica is TP rank 0's
        if fqn.endswith(("linear_proj.weight", "linear_fc2.weight")):
            return off[-1] // size[-1], pp
        dim = 1 if fqn.startswith("decoder.layers.") else 0
        rows = t.shape[dim] // (2 if fqn.endswith("linear_fc1.weight") else 1)
        return (off[dim] % rows) // size[dim], pp


def _replicated(fqn: str) -> bool:
    """The norms: every tensor-parallel rank holds them whole."""
    return "layer_norm" in fqn or fqn.endswith("final_layernorm.weight")


def restore(workload: Workload, plan: Plan, world_size: int, model_only: bool) -> RestorePlan:
    """What ``dist_checkpointing.load`` reads on each rank (:mod:`.megatron_restore`): a dense model or a mixture
    of experts at the save's parallelism or at ``restore.tensor``, ``restore.expert`` (a mixture of experts') and
    ``world_size``, the model alone or with the optimizer."""
    saved: Any = plan.layout
    load: megatron_restore.Sharded = (megatron_moe.load_layout(workload, saved, world_size)
                                      if workload.model.family == "moe" else
                                      megatron_restore.load_layout(workload, saved, world_size))
    return megatron_restore.reads(plan, load, model_only, item_size)


def make_plan(workload: Workload, world_size: int) -> Plan:
    if workload.model.family == "moe":
        return plan_of(megatron_moe.MegatronMoeParams.from_workload(workload, world_size))
    return plan_of(MegatronParams.from_workload(workload, world_size))


def check_world(workload: Workload, world_size: int) -> None:
    if workload.model.family == "moe":
        megatron_moe.check_world(workload, world_size)


def file_format(workload: Workload) -> Format:
    return DistcpFormat()


def coordinator_calls(file: CoordinatorFile) -> tuple[int, ...]:
    """Rank 0's files: ``.metadata`` pickled by DCP's ``finish``; ``common.pt`` (``torch.save`` to a path: C++'s
    stream, one write at its close for so small a file) and ``metadata.json`` (``json.dump``: one write at the
    close) as one call each, never synced (``megatron/core/dist_checkpointing/serialization.py``, 0.16.1)."""
    return pickle_calls(file.size) if file.name == ".metadata" else (file.size,)


def coordinator_reads(file: CoordinatorFile) -> tuple[int, ...]:
    """How each loading rank reads rank 0's files: ``.metadata`` unpickled; ``common.pt`` and ``metadata.json``
    as one read each (small files: ``torch.load`` and ``json.load`` find them in their first buffer)."""
    return pickle_reads(file.size) if file.name == ".metadata" else (file.size,)


# A synchronous save still goes through megatron-core's async writer: one forked process per file of the rank
# (strategies/filesystem_async.py, write_preloaded_data_multiproc), each writing as DCP's writer does and
# always syncing its file; played here by a thread per file
FRAMEWORK_IO = FrameworkIO(writer="megatron-core 0.16.1 FileSystemWriterAsync (a writer per file, as threads)",
                           file_calls=file_calls, coordinator_calls=coordinator_calls,
                           coordinator_reads=coordinator_reads, unsynced=frozenset({"common.pt", "metadata.json"}),
                           threads=Threads.FILE_EACH_CALLER_WAITS, copies=Copies.FIRST)


LAYOUT = Layout(make_plan=make_plan, file_format=file_format, check=check, check_world=check_world,
                restore=restore, framework_io=FRAMEWORK_IO,
                reads_keys=frozenset({"checkpoint.files_per_rank", "model.moments_datatype",
                                      "model.parallelism.first_stage_layers", "model.parallelism.last_stage_layers",
                                      "restore.tensor", "restore.expert", "checkpoint.miniature"}),
                whole_file_load=None, item_size=item_size)
