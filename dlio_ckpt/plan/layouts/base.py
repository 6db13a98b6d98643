"""The contract every checkpoint layout keeps: one object, its features declared, never probed.

Why a frozen record of functions rather than a module read with ``getattr``: a layout's optional
features (a world-size rule of its own, a load that reshards) are then visible in its declaration and
checked by the type checker, and a layout from another package (entry point group ``dlio_ckpt.layouts``)
is held to the same shape as ours.

The order the tool calls them in:

1. ``check(workload)`` while the configuration is validated: the layout's own rules, each a
   :class:`~dlio_ckpt.errors.ConfigError` naming key, value and rule (exit 2, nothing written);
2. ``check_world(workload, world_size)``, where declared, once the world size is known (``plan``, a run);
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
from typing import TYPE_CHECKING, Literal

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
    caller's thread among them unless ``caller_writes`` is False), or by the caller alone, one after another
    (``thread_per_file`` False); each file made of its calls through a buffered file (Python's, or torch.save's
    C++ stream: ``stream``) and synced on its own descriptor before it is closed (``checkpoint.fsync``, where
    the framework syncs at all: ``syncs_files``); the coordinator's files follow everyone's data. A load (on
    a file system) reads each coordinator's file by its ``coordinator_reads``, then each item it needs, file by
    file on the caller's thread: a tensor as ``torch.load`` reads its archive, an object whole (DCP's
    ``FileSystemReader``); a file that is one archive (``archives``) as ``torch.load`` reads it whole."""

    writer: str  # what is played, as summary.json and the console name it
    file_calls: Callable[[PlannedFile], Calls]  # a rank's file: its framework's write calls
    coordinator_calls: Callable[[CoordinatorFile], Calls] = _one_call  # a coordinator's file (its size may be scaled)
    coordinator_reads: Callable[[CoordinatorFile], Calls] = _one_call  # how every rank of a load reads it, in order
    unsynced: frozenset[str] = frozenset()  # coordinator files the framework never syncs
    caller_writes: bool = True  # the caller's thread writes one of the files (DCP's); else it waits for the writers
    thread_per_file: bool = True  # a thread per file of the rank (DCP's, megatron-core's); else the caller writes
    #                               its files one after another (DeepSpeed's and Lightning's torch.save)
    stream: Literal["python", "c++"] = "python"  # the file object under the calls: Python's open(path, "wb"), or
    #                                              the C++ std::ofstream of torch.save(obj, path) (8 KiB, writev)
    syncs_files: bool = True  # whether it fsyncs its files (checkpoint.fsync); DeepSpeed and Lightning never do
    via_tmpdir: bool = False  # each file written to a temporary file in $TMPDIR, then moved into place (shutil.move:
    #                           a rename, or a copy where the checkpoint is on another device): fsspec's transaction
    archives: bool = False  # each file is one torch.save archive that its load reads whole, as torch.load does
    in_memory: bool = False  # torch.save into memory first (Lightning's BytesIO): each byte copied into fresh memory
    # on an object store whose client renames by a copy (capabilities.rename_by_copy): the coordinator's staged files
    # written, then copied into place, each rank first asking whether they exist (DCP's FileSystemWriter over
    # s3torchconnector's S3FileSystem); else written in place there (megatron-core writes .metadata so on MSC)
    object_store_rename: bool = False
    # a synchronous save's copy of its tensors from the accelerator (checkpoint.gpu_copy_gb_per_second): "each"
    # tensor just before its framework writes it (DCP's, torch.save's), or all the rank's "first", before any
    # writer starts (megatron-core's preload)
    copies: Literal["each", "first"] = "each"


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
    # the workload's keys only some layouts read (config.rules.LAYOUT_KEYS): set under a layout that does
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
