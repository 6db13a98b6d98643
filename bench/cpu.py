#!/usr/bin/env python3
"""What the emulator's own work costs a core: making the synthetic bytes and checking them on read; and how
reducible those bytes are.

A save hands the storage windows of the synthetic source, each made first (its pool's bodies XORed with a key
per lap of the pool, 32-byte stamps: ``dlio_ckpt/io/synthetic.py``); a verified load makes the window it should
equal and compares every byte read with it. Both run on the CPU of the process doing the I/O, so their speed per
core is where the emulator would become the bottleneck: storage faster than (processes x this) per host would be
measured short. Rounds alternate the measurements; medians and quartiles, one thread, this machine.

    python bench/cpu.py --chunk 8388608 --gib 4 --rounds 7   # per core: windows, the alternatives, memcmp
    python bench/cpu.py --runs                               # whole processes: a 17 GiB save to null storage,
                                                             # a 4 GiB verified read from /dev/shm (CPU s/GiB)
    python bench/cpu.py --reducibility                       # zstd -19 --long=31 and deduplicators on ours,
                                                             # dgen-py's, torch.rand's; a 100 MB checkpoint;
                                                             # data_values=torch_rand's against torch.rand's

``--repo DIR`` runs ``--runs`` with another checkout's dlio_ckpt (an earlier commit, for a baseline).
"""

from __future__ import annotations

import argparse
import hashlib
import mmap
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from dlio_ckpt.io.synthetic import (  # noqa: E402
    _PERIOD_BLOCKS,
    Reduction,
    SyntheticData,
    _splitmix64,
    _splitmix64_array,
    file_key,
    first_difference,
)

GIB = 1 << 30
MIB = 1 << 20


def rate(fn: Callable[[int], object], chunk: int, nbytes: int) -> float:
    """GiB/s per core of CPU time of ``fn(k)`` for chunks k = 0, 1, ... of ``nbytes``."""
    t0 = time.process_time()
    for k in range(nbytes // chunk):
        fn(k)
    return nbytes / (time.process_time() - t0) / GIB


def key_per_block(data: SyntheticData, chunk: int) -> Callable[[int], object]:
    """The alternative: a key per block (a (blocks, 1) broadcast XOR), the rest as the generator does it."""
    pool, out = data._pool, data._out
    seed = _splitmix64(data.run_key ^ _splitmix64(file_key(1, 0, 0)))
    arange = np.arange(chunk // 4096, dtype=np.uint64)

    def make(k: int) -> None:
        first = k * (chunk // 4096)
        keys = _splitmix64_array((arange + np.uint64(first)) ^ np.uint64(seed))[:, None]
        done, n = 0, len(arange)
        while done < n:
            at = (seed + first + done) % _PERIOD_BLOCKS
            take = min(_PERIOD_BLOCKS - at, n - done)
            np.bitwise_xor(pool[at:at + take], keys[done:done + take], out=out[done:done + take])
            done += take
    return make


def per_core(a: argparse.Namespace) -> None:
    nbytes = int(a.gib * GIB) // a.chunk * a.chunk
    key = file_key(1, 0, 0)
    sources = {r: SyntheticData(1, a.chunk, reduction=r) for r in (Reduction(), Reduction(2.0, 1.0),
                                                                     Reduction(1.0, 2.0))}
    torch_rand = SyntheticData(1, a.chunk, reduction=Reduction(values="torch_rand"))  # checkpoint.data_values
    maps = [mmap.mmap(-1, a.chunk) for _ in range(2)]
    for m in maps:
        m.write(os.urandom(a.chunk))
    x, y = (memoryview(m) for m in maps)
    y[:] = x
    irreducible = sources[Reduction()]
    def windows(source: SyntheticData) -> Callable[[int], object]:
        return lambda k: source.window(key, k * a.chunk, a.chunk)

    steps = {f"window c={r.compression:g} d={r.dedup:g}": windows(s) for r, s in sources.items()}
    for dtype in ("fp16", "bf16", "fp32"):
        steps[f"window torch_rand {dtype}"] = lambda k, d=dtype: torch_rand.window(key, k * a.chunk, a.chunk, dtype=d)
    steps["a key per block"] = key_per_block(irreducible, a.chunk)
    steps["memcmp (verify)"] = lambda _k: first_difference(x, y)
    expected = bytes(irreducible.window(key, 0, a.chunk))  # what a verified read got: the window it compares with
    z = memoryview(mmap.mmap(-1, a.chunk))
    z[:] = expected

    def verified_read(_k: int) -> None:  # the window made again (its cost does not depend on the offset), compared
        assert first_difference(z, irreducible.window(key, 0, a.chunk)) is None
    steps["verified read"] = verified_read
    w = memoryview(mmap.mmap(-1, a.chunk))
    w[:] = bytes(torch_rand.window(key, 0, a.chunk, dtype="bf16"))

    def verified_read_torch_rand(_k: int) -> None:
        assert first_difference(w, torch_rand.window(key, 0, a.chunk, dtype="bf16")) is None
    steps["verified read torch_rand bf16"] = verified_read_torch_rand
    try:
        import dgen_py  # type: ignore[import-not-found, unused-ignore]  # noqa: PLC0415  (optional: pip install dgen-py)

        generator, filled = dgen_py.Generator(size=1 << 50, max_threads=1), bytearray(a.chunk)
        steps["dgen-py, 1 thread"] = lambda _k: generator.fill_chunk(filled)
    except ImportError:
        print("dgen-py not installed: pip install dgen-py --no-deps to compare with it")
    rows: dict[str, list[float]] = {name: [] for name in steps}
    for i in range(a.rounds):
        for name, fn in (list(steps.items()) if i % 2 == 0 else list(steps.items())[::-1]):
            rows[name].append(rate(fn, a.chunk, nbytes))
    print(f"chunk {a.chunk} bytes, {nbytes / GIB:.1f} GiB per measurement, {a.rounds} rounds, one thread, "
          f"host {os.uname().nodename}, {os.cpu_count()} cores; GiB/s per core of CPU time, median [quartiles]")
    for name, values in rows.items():
        q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
        print(f"  {name:30s} {median:7.1f} [{q1:.1f}, {q3:.1f}]  ({1 / median:.4f} CPU s/GiB)")
    for view in (x, y, z, w):
        view.release()


def tool(repo: Path, args: list[str], cwd: Path) -> float:
    """CPU seconds (user and system, every process and thread) of ``python -m dlio_ckpt ARGS`` from ``repo``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([sys.executable, "-m", "dlio_ckpt", *args], cwd=cwd, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(repo)})
    if r.returncode:
        sys.exit(r.stderr[-3000:])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def runs(a: argparse.Namespace) -> None:
    """Whole processes, start-up included: a save of llama3_8b at 8 ranks scaled to 17 GiB to null storage; a
    verified read of 4 GiB (tiny-shaped files of llama3_8b at a smaller scale) from /dev/shm, page cache allowed."""
    repo = Path(a.repo).resolve()
    save_gib = 104.704521 * 0.1625  # llama3_8b at 8 ranks is 104.70 GiB a checkpoint
    read_gib = 104.704521 * 0.04
    common = ["workload=llama3_8b", "--world-size", "8", "++workload.checkpoint.progress=False"]
    kinds = {"": []} if not a.torch_rand else {"": [], ", data_values=torch_rand": [
        "++workload.checkpoint.data_values=torch_rand"]}  # torch_rand: llama3_8b's bf16 model, fp32 optimizer
    figures: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(dir="/dev/shm") as shm, tempfile.TemporaryDirectory() as tmp:
        for i in range(a.rounds):
            for j, (kind, values) in enumerate(kinds.items()):
                out = Path(tmp) / f"r{i}{j}"
                figures.setdefault(f"save, 17.0 GiB to null{kind}", []).append(tool(repo, [
                    *common, *values, "++workload.checkpoint.scale=0.1625", "++workload.storage.storage_type=null",
                    "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=0",
                    f"hydra.run.dir={out}/save"], Path(tmp)) / save_gib)
                store = [*values, f"++workload.storage.storage_root={shm}/s{i}{j}", "++workload.checkpoint.scale=0.04",
                         "++workload.checkpoint.read_from_page_cache=True"]
                tool(repo, [*common, *store, "++workload.checkpoint.num_checkpoints_write=1",
                            "++workload.checkpoint.num_checkpoints_read=0",
                            f"hydra.run.dir={out}/write"], Path(tmp))
                figures.setdefault(f"verified read, 4.2 GiB, /dev/shm{kind}", []).append(tool(repo, [
                    *common, *store, "++workload.checkpoint.num_checkpoints_write=0",
                    "++workload.checkpoint.num_checkpoints_read=1", f"hydra.run.dir={out}/read"], Path(tmp)) / read_gib)
                shutil.rmtree(f"{shm}/s{i}{j}")
    print(f"dlio_ckpt from {repo}, host {os.uname().nodename}, {os.cpu_count()} cores; {a.rounds} rounds, "
          "CPU s/GiB of the whole process (user + system, start-up included), median [min, max]")
    for name, values in sorted(figures.items(), key=lambda item: item[0].startswith("verified")):
        print(f"  {name:58s} {statistics.median(values):.3f} [{min(values):.3f}, {max(values):.3f}]")


def measure(data: bytes, levels: tuple[str, ...] = ()) -> str:
    """What zstd -19 --long=31 keeps, what lz4 -9 keeps (byte matches alone: no entropy coding, as many arrays'
    inline compression), and what deduplicators at 512 B and 4 KiB gain on ``data``; and what zstd keeps at
    ``levels`` besides."""
    def kept(cmd: list[str]) -> float:
        return len(subprocess.run(cmd, input=data, capture_output=True, check=True).stdout) / len(data)

    zstd = kept(["zstd", "-q", "-19", "--long=31", "-T2", "-c"])
    also = "".join(f", zstd {level} {kept(['zstd', '-q', level, '--long=31', '-T2', '-c']):7.2%}" for level in levels)
    lz4 = f", lz4 -9 keeps {kept(['lz4', '-q', '-9', '-c']):7.2%}" if shutil.which("lz4") else ""
    dedup = {size: len(data) // size / len({hashlib.blake2b(data[i:i + size], digest_size=16).digest()
                                            for i in range(0, len(data) - size + 1, size)}) for size in (512, 4096)}
    return (f"zstd keeps {zstd:7.2%} (ratio {1 / zstd:.3f}){also}{lz4}; dedup 512 B {dedup[512]:.3f}, "
            f"4 KiB {dedup[4096]:.3f}")


def reducibility(a: argparse.Namespace) -> None:
    n = 32 * MIB
    print(f"{n // MIB} MiB of each, host {os.uname().nodename}; zstd {zstd_version()}")
    for r in (Reduction(), Reduction(1.27, 1.0), Reduction(2.0, 1.0), Reduction(8.0, 1.0), Reduction(64.0, 1.0),
              Reduction(1.0, 2.0), Reduction(2.0, 3.0)):
        source = SyntheticData(5, MIB, reduction=r)
        data = b"".join(bytes(source.window(file_key(1, f, 0), o, MIB)) for f in (0, 1) for o in range(0, n // 2, MIB))
        print(f"  ours, c={r.compression:g} d={r.dedup:g}: {measure(data)}")
    try:
        import dgen_py  # type: ignore[import-not-found, unused-ignore]  # noqa: PLC0415

        for c, d in ((1.0, 1.0), (2.0, 1.0), (1.0, 2.0)):
            print(f"  dgen-py {getattr(dgen_py, '__version__', '')}, compress_ratio={c:g} dedup_ratio={d:g}"
                  f"{' (its defaults)' if c == d == 1 else ''}: "
                  f"{measure(bytes(dgen_py.generate_buffer(n, dedup_ratio=d, compress_ratio=c)))}")
    except ImportError:
        print("  dgen-py not installed: pip install dgen-py --no-deps")
    try:
        import torch  # noqa: PLC0415

        torch.manual_seed(0)
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            t = torch.rand(n // dtype.itemsize, dtype=dtype)  # DLIO v2.0.1's tensors (get_tensor_core)
            print(f"  torch.rand {str(dtype).split('.')[1]} (DLIO v2.0.1's tensors): "
                  f"{measure(t.view(torch.uint8).numpy().tobytes())}")
    except ImportError:
        print("  torch not installed")
    torch_rand(n)
    with tempfile.TemporaryDirectory() as tmp:  # a checkpoint of 102 MB: whole files, headers included
        tool(REPO, ["workload=llama3_8b", "--world-size", "8", "++workload.checkpoint.scale=0.00095",
                    "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=0",
                    f"++workload.storage.storage_root={tmp}/store", f"hydra.run.dir={tmp}/out"], Path(tmp))
        files = sorted(p for p in Path(tmp, "store").rglob("*.pt"))
        data = b"".join(p.read_bytes() for p in files)
        print(f"  a checkpoint of {len(data) / 1e6:.0f} MB (llama3_8b, 8 ranks, pt), {len(files)} whole files "
              f"concatenated: {measure(data)}")
        worst = min(len(subprocess.run(["zstd", "-q", "-19", "--long=31", "-T2", "-c", str(p)], capture_output=True,
                                       check=True).stdout) / p.stat().st_size for p in files)
        print(f"    each file alone: zstd keeps at least {worst:.2%}")


def torch_rand(n: int) -> None:
    """checkpoint.data_values=torch_rand (the dlio-2.0 preset's) against torch.rand's own tensors, per datatype:
    ``n`` bytes of each (two files of the generator, past many laps of its pool; torch.rand of seed 0), zstd at
    -19 and at -3 and -9; then zstd -19's two modes on bf16 (it codes some seeds' torch.rand bf16 a way that keeps
    5 points more), over 4 seeds of torch.rand and 4 run keys of ours, 8 MiB each."""
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        print("  torch not installed: no torch_rand comparison")
        return
    from dlio_ckpt.model.dtypes import DTYPES  # noqa: PLC0415

    def ours(dtype: str, run_key: int, size: int) -> bytes:
        source = SyntheticData(run_key, MIB, reduction=Reduction(values="torch_rand"))
        return b"".join(bytes(source.window(file_key(1, f, 0), o, MIB, dtype=dtype)) for f in (0, 1)
                        for o in range(0, size // 2, MIB))

    def theirs(dtype: str, seed: int, size: int) -> bytes:
        torch.manual_seed(seed)
        t = torch.rand(size // DTYPES[dtype].bytes, dtype=getattr(torch, DTYPES[dtype].torch))
        return bytes(t.view(torch.uint8).numpy().tobytes())

    for dtype in ("fp16", "bf16", "fp32"):
        print(f"  ours, data_values=torch_rand, {dtype}: {measure(ours(dtype, 5, n), ('-3', '-9'))}")
        print(f"  torch.rand {dtype}, seed 0: {measure(theirs(dtype, 0, n), ('-3', '-9'))}")
    for name, make in (("torch.rand bf16, seeds", theirs), ("ours torch_rand bf16, run keys", ours)):
        shares = [len(subprocess.run(["zstd", "-q", "-19", "--long=31", "-T2", "-c"], input=make("bf16", i, 8 * MIB),
                                     capture_output=True, check=True).stdout) / (8 * MIB) for i in range(4)]
        print(f"  {name} 0-3, 8 MiB each: zstd -19 keeps " + ", ".join(f"{x:.2%}" for x in shares))


def zstd_version() -> str:
    return subprocess.run(["zstd", "--version"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunk", type=int, default=8 << 20)
    ap.add_argument("--gib", type=float, default=4.0, help="GiB per measurement")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--runs", action="store_true", help="whole processes: a save to null, a verified read")
    ap.add_argument("--repo", default=str(REPO), help="--runs: the checkout whose dlio_ckpt runs")
    ap.add_argument("--reducibility", action="store_true", help="what zstd and deduplicators find")
    ap.add_argument("--torch-rand", action="store_true", help="--runs: also with checkpoint.data_values=torch_rand")
    ap.add_argument("--torch-rand-only", action="store_true", help="--reducibility: only data_values=torch_rand's")
    ap.add_argument("--mib", type=int, default=32, help="--torch-rand-only: MiB of each")
    a = ap.parse_args()
    if a.runs:
        runs(a)
    elif a.reducibility and a.torch_rand_only:
        print(f"{a.mib} MiB of each, host {os.uname().nodename}; zstd {zstd_version()}")
        torch_rand(a.mib * MIB)
    elif a.reducibility:
        reducibility(a)
    else:
        per_core(a)


if __name__ == "__main__":
    main()
