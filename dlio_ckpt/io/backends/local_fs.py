"""Local and parallel file systems through POSIX calls: buffered, fsync, O_DIRECT, cache eviction."""

from __future__ import annotations

import errno
import os
import shutil
from typing import Any

from dlio_ckpt.cluster.host import in_memory, on_nearest
from dlio_ckpt.errors import ConfigError, StorageError
from dlio_ckpt.inflight import temporary
from dlio_ckpt.io.backends.base import Backend, Capabilities, Reader, Writer, probe_name
from dlio_ckpt.io.backends.options import GDSOptions, LocalFSOptions


def _fail(op: str, path: str, exc: OSError) -> StorageError:
    return StorageError(f"{op} {path}: {exc.strerror or exc} (errno {exc.errno})")


def _raise(exc: OSError) -> None:
    """os.walk's errors are not to be skipped: a folder that cannot be listed is named."""
    raise _fail("cannot list", exc.filename, exc)


class LocalWriter:
    """Writes a file at offsets, from several threads at once (``write_at``) or in order
    (``write``). Under O_DIRECT a length that is not whole blocks (only a file's last chunk) is
    written through a second descriptor without the flag, so a file of any size is written without
    padding it and without changing the flags of the descriptor other requests are using."""

    def __init__(self, path: str, odirect: bool, alignment: int, dontneed: bool = False) -> None:
        self.path, self._align, self._dontneed = path, alignment if odirect else 1, dontneed
        self._offset = 0  # where write() goes on
        self._buffered: int | None = None  # O_DIRECT: the descriptor for a last unaligned piece
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if odirect else 0)
        try:
            self._fd = os.open(path, flags, 0o644)
        except OSError as exc:
            raise _fail("cannot create", path, exc) from None

    def write(self, data: memoryview) -> None:
        """In order: ``write(2)`` at the descriptor's position, as a framework's file object writes (under
        O_DIRECT, at offsets: its last piece goes through the second descriptor)."""
        if self._align > 1:
            self.write_at(data, self._offset)
        else:
            try:
                view = data
                while view:
                    view = view[os.write(self._fd, view):]
            except OSError as exc:
                raise _fail("write failed on", self.path, exc) from None
            if self._dontneed:
                _advise(self._fd, self._offset, len(data), os.POSIX_FADV_DONTNEED)
        self._offset += len(data)

    def writev(self, parts: list[memoryview]) -> None:
        """In order, the parts gathered in one ``writev(2)`` (again for what a short write left)."""
        if self._align > 1:
            for part in parts:
                self.write(part)
            return
        total = sum(len(p) for p in parts)
        try:
            done = os.writev(self._fd, parts)
            if done < total:  # a short write (a signal, a full disk): the rest, as write() goes on
                rest = memoryview(b"".join(parts))[done:]
                while rest:
                    rest = rest[os.write(self._fd, rest):]
        except OSError as exc:
            raise _fail("write failed on", self.path, exc) from None
        if self._dontneed:
            _advise(self._fd, self._offset, total, os.POSIX_FADV_DONTNEED)
        self._offset += total

    def sync(self) -> None:
        """fsync on this descriptor, before it is closed (a framework's ``os.fsync(stream.fileno())``)."""
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise _fail("fsync failed on", self.path, exc) from None

    def write_at(self, data: memoryview, offset: int) -> None:
        try:
            cut = len(data) - len(data) % self._align
            _pwrite_all(self._fd, data[:cut], offset)
            if cut < len(data):
                if self._buffered is None:
                    self._buffered = os.open(self.path, os.O_WRONLY)
                _pwrite_all(self._buffered, data[cut:], offset + cut)
        except OSError as exc:
            raise _fail("write failed on", self.path, exc) from None
        if self._dontneed:  # starts this range's writeback; clean pages are dropped
            _advise(self._fd, offset, len(data), os.POSIX_FADV_DONTNEED)

    def finish(self) -> None:
        self.abort()

    def abort(self) -> None:
        os.close(self._fd)
        if self._buffered is not None:
            os.close(self._buffered)


def _advise(fd: int, offset: int, length: int, advice: int) -> None:
    """posix_fadvise, which is advice: a file system that takes none (some FUSE and network ones)
    leaves the I/O as it was, not failed."""
    try:
        os.posix_fadvise(fd, offset, length, advice)
    except OSError:
        pass


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while data:
        n = os.pwrite(fd, data, offset)
        data, offset = data[n:], offset + n


class LocalReader:
    """Reads a file at offsets, from several threads at once (``read_at``) or in order (``readinto``)."""

    def __init__(self, path: str, odirect: bool, dontneed: bool = False) -> None:
        self.path, self._dontneed = path, dontneed
        self._offset = 0  # where readinto() goes on
        try:
            self._fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if odirect else 0))
        except OSError as exc:
            raise _fail("cannot open", path, exc) from None
        if dontneed:  # no read-ahead beyond what is asked, as the fork's readers
            _advise(self._fd, 0, 0, os.POSIX_FADV_RANDOM)

    def readinto(self, buf: memoryview) -> int:
        """Fill ``buf`` unless the file ends first; returns the bytes read (0 at the end)."""
        n = self.read_at(buf, self._offset)
        self._offset += n
        return n

    def read_at(self, buf: memoryview, offset: int) -> int:
        """Fill ``buf`` from ``offset`` unless the file ends first; the bytes read."""
        total = 0
        try:
            while total < len(buf):
                n = os.preadv(self._fd, [buf[total:]], offset + total)
                if n == 0:
                    break
                total += n
        except OSError as exc:
            raise _fail("read failed on", self.path, exc) from None
        if self._dontneed and total:
            _advise(self._fd, offset, total, os.POSIX_FADV_DONTNEED)
        return total

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        os.close(self._fd)


class LocalFSBackend(Backend):
    name = "local_fs"
    capabilities = Capabilities(fsync=True, durable_on_close=False, odirect=True, alignment=4096,
                                evict_cache=True, rename=True, positional=True)

    # GDSOptions: GDSBackend's, a subclass that writes through cuFile; hence the getattr of the options only
    # local_fs has, and the writer and reader typed as any backend's (GDS's are not positional)
    options: LocalFSOptions | GDSOptions

    def __init__(self, root: str, options: LocalFSOptions | GDSOptions) -> None:
        self.root = root or "./"
        self.options = options

    def check(self, writing: bool) -> None:
        """The root must be a folder, or creatable: its nearest existing parent a folder. Whether it
        can be written is tried, not asked (:meth:`probe_write`): ``os.access`` misses immutable
        folders and answers for root as if nothing were read-only."""
        path = os.path.abspath(self.root)
        while not os.path.exists(path):
            path = os.path.dirname(path)
        if not os.path.isdir(path):
            raise ConfigError("workload.storage.storage_root", self.root, f"{path} is not a folder")

    def describe(self) -> dict[str, Any]:
        return {"root": os.path.abspath(self.root), "threads": self.options.threads,
                **({"queue_depth": self.queue_depth, "read_queue_depth": self.read_queue_depth,
                    "fadvise_dontneed": self._dontneed} if self.capabilities.positional else {})}

    @property
    def queue_depth(self) -> int:
        return getattr(self.options, "queue_depth", 1)  # GDS's options have none: kvikio splits requests

    @property
    def read_queue_depth(self) -> int:
        return getattr(self.options, "read_queue_depth", None) or self.queue_depth

    @property
    def _dontneed(self) -> bool:
        return getattr(self.options, "fadvise_dontneed", False)

    def join(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    @property
    def buffer_size(self) -> int:
        """The file system's block size (``st_blksize`` of the root's nearest existing folder), which CPython's
        ``open(path, "wb")`` takes as its buffer."""
        size = on_nearest(os.path.abspath(self.root), os.stat).st_blksize
        return size if size > 1 else super().buffer_size

    def makedirs(self, path: str) -> None:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise _fail("cannot create folder", path, exc) from None

    def open_write(self, path: str, odirect: bool) -> Writer:
        return LocalWriter(path, odirect, self.capabilities.alignment, self._dontneed)

    def open_read(self, path: str, odirect: bool) -> Reader:
        return LocalReader(path, odirect, self._dontneed)

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

    def in_memory(self, path: str) -> bool:
        return in_memory(path)

    def free_bytes(self, path: str) -> int | None:
        """Free space of the file system holding ``path`` (its nearest existing parent)."""
        st = on_nearest(path, os.statvfs)
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

    def list_tree(self, path: str) -> list[str]:
        existing = os.path.abspath(path)
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            raise ConfigError("workload.checkpoint.checkpoint_folder", os.path.abspath(path),
                              f"cannot be a folder: {existing} is a file")
        if existing != os.path.abspath(path):
            return []
        out = []
        for here, folders, files in os.walk(path, onerror=_raise):
            rel = os.path.relpath(here, path)
            prefix = "" if rel == "." else rel + "/"
            links = [f for f in folders if os.path.islink(os.path.join(here, f))]  # listed as files: never entered
            out += [prefix + f + "/" for f in folders if f not in links] + [prefix + f for f in files + links]
        return sorted(out)

    def probe_write(self, folder: str, keep_folders: bool = False) -> list[str]:
        """Create the folder and its missing parents, write and remove a probe file in it, then remove
        the folders it created: a read-only or immutable folder, or one this user may not write, is
        found before the run (``os.access`` misses immutable files and some network file systems)."""
        path = os.path.abspath(self.join(folder))
        created = []
        while not os.path.exists(path):
            created.append(path)
            path = os.path.dirname(path)
        probe = os.path.join(self.join(folder), probe_name())
        made: list[str] = []  # deepest last
        try:
            for path in reversed(created):
                os.mkdir(path)
                made.append(path)
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, b"dlio_ckpt probe")
            finally:
                os.close(fd)
            os.remove(probe)
        except OSError as exc:
            keep_folders = False
            where = exc.filename if isinstance(exc.filename, str) else probe
            raise _fail("cannot write", os.path.dirname(where) if where == probe else where, exc) from None
        finally:
            if not keep_folders:
                for path in reversed(made):
                    try:
                        os.rmdir(path)
                    except OSError:
                        pass  # what cannot be removed was not made empty by us; the error above says why
        return made[::-1]  # deepest first: the order to remove them in

    def remove_empty(self, path: str) -> None:
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY:
                raise _fail("cannot remove folder", path, exc) from None

    def put_small(self, path: str, data: bytes) -> None:
        """Write a small file atomically (temporary name, fsync, rename): readers see all or none."""
        self._put(path, data, durable=True)

    def put_marker(self, path: str, data: bytes) -> None:
        """As :meth:`put_small`, without the fsync (:meth:`Backend.put_marker`)."""
        self._put(path, data, durable=False)

    def _put(self, path: str, data: bytes, durable: bool) -> None:
        try:
            with temporary(f"{path}.tmp{os.getpid()}") as tmp:
                with open(tmp, "wb") as fh:
                    fh.write(data)
                    if durable:
                        fh.flush()
                        os.fsync(fh.fileno())
                os.replace(tmp, path)
        except OSError as exc:
            raise _fail("cannot write", path, exc) from None

    def rename(self, source: str, target: str, nbytes: int = 0) -> None:
        """``shutil.move``: a rename, or where ``source`` is on another device (a framework's temporary file in
        ``$TMPDIR``), a copy (``sendfile``) and the source removed."""
        try:
            shutil.move(source, target)
        except OSError as exc:
            raise _fail("cannot rename to", target, exc) from None

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
