"""The storage clients with their requests counted: s3torchconnector's native client (our calls
counted, the CRT's part requests derived by its rule) and gcsfs's aiohttp session (every HTTP request
seen through its trace hooks). What is counted, and how it is summarized, is :mod:`dlio_ckpt.io.requests`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from dlio_ckpt.io.requests import (
    CONNECTION,
    RequestLog,
    cause_of_error,
    cause_of_status,
    copy_requests,
    missing,
    parts,
)


class CountedS3Client:
    """s3torchconnector's native client with every call we make counted, and the CRT's own requests
    derived by its rule (see the module's docstring). Same interface as the client it wraps."""

    def __init__(self, client: Any, log: RequestLog, part_size: int) -> None:
        self._c, self._log, self._part = client, log, part_size

    def _call(self, kind: str, fn: Any, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            result = fn(*args)
        except Exception as exc:
            self._log.add(kind, 0, time.perf_counter() - t0, None if missing(str(exc)) else cause_of_error(str(exc)))
            raise
        self._log.add(kind, 0, time.perf_counter() - t0)
        return result

    def head_object(self, bucket: str, key: str) -> Any:
        return self._call("HeadObject", self._c.head_object, bucket, key)

    def delete_object(self, bucket: str, key: str) -> Any:
        return self._call("DeleteObject", self._c.delete_object, bucket, key)

    def copy_object(self, src_bucket: str, src_key: str, dst_bucket: str, dst_key: str, nbytes: int) -> Any:
        """A server-side copy of an object of ``nbytes``: the CRT's requests derived by its rule
        (:func:`~dlio_ckpt.io.requests.copy_requests`). The source's key URL-encoded, as s3torchconnector's
        ``S3FileSystem.rename`` sends it (the CRT puts it in ``x-amz-copy-source`` as given)."""
        result = self._call("call: copy_object", self._c.copy_object, src_bucket, quote(src_key, safe="/"),
                            dst_bucket, dst_key)
        for kind, count in copy_requests(nbytes):
            self._log.derive(kind, count, 0)
        return result

    def list_objects(self, bucket: str, prefix: str, delimiter: str, max_keys: int) -> Iterator[Any]:
        pages = iter(self._c.list_objects(bucket, prefix, delimiter, max_keys))
        while True:  # one ListObjectsV2 request per page; the iterator's end is none
            t0 = time.perf_counter()
            try:
                page = next(pages)
            except StopIteration:
                return
            except Exception as exc:
                self._log.add("ListObjects", 0, time.perf_counter() - t0, cause_of_error(str(exc)))
                raise
            self._log.add("ListObjects", 0, time.perf_counter() - t0)
            yield page

    def get_object(self, bucket: str, key: str, start: int | None = None, end: int | None = None) -> Iterator[bytes]:
        """Issued now; returns once its first part has arrived (so its time to first byte is the
        server's, not how long the caller took to come for it: ranged readers call this from a
        thread ahead of the range being verified); the rest counted as it is consumed."""
        t0 = time.perf_counter()
        try:
            stream = iter(self._c.get_object(bucket, key, start, end) if start is not None
                          else self._c.get_object(bucket, key))
            first = next(stream, b"")
        except Exception as exc:
            self._log.add("call: get_object (time to first byte)", 0, time.perf_counter() - t0,
                          cause_of_error(str(exc)))
            raise
        self._log.add("call: get_object (time to first byte)", 0, time.perf_counter() - t0)
        return self._consume(first, stream, t0)

    def _consume(self, first: bytes, stream: Iterator[bytes], t0: float) -> Iterator[bytes]:
        got, failure = len(first), None
        try:
            if first:
                yield first
            for part in stream:
                got += len(part)
                yield part
        except Exception as exc:
            failure = cause_of_error(str(exc))
            self._log.add("call: get_object (time to first byte)", 0, time.perf_counter() - t0, failure)
            raise
        finally:
            if failure is None and got:
                self._log.derive("GetObject (ranged)", parts(got, self._part), got)

    def put_object(self, bucket: str, key: str) -> Any:
        return _CountedPut(self._c.put_object(bucket, key), self._log, self._part)


class _CountedPut:
    def __init__(self, stream: Any, log: RequestLog, part_size: int) -> None:
        self._s, self._log, self._part, self._n, self._t0 = stream, log, part_size, 0, time.perf_counter()

    def write(self, data: memoryview) -> None:
        self._s.write(bytes(data))  # the native stream takes bytes only (s3torchconnector's S3Writer copies so too)
        self._n += len(data)

    def close(self) -> None:
        try:
            self._s.close()
        except Exception as exc:
            self._log.add("call: put_object (open to complete)", self._n, time.perf_counter() - self._t0,
                          cause_of_error(str(exc)))
            raise
        self._log.add("call: put_object (open to complete)", self._n, time.perf_counter() - self._t0)
        self._log.derive("CreateMultipartUpload", 1, 0)
        self._log.derive("UploadPart", parts(self._n, self._part), self._n)
        self._log.derive("CompleteMultipartUpload", 1, 0)


def gcs_kind(method: str, url: Any, headers: Any) -> str:
    """A GCS JSON API request by its kind (gcsfs's resumable uploads, ranged reads, listings)."""
    query, path = url.query, url.path
    if "upload_id" in query:
        return "resumable upload chunk"
    if query.get("uploadType") == "resumable":
        return "resumable upload start"
    if "uploadType" in query:
        return "simple upload"
    if method == "GET" and path.rstrip("/").endswith("/o"):
        return "list objects"
    if method == "GET" and query.get("alt") == "media":
        return "get object (ranged)" if "Range" in headers else "get object"
    if method == "GET":
        return "object metadata"
    return "delete object" if method == "DELETE" else method


def gcs_trace(log: RequestLog) -> Any:
    """aiohttp hooks that see every HTTP request gcsfs sends, each retry included: gcsfs's own, and
    aiohttp's silent one (an idempotent request resent once when a kept-alive connection drops),
    seen as a second sending of headers within one request."""
    import aiohttp

    trace = aiohttp.TraceConfig()

    async def start(_session: Any, ctx: Any, params: Any) -> None:
        ctx.t0, ctx.attempts = time.perf_counter(), 0

    async def sent(_session: Any, ctx: Any, params: Any) -> None:
        ctx.attempts += 1

    def resent(ctx: Any, kind: str) -> None:
        for _ in range(ctx.attempts - 1):
            log.add(kind, 0, 0.0, CONNECTION)

    async def end(_session: Any, ctx: Any, params: Any) -> None:
        kind = gcs_kind(params.method, params.url, params.headers)
        resent(ctx, kind)
        size = int(params.response.headers.get("Content-Length", 0) or 0) if params.method == "GET" else \
            int(params.headers.get("Content-Length", 0) or 0)
        log.add(kind, size, time.perf_counter() - ctx.t0, cause_of_status(params.response.status))

    async def error(_session: Any, ctx: Any, params: Any) -> None:
        kind = gcs_kind(params.method, params.url, params.headers)
        resent(ctx, kind)
        log.add(kind, 0, time.perf_counter() - ctx.t0,
                cause_of_error(f"{type(params.exception).__name__} {params.exception}"))

    trace.on_request_start.append(start)
    trace.on_request_headers_sent.append(sent)
    trace.on_request_end.append(end)
    trace.on_request_exception.append(error)
    return trace
