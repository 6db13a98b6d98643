"""Megatron-core's fully parallel ``torch_dist`` save, whatever the model: which rank of each data-parallel
group writes which chunk, the files that leaves, and rank 0's three small files. The dense layout
(:mod:`.megatron`) and the mixture of experts (:mod:`.megatron_moe`) list their chunks; this writes them.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import NamedTuple, Protocol, cast

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.plan.layouts.dcp import _split, item_size
from dlio_ckpt.plan.layouts.dcp_metadata import Chunked, listed_metadata_size
from dlio_ckpt.plan.types import CoordinatorFile, Item, ItemFile, LayoutParams, Plan, RankPlan, shrink_shape

FILES_PER_RANK = 2  # megatron-core's TorchDistSaveShardedStrategy thread_count
# rank 0's small files, as megatron-core 0.16.1 writes them for a GPT model with the distributed optimizer
COMMON_PT_BYTES = 1895  # torch.save of {iteration, optimizer param_groups, sharding type}
Chunk = tuple[tuple[int, ...], tuple[int, ...]]  # offsets and sizes in the whole tensor
METADATA_JSON_BYTES = 119  # {"sharded_backend": "torch_dist", ... "common_backend_version": 1}
EXTRA_STATE = pickle.dumps([None], protocol=2)  # a linear's _extra_state without TransformerEngine


class Shard(NamedTuple):
    """One chunk of a tensor to save: the data-parallel group whose fully parallel save writes it (the
    group of its main replica: tensor-parallel rank and stage), and which of that group's ranks hold it
    (None: all; an expert's chunk only on the ranks of its expert-parallel rank). A named tuple: a plan of
    thousands of ranks makes hundreds of thousands."""

    item: Item
    group: tuple[int, int]
    holders: tuple[int, ...] | None = None


class MegatronPlanning(Protocol):
    """What :func:`plan_of` needs of a Megatron layout (dense or MoE)."""

    # read-only: the layouts give these as fields of a frozen dataclass, as properties or as class variables
    @property
    def world_size(self) -> int: ...
    @property
    def tensor(self) -> int: ...
    @property
    def data(self) -> int: ...
    @property
    def files_per_rank(self) -> int: ...
    @property
    def common_pt_bytes(self) -> int: ...
    @property
    def scale(self) -> float: ...

    def tensors(self) -> list[Chunked]: ...

    def shards(self) -> Iterator[Shard]: ...

    def objects(self) -> Iterator[tuple[Item, int]]: ...

    def order(self, rank: int) -> dict[tuple[str, tuple[int, ...]], int]: ...


def layer_stages(layers: int, pipeline: int, first: int | None = None, last: int | None = None) -> tuple[int, ...]:
    """Each block's pipeline stage: ``first`` blocks on the first stage and ``last`` on the last where given
    (Megatron-LM's ``--decoder-first/last-pipeline-num-layers``), the others evenly over the stages between.
    The caller has checked that they divide (:func:`check_stages`)."""
    ends = [first] if first is not None else []
    inner = pipeline - len(ends) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    ends += [rest // inner] * inner if inner else []
    ends += [last] if last is not None else []
    return tuple(stage for stage, count in enumerate(ends) for _ in range(count))


def check_stages(layers: int, pipeline: int, first: int | None, last: int | None) -> None:
    """Every stage holds at least one block and the middle ones the same number, or exit 2 naming the rule."""
    given = (first is not None) + (last is not None)
    if given and pipeline == 1:
        raise ConfigError("workload.model.parallelism.pipeline", 1, "must be >= 2 with first_stage_layers or "
                          "last_stage_layers (they size the first and last of several stages)")
    rest, inner = layers - (first or 0) - (last or 0), pipeline - given
    if rest < 0 or (inner and (rest % inner or rest < inner)) or (not inner and rest):
        shown = f"first_stage_layers={first} last_stage_layers={last}"
        raise ConfigError("workload.model.num_layers", layers, f"must split into {pipeline} pipeline stages with "
                          f"checkpoint.layout=megatron ({shown}): the blocks left must divide evenly over the other "
                          f"{inner} stages (Megatron's split)")


def not_split_by(transformer: object, tensor: int) -> tuple[str, int] | None:
    """The first width tensor parallelism ``tensor`` cannot split (heads, KV heads, FFN, vocabulary): its key
    under ``model.transformer`` and value, or None. Megatron's rule for a save and for a load alike."""
    for name in ("num_attention_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size"):
        if getattr(transformer, name) % tensor:
            return name, getattr(transformer, name)
    return None


def miniature(shape: tuple[int, ...], cut: str, scale: float, tensor: int, expert_tensor: int = 1) -> tuple[int, ...]:
    """A weight's shape at ``checkpoint.scale`` (:func:`~dlio_ckpt.plan.types.shrink_shape`): its elements by the
    scale, each dimension its cut splits kept a multiple of the ranks splitting it (``tensor``: the save's TP,
    which a load at another TP reads), an expert tensor's experts whole. Why each weight on its own: shrinking a
    model's widths (hidden, ffn) alone rounded them to TP's multiples apart and left the stages holding the
    embedding off by percents; weights shrunk one by one each come within a rounding of their last dimension."""
    units = {"whole": (1,) * len(shape), "bias": (1,) * len(shape), "rows": (tensor, 1), "cols": (1, tensor),
             "halves": (2 * tensor, 1), "experts_fc1": (0, 2 * expert_tensor, 1),
             "experts_fc2": (0, 1, expert_tensor)}[cut]
    return shrink_shape(shape, scale, units)


def tp_cuts(shape: tuple[int, ...], cut: str, tensor: int) -> list[tuple[Chunk, int]]:
    """A 2-D (or 1-D) tensor's chunks over tensor parallelism, each with its tensor-parallel rank: ``whole``
    (replicated: rank 0's is the main replica), ``rows`` (column-parallel: output rows), ``cols``
    (row-parallel: input columns), ``halves`` (a SwiGLU fc1: its gate and up halves split apart)."""
    if cut == "whole":
        return [(((0,) * len(shape), shape), 0)]
    if cut == "rows":
        r = shape[0] // tensor
        return [(((tp * r, 0), (r, shape[1])), tp) for tp in range(tensor)]
    if cut == "cols":
        c = shape[1] // tensor
        return [(((0, tp * c), (shape[0], c)), tp) for tp in range(tensor)]
    if cut == "halves":
        f = shape[0] // 2
        return [(((half * f + tp * f // tensor, 0), (f // tensor, shape[1])), tp)
                for tp in range(tensor) for half in (0, 1)]
    raise ValueError(f"no tensor-parallel cut {cut!r}")


def rank_of(tensor: int, data: int, tp: int, dp: int, pp: int) -> int:
    """Megatron's rank order tp-dp-pp (tensor parallel fastest, pipeline slowest)."""
    return tp + tensor * (dp + data * pp)


def spread(lay: MegatronPlanning, shards: Iterable[Shard]) -> dict[int, list[Item]]:
    """The fully parallel save (``exchange_utils.distribute_shards_to_ranks``) in each data-parallel group:
    shards held by fewest ranks first, then largest first, then by key and offset; each to the least loaded
    rank holding it (the lowest on ties)."""
    groups: dict[tuple[int, int], list[Shard]] = {}
    for shard in shards:
        groups.setdefault(shard.group, []).append(shard)
    everyone = tuple(range(lay.data))
    per_rank: dict[int, list[Item]] = {r: [] for r in range(lay.world_size)}
    for (tp, pp), members in groups.items():
        loads = [(0, dp) for dp in range(lay.data)]
        for shard in sorted(members, key=lambda s: (len(s.holders or everyone), -s.item.nbytes, s.item.fqn,
                                                    s.item.offsets)):
            load, dp = min(loads) if shard.holders is None else min(loads[d] for d in shard.holders)
            loads[dp] = (load + shard.item.nbytes, dp)
            per_rank[rank_of(lay.tensor, lay.data, tp, dp, pp)].append(shard.item)
    return per_rank


def in_plan_order(lay: MegatronPlanning, items: list[Item], rank: int) -> list[Item]:
    """A rank's items in the order of its save plan, from its state dict's order (the layout's ``order``):
    each tensor where its first chunk on this rank comes, its chunks there in state-dict order (megatron-core
    merges a key's shards at their first appearance: ``_replace_state_dict_keys_with_sharded_keys``)."""
    position = lay.order(rank)
    first: dict[str, int] = {}
    for item in items:
        first[item.fqn] = min(first.get(item.fqn, len(position)), position[(item.fqn, item.offsets)])
    return sorted(items, key=lambda i: (first[i.fqn], position[(i.fqn, i.offsets)]))


def plan_of(lay: MegatronPlanning) -> Plan:
    """Every rank's files from the layout's shards and objects, and rank 0's three small files. A scaled
    layout's items go where the full size's go (the fully parallel save and the split into files weigh items
    by their bytes, which shrinking moves a little): each rank and file holds the same items at any scale."""
    full = replace(lay, scale=1.0) if lay.scale != 1.0 else lay  # type: ignore[type-var]
    shards = list(full.shards())
    scaled = {id(f.item): s.item for f, s in zip(shards, lay.shards(), strict=True)} if full is not lay else {}
    per_rank = spread(full, shards)
    for item, rank in full.objects():
        per_rank[rank].append(item)
    ranks, listed = [], []
    objects: list[str] = []  # the items without a dtype, in rank, file and item order
    for r in range(lay.world_size):
        tp, rest = r % lay.tensor, r // lay.tensor
        items = in_plan_order(full, per_rank[r], r)
        buckets = [tuple(scaled.get(id(i), i) for i in b) for b in _split(items, lay.files_per_rank)]
        files = tuple(ItemFile(f"__{r}_{k}", b, sum(i.nbytes for i in b), sum(item_size(i) for i in b))
                      for k, b in enumerate(buckets) if b)
        pp = rest // lay.data
        ranks.append(RankPlan(r, tp, pp, rest % lay.data, tp + lay.tensor * pp, files))
        listed += [(f"{f.stem}.distcp", [(i, i.offsets) for i in f.items]) for f in files]
        objects += [i.fqn for f in files for i in f.items if not i.dtype]
    size = listed_metadata_size(lay.tensors(), objects, listed, item_size)
    # .metadata through DCP's FileSystemWriter.finish (written as .metadata.tmp, renamed), which megatron-core's
    # FileSystemWriterAsync inherits (megatron/core/dist_checkpointing/strategies/filesystem_async.py, 0.16.1)
    common = CoordinatorFile("common.pt", lay.common_pt_bytes)
    coordinator = (CoordinatorFile(".metadata", size, ".metadata.tmp"), common,
                   CoordinatorFile("metadata.json", METADATA_JSON_BYTES))
    return Plan(cast(LayoutParams, lay), tuple(ranks), coordinator)
