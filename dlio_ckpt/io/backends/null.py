"""No storage at all: measures this tool's own cost per byte (synthetic data, format, engine), as
fio's null engine does. Writes are dropped; reads return without filling the buffer, so there is
nothing to verify (``Capabilities.stores_data`` is False). Step manifests live in this process's
memory, enough for one run's write-then-read.
"""

from __future__ import annotations

from typing import Any

from dlio_ckpt.io.backends.base import Backend, Capabilities, Options


class NullWriter:
    def write(self, data: memoryview) -> None:
        pass

    def finish(self) -> None:
        pass

    def abort(self) -> None:
        pass


class NullReader:
    def readinto(self, buf: memoryview) -> int:
        return len(buf)

    def read_at(self, buf: memoryview, offset: int) -> int:
        return len(buf)

    def close(self) -> None:
        pass


class NullBackend(Backend):
    name = "null"
    capabilities = Capabilities(fsync=True, durable_on_close=True, odirect=True, alignment=1,
                                evict_cache=True, stores_data=False)

    def __init__(self, root: str, options: Options) -> None:
        self.options = options
        self._small: dict[str, bytes] = {}

    def check(self, writing: bool) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"threads": self.options.threads}

    def join(self, *parts: str) -> str:
        return "/".join(p.strip("/") for p in ("null:", *parts) if p)

    def open_write(self, path: str, odirect: bool) -> NullWriter:
        return NullWriter()

    def open_read(self, path: str, odirect: bool) -> NullReader:
        return NullReader()

    def open_ranged(self, path: str, odirect: bool) -> NullReader:
        return NullReader()

    def size(self, path: str) -> int | None:
        return None

    def list_tree(self, path: str) -> list[str]:
        return sorted(k[len(path) + 1:] for k in self._small if k.startswith(path + "/"))

    def put_small(self, path: str, data: bytes) -> None:
        self._small[path] = data

    def get_small(self, path: str) -> bytes | None:
        return self._small.get(path)

    def remove(self, path: str) -> None:
        self._small.pop(path, None)
