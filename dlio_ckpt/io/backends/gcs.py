"""Google Cloud Storage through gcsfs (the fsspec implementation Lightning and DCP users reach for).

Writes are resumable uploads: gcsfs buffers ``block_size`` bytes and sends them as one chunk, so
memory per open object is one block. Reads are ranged GETs of the engine's chunk size. gcsfs's own
md5 check of uploads is off by default (``consistency``): the read phase verifies every byte anyway,
and hashing would be our CPU time, not the store's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from fsspec.asyn import sync
from fsspec.exceptions import FSTimeoutError

from dlio_ckpt.errors import ConfigError, StorageError
from dlio_ckpt.io.backends.counting import gcs_trace
from dlio_ckpt.io.backends.object_store import ObjectStore
from dlio_ckpt.io.backends.options import GCSOptions
from dlio_ckpt.io.requests import RequestLog

# Without this, gcsfs >= 2025.x probes every bucket for hierarchical namespaces over gRPC, which
# emulators do not serve (each call then waits ~60 s). Users who want the probe can set it first.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import gcsfs  # noqa: E402  (must follow the variable above)
from gcsfs.retry import retry_request  # noqa: E402

logging.getLogger("gcsfs").setLevel(logging.CRITICAL)  # it logs tracebacks on retries; we report the cause


_TRANSIENT = (asyncio.TimeoutError, FSTimeoutError, aiohttp.ClientError, ConnectionError, TimeoutError)


def _probe(endpoint: str | None) -> str:
    """After a timeout, say whether the server is there at all."""
    if not endpoint:
        return ""
    url = urlsplit(endpoint)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), 2).close()
        return " (the server accepts connections but did not answer in time)"
    except ConnectionRefusedError:
        return f" (connection refused at {url.netloc})"
    except OSError as exc:
        return f" ({url.netloc}: {exc.strerror or exc})"


def _failure(what: str, url: str, exc: Exception, backend: GCSBackend) -> StorageError:
    if isinstance(exc, FSTimeoutError | asyncio.TimeoutError):
        cause = f"no answer within {backend.options.timeout:g} s{_probe(backend.endpoint)}"
    elif isinstance(exc, aiohttp.ClientConnectorError):
        cause = f"cannot connect to the server ({exc})"
    elif type(exc) is OSError and str(exc).startswith("Forbidden:"):  # gcsfs's 403: "Forbidden: {url}\n{message}"
        said = str(exc).partition("\n")[2].strip()
        cause = f"access denied (403 Forbidden: {said or 'no message'})"
    else:
        cause = f"{type(exc).__name__}: {exc}".strip()
    return StorageError(f"{what} {url}: {cause}", transient=isinstance(exc, _TRANSIENT))


class GCSWriter:
    def __init__(self, backend: GCSBackend, path: str) -> None:
        self.url, self._b = backend.url(path), backend
        o = backend.options
        try:
            self._fh = backend.fs.open(self.url, "wb", block_size=o.block_size, consistency=o.consistency,
                                       timeout=o.timeout)
        except Exception as exc:
            raise _failure("cannot create", self.url, exc, backend) from None

    def write(self, data: memoryview) -> None:
        try:
            self._fh.write(data)
        except Exception as exc:
            raise _failure("write failed on", self.url, exc, self._b) from None

    def finish(self) -> None:
        try:
            self._fh.close()  # sends the last chunk and finalizes the upload
        except Exception as exc:
            raise _failure("upload failed on", self.url, exc, self._b) from None

    def abort(self) -> None:
        """Forget the upload session: an unfinalized resumable upload never becomes an object."""
        try:
            self._fh.discard()
        except Exception:  # the server may be the reason we are aborting
            pass
        self._fh.closed = True


class GCSReader:
    """Sequential reads as ranged GETs, each bounded by ``timeout``: of the caller's buffer size
    (``readinto``), or of ``read_size`` with ``read_ahead`` more in flight while one is verified (``views``)."""

    def __init__(self, backend: GCSBackend, path: str) -> None:
        self.url, self._b, self._pos = backend.url(path), backend, 0
        size = backend.size(path)  # one metadata request, as gcsfs's own open makes: ranges need the end
        if size is None:
            raise StorageError(f"cannot open {self.url}: no such object")
        self._size, self._ranges = size, GCSRanged(backend, path)

    def readinto(self, buf: memoryview) -> int:
        n = min(len(buf), self._size - self._pos)
        if n <= 0:
            return 0
        n = self._ranges.read_at(buf[:n], self._pos)
        self._pos += n
        return n

    def views(self) -> Iterator[memoryview]:
        """The object's bytes as gcsfs returns them (no copy), ``read_ahead`` ranges requested beyond
        the one being verified."""
        o, requested = self._b.options, self._pos
        ahead: deque[Future[bytes]] = deque()
        try:
            while True:
                while len(ahead) <= o.read_ahead and requested < self._size:
                    end = min(requested + o.read_size, self._size)
                    fetching = self._b.fs._cat_file(self.url, start=requested, end=end)
                    ahead.append(asyncio.run_coroutine_threadsafe(fetching, self._b.fs.loop))
                    requested = end
                if not ahead:
                    return
                data = ahead.popleft().result(o.timeout)
                if not data:
                    raise StorageError(f"read failed on {self.url}: empty response at offset {self._pos}")
                self._pos += len(data)
                yield memoryview(data)
        except StorageError:
            raise
        except Exception as exc:
            raise _failure("read failed on", self.url, exc, self._b) from None
        finally:
            for request in ahead:
                request.cancel()

    def close(self) -> None:
        pass


class GCSRanged:
    """Byte ranges of one object: a ranged GET per read (gcsfs's ``_cat_file``), bounded by ``timeout``."""

    def __init__(self, backend: GCSBackend, path: str) -> None:
        self.url, self._b = backend.url(path), backend

    def read_at(self, buf: memoryview, offset: int) -> int:
        try:
            data = self._b.call(self._b.fs._cat_file, self.url, start=offset, end=offset + len(buf))
        except Exception as exc:
            raise _failure("read failed on", self.url, exc, self._b) from None
        buf[:len(data)] = data
        return len(data)

    def close(self) -> None:
        pass


class GCSFileSystemWithAttempts(gcsfs.GCSFileSystem):
    """gcsfs whose requests (``_request``: every one this backend makes) are tried ``max_attempts`` times, the first
    included, with gcsfs's own backoff between tries (1, 2, 4, 8... seconds and a random part) and its own rule for
    what is worth another try. gcsfs fixes its count, 6, when its class is made (its ``retry_request`` decorator): a
    server gone, its connections refused, was tried for some 30 s before the job heard of it. The real modes'
    frameworks open their own gcsfs, with its count."""

    _one_try = gcsfs.GCSFileSystem._request.__wrapped__  # gcsfs's request, without its decorator
    _tried = retry_request.__wrapped__  # the decorator's loop, called with a count of tries

    def __init__(self, *args: Any, max_attempts: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_attempts = max_attempts

    async def _request(self, *args: Any, **kwargs: Any) -> Any:
        return await GCSFileSystemWithAttempts._tried(GCSFileSystemWithAttempts._one_try, self.max_attempts, self,
                                                      *args, **kwargs)


class GCSBackend(ObjectStore):
    name = "gcs"
    scheme = "gs"
    options: GCSOptions

    def __init__(self, root: str, options: GCSOptions) -> None:
        super().__init__(root, options)
        o = self.options
        self.endpoint = o.endpoint_url or os.environ.get("STORAGE_EMULATOR_HOST")
        self.token = o.token or ("anon" if self.endpoint else None)
        self.requests = RequestLog()
        self.fs = GCSFileSystemWithAttempts(project=o.project, token=self.token, endpoint_url=o.endpoint_url,
                                            requests_timeout=o.timeout, max_attempts=o.max_attempts,
                                            skip_instance_cache=True,
                                            use_listings_cache=False,  # sizes from the store, never a stale listing
                                            session_kwargs={"trace_configs": [gcs_trace(self.requests)]})

    def call(self, coroutine: Any, *args: Any, **kwargs: Any) -> Any:
        """One gcsfs operation, its retries included, bounded by ``timeout`` seconds."""
        return sync(self.fs.loop, coroutine, *args, timeout=self.options.timeout, **kwargs)

    def fsspec_options(self) -> dict[str, Any]:
        """gcsfs's options, as this backend's own client has them."""
        o = self.options
        return {"project": o.project, "token": self.token, "endpoint_url": self.endpoint,
                "requests_timeout": o.timeout}

    def storage_client(self) -> Any:
        """A google-cloud-storage client reaching the same store as this backend, for clients built on
        it (Dataflux): anonymous where gcsfs would be, the emulator's endpoint where one is set."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        anonymous = self.token == "anon"
        return storage.Client(project=self.options.project or ("test" if anonymous else None),
                              credentials=AnonymousCredentials() if anonymous else None,
                              client_options={"api_endpoint": self.endpoint} if self.endpoint else None)

    def describe(self) -> dict[str, Any]:
        o = self.options
        return {**super().describe(), "endpoint_url": self.endpoint, "block_size": o.block_size,
                "consistency": o.consistency}

    def check(self, writing: bool) -> None:
        where = f"gs://{self.bucket} at {self.endpoint or 'Google Cloud Storage'}"
        try:
            self.call(self.fs._ls, self.bucket, detail=False, max_results=1)
        except FileNotFoundError:
            raise ConfigError("workload.storage.storage_root", self.bucket,
                              f"bucket does not exist ({where}): create it first") from None
        except Exception as exc:
            raise _failure("cannot use", where, exc, self) from None

    def open_write(self, path: str, odirect: bool) -> GCSWriter:
        return GCSWriter(self, path)

    def open_read(self, path: str, odirect: bool) -> GCSReader:
        return GCSReader(self, path)

    def open_ranged(self, path: str, odirect: bool) -> GCSRanged:
        return GCSRanged(self, path)

    def size(self, path: str) -> int | None:
        try:
            # the object's metadata alone: gcsfs's _info would also list the parent "folder"
            return int(self.call(self.fs._get_object, self.url(path))["size"])
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise _failure("cannot stat", self.url(path), exc, self) from None

    def put_small(self, path: str, data: bytes) -> None:
        """One simple upload: the object appears whole or not at all."""
        try:
            self.call(self.fs._pipe_file, self.url(path), data)
        except Exception as exc:
            raise _failure("cannot write", self.url(path), exc, self) from None

    def get_small(self, path: str) -> bytes | None:
        try:
            return self.call(self.fs._cat_file, self.url(path))
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise _failure("cannot read", self.url(path), exc, self) from None

    def remove(self, path: str) -> None:
        self.remove_key(self.key(path))

    def list_keys(self, prefix: str) -> list[str]:
        try:
            found = self.call(self.fs._find, f"{self.bucket}/{prefix}")
        except FileNotFoundError:
            return []
        except Exception as exc:
            raise _failure("cannot list", f"gs://{self.bucket}/{prefix}", exc, self) from None
        return [k.removeprefix(self.bucket + "/") for k in found]

    def remove_key(self, key: str) -> None:
        try:
            self.call(self.fs._rm_file, f"{self.bucket}/{key}")
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise _failure("cannot delete", f"gs://{self.bucket}/{key}", exc, self) from None
