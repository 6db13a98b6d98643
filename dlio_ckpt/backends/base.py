"""The small protocol every storage backend implements (fio's op table, fsspec's shape)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigError


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; the engine asks these and never the backend's type."""

    fsync: bool  # can make a written file durable on request (checkpoint.fsync)
    durable_on_close: bool  # a file is durable once its writer finishes (object stores)
    odirect: bool  # can bypass the page cache (then buffers and offsets must be aligned)
    alignment: int  # required alignment of buffers, offsets and lengths under O_DIRECT
    evict_cache: bool  # can drop a file's cached pages so reads hit storage
    ranged_reads: bool  # can read part of a file without the rest
    device_buffers: bool  # moves data to and from GPU memory itself
    stores_data: bool = True  # False only for null: reads return nothing to verify


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
        key = "workload.storage.storage_options." + ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            rule = (f"unknown option for storage_type={storage_type}; allowed: "
                    f"{', '.join(sorted(cls.model_fields))}")
        else:
            rule = err["msg"]
        raise ConfigError(key, err.get("input"), rule) from None


class DeviceMemory(Protocol):
    """The GPU a device-buffer backend (``capabilities.device_buffers``) lends the engine, so that
    synthetic data is made and checked where the backend reads and writes it."""

    xp: Any  # the array module of that memory (cupy)

    def scope(self) -> AbstractContextManager:
        """Select this process's GPU in the calling thread (CUDA's current device is per thread)."""
        ...


class Writer(Protocol):
    def write(self, data: memoryview) -> None: ...
    def finish(self, fsync: bool) -> None: ...
    def abort(self) -> None: ...


class Reader(Protocol):
    def readinto(self, buf: memoryview) -> int: ...
    def close(self) -> None: ...


class Backend(Protocol):
    name: str
    capabilities: Capabilities
    options: Options  # options.threads: how many files each process moves at once

    def check(self, writing: bool) -> None:
        """Fail before anything is written when storage cannot be used (no bucket, no server)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What summary.json records about the storage (never credentials)."""
        ...

    def join(self, *parts: str) -> str: ...
    def makedirs(self, path: str) -> None: ...
    def open_write(self, path: str, odirect: bool) -> Writer: ...
    def open_read(self, path: str, odirect: bool) -> Reader: ...
    def evict(self, path: str) -> None: ...
    def sync(self, path: str) -> None: ...
    def size(self, path: str) -> int | None: ...
    def list_names(self, path: str) -> list[str]:
        """Names directly under a folder (files and sub-folders); [] when there is none."""
        ...

    def remove_tree(self, path: str) -> None:
        """Remove a folder and everything under it; nothing when it does not exist."""
        ...

    def device_memory(self) -> DeviceMemory:
        """Only where ``capabilities.device_buffers``: the GPU memory writes come from and reads go to."""
        ...

    def put_small(self, path: str, data: bytes) -> None: ...
    def get_small(self, path: str) -> bytes | None: ...
    def remove(self, path: str) -> None: ...
