"""``checkpoint.reference``: each preset does on the file system what its tool does, seen in the system
calls themselves (strace: every thread's calls on the checkpoint files, each with its path), and a key
set against the preset is refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.oracles.dlio_reference_trace import workload_yaml
from tests.support import DATA, REPO, strace_calls
from tests.support.cli import MPIEXEC, load

MIB = 1 << 20
DLIO_TRACE = DATA / "dlio_reference_trace.json"  # tests/oracles/dlio_reference_trace.py


def traced(tmp_path, name: str, *args: str, nprocs: int | None = None) -> dict[str, list[strace_calls.Call]]:
    """A 2-rank run (tiny, or ``args``) with ``reference=name`` under strace; per thread, its calls on the
    checkpoint's files as (call, arguments, result): every kind of write, read and sync
    (tests/support/strace_calls.py)."""
    if shutil.which("strace") is None:  # a skip: under CI, a failure (tests/conftest.py)
        pytest.skip("strace is not installed (scripts/setup.sh installs it)")
    run = [sys.executable, "-m", "dlio_ckpt", *(args or ["workload=tiny", "--world-size", "2"]),
           f"++workload.checkpoint.reference={name}", "++workload.checkpoint.num_checkpoints_write=1",
           "++workload.checkpoint.num_checkpoints_read=1", "++workload.checkpoint.checkpoint_folder=ck",
           "++hydra.run.dir=out"]
    if nprocs:
        run = [str(MPIEXEC), "-n", str(nprocs), *run]
    r = subprocess.run([*strace_calls.command(tmp_path / "trace"), *run], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr[-3000:]
    return strace_calls.calls_on(tmp_path / "trace", "/ck/global_epoch1_step1/")


def _each(calls: dict[str, list[tuple[str, str, int]]], name: str) -> list[tuple[str, str, int, tuple | None]]:
    """Every call ``name`` with the call after it in its thread."""
    return [(c, args, res, seq[i + 1] if i + 1 < len(seq) else None)
            for seq in calls.values() for i, (c, args, res) in enumerate(seq) if c == name]


def test_mlcommons_writes_raw_32_mib_drops_behind_and_fsyncs(tmp_path):
    calls = traced(tmp_path, "mlcommons")
    summary = load(tmp_path / "out" / "summary.json")
    planned = dict(_sizes(tmp_path))
    opened = [args for c, args, _, _ in _each(calls, "openat")]
    assert opened and all("O_DIRECT" not in a for a in opened)  # buffered, as the fork's local_fs
    assert all(a.split('"')[1].endswith(".bin") for a in opened)  # raw bytes (format raw: DLIO's .bin)
    writes = _each(calls, "pwrite64")
    assert writes and all(res <= 32 * MIB for _, _, res, _ in writes)
    written: dict[str, int] = {}
    for _, args, res, after in writes:  # each write followed by DONTNEED on exactly its range
        path, offset = _path(args), int(args.rsplit(",", 1)[1])
        written[path] = written.get(path, 0) + res
        assert after is not None and after[0] == "fadvise64" and _path(after[1]) == path
        assert after[1].endswith(f", {offset}, {res}, POSIX_FADV_DONTNEED")
    assert written == planned  # one write per file here: tiny's files are smaller than 32 MiB
    fsynced = {_path(args) for _, args, _, _ in _each(calls, "fsync")}
    assert fsynced == set(planned)  # fsync at close, every file
    assert not _each(calls, "fdatasync")  # no eviction before reads: the fork drops none
    reads = _reads(calls)
    assert {_path(a) for _, a, _, _ in reads} == set(planned)
    for _, args, res, after in reads:  # each read followed by DONTNEED on what it read
        assert after is not None and after[0] == "fadvise64" and _path(after[1]) == _path(args)
        assert after[1].endswith(f"{res}, POSIX_FADV_DONTNEED")
    random = [a for _, a, _, _ in _each(calls, "fadvise64") if a.endswith("POSIX_FADV_RANDOM")]
    assert {_path(a) for a in random} == set(planned)  # each file opened to read: no read-ahead
    io = summary["io"]
    assert io["reference"]["name"] == "mlcommons" and io["verified"] is False and io["format"] == "raw"
    assert io["storage"]["read_queue_depth"] == 4 and io["storage"]["queue_depth"] == 1
    assert io["chunk_size"] == 32 * MIB and io["read_cache"] == "allowed"


def test_dlio_2_0_writes_pt_archives_and_never_syncs(tmp_path):
    """DLIO v2.0.1 reads checkpoint.fsync into an attribute its writer never looks at: tiny's YAML
    asks for no fsync, an override asks for it, and the preset does none either way."""
    calls = traced(tmp_path, "dlio-2.0")
    planned = {f for f, _ in _sizes(tmp_path)}
    assert {_path(a) for _, a, _, _ in _each(calls, "pwrite64")} == planned
    assert all(p.endswith(".pt") for p in planned)
    files = strace_calls.summary(calls, (".pt",))
    assert strace_calls.synced_or_sync_opened(files) == [] and not _each(calls, "fadvise64")
    assert not strace_calls.unattached_syncs(tmp_path / "trace")
    assert {_path(a) for _, a, _, _ in _reads(calls)} == planned  # read back from the page cache
    io = load(tmp_path / "out" / "summary.json")["io"]
    assert io["reference"]["name"] == "dlio-2.0" and io["fsync"] is False and io["verified"] is False


def test_dlio_2_0_does_to_the_files_what_upstream_dlio_did_in_its_system_calls(tmp_path):
    """Upstream DLIO v2.0.1 itself, traced (recorded by tests/oracles/dlio_reference_trace.py in its own venv:
    DLIO imports TensorFlow), beside the preset on the same workload YAML, 2 processes each: the same files of
    the same sizes, each written by one thread and read back whole, no durability call of any kind (its
    ``fsync: True`` has no effect in DLIO), no synchronous or direct open, no advice to the page cache.
    The write calls themselves differ (torch.save writes record by record: 13-37 writes a file here; the preset
    streams chunks): DLIO's pattern is recorded beside the preset's, not held to it."""
    upstream = json.loads(DLIO_TRACE.read_text())
    cfg = tmp_path / "cfg" / "workload"
    cfg.mkdir(parents=True)
    (cfg / "tiny_llama_ckpt.yaml").write_text(workload_yaml("ck"))
    calls = traced(tmp_path, "dlio-2.0", "--config-dir", str(tmp_path / "cfg"), "workload=tiny_llama_ckpt", nprocs=2)
    ours = strace_calls.summary(calls, (".pt",))
    theirs = upstream["files"]
    step = tmp_path / "ck" / "global_epoch1_step1"
    assert {p.name: p.stat().st_size for p in step.iterdir()} == {n: f["size"] for n, f in theirs.items()}
    assert sorted(ours) == sorted(theirs)
    for name, f in theirs.items():
        mine = ours[name]
        print(f"{name}: DLIO {f['writes']} writes, {f['reads']} reads; preset {mine['writes']} writes, "
              f"{mine['reads']} reads")
        assert mine["written"] == f["written"] == f["size"]  # written once, whole
        assert mine["writer_threads"] == f["writer_threads"] == 1
        assert mine["read"] >= f["size"] and f["read"] >= f["size"]  # read back whole (DLIO's zip reader re-reads)
        assert mine["open_flags"] == f["open_flags"]  # created, truncated, then opened to read; no sync flags
    assert strace_calls.synced_or_sync_opened(theirs) == strace_calls.synced_or_sync_opened(ours) == []
    assert upstream["unattached_syncs"] == dict(strace_calls.unattached_syncs(tmp_path / "trace")) == {}
    assert all(f["fadvise"] == 0 for f in (*theirs.values(), *ours.values()))


def _reads(calls: dict[str, list[tuple[str, str, int]]]) -> list[tuple[str, str, int, tuple | None]]:
    """os.preadv's calls: preadv, or preadv2 where the C library has it."""
    return _each(calls, "preadv") + _each(calls, "preadv2")


def _path(args: str) -> str:
    """The file a call on a descriptor was on (strace -y shows it beside the descriptor), by its name."""
    return strace_calls.path_of("", args)


def _sizes(tmp_path) -> list[tuple[str, int]]:
    """The checkpoint's files and sizes, as the run reports them (its fsyncs are spans of 0 bytes)."""
    stats = load(tmp_path / "out" / "0_per_epoch_stats.json")["1"]["save_ckpt1"]["file_times"]
    return [(os.path.basename(path), n) for path, _, _, n in stats if n]
