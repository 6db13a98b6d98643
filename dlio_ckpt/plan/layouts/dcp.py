"""DCP's layout: an FSDP2 job's model and Adam state saved with torch.distributed.checkpoint (``dcp.save``
with its ``FileSystemWriter``), as torchtitan and Lightning's FSDP strategy save them.

Derived from torch 2.13.0 (``torch/distributed/checkpoint/filesystem.py``, ``_dedup_save_plans.py``,
``default_planner.py``, ``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``) and held to the files a
real ``dcp.save`` writes here (``tests/against_frameworks/test_dcp_layout.py``: every ``.distcp`` equal to the byte,
item by item):

- The model is a real FSDP2 job's Llama, tensor by tensor: Hugging Face transformers' ``LlamaForCausalLM``
  (:meth:`~dlio_ckpt.model.dense.TransformerShape.named_shapes`; ``mode=fsdp`` trains and saves that class), nine
  weights a block (``self_attn.q_proj``, ``k_proj``, ``v_proj``, ``o_proj``, ``mlp.gate_proj``, ``up_proj``,
  ``down_proj``, two norms), ``model.embed_tokens``, ``model.norm``, an untied ``lm_head``; in the state dict
  they sit under ``model.`` (``model.model.layers.0.self_attn.q_proj.weight``), their Adam state under
  ``optim.state.``. Not torchtitan 0.3.0's own: its Llama 3 fuses ``wqkv`` as a parameter (the optimizer's
  state stays fused) and splits it into ``wq``/``wk``/``wv`` only in the model's state dict, gathered whole.
- FSDP2 shards every parameter on dim 0 over the ranks in chunks of ``ceil(dim0 / world)`` rows: the last
  ranks get fewer, possibly none. Adam's ``exp_avg`` and ``exp_avg_sq`` are sharded like their parameter;
  its ``step`` (a 0-d fp32 tensor per parameter) and the param group's settings are the same on every rank.
- The planner keeps one copy of what every rank holds: each goes to the rank that has planned the fewest
  bytes so far, in the order of rank 0's plan (model, then per parameter step, exp_avg, exp_avg_sq, then
  the param group), ties to the lowest rank: with 2+ ranks they land on ranks 1, 2, ...
- The ranks past a tensor's last rows all hold one empty chunk (the same index): deduplication keeps it once,
  on the holder with the fewest bytes planned when its walk over the plans (in rank order) meets it. Both
  deduplication and the writer weigh an item by its whole tensor's size (``tensor_storage_size``, ``_item_size``).
- Rank r writes ``__{r}_{k}.distcp`` for k < ``checkpoint.files_per_rank`` (the writer's ``thread_count``):
  objects dealt round-robin, tensors by whole-tensor size, largest first, into the emptiest file; each file
  holds its objects, then its tensors, each item a whole ``torch.save`` archive. A file with no items is
  still written (empty).
- The coordinator, rank 0, writes ``.metadata`` (a pickle of every tensor's chunks and every item's
  place) as ``.metadata.tmp`` after everyone's data, and renames it.
Tensors are written in plan order, as on a machine without CUDA; with one writer per rank and a GPU, DCP
loads them smallest first (``_OverlappingCpuLoader``): the same files and sizes, other offsets inside.
"""

from __future__ import annotations

import heapq
import pickle
from collections import Counter
from dataclasses import dataclass
from functools import cache
from hashlib import blake2b
from itertools import accumulate
from math import prod
from typing import TYPE_CHECKING, ClassVar

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.model.dense import TransformerShape
from dlio_ckpt.model.dtypes import DATATYPE_BYTES
from dlio_ckpt.model.moe import MoeShape
from dlio_ckpt.plan.formats import FLUSH, Calls, Format, Segment, file_size
from dlio_ckpt.plan.formats.pt import archive, archive_calls, tensor_pickle
from dlio_ckpt.plan.layouts import dcp_moe, dcp_restore
from dlio_ckpt.plan.layouts.base import FrameworkIO, Layout
from dlio_ckpt.plan.layouts.dcp_metadata import Tensor, fsdp_chunk, metadata_size, pickle_calls, pickle_reads
from dlio_ckpt.plan.layouts.rules import every_rank_writes, torch_save_only
from dlio_ckpt.plan.reads import RestorePlan
from dlio_ckpt.plan.types import CoordinatorFile, Item, ItemFile, Plan, PlannedFile, RankPlan, shrink_shape

if TYPE_CHECKING:
    from dlio_ckpt.config import Workload

# torch 2.13 Adam's param group, in its order ("params": the parameters' names, last)
ADAM_GROUP: tuple[tuple[str, object], ...] = (
    ("lr", 0.001), ("betas", (0.9, 0.999)), ("eps", 1e-08), ("weight_decay", 0), ("amsgrad", False),
    ("maximize", False), ("foreach", None), ("capturable", False), ("differentiable", False), ("fused", None),
    ("decoupled_weight_decay", False))
ADAM_STATE = ("step", "exp_avg", "exp_avg_sq")


def check(workload: Workload) -> None:
    par = workload.model.parallelism
    if workload.model.family == "moe":
        dcp_moe.check(workload)
    for key, value in (("tensor", par.tensor), ("pipeline", par.pipeline)):
        if value != 1:
            raise ConfigError(f"workload.model.parallelism.{key}", value,
                              "must be 1 with checkpoint.layout=dcp: it emulates FSDP2 sharding over every "
                              "rank (tensor and pipeline parallelism under DCP are not modelled yet)")
    torch_save_only(workload, "dcp", "DCP")
    every_rank_writes(workload, "dcp")


def check_world(workload: Workload, world_size: int) -> None:
    if workload.model.family == "moe":
        dcp_moe.check_world(workload, world_size)


@dataclass(frozen=True)
class DcpParams:
    name: ClassVar[str] = "dcp"
    shape: TransformerShape | MoeShape
    world_size: int
    model_dtype: str  # the saved (sharded) parameters'
    optimizer_dtype: str
    files_per_rank: int
    scale: float = 1.0
    expert: int = 1  # MoE: the routed experts' EP degree (torchtitan's meshes)
    moments_dtype: str = ""  # Adam's exp_avg and exp_avg_sq (default: optimizer_dtype)

    @classmethod
    def from_workload(cls, workload: Workload, world_size: int) -> DcpParams:
        m, ck = workload.model, workload.checkpoint
        params = m.optimizer_datatype if m.master_weights else m.model_datatype  # FSDP2 mixed precision
        shape = MoeShape.from_model(m) if m.family == "moe" else TransformerShape.from_model(m)
        return cls(shape, world_size, params, m.optimizer_datatype, ck.files_per_rank or 1, ck.scale,
                   m.parallelism.expert, m.moments_datatype or m.optimizer_datatype)

    @property
    def moments(self) -> str:
        return self.moments_dtype or self.optimizer_dtype

    def params(self) -> list[tuple[str, tuple[int, ...], str]]:
        """The model's state dict: (name, shape, kind), kind "param", "experts" or "buffer" (no optimizer
        state); ``checkpoint.scale`` makes each a miniature (:func:`~dlio_ckpt.plan.types.shrink_shape`) whose
        chunks over the ranks keep the full size's proportions: dim 0, which FSDP2 chunks over the world, in
        multiples of the world size (whole where the world does not divide it), routed experts' dim 0 whole
        (each EP rank keeps its experts) and their dim 1 in multiples of the ranks that split it."""
        if isinstance(self.shape, MoeShape):
            listed = dcp_moe.torchtitan_params(self.shape)
        else:
            listed = [(name, shape, "param") for name, shape in self.shape.named_shapes()]
        if self.scale == 1.0:
            return listed
        return [(name, shrink_shape(shape, self.scale, self._units(shape, kind)), kind) for name, shape, kind in listed]

    def _units(self, shape: tuple[int, ...], kind: str) -> tuple[int, ...]:
        """What each dimension of a full-size tensor must stay a multiple of when scaled (0: whole)."""
        if kind == "experts":
            split = self.placed(shape, kind)[1]
            return (0, split[1] if split else 1, *([1] * (len(shape) - 2)))
        if kind == "buffer":
            return (1,) * len(shape)
        return (self.world_size, *([1] * (len(shape) - 1)))

    def placed(self, shape: tuple[int, ...], kind: str) -> tuple[bool, tuple[int, int] | None]:
        """Sharded or replicated, and for routed experts whether FSDP2 splits their rows (torchtitan's Shard(1),
        when the ranks per EP group outnumber an EP rank's experts)."""
        if kind == "buffer":
            return False, None
        rest = self.world_size // self.expert
        if kind == "experts" and self.expert > 1 and rest * self.expert > shape[0]:
            return True, (self.expert, rest)
        return True, None

    def describe(self) -> str:
        if isinstance(self.shape, MoeShape) and self.expert > 1:
            rest = self.world_size // self.expert
            dim = 1 if rest * self.expert > self.shape.num_experts else 0
            return (f"FSDP2 over {self.world_size} ranks, routed experts over EP {self.expert} then FSDP2 on dim "
                    f"{dim} over {rest} (torchtitan), Adam; parameters {self.model_dtype}, moments "
                    f"{self.moments}; {self.files_per_rank} file(s) per rank and .metadata")
        return (f"FSDP2 over {self.world_size} ranks (every parameter sharded on dim 0), Adam; parameters "
                f"{self.model_dtype}, moments {self.moments}; {self.files_per_rank} file(s) per rank and .metadata")

    def tensors(self) -> list[Tensor]:
        """Every tensor saved, in rank 0's plan order, with its global shape; sharded tensors first appear
        with the model, steps are replicated 0-d tensors, a buffer (the experts' bias) replicated fp32."""
        params = self.params()
        out = [Tensor(f"model.{name}", shape, self.model_dtype if kind != "buffer" else "fp32",
                      *self.placed(shape, kind), self._ep(kind)) for name, shape, kind in params]
        for name, shape, kind in params:
            if kind != "buffer":
                sharded, split = self.placed(shape, kind)
                out += [Tensor(f"optim.state.{name}.step", (), "fp32", False),
                        Tensor(f"optim.state.{name}.exp_avg", shape, self.moments, sharded, split, self._ep(kind)),
                        Tensor(f"optim.state.{name}.exp_avg_sq", shape, self.moments, sharded, split, self._ep(kind))]
        return out

    def _ep(self, kind: str) -> int:
        """A tensor's EP degree: the layout's for routed experts (on torchtitan's expert mesh), else 1."""
        return self.expert if kind == "experts" else 1

    def group_items(self) -> tuple[Item, ...]:
        """The param group's settings, each an object pickled whole (``optim.param_groups.0.<key>``)."""
        names = [name for name, _, kind in self.params() if kind != "buffer"]
        return tuple(Item(f"optim.param_groups.0.{key}", "", (), pickled=pickle.dumps(value, protocol=2))
                     for key, value in (*ADAM_GROUP, ("params", names)))

    def problems(self, plan: Plan) -> list[str]:
        """Every sharded tensor's elements covered exactly once over the ranks, every replicated item written
        once. Items are counted by identity (ranks share them), so a plan of 16,384 ranks checks in a second."""
        files: dict[int, tuple[tuple[Item, ...], int]] = {}  # one entry per distinct tuple of items
        for r in plan.ranks:
            for f in r.files:
                if isinstance(f, ItemFile):
                    items, n = files.get(id(f.items), (f.items, 0))
                    files[id(f.items)] = (items, n + 1)
        count: Counter[Item] = Counter()
        for items, n in files.values():
            count.update(dict.fromkeys(items, n) if n > 1 else items)
        rows: dict[str, int] = {}
        problems = []
        for item, n in count.items():
            if item.rows:
                rows[item.fqn] = rows.get(item.fqn, 0) + n * prod(item.shape)
            elif n != 1:
                problems.append(f"{item.fqn} is written {n} times")
        for t in self.tensors():
            if t.sharded and rows.get(t.fqn) != prod(t.shape):
                problems.append(f"{t.fqn}: {rows.get(t.fqn)} elements written of {prod(t.shape)}")
        return problems


def _shard_item(t: Tensor, world: int, rank: int) -> Item:
    """``rank``'s FSDP2 shard of ``t``: its chunk of dim-0 rows, short or empty for the last ranks (``rows``,
    a full chunk's, marks it sharded), or its EP rank's experts with a slice of their rows."""
    shape = t.chunk(world, rank)
    return Item(t.fqn, t.dtype, shape, rows=shape[0] if t.split else fsdp_chunk(t.shape[0], world), whole=t.shape)


def _replicated_owners(lay: DcpParams, tensors: list[Tensor],
                       groups: tuple[Item, ...]) -> tuple[dict[str, int], dict[int, int]]:
    """Who writes each replicated item: DCP's dedup_save_plans, walked in rank 0's plan order (the only
    plan holding every replicated item), each to the plan with the fewest bytes so far (objects count 1).
    Also returns what the other ranks have planned by then (the replicated items given to them)."""
    w = lay.world_size
    if w == 1:
        return {t.fqn: 0 for t in tensors if not t.sharded} | {g.fqn: 0 for g in groups}, {}
    others = [(0, r) for r in range(1, w)]  # a heap: (planned bytes, rank)
    rank0, owners = 0, {}

    def place(fqn: str, size: int) -> None:
        nonlocal rank0
        if (rank0, 0) <= others[0]:
            owners[fqn], rank0 = 0, rank0 + size
        else:
            planned, rank = heapq.heapreplace(others, (others[0][0] + size, others[0][1]))
            owners[fqn] = rank
    for t in tensors:
        if t.sharded:
            rank0 += _shard_item(t, w, 0).whole_nbytes or 1
        else:
            place(t.fqn, prod(t.shape) * DATATYPE_BYTES[t.dtype])
    for g in groups:
        place(g.fqn, 1)
    return owners, {rank: planned for planned, rank in others if planned}


def _empty_owners(lay: DcpParams, tensors: list[Tensor], planned: dict[int, int]) -> dict[str, int]:
    """Who writes each tensor's empty shard. The ranks past a tensor's last rows all hold the same empty
    chunk (one index), and dedup_save_plans keeps one copy: continuing its walk over the plans in rank
    order, it first meets the chunk in the plan of the first empty rank, which has planned its own items
    before it by then, while the later holders have planned only the copies given to them so far; the
    fewest win, the lowest rank on ties. ``planned``: the replicated items' bytes per rank."""
    w, owners = lay.world_size, {}
    empties: dict[int, list[int]] = {}  # first empty rank: positions (in plan order) of its empty tensors
    sharded = [t for t in tensors if t.sharded]
    for k, t in enumerate(sharded):
        first = -(-t.shape[0] // fsdp_chunk(t.shape[0], w)) if t.shape[0] else 0  # the ranks with rows
        if t.split is None and first < w:
            empties.setdefault(first, []).append(k)
    # a rank's items weigh their whole tensors, the same on every rank: what precedes position k
    before = list(accumulate((prod(t.shape) * DATATYPE_BYTES[t.dtype] or 1 for t in sharded), initial=0))
    heap = [(planned.get(r, 0), r) for r in range(1, w)]
    heapq.heapify(heap)
    assigned = dict(planned)
    for first in sorted(empties):
        for k in empties[first]:
            mine = assigned.get(first, 0) + before[k]
            while heap and (heap[0][1] <= first or heap[0][0] != assigned.get(heap[0][1], 0)):
                heapq.heappop(heap)  # ranks already walked, or stale entries
            owner = heap[0][1] if heap and heap[0][0] < mine else first
            size = before[k + 1] - before[k]
            if owner != first:
                heapq.heapreplace(heap, (assigned.get(owner, 0) + size, owner))
            assigned[owner] = assigned.get(owner, 0) + size
            owners[sharded[k].fqn] = owner
    return owners


def _split(items: list[Item], bins: int) -> list[list[Item]]:
    """FileSystemWriter's ``_split_by_size_and_type``: objects round-robin, tensors largest first (stable) into
    the file with the fewest bytes (the first on ties), sizes being whole tensors' (an item's ``whole``;
    Megatron's items have none and weigh their own); each file writes its objects, then its tensors."""
    if bins == 1:
        return [[i for i in items if not i.dtype] + [i for i in items if i.dtype]]
    objects = [i for i in items if not i.dtype]
    buckets: list[list[Item]] = [objects[k::bins] for k in range(bins)]
    sizes = [0] * bins
    for item in sorted((i for i in items if i.dtype), key=lambda i: i.whole_nbytes, reverse=True):
        k = sizes.index(min(sizes))
        buckets[k].append(item)
        sizes[k] += item.whole_nbytes
    return buckets


def item_segments(item: Item) -> tuple[Segment, ...]:
    """One item as ``torch.save`` writes it."""
    return _archive(item.dtype, item.shape, item.pickled)


def item_size(item: Item) -> int:
    return _archive_size(item.dtype, item.shape, item.pickled)


@cache
def _archive(dtype: str, shape: tuple[int, ...], pickled: bytes) -> tuple[Segment, ...]:
    """Shared by every item of this dtype and shape (the serialization id: 40 digits, as torch's)."""
    return tuple(archive(*_archive_args(dtype, shape, pickled)))


def _archive_args(dtype: str, shape: tuple[int, ...], pickled: bytes) -> tuple[bytes, list[int], bytes]:
    serial = str(int.from_bytes(blake2b(repr((dtype, shape)).encode(), digest_size=16).digest())).zfill(40)[:40]
    if not dtype:
        return pickled, [], serial.encode()
    return tensor_pickle(dtype, shape), [prod(shape) * DATATYPE_BYTES[dtype]], serial.encode()


@cache
def _item_calls(dtype: str, shape: tuple[int, ...], pickled: bytes) -> Calls:
    """One item as ``FileSystemWriter._write_item`` writes it into the file's stream (torch 2.13.0,
    ``torch/distributed/checkpoint/filesystem.py``), then flushes it: an object's ``torch.save`` archive,
    made by the planner beforehand, in one ``write``; a tensor saved into the stream (``torch.save``'s calls,
    :func:`~dlio_ckpt.plan.formats.pt.archive_calls`)."""
    if not dtype:
        return (_archive_size(dtype, shape, pickled), FLUSH)
    calls = archive_calls(*_archive_args(dtype, shape, pickled))
    return (*(len(c) if isinstance(c, bytes) else c for c in calls), FLUSH)


def file_calls(file: PlannedFile) -> Calls:
    """A ``.distcp`` file's calls: its items', in order (objects first, then tensors, as the plan has them)."""
    assert isinstance(file, ItemFile)
    return tuple(c for item in file.items for c in _item_calls(item.dtype, item.shape, item.pickled))


def coordinator_calls(file: CoordinatorFile) -> Calls:
    """``.metadata``, pickled into ``.metadata.tmp`` by the coordinator (:func:`pickle_calls`)."""
    return pickle_calls(file.size)


def coordinator_reads(file: CoordinatorFile) -> Calls:
    """``.metadata`` as every loading rank unpickles it (:func:`pickle_reads`)."""
    return pickle_reads(file.size)


# On S3 DCP saves through s3torchconnector's S3StorageWriter, a FileSystemWriter on its S3FileSystem: the same threads
# and calls, each file an upload of its client (the engine's S3 writer is that client); its S3StorageReader's reads of
# a load's items are the S3 backend's (item_reader)
FRAMEWORK_IO = FrameworkIO(writer="torch.distributed.checkpoint FileSystemWriter (torch 2.13.0; on S3 "
                                  "s3torchconnector 1.5.0's S3StorageWriter)",
                           file_calls=file_calls, coordinator_calls=coordinator_calls,
                           coordinator_reads=coordinator_reads, object_store_rename=True, items=True)


@cache
def _archive_size(dtype: str, shape: tuple[int, ...], pickled: bytes) -> int:
    return file_size(list(_archive(dtype, shape, pickled)))


class DistcpFormat:
    """A ``.distcp`` file: its items' ``torch.save`` archives, back to back."""

    name = "distcp"
    extension = ".distcp"

    def segments(self, file: PlannedFile) -> list[Segment]:
        assert isinstance(file, ItemFile)
        return [s for item in file.items for s in item_segments(item)]


def file_format(workload: Workload) -> Format:
    return DistcpFormat()


def _intervals(tensors: list[Tensor], world: int) -> list[tuple[int, int]]:
    """Runs of ranks whose shards all have the same shapes: full shards, then each tensor's short one,
    then its empty ones, change only where some tensor's dim 0 runs out."""
    cuts = {0, world}
    for t in tensors:
        if t.sharded and t.split is None:  # experts split on dim 1 are alike on every rank
            last = t.shape[0] // fsdp_chunk(t.shape[0], world)
            cuts |= {min(world, last), min(world, last + 1)}
    bounds = sorted(cuts)
    return list(zip(bounds, bounds[1:], strict=False))


def _merged(items: tuple[Item, ...], extras: list[Item], position: dict[str, tuple[int, int]]) -> list[Item]:
    """One file's items when a rank also writes ``extras`` (replicated items, empty shards) besides ``items`` (its
    shards, in plan order): the objects first, then the tensors in plan order, each extra before its plan successor.
    ``position``: per tensor, how many of ``items`` precede it in plan order, and its place in that order."""
    out, last = [i for i in extras if not i.dtype], 0
    for item in sorted((i for i in extras if i.dtype), key=lambda i: position[i.fqn]):
        at = position[item.fqn][0]
        out += items[last:at]
        out.append(item)
        last = at
    return out + list(items[last:])


def _with_extras(common: list[tuple[Item, ...]], extras: list[Item], position: dict[str, tuple[int, int]],
                 bins: int) -> list[tuple[Item, ...]] | None:
    """A rank's files when it also writes replicated items or empty shards: the ranks' common files plus these,
    placed as ``_split`` would place them, without walking every item again in Python (None: not that simple)."""
    if bins == 1:
        return [tuple(_merged(common[0], extras, position))]
    objects = [i for i in extras if not i.dtype]
    tensors = sorted((i for i in extras if i.dtype), key=lambda i: position[i.fqn])  # in plan order
    smallest = min((i.whole_nbytes for b in common for i in b), default=0)
    if any(i.whole_nbytes >= smallest for i in tensors):
        return None  # the extras would sort among the common tensors
    buckets = [list(objects[k::bins]) + list(b) for k, b in enumerate(common)]
    sizes = [sum(i.whole_nbytes for i in b) for b in common]
    for item in sorted(tensors, key=lambda i: i.whole_nbytes, reverse=True):  # ties in size keep the plan's order
        k = sizes.index(min(sizes))
        buckets[k].append(item)
        sizes[k] += item.whole_nbytes
    return [tuple(b) for b in buckets]


def make_plan(workload: Workload, world_size: int) -> Plan:
    lay = DcpParams.from_workload(workload, world_size)
    tensors, groups = lay.tensors(), lay.group_items()
    by_fqn = {g.fqn: g for g in groups} | {t.fqn: Item(t.fqn, t.dtype, t.shape) for t in tensors if not t.sharded}
    extras: dict[int, list[Item]] = {}
    owners, planned = _replicated_owners(lay, tensors, groups)
    for fqn, rank in owners.items():
        extras.setdefault(rank, []).append(by_fqn[fqn])
    empty = _empty_owners(lay, tensors, planned)  # each empty shard written once
    for t in tensors:
        if t.fqn in empty:
            extras.setdefault(empty[t.fqn], []).append(_shard_item(t, world_size, world_size - 1))
    ranks: list[RankPlan] = []
    classes: list[tuple[range, list[tuple[Item, ...]]]] = []  # ranks with the same shards, and those files
    for start, end in _intervals(tensors, world_size):
        sharded = [i for i in (_shard_item(t, world_size, start) for t in tensors if t.sharded)
                   if i.shape[0] or i.fqn not in empty]
        common = [tuple(b) for b in _split(sharded, lay.files_per_rank)]
        # where a replicated tensor or an empty shard (written by one rank) goes among these ranks' shards:
        # before its plan successor among them (the empty shards these ranks do not write are not among them)
        kept, position, seen = {i.fqn for i in sharded}, {}, 0
        for k, t in enumerate(tensors):
            position[t.fqn] = (seen, k)  # and the tensor's own place, for extras before the same successor
            seen += t.fqn in kept
        classes.append((range(start, end), common))
        sizes = [(sum(i.nbytes for i in b), sum(item_size(i) for i in b)) for b in common]
        for r in range(start, end):
            files: tuple[ItemFile, ...]
            if r in extras:
                mine = extras[r]
                buckets = _with_extras(common, mine, position, lay.files_per_rank) or \
                    [tuple(b) for b in _split(_merged(tuple(sharded), mine, position), lay.files_per_rank)]
                if lay.files_per_rank == 1:  # the common file and these: no walk over every item
                    files = (ItemFile(f"__{r}_0", buckets[0], sizes[0][0] + sum(i.nbytes for i in mine),
                                      sizes[0][1] + sum(item_size(i) for i in mine)),)
                else:
                    files = tuple(ItemFile(f"__{r}_{k}", b, sum(i.nbytes for i in b), sum(item_size(i) for i in b))
                                  for k, b in enumerate(buckets))
            else:
                files = tuple(ItemFile(f"__{r}_{k}", b, *sizes[k]) for k, b in enumerate(common))
            ranks.append(RankPlan(r, 0, 0, r, 0, files))
    size = metadata_size(tensors, groups, classes, extras, world_size, item_size)
    return Plan(lay, tuple(ranks), (CoordinatorFile(".metadata", size, ".metadata.tmp"),))


def restore(workload: Workload, plan: Plan, world_size: int, model_only: bool) -> RestorePlan:
    """What ``dcp.load`` reads on each rank at ``world_size`` (the save's or another): :mod:`.dcp_restore`. A mixture
    of experts with expert parallelism loads on torchtitan's expert mesh at that size, with the save's EP: a size
    that mesh cannot place the saved experts on evenly is refused (:func:`.dcp_moe.check_load`)."""
    lay: DcpParams = plan.layout  # type: ignore[assignment]
    tensors = lay.tensors()
    if lay.expert > 1 and world_size != plan.world_size:
        dcp_moe.check_load([t.shape for t in tensors if t.ep > 1], lay.expert, world_size, lay.scale != 1.0)
    return dcp_restore.reads(plan, tensors, list(lay.group_items()), world_size, model_only, item_size)


LAYOUT = Layout(make_plan=make_plan, file_format=file_format, check=check, check_world=check_world,
                restore=restore,
                reads_keys=frozenset({"checkpoint.files_per_rank", "model.master_weights", "model.moments_datatype",
                                      "checkpoint.miniature"}),
                framework_io=FRAMEWORK_IO, item_size=item_size)
