"""``trace-diff``: a real job's two ``dcp.save`` (``mode=fsdp``: FSDP2 on CPU, ``FileSystemWriter``, torch 2.13.0)
traced with ``strace -f -ttt -T -y``, and again with DFTracer 2.2.0 (its preloaded library), are held, pooled (an
``--under`` folder a save), against the two saves of runs of the same job in DCP's layout: played as DCP plays it
(``io_pattern=framework``) their write sizes are DCP's (KS distance under DLIO's 0.1), with as many writes, fsyncs,
renames and writer threads a save; streamed (``io_pattern=stream``) they are not, and the verdict says far. Each
run's processes' traces hold the calls its summary.json counts, kind by kind, and the played run, save by save, the
items the real save's ``.metadata`` lists, file by file (torch's own reader), which trace-diff spreads the
framework's time over. The timing criteria (gap KS, throughput ratio) are shown by the command and not asserted
here: a timer is no pass mark, and one real job's saves are not CLOSE to the next job's every time;
``bench/trace_verdict.py`` measures them over rounds. Counterparts: ``unit/test_trace_diff.py`` (the readers, the
KS distance, the pooling, the time per item), ``unit/test_trace.py`` (the run's trace)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.cli import MPIEXEC
from tests.support.workloads import UNEVEN_BF16

pytestmark = [pytest.mark.real, pytest.mark.mpi]
JOB = ["workload=tiny", "++workload.model.parallelism.tensor=1", *UNEVEN_BF16,
       "++workload.checkpoint.num_checkpoints_write=2", "++workload.checkpoint.num_checkpoints_read=0",
       "++workload.checkpoint.fsync=True"]
WRITERS = 2  # DCP's thread_count, the emulation's files_per_rank
# what the guide asks of a job's trace: every thread, times, durations, paths; the file calls only (--seccomp-bpf:
# the others are not stopped, so the job runs at near its own speed)
STRACE = ["strace", "-f", "-ttt", "-T", "-y", "-qq", "--seccomp-bpf", "-e",
          "trace=openat,open,creat,write,pwrite64,writev,pwritev,read,pread64,readv,preadv,fsync,fdatasync,"
          "rename,renameat,renameat2,close"]


def run_job(work: Path, args: list[str], tracer: list[str] = (), env: dict[str, str] | None = None) -> Path:
    """The job on two processes (its command after ``tracer``, with ``env`` added); its run folder."""
    work.mkdir(exist_ok=True)
    cmd = [*tracer, str(MPIEXEC), "-n", "2", sys.executable, "-m", "dlio_ckpt", "run", *JOB, *args,
           f"++workload.storage.storage_root={work / 'root'}", f"hydra.run.dir={work / 'out'}"]
    r = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
    assert r.returncode == 0, r.stderr[-3000:]
    return work / "out"


def dftracer_preload(work: Path) -> dict[str, str]:
    """DFTracer 2.2.0's preloaded library tracing every process's calls on files under ``work``'s storage root
    into ``work/traces/job-*.pfw.gz``, as DFTracer's documentation has a job traced."""
    dftracer = pytest.importorskip("dftracer")
    package = Path(dftracer.__file__).parent
    (work / "traces").mkdir(parents=True)
    return {"LD_PRELOAD": str(package / "lib64" / "libdftracer_preload.so"),
            "LD_LIBRARY_PATH": str(package.parent / "dftracer.libs"), "DFTRACER_ENABLE": "1",
            "DFTRACER_INIT": "PRELOAD", "DFTRACER_INC_METADATA": "1",
            "DFTRACER_LOG_FILE": str(work / "traces" / "job"), "DFTRACER_DATA_DIR": str(work / "root")}


def test_a_real_dcp_save_is_close_in_sizes_to_the_framework_pattern_and_far_from_the_stream(tmp_path, dlio_here):
    """The real save traced twice, by strace and by DFTracer; each trace held against the two emulated runs."""
    if not MPIEXEC.exists() or shutil.which("strace") is None:
        pytest.skip("mpiexec from the mpich wheel and strace are needed")
    utils = pytest.importorskip("dftracer.utils")
    from torch.distributed.checkpoint import FileSystemReader
    real = ["++workload.mode=fsdp", f"++workload.fsdp.thread_count={WRITERS}"]
    run_job(tmp_path / "strace", real, tracer=[*STRACE, "-o", str(tmp_path / "strace" / "job.strace")])
    run_job(tmp_path / "dftracer", real, env=dftracer_preload(tmp_path / "dftracer"))
    jobs = {"strace": [tmp_path / "strace" / "job.strace"], "dftracer": [tmp_path / "dftracer" / "traces"]}
    runs, items = {}, {}
    for pattern in ("framework", "stream"):
        run = runs[pattern] = run_job(tmp_path / pattern, ["++workload.checkpoint.layout=dcp",
                                                           f"++workload.checkpoint.files_per_rank={WRITERS}",
                                                           f"++workload.checkpoint.io_pattern={pattern}",
                                                           "++workload.checkpoint.trace=True"])
        # each process's trace, read as dftracer-analyzer's reader reads it: the run's calls, kind by kind
        traces = sorted(run.glob("*_trace.pfw.gz"))
        assert [t.name for t in traces] == ["0_trace.pfw.gz", "1_trace.pfw.gz"]
        seen = [e for t in traces for e in utils.TraceViewer(str(t)).collect().to_dicts()]
        calls = Counter(e["name"] for e in seen if e["cat"] == "POSIX")
        kinds = json.loads((run / "summary.json").read_text())["latency"]["run"]["kinds"]
        assert calls == Counter({kind: f["count"] for kind, f in kinds.items()}), pattern
        items[pattern] = [Counter(Path(e["args.fname"]).name for e in seen
                                  if e["cat"] == "framework" and e["args.checkpoint"] == k) for k in (1, 2)]
    # the items played in each save are the real save's, file by file, as its .metadata lists them (torch's reader)
    saves = [tmp_path / "strace" / "root" / "checkpoints" / "tiny" / f"global_epoch1_step{k}" for k in (1, 2)]
    listed = [Counter(s.relative_path for s in FileSystemReader(str(step)).read_metadata().storage_data.values())
              for step in saves]
    assert items == {"framework": listed, "stream": [Counter(), Counter()]}
    # a save's items on its busiest rank, the mean of the two
    busiest = sum(max(sum(n for f, n in save.items() if f.startswith(f"__{rank}_")) for rank in (0, 1))
                  for save in listed) / len(listed)
    for tool, trace in jobs.items():
        under = [a for k in (1, 2) for a in ("--under", str(tmp_path / tool / "root" / "checkpoints" / "tiny" /
                                                               f"global_epoch1_step{k}"))]
        found = {}
        for pattern, run in runs.items():
            r = dlio_here(["trace-diff", *map(str, trace), str(run), *under, "--format", "json"])
            assert r.returncode in (0, 1), r.stderr
            (phase,) = json.loads(r.stdout)["phases"]
            assert phase["phase"] == "save" and r.returncode == (0 if phase["close"] else 1)
            found[pattern] = phase
        played, streamed = found["framework"], found["stream"]
        assert played["write_size_ks"] < 0.1, (tool, played)
        assert not [f for f in played["failed"] if "size" in f], (tool, played["failed"])
        job, run = played["job"], played["run"]
        assert job["checkpoints"] == run["checkpoints"] == 2, (tool, job, run)
        assert (run["writes"], run["fsyncs"], run["renames"], run["threads"]) == \
            (job["writes"], job["fsyncs"], job["renames"], job["threads"]), (tool, job, run)
        assert played["item"]["items_per_rank"] == busiest
        assert streamed["write_size_ks"] >= 0.1 and not streamed["close"] and streamed["item"] is None, (tool, streamed)
        assert any(f.startswith("write size KS") for f in streamed["failed"]), (tool, streamed["failed"])
