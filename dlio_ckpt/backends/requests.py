"""Every object-store request a process makes, by kind: count, bytes, latency, failures by cause.

Why: on an object store the request is what gets throttled, retried, billed and rate-limited per
prefix. Where the client shows each HTTP request (gcsfs, through aiohttp's trace hooks) every attempt
is counted exactly, retries and failures included. Where it hides them (s3torchconnector's CRT splits
each object into parts and retries on its own) our own calls are counted exactly and the CRT's
requests are *derived* by its documented rule (a streamed PUT is CreateMultipartUpload + one
UploadPart per ``part_size`` + CompleteMultipartUpload; a GET range is split into ``part_size``
ranged GETs); derived kinds are labelled so, and the CRT's retries stay invisible here.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

THROTTLED, SERVER, CLIENT, TIMEOUT, CONNECTION, OTHER = (
    "throttled (503 SlowDown / 429)", "other 5xx", "4xx", "timeout", "connection refused or reset", "other")


@dataclass(frozen=True)
class Request:
    kind: str
    bytes: int
    seconds: float
    failure: str | None = None  # one of the causes above
    derived: bool = False  # counted by the client's rule, not seen


def cause_of_status(status: int) -> str | None:
    if status in (429, 503):
        return THROTTLED
    if status >= 500:
        return SERVER
    if status >= 400 and status != 404:  # a missing object is an answer, not a failure
        return CLIENT
    return None


def cause_of_error(text: str) -> str:
    low = text.lower()
    if "slowdown" in low or "throttl" in low or "503" in low or "429" in low:
        return THROTTLED
    if "timeout" in low or "timed out" in low:
        return TIMEOUT
    if "refused" in low or "reset" in low or "disconnect" in low or "connection" in low or "socket" in low:
        return CONNECTION
    if "500" in low or "internalerror" in low:
        return SERVER
    return OTHER


class RequestLog:
    """Requests of this process since the last :meth:`take`; threads append concurrently."""

    def __init__(self) -> None:
        self._items: list[Request] = []
        self._lock = threading.Lock()

    def add(self, kind: str, nbytes: int, seconds: float, failure: str | None = None) -> None:
        with self._lock:
            self._items.append(Request(kind, nbytes, seconds, failure))

    def derive(self, kind: str, count: int, nbytes: int) -> None:
        """``count`` requests the client made for us and did not show (no latency known)."""
        with self._lock:
            self._items.extend(Request(kind, nbytes // max(count, 1), 0.0, None, True) for _ in range(count))

    def take(self) -> list[Request]:
        with self._lock:
            out, self._items = self._items, []
        return out


def parts(nbytes: int, part_size: int) -> int:
    return max(1, math.ceil(nbytes / part_size))


def summarize(requests: list[Request], seconds: float | None = None) -> dict[str, Any]:
    """Per kind: count, bytes, latency percentiles (ms; seen requests only), requests per second over
    ``seconds``, failures by cause; ``derived`` where counted by the client's rule."""
    by_kind: dict[str, list[Request]] = {}
    for r in requests:
        by_kind.setdefault(r.kind, []).append(r)
    out: dict[str, Any] = {}
    for kind, items in sorted(by_kind.items()):
        entry: dict[str, Any] = {"count": len(items), "bytes": sum(r.bytes for r in items)}
        seen = sorted(r.seconds * 1000 for r in items if not r.derived)
        if seen:
            q = statistics.quantiles(seen, n=100, method="inclusive") if len(seen) > 1 else seen * 99
            entry.update({"p50_ms": q[49], "p90_ms": q[89], "p99_ms": q[98], "max_ms": seen[-1]})
        if seconds:
            entry["per_second"] = len(items) / seconds
        failures: dict[str, int] = {}
        for r in items:
            if r.failure:
                failures[r.failure] = failures.get(r.failure, 0) + 1
        if failures:
            entry["failures"] = failures
        if items[0].derived:
            entry["derived"] = True
        out[kind] = entry
    return out


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
            self._log.add(kind, 0, time.perf_counter() - t0, cause_of_error(str(exc)))
            raise
        self._log.add(kind, 0, time.perf_counter() - t0)
        return result

    def head_object(self, bucket: str, key: str) -> Any:
        return self._call("HeadObject", self._c.head_object, bucket, key)

    def delete_object(self, bucket: str, key: str) -> Any:
        return self._call("DeleteObject", self._c.delete_object, bucket, key)

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

    def write(self, data: bytes) -> None:
        self._s.write(data)
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
