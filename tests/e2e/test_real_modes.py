"""The real modes as a user runs them: Lightning and FSDP train on CPU and write real checkpoints
(local files, the local S3 and GCS servers); gds runs where a GPU is, and elsewhere must refuse
cleanly. Each run's result files have the emulator's keys."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.cli import dlio, load
from tests.support.storage import Store
from tests.support.workloads import TINY_FSDP

pytestmark = pytest.mark.real

LIGHT = ["workload=lightning_demo", "++workload.model.num_layers=1", "++workload.checkpoint.num_checkpoints_write=2",
         "++workload.checkpoint.num_checkpoints_read=2"]
# where the model's datatype is not what a test holds: bf16, not tiny's fp16, which a CPU has no kernels for (a
# training step 20x slower: 2.5 s of a run of 8 s on 2 processes here); test_fsdp_two_processes_... keeps fp16
FSDP_BF16 = [*TINY_FSDP, "++workload.model.model_datatype=bf16"]
INTERVAL = 1.0  # seconds of training between saves: longer than our own work between two saves (about 0.55 s)


def run_dir(cwd, name):
    (found,) = (cwd / "hydra_log" / name).iterdir()
    return found


@pytest.fixture(scope="module")
def emulated_metric_keys(tmp_path_factory) -> set[str]:
    """The metric keys of an emulated run (tiny, 2 saves, 2 loads): one run, which every real mode's summary here
    is held to (the same run in every test: its keys do not depend on the test)."""
    cwd = tmp_path_factory.mktemp("emulated")
    r = dlio(["workload=tiny", "--world-size", "2", "++workload.checkpoint.num_checkpoints_write=2",
              "++workload.checkpoint.num_checkpoints_read=2"], cwd)
    assert r.returncode == 0, r.stderr
    return set(load(run_dir(cwd, "tiny") / "summary.json")["metric"])


def check_summary(summary: dict, mode: str, keys: set[str]) -> None:
    assert summary["status"] == "ok" and summary["mode"] == mode
    async_keys = {"save_checkpoint_held_mean_seconds", "save_checkpoint_time_to_durable_mean_seconds"}
    # the emulator's keys (async saves: two more, as its own), but the figures of the storage calls, which a real
    # mode has only of those it makes itself (per-request latencies, the stonewall from each file's times)
    calls = {k for k in set(summary["metric"]) | keys if k.endswith("_p99_ms") or "_stonewall_" in k}
    assert set(summary["metric"]) - async_keys - calls == keys - calls
    m = summary["metric"]
    assert m["save_checkpoint_io_mean_GiB_per_second"] > 0 and m["load_checkpoint_io_mean_GiB_per_second"] > 0
    assert [c["index"] for c in summary["checkpoints"]["save"]] == [1, 2]


def predicted_bytes(dlio_here, overrides: list[str]) -> int:
    """What ``plan`` predicts a checkpoint's size to be: a read-only command, in this process (``dlio_here``)."""
    out = dlio_here(["plan", *overrides, "--format", "json"], cwd=REPO)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["checkpoint_bytes"]


def heavy_imports(cwd: Path, args: list[str]) -> tuple[int, list[str], str]:
    """The command run in a fresh interpreter: its exit status, which of torch and Lightning it imported, and its
    standard error."""
    code = (f"import json, sys; from dlio_ckpt.cli.main import main; rc = main({args!r}); "
            "print(json.dumps([rc, sorted(m for m in ('torch', 'lightning') if m in sys.modules)]))")
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert r.stdout.strip(), r.stderr  # the command ended without its last line: its error says why
    rc, heavy = json.loads(r.stdout.strip().splitlines()[-1])
    return rc, heavy, r.stderr


def test_emulator_starts_without_torch(tmp_path):
    rc, heavy, err = heavy_imports(tmp_path, ["workload=tiny", "--world-size", "2"])
    assert (rc, heavy) == (0, []), err


def test_a_lightning_run_refused_before_it_starts_imports_neither_torch_nor_lightning(tmp_path):
    """A file of the user's where the run must write refuses it (exit 2, the file left) before the mode imports its
    framework: the refusal comes at once, not after Lightning's seconds of import."""
    folder = tmp_path / "checkpoints" / "lightning_demo"
    folder.mkdir(parents=True)
    (folder / "global_epoch1_step1.ckpt").write_bytes(b"the user's")
    rc, heavy, err = heavy_imports(tmp_path, ["workload=lightning_demo"])
    assert (rc, heavy) == (2, []) and "which dlio_ckpt did not write" in err, err
    assert (folder / "global_epoch1_step1.ckpt").read_bytes() == b"the user's"


@pytest.mark.parametrize("extra", [["++workload.checkpoint.fsync=True"],
                                   ["++workload.lightning.optimizer=adam", "++workload.lightning.async_save=True",
                                    "++workload.checkpoint.fsync=True"]],
                         ids=["sgd-fsync", "adam-async-fsync"])
def test_lightning_local_files_sizes_and_plan(tmp_path, extra, emulated_metric_keys, dlio_here):
    r = dlio(LIGHT + extra, tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    files = sorted((tmp_path / "checkpoints" / "lightning_demo").glob("global_epoch*"))
    assert [f.name for f in files] == ["global_epoch1_step1.ckpt", "global_epoch1_step2.ckpt"]
    record = json.loads((tmp_path / "checkpoints" / "lightning_demo" / "dlio_ckpt_run.json").read_text())
    assert record["steps"] == [1, 2] and record["beside"] == [".ckpt"]  # the files it may replace next time
    summary = load(run_dir(tmp_path, "lightning_demo") / "summary.json")
    check_summary(summary, "lightning", emulated_metric_keys)
    sizes = [f.stat().st_size for f in files]
    assert [c["bytes"] for c in summary["checkpoints"]["save"]] == sizes
    predicted = predicted_bytes(dlio_here, LIGHT + extra)
    assert abs(predicted - sizes[0]) / sizes[0] < 0.01, (predicted, sizes)
    import torch

    ckpt = torch.load(files[1], weights_only=False)
    assert ckpt["global_step"] == 2
    assert ("exp_avg" in str(ckpt["optimizer_states"])) == ("adam" in str(extra))
    proc = summary["per_process"][0]
    # the CPU a real save spends is the framework's own, not the emulator's (the console says so where it is bound)
    assert all(c["cpu"]["own_seconds"] == 0 < c["cpu"]["framework_seconds"] for c in summary["checkpoints"]["save"])
    assert len(proc["blocking_save_seconds"]) == 2
    for held, c in zip(proc["blocking_save_seconds"], summary["checkpoints"]["save"], strict=True):
        assert 0 < held <= c["duration_seconds"] + 1e-6
    if "async" in str(extra):
        assert "AsyncCheckpointIO" in summary["io"]["checkpoint_io"] and summary["io"]["fsync"]
    else:
        # a synchronous save's record is made when it returns: its own storage calls (the fsync checkpoint.fsync
        # adds), not the later saves' too, nor the stat that reads its size afterwards; its CPU figures alike
        kinds = [{k: v["count"] for k, v in c["latency"]["kinds"].items()} for c in summary["checkpoints"]["save"]]
        assert kinds == [{"fsync": 1}, {"fsync": 1}], kinds
        # the same run again, into the folder the first one filled: an earlier run's checkpoints are refused
        again = dlio(LIGHT, tmp_path, timeout=300)
        assert again.returncode == 2 and "already holds checkpoints of an earlier run" in again.stderr
        # overwrite=True replaces them in every mode alike (preparation.start_writing): test_faults runs it


def test_lightning_sizes_at_10_layers_match_the_published_benchmark(dlio_here):
    """75.6 MiB at 10 layers with SGD, as the Lightning benchmark reports (plan only: no training)."""
    predicted = predicted_bytes(dlio_here, ["workload=lightning_demo"])
    assert round(predicted / (1 << 20), 1) == 75.6


# Lightning refused on more than one process: tests/e2e/test_bad_input.py (the whole message, nothing written)


def object_sizes(store: Store, folder: str) -> dict[str, int]:
    backend = store.backend()
    path = backend.join(folder)
    return {name: backend.size(backend.join(folder, name)) for name in backend.list_names(path)}


def test_lightning_on_object_stores(tmp_path, s3_server, monkeypatch):
    """Lightning to S3 through its S3 checkpoint IO (s3torchconnector's) and through TorchCheckpointIO (fsspec), the
    two points of one sweep (one process: Lightning imported once, each point an ordinary run), each point's
    objects kept and held to its summary, nothing written to local files. GCS through fsspec:
    test_lightning_fsspec_against_dataflux_in_one_sweep (in .venv-dataflux)."""
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    store = Store("s3", f"{s3_server.bucket}/light-{time.monotonic_ns()}", {"endpoint_url": s3_server.endpoint},
                  dict(s3_server.env))
    sweep = tmp_path / "sweep"
    r = dlio(["sweep", "--keep-checkpoints", *LIGHT, *store.overrides(), "++workload.lightning.checkpoint_io=s3,torch",
              f"++hydra.sweep.dir={sweep}"], tmp_path, env=store.env, timeout=300)
    assert r.returncode == 0, r.stderr
    with open(sweep / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(row["lightning.checkpoint_io"], row["status"]) for row in rows] == [("s3", "ok"), ("torch", "ok")]
    for point, (row, io) in enumerate(zip(rows, ("S3LightningCheckpoint", "TorchCheckpointIO"), strict=True), 1):
        sizes = object_sizes(store, f"checkpoints/lightning_demo/sweep/point{point}")
        assert sorted(sizes) == ["dlio_ckpt_run.json", "global_epoch1_step1.ckpt", "global_epoch1_step2.ckpt"]
        summary = load(sweep / row["point"] / "summary.json")
        assert [c["bytes"] for c in summary["checkpoints"]["save"]] == [sizes["global_epoch1_step1.ckpt"],
                                                                       sizes["global_epoch1_step2.ckpt"]]
        assert summary["io"]["checkpoint_io"] == io
    assert not (tmp_path / "checkpoints").exists()  # nothing went to local files


DATAFLUX_PYTHON = REPO / ".venv-dataflux" / "bin" / "python"  # scripts/setup.sh makes it (requirements-dataflux.txt)


def test_lightning_fsspec_against_dataflux_in_one_sweep(tmp_path, gcs_server):
    """The Dataflux benchmark's comparison as one command: the same model saved to and loaded from the same
    bucket through fsspec (gcsfs) and through DatafluxLightningCheckpoint. Its multipart upload uses GCS's
    XML API, which fake-gcs-server does not serve (404), so here Dataflux sends one resumable upload."""
    if not DATAFLUX_PYTHON.exists():
        from tests.support.servers import unavailable

        unavailable(".venv-dataflux")
    store = Store("gcs", f"{gcs_server.bucket}/dataflux-{time.monotonic_ns()}", {"endpoint_url": gcs_server.endpoint},
                  dict(gcs_server.env))
    sweep = tmp_path / "sweep"
    r = dlio(["sweep", *LIGHT, *store.overrides(), "++workload.lightning.checkpoint_io=torch,dataflux",
              "++workload.lightning.dataflux_multipart=false", f"++hydra.sweep.dir={sweep}"], tmp_path, env=store.env,
             python=DATAFLUX_PYTHON, timeout=300)
    assert r.returncode == 0, r.stderr
    with open(sweep / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(row["lightning.checkpoint_io"], row["status"]) for row in rows] == [("torch", "ok"), ("dataflux", "ok")]
    summaries = [load(sweep / row["point"] / "summary.json") for row in rows]
    assert [s["io"]["checkpoint_io"] for s in summaries] == ["TorchCheckpointIO", "DatafluxLightningCheckpoint"]
    fsspec_side, dataflux_side = ([c["bytes"] for c in s["checkpoints"]["save"]] for s in summaries)
    assert fsspec_side == dataflux_side and len(fsspec_side) == 2  # the same model, the same torch.save bytes
    versions = summaries[1]["per_process"][0]["versions"]
    assert versions["gcs-torch-dataflux"] == "1.4.0" and versions["google-cloud-storage"].startswith("2.")
    assert store.backend().list_names(store.backend().join("checkpoints")) == []  # each point cleaned up


@pytest.mark.mpi
@pytest.mark.parametrize("extra", [[], ["++workload.fsdp.async_save=True", "++workload.fsdp.thread_count=2"]],
                         ids=["sync", "async-2threads"])
def test_fsdp_two_processes_write_dcp_shards_and_load_them_back(tmp_path, extra, emulated_metric_keys):
    interval = [] if extra else [f"++workload.checkpoint.time_between_checkpoints={INTERVAL}"]
    r = dlio(TINY_FSDP + extra + interval, tmp_path, nprocs=2, timeout=300)
    assert r.returncode == 0, r.stderr
    threads = 2 if extra else 1
    summary = load(run_dir(tmp_path, "tiny") / "summary.json")
    check_summary(summary, "fsdp", emulated_metric_keys)
    if interval:  # the job trained for the interval between its saves
        first, second = summary["checkpoints"]["save"]
        between = datetime.fromisoformat(second["start"]) - datetime.fromisoformat(first["end"])
        assert between.total_seconds() >= INTERVAL, between
    for step in (1, 2):
        folder = tmp_path / "checkpoints" / "tiny" / f"global_epoch1_step{step}"
        names = sorted(p.name for p in folder.iterdir())
        assert names == [".metadata"] + [f"__{r}_{t}.distcp" for r in range(2) for t in range(threads)]
        total = sum(p.stat().st_size for p in folder.iterdir())
        assert summary["checkpoints"]["save"][step - 1]["bytes"] == total
    assert summary["metric"]["checkpoint_size_bytes"] == total
    params = summary["per_process"][0]["model"]["parameters"]
    assert total > 3 * params * 2  # fp16 weights and Adam's two moments
    assert summary["io"]["async_save"] == bool(extra)
    if extra:  # dcp.async_save says how long training was held and when each checkpoint was durable, as the
        # emulator's async saves do (tests/e2e/test_async.py holds theirs to the same fields and orderings)
        assert {"save_checkpoint_held_mean_seconds", "save_checkpoint_time_to_durable_mean_seconds"} <= \
            set(summary["metric"])
        for c in summary["checkpoints"]["save"]:
            a = c["async"]
            assert 0 <= a["stalled_seconds_max"] <= a["held_seconds_max"] <= a["time_to_durable_seconds"] + 1e-6
    import torch.distributed.checkpoint as dcp

    md = dcp.FileSystemReader(str(folder)).read_metadata()
    assert "model.model.layers.0.self_attn.q_proj.weight" in md.state_dict_metadata  # transformers' Llama


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_fsdp_on_object_stores(tmp_path, request, monkeypatch, kind):
    server = request.getfixturevalue(f"{kind}_server")
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    store = Store(kind, f"{server.bucket}/fsdp-{time.monotonic_ns()}", {"endpoint_url": server.endpoint},
                  dict(server.env))
    r = dlio(FSDP_BF16 + store.overrides(), tmp_path, nprocs=2, env=store.env, timeout=300)
    assert r.returncode == 0, r.stderr
    summary = load(run_dir(tmp_path, "tiny") / "summary.json")
    assert summary["io"]["writer"] == {"s3": "S3StorageWriter", "gcs": "FsspecWriter"}[kind]
    for step in (1, 2):
        sizes = object_sizes(store, f"checkpoints/tiny/global_epoch1_step{step}")
        assert {".metadata", "__0_0.distcp", "__1_0.distcp"} == set(sizes)
        assert summary["checkpoints"]["save"][step - 1]["bytes"] == sum(sizes.values())


def test_gds_mode_without_a_gpu_stops_cleanly(tmp_path, dlio_here):
    import torch

    if torch.cuda.is_available():
        r = dlio(["workload=tiny", "++workload.mode=gds", "++workload.gds.size_mib=64"], tmp_path, timeout=300)
        assert r.returncode == 0, r.stderr
        summary = load(run_dir(tmp_path, "tiny") / "summary.json")
        assert summary["io"]["paths"]["cpu"]["write_MiB_per_s"] > 0
        return
    r = dlio_here(["workload=tiny", "++workload.mode=gds"])  # bad input here: in this process
    assert r.returncode == 2
    assert "needs a CUDA GPU" in r.stderr
    assert not (tmp_path / "hydra_log").exists() and not (tmp_path / "checkpoints").exists()


def test_fsdp_under_torchrun(tmp_path):
    """torchrun instead of mpiexec: the collectives go over torch.distributed."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    r = subprocess.run([torchrun, "--nproc-per-node", "2", "-m", "dlio_ckpt", *FSDP_BF16], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr[-3000:]
    summary = load(run_dir(tmp_path, "tiny") / "summary.json")
    assert summary["num_processes"] == 2 and summary["mode"] == "fsdp"
    names = {p.name for p in (tmp_path / "checkpoints" / "tiny" / "global_epoch1_step2").iterdir()}
    assert names == {".metadata", "__0_0.distcp", "__1_0.distcp"}


# -- bad input and faults in real modes -----------------------------------------------------------


# an earlier run's checkpoints refused unless overwrite: test_lightning_local_files_sizes_and_plan[sgd] runs its
# run again (a run of its own here cost one more Lightning run)


# many small checkpoints: the job is still saving when the fault comes, and starts fast (bf16: a training step of
# this model took 5 s in fp16, 30 ms in bf16, the first of them before the first checkpoint the faults wait for)
SLOW_FSDP = FSDP_BF16 + [
    "++workload.model.transformer.hidden_size=512", "++workload.model.transformer.ffn_hidden_size=1376",
    "++workload.model.num_layers=4", "++workload.model.transformer.vocab_size=8000",
    "++workload.checkpoint.num_checkpoints_write=60", "++workload.checkpoint.num_checkpoints_read=0",
    "++workload.checkpoint.checkpoint_folder=ck", "++hydra.run.dir=out"]


@pytest.mark.mpi
def test_fsdp_sigterm_ends_every_rank_with_a_failed_summary(tmp_path):
    from tests.support.jobs import ended, no_ok_summary, start, wait_for

    proc = start(SLOW_FSDP, tmp_path)
    wait_for(lambda: (tmp_path / "ck" / "global_epoch1_step1" / ".metadata").exists(), timeout=120)
    proc.send_signal(signal.SIGTERM)
    code, err, _ = ended(proc, 15)
    assert code != 0 and "interrupted by SIGTERM" in err, err
    summary = no_ok_summary(tmp_path / "out")
    assert summary is not None and summary["during"].startswith(("save", "train"))


@pytest.mark.mpi
def test_fsdp_s3_server_killed_mid_run_ends_the_job_naming_the_checkpoint(tmp_path, monkeypatch):
    from tests.support.jobs import ended, no_ok_summary, start, wait_for
    from tests.support.servers import seaweedfs

    with seaweedfs() as server:
        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        # 2 attempts, not 5: the CRT's backoff between attempts at a refused connection is what the job waits out
        store = Store("s3", f"{server.bucket}/killed", {"endpoint_url": server.endpoint, "max_attempts": 2},
                      dict(server.env))
        backend = store.backend()
        proc = start(SLOW_FSDP + store.overrides() + ["++workload.checkpoint.io_timeout=60"], tmp_path,
                     env=server.env)
        wait_for(lambda: backend.size(backend.join("ck", "global_epoch1_step1", ".metadata")) is not None,
                 timeout=120)
        server.kill()
        code, err, _ = ended(proc, 90)
    assert code != 0
    assert f"s3://{server.bucket}/killed/ck/global_epoch1_step" in err, err
    assert "connection refused" in err.lower() and "Traceback" not in err, err
    summary = no_ok_summary(tmp_path / "out")
    assert summary is not None and "connection refused" in summary["reason"].lower(), summary
    assert summary["during"].startswith(("save", "background save")) and "steps_committed" not in summary


def test_lightning_s3_server_killed_mid_run_names_the_checkpoint(tmp_path, monkeypatch):
    from tests.support.jobs import ended, wait_for
    from tests.support.servers import seaweedfs

    with seaweedfs() as server:
        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        store = Store("s3", f"{server.bucket}/killed", {"endpoint_url": server.endpoint, "max_attempts": 2},
                      dict(server.env))
        backend = store.backend()
        args = [*LIGHT, "++workload.checkpoint.num_checkpoints_write=40",
                "++workload.checkpoint.num_checkpoints_read=0", "++workload.lightning.checkpoint_io=s3",
                "++hydra.run.dir=out", *store.overrides()]
        proc = subprocess.Popen([sys.executable, "-m", "dlio_ckpt", *args], cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env={**os.environ, **server.env, "PYTHONPATH": str(REPO)})
        wait_for(lambda: backend.size(backend.join("checkpoints/lightning_demo", "global_epoch1_step2.ckpt")),
                 timeout=120)
        server.kill()
        code, err, _ = ended(proc, 60)
    assert code != 0
    assert f"save to s3://{server.bucket}/killed/checkpoints/lightning_demo/global_epoch1_step" in err, err
    assert "Traceback" not in err and "rank 0 on" in err
    assert load(tmp_path / "out" / "summary.json")["status"] == "failed"


def test_gds_mode_host_path_and_table_row(tmp_path):
    """The one gds-mode path that needs no GPU (Storage<->CPU in io_size requests), and its table row;
    the device paths run only where a GPU is (test_gds_mode_without_a_gpu_stops_cleanly)."""
    import torch

    from dlio_ckpt.config import validate
    from dlio_ckpt.io.backends import get_backend
    from dlio_ckpt.run.real.gds_mode import MIB, Paths, _row

    w = validate({"model": {"num_layers": 1}, "mode": "gds", "checkpoint": {"fsync": True},
                  "gds": {"paths": ["cpu"], "io_size_mib": 1, "size_mib": 3}})
    paths = Paths(w.gds, get_backend("local_fs", str(tmp_path), {}).sync, torch.device("cpu"))
    data = torch.randint(0, 255, (3 * MIB + 4097,), dtype=torch.uint8)
    path = str(tmp_path / "cpu.bin")
    paths.save_cpu(data, path)
    assert os.path.getsize(path) == data.numel()
    target = torch.zeros_like(data)
    paths.load_cpu(target, path)
    assert torch.equal(target, data)
    row = _row("cpu", 4 * MIB, [0.5, 1.0, 2.0], [0.25], w.gds)
    assert row["write_MiB_per_s"] == 4.0 and row["write_MB_per_s"] == 4 * MIB / 1e6
    assert row["read_MiB_per_s"] == 16.0 and row["io_size_bytes"] == MIB and row["threads"] == 1
