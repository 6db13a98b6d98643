"""Checkpoint steps on storage: their names, their commit markers (manifests), and the rules for
checkpoints an earlier run left behind.

Why a module of its own: every mode names its steps the same way (DLIO's ``global_epoch1_step{i}``)
and must neither mix its files with an earlier run's nor let an incomplete step pass for complete.
A step is complete when its manifest exists: written last, by rank 0, once every process finished
(Orbax's atomic commit). The manifest's content belongs to the mode that writes it.
"""

from __future__ import annotations

import logging

from .backends import Backend
from .config import Checkpoint
from .errors import ConfigError

log = logging.getLogger("dlio_ckpt")


def step_name(step: int) -> str:
    return f"global_epoch1_step{step}"


def manifest_path(backend: Backend, folder: str, step: int) -> str:
    return backend.join(folder, f"{step_name(step)}.manifest.json")


def old_checkpoints(backend: Backend, folder: str) -> list[str]:
    """Steps (folders, files and manifests) an earlier run left in the checkpoint folder."""
    return [n for n in backend.list_names(backend.join(folder)) if n.startswith("global_epoch")]


def refuse_old_checkpoints(backend: Backend, ck: Checkpoint, where: str = "workload.storage") -> list[str]:
    """An earlier run's steps are an error unless ``overwrite``; returns them (one listing).
    ``where``: the storage's key (a tier's), named when it is not the first."""
    old = old_checkpoints(backend, ck.checkpoint_folder)
    if old and not ck.overwrite:
        on = "" if where == "workload.storage" else f" on {where}"
        shown = ", ".join(old[:3]) + (f" and {len(old) - 3} more" if len(old) > 3 else "")
        raise ConfigError("workload.checkpoint.checkpoint_folder", ck.checkpoint_folder,
                          f"already holds checkpoints of an earlier run{on} ({shown} in "
                          f"{backend.join(ck.checkpoint_folder)}); set ++workload.checkpoint.overwrite=True "
                          "to replace them, or choose another folder")
    return old


def replace_old_checkpoints(backend: Backend, folder: str) -> None:
    """``checkpoint.overwrite``: manifests go first (so no old step can pass for complete), then
    the steps; before any timing starts."""
    old = old_checkpoints(backend, folder)
    for name in sorted(old, key=lambda n: not n.endswith(".manifest.json")):
        path = backend.join(folder, name)
        backend.remove(path) if name.endswith((".manifest.json", ".ckpt")) else backend.remove_tree(path)
    if old:
        log.info("removed %d entries of an earlier run from %s (checkpoint.overwrite)", len(old),
                 backend.join(folder))
