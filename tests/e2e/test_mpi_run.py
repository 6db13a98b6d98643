"""Real runs under the venv's mpiexec: files on disk, verification, result files."""

from __future__ import annotations

import json
import statistics

import pytest

from tests.support.cli import dlio, load

pytestmark = pytest.mark.mpi

FAST = ["++workload.checkpoint.time_between_checkpoints=0"]
# DLIO's four figures of a phase, after "{phase}_checkpoint_"
DLIO_METRICS = ["io_mean_GB_per_second", "io_stdev_GB_per_second", "duration_mean_seconds", "duration_stdev_seconds"]


def planned(dlio_here, args, world):
    """The plan the run is held to, from ``plan`` in this process (it writes nothing: a process adds only its start)."""
    res = dlio_here(["plan", *args, "--world-size", str(world), "--format", "json"])
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def assert_files_match_plan(folder, plan, steps):
    want = {f["name"]: f["file_bytes"] for r in plan["ranks"] for f in r["files"]}
    for step in range(1, steps + 1):
        d = folder / f"global_epoch1_step{step}"
        assert {p.name: p.stat().st_size for p in d.iterdir()} == want
        assert json.loads((folder / f"global_epoch1_step{step}.manifest.json").read_text())["files"] == want


def assert_dlio_metrics(metric: dict, stats: list[dict]) -> None:
    """DLIO's figures of two checkpoints saved and loaded, from the ranks' records of them: each checkpoint lasts as
    long as its slowest rank, its throughput is the checkpoint's size over that duration, and each figure is the
    mean of the two, or their population standard deviation (DLIO's numpy.std)."""
    for phase in ("save", "load"):
        durations = [max(s[f"{phase}_ckpt{k}"]["duration"] for s in stats) for k in (1, 2)]
        rates = [metric["checkpoint_size_GB"] / d for d in durations]
        assert all(d > 0 for d in durations), durations
        assert [metric[f"{phase}_checkpoint_{key}"] for key in DLIO_METRICS] == pytest.approx(
            [statistics.fmean(rates), statistics.pstdev(rates), statistics.fmean(durations),
             statistics.pstdev(durations)]), phase


@pytest.mark.parametrize("nprocs,extra", [
    (2, []),
    (4, ["++workload.checkpoint.odirect=True"]),
    (2, ["++workload.checkpoint.format=raw", "++workload.checkpoint.odirect=True"]),
    (4, ["++workload.model.parallelism.zero_stage=3", "++workload.checkpoint.recovery_rank_shift=True"]),
])
def test_run_writes_planned_files_and_dlio_results(tmp_path, dlio_here, nprocs, extra):
    args = ["workload=tiny", *FAST, *extra, "++workload.checkpoint.checkpoint_folder=ck", "++hydra.run.dir=out"]
    res = dlio(args, tmp_path, nprocs=nprocs)
    assert res.returncode == 0, res.stderr + res.stdout
    plan = planned(dlio_here, args, nprocs)
    assert_files_match_plan(tmp_path / "ck", plan, 2)
    summary = load(tmp_path / "out" / "summary.json")
    assert summary["status"] == "ok" and summary["num_processes"] == nprocs
    assert summary["metric"]["checkpoint_size_GB"] == plan["checkpoint_size_GB"]
    assert_dlio_metrics(summary["metric"], [load(tmp_path / "out" / f"{r}_per_epoch_stats.json")["1"]
                                            for r in range(nprocs)])
    for key in ("num_accelerators", "num_hosts", "hostname", "start", "end"):
        assert key in summary
    for rank in range(nprocs):
        stats = load(tmp_path / "out" / f"{rank}_per_epoch_stats.json")["1"]
        assert {"start", "end", "save_ckpt1", "save_ckpt2", "load_ckpt1", "load_ckpt2"} <= set(stats)
        assert set(stats["save_ckpt1"]) >= {"start", "end", "duration", "throughput"}
    save = summary["checkpoints"]["save"][0]
    assert save["duration_seconds"] == max(
        load(tmp_path / "out" / f"{r}_per_epoch_stats.json")["1"]["save_ckpt1"]["duration"] for r in range(nprocs))
    assert summary["memory"]["peak_rss_bytes_max"] <= 256 << 20
    assert (tmp_path / "out" / ".hydra" / "config.yaml").exists()


def test_logical_ranks_and_scale_run_llama_1t_layout_on_4_processes(tmp_path, dlio_here):
    args = ["workload=llama_1t", *FAST, "++workload.checkpoint.scale=0.00002",
            "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1",
            "++workload.checkpoint.fsync=False", "++workload.checkpoint.checkpoint_folder=ck", "++hydra.run.dir=out"]
    res = dlio(["--world-size", "1024", *args], tmp_path, nprocs=4, timeout=300)  # options first works too
    assert res.returncode == 0, res.stderr
    assert_files_match_plan(tmp_path / "ck", planned(dlio_here, args, 1024), 1)
    assert load(tmp_path / "out" / "summary.json")["num_accelerators"] == 1024


def test_read_phase_catches_a_corrupted_block_and_names_file_and_offset(tmp_path):
    base = ["workload=tiny", *FAST, "++workload.checkpoint.checkpoint_folder=ck"]
    res = dlio([*base, "++workload.checkpoint.num_checkpoints_read=0", "++hydra.run.dir=w"], tmp_path, nprocs=2)
    assert res.returncode == 0, res.stderr
    victim = tmp_path / "ck" / "global_epoch1_step2" / "zero_pp_rank_0_mp_rank_1_optim_states.pt"
    with open(victim, "r+b") as fh:
        fh.seek(3 * 4096 + 100)
        byte = fh.read(1)
        fh.seek(3 * 4096 + 100)
        fh.write(bytes([byte[0] ^ 0xFF]))
    # read-only run of the earlier checkpoints: step 1 verifies, step 2 fails on rank 1
    res = dlio([*base, "++workload.checkpoint.num_checkpoints_write=0", "++hydra.run.dir=r"], tmp_path, nprocs=2)
    assert res.returncode != 0
    assert f"{victim.name}: wrong data at offset {3 * 4096 + 100}" in res.stderr, res.stderr
    assert "rank 1 on " in res.stderr
    failed = load(tmp_path / "r" / "summary.json")  # the failing rank leaves a failed summary, never "ok"
    assert failed["status"] == "failed" and failed["failed_rank"] == 1 and "wrong data" in failed["reason"]
    assert failed["during"] == "load of step 2"


def test_read_only_run_refuses_a_step_without_manifest(tmp_path):
    res = dlio(["workload=tiny", *FAST, "++workload.checkpoint.num_checkpoints_write=0",
                "++workload.checkpoint.checkpoint_folder=ck", "++hydra.run.dir=r"], tmp_path, nprocs=2)
    assert res.returncode == 2
    assert "step 1 has no complete checkpoint" in res.stderr
    assert list(tmp_path.iterdir()) == [], "a refused run creates nothing"


def test_pt_files_open_with_torch_load(tmp_path, dlio_here):
    torch = pytest.importorskip("torch")
    args = ["workload=tiny", *FAST, "++workload.checkpoint.checkpoint_folder=ck", "++hydra.run.dir=out",
            "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=0"]
    res = dlio(args, tmp_path, nprocs=2)
    assert res.returncode == 0, res.stderr
    plan = planned(dlio_here, args, 2)
    step = tmp_path / "ck" / "global_epoch1_step1"
    model = torch.load(step / "model_0_model_states.pt", weights_only=True)
    assert list(model) == [str(i) for i in range(7)]  # layers 0..L+2 of stage 0
    assert [tuple(t.shape) for t in model["1"].values()] == [(256,), (65536,), (32768,), (256,), (176128,), (88064,)]
    assert model["1"]["0"].dtype == torch.float16
    optim = torch.load(step / "zero_pp_rank_0_mp_rank_0_optim_states.pt", weights_only=True)
    assert [t.dtype for t in optim.values()] == [torch.float32] * 6
    for f in plan["ranks"][0]["files"]:
        assert 0 < f["file_bytes"] - f["payload_bytes"] <= 1024 * f["tensors"] + 4096  # torch.save-like overhead


def _names(stats: dict, op: str) -> set[str]:
    return {f[0] for f in stats[op]["file_times"]}


def test_recovery_rank_shift_reads_the_files_of_the_rank_one_host_further(tmp_path, dlio_here):
    """Four processes as two hosts of two (ranks_per_host=2): process p reads rank (p+2) % 4's files,
    never its own; on one host with the default, the shift is the world and a warning says so."""
    args = ["workload=tiny", *FAST, "++workload.model.parallelism.zero_stage=3",
            "++workload.checkpoint.checkpoint_folder=ck", "++workload.checkpoint.recovery_rank_shift=True"]
    res = dlio([*args, "++workload.checkpoint.ranks_per_host=2", "++hydra.run.dir=out"], tmp_path, nprocs=4)
    assert res.returncode == 0, res.stderr
    plan = planned(dlio_here, args, 4)
    owned = {r["rank"]: {f["name"] for f in r["files"]} for r in plan["ranks"]}
    assert len(set(map(frozenset, owned.values()))) == 4  # every rank has files of its own
    for p in range(4):
        stats = load(tmp_path / "out" / f"{p}_per_epoch_stats.json")["1"]
        assert _names(stats, "save_ckpt1") == owned[p]
        for op in ("load_ckpt1", "load_ckpt2"):
            assert _names(stats, op) == owned[(p + 2) % 4], (p, op)
    assert load(tmp_path / "out" / "summary.json")["io"]["recovery_rank_shift"] is True
    same = dlio([*args, "++workload.checkpoint.overwrite=True", "++hydra.run.dir=out2"], tmp_path, nprocs=4)
    assert same.returncode == 0, same.stderr
    assert "every rank reads its own files; set checkpoint.ranks_per_host" in same.stdout


def test_memory_stays_bounded_where_holding_a_shard_would_not(tmp_path):
    """Each process writes and reads back over 512 MiB of its own; peak RSS stays under 256 MiB, so
    neither a whole shard nor a whole file is ever held (tiny's 48 MB could not show that)."""
    args = ["workload=llama_7b_zero3", "--world-size", "2", *FAST, "++workload.checkpoint.scale=0.012",
            "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1",
            "++workload.checkpoint.checkpoint_folder=ck", "++hydra.run.dir=out"]
    res = dlio(args, tmp_path, nprocs=2, timeout=300)
    assert res.returncode == 0, res.stderr
    summary = load(tmp_path / "out" / "summary.json")
    for p in range(2):
        stats = load(tmp_path / "out" / f"{p}_per_epoch_stats.json")["1"]
        assert stats["save_ckpt1"]["bytes"] == stats["load_ckpt1"]["bytes"] > 512 << 20
        largest = max(f.stat().st_size for f in (tmp_path / "ck" / "global_epoch1_step1").iterdir())
    assert largest > 256 << 20
    assert max(summary["memory"]["peak_rss_bytes_per_process"]) <= 256 << 20, summary["memory"]
