"""The small protocol every storage backend implements (fio's op table, fsspec's shape)."""

from __future__ import annotations

import io
import os
import socket
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dlio_ckpt.errors import ConfigError


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; the engine asks these and never the backend's type."""

    fsync: bool  # can make a written file durable on request (checkpoint.fsync)
    durable_on_close: bool  # a file is durable once its writer finishes (object stores)
    odirect: bool  # can bypass the page cache (then buffers and offsets must be aligned)
    alignment: int  # required alignment of buffers, offsets and lengths under O_DIRECT
    evict_cache: bool  # can drop a file's cached pages so reads hit storage
    device_buffers: bool = False  # moves data from and to GPU memory (device_memory)
    stores_data: bool = True  # False only for null: reads return nothing to verify
    rename: bool = False  # can move a whole file into place (rename); object stores cannot
    # moves an object into place by a server-side copy and a delete of the source (Backend.rename): how
    # s3torchconnector's S3FileSystem renames, which DCP's writer does to .metadata.tmp
    rename_by_copy: bool = False
    positional: bool = False  # writers have write_at, readers read_at and size: queue_depth requests per file


@dataclass(frozen=True)
class ItemReader:
    """How a framework's client on a storage reads a load's items of one file (:meth:`Backend.item_reader`): whose
    reader it is, in plain words; the spans (start, end) it asks for the items (offset, length), each read by
    :meth:`Backend.open_span` (the engine's reads and summary.json's ``io.restore`` alike); the requests one span
    of that many bytes takes. One value, so the client's strategy is said once, where the backend that plays it is."""

    follows: str
    spans: Callable[[Iterable[tuple[int, int]]], list[tuple[int, int]] | None]
    requests: Callable[[int], int]


def probe_name() -> str:
    """A probe file's name, distinct per host and process (several hosts may probe one shared folder)."""
    return f".dlio_ckpt_probe.{socket.gethostname()}.{os.getpid()}"


class Options(BaseModel):
    """``storage.storage_options`` of one backend: unknown keys are errors, like every section."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    threads: int = Field(1, ge=1, le=256, description="files in flight per process")
    retries: int = Field(0, ge=0, le=20, description="times a file is rewritten or reread after a transient error")


def parse_options(cls: type[Options], storage_type: str, raw: dict[str, Any]) -> Options:
    """Validate a backend's options, naming the key, value and rule like the config does."""
    try:
        return cls.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(["workload.storage.storage_options", *(str(p) for p in err["loc"])])  # no loc: a rule of several
        if err["type"] == "extra_forbidden":
            rule = (f"unknown option for storage_type={storage_type}; allowed: "
                    f"{', '.join(sorted(cls.model_fields))}")
        else:
            rule = err["msg"]
        raise ConfigError(key, _unsecret(cls, err["loc"], err.get("input")), rule) from None


# the option names any storage's credentials go by: never shown or recorded, whichever storage type is
# validating them (a local_fs told secret_access_key=... names the option unknown, and must not print the key)
SECRET_OPTIONS = ("access_key_id", "secret_access_key", "session_token", "token")


def secret_fields(cls: type[Options]) -> set[str]:
    """The options that hold secrets (typed ``SecretStr``, or named as credentials are): shown as ``***``."""
    return {name for name, f in cls.model_fields.items() if "SecretStr" in str(f.annotation)} | set(SECRET_OPTIONS)


def _unsecret(cls: type[Options], loc: tuple, value: Any) -> Any:
    """A rejected value as an error message may show it: a secret option's value (or, where a rule
    about several options rejects them all, the secrets among them) as ``***``. Why: the message goes
    to stderr, which mpiexec, CI and batch systems keep in their logs."""
    hidden = secret_fields(cls)
    if loc and loc[-1] in hidden:
        return "***"
    if isinstance(value, dict):
        return {k: "***" if k in hidden and v is not None else v for k, v in value.items()}
    return value


class DeviceMemory(Protocol):
    """The GPU a device-buffer backend (``capabilities.device_buffers``) lends the engine, so that
    synthetic data is made and checked where the backend reads and writes it."""

    xp: Any  # the array module of that memory (cupy)

    def scope(self) -> AbstractContextManager:
        """Select this process's GPU in the calling thread (CUDA's current device is per thread)."""
        ...


class Writer(Protocol):
    """Sequential writes; a positional backend's writer (``capabilities.positional``) also takes
    ``write_at(data, offset)`` from several threads at once."""

    def write(self, data: memoryview) -> None: ...
    def finish(self) -> None: ...  # the file is whole (an object is committed); durability is sync's
    def abort(self) -> None: ...


class Reader(Protocol):
    """Sequential reads. A reader whose client hands over its own buffers may also offer ``views()``
    (:class:`ViewsReader`). A positional backend's reader also offers ``read_at(buf, offset)`` (from several
    threads at once) and ``size()``.

    What a backend can do is asked one way at each level: the backend's by its :class:`Capabilities` flags, a
    writer's or reader's own further calls by the runtime-checked protocol that names them (:class:`SyncingWriter`,
    :class:`VectorWriter`, :class:`ViewsReader`), never by ``getattr``; so a wrapper (the timed backend) keeps
    every call its inner writer or reader offers, whichever of them it offers."""

    def readinto(self, buf: memoryview) -> int: ...
    def close(self) -> None: ...


@runtime_checkable
class SyncingWriter(Writer, Protocol):
    """A writer that makes what it wrote durable on its own descriptor before it is closed (a file system's),
    as a framework's writer does (DCP's ``os.fsync(stream.fileno())``); the engine syncs other files by
    name once they are closed (:meth:`Backend.sync`)."""

    def sync(self) -> None: ...


@runtime_checkable
class VectorWriter(Writer, Protocol):
    """A writer that gathers pieces into one call (a file's ``writev(2)``), as C++'s file stream does under
    ``torch.save(obj, path)``; elsewhere the engine writes the pieces in order."""

    def writev(self, parts: list[memoryview]) -> None: ...


@runtime_checkable
class ViewsReader(Reader, Protocol):
    """A reader whose client hands over its own buffers (object stores): the file's bytes, in order, in those
    buffers, so the engine verifies them where they landed instead of copying each into its own buffer first."""

    def views(self) -> Iterator[memoryview]: ...


class PositionalWriter(Writer, Protocol):
    """The writer of a positional backend (``capabilities.positional``)."""

    def write_at(self, data: memoryview, offset: int) -> None: ...  # from several threads at once


class PositionalReader(Reader, Protocol):
    """The reader of a positional backend (``capabilities.positional``)."""

    def read_at(self, buf: Any, offset: int) -> int: ...  # fill buf from offset unless the file ends first
    def size(self) -> int: ...  # the file's bytes, as the file system says (no I/O)


class Source(Protocol):
    """Where the engine reads files from and writes nothing (:meth:`dlio_ckpt.io.engine.Engine.copy_files`): a
    tier's backend, or a peer that sends its files (:class:`dlio_ckpt.run.emulated.peers.PeerSource`)."""

    def open_read(self, path: str, odirect: bool) -> Reader: ...


class RangedReader(Protocol):
    """Byte ranges of one file, each read where asked (a ranged GET each on object stores)."""

    def read_at(self, buf: Any, offset: int) -> int: ...  # fill buf from offset unless the file ends first
    def close(self) -> None: ...


class Backend(ABC):
    """Every storage backend: the core each one implements (abstract here), and optional operations
    whose defaults suit a store that lacks them (fsspec's AbstractFileSystem shape)."""

    name: str
    capabilities: Capabilities
    options: Options  # options.threads: how many files each process moves at once
    requests: Any = None  # object stores: a RequestLog of every request this process made

    @abstractmethod
    def check(self, writing: bool) -> None:
        """Fail before anything is written when storage cannot be used (no bucket, no server)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """What summary.json records about the storage (never credentials)."""

    @abstractmethod
    def join(self, *parts: str) -> str: ...
    @abstractmethod
    def open_write(self, path: str, odirect: bool) -> Writer: ...
    @abstractmethod
    def open_read(self, path: str, odirect: bool) -> Reader:
        """A missing file fails here (StorageError). Readers find the file's end by reading: the
        engine checks sizes against the plan that way, asking nothing first."""
    @abstractmethod
    def size(self, path: str) -> int | None: ...

    @abstractmethod
    def list_tree(self, path: str) -> list[str]:
        """Everything under a folder, as paths relative to it: every file, and (where the storage has
        folders) every folder with a trailing ``/``; [] when there is none. Why one listing: what the
        tool may remove is decided from all of it at once (:mod:`dlio_ckpt.run.steps`), and on an object
        store a listing of the whole prefix costs the same requests as one of its top level."""

    def list_names(self, path: str) -> list[str]:
        """Names directly under a folder (files and sub-folders)."""
        return sorted({p.split("/")[0] for p in self.list_tree(path)} - {""})

    @abstractmethod
    def put_small(self, path: str, data: bytes) -> None: ...
    @abstractmethod
    def get_small(self, path: str) -> bytes | None: ...
    @abstractmethod
    def remove(self, path: str) -> None: ...

    # -- optional: the defaults are right for a store without folders, cache or fsync ----------

    def makedirs(self, path: str) -> None:  # noqa: B027 (a no-op default, on purpose)
        """Object stores have no folders."""

    def put_marker(self, path: str, data: bytes) -> None:
        """A small file of the tool's own bookkeeping (a step's manifest), whole or absent for readers but not
        made durable: a framework's save syncs its own files, never the tool's, so a synced manifest would be a
        call the framework does not make (a step's durability is its files'; a manifest lost in a crash leaves
        the step incomplete). Where a small write is atomic and durable at once (object stores), ``put_small``."""
        self.put_small(path, data)

    def probe_write(self, folder: str, keep_folders: bool = False) -> list[str]:
        """Make sure ``folder`` (relative to the root, as ``join`` takes it) can be written: write and
        remove a small object there. Returns the folders it created and left (``keep_folders``: so
        that other hosts probe into them; the caller removes them once they have): none here.
        Raises StorageError naming the path and cause."""
        path = self.join(folder, probe_name())
        self.put_small(path, b"dlio_ckpt probe")
        self.remove(path)
        return []

    def item_reader(self) -> ItemReader | None:
        """How a framework's client on this storage reads a load's items (its spans, each read by
        :meth:`open_span`, and the requests a span takes: summary.json's ``io.restore`` counts them as the engine
        reads); None where the engine reads them item by item itself (file systems: ``torch.load``'s reads; GCS:
        as the stream)."""
        return None

    def open_span(self, path: str, start: int, end: int) -> Reader:
        """The bytes [start, end) of a file as one request stream (where :meth:`item_reader` gives spans)."""
        raise NotImplementedError(f"storage_type={self.name} reads no spans")

    def rename(self, source: str, target: str, nbytes: int = 0) -> None:
        """Move a whole file of ``nbytes`` into place (as DCP renames ``.metadata.tmp``), where
        ``capabilities.rename``, or by a copy and a delete where ``capabilities.rename_by_copy``; elsewhere the
        final name is written directly."""
        raise NotImplementedError(f"storage_type={self.name} cannot rename")

    def remove_empty(self, path: str) -> None:  # noqa: B027
        """Remove a folder if it is empty (object stores have none): the tool never removes a folder
        that still holds something, whoever put it there."""

    def evict(self, path: str) -> None:  # noqa: B027
        """Drop a file's cached pages (where ``capabilities.evict_cache``)."""

    def sync(self, path: str) -> None:  # noqa: B027
        """Make a written file durable (where ``capabilities.fsync``; object stores are on close)."""

    def free_bytes(self, path: str) -> int | None:
        """Bytes that can still be written under ``path``; None where the storage cannot say."""
        return None

    def in_memory(self, path: str) -> bool:
        """Whether what is written under ``path`` takes this host's memory (a tmpfs: a memory tier)."""
        return False

    @property
    def queue_depth(self) -> int:
        """Requests of one file in flight at once, where ``capabilities.positional``."""
        return 1

    @property
    def buffer_size(self) -> int:
        """The buffer of a file a framework opens here with ``open(path, "wb")``: CPython's default where the
        storage gives no block size (a file system's is its ``st_blksize``)."""
        return io.DEFAULT_BUFFER_SIZE

    @property
    def read_queue_depth(self) -> int:
        """The same when reading, where a storage's options set it apart."""
        return self.queue_depth

    def open_ranged(self, path: str, odirect: bool) -> RangedReader:
        """A reader of byte ranges of ``path``, for restores that need slices of files: a positional
        backend's own reader; object stores make a ranged GET per read."""
        if self.capabilities.positional:
            return cast(PositionalReader, self.open_read(path, odirect))
        raise NotImplementedError(f"storage_type={self.name} cannot read byte ranges")

    def url(self, path: str) -> str:
        """What a framework opens: a local path, or ``s3://`` / ``gs://`` URL."""
        return path

    def fsspec_options(self) -> dict[str, Any]:
        """fsspec's options for :meth:`url` (endpoint, credentials, path style), for frameworks."""
        return {}

    def device_memory(self) -> DeviceMemory:
        """Only where ``capabilities.device_buffers``: the GPU memory writes come from and reads go to."""
        raise NotImplementedError(f"storage_type={self.name} moves host memory only")
