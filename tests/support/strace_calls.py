"""Reading strace's record of a run: the system calls made on a checkpoint's files, per thread, and a
summary per file that two tools' runs can be compared by (the reference presets' tests and the recording of
upstream DLIO's own calls, ``tests/oracles/dlio_reference_trace.py``, share it: one reading of a trace).

Every kind of durability call is traced, not only ``fsync``: a tool that never syncs must show none of
``fdatasync``, ``sync_file_range``, ``syncfs``, ``sync`` or ``msync``, nor open a file ``O_SYNC``/``O_DSYNC``
(nor ``O_DIRECT``: what the presets' tools never do either).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

SYNCS = ("fsync", "fdatasync", "sync_file_range", "syncfs", "sync", "msync")
WRITES = ("write", "pwrite64", "writev", "pwritev", "pwritev2")
READS = ("read", "pread64", "readv", "preadv", "preadv2")
TRACED = ("openat", "open", "creat", "close", "rename", "renameat", "renameat2", "fadvise64", "mmap",
          *WRITES, *READS, *SYNCS)
SYNC_FLAGS = ("O_SYNC", "O_DSYNC", "O_DIRECT")
CALL = re.compile(r"^(\w+)\((.*)\)\s+= (-?\d+|0x[0-9a-f]+)")  # strace pads a short call to column 40

Call = tuple[str, str, int]  # (call, its arguments as strace prints them, its result)


def command(prefix: Path) -> list[str]:
    """strace's options: every thread (``-ff`` a file each, named ``prefix.PID``), paths beside descriptors; the
    calls not traced filtered in the kernel (``--seccomp-bpf``: a traced job runs at twice the speed or more, the
    calls recorded the same)."""
    return ["strace", "-f", "-ff", "-y", "-qq", "--seccomp-bpf", "-o", str(prefix), "-e", "trace=" + ",".join(TRACED)]


def calls_on(prefix: Path, marker: str) -> dict[str, list[Call]]:
    """Per thread (its trace file's name), the calls whose arguments hold ``marker`` (a folder of the
    checkpoint), in order."""
    calls = {}
    for f in sorted(prefix.parent.glob(prefix.name + ".*")):
        mine = [(m[1], m[2], int(m[3], 0)) for line in f.read_text(errors="replace").splitlines()
                if (m := CALL.match(line)) and marker in m[2]]
        if mine:
            calls[f.name] = mine
    return calls


def unattached_syncs(prefix: Path) -> Counter[str]:
    """``sync()`` and ``syncfs()`` anywhere in the run, by kind: a sync of everything names no checkpoint file."""
    seen: Counter[str] = Counter()
    for f in prefix.parent.glob(prefix.name + ".*"):
        for line in f.read_text(errors="replace").splitlines():
            if (m := CALL.match(line)) and m[1] in ("sync", "syncfs"):
                seen[m[1]] += 1
    return seen


OPENS = ("openat", "open", "creat")


def path_of(call: str, args: str) -> str:
    """The file a call was on, by its name: an open's quoted path; else the path strace -y prints beside the
    descriptor (a rename: its first path)."""
    if call in OPENS or call.startswith("rename"):
        return os.path.basename(args.split('"')[1])
    return os.path.basename(args.split("<", 1)[1].split(">", 1)[0]) if "<" in args else ""


def open_flags(args: str) -> str:
    """An open's flags, sorted and joined by ``|`` (after its quoted path)."""
    found = re.search(r"O_[A-Z0-9_|]+", args.split('"', 2)[2])
    return "|".join(sorted(found[0].split("|"))) if found else ""


def summary(calls: dict[str, list[Call]], suffixes: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Per checkpoint file (names ending in one of ``suffixes``): how it was opened (the flags of each open,
    as a sorted list of distinct sets), written (calls, of them gathered ``writev``s, bytes), read (calls,
    bytes), synced (calls by kind), advised (fadvise64 calls), mapped (mmap calls), and by how many threads
    written."""
    out: dict[str, dict[str, Any]] = {}
    writers: dict[str, set[str]] = {}
    for thread, seq in calls.items():
        for call, args, result in seq:
            name = path_of(call, args)
            if not name.endswith(suffixes) or result < 0:
                continue
            f = out.setdefault(name, {"open_flags": [], "writes": 0, "writevs": 0, "written": 0, "reads": 0,
                                      "read": 0, "syncs": {}, "fadvise": 0, "mmap": 0})
            if call in OPENS:
                if (flags := open_flags(args)) not in f["open_flags"]:
                    f["open_flags"] = sorted([*f["open_flags"], flags])
            elif call in WRITES:
                f["writes"] += 1
                f["writevs"] += call == "writev"
                f["written"] += result
                writers.setdefault(name, set()).add(thread)
            elif call in READS:
                f["reads"] += 1
                f["read"] += result
            elif call in SYNCS:
                f["syncs"][call] = f["syncs"].get(call, 0) + 1
            elif call == "fadvise64":
                f["fadvise"] += 1
            elif call == "mmap":
                f["mmap"] += 1
    for name, threads in writers.items():
        out[name]["writer_threads"] = len(threads)
    return out


def synced_or_sync_opened(files: dict[str, dict[str, Any]]) -> list[str]:
    """Each file with any durability call or a synchronous/direct open, said: empty for a tool that never syncs."""
    said = [f"{name}: {kind} x{n}" for name, f in files.items() for kind, n in f["syncs"].items()]
    said += [f"{name}: opened {flags}" for name, f in files.items() for flags in f["open_flags"]
             if any(s in flags.split("|") for s in SYNC_FLAGS)]
    return said


def traced_load(cwd: Path, args: list[str]) -> tuple[dict, int]:
    """A run on 2 processes under ``strace -f``, its summary and the bytes its read calls returned on files of the
    checkpoint's step folder (``-y`` prints each descriptor's path)."""
    import shutil
    import subprocess
    import sys

    import pytest

    from tests.support import REPO
    from tests.support.cli import MPIEXEC, load

    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    out = cwd / "strace"  # -ff: a file per thread, so no call is split into "unfinished" and "resumed" lines
    cmd = ["strace", "-f", "-ff", "-qq", "-y", "--seccomp-bpf", "-o", str(out),
           "-e", "trace=read,pread64,readv,preadv,preadv2",
           str(MPIEXEC), "-n", "2", sys.executable, "-m", "dlio_ckpt", *args]
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    call = re.compile(r"^(?:read|pread64|readv|preadv|preadv2)\(\d+<([^>]*)>.*\) += (\d+)$")
    read = sum(int(m[2]) for f in cwd.glob("strace.*") for line in f.read_text(errors="replace").splitlines()
               if (m := call.match(line)) and "/ck/global_epoch1_step1/" in m[1])
    summary = load(cwd / args[args.index("++hydra.run.dir=traced")].split("=", 1)[1] / "summary.json")
    return summary, read


def traced(cmd: list[str], prefix: Path, cwd: Path, env: dict[str, str] | None = None) -> None:
    """``cmd`` run under strace (:func:`command`, traces at ``prefix.TID``); it must succeed."""
    import shutil
    import subprocess

    import pytest

    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    r = subprocess.run([*command(prefix), *cmd], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]


def write_pattern(calls: dict[str, list[Call]], suffixes: tuple[str, ...]) -> dict[str, Any]:
    """How a save wrote its files (names ending in one of ``suffixes``), as two tools' saves are compared
    (``tests/against_frameworks/test_io_patterns.py``): per file opened for writing, its :func:`summary` and
    the sizes of its write calls by power of two (``n.bit_length()``: 704 B and 873 B in one bin, 1 MiB in
    another); the renames between them (base names); and the threads that wrote any of them."""
    files = {name: f for name, f in summary(calls, suffixes).items() if any("O_WRONLY" in o for o in f["open_flags"])}
    sizes: dict[str, Counter[int]] = {name: Counter() for name in files}
    renames, writers = [], set()
    for thread, seq in calls.items():
        for call, args, result in seq:
            name = path_of(call, args)
            if not name.endswith(suffixes) or result < 0:
                continue
            if call in WRITES and result > 0 and name in files:
                sizes[name][result.bit_length()] += 1
                writers.add(thread)
            elif call.startswith("rename"):
                renames.append(tuple(os.path.basename(p) for p in args.split('"')[1::2][:2]))
    return {"files": files, "sizes": sizes, "renames": sorted(renames), "writer_threads": len(writers)}


TEMPORARY = re.compile(r"\.tmp\d+$")  # the tool's small files are written as NAME.tmp{process id}, then renamed


def fsyncs(calls: dict[str, list[Call]]) -> Counter[str]:
    """The fsync calls on each file of ``calls`` (a checkpoint folder's, the tool's own files among them), by base
    name, a temporary's process id dropped (it differs from run to run)."""
    return Counter(TEMPORARY.sub(".tmp", path_of(call, args)) for seq in calls.values() for call, args, result in seq
                   if call == "fsync" and result == 0)


def reads_per_open(calls: dict[str, list[Call]], name: str) -> list[list[int]]:
    """Each time a thread opened the file ``name`` (a base name) and read it: the sizes its read calls returned, in
    order (an open followed by no read, a check of the file, is left out)."""
    passes: list[list[int]] = []
    for seq in calls.values():
        current: list[int] | None = None
        for call, args, result in seq:
            if result < 0 or path_of(call, args) != name:
                continue
            if call in OPENS:
                current = []
                passes.append(current)
            elif call in READS and current is not None:
                current.append(result)
    return [p for p in passes if p]


def read_pattern(calls: dict[str, list[Call]], suffixes: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """How a load read its files (names ending in one of ``suffixes``): per file its read calls, the bytes they
    returned, their sizes by power of two (as :func:`write_pattern`), and the threads that read it."""
    out: dict[str, dict[str, Any]] = {}
    for thread, seq in calls.items():
        for call, args, result in seq:
            name = path_of(call, args)
            if call in READS and result >= 0 and name.endswith(suffixes):
                f = out.setdefault(name, {"reads": 0, "read": 0, "sizes": Counter(), "threads": set()})
                f["reads"] += 1
                f["read"] += result
                f["sizes"][result.bit_length()] += 1
                f["threads"].add(thread)
    return out
