"""What ``dcp.load`` reads on each rank of an FSDP2 job, at the save's world size or another.

Derived from torch 2.13.0 and held to an instrumented ``FileSystemReader`` in
``tests/against_frameworks/test_restore.py``:

- Every rank reads ``.metadata`` first (``state_dict_loader._load_state_dict``'s ``local_step``).
- ``create_default_local_load_plan`` walks the rank's state dict in order (the model, then per parameter
  Adam's ``step``, ``exp_avg``, ``exp_avg_sq``, then the param group), and for each tensor the stored
  chunks that overlap the rank's own shard (``planner_helpers.create_read_items_for_chunk_list``): FSDP2's
  dim-0 chunk at the load's world size against the save's chunks; a replicated tensor or an object, the one
  stored copy. An empty shard reads nothing. The overlapping chunks come in the order of their end on the
  tensor's longest dim (its sweep dim, the first of the longest), then of their place in ``.metadata``'s list
  (the saving ranks' order): for FSDP2's dim-0 chunks, the saving ranks' order either way.
- Routed experts on torchtitan's expert mesh (``Tensor.ep`` > 1; :func:`~.dcp_moe.expert_box`): the load's
  chunk on its own mesh, (world / EP, EP) at its world size, against the save's chunks, in the saving ranks'
  order (held in ``tests/against_frameworks/test_moe_restore.py``, and to torch's own resharding over larger
  meshes).
- ``FileSystemReader.read_data`` groups the read items by file, in the order each file first appears,
  and in each file reads every item's whole stored archive (``_slice_file``, then ``torch.load`` and a
  narrow): a rank that needs a few rows of a stored chunk reads all of it. That is the read amplification.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod

from dlio_ckpt.model.dtypes import DATATYPE_BYTES
from dlio_ckpt.plan.layouts.dcp_metadata import Tensor, fsdp_chunk
from dlio_ckpt.plan.layouts.dcp_moe import expert_box
from dlio_ckpt.plan.reads import RestorePlan, by_file
from dlio_ckpt.plan.types import Item, ItemFile, Plan

FOLLOWS = ("torch.distributed.checkpoint's FileSystemReader (torch 2.13.0): .metadata, then each stored item a "
           "rank's shard overlaps, file by file, one after another")


class _Places:
    """Where each item lies in the save: (file index, offset, length) of a tensor's stored chunk on a rank,
    computed once per distinct file (ranks with alike shards share their items)."""

    def __init__(self, plan: Plan, size_of: Callable[[Item], int]) -> None:
        self.plan, self._size_of = plan, size_of
        self._files: dict[int, dict[str, tuple[int, int]]] = {}
        self.owner: dict[str, int] = {}  # replicated tensors and objects: the rank that stores the one copy
        unshared: dict[int, list[str]] = {}
        for r in plan.ranks:
            for f in r.files:
                assert isinstance(f, ItemFile)
                if id(f.items) not in unshared:
                    unshared[id(f.items)] = [i.fqn for i in f.items if not i.rows]
                for fqn in unshared[id(f.items)]:
                    self.owner.setdefault(fqn, r.rank)

    def _offsets(self, f: ItemFile) -> dict[str, tuple[int, int]]:
        got = self._files.get(id(f.items))
        if got is None:
            got, at = {}, 0
            for item in f.items:
                size = self._size_of(item)
                got[item.fqn] = (at, size)
                at += size
            self._files[id(f.items)] = got
        return got

    def of(self, rank: int, fqn: str) -> tuple[int, int, int]:
        for k, f in enumerate(self.plan.ranks[rank].files):
            assert isinstance(f, ItemFile)
            where = self._offsets(f).get(fqn)
            if where is not None:
                return (k, *where)
        raise KeyError(f"{fqn} is on no file of rank {rank}")


def reads(plan: Plan, tensors: list[Tensor], objects: list[Item], w2: int, model_only: bool,
          size_of: Callable[[Item], int]) -> RestorePlan:
    """Every rank's reads when ``plan`` (saved at its world size) is loaded at world size ``w2``: ``tensors``
    and ``objects`` are the state dict's, in its order (the layout's); ``size_of``: an item's stored archive."""
    places = _Places(plan, size_of)
    tensors = [t for t in tensors if not model_only or t.fqn.startswith("model.")]
    objects = [] if model_only else objects
    w1 = plan.world_size
    ranks = []
    for q in range(w2):
        wanted: list[tuple[int, str, int]] = []  # (writer rank, fqn, bytes needed from that stored chunk)
        for t in tensors:
            if t.ep > 1:
                wanted += _expert_reads(t, w1, w2, q)
            elif t.sharded and w1 == w2:  # the same placement: the rank's own stored shard, if it has rows
                if n := prod(t.chunk(w1, q)):
                    wanted.append((q, t.fqn, n * DATATYPE_BYTES[t.dtype]))
            elif t.sharded:
                d0, row = t.shape[0], prod(t.shape[1:]) * DATATYPE_BYTES[t.dtype]
                c1, c2 = fsdp_chunk(d0, w1), fsdp_chunk(d0, w2)
                lo, hi = min(q * c2, d0), min(q * c2 + c2, d0)
                wanted += [(j, t.fqn, (min(hi, j * c1 + c1) - max(lo, j * c1)) * row)
                           for j in range(lo // c1, -(-hi // c1))] if lo < hi else []
            else:
                wanted.append((places.owner[t.fqn], t.fqn, prod(t.shape) * DATATYPE_BYTES[t.dtype]))
        wanted += [(places.owner[g.fqn], g.fqn, len(g.pickled)) for g in objects]
        ranks.append(by_file(q, [(rank, *places.of(rank, fqn)) for rank, fqn, _ in wanted],
                             sum(n for _, _, n in wanted)))
    return RestorePlan(w2, w1, model_only, tuple(ranks), FOLLOWS)


def _expert_reads(t: Tensor, w1: int, w2: int, q: int) -> list[tuple[int, str, int]]:
    """Rank ``q``'s reads of a routed expert tensor saved on the expert mesh at ``w1`` ranks and loaded on the one
    at ``w2``: (saving rank, fqn, bytes needed), in DCP's order. Found by arithmetic on the chunks, not by walking
    every stored chunk (a load of thousands of ranks asks for each rank and tensor). The EP is the save's, so a
    loading rank's chunk lies within one EP rank's experts, whose stored chunks' ends on every dim grow with the
    saving rank: DCP's order (by end on the sweep dim, then place in ``.metadata``) is the saving ranks'."""
    ep, shape = t.ep, t.shape
    (lo0, n0), (lo1, n1) = expert_box(shape, w2, ep, q)
    rest = w1 // ep
    if rest * ep > shape[0]:  # saved split on dim 1: EP rank j's experts, FSDP2's slice i of their rows
        s0, s1 = shape[0] // ep, shape[1] // rest
        held = sorted(i * ep + j for j in range(lo0 // s0, -(-(lo0 + n0) // s0))
                      for i in range(lo1 // s1, -(-(lo1 + n1) // s1)))
    else:  # saved on dim 0: block b of experts / w1 is EP rank b // rest's (b % rest)-th shard
        s0 = shape[0] // w1
        held = sorted((b % rest) * ep + b // rest for b in range(lo0 // s0, -(-(lo0 + n0) // s0)))
    out = []
    for k in held:
        (a0, m0), (a1, m1) = expert_box(shape, w1, ep, k)
        rows = (min(lo0 + n0, a0 + m0) - max(lo0, a0)) * (min(lo1 + n1, a1 + m1) - max(lo1, a1))
        out.append((k, t.fqn, rows * prod(shape[2:]) * DATATYPE_BYTES[t.dtype]))
    return out
