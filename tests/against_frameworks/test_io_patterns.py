"""``checkpoint.io_pattern=framework`` held to the frameworks' own saves and loads under strace: the emulated
save of a small job makes the system calls the real save of the same job makes, file by file. Per file: as many
write calls, of sizes in the same powers of two, the same flags at its open (but ``O_CLOEXEC``, which C++'s
stream does not set), the same fsyncs, written by one thread; the same renames; as many threads writing the
checkpoint in all; the same fsyncs on every file of the checkpoint folder, the tool's own included (its run record:
a step's manifest is not synced). The load alike, per data file: as many read calls, of sizes in the same powers of
two, the same bytes, as many threads; and ``.metadata`` read by each rank as ``pickle.load`` reads it.
Real: ``dcp.save`` and ``dcp.load`` of ``mode=fsdp`` (FSDP2 on CPU, ``FileSystemWriter`` and
``FileSystemReader``, torch 2.13.0), megatron-core 0.16.1's fully parallel ``torch_dist`` save and Megatron-LM's
default load (``tests/oracles/megatron_save.py``), and DeepSpeed's save and load, which are
``torch.save(state_dict, path)`` and ``torch.load(path)`` (``tests/oracles/torch_save_path.py``), and
``mode=lightning``'s (Lightning 2.6.6's ``TorchCheckpointIO``). Each real save's
files are also held to the layout here (the checks of test_dcp_layout.py and test_megatron_layout.py), so one
real save serves both."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.plan.layouts import make_plan
from tests.support import DATA, ORACLES, REPO
from tests.support.bounds import DCP_METADATA
from tests.support.cli import MPIEXEC
from tests.support.dcp_files import assert_files_are_dcps
from tests.support.megatron_files import assert_same_files, assert_same_items
from tests.support.strace_calls import calls_on, fsyncs, read_pattern, reads_per_open, traced, write_pattern
from tests.support.workloads import UNEVEN_BF16

pytestmark = pytest.mark.real
STEP = "global_epoch1_step1"
DEEPSPEED_LOADS = json.loads((DATA / "deepspeed_load_reads.json").read_text())  # DeepSpeed's own loads, recorded
ONE_SAVE = ["++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=0",
            "++workload.checkpoint.fsync=True"]
DCP_FILES = (".distcp", ".metadata", ".metadata.tmp")


def dlio_traced(tmp_path: Path, name: str, args: list[str], world: int, files: tuple[str, ...] = DCP_FILES,
                data: tuple[str, ...] = (".distcp",)) -> tuple[dict, dict, dict]:
    """A run of the tool on ``world`` processes under strace, one save and one load: how it wrote step 1's
    ``files``, how it read its ``data`` files, and every call on the checkpoint folder's files (the tool's own
    among them: its run record and manifest)."""
    if not MPIEXEC.exists():
        pytest.skip("mpiexec from the mpich wheel is not installed in this environment")
    work = tmp_path / name
    work.mkdir()
    traced([str(MPIEXEC), "-n", str(world), sys.executable, "-m", "dlio_ckpt", "run", *args,
            f"++workload.storage.storage_root={work / 'root'}", f"hydra.run.dir={work / 'out'}", *ONE_SAVE,
            "++workload.checkpoint.num_checkpoints_read=1"], work / "trace", work,
           env={**os.environ, "PYTHONPATH": str(REPO)})
    folder = calls_on(work / "trace", f"{work / 'root' / 'checkpoints' / 'tiny'}/")
    calls = {thread: [c for c in seq if f"/{STEP}/" in c[1]] for thread, seq in folder.items()}
    return write_pattern(calls, files), read_pattern(calls, data), folder


def assert_same_calls(real: dict, emulated: dict) -> None:
    assert sorted(emulated["files"]) == sorted(real["files"])
    for name, want in real["files"].items():
        got = emulated["files"][name]
        assert got["writes"] == want["writes"], (name, got["writes"], want["writes"])
        assert emulated["sizes"][name] == real["sizes"][name], name
        # fsync is the frameworks' (and a save's); fdatasync is both modes' eviction of a file before a load reads it
        assert got["syncs"].get("fsync") == want["syncs"].get("fsync"), name
        assert got.get("writer_threads") == want.get("writer_threads"), name
        assert sorted(f.replace("O_CLOEXEC|", "") for f in got["open_flags"]) == \
            sorted(f.replace("O_CLOEXEC|", "") for f in want["open_flags"]), name
    assert emulated["renames"] == real["renames"]
    assert emulated["writer_threads"] == real["writer_threads"]


def assert_reads_metadata_as_pickle(real: dict, emulated: dict, ranks: int, within: float, real_more: int = 0) -> None:
    """Each of ``ranks`` loading ranks reads ``.metadata`` once, as ``pickle.load`` reads it through the file's
    buffer: the same read calls, of the same sizes but the last (the file's rest: the emulated ``.metadata``'s size is
    ``within`` its framework's, as the layout's tests hold it). ``real_more``: the real run's other reads of it
    (``mode=fsdp``'s rank 0 reads it after its save, to count the ranks' bytes: not DCP's, not played)."""
    want, got = reads_per_open(real, ".metadata"), reads_per_open(emulated, ".metadata")
    assert len(got) == ranks and len(want) == ranks + real_more, (want, got)
    for sizes in got:
        assert all(len(sizes) == len(w) and sizes[:-1] == w[:-1] for w in want), (sizes, want)
        assert abs(sum(sizes) - sum(want[0])) <= within * sum(want[0]), (sizes, want[0])


@pytest.mark.mpi
def test_the_emulated_dcp_save_and_load_make_the_calls_dcp_makes(tmp_path):
    """Two writer threads a rank (the caller's and one more: DCP's thread_count 1 writes from the caller alone,
    the same code), two ranks: every writer, item and call of a save, and every read of a load."""
    writers = 2
    job = ["workload=tiny", "++workload.model.parallelism.tensor=1", *UNEVEN_BF16]
    real, real_reads, real_folder = dlio_traced(
        tmp_path, "real", [*job, "++workload.mode=fsdp", f"++workload.fsdp.thread_count={writers}"], 2)
    emulated, emulated_reads, emulated_folder = dlio_traced(
        tmp_path, "emulated", [*job, "++workload.checkpoint.layout=dcp",
                               f"++workload.checkpoint.files_per_rank={writers}"], 2)
    assert_files_are_dcps(tmp_path / "real" / "root" / "checkpoints" / "tiny" / STEP, 2, writers, UNEVEN_BF16)
    assert_same_calls(real, emulated)
    # the whole checkpoint folder, the tool's own files included: the run record's fsync (written before the first
    # save, in both modes), and no more: a step's manifest is not synced (Backend.put_marker)
    assert fsyncs(emulated_folder) == fsyncs(real_folder), (fsyncs(emulated_folder), fsyncs(real_folder))
    assert fsyncs(real_folder)["dlio_ckpt_run.json.tmp"] == 1
    assert_reads_metadata_as_pickle(real_folder, emulated_folder, 2, DCP_METADATA, real_more=1)
    assert real["writer_threads"] == 2 * writers  # a thread per file: the caller's, and writers - 1 more
    assert real["renames"] == [(".metadata.tmp", ".metadata")]
    assert sorted(emulated_reads) == sorted(real_reads) == sorted(n for n in real["files"] if n.endswith(".distcp"))
    for name, want in real_reads.items():  # the load: each rank's items, read as torch.load reads them
        got = emulated_reads[name]
        assert got["reads"] == want["reads"], (name, got["reads"], want["reads"])
        assert (got["sizes"], got["read"], len(got["threads"])) == (want["sizes"], want["read"], len(want["threads"]))


def test_the_emulated_megatron_save_and_load_make_the_calls_megatron_core_makes(tmp_path):
    """megatron-core's fully parallel save (a writer per file) and Megatron-LM's default load
    (``dist_checkpointing.load``, every rank its own state dict's items), two ranks, two files each."""
    pytest.importorskip("megatron.core")
    world, tp, layers, hidden, ffn, heads, kv, vocab, dtype, files = 2, 1, 2, 256, 688, 8, 4, 1000, "bf16", 2
    model = [str(v) for v in (tp, layers, hidden, ffn, heads, kv, vocab, dtype, files)]
    out = tmp_path / "real" / STEP
    out.parent.mkdir()
    # the save, then the load of it, from one traced process (the oracle's then-load form: megatron-core imported
    # once for both); each rank of either a process of its own, forked, so each thread's calls are one or the other's
    traced([sys.executable, str(ORACLES / "megatron_save.py"), "then-load", str(tmp_path / "real" / "reads.json"),
            f"{tp}:{world}:0", str(out), str(world), *model], tmp_path / "real" / "trace", tmp_path / "real")
    suffixes = (*DCP_FILES, "common.pt", "metadata.json")
    real_calls = calls_on(tmp_path / "real" / "trace", f"/{STEP}/")
    real, real_reads = write_pattern(real_calls, suffixes), read_pattern(real_calls, (".distcp",))
    work = tmp_path / "emulated"
    work.mkdir()
    job = ["workload=tiny", "++workload.checkpoint.layout=megatron", f"++workload.model.parallelism.tensor={tp}",
           f"++workload.model.num_layers={layers}", f"++workload.model.transformer.hidden_size={hidden}",
           f"++workload.model.transformer.ffn_hidden_size={ffn}",
           f"++workload.model.transformer.num_attention_heads={heads}",
           f"++workload.model.transformer.num_kv_heads={kv}", f"++workload.model.transformer.vocab_size={vocab}",
           f"++workload.model.model_datatype={dtype}", f"++workload.checkpoint.files_per_rank={files}"]
    traced([str(MPIEXEC), "-n", str(world), sys.executable, "-m", "dlio_ckpt", "run", *job,
            f"++workload.storage.storage_root={work / 'root'}", f"hydra.run.dir={work / 'out'}", *ONE_SAVE,
            "++workload.checkpoint.num_checkpoints_read=1"], work / "trace", work,
           env={**os.environ, "PYTHONPATH": str(REPO)})
    calls = calls_on(work / "trace", f"{work / 'root' / 'checkpoints' / 'tiny'}/")  # the tool's own files too
    emulated, emulated_reads = write_pattern(calls, suffixes), read_pattern(calls, (".distcp",))
    workload, _, _ = compose(job, None)  # the files are megatron-core's, to the byte and item by item
    assert_same_files({p.name: p.stat().st_size for p in out.iterdir()}, workload, world)
    assert_same_items(out, make_plan(workload, world))
    assert_same_calls(real, emulated)
    assert fsyncs(calls) == fsyncs(real_calls) + Counter({"dlio_ckpt_run.json.tmp": 1})  # and the run record's alone
    assert_reads_metadata_as_pickle(real_calls, calls, world, 0.10)
    assert real["writer_threads"] == world * files + 1  # a process per file, and rank 0's own for its three
    assert sorted(emulated_reads) == sorted(real_reads) == sorted(n for n in real["files"] if n.endswith(".distcp"))
    for name, want in real_reads.items():  # the load: each rank's items of each file, read as torch.load reads them
        got = emulated_reads[name]
        assert got["reads"] == want["reads"], (name, got["reads"], want["reads"])
        assert (got["sizes"], got["read"], len(got["threads"])) == (want["sizes"], want["read"], len(want["threads"]))


@pytest.mark.mpi
def test_the_emulated_deepspeed_save_and_load_make_the_calls_torch_save_and_load_of_a_path_make(tmp_path):
    """DeepSpeed's ``TorchCheckpointEngine`` saves each of a rank's files by ``torch.save(state_dict, path)`` and
    loads it by ``torch.load(path)``: through C++'s stream (8 KiB, ``writev`` of what is pending and each piece of
    1 KiB or more), on the caller's thread, one file after another, never synced. The real calls are those of
    the same state dicts (the emulated files, loaded) saved and loaded by torch (``tests/oracles/
    torch_save_path.py``; DeepSpeed is not installed here), each rank loading the files DeepSpeed 0.19.8's own
    ``load_checkpoint`` loaded in the recorded case of the same job (``tests/data/deepspeed_load_reads.json``,
    ``tp2-zero1-bf16``: TP 2, data-parallel 2, ZeRO 1, bf16, four ranks)."""
    case = DEEPSPEED_LOADS["cases"]["tp2-zero1-bf16"]
    world = case["world"]
    job = ["workload=tiny", "++workload.checkpoint.layout=deepspeed",
           f"++workload.model.parallelism.tensor={case['tensor']}",
           f"++workload.model.parallelism.pipeline={case['pipeline']}",
           f"++workload.model.parallelism.zero_stage={case['zero_stage']}",
           f"++workload.model.model_datatype={case['dtype']}"]
    emulated, emulated_reads, emulated_folder = dlio_traced(tmp_path, "emulated", job, world, (".pt",), (".pt",))
    saved = tmp_path / "emulated" / "root" / "checkpoints" / "tiny" / STEP
    assert sorted(f.name for f in saved.iterdir()) == sorted(case["files"])  # the files DeepSpeed saved
    plan = make_plan(compose(job, None)[0], world)  # which rank saves which file (held by test_deepspeed_layout.py)
    # each rank's load, as DeepSpeed's: model-parallel rank 0's model file, its own model-parallel rank's, then its
    # own optimizer partition
    loads = [[f["file"] for f in r["torch_load"]] for r in case["loads"]["default"]]
    ranks = [",".join(str(saved / f"{f.stem}.pt") for f in r.files) + ":" + ",".join(names)
             for r, names in zip(plan.ranks, loads, strict=True)]
    out = tmp_path / "real" / STEP
    out.mkdir(parents=True)
    traced([sys.executable, str(ORACLES / "torch_save_path.py"), str(out), *ranks], tmp_path / "real" / "trace",
           tmp_path / "real")
    calls = calls_on(tmp_path / "real" / "trace", f"/real/{STEP}/")
    real, real_reads = write_pattern(calls, (".pt",)), read_pattern(calls, (".pt",))
    assert len(real["files"]) == len(case["files"]) and real["writer_threads"] == world  # each rank's own files
    assert_same_calls(real, emulated)
    assert fsyncs(emulated_folder) == {"dlio_ckpt_run.json.tmp": 1}  # never synced: only the tool's run record
    for name, want in real["files"].items():  # C++'s stream gathers: every call a writev but the close's write
        got = emulated["files"][name]
        assert want["writevs"] >= want["writes"] - 1 and got["writevs"] == want["writevs"], name
        assert got["written"] == want["written"], name  # the same archive: records named by the file
    assert sorted(emulated_reads) == sorted(real_reads)
    for name, want in real_reads.items():  # each file read whole, as torch.load reads it
        got = emulated_reads[name]
        assert got["reads"] == want["reads"], (name, got["reads"], want["reads"])
        assert (got["sizes"], got["read"], len(got["threads"])) == \
            (want["sizes"], want["read"], len(want["threads"])), name


def lightning_traced(tmp_path: Path, name: str, args: list[str]) -> tuple[dict, dict, list]:
    """A run of Lightning's demo (2 layers, one save and one load) under strace, ``$TMPDIR`` in its folder: how the
    file was written in ``$TMPDIR`` (write_pattern of the temporary files), how the ``.ckpt`` was read, and the
    renames from ``$TMPDIR`` into the checkpoint's folder."""
    work = tmp_path / name
    (work / "tmpdir").mkdir(parents=True)
    traced([sys.executable, "-m", "dlio_ckpt", "run", "workload=lightning_demo", "++workload.model.num_layers=2",
            *args, "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1",
            f"++workload.storage.storage_root={work / 'root'}", f"hydra.run.dir={work / 'out'}"], work / "trace",
           work, env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(work / "tmpdir")})
    staged = write_pattern(calls_on(work / "trace", str(work / "tmpdir")), ("",))
    loaded = read_pattern(calls_on(work / "trace", ".ckpt"), (".ckpt",))
    moved = [(call, args) for seq in calls_on(work / "trace", str(work / "tmpdir")).values() for call, args, _ in seq
             if call.startswith("rename") and str(work / "root") in args]
    return staged, loaded, moved


def test_the_emulated_lightning_save_and_load_make_the_calls_lightnings_make(tmp_path):
    """Lightning 2.6.6's ``TorchCheckpointIO`` (``mode=lightning``, its demo transformer, SGD): ``torch.save`` into
    memory, then one write of the whole file to a temporary file in ``$TMPDIR`` (opened twice: ``mkstemp``, then
    for writing), never synced, renamed into the checkpoint's folder; the load ``torch.load``'s reads of the whole
    file. The emulated ``layout=lightning`` makes the same calls (its file is named ``checkpoint.ckpt`` in the
    step's folder, Lightning's ``global_epoch1_step1.ckpt`` beside it: compared by role)."""
    pytest.importorskip("lightning")
    real, real_reads, real_moves = lightning_traced(tmp_path, "real", [])
    emulated, emulated_reads, emulated_moves = lightning_traced(
        tmp_path, "emulated", ["++workload.mode=emulated", "++workload.checkpoint.layout=lightning"])
    assert len(real["files"]) == len(emulated["files"]) == 1 and len(real_moves) == len(emulated_moves) == 1
    (want,), (got,) = real["files"].values(), emulated["files"].values()
    assert got["writes"] == want["writes"] == 1 and got["syncs"] == want["syncs"] == {}
    assert sorted(f.replace("O_CLOEXEC|", "") for f in got["open_flags"]) == \
        sorted(f.replace("O_CLOEXEC|", "") for f in want["open_flags"])
    assert list(emulated["sizes"].values()) == list(real["sizes"].values())
    assert emulated["writer_threads"] == real["writer_threads"] == 1
    (want,), (got,) = real_reads.values(), emulated_reads.values()
    assert got["reads"] == want["reads"], (got["reads"], want["reads"])
    assert (got["sizes"], len(got["threads"])) == (want["sizes"], len(want["threads"]))
