"""A CPU stand-in for the few cupy calls dlio_ckpt makes (see ../README.md)."""

import numpy as _np
from numpy import arange, bitwise_xor, empty, uint8, uint64  # noqa: F401

from . import cuda  # noqa: F401

transfers = {"to_device": 0, "to_host": 0}  # bytes moved across the "bus", for the tests to check


def asarray(a, dtype=None):
    """Host to device: always a copy, as a real transfer is."""
    out = _np.array(a, dtype=dtype, copy=True)
    transfers["to_device"] += out.nbytes
    return out


def asnumpy(a, out=None):
    transfers["to_host"] += a.nbytes
    if out is None:
        return _np.array(a, copy=True)
    _np.copyto(out, a)
    return out
