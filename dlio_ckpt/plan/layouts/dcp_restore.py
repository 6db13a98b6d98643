"""What ``dcp.load`` reads on each rank of an FSDP2 job, at the save's world size or another.

Derived from torch 2.13.0 and held to an instrumented ``FileSystemReader`` in
``tests/against_frameworks/test_restore.py``:

- Every rank reads ``.metadata`` first (``state_dict_loader._load_state_dict``'s ``local_step``).
- ``create_default_local_load_plan`` walks the rank's state dict in order (the model, then per parameter
  Adam's ``step``, ``exp_avg``, ``exp_avg_sq``, then the param group), and for each tensor the stored
  chunks that overlap the rank's own shard, sorted by where they start (``planner_helpers.
  create_read_items_for_chunk_list``): FSDP2's dim-0 chunk at the load's world size against the save's
  chunks; a replicated tensor or an object, the one stored copy. An empty shard reads nothing.
- ``FileSystemReader.read_data`` groups the read items by file, in the order each file first appears,
  and in each file reads every item's whole stored archive (``_slice_file``, then ``torch.load`` and a
  narrow): a rank that needs a few rows of a stored chunk reads all of it. That is the read amplification.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod

from dlio_ckpt.model.dtypes import DATATYPE_BYTES
from dlio_ckpt.plan.layouts.dcp_metadata import Tensor, fsdp_chunk
from dlio_ckpt.plan.restore import Restore, by_file
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
          size_of: Callable[[Item], int]) -> Restore:
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
            if t.sharded and w1 == w2:  # the same placement: the rank's own stored shard, if it has rows
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
    return Restore(w2, w1, model_only, tuple(ranks), FOLLOWS)
