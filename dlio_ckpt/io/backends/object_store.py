"""What S3 and GCS share: keys instead of paths, no folders, no page cache, durable on close.

A path is ``bucket/prefix/checkpoint_folder/step/file``: ``storage_root`` gives the bucket and an
optional prefix (``s3://`` or ``gs://`` in front is accepted), the rest comes from the checkpoint.
"""

from __future__ import annotations

import zlib
from abc import abstractmethod
from typing import Any

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.io.backends.base import Backend, Capabilities
from dlio_ckpt.io.backends.options import ObjectStoreOptions


def split_root(storage_type: str, root: str, scheme: str) -> tuple[str, str]:
    """``[scheme://]bucket[/prefix]`` -> (bucket, prefix)."""
    text = root.removeprefix(f"{scheme}://").strip("/")
    bucket, _, prefix = text.partition("/")
    if not bucket or bucket in (".", ".."):
        raise ConfigError("workload.storage.storage_root", root,
                          f"storage_type={storage_type} needs a bucket name here ([{scheme}://]BUCKET[/PREFIX])")
    return bucket, prefix


class ObjectStore(Backend):
    """Shared path handling; subclasses move the bytes. No folders, no page cache here, and an
    object is durable once its upload completes: the base's optional operations stay no-ops."""

    name = ""
    scheme = ""
    capabilities = Capabilities(fsync=False, durable_on_close=True, odirect=False, alignment=1,
                                evict_cache=False)
    options: ObjectStoreOptions

    def __init__(self, root: str, options: ObjectStoreOptions) -> None:
        self.options = options
        self.bucket, self.prefix = split_root(self.name, root, self.scheme)

    def join(self, *parts: str) -> str:
        """An object path ``bucket/prefix/parts``; "." and empty parts add nothing."""
        parts = tuple(p.strip("/") for p in (self.bucket, self.prefix, *parts))
        return "/".join(p for p in parts if p and p != ".")

    def _key(self, path: str) -> str:
        """A path from :meth:`join` without its bucket ("" for the bucket itself)."""
        return "" if path == self.bucket else path.removeprefix(self.bucket + "/")

    def _rest(self, key: str) -> str:
        """A key without the storage prefix ("" for the prefix itself)."""
        if not self.prefix:
            return key
        return "" if key == self.prefix else key.removeprefix(self.prefix + "/")

    def key(self, path: str) -> str:
        """The object key of a path from :meth:`join` (hashed sub-prefix inserted if asked)."""
        key = self._key(path)
        n = self.options.spread_prefixes
        if not n:
            return key
        rest = self._rest(key)
        spread = f"{zlib.crc32(rest.rsplit('/', 1)[-1].encode()) % n:0{len(f'{n - 1:x}')}x}"
        return "/".join(p for p in (self.prefix, spread, rest) if p)

    def key_prefixes(self, path: str) -> list[str]:
        """Every key prefix under which objects of folder ``path`` may lie (one per spread)."""
        key = self._key(path).strip("/")
        n = self.options.spread_prefixes
        if not n:
            return [key + "/" if key else ""]
        rest = self._rest(key)
        width = len(f"{n - 1:x}")
        spread = ["/".join(p for p in (self.prefix, f"{h:0{width}x}", rest) if p) + "/" for h in range(n)]
        return ([key + "/"] if key else []) + spread

    def list_tree(self, path: str) -> list[str]:
        found: set[str] = set()
        for prefix in self.key_prefixes(path):
            found.update(k[len(prefix):] for k in self.list_keys(prefix))
        return sorted(found - {""})

    @abstractmethod
    def list_keys(self, prefix: str) -> list[str]:
        """Every object key starting with ``prefix``."""

    @abstractmethod
    def remove_key(self, key: str) -> None: ...

    def url(self, path: str) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key(path)}"

    def describe(self) -> dict[str, Any]:
        return {"bucket": self.bucket, "prefix": self.prefix, "endpoint_url": self.options.endpoint_url,
                "threads": self.options.threads, "spread_prefixes": self.options.spread_prefixes}
