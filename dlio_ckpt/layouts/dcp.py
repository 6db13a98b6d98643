"""DCP's layout: an FSDP2 job's model and Adam state saved with torch.distributed.checkpoint (``dcp.save``
with its ``FileSystemWriter``), as torchtitan and Lightning's FSDP strategy save them.

Derived from torch 2.13.0 (``torch/distributed/checkpoint/filesystem.py``, ``_dedup_save_plans.py``,
``default_planner.py``, ``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``) and held to the files a
real ``dcp.save`` writes here (``tests/test_dcp_layout.py``):

- FSDP2 shards every parameter on dim 0 over the ranks in chunks of ``ceil(dim0 / world)`` rows: the last
  ranks get fewer, possibly none. Adam's ``exp_avg`` and ``exp_avg_sq`` are sharded like their parameter;
  its ``step`` (a 0-d fp32 tensor per parameter) and the param group's settings are the same on every rank.
- The planner keeps one copy of what every rank holds: each goes to the rank that has planned the fewest
  bytes so far, in the order of rank 0's plan (model, then per parameter step, exp_avg, exp_avg_sq, then
  the param group), ties to the lowest rank: with 2+ ranks they land on ranks 1, 2, ...
- Rank r writes ``__{r}_{k}.distcp`` for k < ``checkpoint.files_per_rank`` (the writer's ``thread_count``):
  objects dealt round-robin, tensors largest first into the emptiest file; each file holds its objects,
  then its tensors, each item a whole ``torch.save`` archive. A file with no items is still written (empty).
- The coordinator, rank 0, writes ``.metadata`` (a pickle of every tensor's chunks and every item's
  place) as ``.metadata.tmp`` after everyone's data, and renames it.
Tensors are written in plan order, as on a machine without CUDA; with one writer per rank and a GPU, DCP
loads them smallest first (``_OverlappingCpuLoader``): the same files and sizes, other offsets inside.
"""

from __future__ import annotations

import heapq
import pickle
from dataclasses import dataclass
from functools import cache
from hashlib import blake2b
from typing import TYPE_CHECKING, ClassVar

from ..errors import ConfigError
from ..formats import Format, Segment
from ..formats.pt import archive, tensor_pickle
from ..model import DATATYPE_BYTES, TransformerShape
from ..planner import CoordinatorFile, Item, ItemFile, Plan, PlannedFile, RankPlan
from .dcp_metadata import Tensor, metadata_size

if TYPE_CHECKING:
    from ..config import Workload

FORMATS = ("pt",)  # every item is a torch.save archive: no other format means anything here
# torch 2.13 Adam's param group, in its order ("params": the parameters' names, last)
ADAM_GROUP: tuple[tuple[str, object], ...] = (
    ("lr", 0.001), ("betas", (0.9, 0.999)), ("eps", 1e-08), ("weight_decay", 0), ("amsgrad", False),
    ("maximize", False), ("foreach", None), ("capturable", False), ("differentiable", False), ("fused", None),
    ("decoupled_weight_decay", False))
ADAM_STATE = ("step", "exp_avg", "exp_avg_sq")


def check(workload: Workload) -> None:
    par, ck = workload.model.parallelism, workload.checkpoint
    for key, value in (("tensor", par.tensor), ("pipeline", par.pipeline)):
        if value != 1:
            raise ConfigError(f"workload.model.parallelism.{key}", value,
                              "must be 1 with checkpoint.layout=dcp: it emulates FSDP2 sharding over every "
                              "rank (tensor and pipeline parallelism under DCP are not modelled yet)")
    if ck.format not in FORMATS:
        raise ConfigError("workload.checkpoint.format", ck.format,
                          "means nothing with checkpoint.layout=dcp: DCP writes every item with torch.save "
                          "(leave checkpoint.format out)")
    if ck.mode == "subset":
        raise ConfigError("workload.checkpoint.mode", ck.mode,
                          "subset is MLPerf's mode of DLIO's layout; with checkpoint.layout=dcp every rank writes")


@dataclass(frozen=True)
class DcpLayout:
    name: ClassVar[str] = "dcp"
    shape: TransformerShape
    world_size: int
    model_dtype: str
    optimizer_dtype: str
    files_per_rank: int
    scale: float = 1.0

    @classmethod
    def from_workload(cls, workload: Workload, world_size: int) -> DcpLayout:
        m, ck = workload.model, workload.checkpoint
        return cls(TransformerShape.from_model(m), world_size, m.model_datatype, m.optimizer_datatype,
                   ck.files_per_rank, ck.scale)

    def describe(self) -> str:
        return (f"FSDP2 over {self.world_size} ranks (every parameter sharded on dim 0), Adam; parameters "
                f"{self.model_dtype}, moments {self.optimizer_dtype}; {self.files_per_rank} file(s) per rank "
                "and .metadata")

    def tensors(self) -> list[Tensor]:
        """Every tensor saved, in rank 0's plan order, with its global shape (``checkpoint.scale`` shrinks
        dim 0); sharded tensors first appear with the model, steps are replicated 0-d tensors."""
        def scaled(shape: tuple[int, ...]) -> tuple[int, ...]:
            return shape if self.scale == 1.0 else (max(1, int(shape[0] * self.scale)), *shape[1:])
        params = [(name, scaled(shape)) for name, shape in self.shape.named_shapes()]
        out = [Tensor(f"model.{name}", shape, self.model_dtype, True) for name, shape in params]
        for name, shape in params:
            out += [Tensor(f"optim.state.{name}.step", (), "fp32", False),
                    Tensor(f"optim.state.{name}.exp_avg", shape, self.optimizer_dtype, True),
                    Tensor(f"optim.state.{name}.exp_avg_sq", shape, self.optimizer_dtype, True)]
        return out

    def group_items(self) -> tuple[Item, ...]:
        """The param group's settings, each an object pickled whole (``optim.param_groups.0.<key>``)."""
        names = [f"{name}" for name, _ in self.shape.named_shapes()]
        return tuple(Item(f"optim.param_groups.0.{key}", "", (), pickled=pickle.dumps(value, protocol=2))
                     for key, value in (*ADAM_GROUP, ("params", names)))

    def problems(self, plan: Plan) -> list[str]:
        """Every sharded tensor's rows covered exactly once over the ranks, every replicated item written once."""
        problems = []
        rows: dict[str, int] = {}
        once: dict[str, int] = {}
        for r in plan.ranks:
            for f in r.files:
                for i in f.items if isinstance(f, ItemFile) else ():
                    if i.rows:
                        rows[i.fqn] = rows.get(i.fqn, 0) + i.shape[0]
                    else:
                        once[i.fqn] = once.get(i.fqn, 0) + 1
        for t in self.tensors():
            if t.sharded and rows.get(t.fqn) != t.shape[0]:
                problems.append(f"{t.fqn}: {rows.get(t.fqn)} rows written of {t.shape[0]}")
        if any(n != 1 for n in once.values()):
            problems.append("a replicated item is written more or less than once")
        return problems


def _rows(dim0: int, world: int, rank: int) -> int:
    """FSDP2's dim-0 shard of ``rank``: chunks of ceil(dim0 / world) rows, the last ranks short or empty."""
    chunk = -(-dim0 // world)
    return max(0, min(chunk, dim0 - rank * chunk))


def _chunk(dim0: int, world: int) -> int:
    return -(-dim0 // world)


def _shard_item(t: Tensor, world: int, rank: int) -> Item:
    return Item(t.fqn, t.dtype, (_rows(t.shape[0], world, rank), *t.shape[1:]), rows=_chunk(t.shape[0], world))


def _replicated_owners(lay: DcpLayout, tensors: list[Tensor], groups: tuple[Item, ...]) -> dict[str, int]:
    """Who writes each replicated item: DCP's dedup_save_plans, walked in rank 0's plan order (the only
    plan holding every replicated item), each to the plan with the fewest bytes so far (objects count 1)."""
    w = lay.world_size
    if w == 1:
        return {t.fqn: 0 for t in tensors if not t.sharded} | {g.fqn: 0 for g in groups}
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
            rank0 += _shard_item(t, w, 0).nbytes or 1
        else:
            place(t.fqn, DATATYPE_BYTES[t.dtype])
    for g in groups:
        place(g.fqn, 1)
    return owners


def _split(items: list[Item], bins: int) -> list[list[Item]]:
    """FileSystemWriter's ``_split_by_size_and_type``: objects round-robin, tensors largest first (stable)
    into the file with the fewest bytes (the first on ties); each file writes its objects, then its tensors."""
    if bins == 1:
        return [[i for i in items if not i.dtype] + [i for i in items if i.dtype]]
    objects = [i for i in items if not i.dtype]
    buckets: list[list[Item]] = [objects[k::bins] for k in range(bins)]
    sizes = [0] * bins
    for item in sorted((i for i in items if i.dtype), key=lambda i: i.nbytes, reverse=True):
        k = sizes.index(min(sizes))
        buckets[k].append(item)
        sizes[k] += item.nbytes
    return buckets


@cache
def item_segments(item: Item) -> tuple[Segment, ...]:
    """One item as ``torch.save`` writes it (its serialization id: 40 digits, as torch's)."""
    serial = str(int.from_bytes(blake2b(item.fqn.encode(), digest_size=16).digest())).zfill(40)[:40].encode()
    if not item.dtype:
        return tuple(archive(item.pickled, [], serial))
    return tuple(archive(tensor_pickle(item.dtype, item.shape), [item.nbytes], serial))


@cache
def item_size(item: Item) -> int:
    return sum(len(s) if isinstance(s, bytes) else s for s in item_segments(item))


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
        if t.sharded:
            last = t.shape[0] // _chunk(t.shape[0], world)
            cuts |= {min(world, last), min(world, last + 1)}
    bounds = sorted(cuts)
    return list(zip(bounds, bounds[1:], strict=False))


def _files(rank: int, buckets: list[tuple[Item, ...]]) -> tuple[ItemFile, ...]:
    return tuple(ItemFile(f"__{rank}_{k}", b, sum(i.nbytes for i in b), sum(item_size(i) for i in b))
                 for k, b in enumerate(buckets))


def make_plan(workload: Workload, world_size: int) -> Plan:
    lay = DcpLayout.from_workload(workload, world_size)
    tensors, groups = lay.tensors(), lay.group_items()
    extras: dict[int, set[str]] = {}
    for fqn, rank in _replicated_owners(lay, tensors, groups).items():
        extras.setdefault(rank, set()).add(fqn)
    ranks: list[RankPlan] = []
    classes: list[tuple[list[int], list[tuple[Item, ...]]]] = []  # ranks with the same items, and those items
    for start, end in _intervals(tensors, world_size):
        sharded = [_shard_item(t, world_size, start) if t.sharded else None for t in tensors]
        common = [tuple(b) for b in _split([i for i in sharded if i is not None], lay.files_per_rank)]
        plain = [r for r in range(start, end) if r not in extras]
        classes.append((plain, common))
        sizes = [(sum(i.nbytes for i in b), sum(item_size(i) for i in b)) for b in common]
        for r in range(start, end):
            if r in extras:
                mine = extras[r]
                items = [i if i is not None else Item(t.fqn, t.dtype, ())
                         for t, i in zip(tensors, sharded, strict=True) if i is not None or t.fqn in mine]
                buckets = [tuple(b) for b in _split(items + [g for g in groups if g.fqn in mine], lay.files_per_rank)]
                classes.append(([r], buckets))
                files = _files(r, buckets)
            else:
                files = tuple(ItemFile(f"__{r}_{k}", b, *sizes[k]) for k, b in enumerate(common))
            ranks.append(RankPlan(r, 0, 0, r, 0, files))
    metadata = CoordinatorFile(".metadata", metadata_size(tensors, groups, classes, world_size, item_size),
                               ".metadata.tmp")
    return Plan(lay, tuple(ranks), (metadata,))
