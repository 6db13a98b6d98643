"""Every object-store request a process makes, by kind: count, bytes, latency, failures by cause.
(The wrappers that count the clients' requests are :mod:`dlio_ckpt.io.backends.counting`.)

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
import re
import statistics
import threading
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


def missing(text: str) -> bool:
    """A client's words for a 404: the object is not there, an answer, not a failure (as :func:`cause_of_status`
    counts it): DCP's writer asks whether ``.metadata`` exists before every save."""
    low = text.lower()
    return "not found" in low or "nosuchkey" in low


def cause_of_error(text: str) -> str:
    """The cause of a failed attempt from the client's words. URLs go first: a port or key with 503 or
    429 in it made a dropped connection count as throttled (seen once in the botocore proxy test)."""
    low = re.sub(r"\S+://\S*", "", text.lower())
    if "slowdown" in low or "throttl" in low or re.search(r"\b(503|429)\b", low):
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


MULTIPART_COPY = 1 << 30  # aws-c-s3 (s3_copy_object.c): from this size a copy is a multipart copy...
COPY_PART = 128 << 20  # ...in parts of this size (its minimum; more only past 10,000 parts: 1.25 TiB)


def copy_requests(nbytes: int) -> list[tuple[str, int]]:
    """The requests the CRT makes for a server-side copy of an object of ``nbytes``: a HeadObject of the source
    for its size, then one CopyObject, or from 1 GiB a multipart copy (aws-c-s3's ``s3_copy_object.c``)."""
    if nbytes < MULTIPART_COPY:
        return [("HeadObject", 1), ("CopyObject", 1)]
    return [("HeadObject", 1), ("CreateMultipartUpload", 1), ("UploadPartCopy", parts(nbytes, COPY_PART)),
            ("CompleteMultipartUpload", 1)]


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
