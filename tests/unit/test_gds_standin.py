"""GPU code paths on a machine without a GPU: the gds backend, gds mode's path handling and the GPU
choices of the real modes, against stand-ins for cupy and kvikio that behave as the real ones did on
an H100 without nvidia-fs (tests/standins/README.md), in this process (as processes:
tests/e2e/test_gds_standin.py). They guard our logic between GPU checks; the conformance suite (its ``gds``
case) and real runs prove it on a GPU.
"""

from __future__ import annotations

from importlib import metadata

import numpy as np
import pytest

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.io.backends import get_backend
from dlio_ckpt.io.engine import Engine, FileTask, IOOptions
from dlio_ckpt.io.synthetic import SyntheticData, file_key
from dlio_ckpt.plan.formats import get_format
from dlio_ckpt.plan.types import FilePlan, TensorGroup

MIB = 1 << 20


def test_the_device_source_makes_exactly_the_host_generators_bytes(gpu_standin):
    import cupy

    host, device = SyntheticData(7, MIB), SyntheticData(7, MIB, device=cupy)
    try:
        for key, offset, n in [(file_key(1, 0, 0), 0, MIB), (file_key(2, 5, 3), 3 * 4096, 12345),
                               (file_key(1, 0, 0, 1), 1 << 30, 4096)]:
            assert bytes(host.window(key, offset, n)) == cupy.asnumpy(device.window(key, offset, n)).tobytes()
    finally:
        host.close()
        device.close()


def test_bulk_data_is_made_and_checked_on_the_device(gpu_standin, tmp_path):
    """Only the pool (once per thread) and format headers go to the device; a verified read brings
    nothing back to the host."""
    import cupy

    backend = get_backend("gds", str(tmp_path), {})
    fmt = get_format("pt")
    files = [FilePlan(f"layer_{i}", "model", "bf16", (TensorGroup(None, (3_000_000, 1000)),)) for i in range(3)]
    tasks = [FileTask(backend.join(f.stem + fmt.extension), tuple(fmt.segments(f)), file_key(1, 0, i))
             for i, f in enumerate(files)]
    payload = sum(t.size for t in tasks)
    cupy.transfers.update(to_device=0, to_host=0)
    engine = Engine(backend, 1, IOOptions(chunk_size=MIB))
    try:
        assert engine.write_files(tasks) == payload
        headers = payload - sum(f.payload_bytes for f in files)
        assert cupy.transfers["to_device"] <= 2 * MIB + headers + 4096 * len(tasks)
        assert cupy.transfers["to_host"] == 0
        before = dict(cupy.transfers)
        assert engine.read_files(tasks) == payload  # every byte compared, on the device
        assert cupy.transfers["to_host"] == before["to_host"]
        assert cupy.transfers["to_device"] - before["to_device"] <= headers + 4096 * len(tasks)
    finally:
        engine.close()


def test_reads_stop_at_the_end_of_a_file_instead_of_asking_past_it(gpu_standin, tmp_path):
    """kvikio raises "POSIX error on pread: EOF" where POSIX returns a short read."""
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(256)) * 100)
    backend = get_backend("gds", str(tmp_path), {})
    reader = backend.open_read(str(path), False)
    buf = memoryview(bytearray(MIB))
    try:
        assert reader.readinto(buf) == 25600 and bytes(buf[:25600]) == path.read_bytes()
        assert reader.readinto(buf) == 0
    finally:
        reader.close()


def test_each_process_takes_the_gpu_it_is_given_or_its_local_rank(gpu_standin, tmp_path, monkeypatch):
    import cupy

    monkeypatch.setattr(cupy.cuda.runtime, "device_count", 2)
    assert get_backend("gds", str(tmp_path), {"device": 0}, local_rank=1).device == 0
    assert get_backend("gds", str(tmp_path), {}, local_rank=1).device == 1
    assert get_backend("gds", str(tmp_path), {}, local_rank=3).device == 1
    with pytest.raises(ConfigError, match=r"storage_options.device=5.*has 2 GPU\(s\)"):
        get_backend("gds", str(tmp_path), {"device": 5})


def test_what_really_moved_the_bytes_is_said(gpu_standin, tmp_path):
    from dlio_ckpt.io.backends.cufile_status import transport
    from dlio_ckpt.io.backends.gds import configure_kvikio

    said = transport(str(tmp_path))
    assert said["transport"] == "posix (cuFile compatibility mode)" and "GDS unavailable" in said["why"]
    assert said["file_system"] not in ("", "unknown")
    configure_kvikio(4, MIB, True)
    assert transport(str(tmp_path))["transport"] == "posix (kvikio compatibility mode)"


@pytest.mark.parametrize("extra,cuda", [("gds-cu12", "12"), ("gds-cu13", "13")])
def test_the_gds_extras_match_the_machines_cuda(extra, cuda):
    wanted = [r.split(";")[0] for r in metadata.requires("dlio_ckpt") or [] if f'extra == "{extra}"' in r]
    assert any(r.startswith(f"kvikio-cu{cuda}") for r in wanted), wanted
    assert any(r.startswith(f"cupy-cuda{cuda}x") for r in wanted), wanted


def _gds_mode_context(tmp_path, paths: list[str]):
    from dlio_ckpt.cluster.comm import SelfComm
    from dlio_ckpt.config import validate
    from dlio_ckpt.run.context import RunContext

    w = validate({"model": {"num_layers": 1}, "mode": "gds", "checkpoint": {"checkpoint_folder": str(tmp_path / "ck"),
                  "num_checkpoints_write": 2, "num_checkpoints_read": 2}, "gds": {"paths": paths, "size_mib": 2}})
    return RunContext(w, SelfComm(), get_backend("local_fs", "", {}), 1)


def test_a_path_the_file_system_cannot_take_is_reported_unsupported_and_the_run_goes_on(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from dlio_ckpt.run.real import gds_mode

    ctx = _gds_mode_context(tmp_path, ["cpu", "torch_gds"])
    paths = gds_mode.Paths(ctx.workload.gds, None, torch.device("cpu"))

    def refuse(t, path):
        open(path, "wb").close()
        raise RuntimeError("cuFileHandleRegister failed: file descriptor is not registered")

    monkeypatch.setattr(paths, "save_torch_gds", refuse)
    source = torch.randint(0, 255, (2 * MIB,), dtype=torch.uint8)
    row, records = gds_mode.measure_path(ctx, paths, "torch_gds", source)
    assert row == {"unsupported": "rank 0: RuntimeError: cuFileHandleRegister failed: file descriptor is not "
                                  "registered"} and records == []
    assert not (tmp_path / "ck" / "global_epoch1_step1" / "torch_gds.0.bin").exists()
    row, records = gds_mode.measure_path(ctx, paths, "cpu", source)  # the next path runs as usual
    assert row["write_MiB_per_s"] > 0 and row["read_MiB_per_s"] > 0 and len(records) == 4


def test_device_compare_names_the_first_wrong_byte(gpu_standin):
    import cupy

    from dlio_ckpt.io.synthetic import first_difference_on_device

    want = np.arange(10_000, dtype=np.uint8)
    got = cupy.asarray(want)
    assert first_difference_on_device(cupy, got, cupy.asarray(want)) is None
    got[4097] ^= 1
    assert first_difference_on_device(cupy, got, memoryview(want.tobytes())) == 4097
    assert first_difference_on_device(cupy, got[:10], cupy.asarray(want)) == 10
