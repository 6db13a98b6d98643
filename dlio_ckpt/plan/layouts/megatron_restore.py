"""What Megatron-core's default ``dist_checkpointing.load`` reads on each rank, at the save's parallelism and
world size or others (a dense GPT model, or a mixture of experts at another expert parallelism too; the model
alone or with the distributed optimizer's ``fully_reshardable`` state).

Derived from megatron-core 0.16.1 and torch 2.13.0 and held to real loads (``tests/oracles/megatron_save.py
load``: DCP's ``FileSystemReader`` instrumented), recorded: the dense model's in
``tests/against_frameworks/test_restore.py``, the mixtures of experts' in
``tests/against_frameworks/test_megatron_moe_restore.py`` (four saves, fifteen loads: other world sizes, TP, EP,
the model alone):

- No fully parallel load (Megatron-LM's ``--ckpt-fully-parallel-load`` is off by default): every rank reads
  ``metadata.json``, ``common.pt`` and ``.metadata`` itself, then what its own sharded state dict asks for,
  replicas included: every data-parallel rank reads its tensor-parallel slice whole, every tensor-parallel
  rank the norms (``_replace_state_dict_keys_with_sharded_keys`` with ``keep_only_main_replica=False``).
- The state dict is the layout's ``order`` of the rank (its ``traversal`` of the rank's TP rank and stage; a
  mixture of experts' also of its expert-tensor and expert-parallel ranks: the routed experts it holds), its
  shards merged per key at the key's first appearance. The optimizer's state is asked for in model space, every
  shard of the slice, and each rank keeps its part of the flat buffer after reading (``distrib_optimizer.py``,
  fully_reshardable).
- Per key, torch's ``create_read_items_for_chunk_list``: the rank's chunks sorted by where they start on the
  dimension of largest extent, each with the stored chunks it overlaps, sorted by where those end there, then
  by their place in ``.metadata`` (the save's plans, rank by rank). ``FileSystemReader`` then reads each
  stored chunk's whole archive, file by file in the order files first appear.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.model.dtypes import DATATYPE_BYTES
from dlio_ckpt.plan.layouts.megatron_files import not_split_by
from dlio_ckpt.plan.reads import RankReads, RestorePlan, by_file
from dlio_ckpt.plan.types import Item, ItemFile, Plan

if TYPE_CHECKING:
    from dlio_ckpt.config import Workload
    from dlio_ckpt.plan.layouts.dcp_metadata import Chunked

FOLLOWS = ("megatron-core 0.16.1's dist_checkpointing.load (torch_dist, no fully parallel load) through DCP's "
           "FileSystemReader: metadata.json, common.pt and .metadata, then every stored chunk the rank's "
           "shards overlap, replicas included, file by file")

Chunk = tuple[tuple[int, ...], tuple[int, ...]]


class Sharded(Protocol):
    """What a restore asks of a Megatron layout (:class:`.megatron.MegatronParams`, a dense GPT, and
    :class:`.megatron_moe.MegatronMoeParams`, a mixture of experts), saved or loading."""

    @property
    def world_size(self) -> int: ...

    def tensors(self) -> list[Chunked]: ...
    def order(self, rank: int) -> dict[tuple[str, tuple[int, ...]], int]: ...
    def alike(self, rank: int) -> tuple[int, ...]: ...
    def dtype_of(self, fqn: str) -> str: ...


def _overlap(a: Chunk, b: Chunk) -> int:
    """Elements two chunks share (0: none)."""
    n = 1
    for ao, asz, bo, bsz in zip(a[0], a[1], b[0], b[1], strict=True):
        n *= max(0, min(ao + asz, bo + bsz) - max(ao, bo))
    return n


def _bucket(fqn: str, offsets: tuple[int, ...]) -> tuple[str, tuple[int, ...]]:
    """Where to look for a chunk's stored overlaps: by the leading dimensions on which every chunk is one index,
    a stacked block tensor's layer (``decoder.layers.<name>``, not ``decoder.layers.<l>.<name>``) and a routed
    expert tensor's expert; others whole."""
    return fqn, offsets[:_lead(fqn)]


@cache
def _lead(fqn: str) -> int:
    return (1 if re.search(r"decoder\.layers\.\D", fqn) else 0) + (".experts.experts." in fqn)


def reads(plan: Plan, load: Sharded, model_only: bool, size_of: Callable[[Item], int]) -> RestorePlan:
    """Every rank's reads when ``plan`` (a dense Megatron save) is loaded by ``load`` (the layout at the load's
    parallelism); ``size_of``: an item's stored archive."""
    saved: Sharded = plan.layout  # type: ignore[assignment]
    # every stored chunk by tensor (and layer, expert): its place in .metadata (writer rank, then its plan's order)
    # and where it lies (file, offset, length); every object by name, with its pickle's length
    stored: dict[tuple[str, tuple[int, ...]], list[tuple[Chunk, tuple[int, int], tuple[int, int, int]]]] = {}
    objects: dict[str, tuple[int, int, int, int, int]] = {}
    for r in plan.ranks:
        place = saved.order(r.rank)
        for k, f in enumerate(r.files):
            assert isinstance(f, ItemFile)
            at = 0
            for item in f.items:
                n = size_of(item)
                if item.dtype:
                    stored.setdefault(_bucket(item.fqn, item.offsets), []).append(
                        ((item.offsets, item.shape), (r.rank, place[(item.fqn, item.offsets)]), (k, at, n)))
                else:
                    objects[item.fqn] = (r.rank, k, at, n, len(item.pickled))
                at += n
    sizes = {(t.fqn, off): size for t in load.tensors() for off, size in t.chunks}
    shapes = {t.fqn: t.shape for t in load.tensors()}
    per_key: dict[tuple[Any, ...], tuple[list[tuple[int, int, int, int]], int]] = {}

    def _key_reads(fqn: str, chunks: list[tuple[int, ...]]) -> tuple[list[tuple[int, int, int, int]], int]:
        """One key's reads for a rank's chunks of it, in torch's order, and the bytes they hold that it needs."""
        wanted, needed = [], 0
        sweep = max(range(len(shapes[fqn])), key=lambda d: (shapes[fqn][d], -d))
        for local in sorted(((off, sizes[(fqn, off)]) for off in chunks), key=lambda c: c[0][sweep]):
            hits = [h for h in stored.get(_bucket(fqn, local[0]), []) if _overlap(h[0], local)]
            for c, (rank, _), (k, at, n) in sorted(hits, key=lambda h: (h[0][0][sweep] + h[0][1][sweep], h[1])):
                wanted.append((rank, k, at, n))
                needed += _overlap(c, local) * DATATYPE_BYTES[load.dtype_of(fqn)]
        return wanted, needed

    ranks: list[RankReads] = []
    # the replicas of a state dict (data-parallel ranks of a TP rank and stage; and of an expert's) read alike
    alike: dict[tuple[int, ...], RankReads] = {}
    for q in range(load.world_size):
        group = load.alike(q)
        if group in alike:
            ranks.append(replace(alike[group], rank=q))
            continue
        keys: dict[str, list[tuple[int, ...]]] = {}  # merged at first appearance, chunks in traversal order
        for fqn, offsets in load.order(q):
            if not model_only or not fqn.startswith(("optimizer.", "chained_")):  # the (chained) optimizers' state
                keys.setdefault(fqn, []).append(offsets)
        wanted: list[tuple[int, int, int, int]] = []  # (writer rank, file, offset, length)
        needed = 0
        for fqn, chunks in keys.items():
            if fqn not in shapes:  # an object: read whole from the rank that stored it
                rank, k, at, n, pickled = objects[fqn]
                wanted.append((rank, k, at, n))
                needed += pickled
                continue
            if (fqn, *chunks) not in per_key:  # the same key's reads recur in other groups (a stage's EP ranks)
                per_key[(fqn, *chunks)] = _key_reads(fqn, chunks)
            reads_, n = per_key[(fqn, *chunks)]
            wanted += reads_
            needed += n
        ranks.append(by_file(q, wanted, needed))
        alike[group] = ranks[-1]
    return RestorePlan(load.world_size, saved.world_size, model_only, tuple(ranks), FOLLOWS)


def load_layout(workload: Workload, saved: Any, world: int) -> Sharded:
    """The layout at the load's parallelism: ``restore.tensor`` (default the save's) over ``world`` ranks, the
    save's stages; its rules checked as the save's are (exit 2 naming the restore's keys)."""
    t = workload.model.transformer
    tensor = workload.restore.tensor or saved.tensor
    if (broken := not_split_by(t, tensor)) is not None:
        raise ConfigError("workload.restore.tensor", tensor, f"must divide model.transformer.{broken[0]} "
                          f"({broken[1]}) with checkpoint.layout=megatron")
    load = replace(saved, world_size=world, tensor=tensor, data=world // (tensor * saved.pipeline),
                   widths_tensor=saved.widths_tensor or saved.tensor)
    for key, shape, cut, _ in load.weights():
        width = {"rows": shape[0], "cols": shape[-1], "halves": shape[0] // 2}.get(cut, 0)
        if width % tensor:
            raise ConfigError("workload.restore.tensor", tensor, f"must divide {key}'s width split over TP as "
                              f"checkpoint.scale={saved.scale} saved it ({width}) with checkpoint.layout=megatron")
    if world % (tensor * saved.pipeline):
        raise ConfigError("workload.restore.world_size", world, f"must be a multiple of tensor x pipeline "
                          f"({tensor} x {saved.pipeline}) with checkpoint.layout=megatron")
    return load
