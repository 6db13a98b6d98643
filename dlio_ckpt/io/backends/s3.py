"""S3 and S3-compatible stores through s3torchconnector (AWS's CRT client, as PyTorch users use it).

Why its native client rather than boto3: it is what checkpointing on S3 uses in practice
(S3Checkpoint, S3StorageWriter), it uploads parts in parallel at ``throughput_target_gbps``, and its
retries are the CRT's. We call its put/get streams directly: S3Writer copies memoryviews to bytes the
same way. A read is one GET per object, as s3torchconnector's own reader makes it: the CRT splits it
into ``part_size`` ranges fetched in parallel and its part buffers bound the memory (a load's peak
RSS was 573-672 MiB per process here, for objects of 0.9 and 2.6 GiB); ``read_size`` reads in ranged
GETs of our own instead. A framework's load of items reads them as s3torchconnector's ``S3StorageReader``
does: a GET per range of nearby items (:func:`item_spans`, :meth:`S3Backend.open_span`). ``library=botocore``
swaps in botocore behind the same calls (:mod:`dlio_ckpt.io.backends.s3_botocore`), which shows every HTTP
attempt the CRT would hide.

Credentials come from the usual AWS chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
``AWS_PROFILE``, ...), from ``storage_options.profile``, or from ``storage_options.access_key_id``/
``secret_access_key``/``session_token``, which each client of this storage gets for itself
(:mod:`dlio_ckpt.io.backends.s3_credentials` says how, the CRT taking no keys as arguments): never the
process environment, so children inherit nothing and two S3 tiers may use different keys.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from s3torchconnectorclient._mountpoint_s3_client import MountpointS3Client, S3Exception

from dlio_ckpt.errors import ConfigError, StorageError
from dlio_ckpt.io.backends.base import ItemReader
from dlio_ckpt.io.backends.counting import CountedS3Client
from dlio_ckpt.io.backends.object_store import ObjectStore
from dlio_ckpt.io.backends.options import S3Options
from dlio_ckpt.io.backends.s3_botocore import BotocoreS3Client, BotocoreS3Error
from dlio_ckpt.io.backends.s3_credentials import S3Keys, build_with
from dlio_ckpt.io.requests import RequestLog, parts

CLIENT_ERRORS = (S3Exception, BotocoreS3Error)  # what either client raises for a failed request
# s3torchconnector 1.5.0's DCPOptimizedS3Reader (S3StorageReader's default): items at most this far apart share one GET
# (DEFAULT_MAX_GAP_SIZE, s3reader/dcp_optimized.py)
ITEM_GAP = 32 << 20
# what a load of a framework's items on S3 plays (item_spans, S3Backend.open_span), as summary.json's io.restore says it
READER = ("s3torchconnector 1.5.0's S3StorageReader (its default DCPOptimizedS3Reader): .metadata in one GET, then "
          "each object's items the rank needs, sorted by offset, those at most 32 MiB apart joined into one ranged GET "
          "from the first's start to the last's end (the gaps read and dropped), which the client splits into "
          "part_size GETs")

_NO_CREDENTIALS = ("no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or "
                   "AWS_PROFILE), or storage_options.access_key_id and secret_access_key")


# What S3 answers a key it does not accept: botocore names the error code; the CRT says "Forbidden"
# and S3's message, whose words for these two codes AWS (and SeaweedFS, MinIO) use alike
_REFUSED_KEYS = (("InvalidAccessKeyId", "the server knows no such access key: check storage_options.access_key_id "
                  "(or the AWS chain's key)"),
                 ("access key ID you provided does not exist", "the server knows no such access key: check "
                  "storage_options.access_key_id (or the AWS chain's key)"),
                 ("SignatureDoesNotMatch", "the secret key does not match the access key: check "
                  "storage_options.secret_access_key (or the AWS chain's)"),
                 ("signature we calculated does not match", "the secret key does not match the access key: check "
                  "storage_options.secret_access_key (or the AWS chain's)"),
                 ("AccessDenied", "access denied: these credentials may not do this on this bucket"),
                 ("Forbidden", "access denied: these credentials may not do this on this bucket"))

_TRANSIENT = ("aws-c-io", "CONNECTION", "SOCKET", "TIMEOUT", "timed out", "SlowDown", "Throttl",
              "InternalError", "ServiceUnavailable", "503", "500", "REQUEST_HAS_COMPLETED", "dispatch failure")


def failure(what: str, url: str, exc: Exception) -> StorageError:
    """A StorageError naming the object and cause, marked transient when a retry may help."""
    text = str(exc)
    return StorageError(f"{what} {url}: {explain(exc)}", transient=any(t in text for t in _TRANSIENT))


def explain(exc: Exception) -> str:
    """The CRT's messages, made to say what the user can do."""
    text = str(exc)
    if "No signing credentials" in text:
        return _NO_CREDENTIALS
    for code, meaning in _REFUSED_KEYS:
        if code in text:
            return f"{meaning} ({text})"
    if "NoSuchKey" in text or "key does not exist" in text.lower():
        return f"no such object ({text})"
    if "CONNECTION_REFUSED" in text:
        return f"connection refused ({text})"
    if "DNS_QUERY_FAILED" in text or "DNS_NO_ADDRESS" in text:
        # the CRT's resolver says so of an address it can no longer reach, an IP literal too (seen when the
        # endpoint, 127.0.0.1 behind the tests' proxy, went away mid-load): the client has no address to connect to
        return f"cannot connect: the client has no address for storage_options.endpoint_url, whose name did not " \
               f"resolve or which stopped answering ({text})"
    if "throttled" in text.lower() or "SlowDown" in text:
        return f"throttled: the server answered 503 SlowDown to every attempt (storage_options.max_attempts) ({text})"
    if "REQUEST_HAS_COMPLETED" in text or "previous write operation did not complete" in text:
        # the store refused or lost a part: the CRT failed the upload in the background and kept no answer; a later
        # write, or the close, finds only that the upload is over
        return ("a part of this multipart upload was refused or lost, and s3torchconnector's client keeps no cause "
                f"(storage_options.library=botocore names the store's answer) ({text})")
    return text


def item_spans(ranges: Iterable[tuple[int, int]], gap: int = ITEM_GAP) -> list[tuple[int, int]]:
    """What s3torchconnector's ``S3StorageReader`` asks of S3 for a load's items of one object, (offset, length)
    each: its default reader (``S3ReaderConstructor.dcp_optimized()``: ``DCPOptimizedS3Reader``, s3torchconnector
    1.5.0, ``s3reader/dcp_optimized.py``) takes the items sorted by offset (``prepare_local_plan``), drops the
    empty ones and joins those at most ``gap`` apart into one range, read by one GET from its first item's start
    to its last item's end, the gaps read and dropped. As (start, end), in order."""
    out: list[tuple[int, int]] = []
    for offset, length in sorted(r for r in ranges if r[1]):
        if out and offset - out[-1][1] <= gap:
            out[-1] = (out[-1][0], max(out[-1][1], offset + length))
        else:
            out.append((offset, offset + length))
    return out


class S3Writer:
    """One object, uploaded in parts as it is written; committed by :meth:`finish`."""

    def __init__(self, client: CountedS3Client | BotocoreS3Client, bucket: str, key: str, url: str) -> None:
        self.url = url
        try:
            self._stream = client.put_object(bucket, key)
        except CLIENT_ERRORS as exc:
            raise failure("cannot create", url, exc) from None

    def write(self, data: memoryview) -> None:
        try:
            self._stream.write(data)
        except CLIENT_ERRORS as exc:
            raise failure("write failed on", self.url, exc) from None

    def finish(self) -> None:
        try:
            self._stream.close()  # completes the multipart upload: the object now exists whole
        except CLIENT_ERRORS as exc:
            raise failure("upload failed on", self.url, exc) from None

    def abort(self) -> None:
        """Drop the stream without completing it: S3 never shows a partial object (botocore's stream
        also aborts its multipart upload; the CRT's does so when dropped)."""
        stream, self._stream = self._stream, None
        if hasattr(stream, "abort"):
            stream.abort()


class S3Reader:
    """Sequential reads: one GET for the whole object, made by the reading thread itself (its parts'
    buffers are then allocated by the thread that frees them, as with the bare client) and without a
    HEAD first (the engine checks the size by reading), or with ``read_size`` ranged GETs of that
    size after one HEAD for the object's end, ``read_ahead`` of them requested beyond the one being
    consumed (and verified) so the client never waits for a first byte between ranges. Those are
    made from the backend's ``ahead`` threads: the native ``get_object`` call blocks 7-12 ms here
    before returning, a third of the time a 32 MiB range takes to arrive, and made inline it stalled
    every range (bench/results/2026-11-24-object-stores.md). ``span`` (start, end): the bytes [start, end)
    alone, in one GET of that range whatever ``read_size`` says (:meth:`S3Backend.open_span`)."""

    def __init__(self, backend: S3Backend, path: str, span: tuple[int, int] | None = None) -> None:
        self._b, self._url = backend, backend.url(path)
        self._key = backend.key(path)
        self._pos, self._requested = 0, 0
        self._left = memoryview(b"")
        self._parts: Iterator[bytes] = iter(())
        self._ahead: deque[Future[Iterator[bytes]]] = deque()
        self._end = 0  # ranged reads only: the object's size (a span's end), which they must not pass
        if span is not None:  # the CRT splits the range into part_size GETs from its start, as for a whole object
            self._pos, self._end = span
            try:
                self._parts = backend.client.get_object(backend.bucket, self._key, *span)
            except CLIENT_ERRORS as exc:
                raise failure("cannot open", self._url, exc) from None
            return
        if not backend.options.read_size:
            try:
                self._parts = backend.client.get_object(backend.bucket, self._key)
            except CLIENT_ERRORS as exc:
                raise failure("cannot open", self._url, exc) from None
            return
        size = backend.size(path)
        if size is None:
            raise StorageError(f"cannot open {self._url}: no such object")
        self._end = size
        self._fill()

    def _fill(self) -> None:
        """Keep ``read_ahead`` ranges requested beyond the one being consumed."""
        while len(self._ahead) <= self._b.options.read_ahead and self._requested < self._end:
            start = self._requested
            self._requested = end = min(start + self._b.options.read_size, self._end)
            self._ahead.append(self._b.ahead.submit(self._b.client.get_object, self._b.bucket, self._key, start, end))

    def _next_part(self) -> memoryview:
        while True:
            for part in self._parts:
                return memoryview(part)
            if not self._ahead:
                if self._pos < self._end:
                    raise StorageError(f"read failed on {self._url}: empty response at offset {self._pos}")
                return memoryview(b"")
            self._parts = self._ahead.popleft().result()  # its S3Exception, if it failed, is raised here
            self._fill()

    def views(self) -> Iterator[memoryview]:
        """The object's bytes in the client's own part buffers (no copy), in order."""
        try:
            while part := self._next_part():
                self._pos += len(part)
                yield part
        except CLIENT_ERRORS as exc:
            raise failure("read failed on", self._url, exc) from None

    def readinto(self, buf: memoryview) -> int:
        total = 0
        try:
            while total < len(buf):
                if not self._left:
                    self._left = self._next_part()
                    self._pos += len(self._left)
                    if not self._left:
                        break
                n = min(len(self._left), len(buf) - total)
                buf[total:total + n] = self._left[:n]
                self._left = self._left[n:]
                total += n
        except CLIENT_ERRORS as exc:
            raise failure("read failed on", self._url, exc) from None
        return total

    def close(self) -> None:
        for request in self._ahead:
            request.cancel()
        self._parts, self._left = iter(()), memoryview(b"")
        self._ahead.clear()


class S3Ranged:
    """Byte ranges of one object: a ranged GET per read, its parts copied into the caller's buffer."""

    def __init__(self, backend: S3Backend, path: str) -> None:
        self._b, self._url, self._key = backend, backend.url(path), backend.key(path)

    def read_at(self, buf: memoryview, offset: int) -> int:
        total = 0
        try:
            for part in self._b.client.get_object(self._b.bucket, self._key, offset, offset + len(buf)):
                n = min(len(part), len(buf) - total)
                buf[total:total + n] = memoryview(part)[:n]
                total += n
        except CLIENT_ERRORS as exc:
            raise failure("read failed on", self._url, exc) from None
        return total

    def close(self) -> None:
        pass


_KEYED: type | None = None


def _keyed_client_class() -> type:
    """s3torchconnector's S3Client building its native client with its storage's keys (made on first
    use: importing s3torchconnector imports torch)."""
    global _KEYED
    if _KEYED is None:
        from s3torchconnector._s3client import S3Client

        class KeyedS3Client(S3Client):
            _dlio_ckpt_keys: S3Keys | None = None

            def _client_builder(self) -> MountpointS3Client:
                return build_with(self._dlio_ckpt_keys, lambda _: super(KeyedS3Client, self)._client_builder())

        _KEYED = KeyedS3Client
    return _KEYED


class S3Backend(ObjectStore):
    name = "s3"
    scheme = "s3"
    options: S3Options
    capabilities = replace(ObjectStore.capabilities, rename_by_copy=True)

    def __init__(self, root: str, options: S3Options) -> None:
        super().__init__(root, options)
        o = self.options
        # this storage's own keys, handed to each of its clients (None: the AWS chain, or o.profile)
        self.keys = S3Keys(o.access_key_id, o.secret_access_key, o.session_token) \
            if o.access_key_id is not None and o.secret_access_key is not None else None
        # decided once, here: the CRT, s3fs and the DCP/Lightning clients all take it from this
        self.path_style = o.force_path_style if o.force_path_style is not None else o.endpoint_url is not None
        self.requests = RequestLog()
        self.client: CountedS3Client | BotocoreS3Client
        if o.library == "botocore":
            self.client = BotocoreS3Client(o, self.path_style, self.requests, self.keys)
        else:
            self.client = CountedS3Client(build_with(self.keys, lambda profile: MountpointS3Client(
                region=o.region, endpoint=o.endpoint_url, profile=profile, part_size=o.part_size,
                throughput_target_gbps=o.throughput_target_gbps, force_path_style=self.path_style,
                max_attempts=o.max_attempts), o.profile), self.requests, o.part_size)
        self.ahead = ThreadPoolExecutor(o.threads * (o.read_ahead + 1), thread_name_prefix="dlio_ckpt_s3_ahead")

    def client_config(self) -> Any:
        """s3torchconnector's settings, for the framework clients (DCP, Lightning): with explicit keys
        it names their private profile, which only a client from :meth:`framework_client` can read."""
        from s3torchconnector import S3ClientConfig

        o = self.options
        return S3ClientConfig(throughput_target_gbps=o.throughput_target_gbps, part_size=o.part_size,
                              force_path_style=self.path_style, max_attempts=o.max_attempts,
                              profile=self.keys.profile if self.keys else o.profile)

    def framework_client(self, user_agent: Any = None) -> Any:
        """s3torchconnector's ``S3Client`` for DCP's S3FileSystem and Lightning's S3LightningCheckpoint,
        configured as this storage (endpoint, path style, part size, attempts, credentials). Why not
        theirs: they take a region and an S3ClientConfig but no keys, and build their native client
        lazily, again in a forked child; ours builds it with this storage's keys each time."""
        from s3torchconnector._s3client import S3Client

        o = self.options
        if self.keys is None:
            return S3Client(o.region, endpoint=o.endpoint_url, user_agent=user_agent,
                            s3client_config=self.client_config())
        client = _keyed_client_class()(o.region, endpoint=o.endpoint_url, user_agent=user_agent,
                                       s3client_config=self.client_config())
        client._dlio_ckpt_keys = self.keys
        client._client  # noqa: B018 (built now, on this thread, rather than first in a framework's worker)
        return client

    def fsspec_options(self) -> dict[str, Any]:
        """s3fs's options, this storage's keys among them (s3fs takes them as arguments)."""
        o = self.options
        opts: dict[str, Any] = {"client_kwargs": {"region_name": o.region},
                                "config_kwargs": {"s3": {"addressing_style": "path" if self.path_style else "auto"},
                                                  "retries": {"max_attempts": o.max_attempts}}}
        if o.endpoint_url:
            opts["endpoint_url"] = o.endpoint_url
        if o.profile:
            opts["profile"] = o.profile
        if self.keys:
            opts.update(self.keys.s3fs())
        return opts

    def describe(self) -> dict[str, Any]:
        o = self.options
        return {**super().describe(), "library": o.library, "region": o.region, "part_size": o.part_size,
                "throughput_target_gbps": o.throughput_target_gbps, "max_attempts": o.max_attempts}

    def check(self, writing: bool) -> None:
        try:
            next(iter(self.client.list_objects(self.bucket, self.prefix, "", 1)), None)
        except CLIENT_ERRORS as exc:
            where = f"s3://{self.bucket} at {self.options.endpoint_url or 'AWS ' + self.options.region}"
            if "bucket does not exist" in str(exc):
                raise ConfigError("workload.storage.storage_root", self.bucket,
                                  f"bucket does not exist ({where}): create it first") from None
            if "No signing credentials" in str(exc):
                raise ConfigError("workload.storage.storage_options.access_key_id", None,
                                  f"{_NO_CREDENTIALS} (for {where})") from None
            raise StorageError(f"cannot use {where}: {explain(exc)}") from None

    def open_write(self, path: str, odirect: bool) -> S3Writer:
        return S3Writer(self.client, self.bucket, self.key(path), self.url(path))

    def open_read(self, path: str, odirect: bool) -> S3Reader:
        return S3Reader(self, path)

    def open_ranged(self, path: str, odirect: bool) -> S3Ranged:
        return S3Ranged(self, path)

    def item_reader(self) -> ItemReader:
        """:data:`READER`'s spans, each ``part_size`` GETs as the CRT splits a range (botocore's parts alike)."""
        return ItemReader(READER, item_spans, lambda nbytes: parts(nbytes, self.options.part_size))

    def open_span(self, path: str, start: int, end: int) -> S3Reader:
        """The object's bytes [start, end) in one GET of that range (the CRT splits it into ``part_size``
        GETs), read in order: s3torchconnector's ``_get_object_stream(bucket, key, start, end)``, the stream
        its DCP reader opens per range of items (:func:`item_spans`)."""
        return S3Reader(self, path, (start, end))

    def size(self, path: str) -> int | None:
        try:
            return int(self.client.head_object(self.bucket, self.key(path)).size)
        except CLIENT_ERRORS as exc:
            if "not found" in str(exc).lower():
                return None
            raise failure("cannot stat", self.url(path), exc) from None

    def put_small(self, path: str, data: bytes) -> None:
        """A PUT is atomic: readers see the whole object or none."""
        writer = self.open_write(path, False)
        writer.write(memoryview(data))
        writer.finish()

    def get_small(self, path: str) -> bytes | None:
        try:
            return b"".join(self.client.get_object(self.bucket, self.key(path)))
        except CLIENT_ERRORS as exc:
            if "not found" in str(exc).lower() or "does not exist" in str(exc).lower():
                return None
            raise failure("cannot read", self.url(path), exc) from None

    def list_keys(self, prefix: str) -> list[str]:
        try:
            return [o.key for page in self.client.list_objects(self.bucket, prefix, "", 1000) for o in page.object_info]
        except CLIENT_ERRORS as exc:
            raise failure("cannot list", f"s3://{self.bucket}/{prefix}", exc) from None

    def remove_key(self, key: str) -> None:
        try:
            self.client.delete_object(self.bucket, key)
        except CLIENT_ERRORS as exc:
            raise failure("cannot delete", f"s3://{self.bucket}/{key}", exc) from None

    def rename(self, source: str, target: str, nbytes: int = 0) -> None:
        """s3torchconnector's ``S3FileSystem.rename`` (1.5.0), as DCP's writer moves ``.metadata.tmp`` into place
        on S3: a server-side copy to the target (of ``nbytes``: the CRT's requests depend on it), then a delete of
        the source."""
        try:
            self.client.copy_object(self.bucket, self.key(source), self.bucket, self.key(target), nbytes)
            self.client.delete_object(self.bucket, self.key(source))
        except CLIENT_ERRORS as exc:
            raise failure("cannot rename to", self.url(target), exc) from None

    def remove(self, path: str) -> None:
        try:
            self.client.delete_object(self.bucket, self.key(path))
        except CLIENT_ERRORS as exc:
            if "not found" not in str(exc).lower():
                raise failure("cannot delete", self.url(path), exc) from None
