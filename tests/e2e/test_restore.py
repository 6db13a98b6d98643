"""Restores as a user runs them (``workload.restore``): a checkpoint saved at one world size and loaded verified
at another, on local files and on S3 (a ranged GET per read, as the server saw them), the figures a load reports,
and what a load not held to its framework's own says. What a real ``dcp.load`` and Megatron's load read is in
tests/against_frameworks/test_restore.py (of a mixture of experts: test_moe_restore.py, test_megatron_moe_restore.py);
the restore plans and their refusals in tests/unit/test_restore.py."""

from __future__ import annotations

import pytest

from tests.support.cli import dlio, load
from tests.support.strace_calls import traced_load
from tests.support.workloads import DCP


@pytest.mark.parametrize("layout", [pytest.param(DCP, id="dcp"), pytest.param(
    ["workload=tiny", "++workload.checkpoint.layout=megatron", "++workload.restore.tensor=1"], id="megatron-tp2-to-1")])
def test_a_checkpoint_saved_at_4_loads_verified_at_2_and_says_what_it_read(tmp_path, layout):
    """Emulated end to end: the restore's figures in summary.json; then a byte changed in the middle of rank 3's
    file, which the loading ranks read in ranges, is found, named by file and offset (every byte of every range
    is compared)."""
    args = [*layout, "--world-size", "4", "++workload.checkpoint.num_checkpoints_read=1", "++hydra.run.dir=run",
            "++workload.storage.storage_root=data", "++workload.checkpoint.checkpoint_folder=ck",
            "++workload.restore.world_size=2", "++workload.checkpoint.num_checkpoints_write=1"]
    r = dlio(args, tmp_path, nprocs=2)
    assert r.returncode == 0, r.stderr
    summary = load(tmp_path / "run" / "summary.json")
    restore, (loaded,) = summary["io"]["restore"], summary["checkpoints"]["load"]
    assert restore["world_size"] == 2 and restore["saved_world_size"] == 4 and restore["resharded"]
    # the load plays its framework's reads (io_pattern=framework): the items the plan names, and the headers its
    # buffered file reads again a block at a time, so storage serves more than the items' bytes (the kernel's
    # count below is the load's figure)
    assert 0 < restore["bytes_read"] <= loaded["bytes"]
    assert restore["reads_per_rank"]["max"] > 4
    assert sum(restore["read_bytes"]["histogram"].values()) == 2 * restore["reads_per_rank"]["mean"]
    assert loaded["metadata_read_seconds_max"] > 0 and loaded["duration_imbalance"] >= 1.0
    # the bytes the file system handed over: the same load again, alone, under strace; every read of the step's
    # files summed from the kernel's answers equals what it reports read, exactly
    traced, trace = traced_load(tmp_path, [*args, "++workload.checkpoint.num_checkpoints_write=0",
                                            "++hydra.run.dir=traced"])
    assert traced["checkpoints"]["load"][0]["bytes"] == trace
    shard = tmp_path / "data" / "ck" / "global_epoch1_step1" / "__3_0.distcp"
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    shard.write_bytes(bytes(raw))
    r = dlio([*args, "++workload.checkpoint.num_checkpoints_write=0", "++hydra.run.dir=again"], tmp_path, nprocs=2)
    assert r.returncode == 1 and f"__3_0.distcp: wrong data at offset {len(raw) // 2} " in r.stderr, r.stderr


def test_a_resharded_load_from_s3_makes_a_ranged_get_per_read(tmp_path, s3_server):
    """On an object store each read is a ranged GET: the GETs the server saw (a proxy in front of it) on the
    step's files are the load's count, and the bytes their ranges ask for, clipped to the objects' sizes as the
    server lists them, are exactly the bytes the load reports read."""
    from tests.support.proxy import proxy, recording, s3_kind
    from tests.support.servers import stored_sizes

    classify, seen = recording(s3_kind)
    root = f"{s3_server.bucket}/restore-{tmp_path.name}"
    with proxy(s3_server.endpoint, classify) as p:
        args = [*DCP, "--world-size", "2", "++workload.checkpoint.num_checkpoints_read=1", "++hydra.run.dir=run",
                "++workload.storage.storage_type=s3", f"++workload.storage.storage_root={root}",
                f"++workload.storage.storage_options.endpoint_url={p.endpoint}",
                "++workload.restore.world_size=1", "++workload.checkpoint.num_checkpoints_write=1"]
        r = dlio(args, tmp_path, env=s3_server.env)
    assert r.returncode == 0, r.stderr
    summary = load(tmp_path / "run" / "summary.json")
    restore, (loaded,) = summary["io"]["restore"], summary["checkpoints"]["load"]
    sizes = stored_sizes(s3_server, root)
    step = [(key, wanted) for kind, key, wanted in seen
            if kind == "GetObject (ranged)" and "/global_epoch1_step1/" in key]
    served = 0
    for key, wanted in step:
        first, last = (int(x) for x in wanted.removeprefix("bytes=").split("-"))
        served += min(last, sizes[key] - 1) - first + 1
    assert {key.rsplit("/", 1)[1] for key, _ in step} == {".metadata", "__0_0.distcp", "__1_0.distcp"}
    assert loaded["requests"]["GetObject (ranged)"]["count"] == len(step) > 3
    assert restore["bytes_read"] == loaded["bytes"] == served, (restore, served)


def test_a_load_its_processes_cannot_share_is_refused_before_anything_is_written(tmp_path):
    """The rule that depends on the job's processes, under mpiexec (the others: tests/unit/test_restore.py)."""
    r = dlio(["workload=tiny", *DCP[1:], "++workload.restore.world_size=3", "--world-size", "4",
              "++workload.checkpoint.num_checkpoints_read=1", f"++workload.storage.storage_root={tmp_path / 'store'}"],
             tmp_path, nprocs=2)
    assert r.returncode == 2 and "workload.restore.world_size=3: must be a multiple of the number of processes (2)" \
        in r.stderr, r.stderr
    assert not (tmp_path / "store").exists()


def test_one_process_loading_for_two_ranks_reads_both_ranks_ranges(tmp_path):
    """A process emulating several loading ranks reads each rank's ranges of a file they share, not the last's
    (the tuned stream reads exactly the ranges the plan names)."""
    r = dlio([*DCP, "--world-size", "4", "++workload.checkpoint.num_checkpoints_read=1", "++hydra.run.dir=run",
              "++workload.checkpoint.io_pattern=stream",
              "++workload.storage.storage_root=data", "++workload.restore.world_size=2",
              "++workload.checkpoint.num_checkpoints_write=1"], tmp_path)
    assert r.returncode == 0, r.stderr
    summary = load(tmp_path / "run" / "summary.json")
    assert summary["checkpoints"]["load"][0]["bytes"] == summary["io"]["restore"]["bytes_read"]


def test_a_loads_figure_is_the_checkpoint_over_its_duration_and_its_world_size_is_the_loads(tmp_path):
    """Megatron saved at 4 ranks (TP 2 x DP 2) and loaded at 2 with TP 1: each loading rank reads the whole model
    and its optimizer state, twice the checkpoint in all. DLIO's load figure is the checkpoint over the load's
    time, not what the ranks read; the load's world size is the load's (the save's stays the save's); a run that
    only loads is a job of the load's ranks."""
    args = ["workload=tiny", "++workload.checkpoint.layout=megatron", "++workload.restore.tensor=1",
            "++workload.restore.world_size=2", "--world-size", "4", "++workload.storage.storage_root=data",
            "++workload.checkpoint.num_checkpoints_read=1"]
    r = dlio([*args, "++workload.checkpoint.num_checkpoints_write=1", "++hydra.run.dir=run"], tmp_path)
    assert r.returncode == 0, r.stderr
    summary = load(tmp_path / "run" / "summary.json")
    m, restore = summary["metric"], summary["io"]["restore"]
    (saved,), (loaded,) = summary["checkpoints"]["save"], summary["checkpoints"]["load"]
    # DLIO's count (checkpoint_size_bytes, the payload) behind the load's figure; the stored bytes apart
    assert restore["bytes_restored"] == saved["bytes"] and loaded["checkpoint_bytes"] == m["checkpoint_size_bytes"]
    # what was read stays in io.restore (storage served those bytes and the headers its framework read again)
    assert loaded["bytes"] >= restore["bytes_read"] > 1.9 * saved["bytes"]
    for unit, size in (("GB", 2**30), ("GiB", 2**30), ("GB_decimal", 10**9)):
        assert m[f"load_checkpoint_io_mean_{unit}_per_second"] == pytest.approx(
            m["checkpoint_size_bytes"] / size / m["load_checkpoint_duration_mean_seconds"])
    assert loaded["read_GiB_per_second"] == pytest.approx(loaded["bytes"] / 2**30 / loaded["duration_seconds"])
    assert (summary["num_accelerators"], summary["world_size"]) == (4, 4)  # DLIO's key: the job that saved
    assert (summary["save_world_size"], summary["load_world_size"]) == (4, 2)
    r = dlio([*args, "++workload.checkpoint.num_checkpoints_write=0", "++hydra.run.dir=again"], tmp_path)
    assert r.returncode == 0, r.stderr
    again = load(tmp_path / "again" / "summary.json")
    assert (again["num_accelerators"], again["world_size"], again["load_world_size"]) == (2, 2, 2)
    assert "save_world_size" not in again and again["io"]["restore"]["saved_world_size"] == 4


def test_a_megatron_moe_checkpoint_loads_verified_at_another_world_and_expert_parallelism(tmp_path):
    """Megatron's load of a mixture of experts, emulated end to end (what megatron-core reads is in
    tests/against_frameworks/test_megatron_moe_restore.py): tiny_moe saved at 4 ranks (8 experts over EP 2) and
    loaded verified at 2 with EP 1, the model alone (its optimizer's state loads only where EP stays above 1); the
    load is the framework's own, every byte it reads compared."""
    r = dlio(["workload=tiny_moe", "++workload.checkpoint.layout=megatron", "--world-size", "4",
              "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1",
              "++workload.restore.world_size=2", "++workload.restore.expert=1", "++workload.restore.model_only=True",
              "++workload.storage.storage_root=data", "++hydra.run.dir=run"], tmp_path)
    assert r.returncode == 0, r.stderr
    restore = load(tmp_path / "run" / "summary.json")["io"]["restore"]
    assert (restore["world_size"], restore["saved_world_size"], restore["model_only"]) == (2, 4, True)
    assert restore["frameworks_own_load"] and restore["caveat"] is None and "dist_checkpointing.load" in \
        restore["follows"]
    assert 0 < restore["bytes_needed"] < restore["bytes_read"] and "not the framework's own load" not in r.stdout


def test_a_load_not_held_to_its_frameworks_own_says_so_on_the_console_and_in_the_summary(tmp_path):
    """DeepSpeed's pipeline engine's load is not modelled: each rank reads its own files whole. The run says so
    beside "verified", once, and summary.json beside ``follows``."""
    r = dlio(["workload=tiny", "++workload.checkpoint.layout=deepspeed", "++workload.model.parallelism.pipeline=2",
              "--world-size", "4",
              "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1",
              "++workload.storage.storage_root=data", "++hydra.run.dir=run"], tmp_path)
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stdout.splitlines() if "not the framework's own load" in line]
    assert len(said) == 1 and said[0].split("] ", 1)[1].startswith("load: not the framework's own load (") \
        and said[0].endswith("each rank reads its own files whole"), r.stdout
    restore = load(tmp_path / "run" / "summary.json")["io"]["restore"]
    assert restore["caveat"] == said[0].split("load: ", 1)[1] and restore["frameworks_own_load"] is False


def test_a_dcp_mixture_of_experts_saved_at_4_loads_verified_at_2_as_its_frameworks_own(tmp_path):
    """torchtitan's expert-parallel placement (tiny_moe: 8 routed experts over EP 2) saved at 4 ranks (two experts a
    rank) and loaded at 2 (four a rank, from the two saving ranks of its EP rank): every range read is verified, the
    load restores what the save wrote, and it is said to be the framework's own (what a real dcp.load of that
    placement reads: tests/against_frameworks/test_moe_restore.py), with no caveat."""
    r = dlio(["workload=tiny_moe", "++workload.checkpoint.layout=dcp", "++workload.model.mtp_layers=0", "--world-size",
              "4", "++workload.restore.world_size=2", "++workload.checkpoint.num_checkpoints_write=1",
              "++workload.checkpoint.num_checkpoints_read=1", "++workload.storage.storage_root=data",
              "++hydra.run.dir=run"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "not the framework's own load" not in r.stdout and "not held to" not in r.stdout, r.stdout
    summary = load(tmp_path / "run" / "summary.json")
    restore, (saved,), (loaded,) = summary["io"]["restore"], summary["checkpoints"]["save"], \
        summary["checkpoints"]["load"]
    assert (restore["world_size"], restore["saved_world_size"], restore["resharded"]) == (2, 4, True)
    assert restore["frameworks_own_load"] is True and restore["caveat"] is None
    assert restore["bytes_restored"] == saved["bytes"] and loaded["checkpoint_bytes"] == saved["checkpoint_bytes"]
