"""How close the emulated save is to a real ``dcp.save`` by trace-diff's verdict, over rounds (issue 49, item 2).

The job: ``workload=tiny`` in bf16 (vocabulary 1001), 2 processes under the mpich wheel's ``mpiexec``, one save,
fsynced; the real save is ``mode=fsdp`` (FSDP2 on CPU, DCP's ``FileSystemWriter``, 2 writer threads a rank), the
emulated one ``layout=dcp`` with DCP's calls (``io_pattern=framework``, 2 files a rank), traced by its own
``checkpoint.trace``. Each tracer is measured apart:

- ``strace``: the real job under ``strace -f -ttt -T -y`` (the guide's command), the emulated one under the same;
- ``dftracer``: the real job under DFTracer's preloaded library, the emulated one under its own trace alone.

First the calibration: five real saves traced, the one of median duration kept; then ``--calibrate`` emulated
runs, each at the
``checkpoint.framework_item_us`` trace-diff suggested from the one before (the first at 0); the value the last one
suggests is kept. Then ``--rounds`` rounds, each a fresh real save and two emulated ones (at 0, and at the kept
value), in that order, each emulated save held against the round's real one by trace-diff's own functions; and the
real save held against the round before's (the job against itself: how close one real save is to the next).
Medians and how many rounds each was judged CLOSE by DLIO's thresholds.

``--saves N`` has each job save N times (``num_checkpoints_write``) and each comparison pool them (trace-diff's
``--under`` given once a save), the calibration's real job included (its median duration then that of its saves
together).

Usage: .venv/bin/python bench/trace_verdict.py [--folder /tmp] [--rounds 7] [--calibrate 3] [--saves 1]
       [--tracers strace,dftracer]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from dlio_ckpt.tools.readers.trace_compare import (
    Call,
    PhaseDistance,
    compare,
    compare_phase,
    on_files,
    side,
    traced_calls,
)

REPO = Path(__file__).resolve().parent.parent
MPIEXEC = Path(sys.executable).parent / "mpiexec"
JOB = ["workload=tiny", "++workload.model.parallelism.tensor=1", "++workload.model.model_datatype=bf16",
       "++workload.model.optimizer_datatype=bf16", "++workload.model.transformer.vocab_size=1001",
       "++workload.checkpoint.num_checkpoints_read=0", "++workload.checkpoint.fsync=True"]
REAL = ["++workload.mode=fsdp", "++workload.fsdp.thread_count=2"]
EMULATED = ["++workload.checkpoint.layout=dcp", "++workload.checkpoint.files_per_rank=2",
            "++workload.checkpoint.io_pattern=framework", "++workload.checkpoint.trace=True"]
STRACE = ["strace", "-f", "-ttt", "-T", "-y", "-qq", "--seccomp-bpf", "-e",
          "trace=openat,open,creat,write,pwrite64,writev,pwritev,read,pread64,readv,preadv,fsync,fdatasync,"
          "rename,renameat,renameat2,close"]
SAVES = [1]  # the saves each job makes (--saves)
CALIBRATION_SAVES = 5  # real saves traced for the calibration, the one of median duration held against


def run(work: Path, args: list[str], tracer: str, real: bool) -> tuple[list[Path], Path]:
    """The job in ``work`` (made afresh), traced as ``tracer`` says: the job's trace (strace's file, or DFTracer's
    folder) and the run folder (the emulated run's own trace)."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    prefix: list[str] = []
    trace = [work / "job.strace"]
    if tracer == "strace":
        prefix = [*STRACE, "-o", str(trace[0])]
    elif real:
        import dftracer

        package = Path(dftracer.__file__).parent
        trace = [work / "traces"]
        trace[0].mkdir()
        env.update(LD_PRELOAD=str(package / "lib64" / "libdftracer_preload.so"),
                   LD_LIBRARY_PATH=str(package.parent / "dftracer.libs"), DFTRACER_ENABLE="1",
                   DFTRACER_INIT="PRELOAD", DFTRACER_INC_METADATA="1", DFTRACER_LOG_FILE=str(trace[0] / "job"),
                   DFTRACER_DATA_DIR=str(work / "root"))
    cmd = [*prefix, str(MPIEXEC), "-n", "2", sys.executable, "-m", "dlio_ckpt", "run", *JOB, *args,
           f"++workload.checkpoint.num_checkpoints_write={SAVES[0]}",
           f"++workload.storage.storage_root={work / 'root'}", f"hydra.run.dir={work / 'out'}"]
    r = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=600, env=env)
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)}\n{r.stderr[-3000:]}")
    return trace, work / "out"


def save_folders(work: Path) -> list[str]:
    """The folders of a job's saves in ``work``: one each."""
    return [str(work / "root" / "checkpoints" / "tiny" / f"global_epoch1_step{k}") for k in range(1, SAVES[0] + 1)]


def held(job: tuple[list[Path], Path], emulated: Path, work: Path) -> PhaseDistance:
    """The emulated run's saves held against the real one's trace, as ``trace-diff --under STEP ...`` does."""
    (found,) = compare(job[0], emulated, under=save_folders(work))
    return found


def real_against_real(before: tuple[list[Path], Path], now: tuple[list[Path], Path], a: Path, b: Path
                      ) -> PhaseDistance:
    """One real job's saves held against another's, by the same functions."""
    return compare_phase("save", saves_of(before[0], a), saves_of(now[0], b))


def saves_of(trace: list[Path], work: Path) -> list[list[Call]]:
    """A real job's calls in ``work``, a list a save."""
    calls = traced_calls(trace)
    return [on_files(calls, folder) for folder in save_folders(work)]


def calibrate(folder: Path, tracer: str, steps: int) -> tuple[float, list[str]]:
    """The value of ``framework_item_us`` trace-diff arrives at in ``steps`` runs from 0, and each step said; held
    against the real save of the median duration of :data:`CALIBRATION_SAVES` (one save to the next varies by more
    than DLIO's 20 %)."""
    durations = {}
    for k in range(CALIBRATION_SAVES):
        job = run(folder / f"cal_real_{k}", REAL, tracer, True)
        durations[k] = (side(*saves_of(job[0], folder / f"cal_real_{k}")).seconds, job)
    middle = sorted(durations, key=lambda k: durations[k][0])[CALIBRATION_SAVES // 2]
    job, real = durations[middle][1], folder / f"cal_real_{middle}"
    value, said = 0.0, [f"real saves {', '.join(f'{s * 1e3:.0f}' for s, _ in durations.values())} ms"]
    for k in range(steps):
        work = folder / f"cal_{k}"
        _, out = run(work, [*EMULATED, f"++workload.checkpoint.framework_item_us={value:.0f}"], tracer, False)
        found = held(job, out, real)
        if found.item is None or found.duration_ratio is None or found.gap_ks is None:
            raise SystemExit(f"{out}: no items or no data calls traced in its save")
        said.append(f"{value:.0f} us: duration {found.duration_ratio:.2f}, gap KS {found.gap_ks:.3f} -> suggests "
                    f"{found.item.suggested_us:.0f}")
        value = found.item.suggested_us
    return value, said


def row(name: str, found: list[PhaseDistance]) -> str:
    gaps = [f.gap_ks for f in found if f.gap_ks is not None]
    thr = [f.throughput_ratio for f in found if f.throughput_ratio is not None]
    sizes = [f.write_size_ks for f in found if f.write_size_ks is not None]
    return (f"| {name} | {statistics.median(sizes):.3f} | {statistics.median(gaps):.3f} ({min(gaps):.3f}-"
            f"{max(gaps):.3f}) | {statistics.median(thr):.2f} ({min(thr):.2f}-{max(thr):.2f}) | "
            f"{sum(f.close for f in found)} of {len(found)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()),
                        help="where a folder of the runs' own is made (and removed at the end)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calibrate", type=int, default=3)
    parser.add_argument("--saves", type=int, default=1, help="saves a job, pooled in each comparison")
    parser.add_argument("--tracers", default="strace,dftracer")
    a = parser.parse_args()
    if a.saves < 1:
        parser.error("--saves must be at least 1")
    SAVES[0] = a.saves
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, {platform.platform()}; {a.saves} saves a job")
    own = Path(tempfile.mkdtemp(prefix="trace_verdict_", dir=a.folder))
    try:
        for tracer in a.tracers.split(","):
            folder = own / tracer
            value, said = calibrate(folder, tracer, a.calibrate)
            print(f"\n## {tracer}\n\ncalibration: " + "; ".join(said) + f"; kept {value:.0f} us\n")
            found: dict[str, list[PhaseDistance]] = {"0": [], "kept": [], "real": []}
            before = None
            for k in range(a.rounds):
                work = folder / f"real_{k}"
                job = run(work, REAL, tracer, True)
                for name, us in (("0", 0.0), ("kept", value)):
                    _, out = run(folder / f"emulated_{name}",
                                 [*EMULATED, f"++workload.checkpoint.framework_item_us={us:.0f}"], tracer, False)
                    found[name].append(held(job, out, work))
                if before is not None:
                    found["real"].append(real_against_real(before, job, folder / f"real_{k - 1}", work))
                before = job
                print(f"round {k + 1}: " + ", ".join(f"{n} gap KS {f[-1].gap_ks} throughput "
                                                     f"{f[-1].throughput_ratio}" for n, f in found.items() if f),
                      flush=True)
            print("\n| held against the real save | write size KS | gap KS, median (range) | throughput ratio, "
                  "median (range) | CLOSE |\n|---|---|---|---|---|")
            print(row("emulated, framework_item_us=0", found["0"]))
            print(row(f"emulated, framework_item_us={value:.0f} (calibrated)", found["kept"]))
            print(row("the real save of the round before", found["real"]))
    finally:
        shutil.rmtree(own, ignore_errors=True)


if __name__ == "__main__":
    main()
