"""S3 through botocore (the AWS SDK for Python's core, under boto3 and s3fs), with every HTTP attempt
counted: ``storage_options.library=botocore``.

Why a second client: s3torchconnector's CRT retries a throttled or dropped request inside itself and
never says so, so on a throttled bucket our summary counts fewer requests than the server answered and
no throttling at all. botocore emits an event for each attempt it sends (``before-send``) and for each
answer or error it gets (``needs-retry``, whether or not it retries), so here every request the
server sees is in ``summary.json``, each 503 counted as throttled, kind by kind as the server names
them. What the CRT does inside one call is done here in the open, with the same interface as its
client (what :class:`dlio_ckpt.io.backends.s3.S3Backend` calls): an object larger than a part is a
multipart upload of ``part_size`` parts, ``parts_in_flight`` of them at once; a read is ranged GETs
of ``part_size`` (the first one tells the object's size, so no HEAD), ``parts_in_flight`` ahead of the
one consumed. Checksums are computed only where S3 requires them, as the CRT does by default.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import botocore.session
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    IncompleteReadError,
    NoCredentialsError,
    ReadTimeoutError,
    ResponseStreamingError,
)
from urllib3.exceptions import ProtocolError

from dlio_ckpt.io.backends.options import S3Options
from dlio_ckpt.io.backends.s3_credentials import S3Keys
from dlio_ckpt.io.requests import RequestLog, cause_of_error, cause_of_status

_KINDS = {"ListObjectsV2": "ListObjects"}  # the rest are named as S3's API names them
_TOTAL = re.compile(r"/(\d+)$")


class BotocoreS3Error(Exception):
    """A failed call, its text in the words :func:`dlio_ckpt.io.backends.s3.explain` knows."""


@dataclass(frozen=True)
class Head:
    size: int


@dataclass(frozen=True)
class Listed:
    key: str


@dataclass(frozen=True)
class Page:
    object_info: list[Listed]


def _error(exc: Exception) -> BotocoreS3Error:
    """The failure in words :func:`~dlio_ckpt.io.backends.s3.failure` reads: a dropped connection or a
    timeout says CONNECTION or TIMEOUT, so the engine retries the file as it does the CRT's."""
    if isinstance(exc, ClientError):
        err, status = exc.response.get("Error", {}), exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = err.get("Code", "")
        if code in ("NoSuchKey", "404", "NotFound"):
            return BotocoreS3Error(f"not found: {code} (HTTP {status})")
        if code == "NoSuchBucket":
            return BotocoreS3Error(f"bucket does not exist: {code} (HTTP {status})")
        return BotocoreS3Error(f"{code} (HTTP {status}): {err.get('Message', exc)}")
    if isinstance(exc, NoCredentialsError):
        return BotocoreS3Error(f"No signing credentials ({exc})")
    if isinstance(exc, EndpointConnectionError):
        return BotocoreS3Error(f"CONNECTION: cannot connect ({exc})")
    if isinstance(exc, ReadTimeoutError | ConnectTimeoutError):
        return BotocoreS3Error(f"TIMEOUT: {type(exc).__name__}: {exc}")
    if isinstance(exc, ConnectionClosedError | ResponseStreamingError | IncompleteReadError | ProtocolError):
        return BotocoreS3Error(f"CONNECTION: {type(exc).__name__}: {exc}")
    return BotocoreS3Error(f"{type(exc).__name__}: {exc}")


class _Attempts:
    """botocore's per-attempt events, each attempt one entry in the request log: its kind, bytes,
    time from sending to the answer's headers, and the cause when it failed."""

    def __init__(self, log: RequestLog) -> None:
        self._log, self._sent = log, threading.local()  # each attempt runs on the calling thread

    def before_send(self, request: Any, **_: Any) -> None:
        self._sent.t0 = time.perf_counter()

    def answered(self, response: Any, operation: Any, caught_exception: Exception | None, request_dict: dict,
                 **_: Any) -> None:
        seconds = time.perf_counter() - getattr(self._sent, "t0", time.perf_counter())
        kind = _KINDS.get(operation.name, operation.name)
        if kind == "GetObject" and "Range" in request_dict.get("headers", {}):
            kind = "GetObject (ranged)"
        if caught_exception is not None:
            self._log.add(kind, 0, seconds, cause_of_error(f"{type(caught_exception).__name__} {caught_exception}"))
            return
        http, method = response[0], request_dict.get("method")
        if method in ("PUT", "POST"):
            size = len(request_dict.get("body") or b"")
        else:  # a HEAD's Content-Length is the object's, not bytes moved
            size = int(http.headers.get("content-length", 0) or 0) if http.status_code < 300 and method == "GET" \
                else 0
        self._log.add(kind, size, seconds, cause_of_status(http.status_code))


class _Upload:
    """One object written as a stream: a PutObject if it stays within one part, else a multipart
    upload with ``parts_in_flight`` parts sent at once (memory: that many parts plus the one filling)."""

    def __init__(self, client: BotocoreS3Client, bucket: str, key: str) -> None:
        self._c, self._bucket, self._key = client, bucket, key
        self._part = bytearray()
        self._sent: deque[Future[dict[str, Any]]] = deque()
        self._done: list[dict[str, Any]] = []
        self._upload_id: str | None = None

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            n = min(len(view), self._c.part_size - len(self._part))
            self._part += view[:n]
            view = view[n:]
            if len(self._part) == self._c.part_size:
                self._send_part()

    def _send_part(self) -> None:
        if self._upload_id is None:
            self._upload_id = self._c.call("create_multipart_upload", Bucket=self._bucket,
                                           Key=self._key)["UploadId"]
        while len(self._sent) >= self._c.parts_in_flight:
            self._done.append(self._sent.popleft().result())
        number, body = len(self._done) + len(self._sent) + 1, self._part
        self._part = bytearray()  # the full one is the request's body now: no copy
        self._sent.append(self._c.pool.submit(self._c.upload_part, self._bucket, self._key, self._upload_id,
                                              number, body))

    def close(self) -> None:
        try:
            if self._upload_id is None:
                self._c.call("put_object", Bucket=self._bucket, Key=self._key, Body=self._part)
                return
            if self._part:
                self._send_part()
            while self._sent:
                self._done.append(self._sent.popleft().result())
            self._c.call("complete_multipart_upload", Bucket=self._bucket, Key=self._key, UploadId=self._upload_id,
                         MultipartUpload={"Parts": self._done})
        except BotocoreS3Error:
            self.abort()
            raise

    def abort(self) -> None:
        """Parts already sent are dropped on the server, so no partial object or orphan parts remain."""
        for sent in self._sent:
            sent.cancel()
        wait(self._sent)  # a part still being sent could land after the abort and be kept
        if self._upload_id is not None:
            upload_id, self._upload_id = self._upload_id, None
            try:
                self._c.call("abort_multipart_upload", Bucket=self._bucket, Key=self._key, UploadId=upload_id)
            except BotocoreS3Error:
                pass  # the upload expires by the bucket's lifecycle rule; the error that led here matters


class BotocoreS3Client:
    """The calls :class:`~dlio_ckpt.io.backends.s3.S3Backend` makes, through botocore, every attempt logged."""

    def __init__(self, options: S3Options, path_style: bool, log: RequestLog, keys: S3Keys | None = None) -> None:
        """``keys``: the storage's own (given to this client alone); None: the AWS chain or ``options.profile``."""
        self.part_size, self.parts_in_flight = options.part_size, options.parts_in_flight
        session = botocore.session.Session(profile=options.profile)
        connections = options.threads * (options.parts_in_flight + 1) * (options.read_ahead + 1)
        self._s3 = session.create_client("s3", region_name=options.region, endpoint_url=options.endpoint_url,
                                         **(keys.botocore() if keys else {}),
                                         config=Config(
                                             s3={"addressing_style": "path" if path_style else "auto"},
                                             retries={"max_attempts": options.max_attempts, "mode": "standard"},
                                             max_pool_connections=max(10, connections),
                                             request_checksum_calculation="when_required",
                                             response_checksum_validation="when_required"))
        attempts = _Attempts(log)
        self._s3.meta.events.register("before-send.s3", attempts.before_send)
        self._s3.meta.events.register("needs-retry.s3", attempts.answered)
        self.pool = ThreadPoolExecutor(options.threads * options.parts_in_flight,
                                       thread_name_prefix="dlio_ckpt_s3_parts")

    def call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        try:
            return getattr(self._s3, operation)(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise _error(exc) from None

    def upload_part(self, bucket: str, key: str, upload_id: str, number: int, body: bytearray) -> dict[str, Any]:
        answer = self.call("upload_part", Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body)
        return {"PartNumber": number, "ETag": answer["ETag"]}

    def _range(self, bucket: str, key: str, start: int, end: int) -> tuple[bytes, int]:
        """Bytes [start, end) and the object's size (from Content-Range)."""
        answer = self.call("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}")
        total = _TOTAL.search(answer.get("ContentRange", ""))
        try:  # botocore retries a request, not a body that breaks off: the engine redoes the file
            body = answer["Body"].read()
        except (BotoCoreError, ProtocolError) as exc:
            raise _error(exc) from None
        return body, int(total.group(1)) if total else start + len(body)

    def put_object(self, bucket: str, key: str) -> _Upload:
        return _Upload(self, bucket, key)

    def get_object(self, bucket: str, key: str, start: int | None = None, end: int | None = None) -> Iterator[bytes]:
        """Parts of ``part_size`` in order, ``parts_in_flight`` requested ahead of the one consumed;
        the whole object when no range is given (its size learnt from the first part's answer)."""
        first = start or 0
        if end is not None and end <= first:
            return iter(())
        try:
            body, size = self._range(bucket, key, first, first + self.part_size if end is None
                                     else min(first + self.part_size, end))
        except BotocoreS3Error as exc:
            if end is None and first == 0 and "InvalidRange" in str(exc):
                return iter(())  # an empty object has no first byte to range over (that GET is counted, a 416)
            raise
        return self._parts(bucket, key, body, first + len(body), size if end is None else min(end, size))

    def _parts(self, bucket: str, key: str, body: bytes, offset: int, end: int) -> Iterator[bytes]:
        ahead: deque[Future[tuple[bytes, int]]] = deque()
        try:
            if body:
                yield body
            while offset < end or ahead:
                while offset < end and len(ahead) < self.parts_in_flight:
                    stop = min(offset + self.part_size, end)
                    ahead.append(self.pool.submit(self._range, bucket, key, offset, stop))
                    offset = stop
                yield ahead.popleft().result()[0]
        finally:
            for request in ahead:
                request.cancel()

    def head_object(self, bucket: str, key: str) -> Head:
        return Head(int(self.call("head_object", Bucket=bucket, Key=key)["ContentLength"]))

    def delete_object(self, bucket: str, key: str) -> None:
        self.call("delete_object", Bucket=bucket, Key=key)

    def copy_object(self, src_bucket: str, src_key: str, dst_bucket: str, dst_key: str, nbytes: int) -> None:
        """One CopyObject (botocore encodes the source; up to 5 GB, S3's limit for it: ``nbytes`` is not needed)."""
        self.call("copy_object", Bucket=dst_bucket, Key=dst_key, CopySource={"Bucket": src_bucket, "Key": src_key})

    def list_objects(self, bucket: str, prefix: str, delimiter: str, max_keys: int) -> Iterator[Page]:
        token: dict[str, str] = {}
        while True:
            answer = self.call("list_objects_v2", Bucket=bucket, Prefix=prefix, Delimiter=delimiter,
                               MaxKeys=max_keys, **token)
            yield Page([Listed(o["Key"]) for o in answer.get("Contents", [])])
            if not answer.get("IsTruncated"):
                return
            token = {"ContinuationToken": answer["NextContinuationToken"]}
