"""The contract every checkpoint layout keeps: one object, its features declared, never probed.

Why a frozen record of functions rather than a module read with ``getattr``: a layout's optional
features (a world-size rule of its own, a load that reshards) are then visible in its declaration and
checked by the type checker, and a layout from another package (entry point group ``dlio_ckpt.layouts``)
is held to the same shape as ours.

The order the tool calls them in:

1. ``check(workload)`` once the configuration is validated, in the plan layer's step
   (:func:`dlio_ckpt.plan.layouts.check_job`, after the keys it does not read are refused): the layout's own
   rules, each a :class:`~dlio_ckpt.errors.ConfigError` naming key, value and rule (exit 2, nothing written);
2. ``check_world(workload, world_size)``, where declared, once the world size is known (``plan``, an emulated
   run), in the same step;
3. ``make_plan(workload, world_size)``: every rank's files with their items, and the coordinator's;
4. ``file_format(workload)``: the bytes of those files (a :class:`~dlio_ckpt.plan.formats.Format`);
5. for the read phase, ``restore(workload, plan, world_size, model_only)`` where declared: what each rank
   of a load reads when its framework reshards or loads the model alone; a layout without it is read as
   saved, each rank its own files whole (``reads`` says whose read that is), and a load asked otherwise
   is refused with ``no_restore``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dlio_ckpt.plan.pattern import Copies, FileObject, FilePattern, FirstWritten, Threads

if TYPE_CHECKING:
    from dlio_ckpt.config import Workload
    from dlio_ckpt.plan.formats import Calls, Format
    from dlio_ckpt.plan.reads import RestorePlan
    from dlio_ckpt.plan.types import CoordinatorFile, Item, Plan, PlannedFile


def _no_rules(workload: Workload) -> None:
    """A layout with no rules of its own beyond the configuration's."""


def _one_call(file: CoordinatorFile) -> Calls:
    """A small file written, or read, in one call."""
    return (file.size,)


@dataclass(frozen=True, kw_only=True)
class FrameworkIO:
    """How a layout's framework makes its calls on storage, played with ``checkpoint.io_pattern=framework``
    (:meth:`dlio_ckpt.io.engine.Engine.write_files`) and held to the framework's own calls under strace
    (``tests/against_frameworks/test_io_patterns.py``).

    A rank's files are written by as many threads as it has files (DCP's ``thread_count``: a file each, the
    caller's thread among them or waiting for them), or by the caller alone, one after another (``threads``);
    each file made of its calls through a buffered file (Python's, or torch.save's C++ stream: ``file_object``)
    and synced on its own descriptor before it is closed (``checkpoint.fsync``, where the framework syncs at all:
    ``syncs_files``); the coordinator's files follow everyone's data. The engine is handed each file's part as
    one :class:`~dlio_ckpt.plan.pattern.FilePattern` (:meth:`file_pattern`, :meth:`coordinator_pattern`). A load (on
    a file system) reads each coordinator's file by its ``coordinator_reads``, then each item it needs, file by
    file on the caller's thread: a tensor as ``torch.load`` reads its archive, an object whole (DCP's
    ``FileSystemReader``); a file that is one archive (``archives``) as ``torch.load`` reads it whole."""

    writer: str  # what is played, as summary.json and the console name it
    file_calls: Callable[[PlannedFile], Calls]  # a rank's file: its framework's write calls
    coordinator_calls: Callable[[CoordinatorFile], Calls] = _one_call  # a coordinator's file (its size may be scaled)
    coordinator_reads: Callable[[CoordinatorFile], Calls] = _one_call  # how every rank of a load reads it, in order
    unsynced: frozenset[str] = frozenset()  # coordinator files the framework never syncs
    threads: Threads = Threads.FILE_EACH  # which threads write a rank's files
    file_object: FileObject = FileObject.PYTHON  # the file object under the calls
    syncs_files: bool = True  # whether it fsyncs its files (checkpoint.fsync); DeepSpeed and Lightning never do
    # where each file is first written: in place, or in $TMPDIR and then moved into place (shutil.move: a rename,
    # or a copy where the checkpoint is on another device): fsspec's transaction
    first_written: FirstWritten = FirstWritten.IN_PLACE
    archives: bool = False  # each file is one torch.save archive that its load reads whole, as torch.load does
    in_memory: bool = False  # torch.save into memory first (Lightning's BytesIO): each byte copied into fresh memory
    # on an object store whose client renames by a copy (capabilities.rename_by_copy): the coordinator's staged files
    # written, then copied into place, each rank first asking whether they exist (DCP's FileSystemWriter over
    # s3torchconnector's S3FileSystem); else written in place there (megatron-core writes .metadata so on MSC)
    object_store_rename: bool = False
    copies: Copies = Copies.EACH  # when a synchronous save copies its tensors from the accelerator
    # its calls end each item with a FLUSH and its writer threads share one interpreter (DCP's FileSystemWriter):
    # checkpoint.framework_item_us is played item by item, holding Python's lock as the framework's Python does
    items: bool = False

    def file_pattern(self, file: PlannedFile) -> FilePattern:
        """How its framework writes one of a rank's files: what the engine is handed with it."""
        return FilePattern(self.file_calls(file), synced=self.syncs_files, file_object=self.file_object,
                           first_written=self.first_written, in_memory=self.in_memory, archive=self.archives,
                           items=self.items)

    def coordinator_pattern(self, file: CoordinatorFile) -> FilePattern:
        """How its framework writes a coordinator's file (metadata, not tensors), and how a load reads it."""
        return FilePattern(self.coordinator_calls(file), synced=file.name not in self.unsynced, tensors=False,
                           reads=self.coordinator_reads(file))


@dataclass(frozen=True, kw_only=True)
class Layout:
    """One checkpoint layout (see the module's docstring for the call order)."""

    make_plan: Callable[[Workload, int], Plan]
    file_format: Callable[[Workload], Format]
    check: Callable[[Workload], None] = _no_rules
    check_world: Callable[[Workload, int], None] | None = None
    restore: Callable[[Workload, Plan, int, bool], RestorePlan] | None = None
    reads: str = "each rank its own files, whole"  # whose read phase the whole-file read follows
    no_restore: str = "its load is not modelled at another world size or for the model alone"
    # the workload's keys only some layouts read (config.keys.LAYOUT_KEYS): set under a layout that does
    # not read them, they are refused by name rather than ignored
    reads_keys: frozenset[str] = frozenset()
    # a load where every rank reads its own files whole: None where that is the framework's own load (DLIO's
    # read phase); else why it stands in for one not modelled, said beside the load's figures
    whole_file_load: str | None = "its load is not modelled"
    # where a load that is modelled is still not held to the framework's own: why (None: it is held)
    load_caveat: Callable[[Workload], str | None] | None = None
    # how its framework writes (checkpoint.io_pattern=framework); None: it writes the tuned stream either way
    framework_io: FrameworkIO | None = None
    # where its files are its items' archives one after another (a file of items, each read whole): an item's
    # stored bytes, by which a scaled run may keep a sample of the items whole (checkpoint.miniature=sample)
    item_size: Callable[[Item], int] | None = None
