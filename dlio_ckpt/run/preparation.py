"""The storage before a run, on every tier: it answers and every host can write it, an earlier run's
checkpoints are not mixed with ours, nothing this tool did not write stands where the run writes, the
checkpoints fit, and then an earlier run's checkpoints are replaced and this run's record is written.

Why beside :mod:`dlio_ckpt.run.steps`: these are the rules that decide what may be written and removed
(steps holds the names, the record and what a folder holds); every mode's launch runs them the same way.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

from dlio_ckpt.cluster.host import available_memory, hostname
from dlio_ckpt.config import Workload, tier_key
from dlio_ckpt.errors import ConfigError, StorageError
from dlio_ckpt.io.backends import Backend, check_options, get_backend
from dlio_ckpt.run.context import GIB, RunContext
from dlio_ckpt.run.steps import RECORD, Writes, refuse_mixing, remove_ours


@contextmanager
def _named_as_tier(k: int) -> Iterator[None]:
    """A bad storage option of tier ``k`` is named under its own key, not ``workload.storage``."""
    try:
        yield
    except ConfigError as exc:
        if k == 0:
            raise
        raise ConfigError(exc.key.replace("workload.storage", tier_key(k), 1), exc.value, exc.rule) from None


def tier_backend(workload: Workload, k: int, local_rank: int = 0, node_folder: str | None = None) -> Backend:
    """The backend of tier ``k`` (0: ``storage``; k: ``tiers[k-1]``); a node-scoped tier's root gets
    ``node_folder`` (a pretend host's own sub-folder: :attr:`Placement.node_folder`)."""
    st = workload.storages[k]
    root = os.path.join(st.storage_root, node_folder) if st.scope != "shared" and node_folder else st.storage_root
    with _named_as_tier(k):
        return get_backend(st.storage_type, root, st.storage_options, local_rank)


def check_tier_options(workload: Workload) -> None:
    """Every tier's storage options, validated without building a client (``plan``)."""
    for k, st in enumerate(workload.storages):
        with _named_as_tier(k):
            check_options(st.storage_type, st.storage_options)


def on_tier(ctx: RunContext, k: int) -> Writes:
    """What this run writes in the checkpoint folder of tier ``k`` where this process acts for it: the files beside
    the steps (DeepSpeed's ``latest``) are rank 0's, written on the first tier alone (its own host's copy where the
    tier is node-scoped), so only there are they recorded, and a foreign file of their name refuses the run."""
    return ctx.writes if k == 0 and ctx.comm.rank == 0 else dataclasses.replace(ctx.writes, folder=())


def prepare_storage(ctx: RunContext, needed_bytes: Callable[[], int], writes: Writes) -> None:
    """Before anything is written: the storage answers and can be written, an earlier run's
    checkpoints are not mixed with ours and nothing this tool did not write stands where the run
    writes (``writes``), and ``needed_bytes()`` (every checkpoint this run writes; asked on rank 0
    only) fit where the storage can say; on every tier, each for the steps it keeps."""
    ck = ctx.ck
    ctx.writes = writes

    def survey(k: int, backend: Backend) -> None:  # one listing of the folder, kept by the tier's acting rank
        with _named_as_tier(k):
            backend.check(writing=ck.num_checkpoints_write > 0)
        if ck.num_checkpoints_write > 0:
            try:
                ctx.found[k] = refuse_mixing(backend, ck, on_tier(ctx, k), tier_key(k))
            except ConfigError as exc:  # the tier's own path: named by its key
                if k == 0 or exc.key != "workload.checkpoint.checkpoint_folder":
                    raise
                raise ConfigError(f"{tier_key(k)}.storage_root", ctx.workload.tiers[k - 1].storage_root,
                                  exc.rule) from None

    def room(k: int, backend: Backend) -> None:
        found = ctx.found[k]
        assert found is not None  # surveyed above by this tier's acting rank: both run where the run writes
        if not found.ours:  # else: once the earlier run's steps are gone (start_writing)
            ctx.memory_bytes[k] = check_room(backend, ck.checkpoint_folder, kept(ctx, k, needed_bytes), k)
    ctx.found = [None] * len(ctx.tiers)
    for k, backend in enumerate(ctx.tiers):
        ctx.on_tier_io(k, partial(survey, k, backend))
    if ck.num_checkpoints_write > 0:
        probe_writable(ctx)
        for k, backend in enumerate(ctx.tiers):
            ctx.on_tier_io(k, partial(room, k, backend))


def probe_writable(ctx: RunContext) -> None:
    """Every host's acting rank (its local rank 0) creates the checkpoint folder on every tier, writes
    and removes a probe file and removes what it created: a read-only, immutable or foreign folder is
    found here, before anything is written, on the host that cannot write it. The answer is shared,
    so every rank ends alike (exit 2)."""
    comm = ctx.comm
    made: list[tuple[Backend, str]] = []  # the folders each probe created and left, with their storage

    def probe(keep: bool) -> tuple[int, str] | None:
        for k, backend in enumerate(ctx.tiers):
            try:
                with ctx.watch():
                    made.extend((backend, f) for f in backend.probe_write(ctx.ck.checkpoint_folder, keep))
            except StorageError as exc:
                return k, f"{exc} (on host {hostname()}, rank {comm.rank})"
        return None
    # rank 0 first, leaving the folders it made, so that hosts sharing a file system never make or
    # remove the same folder at once; then every other host's acting rank; then rank 0 tidies up
    problem = probe(keep=True) if comm.rank == 0 else None
    problems = [p for p in comm.allgather(problem) if p is not None]
    if not problems:
        problem = probe(keep=False) if ctx.placement.acts and comm.rank != 0 else None
        problems = [p for p in comm.allgather(problem) if p is not None]
    for backend, folder in made:  # each probe's deepest first
        backend.remove_empty(folder)
    if problems:
        k, why = problems[0]
        st = ctx.workload.storages[k]
        key, value = ("workload.checkpoint.checkpoint_folder", ctx.ck.checkpoint_folder) if k == 0 else \
            (f"{tier_key(k)}.storage_root", st.storage_root)
        raise ConfigError(key, value, why)


def kept(ctx: RunContext, k: int, needed_bytes: Callable[[], int]) -> Callable[[], int]:
    """Bytes tier ``k`` holds at most: with keep_last, its newest steps and the one being written; on a
    node tier, this host's share (its processes' part of the whole; on a peer tier, replicas of it)."""
    st = ctx.workload.storages[k]
    writes = ctx.ck.num_checkpoints_write
    steps = st.keep_last + 1 if st.keep_last and st.keep_last + 1 < writes else writes
    copies = st.replicas if st.scope == "peer" else 1  # a peer tier keeps other hosts' parts
    here, everyone = (copies * len(ctx.placement.members()), ctx.comm.size) if st.scope != "shared" else (1, 1)
    if steps == writes and here == everyone:
        return needed_bytes
    return lambda: needed_bytes() // writes * steps * here // everyone


def check_room(backend: Backend, folder: str, needed_bytes: Callable[[], int], k: int = 0) -> int | None:
    """``k``: the tier, named in the message when not the first (its storage_root is the key). A folder
    in memory (a tmpfs: a memory tier) must also fit in the memory still available on this host, which
    a tmpfs's own size does not promise. Returns the bytes such a memory tier will take (else None)."""
    path = backend.join(folder)
    free, memory = backend.free_bytes(path), backend.in_memory(path)
    if free is None and not memory:
        return None
    needed = needed_bytes()
    available = available_memory() if memory else None
    if (free is not None and needed > free) or (available is not None and needed > available):
        key, value = ("workload.checkpoint.checkpoint_folder", folder) if k == 0 else \
            (f"{tier_key(k)}.storage_root", path)
        room = f"{path} has {free / GIB:.2f} GiB ({free} bytes) free" if free is not None else f"{path}"
        raise ConfigError(key, value, f"needs {needed / GIB:.2f} GiB ({needed} bytes) for the checkpoints it holds, "
                          f"and {room}" + (f"; it is in memory (a tmpfs), and this host ({hostname()}) has "
                                           f"{available / GIB:.2f} GiB available: keep fewer steps there "
                                           "(keep_last), or use a disk" if available is not None else ""))
    return needed if memory else None


def start_writing(ctx: RunContext, needed_bytes: Callable[[], int]) -> None:
    """Rank 0 replaces an earlier run's checkpoints (``checkpoint.overwrite``: only what that run
    wrote; then checks the room that frees), makes the checkpoint folder and records what this run
    writes there, on every tier, before any timing starts."""
    about = {"workload": ctx.workload.model.name, "mode": ctx.workload.mode, "run_dir": ctx.run_dir,
             "world_size": ctx.world_size}
    def replace(k: int, backend: Backend) -> None:
        found = ctx.found[k]
        assert found is not None  # surveyed by prepare_storage on this tier's acting rank, as a run writes
        if found.ours:
            remove_ours(backend, found)
            ctx.memory_bytes[k] = check_room(backend, ctx.ck.checkpoint_folder, kept(ctx, k, needed_bytes), k)
        backend.makedirs(backend.join(ctx.ck.checkpoint_folder))
        backend.put_small(backend.join(ctx.ck.checkpoint_folder, RECORD), on_tier(ctx, k).as_json(about))
    for k, backend in enumerate(ctx.tiers):
        ctx.on_tier_io(k, partial(replace, k, backend))
