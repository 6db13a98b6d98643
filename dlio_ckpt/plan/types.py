"""The plan of a checkpoint: which files each rank writes and what they hold, and the files one rank
writes after everyone's data (DCP's ``.metadata``). A layout builds it (``layouts.make_plan``).

Why frozen data: like PyTorch DCP's SavePlanner, the plan is computed and checked before any byte
is written, prints and compares, and needs no MPI or disk to test. Identical structures are shared
(the tensors of a pipeline stage are one tuple for all its ranks, an FSDP shard's items one tuple for
every rank whose shards have the same shapes), so plans of many thousand ranks are cheap to build.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from math import prod
from typing import TYPE_CHECKING, Literal, Protocol

from dlio_ckpt.model.dense import TransformerShape
from dlio_ckpt.model.dtypes import DATATYPE_BYTES
from dlio_ckpt.plan.collector import collector_paused

if TYPE_CHECKING:
    from dlio_ckpt.model.lightning_demo import DemoTransformer
    from dlio_ckpt.model.moe import MoeShape

GIB = 1 << 30


def scaled(numel: int, scale: float) -> int:
    """``checkpoint.scale``: shrink a tensor, keeping at least one element of a non-empty one."""
    return numel if scale == 1.0 or numel == 0 else max(1, int(numel * scale))


def shrink(n: int, factor: float, unit: int = 1) -> int:
    """A dimension of ``n`` shrunk by ``factor`` to the nearest multiple of ``unit`` (what splits it over
    ranks), at least one unit and at most ``n``. Nearest, not floor: flooring a width of 8192 at a factor
    of 1/2000 to TP 8's multiple gave 0, raised to 8, twice the bytes asked for."""
    if factor >= 1.0:
        return n
    return min(n, max(unit, round(n * factor / unit) * unit))


def shrink_shape(shape: tuple[int, ...], scale: float, units: tuple[int, ...]) -> tuple[int, ...]:
    """``checkpoint.scale`` applied to a tensor as a miniature: its elements shrunk by ``scale`` over the
    dimensions that may shrink (``units[d]``: dimension ``d`` stays a multiple of it; 0, or a unit that does
    not divide the dimension: it stays whole),
    the coarsest first, each taking an equal share of what is left to shrink and the last absorbing the
    rounding. Why spread over dimensions: shrinking one dimension alone either empties the ranks it is
    split over (FSDP2's dim-0 chunks: at 64 ranks, rows scaled 1/500 left ranks 16-63 empty) or rounds a
    narrow dimension far from the ratio; spread, a 2-D tensor shrinks by ``sqrt(scale)`` each way and its
    chunks over ranks keep their proportions."""
    if scale == 1.0 or not prod(shape):
        return shape
    free = sorted((d for d, u in enumerate(units) if u and shape[d] % u == 0), key=lambda d: -units[d])
    out, target = list(shape), scale * prod(shape)
    for k, d in enumerate(free):
        factor = (target / prod(out)) ** (1 / (len(free) - k))  # out[d] is still shape[d] here
        out[d] = shrink(shape[d], factor, units[d])
    return tuple(out)


@dataclass(frozen=True)
class TensorGroup:
    """A dict of 1-D tensors ``{"0": t0, "1": t1, ...}``; ``key`` is its name in the file's
    top-level dict, or None when the group *is* the top-level dict."""

    key: str | None
    numels: tuple[int, ...]


@dataclass(frozen=True)
class FilePlan:
    """A file holding one state dict (DLIO's and DeepSpeed's ``.pt`` files): dicts of tensors of one dtype."""

    stem: str  # file name without the format's extension
    kind: Literal["model", "optimizer"]
    dtype: str
    groups: tuple[TensorGroup, ...]

    @property
    def itemsize(self) -> int:
        return DATATYPE_BYTES[self.dtype]

    @property
    def num_tensors(self) -> int:
        return sum(len(g.numels) for g in self.groups)

    @property
    def payload_bytes(self) -> int:
        return self.itemsize * sum(sum(g.numels) for g in self.groups)


@dataclass(frozen=True, eq=False)
class Item:
    """One entry of a file of items (torch.distributed.checkpoint's ``.distcp``): a tensor's local shard,
    written with ``torch.save``, or an object pickled whole (DCP's BYTE_IO: the optimizer's settings).
    Compared by identity: ranks whose shards are alike share one object, and counting them stays cheap."""

    fqn: str
    dtype: str  # "" for an object
    shape: tuple[int, ...]  # the shard's
    rows: int = 0  # dim-0 rows of a full shard (FSDP's chunk): rank r's starts at row min(r * rows, dim 0)
    pickled: bytes = b""  # an object's pickle
    offsets: tuple[int, ...] = ()  # where the chunk starts in the whole tensor, for items no two ranks share
    whole: tuple[int, ...] = ()  # the whole tensor's shape, where it differs from the shard's (DCP's planners)
    # computed once (a plan of thousands of ranks asks for them a million times): the shard's bytes, and the
    # whole tensor's, which DCP's deduplication and FileSystemWriter's split into files weigh an item by
    # (``WriteItem.tensor_storage_size`` and ``_item_size`` read the global size)
    nbytes: int = field(init=False, repr=False)
    whole_nbytes: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        size = DATATYPE_BYTES[self.dtype] if self.dtype else 0
        object.__setattr__(self, "nbytes", prod(self.shape) * size)
        object.__setattr__(self, "whole_nbytes", prod(self.whole) * size if self.whole else self.nbytes)


@dataclass(frozen=True)
class ItemFile:
    """A file of items in the order they are written; its payload (tensor bytes) and size (with every
    archive's headers) are the layout's, computed once for every rank whose file holds the same items."""

    stem: str
    items: tuple[Item, ...]
    payload_bytes: int
    size: int
    kind: Literal["shard"] = "shard"

    @property
    def num_tensors(self) -> int:
        return sum(1 for i in self.items if i.dtype)


PlannedFile = FilePlan | ItemFile


@dataclass(frozen=True)
class CoordinatorFile:
    """A file one rank (the coordinator, rank 0) writes after every rank's data; ``staged``: the name
    it is written under first when the framework renames it into place (DCP's ``.metadata.tmp``)."""

    name: str
    size: int
    staged: str | None = None


@dataclass(frozen=True)
class FolderFile:
    """A file the coordinator (rank 0) writes in the checkpoint folder itself, beside the steps, at every save once
    its own files are written, replacing the previous save's: DeepSpeed's ``latest`` (the newest step's name) and
    the recovery scripts it copies there. Where the saves play their framework's calls, each is written in one call
    and never synced, as ``open(path, "w")`` and ``shutil.copyfile`` write it (the stream writes it as it writes
    any file). On the first tier alone; no step's part: no manifest lists it and ``keep_last`` leaves it; the run record
    names it, so that a file of that name this tool did not write is never replaced or removed."""

    name: str
    size: int | None = None  # its bytes (synthetic); None: the name of the step just saved, as text (``latest``)


@dataclass(frozen=True)
class RankPlan:
    """One rank's files, in the order it writes them, and its place in the job's parallelism: its tensor-,
    pipeline- and data-parallel ranks and its model-parallel rank (the tensor and pipeline ranks as one index,
    ``tp + tensor * pp``), in the rank order of the framework the layout follows (DLIO's and DeepSpeed's: tensor,
    then pipeline, then data; Megatron's: tensor, then data, then pipeline). A layout without tensor or pipeline
    parallelism (DCP, Lightning: they refuse it) has every rank at tensor rank 0, stage 0, model-parallel rank 0,
    and its data-parallel rank equal to its rank: those zeros are its coordinates, not a missing value."""

    rank: int
    tp: int
    pp: int
    dp: int
    mp: int
    files: tuple[PlannedFile, ...]

    @property
    def payload_bytes(self) -> int:
        return sum(f.payload_bytes for f in self.files)


class LayoutParams(Protocol):
    """The core every layout's parameter record shares (``DcpParams``, ``MegatronParams``, ...: what its files
    depend on, taken from a workload, hashable, with the arithmetic of its files), as a plan holds it
    (:attr:`Plan.layout`); a :class:`~dlio_ckpt.plan.layouts.base.Layout` is the declaration that makes them."""

    # read-only: layouts give their name as a class variable, their shape and world size as fields of a
    # frozen dataclass or as properties
    @property
    def name(self) -> str: ...
    @property
    def shape(self) -> TransformerShape | MoeShape | DemoTransformer: ...
    @property
    def world_size(self) -> int: ...

    def describe(self) -> str:
        """One line for ``plan``: the parallelism and what it shards."""

    def problems(self, plan: Plan) -> list[str]:
        """The layout's own consistency checks of a whole plan."""


@dataclass(frozen=True)
class Plan:
    layout: LayoutParams
    ranks: tuple[RankPlan, ...]
    coordinator: tuple[CoordinatorFile, ...] = ()
    folder: tuple[FolderFile, ...] = ()  # written beside the steps by rank 0 at every save (FolderFile)
    full_size: Plan | None = None  # a scaled plan's full-size plan, for the figures it stands for (None: full size)
    sample: bool = False  # a scaled plan that keeps a sample of the full size's items whole (plan.sample)

    def miniature_of(self, full: Plan) -> Plan:
        """This scaled plan with its coordinator's files at the full plan's sizes times the ratio of the
        ranks' files (each at least 1 B): a full-size ``.metadata`` is 0.002 % of a 70B FSDP2 checkpoint at 64
        ranks, and unscaled in a plan scaled 1/500 it was a hundred times that share. Its contents are
        synthetic either way; a load still reads it whole, first, on every rank."""
        ratio = self.stored_bytes / full.stored_bytes
        coordinator = tuple(CoordinatorFile(c.name, max(1, round(f.size * ratio)), c.staged)
                            for c, f in zip(self.coordinator, full.coordinator, strict=True))
        return replace(self, coordinator=coordinator, full_size=full)

    @cached_property
    def stored_bytes(self) -> int:
        """The ranks' files' bytes as stored where the plan knows them (a file of items: its archives' headers
        too; a state dict's file: its payload, the format adds the rest)."""
        return sum(f.size if isinstance(f, ItemFile) else f.payload_bytes for r in self.ranks for f in r.files)

    @property
    def scale_ratio(self) -> float:
        """The bytes planned over the full size's (1.0 unscaled): ``checkpoint.scale`` as rounding left it."""
        return self.total_payload_bytes / self.full_size.total_payload_bytes if self.full_size else 1.0

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    @property
    def num_parameters(self) -> int:
        return self.layout.shape.num_parameters

    @property
    def mtp_parameters(self) -> int:
        """DeepSeek's multi-token-prediction module, saved with the model but not in its published count."""
        return getattr(self.layout.shape, "mtp_parameters", 0)

    @cached_property
    def total_payload_bytes(self) -> int:
        return sum(r.payload_bytes for r in self.ranks)

    @cached_property
    def coordinator_names(self) -> tuple[str, ...]:
        """The names of the files one rank writes for all, as they are written and moved into place (staged
        names too): what a run records as its own, and what its calls' times are kept apart by."""
        return tuple(name for c in self.coordinator for name in (c.name, c.staged) if name)

    @property
    def folder_names(self) -> tuple[str, ...]:
        """The names of the files rank 0 writes beside the steps (:class:`FolderFile`)."""
        return tuple(f.name for f in self.folder)

    @cached_property
    def rank0_names(self) -> frozenset[str]:
        """Every file rank 0 writes besides its own data, the coordinator's and those beside the steps: what a
        save's calls and times on them are kept apart from its data by."""
        return frozenset((*self.coordinator_names, *self.folder_names))

    def ranks_of_process(self, process: int, processes: int) -> tuple[RankPlan, ...]:
        """The ranks ``process`` of ``processes`` plays: a contiguous block, as many each (the world size is a
        multiple of the process count). A run's processes and a scaled plan's busiest process
        (:func:`dlio_ckpt.plan.view.scaled_figures`) split the ranks this one way."""
        per = self.world_size // processes
        return self.ranks[process * per:(process + 1) * per]

    @property
    def checkpoint_size_GB(self) -> float:  # noqa: N802 - DLIO's key name (it is GiB)
        return self.total_payload_bytes / GIB

    def validate(self) -> None:
        """Check the job's plan once, before a byte is written (as DCP validates its global plan): one
        plan per rank in order, no file written twice, and the layout's own checks. A failure is our
        bug, not input."""
        with collector_paused():
            self._check()

    def _check(self) -> None:
        problems = []
        if [r.rank for r in self.ranks] != list(range(self.world_size)):
            problems.append("ranks are not 0..world_size-1 in order")
        stems = [f.stem for r in self.ranks for f in r.files] + [c.name for c in self.coordinator]
        if len(set(stems)) != len(stems):
            problems.append("two ranks write the same file")
        if self.sample:  # the full size's plan held to the layout's checks, the sample to its own
            assert self.full_size is not None
            problems += self.full_size.layout.problems(self.full_size) + self._sample_problems(self.full_size)
        else:
            problems += self.layout.problems(self)
        if problems:
            raise RuntimeError(f"inconsistent plan for world size {self.world_size}: {'; '.join(problems)}")

    def _sample_problems(self, full: Plan) -> list[str]:
        """A sample's own checks: each rank's files hold items of its full-size file of the same name, in their
        order."""
        out = []
        for rank, f in ((r.rank, f) for r in self.ranks for f in r.files):
            whole = next((g for g in full.ranks[rank].files if g.stem == f.stem), None)
            if not isinstance(whole, ItemFile) or not isinstance(f, ItemFile):
                out.append(f"{f.stem}: not a file of items of rank {rank} at full size")
                continue
            at = {id(item): k for k, item in enumerate(whole.items)}
            places = [at.get(id(item), -1) for item in f.items]
            if -1 in places or places != sorted(set(places)):
                out.append(f"{f.stem}: its items are not a sample of the full size's, in order")
        return out
