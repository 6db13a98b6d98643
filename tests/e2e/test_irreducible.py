"""The files real runs write, held to what a storage that reduces data inline would find in them: zstd with the
longest window any storage uses (``-19 --long=31``) and a hash of every aligned 512-byte sector and 4 KiB block.
The expectations come from zstd and the hashes, not from the generator. Runs of workload=tiny, 4 ranks, two
checkpoints, in the dlio, dcp, megatron and deepspeed layouts (each as its framework writes). Its counterpart
tests/unit/test_synthetic.py holds the generator alone; the 100 MB case (whole files, headers included) is
bench/cpu.py's."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from dlio_ckpt.config import compose
from dlio_ckpt.model.dtypes import DTYPES
from dlio_ckpt.plan.layouts import file_format, make_plan
from tests.support.cli import dlio, load

pytestmark = pytest.mark.skipif(shutil.which("zstd") is None, reason="zstd not installed (scripts/setup.sh)")

SECTOR, BLOCK = 512, 4096
SCALE = ["++workload.checkpoint.scale=0.1"]  # about 5 MB a checkpoint: zstd -19 reads 10 MB in a few seconds
LAYOUTS = {"dlio": [], "dcp": ["++workload.checkpoint.layout=dcp", "++workload.model.parallelism.tensor=1"],
           "megatron": ["++workload.checkpoint.layout=megatron"],
           "deepspeed": ["++workload.checkpoint.layout=deepspeed"]}


def run(where: Path, extra: list[str]) -> Path:
    """A run of tiny at 4 ranks with ``extra``; its checkpoints' folder."""
    r = dlio(["workload=tiny", *extra, "--world-size", "4", f"++workload.storage.storage_root={where / 'store'}",
              f"hydra.run.dir={where / 'out'}"], where)
    assert r.returncode == 0, r.stderr[-3000:]
    return where / "store" / "checkpoints" / "tiny"


def data_files(folder: Path) -> list[Path]:
    """Every file of every step (not the tool's own manifests)."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.parent != folder)


def payload(extra: list[str]) -> dict[str, list[tuple[int, int]]]:
    """Where each file of the plan holds payload (every byte its format does not write), by file name."""
    workload, _, _ = compose(["workload=tiny", *extra], None)
    plan, fmt = make_plan(workload, 4), file_format(workload)
    out = {c.name: [(0, c.size)] for c in plan.coordinator}
    for rank in plan.ranks:
        for f in rank.files:
            at, spans = 0, []
            for seg in fmt.segments(f):
                size = len(seg) if isinstance(seg, bytes) else seg
                if not isinstance(seg, bytes):
                    spans.append((at, at + size))
                at += size
            out[f"{f.stem}{fmt.extension}"] = spans
    return out


def zstd(data: bytes) -> int:
    """Bytes zstd -19 --long=31 (a 2 GiB window: any repeat in these runs is within it) writes for ``data``."""
    return len(subprocess.run(["zstd", "-q", "-19", "--long=31", "-T2", "-c"], input=data, capture_output=True,
                              check=True).stdout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[list[Path], dict[str, list[tuple[int, int]]]]]:
    """One run per layout and a second of dlio (a run key of its own, the same file names and keys): each run's
    files and where they hold payload."""
    out = {}
    for name, extra in [*LAYOUTS.items(), ("dlio again", [])]:
        folder = run(tmp_path_factory.mktemp(name.replace(" ", "_")), [*extra, *SCALE])
        out[name] = (data_files(folder), payload([*extra, *SCALE]))
    return out


def payload_bytes(files: list[Path], spans: dict[str, list[tuple[int, int]]]) -> bytes:
    parts = []
    for path in files:
        raw = path.read_bytes()
        parts += [raw[lo:hi] for lo, hi in spans[path.name]]
    return b"".join(parts)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_zstd_keeps_every_byte_of_the_data(runs, layout):
    """Both checkpoints' data of every rank as one stream: zstd keeps at least 99 % (the run's few format headers
    repeat from rank to rank and step to step, as a framework's own do: they are left out)."""
    files, spans = runs[layout]
    data = payload_bytes(files, spans)
    assert len(data) > 7 << 20
    assert zstd(data) >= 0.99 * len(data)


def test_no_sector_of_data_repeats_across_files_ranks_checkpoints_and_runs(runs):
    """Every aligned 512-byte sector that holds only data (a format's header or pickle repeats from rank to rank,
    as the framework's own does), in every file of five runs (two checkpoints each; files of the same name and key
    in the two dlio runs and in the deepspeed run), is seen once."""
    seen: set[bytes] = set()
    count = 0
    for files, spans in runs.values():
        for path in files:
            raw = path.read_bytes()
            for lo, hi in spans[path.name]:
                for at in range(-(-lo // SECTOR) * SECTOR, hi - SECTOR + 1, SECTOR):
                    seen.add(hashlib.blake2b(raw[at:at + SECTOR], digest_size=16).digest())
                    count += 1
    assert count > 80_000
    assert len(seen) == count


@pytest.mark.parametrize("compression, dedup", [(2.0, 1.0), (1.0, 3.0), (3.0, 1.5)])
def test_the_reduction_asked_is_what_a_deduplicator_and_zstd_measure(tmp_path, compression, dedup):
    """The whole files of a run's checkpoint (headers too: at full size, tiny's 46 MB, they are few): a 4 KiB
    deduplicator keeps 1/dedup of their blocks, and zstd shrinks the blocks it keeps by compression, each within
    10 %; the checkpoint reads back verified; summary.json says what was asked."""
    asked = [f"++workload.checkpoint.compression_ratio={compression}", f"++workload.checkpoint.dedup_ratio={dedup}",
             "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1"]
    files = data_files(run(tmp_path, asked))
    blocks = [raw[at:at + BLOCK] for raw in (p.read_bytes() for p in files) for at in range(0, len(raw), BLOCK)]
    unique = list(dict.fromkeys(blocks))
    assert len(blocks) / len(unique) == pytest.approx(dedup, rel=0.1)
    kept = b"".join(unique)
    assert len(kept) / zstd(kept) == pytest.approx(compression, rel=0.1)
    assert load(tmp_path / "out" / "summary.json")["io"]["data_reduction"] == {
        "compression_ratio": compression, "dedup_ratio": dedup, "data_values": "random"}


@pytest.mark.parametrize("key, value, said", [("compression_ratio", "2", "compression_ratio=2.0"),
                                              ("data_values", "torch_rand", "data_values=torch_rand")])
def test_a_checkpoint_is_read_with_the_reduction_it_was_written_with(tmp_path, key, value, said):
    """The run that writes reads its step back verified; a later run that reads it with other ratios or values
    would find every block wrong: it is refused by key before anything is read."""
    run(tmp_path, [f"++workload.checkpoint.{key}={value}", "++workload.checkpoint.num_checkpoints_read=1", *SCALE])
    assert load(tmp_path / "out" / "summary.json")["io"]["verified"] is True
    r = dlio(["workload=tiny", *SCALE, "--world-size", "4", "++workload.checkpoint.num_checkpoints_write=0",
              "++workload.checkpoint.num_checkpoints_read=1", f"++workload.storage.storage_root={tmp_path / 'store'}",
              f"hydra.run.dir={tmp_path / 'again'}"], tmp_path)
    assert r.returncode == 2
    assert f"workload.checkpoint.{key}" in r.stderr and said in r.stderr


def torch_rand_kept(dtype: str, nbytes: int) -> float:
    """The share zstd keeps of torch.rand's own tensor of ``dtype`` (DLIO v2.0.1's ``get_tensor_core``)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    t = torch.rand(nbytes // DTYPES[dtype].bytes, dtype=getattr(torch, DTYPES[dtype].torch))
    data = t.view(torch.uint8).numpy().tobytes()
    return zstd(data) / len(data)


def test_dlio_2_0s_data_is_as_reducible_as_dlios_torch_rand_tensors(tmp_path):
    """reference=dlio-2.0 on tiny, whose model is fp16 and optimizer fp32 (DLIO v2.0.1 makes torch.rand tensors of
    those datatypes): each datatype's data in the checkpoint's files (2 MiB of it: two files, each past a lap of
    the pool) keeps under zstd -19 the share torch.rand's own tensors of that datatype keep, within 2 percentage
    points; no data sector repeats; summary.json says what was written."""
    extra = ["++workload.checkpoint.reference=dlio-2.0", "++workload.checkpoint.num_checkpoints_write=1",
             "++workload.checkpoint.num_checkpoints_read=1", "++workload.checkpoint.scale=0.5"]  # 3.4 MB of fp16
    files, spans = data_files(run(tmp_path, extra)), payload(extra)
    workload, _, _ = compose(["workload=tiny", *extra], None)
    plan, fmt = make_plan(workload, 4), file_format(workload)
    dtype_of = {f"{f.stem}{fmt.extension}": f.dtype for rank in plan.ranks for f in rank.files}
    assert set(dtype_of.values()) == {"fp16", "fp32"}
    for dtype in ("fp16", "fp32"):
        data = payload_bytes([p for p in files if dtype_of.get(p.name) == dtype], spans)[:2 << 20]
        assert len(data) == 2 << 20
        assert zstd(data) / len(data) == pytest.approx(torch_rand_kept(dtype, len(data)), abs=0.02), dtype
        sectors = [data[at:at + SECTOR] for at in range(0, len(data), SECTOR)]
        assert len(set(sectors)) == len(sectors)
    io = load(tmp_path / "out" / "summary.json")["io"]
    assert io["data_reduction"] == {"compression_ratio": 1.0, "dedup_ratio": 1.0, "data_values": "torch_rand"}
    assert io["reference"]["sets"]["checkpoint.data_values"] == "torch_rand"
