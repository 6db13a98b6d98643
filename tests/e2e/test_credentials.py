"""Keys given as storage_options reach their own storage's clients and nothing else.

A SeaweedFS that checks signatures knows two users, each allowed only its own bucket. A run whose
storage is one bucket and whose tier is the other, each with its user's keys, writes and reads both
(with the keys in the environment, as before, one tier's overwrote the other's and a bucket refused
them). Afterwards no AWS key is in this process's environment, none was in it or in a child's while
the clients were live, and no file of the run and no line of its output holds a secret. A key the
bucket refuses ends the run before anything is written, naming the storage and why (exit 1).

The runs are in this process (a world of one, SelfComm): its environment is the one to check, and a
run of ``tiny`` takes seconds here instead of an interpreter and torch's import more.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support.servers import Identity, seaweedfs

ADMIN = Identity.random("admin")
ALICE = Identity.random("alice", ("dlio-alice",))
BOB = Identity.random("bob", ("dlio-bob",))
SECRETS = (ALICE.secret_key, BOB.secret_key)
AWS_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SHARED_CREDENTIALS_FILE")
RUN = ["workload=tiny", "++workload.checkpoint.time_between_checkpoints=0", "++hydra.run.dir=out", "--world-size",
       "2"]


@pytest.fixture(scope="module")
def signed_s3():
    with seaweedfs("dlio-alice", [ADMIN, ALICE, BOB], ("dlio-bob",)) as server:
        yield server


@pytest.fixture
def no_aws_chain(tmp_path, monkeypatch):
    """Nothing to find but the keys a run is given: no AWS variable, no ~/.aws, no instance metadata."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def keyed(server, user: Identity, bucket: str, root: str, library: str) -> dict[str, str]:
    return {"storage_type": "s3", "storage_root": f"{bucket}/{root}", "endpoint_url": server.endpoint,
            "access_key_id": user.access_key, "secret_access_key": user.secret_key, "library": library}


def storage_overrides(s: dict[str, str]) -> list[str]:
    options = {k: v for k, v in s.items() if k not in ("storage_type", "storage_root")}
    return [f"++workload.storage.storage_type={s['storage_type']}",
            f"++workload.storage.storage_root={s['storage_root']}",
            *(f"++workload.storage.storage_options.{k}='{v}'" for k, v in options.items())]


def tier_override(s: dict[str, str]) -> str:
    options = ", ".join(f"{k}: '{v}'" for k, v in s.items() if k not in ("storage_type", "storage_root"))
    return (f"++workload.tiers=[{{storage_type: {s['storage_type']}, storage_root: '{s['storage_root']}', "
            f"storage_options: {{{options}}}}}]")


def run_here(args: list[str], cwd: Path, monkeypatch, capfd) -> tuple[int, str]:
    """``dlio_ckpt ARGS`` in this process, as a world of one; its exit status and output."""
    from dlio_ckpt.cli import main as cli
    from dlio_ckpt.cluster.comm import SelfComm

    monkeypatch.chdir(cwd)
    monkeypatch.setattr(cli, "get_comm", SelfComm)
    monkeypatch.setattr(sys, "argv", ["dlio_ckpt", *args])  # what the run records as its command
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = cli.main(args)
    finally:
        for s, handler in handlers.items():  # the run installs its own
            signal.signal(s, handler)
        log = logging.getLogger("dlio_ckpt")  # and its log's handlers: to this test's output and folder
        for handler in list(log.handlers):
            log.removeHandler(handler)
            handler.close()
    out, err = capfd.readouterr()
    return code, out + err


def environment_seen(monkeypatch) -> list[tuple[dict[str, str], str]]:
    """Each S3 storage check of a run (both storages' clients built by then) records this process's
    environment and that of a child it starts, with the child's open files."""
    from dlio_ckpt.io.backends.s3 import S3Backend

    seen: list[tuple[dict[str, str], str]] = []
    check = S3Backend.check

    def watched(self, writing: bool) -> None:
        check(self, writing)
        child = subprocess.run(["sh", "-c", "env; ls -l /proc/self/fd/"], capture_output=True, text=True, check=True)
        seen.append((dict(os.environ), child.stdout))

    monkeypatch.setattr(S3Backend, "check", watched)
    return seen


def assert_no_keys(environ: dict[str, str], text: str = "") -> None:
    assert not set(AWS_KEYS) & set(environ), sorted(set(AWS_KEYS) & set(environ))
    for value in (ALICE.access_key, BOB.access_key, *SECRETS):
        assert value not in " ".join(environ.values()) and value not in text


@pytest.mark.parametrize("tier_library", ["s3torchconnector", "botocore"])
def test_two_s3_storages_each_with_its_own_keys_and_no_key_in_the_environment(
        tmp_path, signed_s3, no_aws_chain, monkeypatch, capfd, tier_library):
    seen = environment_seen(monkeypatch)
    first = keyed(signed_s3, ALICE, "dlio-alice", f"two-{tier_library}", "s3torchconnector")
    second = keyed(signed_s3, BOB, "dlio-bob", f"two-{tier_library}", tier_library)
    code, output = run_here([*RUN, *storage_overrides(first), tier_override(second),
                             "++workload.checkpoint.read_tier=1"], tmp_path, monkeypatch, capfd)
    assert code == 0, output
    summary = (tmp_path / "out" / "summary.json").read_text()
    assert '"status": "ok"' in summary
    assert "drain_tier1" in summary and "load_ckpt1" in (tmp_path / "out" / "0_per_epoch_stats.json").read_text()
    # the environment: clean now, and clean while the run's clients were live, in this process and a child
    assert_no_keys(dict(os.environ))
    assert len(seen) == 2  # a check of each storage
    for environ, child in seen:
        assert_no_keys(environ, child)
        assert "dlio_ckpt_s3_credentials" not in child  # the CRT's private profile is not inherited
    # no secret in any file the run left, nor in what it printed
    assert "***" in (tmp_path / "out" / ".hydra" / "overrides.yaml").read_text()
    for written in tmp_path.rglob("*"):
        if written.is_file():
            body = written.read_bytes()
            assert not any(s.encode() in body for s in SECRETS), f"a secret key is in {written}"
    assert not any(s in output for s in SECRETS)


@pytest.mark.parametrize("library", ["s3torchconnector", "botocore"])
@pytest.mark.parametrize("user, why", [(BOB, "access denied"),
                                       (Identity("alice", ALICE.access_key, "not-" + ALICE.secret_key),
                                        "the secret key does not match the access key"),
                                       (Identity("nobody", "no-such-key", "whatever"),
                                        "the server knows no such access key")],
                         ids=["other-users-key", "wrong-secret", "unknown-key"])
def test_a_key_the_bucket_refuses_is_a_storage_error(tmp_path, signed_s3, no_aws_chain, monkeypatch, capfd,
                                                      library, user, why):
    storage = keyed(signed_s3, user, "dlio-alice", "refused", library)
    code, output = run_here([*RUN, *storage_overrides(storage)], tmp_path, monkeypatch, capfd)
    assert code == 1, output
    assert f"dlio_ckpt: error: cannot use s3://dlio-alice at {signed_s3.endpoint}: {why}" in output, output
    assert user.secret_key not in output and "Traceback" not in output
    assert not (tmp_path / "out").exists()
    assert_no_keys(dict(os.environ))


def test_keys_and_a_profile_together_are_refused(tmp_path, no_aws_chain, monkeypatch, capfd):
    storage = {"storage_type": "s3", "storage_root": "dlio-alice/x", "access_key_id": ALICE.access_key,
               "secret_access_key": ALICE.secret_key, "profile": "default"}
    code, output = run_here([*RUN, *storage_overrides(storage)], tmp_path, monkeypatch, capfd)
    assert code == 2, output
    assert "give either access_key_id and secret_access_key or profile, not both" in output
    assert ALICE.secret_key not in output


def test_a_rejected_secret_is_not_shown(tmp_path, no_aws_chain, monkeypatch, capfd):
    """A secret pasted with a space: refused naming the key and the rule, its value hidden (stderr is
    kept in batch systems' logs)."""
    code, output = run_here([*RUN, "++workload.storage.storage_type=s3", "++workload.storage.storage_root=b",
                             "++workload.storage.storage_options.access_key_id=k",
                             f"++workload.storage.storage_options.secret_access_key='{ALICE.secret_key} x'"],
                            tmp_path, monkeypatch, capfd)
    assert code == 2, output
    assert "workload.storage.storage_options.secret_access_key='***'" in output, output
    assert "must be printable ASCII without spaces" in output
    assert ALICE.secret_key not in output


def framework_context(backend) -> SimpleNamespace:
    """What the real modes' client factories read of a RunContext."""
    workload = SimpleNamespace(fsdp=SimpleNamespace(thread_count=1), lightning=SimpleNamespace(checkpoint_io="s3"))
    return SimpleNamespace(workload=workload, backend=backend, path=lambda step: backend.join(f"dcp{step}"))


def test_the_frameworks_clients_use_their_storages_keys(signed_s3, no_aws_chain, monkeypatch):
    """What the real modes hand DCP (S3StorageWriter and S3StorageReader) and Lightning
    (S3LightningCheckpoint; TorchCheckpointIO through s3fs) for two storages with different keys: each
    saves and loads on its own bucket with its own keys, none with the other's, and the environment
    stays clean. (The modes' whole runs, on the tests' shared server: tests/e2e/test_real_modes.py.)"""
    torch = pytest.importorskip("torch")
    import fsspec
    import torch.distributed.checkpoint as dcp

    from dlio_ckpt.io.backends import get_backend
    from dlio_ckpt.run.real import fsdp_mode, lightning_job

    monkeypatch.setattr(fsspec.config, "conf", {})  # _checkpoint_io sets s3fs's options there, for Lightning
    for user, bucket, other in ((ALICE, "dlio-alice", "dlio-bob"), (BOB, "dlio-bob", "dlio-alice")):
        options = {k: v for k, v in keyed(signed_s3, user, bucket, "", "s3torchconnector").items()
                   if k not in ("storage_type", "storage_root")}
        backend = get_backend("s3", f"{bucket}/frameworks", options)
        ctx = framework_context(backend)
        state, back = {"w": torch.arange(8.0)}, {"w": torch.zeros(8)}
        dcp.save(state, storage_writer=fsdp_mode._writer(ctx, 1), no_dist=True)
        dcp.load(back, storage_reader=fsdp_mode._reader(ctx, 1), no_dist=True)
        assert torch.equal(back["w"], state["w"])
        for checkpoint_io in ("s3", "torch"):
            ctx.workload.lightning.checkpoint_io = checkpoint_io
            io, url = lightning_job._checkpoint_io(ctx), f"s3://{bucket}/frameworks/{checkpoint_io}.ckpt"
            io.save_checkpoint({"step": 1, "w": state["w"]}, url)
            assert io.load_checkpoint(url)["step"] == 1
        with pytest.raises(Exception, match="Forbidden: Access Denied"):
            with backend.framework_client().put_object(other, "frameworks/not-mine") as writer:
                writer.write(b"x")
    assert_no_keys(dict(os.environ))
