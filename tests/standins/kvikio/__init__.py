"""A CPU stand-in for kvikio 26.10 as measured on a GPU machine without nvidia-fs (see ../README.md).

Like the real package, importing it does not import ``kvikio.defaults`` or ``kvikio.cufile_driver``.
"""

import os as _os

import numpy as _np

__version__ = "26.10.00+standin"


class _Future:
    def __init__(self, n):
        self._n = n

    def get(self):
        return self._n


class CuFile:
    def __init__(self, file, flags="r"):
        mode = {"r": _os.O_RDONLY, "w": _os.O_WRONLY | _os.O_CREAT | _os.O_TRUNC}[flags]
        self._fd = _os.open(file, mode, 0o644)

    def pwrite(self, buf, size=None, file_offset=0, task_size=None):
        data = _np.asarray(buf).view(_np.uint8).reshape(-1)[:size]
        return _Future(_os.pwrite(self._fd, data.tobytes(), file_offset))

    def pread(self, buf, size=None, file_offset=0, task_size=None):
        size = buf.nbytes if size is None else size
        data = _os.pread(self._fd, size, file_offset)
        if len(data) < size:  # what kvikio does where POSIX would return a short read
            raise RuntimeError("KvikIO failure at posix_io.hpp:173: POSIX error on pread: EOF")
        _np.asarray(buf).view(_np.uint8).reshape(-1)[:size] = _np.frombuffer(data, dtype=_np.uint8)
        return _Future(size)

    def close(self):
        if self._fd >= 0:
            _os.close(self._fd)
            self._fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
