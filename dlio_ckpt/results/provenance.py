"""``provenance.json``: what a run was, as MLPerf Storage 3.0 asks a run to say it, and the facts its
rules need that a summary does not hold (when the invocation started and ended, the accelerator, the
file systems of the checkpoint and results folders).

Why mlpstorage's own ``core_config`` algorithm: two runs with the same hash are the same workload in
MLPerf's eyes (its comparability classes are these hashes), so the hash must be computed exactly as
mlpstorage computes it, or it says nothing. Its definition (mlcommons/storage,
``mlpstorage_py/provenance.py`` ``compute_core_config``/``core_config_hash`` and
``mlpstorage_py/rules/core_config_keys.yaml`` ``checkpointing@1``, at 9cf5d20): the run's parameters
flattened to dotted keys; those under ``framework``, ``model.*``, ``workflow.*`` and ``checkpoint.*``
kept, less ``checkpoint.checkpoint_folder`` and the write/read counts (they pick a phase, not a
workload); values canonicalised (integral floats as ints, "true"/"false" and numeric strings as what
they say); JSON with sorted keys and no spaces; SHA-256, its first 16 hex digits.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from dlio_ckpt import INVOCATION_START, __version__
from dlio_ckpt.cluster.host import file_system
from dlio_ckpt.registry import BACKENDS
from dlio_ckpt.results.folder import flatten

SCHEMA = "dlio_ckpt-run-provenance/1"
CORE_CONFIG = {"algorithm": "core-config-v1", "allowlist": "checkpointing@1",
               "include": ("framework", "model.*", "workflow.*", "checkpoint.*"),
               "exclude": ("checkpoint.checkpoint_folder", "checkpoint.num_checkpoints_write",
                           "checkpoint.num_checkpoints_read")}
_NOT_CODE = {"__pycache__"}


def _canon(value: Any) -> Any:
    """mlpstorage's canonical form of a value, so "5.0", 5.0 and 5 hash alike."""
    if isinstance(value, bool | int) or value is None:
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        for kind in (int, float):
            try:
                return _canon(kind(text))
            except ValueError:
                pass
        return text
    if isinstance(value, list | tuple):
        return [_canon(v) for v in value]
    return value


def _allowed(key: str) -> bool:
    if key in CORE_CONFIG["exclude"]:
        return False
    return any(key.startswith(entry[:-1]) if entry.endswith(".*") else key == entry
               for entry in CORE_CONFIG["include"])


def core_values(parameters: dict[str, Any]) -> dict[str, Any]:
    """What mlpstorage hashes of the (nested or dotted) parameters: the allowed keys, dotted, and their
    canonical values; public so that ``check`` can name the keys where two workloads differ."""
    flat = flatten(json.loads(json.dumps(parameters, default=str)))
    return {k: _canon(flat[k]) for k in sorted(flat) if _allowed(k)}


def core_config(parameters: dict[str, Any]) -> dict[str, Any]:
    """The workload's MLPerf identity from its (nested) parameters: mlpstorage's ``core_config``."""
    values = core_values(parameters)
    canonical = json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return {"algorithm": CORE_CONFIG["algorithm"], "allowlist": CORE_CONFIG["allowlist"],
            "hash": hashlib.sha256(canonical.encode()).hexdigest()[:16], "keys": list(values)}


def code_hash() -> dict[str, str]:
    """Our code as it ran: SHA-256 over the package's files (each one's path, then its bytes, in
    path order: mlpstorage's tree framing, a stronger digest), and the git commit where there is one."""
    root = Path(__file__).resolve().parents[1]  # the package
    digest = hashlib.sha256()
    files = sorted((p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and not _NOT_CODE & set(p.parts)
                    and p.suffix not in (".pyc", ".pyo")), key=lambda p: p.relative_to(root).as_posix().encode())
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10).stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "."], capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha, dirty = "unknown", ""
    return {"algorithm": "sha256-tree", "hash": digest.hexdigest(), "files": str(len(files)),
            "git_sha": sha + ("+changes" if dirty and sha != "unknown" else "")}


def folders(storage_type: str, checkpoint: str | None, results: str) -> dict[str, Any]:
    """MLPerf 3.0's §4.4.2 evidence: the checkpoint folder's file system (None where the storage is
    no folder of this host's: an object store, null) and the results folder's, and whether they are one."""
    ours = file_system(results)
    theirs = file_system(checkpoint) if checkpoint is not None else None
    return {"checkpoint_storage": storage_type, "checkpoint": theirs, "results": ours,
            "same_file_system": None if theirs is None else theirs["device"] == ours["device"]}


def run_facts(accelerator: str | None, storage_type: str, checkpoint_folder: str | None,
              run_dir: str) -> dict[str, Any]:
    """summary.json's facts for MLPerf 3.0's rules: when this invocation began (local time, as DLIO's
    ``start`` and mlpstorage's ``invocation_start_time``), the accelerator, the folders' file systems
    (``checkpoint_folder``: None on an object store)."""
    return {"invocation_start_time": datetime.fromtimestamp(INVOCATION_START).isoformat(),
            "accelerator_type": accelerator, "file_systems": folders(storage_type, checkpoint_folder, run_dir)}


def storage_library(storage: dict[str, Any]) -> dict[str, str]:
    """The client that moved the bytes and its version (``io.storage`` of summary.json in)."""
    kind = storage.get("storage_type", "")
    name = storage.get("library") or (BACKENDS[kind].library if kind in BACKENDS else "posix")
    try:
        return {"name": name, "version": metadata.version(name)}
    except metadata.PackageNotFoundError:
        return {"name": name}


def document(workload: dict[str, Any], library: dict[str, str]) -> dict[str, Any]:
    """``provenance.json``'s content for a run of ``workload`` (its composed, nested parameters, as
    ``.hydra/config.yaml`` holds them): mlpstorage's core_config, and a hash of all of it (ours)."""
    return {"schema": SCHEMA, "tool": {"name": "dlio_ckpt", "version": __version__, **code_hash()},
            "core_config": core_config(workload),
            "config_hash": hashlib.sha256(json.dumps(workload, sort_keys=True, default=str).encode()).hexdigest(),
            "storage_library": library, "stamped_at": datetime.fromtimestamp(time.time(), UTC).isoformat()}
