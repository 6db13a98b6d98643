"""What really moves the bytes of a kvikio transfer: GPUDirect Storage, or one of the two
compatibility modes that look the same from the outside and are plain POSIX I/O underneath.

Why: a user must never mistake a POSIX run for a GDS one. Three layers decide, and each is asked:
- kvikio itself may not use cuFile at all (its ``compat_mode``; AUTO falls back when libcufile is
  missing or /run/udev is unreadable): ``kvikio.defaults.is_compat_mode_preferred()``;
- cuFile may run in *its* compatibility mode (POSIX through its bounce buffers) when the nvidia-fs
  kernel driver is not loaded (``kvikio.cufile_driver.get("is_gds_available")``);
- and per file: only some file systems support GDS (local ext4/xfs on NVMe, Lustre, GPFS, WekaFS,
  BeeGFS, NFS over RDMA); elsewhere cuFile falls back to POSIX for that file.
Requests smaller than kvikio's ``gds_threshold`` always go through POSIX (reported too).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from dlio_ckpt.cluster.host import file_system

# File systems NVIDIA's GDS documentation lists as supported (with suitable storage beneath)
GDS_FILE_SYSTEMS = ("ext4", "xfs", "lustre", "gpfs", "wekafs", "beegfs", "nfs", "nfs4")


def _ask(module: str, fn: str, *args: Any) -> Any:
    """One kvikio query; None where this kvikio has no such query or cuFile cannot answer."""
    try:
        return getattr(importlib.import_module(module), fn)(*args)
    except Exception:  # an older kvikio, or libcufile missing: the caller says "unknown"
        return None


def transport(path: str) -> dict[str, Any]:
    """``summary.json``'s answer to "did this run use GDS?" for files under ``path``."""
    kvikio_posix = _ask("kvikio.defaults", "is_compat_mode_preferred")
    requested = _ask("kvikio.defaults", "get", "compat_mode")
    gds_available = _ask("kvikio.cufile_driver", "get", "is_gds_available")
    threshold = _ask("kvikio.defaults", "get", "gds_threshold")
    fstype = file_system(path)["type"]
    nvidia_fs = os.path.exists("/proc/driver/nvidia-fs/stats")
    if kvikio_posix:
        used, why = "posix (kvikio compatibility mode)", (
            f"kvikio's compat_mode is {requested}: it does not use cuFile (set ON, or AUTO found no "
            "usable libcufile or /run/udev)")
    elif kvikio_posix is None:
        used, why = "unknown", "this kvikio does not say whether it uses cuFile"
    elif not gds_available:
        used, why = "posix (cuFile compatibility mode)", (
            "cuFile reports GDS unavailable" + ("" if nvidia_fs else ": the nvidia-fs kernel module is not loaded"))
    elif fstype not in GDS_FILE_SYSTEMS:
        used, why = "posix (cuFile compatibility mode)", f"file system {fstype} does not support GDS"
    else:
        used, why = "gds", f"cuFile with nvidia-fs on {fstype}"
    return {"transport": used, "why": why, "file_system": fstype, "kvikio_compat_mode": str(requested),
            "cufile_gds_available": gds_available, "nvidia_fs_loaded": nvidia_fs,
            "gds_threshold_bytes": threshold,
            "note": "requests smaller than gds_threshold_bytes always go through POSIX"}
