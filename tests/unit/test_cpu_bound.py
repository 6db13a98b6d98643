"""How busy the processes' CPUs were during a checkpoint, whose work it was, and a CPU-bound figure said plainly
(issue 51, item 2): ``checkpoints[].cpu``, ``io.scaled.projected_full_size.cpu_bound`` and the console's last lines.

The rule is held on records made here (a timer is no pass mark: how busy a process is depends on the machine); a
real run in this process holds what its records carry: the framework's work it played (torch.save's CRC-32) apart
from ours, for a DCP save, and none for the tuned stream."""

from __future__ import annotations

import json

import pytest

from dlio_ckpt.results.schema import Summary
from dlio_ckpt.results.summary import CPU_BOUND, OpRecord, ProcessCost, cpu_figures
from dlio_ckpt.run.context import cpu_said, finished_line
from tests.support.workloads import DCP


def op(process: int, cpu: float, duration: float = 1.0, share: float = 1.0, played: float = 0.0) -> OpRecord:
    return OpRecord(phase="save", index=1, step=1, process=process, start=0.0, end=duration, duration=duration,
                    bytes=1 << 30, files=1, cost=ProcessCost(user=cpu, system=0.0), framework_cpu=played,
                    cpu_share=share)


@pytest.mark.parametrize("cpu, share, bound", [(0.95, 1.0, True), (0.5, 1.0, False), (0.5, 0.5, True),
                                               (CPU_BOUND, 1.0, True), (CPU_BOUND - 0.01, 1.0, False)])
def test_a_process_busy_on_its_cores_for_most_of_its_time_makes_the_checkpoint_cpu_bound(cpu, share, bound):
    """The busiest process decides: CPU seconds over its duration, of the cores it could use (half a core each
    where two processes share a core)."""
    figures = cpu_figures([op(0, 0.1), op(1, cpu, share=share)], 1 << 30)
    assert figures.busiest_process_busy == pytest.approx(cpu / share)
    assert figures.bound is bound


def test_our_own_work_is_the_user_time_less_the_frameworks_played():
    figures = cpu_figures([op(0, 0.8, played=0.3), op(1, 0.4, played=0.1)], 1 << 30)
    assert figures.framework_seconds == pytest.approx(0.4)
    assert figures.own_seconds == pytest.approx(0.8)


def run(dlio_here, tmp_path, pattern: str) -> dict:
    res = dlio_here(["--world-size", "4", *DCP, "++workload.storage.storage_type=null",
                     "++workload.checkpoint.checkpoint_folder=ck", "++hydra.run.dir=out",
                     "++workload.checkpoint.scale=0.1", "++workload.checkpoint.num_checkpoints_write=1",
                     "++workload.checkpoint.num_checkpoints_read=0", f"++workload.checkpoint.io_pattern={pattern}"])
    assert res.returncode == 0, res.stderr
    return json.loads((tmp_path / "out" / "summary.json").read_text())


def test_a_dcp_save_tells_the_frameworks_crc_apart_and_the_stream_plays_none(dlio_here, tmp_path):
    played = run(dlio_here, tmp_path, "framework")["checkpoints"]["save"][0]["cpu"]
    assert played["framework_seconds"] > 0  # torch.save's CRC-32 of every record, played
    assert played["own_seconds"] + played["framework_seconds"] + played["system_seconds"] == pytest.approx(
        played["seconds"])
    (tmp_path / "out").rename(tmp_path / "framework")
    stream = run(dlio_here, tmp_path, "stream")
    assert stream["checkpoints"]["save"][0]["cpu"]["framework_seconds"] == 0


def test_a_cpu_bound_figure_is_said_beside_the_projection(dlio_here, tmp_path):
    """A scaled run whose save was CPU-bound: summary.json's projection names the phase, and the console's last
    lines say the times are the processes' CPU's, with whose work it was."""
    made = Summary.model_validate(run(dlio_here, tmp_path, "framework"))
    assert made.io is not None and made.io.scaled is not None and made.checkpoints is not None
    cpu = made.checkpoints.save[0].cpu
    assert cpu is not None
    said = finished_line(made, "out")
    assert ("CPU-bound" in said) is cpu.bound
    assert (made.io.scaled.projected_full_size.cpu_bound == ["save"]) is cpu.bound
    cpu.bound, cpu.busiest_process_busy = True, 0.97
    made.io.scaled.projected_full_size.cpu_bound = ["save"]
    said = finished_line(made, "out")
    assert "CPU-bound: save timed the processes' CPU, not the storage: a process was busy 97% of its save" in said
    assert f"{cpu_said(cpu.own_seconds)} s our own work, {cpu_said(cpu.framework_seconds)} s the framework's we play" \
        in said
    assert "(CPU-bound save: its projection scales the emulator's work)" in said and "io_pattern=stream" in said
    made.mode = "lightning"  # a real mode: all of its user time is the framework's own, and no emulator to tune
    cpu.framework_seconds, cpu.own_seconds = cpu.framework_seconds + cpu.own_seconds, 0.0
    said = finished_line(made, "out")
    assert f"{cpu_said(cpu.framework_seconds)} s the framework's own, run for real" in said
    assert "our own work" not in said and "io_pattern=stream" not in said
    assert cpu_said(0.0451) == "0.0451" and cpu_said(1234.5) == "1,234"  # never 1.23e+03
