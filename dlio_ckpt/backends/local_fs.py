"""Local and parallel file systems through POSIX calls: buffered, fsync, O_DIRECT, cache eviction."""

from __future__ import annotations

import fcntl
import os
import shutil
from typing import Any

from ..errors import ConfigError, StorageError
from .base import Backend, Capabilities, Options, parse_options
from .options import LocalFSOptions


def _fail(op: str, path: str, exc: OSError) -> StorageError:
    return StorageError(f"{op} {path}: {exc.strerror or exc} (errno {exc.errno})")


class LocalWriter:
    """Writes a file sequentially. Under O_DIRECT the unaligned tail is written after clearing the
    flag on the descriptor, so a file of any size can be written without padding it."""

    def __init__(self, path: str, odirect: bool, alignment: int) -> None:
        self.path, self._odirect, self._align = path, odirect, alignment
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if odirect else 0)
        try:
            self._fd = os.open(path, flags, 0o644)
        except OSError as exc:
            raise _fail("cannot create", path, exc) from None

    def write(self, data: memoryview) -> None:
        try:
            if self._odirect and len(data) % self._align:
                cut = len(data) - len(data) % self._align
                self._write_all(data[:cut])
                fcntl.fcntl(self._fd, fcntl.F_SETFL, fcntl.fcntl(self._fd, fcntl.F_GETFL) & ~os.O_DIRECT)
                self._odirect = False
                data = data[cut:]
            self._write_all(data)
        except OSError as exc:
            raise _fail("write failed on", self.path, exc) from None

    def _write_all(self, data: memoryview) -> None:
        while data:
            n = os.write(self._fd, data)
            data = data[n:]

    def finish(self) -> None:
        os.close(self._fd)

    def abort(self) -> None:
        os.close(self._fd)


class LocalReader:
    def __init__(self, path: str, odirect: bool) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if odirect else 0))
        except OSError as exc:
            raise _fail("cannot open", path, exc) from None

    def readinto(self, buf: memoryview) -> int:
        """Fill ``buf`` unless the file ends first; returns the bytes read (0 at the end)."""
        total = 0
        try:
            while total < len(buf):
                n = os.readv(self._fd, [buf[total:]])
                if n == 0:
                    break
                total += n
        except OSError as exc:
            raise _fail("read failed on", self.path, exc) from None
        return total

    def close(self) -> None:
        os.close(self._fd)


class LocalFSBackend(Backend):
    name = "local_fs"
    capabilities = Capabilities(fsync=True, durable_on_close=False, odirect=True, alignment=4096,
                                evict_cache=True)

    options_model: type[Options] = LocalFSOptions

    def __init__(self, root: str, options: dict[str, Any]) -> None:
        self.root = root or "./"
        self.options = parse_options(self.options_model, self.name, options)

    def check(self, writing: bool) -> None:
        """The root must be a folder, or creatable: its nearest existing parent a writable folder."""
        path = os.path.abspath(self.root)
        while not os.path.exists(path):
            path = os.path.dirname(path)
        if not os.path.isdir(path):
            raise ConfigError("workload.storage.storage_root", self.root, f"{path} is not a folder")
        if writing and not os.access(path, os.W_OK | os.X_OK):
            raise ConfigError("workload.storage.storage_root", self.root, f"{path} is not writable by this user")

    def describe(self) -> dict[str, Any]:
        return {"root": os.path.abspath(self.root), "threads": self.options.threads}

    def join(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def makedirs(self, path: str) -> None:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise _fail("cannot create folder", path, exc) from None

    def open_write(self, path: str, odirect: bool) -> LocalWriter:
        return LocalWriter(path, odirect, self.capabilities.alignment)

    def open_read(self, path: str, odirect: bool) -> LocalReader:
        return LocalReader(path, odirect)

    def evict(self, path: str) -> None:
        """Drop the file's pages from the page cache; dirty pages are written back first, since
        POSIX_FADV_DONTNEED only drops clean ones."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise _fail("cannot open", path, exc) from None
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

    def free_bytes(self, path: str) -> int | None:
        """Free space of the file system holding ``path`` (its nearest existing parent)."""
        path = os.path.abspath(path)
        while not os.path.exists(path):
            path = os.path.dirname(path)
        st = os.statvfs(path)
        return st.f_bavail * st.f_frsize

    def sync(self, path: str) -> None:
        """fsync a written, closed file (Linux flushes the inode's dirty pages whatever the fd)."""
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise _fail("fsync failed on", path, exc) from None

    def size(self, path: str) -> int | None:
        try:
            return os.stat(path).st_size
        except FileNotFoundError:
            return None

    def list_names(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            blocker = path = os.path.abspath(path)
            while not os.path.exists(blocker):
                blocker = os.path.dirname(blocker)
            raise ConfigError("workload.checkpoint.checkpoint_folder", path,
                              f"cannot be a folder: {blocker} is a file") from None

    def remove_tree(self, path: str) -> None:
        try:
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise _fail("cannot remove", path, exc) from None

    def put_small(self, path: str, data: bytes) -> None:
        """Write a small file atomically (temporary name, fsync, rename): readers see all or none."""
        tmp = f"{path}.tmp{os.getpid()}"
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            raise _fail("cannot write", path, exc) from None

    def get_small(self, path: str) -> bytes | None:
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    def remove(self, path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
