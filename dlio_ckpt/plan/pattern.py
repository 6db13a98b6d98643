"""The words a framework's I/O pattern is said in (``checkpoint.io_pattern=framework``): what a layout declares
(:class:`~dlio_ckpt.plan.layouts.base.FrameworkIO`) and the engine plays (:mod:`dlio_ckpt.io.engine.framework`).

Why a value of its own: a framework's way of writing a file crosses from the plan to the engine. Handed over as
one typed value per file (:class:`FilePattern`, carried by :class:`~dlio_ckpt.io.engine.tasks.FileTask`) and
said in small enums rather than one boolean a quirk, the next quirk touches its declaration and its interpreter
only, and the type checker sees every place that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from dlio_ckpt.plan.formats import Calls


class FileObject(Enum):
    """The file object a framework's write calls go through."""

    PYTHON = "python"  # open(path, "wb"): Python's BufferedWriter
    CPP = "c++"  # torch.save(obj, path): the C++ std::ofstream's 8 KiB filebuf, large writes by writev


class FirstWritten(Enum):
    """Where a framework first writes a file."""

    IN_PLACE = "in place"  # at its own name (DCP, megatron-core, torch.save)
    TMPDIR = "in $TMPDIR"  # a temporary file in $TMPDIR, then moved into place (fsspec's transaction: Lightning)


class Threads(Enum):
    """Which threads write a rank's files."""

    FILE_EACH = "a thread a file, the caller's among them"  # DCP's FileSystemWriter
    FILE_EACH_CALLER_WAITS = "a thread a file, the caller waiting"  # megatron-core's writer processes
    CALLER = "the caller, one file after another"  # torch.save: DeepSpeed's and Lightning's


class Copies(Enum):
    """When a synchronous save copies its tensors from the accelerator (``checkpoint.gpu_copy_gb_per_second``)."""

    EACH = "each tensor just before it is written"  # DCP's, torch.save's: by the writer threads, in the engine
    FIRST = "all a rank's tensors before any writer starts"  # megatron-core's preload, Lightning's BytesIO


@dataclass(frozen=True)
class FilePattern:
    """How its framework writes one file, and reads it where the load does so by calls of its own."""

    calls: Calls  # its write calls, in order (:data:`~dlio_ckpt.plan.formats.Calls`)
    synced: bool = True  # whether its framework syncs it (``checkpoint.fsync`` says whether any is)
    file_object: FileObject = FileObject.PYTHON
    first_written: FirstWritten = FirstWritten.IN_PLACE
    in_memory: bool = False  # serialized into fresh memory first, the calls made from that copy (Lightning's BytesIO)
    archive: bool = False  # one torch.save archive, which a load reads whole as torch.load does
    items: bool = False  # its calls end each item with a FLUSH: the framework's time on an item is played before it
    tensors: bool = True  # its payload is tensors, copied from the accelerator where a save copies them; a
    #                       coordinator's metadata is not
    reads: Calls | None = None  # a coordinator's file: how every rank of a load reads it, in order
