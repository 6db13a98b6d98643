"""A storage backend from outside the tool, as another package would ship one: every object a file
of one flat folder (its path, with ``/`` spelled ``%2F``, is the file's name), written and read with
Python's own ``open``. It imports only the tool's public backend interface and registers itself with
an entry point (group ``dlio_ckpt.backends``, name ``flatfs``, value ``dlio_ckpt_flatfs:BACKEND``); the
test that uses it writes that entry point into a ``.dist-info`` beside it, as ``pip install`` would.
"""

from __future__ import annotations

import os
from typing import Any

from dlio_ckpt.errors import StorageError
from dlio_ckpt.io.backends.base import Backend, Capabilities, Options
from dlio_ckpt.registry import BackendEntry

BACKEND = BackendEntry(target="dlio_ckpt_flatfs:FlatFolder", kind="object_store", library="flatfs")


class FlatFolder(Backend):
    name = "flatfs"
    capabilities = Capabilities(fsync=False, durable_on_close=True, odirect=False, alignment=1, evict_cache=False)

    def __init__(self, root: str, options: Options) -> None:
        self.root, self.options = os.path.abspath(root), options

    def _file(self, path: str) -> str:
        return os.path.join(self.root, path.strip("/").replace("/", "%2F"))

    def check(self, writing: bool) -> None:
        if not os.path.isdir(self.root):
            raise StorageError(f"flatfs: no folder {self.root}")

    def describe(self) -> dict[str, Any]:
        return {"root": self.root, "threads": self.options.threads}

    def join(self, *parts: str) -> str:
        return "/".join(p.strip("/") for p in parts if p.strip("/"))

    def open_write(self, path: str, odirect: bool) -> Any:
        return _Writer(self._file(path))

    def open_read(self, path: str, odirect: bool) -> Any:
        try:
            return open(self._file(path), "rb", buffering=0)  # readinto, close
        except FileNotFoundError:
            raise StorageError(f"flatfs: no object {path}") from None

    def size(self, path: str) -> int | None:
        try:
            return os.path.getsize(self._file(path))
        except FileNotFoundError:
            return None

    def list_tree(self, path: str) -> list[str]:
        prefix = path.strip("/") + "/" if path.strip("/") else ""
        names = (n.replace("%2F", "/") for n in os.listdir(self.root))
        return sorted(n[len(prefix):] for n in names if n.startswith(prefix))

    def put_small(self, path: str, data: bytes) -> None:
        with open(self._file(path), "wb") as f:
            f.write(data)

    def get_small(self, path: str) -> bytes | None:
        try:
            with open(self._file(path), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def remove(self, path: str) -> None:
        try:
            os.remove(self._file(path))
        except FileNotFoundError:
            pass


class _Writer:
    def __init__(self, file: str) -> None:
        self._f = open(file, "wb")  # noqa: SIM115 (closed by finish or abort)

    def write(self, data: memoryview) -> None:
        self._f.write(data)

    def finish(self) -> None:
        self._f.close()

    def abort(self) -> None:
        self._f.close()
