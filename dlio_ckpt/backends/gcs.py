"""Google Cloud Storage through gcsfs (the fsspec implementation Lightning and DCP users reach for).

Writes are resumable uploads: gcsfs buffers ``block_size`` bytes and sends them as one chunk, so
memory per open object is one block. Reads are ranged GETs of the engine's chunk size. gcsfs's own
md5 check of uploads is off by default (``consistency``): the read phase verifies every byte anyway,
and hashing would be our CPU time, not the store's.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import Field

from ..errors import ConfigError, StorageError
from .base import parse_options
from .object_store import MIB, ObjectStore, ObjectStoreOptions

# Without this, gcsfs >= 2025.x probes every bucket for hierarchical namespaces over gRPC, which
# emulators do not serve (each call then waits ~60 s). Users who want the probe can set it first.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import gcsfs  # noqa: E402  (must follow the variable above)

_RESUMABLE_UNIT = 256 << 10


class GCSOptions(ObjectStoreOptions):
    # STORAGE_EMULATOR_HOST (the Google SDKs' variable) is honoured by gcsfs itself when this is unset
    project: str = Field(default_factory=lambda: os.environ.get("GOOGLE_CLOUD_PROJECT", ""))
    token: str | None = Field(
        None, description="gcsfs token: anon, google_default, cloud, or a service-account JSON path; "
        "default: anon with an endpoint_url, else Google's default credentials")
    block_size: int = Field(16 * MIB, ge=_RESUMABLE_UNIT, multiple_of=_RESUMABLE_UNIT,
                            description="bytes per resumable-upload request")
    consistency: Literal["none", "md5", "crc32c"] = "none"
    timeout: float = Field(60.0, gt=0, description="seconds per HTTP request")


def _explain(exc: Exception) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    if "Cannot connect" in text or "Connection refused" in text:
        return f"cannot connect to the server ({text})"
    return text


class GCSWriter:
    def __init__(self, backend: GCSBackend, path: str) -> None:
        self.url = backend.url(path)
        o = backend.options
        try:
            self._fh = backend.fs.open(self.url, "wb", block_size=o.block_size, consistency=o.consistency)
        except Exception as exc:
            raise StorageError(f"cannot create {self.url}: {_explain(exc)}") from None

    def write(self, data: memoryview) -> None:
        try:
            self._fh.write(data)
        except Exception as exc:
            raise StorageError(f"write failed on {self.url}: {_explain(exc)}") from None

    def finish(self, fsync: bool) -> None:
        try:
            self._fh.close()  # sends the last chunk and finalizes the upload
        except Exception as exc:
            raise StorageError(f"upload failed on {self.url}: {_explain(exc)}") from None

    def abort(self) -> None:
        """Forget the upload session: an unfinalized resumable upload never becomes an object."""
        try:
            self._fh.discard()
        except Exception:  # the server may be the reason we are aborting
            pass
        self._fh.closed = True


class GCSReader:
    def __init__(self, backend: GCSBackend, path: str) -> None:
        self.url = backend.url(path)
        try:
            self._fh = backend.fs.open(self.url, "rb", block_size=0, cache_type="none")
        except FileNotFoundError:
            raise StorageError(f"cannot open {self.url}: no such object") from None
        except Exception as exc:
            raise StorageError(f"cannot open {self.url}: {_explain(exc)}") from None

    def readinto(self, buf: memoryview) -> int:
        try:
            total = 0
            while total < len(buf):
                n = self._fh.readinto(buf[total:])
                if not n:
                    break
                total += n
            return total
        except Exception as exc:
            raise StorageError(f"read failed on {self.url}: {_explain(exc)}") from None

    def close(self) -> None:
        self._fh.close()


class GCSBackend(ObjectStore):
    name = "gcs"
    scheme = "gs"
    options: GCSOptions

    def __init__(self, root: str, options: dict[str, Any]) -> None:
        super().__init__(root, parse_options(GCSOptions, self.name, options))
        o = self.options
        self.endpoint = o.endpoint_url or os.environ.get("STORAGE_EMULATOR_HOST")
        token = o.token or ("anon" if self.endpoint else None)
        self.fs = gcsfs.GCSFileSystem(project=o.project, token=token, endpoint_url=o.endpoint_url,
                                      requests_timeout=o.timeout, skip_instance_cache=True)

    def describe(self) -> dict[str, Any]:
        o = self.options
        return {**super().describe(), "endpoint_url": self.endpoint, "block_size": o.block_size,
                "consistency": o.consistency}

    def check(self, writing: bool) -> None:
        where = f"gs://{self.bucket} at {self.endpoint or 'Google Cloud Storage'}"
        try:
            self.fs.ls(self.bucket, detail=False, max_results=1)
        except FileNotFoundError:
            raise ConfigError("workload.storage.storage_root", self.bucket,
                              f"bucket does not exist ({where}): create it first") from None
        except Exception as exc:
            raise StorageError(f"cannot use {where}: {_explain(exc)}") from None

    def open_write(self, path: str, odirect: bool) -> GCSWriter:
        return GCSWriter(self, path)

    def open_read(self, path: str, odirect: bool) -> GCSReader:
        return GCSReader(self, path)

    def size(self, path: str) -> int | None:
        try:
            return int(self.fs.info(self.url(path))["size"])
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise StorageError(f"cannot stat {self.url(path)}: {_explain(exc)}") from None

    def put_small(self, path: str, data: bytes) -> None:
        """One simple upload: the object appears whole or not at all."""
        try:
            self.fs.pipe_file(self.url(path), data)
        except Exception as exc:
            raise StorageError(f"cannot write {self.url(path)}: {_explain(exc)}") from None

    def get_small(self, path: str) -> bytes | None:
        try:
            return self.fs.cat_file(self.url(path))
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise StorageError(f"cannot read {self.url(path)}: {_explain(exc)}") from None

    def remove(self, path: str) -> None:
        try:
            self.fs.rm_file(self.url(path))
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise StorageError(f"cannot delete {self.url(path)}: {_explain(exc)}") from None
