"""The tool's four extension points, one table each: storage backends, checkpoint layouts, file
formats and ways of running (modes).

Why one helper for four tables: each name is written once, here, and everything that offers a choice
derives from it (the config's allowed values, ``keys``, ``tune``'s grid, ``check``'s object-store rule,
provenance's client library); an entry's module is imported only when it is asked for, because torch or
a storage client takes seconds to import and may not be installed, and then the import error becomes
the ``pip install`` that provides it, naming the key (exit 2); and a package installed beside this one
adds entries through entry points (groups ``dlio_ckpt.backends``, ``dlio_ckpt.layouts``,
``dlio_ckpt.formats``, ``dlio_ckpt.modes``; each entry point names an entry object of that kind), as
fsspec's registry takes storage implementations, so nobody forks the tool to add a storage system.

This module imports nothing of the package but ``errors``: every layer may read it.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import metadata
from typing import Any, Generic, Literal, TypeVar, get_args

from dlio_ckpt.errors import ConfigError

MIB = 1 << 20


@dataclass(frozen=True, kw_only=True)
class Entry:
    """What every entry has: where its object lives (``module:attribute``, imported on use) and what
    provides that module's imports."""

    target: str
    install: str = ""  # the pip command that provides its imports


StorageKind = Literal["file_system", "object_store", "gpu_direct", "none"]


@dataclass(frozen=True, kw_only=True)
class BackendEntry(Entry):
    """A storage backend (``target``: its :class:`dlio_ckpt.io.backends.Backend` subclass) and the facts
    about the storage that the rest of the tool asks, here and nowhere else."""

    options: str = "dlio_ckpt.io.backends.base:Options"  # its storage_options model (no client imported)
    kind: StorageKind = "file_system"  # a file system of the host, an object store, GPUDirect, nothing
    library: str = "posix"  # the client library provenance records (storage_options.library overrides)
    local_folder: bool = False  # storage_root is a folder of this host's (compared as an absolute path)
    tier: bool = True  # a drain can read its files back and verify them on the host
    tuning: tuple[tuple[str, tuple[Any, ...]], ...] = ()  # what ``tune`` tries: workload keys and their values


@dataclass(frozen=True, kw_only=True)
class LayoutEntry(Entry):
    """A checkpoint layout (``target``: a :class:`dlio_ckpt.plan.layouts.base.Layout`)."""

    emulates: str = ""  # what job's files it writes, for ``keys`` and the docs


@dataclass(frozen=True, kw_only=True)
class FormatEntry(Entry):
    """A file format (``target``: a class with ``name``, ``extension`` and ``segments(file)``)."""


@dataclass(frozen=True, kw_only=True)
class ModeEntry(Entry):
    """A way of running (``target``: a module keeping :class:`dlio_ckpt.run.context.Mode`'s contract)."""

    storage: tuple[StorageKind, ...] = get_args(StorageKind)  # the kinds of storage it saves to
    predict: str = ""  # a real mode's "what plan says" without its framework: "module:function"


E = TypeVar("E", bound=Entry)


@cache
def _entry_points() -> dict[str, list[metadata.EntryPoint]]:
    """Every installed package's entry points by group, read once per process for all the registries (each read
    walks every package's metadata: 10 ms here, four registries in every run)."""
    found = metadata.entry_points()
    return {group: list(found.select(group=group)) for group in found.groups}


class Registry(Generic[E]):
    """Names → entries of one kind: the built-in table, then other packages' entry points.

    ``key`` is the configuration key that names an entry (for messages); ``group`` the entry-point group
    other packages register under. An entry point's name is the entry's name, its value an object of
    ``entry_type`` (e.g. ``mystore = "my_pkg.dlio:BACKEND"``); built-in names cannot be replaced."""

    def __init__(self, kind: str, key: str, entry_type: type[E], builtin: dict[str, E]) -> None:
        self.kind, self.key, self.entry_type, self.group = kind, key, entry_type, f"dlio_ckpt.{kind}"
        self._entries: dict[str, E] = dict(builtin)

    @cached_property
    def _plugins(self) -> dict[str, metadata.EntryPoint]:
        """Other packages' entry points (their modules load on first use)."""
        return {ep.name: ep for ep in _entry_points().get(self.group, ()) if ep.name not in self._entries}

    @property
    def names(self) -> tuple[str, ...]:
        """Every name, built-in first: the only list of them (the config's choices derive from it)."""
        return (*self._entries, *sorted(self._plugins))

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._plugins

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __getitem__(self, name: str) -> E:
        if name not in self._entries:
            if name not in self._plugins:
                raise ConfigError(self.key, name, f"unknown {self.kind[:-1]}; choose one of {', '.join(self.names)}")
            ep = self._plugins[name]
            entry = ep.load()
            if not isinstance(entry, self.entry_type):
                raise ConfigError(self.key, name, f"entry point {ep.value!r} (group {self.group}) must name a "
                                  f"dlio_ckpt.registry.{self.entry_type.__name__}, not {type(entry).__name__}")
            self._entries[name] = entry
        return self._entries[name]

    def items(self) -> Iterator[tuple[str, E]]:
        return ((name, self[name]) for name in self.names)

    def load(self, name: str, target: str | None = None) -> Any:
        """The entry's object (or another ``module:attribute`` of it, such as a backend's options model),
        imported now; a missing package is an error naming the key and the install command."""
        entry = self[name]
        module, _, attribute = (target or entry.target).partition(":")
        try:
            loaded = importlib.import_module(module)
        except ImportError as exc:
            raise self._not_installed(name, exc.name) from None
        return getattr(loaded, attribute) if attribute else loaded

    def require(self, name: str, *packages: str) -> None:
        """The entry's ``packages`` are installed: found, not imported. An entry that imports its framework only
        when it runs (seconds) asks this first, so that a missing one is refused as :meth:`load` refuses it."""
        for package in packages:
            if importlib.util.find_spec(package) is None:
                raise self._not_installed(name, package)

    def _not_installed(self, name: str, package: str | None) -> ConfigError:
        install = self[name].install
        return ConfigError(self.key, name, f"needs {package}, which is not installed"
                           + (f" ({install})" if install else ""))


_FILE_SYSTEM_TUNING = (("checkpoint.odirect", (False, True)),
                       ("checkpoint.chunk_size", (1 * MIB, 4 * MIB, 8 * MIB, 32 * MIB)),
                       ("storage.storage_options.queue_depth", (1, 4, 16)))
_OPTIONS = "dlio_ckpt.io.backends.options"
_GDS_INSTALL = ("pip install 'dlio_ckpt[gds-cu13]' (CUDA 13) or 'dlio_ckpt[gds-cu12]' (CUDA 12) on a machine with "
                "a CUDA GPU")

BACKENDS: Registry[BackendEntry] = Registry("backends", "workload.storage.storage_type", BackendEntry, {
    "local_fs": BackendEntry(target="dlio_ckpt.io.backends.local_fs:LocalFSBackend",
                             options=f"{_OPTIONS}:LocalFSOptions", local_folder=True, tuning=_FILE_SYSTEM_TUNING),
    "parallel_fs": BackendEntry(target="dlio_ckpt.io.backends.local_fs:LocalFSBackend",  # DLIO's Lustre/GPFS name
                                options=f"{_OPTIONS}:LocalFSOptions", local_folder=True, tuning=_FILE_SYSTEM_TUNING),
    "s3": BackendEntry(target="dlio_ckpt.io.backends.s3:S3Backend", install="pip install 'dlio_ckpt[s3]'",
                       options=f"{_OPTIONS}:S3Options", kind="object_store", library="s3torchconnector",
                       tuning=(("storage.storage_options.part_size", (8 * MIB, 16 * MIB, 32 * MIB)),
                               ("storage.storage_options.threads", (1, 2, 4)))),
    "gcs": BackendEntry(target="dlio_ckpt.io.backends.gcs:GCSBackend", install="pip install 'dlio_ckpt[gcs]'",
                        options=f"{_OPTIONS}:GCSOptions", kind="object_store", library="gcsfs",
                        tuning=(("storage.storage_options.block_size", (8 * MIB, 16 * MIB, 32 * MIB)),
                                ("storage.storage_options.threads", (1, 2, 4)))),
    "gds": BackendEntry(target="dlio_ckpt.io.backends.gds:GDSBackend", install=_GDS_INSTALL,
                        options=f"{_OPTIONS}:GDSOptions", kind="gpu_direct", library="kvikio",
                        local_folder=True, tier=False),
    "null": BackendEntry(target="dlio_ckpt.io.backends.null:NullBackend", kind="none", library="none",
                         tier=False),
})

_LAYOUTS = "dlio_ckpt.plan.layouts"
LAYOUTS: Registry[LayoutEntry] = Registry("layouts", "workload.checkpoint.layout", LayoutEntry, {
    "dlio": LayoutEntry(target=f"{_LAYOUTS}.dlio:LAYOUT",
                        emulates="DLIO's model of a DeepSpeed job, MLPerf Storage v2.0's, byte for byte"),
    "deepspeed": LayoutEntry(target=f"{_LAYOUTS}.deepspeed:LAYOUT",
                             emulates="what DeepSpeed 0.19.8's engine writes for ZeRO 1-3, its names"),
    "dcp": LayoutEntry(target=f"{_LAYOUTS}.dcp:LAYOUT",
                       emulates="torch.distributed.checkpoint of an FSDP2 job: torchtitan, Lightning FSDP"),
    "megatron": LayoutEntry(target=f"{_LAYOUTS}.megatron:LAYOUT",
                            emulates="Megatron-core's torch_dist of a GPT job with the distributed optimizer"),
    "lightning": LayoutEntry(target=f"{_LAYOUTS}.lightning:LAYOUT",
                             emulates="the one .ckpt global rank 0 of a Lightning job writes, of its demo transformer"),
})

_FORMATS = "dlio_ckpt.plan.formats"
FORMATS: Registry[FormatEntry] = Registry("formats", "workload.checkpoint.format", FormatEntry, {
    "pt": FormatEntry(target=f"{_FORMATS}.pt:PtFormat"),
    "raw": FormatEntry(target=f"{_FORMATS}:RawFormat"),
    "safetensors": FormatEntry(target=f"{_FORMATS}.safetensors:SafetensorsFormat"),
    "hdf5": FormatEntry(target=f"{_FORMATS}.hdf5:HDF5Format", install="pip install 'dlio_ckpt[hdf5]'"),
})

_PREDICT = "dlio_ckpt.run.real.predict"
MODES: Registry[ModeEntry] = Registry("modes", "workload.mode", ModeEntry, {
    "emulated": ModeEntry(target="dlio_ckpt.run.emulated.runner"),
    "lightning": ModeEntry(target="dlio_ckpt.run.real.lightning_mode", install="pip install 'dlio_ckpt[lightning]'",
                           storage=("file_system", "object_store"), predict=f"{_PREDICT}:lightning"),
    "fsdp": ModeEntry(target="dlio_ckpt.run.real.fsdp_mode", install="pip install 'dlio_ckpt[fsdp]'",
                      storage=("file_system", "object_store"), predict=f"{_PREDICT}:fsdp"),
    "gds": ModeEntry(target="dlio_ckpt.run.real.gds_mode", install=_GDS_INSTALL,
                     storage=("file_system", "gpu_direct"), predict=f"{_PREDICT}:gds"),
})
