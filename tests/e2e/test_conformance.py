"""One suite every storage backend joins (through the ``store`` fixture): local_fs, s3 against
SeaweedFS, gcs against fake-gcs-server, null, and gds where a GPU is present.

Each test talks to the real thing: files on disk, objects on a local server, read back through the
library a user would use (torch.load, safetensors, h5py).
"""

from __future__ import annotations

import io
import json

import pytest

from dlio_ckpt.errors import StorageError, VerifyError
from dlio_ckpt.io.backends import get_backend
from dlio_ckpt.io.engine import Engine, FileTask, IOOptions
from dlio_ckpt.io.synthetic import file_key
from dlio_ckpt.plan.formats import get_format
from dlio_ckpt.plan.types import FilePlan, TensorGroup
from tests.support.cli import dlio, load
from tests.support.storage import STORING

FORMATS = ["pt", "raw", "safetensors", "hdf5"]
MIB = 1 << 20
# A flat model-states file and a nested optimizer file, sizes chosen to cross chunk boundaries.
FILES = [
    FilePlan("model_0_model_states", "model", "bf16", (TensorGroup(None, (1000, 700_000, 3, 1_500_000)),)),
    FilePlan("zero_pp_rank_0_mp_rank_0_optim_states", "optimizer", "fp32",
             (TensorGroup("state", (300_000, 5)), TensorGroup("fp32_flat", (1_200_000,)))),
]
RUN_KEY = 0x5EED


def tasks_for(backend, fmt_name: str, folder: str, files=FILES) -> list[FileTask]:
    fmt = get_format(fmt_name)
    return [FileTask(backend.join(folder, f.stem + fmt.extension), tuple(fmt.segments(f)), file_key(1, 0, i))
            for i, f in enumerate(files)]


def engine_for(backend, chunk: int = MIB) -> Engine:
    return Engine(backend, RUN_KEY, IOOptions(chunk_size=chunk))


def fetch(backend, path: str) -> bytes:
    """A whole object back through the backend's own reader (test files are a few MiB)."""
    reader = backend.open_read(path, False)
    out, buf = bytearray(), memoryview(bytearray(MIB))
    try:
        while n := reader.readinto(buf):
            out += buf[:n]
    finally:
        reader.close()
    return bytes(out)


def expected_tensors(file: FilePlan) -> dict[str, int]:
    return {f"{g.key}.{i}" if g.key else str(i): n for g in file.groups for i, n in enumerate(g.numels)}


def open_as_library_does(fmt: str, data: bytes, file: FilePlan) -> dict[str, tuple[int, str]]:
    """{flattened tensor name: (numel, dtype)} as the format's own reader sees the bytes."""
    if fmt == "pt":
        import torch

        state = torch.load(io.BytesIO(data), weights_only=True)
        flat = {}
        for k, v in state.items():
            for k2, t in (v.items() if isinstance(v, dict) else [(None, v)]):
                flat[f"{k}.{k2}" if k2 is not None else k] = (t.numel(), str(t.dtype).removeprefix("torch."))
        return flat
    if fmt == "safetensors":
        from safetensors.torch import load

        return {k: (t.numel(), str(t.dtype).removeprefix("torch.")) for k, t in load(data).items()}
    if fmt == "hdf5":
        import h5py

        out = {}
        with h5py.File(io.BytesIO(data), "r") as h5:
            def visit(name, obj):
                if isinstance(obj, h5py.Dataset):
                    dtype = obj.attrs.get("dtype", obj.dtype.name)
                    out[name.replace("/", ".")] = (obj.shape[0], dtype.decode() if isinstance(dtype, bytes) else dtype)
            h5.visititems(visit)
        return out
    raise AssertionError(fmt)


TORCH_NAMES = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}
H5_NAMES = {"bf16": "bf16", "fp32": "float32", "fp16": "float16"}


@pytest.mark.parametrize("store", STORING, indirect=True)
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_round_trips_with_exact_sizes(store, fmt):
    backend = store.backend()
    backend.makedirs(backend.join("ck"))
    tasks = tasks_for(backend, fmt, "ck")
    engine = engine_for(backend)
    try:
        assert engine.write_files(tasks) == sum(t.size for t in tasks)
        assert engine.read_files(tasks) == sum(t.size for t in tasks)  # every byte compared
    finally:
        engine.close()
    for task, file in zip(tasks, FILES, strict=True):
        assert backend.size(task.path) == task.size
        if fmt == "raw":
            assert task.size == file.payload_bytes
            continue
        seen = open_as_library_does(fmt, fetch(backend, task.path), file)
        names = TORCH_NAMES if fmt in ("pt", "safetensors") else H5_NAMES
        assert seen == {k: (n, names[file.dtype]) for k, n in expected_tensors(file).items()}


def _corrupt(backend, path: str, offset: int) -> None:
    data = bytearray(fetch(backend, path))
    data[offset] ^= 0xFF
    backend.put_small(path, bytes(data))


@pytest.mark.parametrize("store", STORING, indirect=True)
def test_a_corrupted_block_is_caught_and_located(store):
    backend = store.backend()
    backend.makedirs(backend.join("ck"))
    tasks = tasks_for(backend, "pt", "ck")
    engine = engine_for(backend)
    try:
        engine.write_files(tasks)
        offset = 5 * 4096 + 17
        _corrupt(backend, tasks[1].path, offset)
        with pytest.raises(VerifyError, match=f"wrong data at offset {offset} \\(4 KiB block 5\\)"):
            engine.read_files(tasks)
        counting = Engine(backend, RUN_KEY, IOOptions(chunk_size=MIB, verify=False))
        try:
            assert counting.read_files(tasks) == sum(t.size for t in tasks)  # verify=False: bytes counted only
            engine.write_files(tasks)  # whole again: the size cases below differ only in length
            whole = fetch(backend, tasks[1].path)
            backend.put_small(tasks[1].path, whole[:-1])
            with pytest.raises(VerifyError, match=f"has {tasks[1].size - 1} bytes, planned {tasks[1].size}"):
                counting.read_files(tasks)
        finally:
            counting.close()
        # a file short or long by one byte (object stores: found by reading, no HEAD first; files: fstat)
        with pytest.raises(VerifyError, match=f"has {tasks[1].size - 1} bytes, planned {tasks[1].size}"):
            engine.read_files(tasks)
        backend.put_small(tasks[1].path, whole + b"x")
        with pytest.raises(VerifyError, match=f"has {tasks[1].size + 1} bytes, planned {tasks[1].size}"):
            engine.read_files(tasks)
        backend.remove(tasks[1].path)
        with pytest.raises(StorageError, match="no such|not found|No such file"):
            engine.read_files(tasks)
    finally:
        engine.close()


def test_small_objects_are_atomic_and_cleanup_removes_everything(store):
    backend = store.backend()
    backend.makedirs(backend.join("ck"))
    manifest = backend.join("ck", "step.manifest.json")
    assert backend.get_small(manifest) is None
    backend.put_small(manifest, b'{"complete": true}')
    assert json.loads(backend.get_small(manifest)) == {"complete": True}
    tasks = tasks_for(backend, "raw", "ck")
    engine = engine_for(backend)
    try:
        engine.write_files(tasks)
    finally:
        engine.close()
    for path in [manifest, *(t.path for t in tasks)]:
        backend.remove(path)
        assert backend.size(path) is None
        assert backend.get_small(path) is None
    backend.remove(manifest)  # removing what is gone is not an error


@pytest.mark.parametrize("store", STORING, indirect=True)
def test_several_threads_per_process_move_many_files(store):
    backend = store.backend(threads=3)
    backend.makedirs(backend.join("ck"))
    files = [FilePlan(f"layer_{i}", "model", "fp16", (TensorGroup(None, (50_000 + 4099 * i,)),)) for i in range(12)]
    tasks = tasks_for(backend, "safetensors", "ck", files)
    engine = engine_for(backend, chunk=64 << 10)
    try:
        assert engine.write_files(tasks) == sum(t.size for t in tasks)
        assert engine.read_files(tasks) == sum(t.size for t in tasks)
    finally:
        engine.close()
    assert [backend.size(t.path) for t in tasks] == [t.size for t in tasks]


@pytest.mark.mpi
@pytest.mark.parametrize("fmt", ["pt", "safetensors"])
def test_four_ranks_write_at_once_and_verify(store, fmt, tmp_path, dlio_here):
    args = ["workload=tiny", *store.overrides(), f"++workload.checkpoint.format={fmt}",
            "++workload.checkpoint.time_between_checkpoints=0", "++workload.checkpoint.checkpoint_folder=ck",
            "++hydra.run.dir=out"]
    res = dlio(args, tmp_path, nprocs=4, env=store.env, timeout=240)
    assert res.returncode == 0, res.stderr + res.stdout
    summary = load(tmp_path / "out" / "summary.json")
    assert summary["status"] == "ok" and summary["num_processes"] == 4
    assert summary["io"]["storage_type"] == store.storage_type
    assert summary["io"]["verified"] is (store.storage_type != "null")
    plan = json.loads(dlio_here(["plan", *args, "--world-size", "4", "--format", "json"]).stdout)  # writes nothing
    want = {f["name"]: f["file_bytes"] for r in plan["ranks"] for f in r["files"]}
    backend = store.backend()
    for step in (1, 2) if backend.capabilities.stores_data else ():  # null keeps nothing to look at
        manifest = json.loads(backend.get_small(backend.join("ck", f"global_epoch1_step{step}.manifest.json")))
        assert manifest["files"] == want
        sizes = {name: backend.size(backend.join("ck", f"global_epoch1_step{step}", name)) for name in want}
        assert sizes == want
    assert summary["metric"]["checkpoint_size_GB"] == plan["checkpoint_size_GB"]


def test_s3_credentials_from_storage_options_and_dlio_option_names(tmp_path, s3_server, monkeypatch, dlio_here):
    """A run of one process, in this process (``dlio_here``: the same parsing, storage and clients as a process of
    its own, whose start adds nothing to what is held; as tests/e2e/test_credentials.py runs its keyed runs)."""
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    args = ["workload=tiny", "++workload.checkpoint.time_between_checkpoints=0", "++hydra.run.dir=out",
            "++workload.storage.storage_type=s3", f"++workload.storage.storage_root=s3://{s3_server.bucket}/creds",
            f"++workload.storage.storage_options.endpoint_url={s3_server.endpoint}",
            "++workload.storage.storage_options.access_key_id=from-options",
            "++workload.storage.storage_options.secret_access_key=from-options-secret",
            "++workload.storage.storage_options.s3_force_path_style=True",
            "++workload.storage.storage_options.s3_max_attempts=3", "--world-size", "2"]
    res = dlio_here(args, env={"AWS_EC2_METADATA_DISABLED": "true"})
    assert res.returncode == 0, res.stderr
    io_ = load(tmp_path / "out" / "summary.json")["io"]
    assert io_["storage"]["max_attempts"] == 3 and io_["storage"]["prefix"] == "creds"
    for written in (tmp_path / "out").rglob("*"):
        if written.is_file():
            assert "from-options" not in written.read_text(), f"credentials leaked into {written}"


@pytest.mark.parametrize("kind,variable", [("s3", "AWS_ENDPOINT_URL"), ("gcs", "STORAGE_EMULATOR_HOST")])
def test_the_sdk_endpoint_variable_is_enough(tmp_path, request, kind, variable, dlio_here):
    """The variable read where the run makes its clients (in this process, ``dlio_here``: set for this test alone,
    as a process of its own would have it)."""
    server = request.getfixturevalue(f"{kind}_server")
    args = ["workload=tiny", "++workload.checkpoint.time_between_checkpoints=0", "++hydra.run.dir=out",
            f"++workload.storage.storage_type={kind}", f"++workload.storage.storage_root={server.bucket}/env-endpoint",
            "--world-size", "2"]
    res = dlio_here(args, env={**server.env, variable: server.endpoint})
    assert res.returncode == 0, res.stderr
    assert load(tmp_path / "out" / "summary.json")["status"] == "ok"


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_spread_prefixes_puts_objects_under_hashed_prefixes(request, kind, monkeypatch):
    server = request.getfixturevalue(f"{kind}_server")
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    root = f"{server.bucket}/spread-{kind}"
    backend = get_backend(kind, root, {"endpoint_url": server.endpoint, "spread_prefixes": 16})
    files = [FilePlan(f"layer_{i:02d}-model_states", "model", "fp16", (TensorGroup(None, (1000,)),)) for i in range(40)]
    tasks = tasks_for(backend, "raw", "ck", files)
    engine = engine_for(backend)
    try:
        engine.write_files(tasks)
        engine.read_files(tasks)
    finally:
        engine.close()
    keys = [backend.key(t.path) for t in tasks]
    for key, file in zip(keys, files, strict=True):
        assert key.startswith(f"spread-{kind}/") and key.endswith(f"/ck/{file.stem}.bin")
    spreads = {k.split("/")[1] for k in keys}
    assert len(spreads) > 8 and all(len(s) == 1 for s in spreads)  # one hex digit for 16 prefixes
    assert all(backend.size(t.path) == t.size for t in tasks)
