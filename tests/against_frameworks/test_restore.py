"""Restores as they really happen (``workload.restore``): a DCP checkpoint saved at one world size and loaded at
another, or the model alone, held to what a real ``dcp.load`` reads on each rank (``tests/oracles/
dcp_load_reads.py``, an instrumented ``FileSystemReader``); the emulated load reads and verifies those ranges,
on local files and S3, and reports what it needed and read; what a layout's framework cannot do is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.model.dense import TransformerShape
from dlio_ckpt.plan.layouts import make_plan
from dlio_ckpt.plan.restore import restore_plan

from .conftest import REPO, dlio, load
from .test_dcp_layout import DCP, _dtype, real_save

ORACLE = Path(__file__).resolve().parent / "oracles" / "dcp_load_reads.py"
SHAPE = [*_dtype("fp32"), "++workload.model.transformer.vocab_size=1001"]  # dim 0 uneven over 3 and 4 ranks


def real_reads(step: Path, loads: list[tuple[int, bool]], tmp_path: Path,
               ) -> dict[tuple[int, bool], dict[int, list[tuple[str, int, int]]]]:
    """What dcp.load reads on each rank, per load (world size, model alone), from the oracle."""
    workload, _, _ = compose(["workload=tiny", "++workload.model.parallelism.tensor=1", *SHAPE], None)
    out = tmp_path / "reads.json"
    r = subprocess.run([sys.executable, str(ORACLE), str(step), str(out),
                        json.dumps(asdict(TransformerShape.from_model(workload.model))), workload.model.model_datatype,
                        *(f"{w}:{int(m)}" for w, m in loads)],
                       capture_output=True, text=True, timeout=300, cwd=REPO,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-3000:]
    found = json.loads(out.read_text())
    return {(w, m): {int(k): [tuple(x) for x in v] for k, v in found[f"{w}:{int(m)}"].items()} for w, m in loads}


def emulated_reads(saved: int, world: int, model_only: bool) -> dict[int, list[tuple[str, int, int]]]:
    workload, _, _ = compose([*DCP, *SHAPE, f"++workload.restore.world_size={world}",
                              f"++workload.restore.model_only={model_only}"], None)
    plan = make_plan(workload, saved)
    restore = restore_plan(workload, plan)
    (meta,) = plan.coordinator
    return {r.rank: [(meta.name, 0, meta.size)] + [(f"{plan.ranks[f.rank].files[f.index].stem}.distcp", o, n)
                                                    for f in r.files for o, n in f.ranges] for r in restore.ranks}


@pytest.mark.real
@pytest.mark.mpi
def test_the_emulated_restore_reads_what_dcp_load_reads(tmp_path):
    """Every rank's reads, in order: .metadata first, then each stored item's (file, offset, length) as DCP's
    FileSystemReader slices it; saved at 3 ranks (rows uneven), loaded resharded to 2 and to 4, at the same world
    size (replicated items read from the ranks that stored them), and the model alone."""
    saved, loads = 3, [(2, False), (4, False), (3, False), (2, True)]
    real_save(tmp_path, saved, 1, SHAPE)
    step = tmp_path / "real" / "checkpoints" / "tiny" / "global_epoch1_step1"
    every = real_reads(step, loads, tmp_path)
    for world, model_only in loads:
        real, ours = every[(world, model_only)], emulated_reads(saved, world, model_only)
        assert sorted(real) == sorted(ours) == list(range(world))
        for rank in range(world):
            (name, _, size), *items = real[rank]
            assert name == ".metadata" and abs(ours[rank][0][2] - size) <= 0.10 * size  # .metadata's size: ~
            assert ours[rank][1:] == items, (world, model_only, rank)


MEGATRON_ORACLE = Path(__file__).resolve().parent / "oracles" / "megatron_save.py"
# TP 2 x PP 2 x DP 2 (8 ranks), the first stage one block of 3 (Megatron's uneven split)
MEGATRON = ["workload=tiny", "++workload.checkpoint.layout=megatron", "++workload.model.parallelism.tensor=2",
            "++workload.model.parallelism.pipeline=2", "++workload.model.parallelism.first_stage_layers=1",
            "++workload.model.num_layers=3", "++workload.model.transformer.hidden_size=64",
            "++workload.model.transformer.ffn_hidden_size=96", "++workload.model.transformer.num_attention_heads=4",
            "++workload.model.transformer.num_kv_heads=2", "++workload.model.transformer.vocab_size=998",
            "++workload.model.model_datatype=fp32", "++workload.checkpoint.files_per_rank=1"]


@pytest.mark.real
def test_the_emulated_megatron_restore_reads_what_dist_checkpointing_load_reads(tmp_path):
    """A real megatron-core save with pipeline parallelism (TP 2 x PP 2 x DP 2, 3 blocks split 1 + 2, the
    distributed optimizer) holds our plan's items in our order, to the byte; then Megatron's default load at
    TP 1 on 4 ranks (PP 2 x DP 2, model and optimizer) and at TP 2 on 4 ranks (the model alone; data
    parallelism 2 -> 1) is run. The ranks that read are ours; each first opens metadata.json, common.pt and
    .metadata whole (the files our emulated load reads first, on every rank), then reads, on every rank, the
    (file, offset, length) our restore plan reads, in the same order. About 25 s (9 forked ranks and 8)."""
    pytest.importorskip("megatron.core")
    from .test_megatron_layout import assert_same_files, assert_same_items

    step, out, world = tmp_path / "real", tmp_path / "reads.json", 8
    model = ["2x2x1", "3", "64", "96", "4", "2", "998", "fp32", "1"]  # TP x PP x the first stage's blocks
    r = subprocess.run([sys.executable, str(MEGATRON_ORACLE), str(step), str(world), *model],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    workload, _, _ = compose(MEGATRON, None)
    assert_same_files({p.name: p.stat().st_size for p in step.iterdir()}, workload, world)
    plan = make_plan(workload, world)
    assert_same_items(step, plan)
    loads = [(1, 4, False), (2, 4, True)]
    r = subprocess.run([sys.executable, str(MEGATRON_ORACLE), "load", str(out), str(step),
                        ",".join(f"{tp}:{w}:{int(m)}" for tp, w, m in loads), *model],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    found = json.loads(out.read_text())
    first = {c.name: c.size for c in plan.coordinator}  # what our emulated load reads whole before its ranges
    for tp, world, model_only in loads:
        w, _, _ = compose([*MEGATRON, f"++workload.restore.world_size={world}", f"++workload.restore.tensor={tp}",
                           f"++workload.restore.model_only={model_only}"], None)
        restore = restore_plan(w, plan)
        real = {int(rank): [tuple(x) for x in reads]
                for rank, reads in found[f"{tp}:{world}:{int(model_only)}"].items()}
        assert sorted(real) == [rr.rank for rr in restore.ranks] == list(range(world)), (tp, world, model_only)
        for rr in restore.ranks:
            whole, items = real[rr.rank][:3], real[rr.rank][3:]
            assert [name for name, _, _ in whole] == ["metadata.json", "common.pt", ".metadata"], whole
            assert sorted(first) == sorted(name for name, _, _ in whole)
            for name, offset, size in whole:
                bound = 0.10 * size if name == ".metadata" else 0  # .metadata's size: ~ (the others to the byte)
                assert offset == 0 and abs(first[name] - size) <= bound, (name, first[name], size)
            mine = [(f"{plan.ranks[f.rank].files[f.index].stem}.distcp", o, n) for f in rr.files for o, n in f.ranges]
            assert mine == items, (tp, world, model_only, rr.rank)


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
    assert restore["bytes_read"] == loaded["bytes"] > 0 and restore["reads_per_rank"]["max"] > 4
    assert sum(restore["read_bytes"]["histogram"].values()) == 2 * restore["reads_per_rank"]["mean"]
    assert loaded["metadata_read_seconds_max"] > 0 and loaded["duration_imbalance"] >= 1.0
    # the bytes the file system handed over: the same load again, alone, under strace; every read of the step's
    # files summed from the kernel's answers equals what it reports read, exactly
    traced, trace = _traced_load(tmp_path, [*args, "++workload.checkpoint.num_checkpoints_write=0",
                                            "++hydra.run.dir=traced"])
    assert traced["io"]["restore"]["bytes_read"] == traced["checkpoints"]["load"][0]["bytes"] == trace
    shard = tmp_path / "data" / "ck" / "global_epoch1_step1" / "__3_0.distcp"
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    shard.write_bytes(bytes(raw))
    r = dlio([*args, "++workload.checkpoint.num_checkpoints_write=0", "++hydra.run.dir=again"], tmp_path, nprocs=2)
    assert r.returncode == 1 and f"__3_0.distcp: wrong data at offset {len(raw) // 2} " in r.stderr, r.stderr


def _traced_load(cwd: Path, args: list[str]) -> tuple[dict, int]:
    """A run on 2 processes under ``strace -f``, its summary and the bytes its read calls returned on files of the
    checkpoint's step folder (``-y`` prints each descriptor's path)."""
    import os
    import re
    import shutil

    from .conftest import MPIEXEC

    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    out = cwd / "strace"  # -ff: a file per thread, so no call is split into "unfinished" and "resumed" lines
    cmd = ["strace", "-f", "-ff", "-qq", "-y", "-o", str(out), "-e", "trace=read,pread64,readv,preadv,preadv2",
           str(MPIEXEC), "-n", "2", sys.executable, "-m", "dlio_ckpt", *args]
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    call = re.compile(r"^(?:read|pread64|readv|preadv|preadv2)\(\d+<([^>]*)>.*\) += (\d+)$")
    read = sum(int(m[2]) for f in cwd.glob("strace.*") for line in f.read_text(errors="replace").splitlines()
               if (m := call.match(line)) and "/ck/global_epoch1_step1/" in m[1])
    summary = load(cwd / args[args.index("++hydra.run.dir=traced")].split("=", 1)[1] / "summary.json")
    return summary, read


def test_a_resharded_load_from_s3_makes_a_ranged_get_per_read(tmp_path, s3_server):
    """On an object store each read is a ranged GET: the GETs the server saw (a proxy in front of it) on the
    step's files are the load's count, and the bytes their ranges ask for, clipped to the objects' sizes as the
    server lists them, are exactly the bytes the load reports read."""
    from .proxy import proxy, s3_kind
    from .test_requests import _recording, _stored_sizes

    classify, seen = _recording(s3_kind)
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
    sizes = _stored_sizes(s3_server, root)
    step = [(key, wanted) for kind, key, wanted in seen
            if kind == "GetObject (ranged)" and "/global_epoch1_step1/" in key]
    served = 0
    for key, wanted in step:
        first, last = (int(x) for x in wanted.removeprefix("bytes=").split("-"))
        served += min(last, sizes[key] - 1) - first + 1
    assert {key.rsplit("/", 1)[1] for key, _ in step} == {".metadata", "__0_0.distcp", "__1_0.distcp"}
    assert loaded["requests"]["GetObject (ranged)"]["count"] == len(step) > 3
    assert restore["bytes_read"] == loaded["bytes"] == served, (restore, served)


@pytest.mark.parametrize(("extra", "message"), [
    (["++workload.checkpoint.layout=deepspeed", "++workload.restore.world_size=2"],
     "workload.restore.world_size=2: must be the save's (4) with checkpoint.layout=deepspeed: DeepSpeed loads"),
    (["++workload.checkpoint.layout=deepspeed", "++workload.restore.model_only=True"],
     "workload.restore.model_only=True: is not modelled with checkpoint.layout=deepspeed"),
    (["++workload.checkpoint.layout=megatron", "++workload.restore.tensor=3"],
     "workload.restore.tensor=3: must divide model.transformer.num_attention_heads (8)"),
    ([*DCP[1:], "++workload.restore.tensor=2"], "workload.restore.tensor=2: means nothing with checkpoint.layout=dcp"),
    ([*DCP[1:], "++workload.restore.world_size=3"],
     "workload.restore.world_size=3: must be a multiple of the number of processes (2)"),
])
def test_a_load_its_framework_cannot_do_is_refused_before_anything_is_written(tmp_path, extra, message):
    r = dlio(["workload=tiny", *extra, "--world-size", "4", "++workload.checkpoint.num_checkpoints_read=1",
              f"++workload.storage.storage_root={tmp_path / 'store'}"], tmp_path, nprocs=2)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "store").exists()


def test_one_process_loading_for_two_ranks_reads_both_ranks_ranges(tmp_path):
    """A process emulating several loading ranks reads each rank's ranges of a file they share, not the last's."""
    r = dlio([*DCP, "--world-size", "4", "++workload.checkpoint.num_checkpoints_read=1", "++hydra.run.dir=run",
              "++workload.storage.storage_root=data", "++workload.restore.world_size=2",
              "++workload.checkpoint.num_checkpoints_write=1"], tmp_path)
    assert r.returncode == 0, r.stderr
    summary = load(tmp_path / "run" / "summary.json")
    assert summary["checkpoints"]["load"][0]["bytes"] == summary["io"]["restore"]["bytes_read"]


def test_a_scaled_megatron_save_loads_at_another_tensor_parallelism_with_the_shapes_it_saved():
    """checkpoint.scale rounds widths to the save's TP: a load at TP 1 asks for the tensors as saved."""
    from dlio_ckpt.plan.layouts.megatron_restore import load_layout

    w, _, _ = compose(["workload=tiny", "++workload.checkpoint.layout=megatron", "++workload.checkpoint.scale=0.3",
                       "++workload.restore.tensor=1", "++workload.restore.world_size=2"], None)
    plan = make_plan(w, 4)
    loaded = load_layout(w, plan.layout, 2)
    assert {t.fqn: t.shape for t in loaded.tensors()} == {t.fqn: t.shape for t in plan.layout.tensors()}
    restore = restore_plan(w, plan)
    # at TP 1 every loading rank needs every tensor and object the save wrote, and reads every stored archive
    # whole: exact counts from the save's files, not from the restore's own figures
    saved_items = [i for r in plan.ranks for f in r.files for i in f.items]
    assert [r.needed for r in restore.ranks] == [sum(i.nbytes + len(i.pickled) for i in saved_items)] * 2
    stored = sum(f.size for r in plan.ranks for f in r.files)
    assert [sum(n for f in r.files for _, n in f.ranges) for r in restore.ranks] == [stored] * 2


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
    assert restore["bytes_restored"] == saved["bytes"] == loaded["checkpoint_bytes"]
    assert loaded["bytes"] == restore["bytes_read"] > 1.9 * saved["bytes"]  # what was read stays in io.restore
    for unit, size in (("GB", 2**30), ("GiB", 2**30), ("GB_decimal", 10**9)):
        assert m[f"load_checkpoint_io_mean_{unit}_per_second"] == pytest.approx(
            saved["bytes"] / size / m["load_checkpoint_duration_mean_seconds"])
    assert loaded["read_GiB_per_second"] == pytest.approx(loaded["bytes"] / 2**30 / loaded["duration_seconds"])
    assert (summary["num_accelerators"], summary["world_size"]) == (4, 4)  # DLIO's key: the job that saved
    assert (summary["save_world_size"], summary["load_world_size"]) == (4, 2)
    r = dlio([*args, "++workload.checkpoint.num_checkpoints_write=0", "++hydra.run.dir=again"], tmp_path)
    assert r.returncode == 0, r.stderr
    again = load(tmp_path / "again" / "summary.json")
    assert (again["num_accelerators"], again["world_size"], again["load_world_size"]) == (2, 2, 2)
    assert "save_world_size" not in again and again["io"]["restore"]["saved_world_size"] == 4


def test_a_load_not_held_to_its_frameworks_own_says_so_on_the_console_and_in_the_summary(tmp_path):
    """Megatron's load of a mixture of experts is not modelled: each rank reads its own files whole. The run says
    so beside "verified", once, and summary.json beside ``follows``."""
    r = dlio(["workload=tiny_moe", "++workload.checkpoint.layout=megatron", "--world-size", "4",
              "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1",
              "++workload.storage.storage_root=data", "++hydra.run.dir=run"], tmp_path)
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stdout.splitlines() if "not the framework's own load" in line]
    assert len(said) == 1 and said[0].split("] ", 1)[1].startswith("load: not the framework's own load (") \
        and said[0].endswith("each rank reads its own files whole"), r.stdout
    restore = load(tmp_path / "run" / "summary.json")["io"]["restore"]
    assert restore["caveat"] == said[0].split("load: ", 1)[1] and restore["frameworks_own_load"] is False


@pytest.mark.parametrize(("extra", "caveat"), [
    (["workload=tiny_moe", "++workload.checkpoint.layout=dcp", "++workload.model.mtp_layers=0"],
     "not held to the framework's own load"),
    (["workload=tiny_moe", "++workload.checkpoint.layout=deepspeed"], "not the framework's own load (DeepSpeed"),
    (DCP, None), (["workload=tiny", "++workload.checkpoint.layout=megatron"], None), (["workload=tiny"], None),
])
def test_which_loads_are_not_held_to_their_frameworks_own(extra, caveat):
    from dlio_ckpt.plan.restore import load_caveat

    w, _, _ = compose(extra, None)
    said = load_caveat(w, restore_plan(w, make_plan(w, 4)))
    assert said == caveat if caveat is None else said.startswith(caveat), said
