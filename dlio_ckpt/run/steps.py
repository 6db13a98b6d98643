"""Checkpoint steps on storage: their names, their commit markers (manifests), the record of what a
run writes, and the rules for what an earlier run left behind.

Why a module of its own: every mode names its steps the same way (DLIO's ``global_epoch1_step{i}``)
and must neither mix its files with an earlier run's, nor let an incomplete step pass for complete,
nor remove anything it did not write. A step is complete when its manifest exists: written last, by
rank 0, once every process finished (Orbax's atomic commit). What the tool may remove is what a
manifest or a run record names: the record (:data:`RECORD`) is written before the first step and
lists every file the run may write, so the files of a run killed in the middle of a step are known
for what they are. Anything else is left alone, and where it sits in a step the run must replace,
the run is refused before anything is removed.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from dlio_ckpt import __version__
from dlio_ckpt.config import Checkpoint
from dlio_ckpt.errors import ConfigError
from dlio_ckpt.io.backends import Backend

log = logging.getLogger("dlio_ckpt")
RECORD = "dlio_ckpt_run.json"  # in the checkpoint folder: what the last run there writes
STEP = re.compile(r"global_epoch1_step([1-9]\d*)")
MANIFEST = re.compile(r"global_epoch1_step([1-9]\d*)\.manifest\.json")


def step_name(step: int) -> str:
    return f"global_epoch1_step{step}"


def manifest_path(backend: Backend, folder: str, step: int) -> str:
    return backend.join(folder, f"{step_name(step)}.manifest.json")


@dataclass(frozen=True)
class Writes:
    """What a run writes in its checkpoint folder: ``files`` in each step's folder, beside the
    folder one file per suffix in ``beside`` (Lightning's ``global_epoch1_step{i}.ckpt``), and the
    ``folder`` files every save rewrites in the checkpoint folder itself, no step's (DeepSpeed's
    ``latest``). Names a framework may or may not write are listed too: removing a file that is not
    there is nothing."""

    steps: tuple[int, ...]
    files: tuple[str, ...] = ()
    beside: tuple[str, ...] = ()
    folder: tuple[str, ...] = ()

    @staticmethod
    def of_run(ck: Checkpoint, files: tuple[str, ...] = (), beside: tuple[str, ...] = (),
               folder: tuple[str, ...] = ()) -> Writes:
        """Steps 1..num_checkpoints_write, each with these files, and the folder's own."""
        return Writes(tuple(range(1, ck.num_checkpoints_write + 1)), files, beside, folder)

    def of_step(self, step: int) -> list[str]:
        """The paths of ``step``, relative to the checkpoint folder."""
        name = step_name(step)
        return [f"{name}/{f}" for f in self.files] + [name + suffix for suffix in self.beside]

    def paths(self) -> set[str]:
        return {p for step in self.steps for p in self.of_step(step)} | set(self.folder)

    def as_json(self, about: dict[str, Any]) -> bytes:
        """The run record (``dlio_ckpt_run.json``): what this run may write, as JSON."""
        return json.dumps({"tool": "dlio_ckpt", "version": __version__, **about, "steps": list(self.steps),
                           "files": list(self.files), "beside": list(self.beside),
                           "folder": list(self.folder)}).encode()


def _ours(body: bytes | None, lists: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """A manifest or record this tool wrote, parsed; None for anything else under that name (also a
    file that claims to be ours and lacks the ``lists`` of names it must carry). An ``optional`` list
    (one an older version did not write) must be a list of names where it is present."""
    try:
        parsed = json.loads(body) if body is not None else None
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(parsed, dict) or parsed.get("tool") != "dlio_ckpt":
        return None
    for key in (*lists, *(k for k in optional if k in parsed)):
        value = parsed.get(key)
        names = list(value) if isinstance(value, list | dict) else None
        if names is None or not all(isinstance(n, str | int) and not isinstance(n, bool) for n in names):
            return None
    return parsed


def _read(backend: Backend, folder: str, name: str, root: str) -> bytes:
    """A file the listing showed: one that cannot be read at its address was written with another
    ``spread_prefixes`` (object stores hash it into the key), which this run cannot tell apart."""
    body = backend.get_small(backend.join(folder, name))
    if body is None:
        raise ConfigError("workload.checkpoint.checkpoint_folder", folder,
                          f"{name} is listed in {root} but cannot be read where this run looks for it: it was written "
                          "with another storage_options.spread_prefixes; use that value, or choose another folder")
    return body


@dataclass
class Found:
    """A checkpoint folder sorted out: what this tool wrote there and what it did not."""

    folder: str  # the checkpoint folder, as the backend joins it
    root: str  # its full path, for messages
    ours: list[str] = field(default_factory=list)  # present and named by a manifest or the record
    folders: list[str] = field(default_factory=list)  # step folders (and folders in them) of those steps
    steps: set[int] = field(default_factory=set)  # steps of which something of ours is present
    foreign: list[str] = field(default_factory=list)  # in a step this run must replace, named by nothing of ours


def survey(backend: Backend, folder: str, writes: Writes | None = None) -> Found:
    """One listing of the folder, and a read of each manifest and of the record, sorted into what
    this tool wrote and what it did not; ``writes``: the steps the coming run writes, which must
    hold nothing foreign either."""
    root = backend.join(folder)
    tree = backend.list_tree(root)
    files = {p for p in tree if not p.endswith("/")}
    named: set[str] = set()
    beside = set(writes.beside if writes else ())
    in_folders = bool(writes and writes.files)  # Lightning writes beside the step folder, never in it
    record = _ours(_read(backend, folder, RECORD, root), ("steps", "files", "beside"), ("folder",)) \
        if RECORD in files else None
    if record is not None:
        past = Writes(tuple(record["steps"]), tuple(record["files"]), tuple(record["beside"]),
                      tuple(record.get("folder", ())))
        named |= past.paths() | {RECORD}
        beside |= set(past.beside)
        in_folders = in_folders or bool(past.files)
    for p in sorted(files):
        m = MANIFEST.fullmatch(p)
        if m:
            body = _ours(_read(backend, folder, p, root), ("files",))
            if body is None:
                continue  # someone else's file under a manifest's name: foreign where it matters
            name = step_name(int(m.group(1)))
            named |= {p, *(f"{name}/{f}" for f in body["files"])}
            in_folders = in_folders or bool(body["files"])
    found = Found(folder, root, ours=sorted(files & named))
    found.steps = {n for p in found.ours if (n := _step_of(p, beside, in_folders)) is not None}
    replaced = found.steps | set(writes.steps if writes else ())
    rewritten = {RECORD, *(writes.folder if writes else ())}  # the folder's own files this run writes
    for p in sorted(tree):
        n = _step_of(p, beside, in_folders)
        if n is None or n not in replaced:
            if p.rstrip("/") in rewritten and p not in named:  # someone else's under the name of one of ours
                found.foreign.append(p)
        elif p.endswith("/") and "/" not in p.rstrip("/"):
            found.folders.append(p)  # a step's own folder: removed once empty
        elif p not in named:
            found.foreign.append(p)  # a file, or a folder of someone else's, inside a step
    return found


def _step_of(path: str, beside: set[str], in_folders: bool = True) -> int | None:
    """The step a path of the checkpoint folder belongs to: anything in a step's folder (where the
    layout writes in one), its manifest, a file beside it with one of the run's suffixes; None for
    anything else."""
    if "/" in path.rstrip("/") or path.endswith("/"):
        if not in_folders:
            return None
        path = path.split("/")[0]
    m = STEP.fullmatch(path) or MANIFEST.fullmatch(path) or next(
        (m for s in beside if path.endswith(s) and (m := STEP.fullmatch(path.removesuffix(s)))), None)
    return int(m.group(1)) if m else None


def refuse_mixing(backend: Backend, ck: Checkpoint, writes: Writes, where: str = "workload.storage") -> Found:
    """Refuse, before anything is removed or written, a folder where this run would mix its steps
    with an earlier run's (unless ``overwrite``) or would have to replace what this tool did not
    write (always). ``where``: the storage's key (a tier's), named when it is not the first."""
    found = survey(backend, ck.checkpoint_folder, writes)
    key, on = "workload.checkpoint.checkpoint_folder", "" if where == "workload.storage" else f" on {where}"
    if found.foreign:
        # in a step, or only under the name of a file the layout writes beside the steps (DeepSpeed's latest)
        in_step = any(p.rstrip("/") not in writes.folder for p in found.foreign)
        them = "it" if len(found.foreign) == 1 else "them"
        why = (f"(no manifest or run record of it names {them}), where this run must write or replace a step" if in_step
               else f"(no run record of it names {them}); checkpoint.layout={ck.layout} writes {them} there at every "
                    "save, as its framework does")
        raise ConfigError(key, ck.checkpoint_folder,
                          f"holds {_listed(found.foreign)}{on} in {found.root}, which dlio_ckpt did not write {why}; "
                          f"nothing was removed: move {them} elsewhere, or choose another folder")
    if found.ours and not ck.overwrite:
        raise ConfigError(key, ck.checkpoint_folder,
                          f"already holds checkpoints of an earlier run{on} ({_listed(_top_names(found.ours))} in "
                          f"{found.root}); set ++workload.checkpoint.overwrite=True to replace them, or choose "
                          "another folder")
    return found


def _top_names(paths: list[str]) -> list[str]:
    return sorted({p.split("/")[0] for p in paths})


def _listed(paths: list[str]) -> str:
    return ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


def remove_ours(backend: Backend, found: Found) -> None:
    """Remove what :func:`survey` found of ours, and nothing else: the manifests first (so no step
    passes for complete while it goes), then the files, the folders that are then empty, and the
    record last (it names the rest until then)."""
    manifests = [p for p in found.ours if MANIFEST.fullmatch(p)]
    rest = [p for p in found.ours if p not in manifests and p != RECORD]
    for p in [*manifests, *rest]:
        backend.remove(backend.join(found.folder, p))
    for p in sorted(found.folders, key=lambda f: -f.count("/")):
        backend.remove_empty(backend.join(found.folder, p.rstrip("/")))
    if RECORD in found.ours:
        backend.remove(backend.join(found.folder, RECORD))
    if found.ours:
        log.info("removed %d files that dlio_ckpt wrote in %s", len(found.ours), found.root)


def remove_step(backend: Backend, folder: str, step: int, writes: Writes) -> None:
    """One step of this run (keep_last): its manifest first, then its files, then its folder if empty."""
    backend.remove(manifest_path(backend, folder, step))
    for p in writes.of_step(step):
        backend.remove(backend.join(folder, p))
    backend.remove_empty(backend.join(folder, step_name(step)))
