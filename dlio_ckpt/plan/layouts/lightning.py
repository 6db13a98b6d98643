"""Lightning's own file: the one ``.ckpt`` a PyTorch Lightning job writes per checkpoint, of Lightning's demo
transformer (the model ``mode=lightning`` trains), written without torch.

From Lightning 2.6.6 (``lightning/pytorch/trainer/connectors/checkpoint_connector.py`` ``dump_checkpoint``;
``lightning/fabric/plugins/io/torch_io.py``; ``lightning/fabric/utilities/cloud_io.py`` ``_atomic_save``) and
torch 2.13.0; tests/unit/test_lightning_layout.py holds its pickle to torch.save's of the same dict, byte for
byte, and what torch.load gives back to Lightning's demo module and torch's Adam:

- ``ModelCheckpoint`` (``Trainer.save_checkpoint``) saves on global rank 0 alone (under DDP every rank holds
  the same state): rank 0 writes ``checkpoint.ckpt`` in each step's folder, the other ranks write nothing.
- The file is ``torch.save`` of one dict: ``epoch``, ``global_step``, ``pytorch-lightning_version``,
  ``state_dict`` (every parameter, fp32, ``model.``-prefixed, in the module's order), ``loops``, ``callbacks``,
  ``optimizer_states`` (Adam: per parameter a 4-byte 0-d ``step``, ``exp_avg`` and ``exp_avg_sq``, then the
  param group; the demo's SGD, without momentum, keeps no state) and ``lr_schedulers``. Here: the same keys but
  ``loops`` (progress counters, which Lightning restores only when it finds them), each tensor one storage
  record of the archive, in the order torch.save writes them
  (:func:`~dlio_ckpt.plan.formats.pt.archive`); ``epoch`` and ``global_step`` are 0 in every step's file.
- Its size is :func:`~dlio_ckpt.model.lightning_demo.predict`'s to the byte (the prediction ``plan`` gives for
  ``mode=lightning``, held to real Lightning files within 1% by tests/e2e/test_real_modes.py): what this pickle
  does not hold (``loops``, the state dict's ``_metadata``, ...) is filler after the pickle's STOP opcode, which
  ``torch.load`` never reads. The filler moves the size in steps of the archive's 64-byte alignment, so the
  last few bytes (under 64; rarely more, where a record crosses 4 GiB) lengthen the serialization id, the one
  record that no aligned record follows (``torch.load`` reads it as a label, of any length). Past 4 GiB, zip64's
  headers, which the prediction (fitted at 100 layers and below) never saw, can need more than it holds (Adam
  at 1000 layers: 129 KB more, 0.002%): there the file is the archive's own size, with no filler. With
  ``checkpoint.scale`` every tensor shrinks and the file keeps the full size's bytes beyond the payload.
- ``TorchCheckpointIO.save_checkpoint``: ``torch.save`` into a ``BytesIO``, then one ``write`` of it to a
  temporary file in ``$TMPDIR`` (fsspec's local transaction: ``tempfile.mkstemp``), moved into place
  (``shutil.move``); nothing is synced. Its load, ``load_checkpoint``: ``torch.load`` of the whole file, on every
  rank that loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from hashlib import blake2b
from typing import TYPE_CHECKING, Any, ClassVar

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.model.lightning_demo import DemoTransformer, predict
from dlio_ckpt.plan.formats import Calls, Format, Segment, file_size
from dlio_ckpt.plan.formats.pt import OrderedItems, Pickler, archive
from dlio_ckpt.plan.layouts.base import FrameworkIO, Layout
from dlio_ckpt.plan.layouts.dcp import ADAM_GROUP
from dlio_ckpt.plan.layouts.rules import shared_read_tier, torch_save_only
from dlio_ckpt.plan.pattern import Copies, FirstWritten, Threads
from dlio_ckpt.plan.reads import FileReads, RankReads, RestorePlan
from dlio_ckpt.plan.types import Item, ItemFile, Plan, PlannedFile, RankPlan, shrink_shape

if TYPE_CHECKING:
    from dlio_ckpt.config import Workload

VERSION = "2.6.6"  # pytorch-lightning_version, as the files it was held to say
STEM = "checkpoint"  # rank 0's file in each step's folder
STATE = "optimizer_states.0.state"  # an optimizer state's item: STATE.<parameter index>.<step|exp_avg|exp_avg_sq>
# torch 2.13 SGD's param group as the demo builds it (lr 0.1, no momentum), in its order ("params": last)
SGD_GROUP: tuple[tuple[str, object], ...] = (
    ("lr", 0.1), ("momentum", 0), ("dampening", 0), ("weight_decay", 0), ("nesterov", False), ("maximize", False),
    ("foreach", None), ("differentiable", False), ("fused", None))

READS = "Lightning's load_checkpoint: every rank torch.loads global rank 0's whole .ckpt"
DEMO = ("describes another model than Lightning's demo transformer, which checkpoint.layout=lightning writes (its "
        "widths are workload.lightning's vocab_size, ninp and nhid, its depth model.num_layers, its tensors fp32): "
        "leave it out, or choose another checkpoint.layout")


def check(workload: Workload) -> None:
    """The demo's model and nothing else (a key that would be ignored is refused), saved by TorchCheckpointIO."""
    ck, m, s = workload.checkpoint, workload.model, workload.lightning
    torch_save_only(workload, "lightning", "Lightning's TorchCheckpointIO")
    if ck.mode == "subset":
        raise ConfigError("workload.checkpoint.mode", "subset", "is MLPerf's mode of DLIO's layout; with "
                          "checkpoint.layout=lightning global rank 0 writes the job's one file")
    if m.family != "dense":
        raise ConfigError("workload.model.family", m.family, DEMO)
    for name, value in _set(m.transformer):
        raise ConfigError(f"workload.model.transformer.{name}", value, DEMO)
    for name, value in _set(m.parallelism):
        raise ConfigError(f"workload.model.parallelism.{name}", value, "means nothing with checkpoint.layout="
                          "lightning: the demo trains data-parallel (DDP), every rank a whole replica, and global "
                          "rank 0 saves it all; leave it out")
    for name in ("model_datatype", "optimizer_datatype"):
        value = getattr(m, name)
        if value not in ("fp32", type(m).model_fields[name].default):
            raise ConfigError(f"workload.model.{name}", value, DEMO)
    if s.checkpoint_io != "torch":
        raise ConfigError("workload.lightning.checkpoint_io", s.checkpoint_io, "checkpoint.layout=lightning plays "
                          "TorchCheckpointIO (torch); the s3 and dataflux plugins run in mode=lightning")
    if s.async_save:
        raise ConfigError("workload.lightning.async_save", True, "applies to mode=lightning: an emulated run saves "
                          "in the background with ++workload.checkpoint.async_save=True")


def _set(section: Any) -> list[tuple[str, Any]]:
    """The keys of a section set away from their defaults."""
    default = type(section)()
    return [(name, getattr(section, name)) for name in type(section).model_fields
            if getattr(section, name) != getattr(default, name)]


def check_world(workload: Workload, world_size: int) -> None:
    """Every rank of the load reads rank 0's file: a tier that keeps each host's files apart cannot serve it."""
    if world_size > 1:
        shared_read_tier(workload, "every rank of Lightning's load reads global rank 0's .ckpt")


@dataclass(frozen=True)
class LightningParams:
    name: ClassVar[str] = "lightning"
    shape: DemoTransformer
    world_size: int
    optimizer: str
    scale: float = 1.0

    def describe(self) -> str:
        what = "Adam (step, exp_avg, exp_avg_sq per parameter)" if self.optimizer == "adam" else "SGD (no state)"
        return (f"Lightning's demo transformer, {self.shape.nlayers} layers, DDP over {self.world_size} rank(s): "
                f"global rank 0 saves its fp32 parameters and {what} in one .ckpt, the others nothing")

    def items(self) -> tuple[Item, ...]:
        """Every tensor in the order torch.save stores them: the parameters, then each one's optimizer state."""
        params = [Item(f"model.{name}", "fp32", shrink_shape(shape, self.scale, (1,) * len(shape)))
                  for name, shape in self.shape.shapes()]
        state = []
        if self.optimizer == "adam":
            for i, p in enumerate(params):
                state += [Item(f"{STATE}.{i}.step", "fp32", ()), Item(f"{STATE}.{i}.exp_avg", "fp32", p.shape),
                          Item(f"{STATE}.{i}.exp_avg_sq", "fp32", p.shape)]
        return tuple(params + state)

    def problems(self, plan: Plan) -> list[str]:
        """Rank 0 alone writes, one file, whose archive fits the predicted size."""
        problems = []
        if [r.rank for r in plan.ranks if r.files] != [0] or len(plan.ranks[0].files) != 1:
            problems.append("global rank 0 alone must write, one file")
        for f in plan.ranks[0].files:
            if isinstance(f, ItemFile) and _archive(f) is None:
                problems.append(f"{f.stem}: its archive cannot be made {f.size} bytes, its planned size")
        return problems


def make_plan(workload: Workload, world_size: int) -> Plan:
    lay = LightningParams(DemoTransformer.of(workload), world_size, workload.lightning.optimizer,
                          workload.checkpoint.scale)
    items = lay.items()
    payload, p = sum(i.nbytes for i in items), predict(workload)
    # the prediction's bytes beyond the payload, or the archive's own where its zip64 headers outgrow them
    size = max(payload + p.file_bytes - p.payload_bytes, file_size(_made(STEM, items)))
    file = ItemFile(STEM, items, payload, size)
    ranks = (RankPlan(0, 0, 0, 0, 0, (file,)), *(RankPlan(r, 0, 0, r, 0, ()) for r in range(1, world_size)))
    return Plan(lay, ranks)


@lru_cache(maxsize=4)
def _pickle(items: tuple[Item, ...]) -> bytes:
    """``data.pkl`` of the checkpoint's dict, its tensors ``items`` (:meth:`LightningParams.items`)."""
    params = [i for i in items if not i.fqn.startswith(STATE)]
    state: dict[int, dict[str, Item]] = {}
    for i in items[len(params):]:
        index, key = i.fqn[len(STATE) + 1:].split(".")
        state.setdefault(int(index), {})[key] = i
    group = dict((*(ADAM_GROUP if state else SGD_GROUP), ("params", list(range(len(params))))))
    checkpoint = {"epoch": 0, "global_step": 0, "pytorch-lightning_version": VERSION,
                  "state_dict": OrderedItems((i.fqn, i) for i in params), "callbacks": {},
                  "optimizer_states": [{"state": state, "param_groups": [group]}], "lr_schedulers": []}
    p = Pickler()
    p.value(checkpoint)
    return p.done()


def _made(stem: str, items: tuple[Item, ...], filler: int = 0, longer: int = 0) -> list[Segment]:
    """The archive of ``items`` with ``filler`` bytes after the pickle and ``longer`` digits more in its
    serialization id (40 characters, as torch's)."""
    ident = blake2b(stem.encode(), digest_size=20).hexdigest().encode() + b"0" * longer
    return archive(_pickle(items) + bytes(filler), [i.nbytes for i in items], ident)


@lru_cache(maxsize=4)
def _archive(file: ItemFile) -> tuple[Segment, ...] | None:
    """The file's bytes, ``file.size`` of them (None where its headers alone need more): the filler after the
    pickle and the digits added to the serialization id that make it so (the module's docstring)."""
    filler = max(0, file.size - file_size(_made(file.stem, file.items)) - 63)
    best: tuple[int, int] | None = None  # (filler, digits): the fewest digits found
    for _ in range(8):  # the size moves in steps of 64 with the filler (a record crossing 4 GiB adds to one)
        short = file.size - file_size(_made(file.stem, file.items, filler))
        if 0 <= short < 256 and (best is None or short < best[1]):
            best = (filler, short)
        if 0 <= short < 64 or short < 0 and filler == 0:
            break
        filler = max(0, filler + short // 64 * 64)
    if best is None:
        return None
    out = _made(file.stem, file.items, *best)
    return tuple(out) if file_size(out) == file.size else None


class CkptFormat:
    """A Lightning ``.ckpt``: one ``torch.save`` archive of the checkpoint's dict. Not in the formats' registry
    (``checkpoint.format`` chooses how other layouts' state dicts are stored; this is the lightning layout's own)."""

    name = "ckpt"
    extension = ".ckpt"

    def segments(self, file: PlannedFile) -> list[Segment]:
        assert isinstance(file, ItemFile)
        out = _archive(file)
        if out is None:
            raise RuntimeError(f"{file.stem}: its archive cannot be made {file.size} bytes")  # plan.validate says so
        return list(out)


def file_format(workload: Workload) -> Format:
    return CkptFormat()


def file_calls(file: PlannedFile) -> Calls:
    """The ``.ckpt`` as TorchCheckpointIO writes it: ``torch.save`` into a ``BytesIO``, then one ``write`` of its
    bytes to the (temporary) file."""
    assert isinstance(file, ItemFile)
    return (file.size,)


# No coordinator's file (the defaults' calls are never asked); the writer is the training loop's own thread; a
# device's tensors are all copied to the host (torch.save into the BytesIO) before the one write starts
FRAMEWORK_IO = FrameworkIO(writer="Lightning 2.6.6 TorchCheckpointIO (torch.save into memory, one write to a "
                           "temporary file in $TMPDIR, moved into place)",
                           file_calls=file_calls, threads=Threads.CALLER, syncs_files=False,
                           first_written=FirstWritten.TMPDIR, archives=True, copies=Copies.FIRST,
                           in_memory=True)


def restore(workload: Workload, plan: Plan, world_size: int, model_only: bool) -> RestorePlan:
    """Lightning's load: every loading rank torch.loads global rank 0's whole file, at the save's world size or
    another (its state is not sharded: under DDP each rank holds a whole replica), and for the model alone too
    (``LightningModule.load_from_checkpoint``: ``torch.load`` of the whole file, then its ``state_dict``;
    ``lightning/fabric/utilities/cloud_io.py`` ``_load``, Lightning 2.6.6). A rank needs every tensor, or the
    model's parameters alone."""
    file = plan.ranks[0].files[0]
    assert isinstance(file, ItemFile)
    needed = sum(i.nbytes for i in file.items if not i.fqn.startswith(STATE)) if model_only else file.payload_bytes
    return RestorePlan(world_size, plan.world_size, model_only,
                       tuple(RankReads(r, (FileReads(0, 0),), needed) for r in range(world_size)), READS)


LAYOUT = Layout(make_plan=make_plan, file_format=file_format, check=check, check_world=check_world,
                restore=restore, reads=READS, framework_io=FRAMEWORK_IO,
                # None: what the read phase does is Lightning's own load. With one rank, rank 0 reading its own
                # file whole is it (torch.load of the whole .ckpt); with more, restore() has every rank read it whole
                whole_file_load=None)
