"""Hosts on one machine (pretend hosts made of namespaces, or ``workload.hosts.simulate``), node and
peer tiers: each pretend host checks, marks and cleans its own copy and keeps a peer's; a restore that
declares hosts lost gets their parts from a peer over MPI, or from the shared tier where no peer still
holds them, while the others read their own copy; what cannot work is refused before anything is written."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.cli import MPIEXEC, dlio, load
from tests.support.servers import unavailable
from tests.support.storage import s3_tier

pytestmark = pytest.mark.mpi
HOSTS = ["workload=tiny", "++workload.hosts.simulate=4", "++workload.checkpoint.checkpoint_folder=ck",
         "++workload.storage.storage_root=node", "++workload.storage.scope=node"]
STEPS = [f"global_epoch1_step{i}" for i in (1, 2)]


def marker(folder, step: str) -> dict:
    return json.loads((folder / f"{step}.manifest.json").read_text())


def namespaced(args: list[str], cwd: Path, hosts: int, node_paths: list[Path], env: dict,
               timeout: float = 240) -> subprocess.CompletedProcess:
    """``python -m dlio_ckpt ARGS`` on ``hosts`` pretend hosts made of namespaces (scripts/pretend_host):
    one process each, host names host0, host1, ..., each host with its own copy of ``node_paths``
    (kept under ``cwd/hosts/<host>/<path>``). The run sees real hosts: no hosts.simulate."""
    if subprocess.run(["unshare", "--uts", "--mount", "true"], capture_output=True).returncode:
        unavailable("unshare with UTS and mount namespaces (root)")
    cmd = [str(MPIEXEC), "-launcher", "ssh", "-launcher-exec", str(REPO / "scripts" / "pretend_host"),
           "-hosts", ",".join(f"host{h}" for h in range(hosts)), "-n", str(hosts), sys.executable, "-m", "dlio_ckpt",
           *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env={
        **os.environ, **env, "PYTHONPATH": str(REPO), "DLIO_PRETEND_HOSTS_DIR": str(cwd / "hosts"),
        "DLIO_PRETEND_NODE_PATHS": " ".join(str(p) for p in node_paths)})


def test_four_hosts_node_peer_and_s3_tiers_and_lost_hosts_restored_from_a_peer_then_from_s3(tmp_path, s3_server,
                                                                                          monkeypatch):
    """The issue's run, on 4 pretend hosts made of namespaces (each its own host name and its own node and
    peer folders at the same paths, as on a cluster; placed by name like real hosts): each host writes its
    node tier, replicates it to a peer (ring, 1 replica) over MPI and drains it to S3; a restore that
    loses host 2 gets its part from host 3's peer copy, the others read their own; a later read-only
    restore that loses hosts 2 and 3 (2's only keeper) reads both from S3. Every byte read is verified."""
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    prefix = f"hosts-{time.monotonic_ns()}"
    node, peer = tmp_path / "node", tmp_path / "peer"
    peer_tier = f"{{storage_type: local_fs, storage_root: '{peer}', scope: peer}}"
    tiers = s3_tier(s3_server, prefix).replace("[{", f"[{peer_tier}, {{")
    common = ["workload=tiny", "++workload.checkpoint.checkpoint_folder=ck", f"++workload.storage.storage_root={node}",
              "++workload.storage.scope=node", tiers]
    r = namespaced([*common, "++hydra.run.dir=run", "++workload.checkpoint.num_checkpoints_write=2",
                    "++workload.checkpoint.num_checkpoints_read=2", "++workload.checkpoint.async_save=True",
                    "++workload.checkpoint.time_between_checkpoints=0.2", "++workload.restore.lost_hosts=[2]",
                    "++workload.checkpoint.mtbf_hours=1"], tmp_path, 4, [node, peer], s3_server.env)
    assert r.returncode == 0, r.stderr
    summary = load(tmp_path / "run" / "summary.json")
    assert summary["num_hosts"] == 4 and "placement" not in summary["io"]  # real host names, one process each
    from dlio_ckpt.io.backends import get_backend

    s3 = get_backend("s3", f"{s3_server.bucket}/{prefix}", {"endpoint_url": s3_server.endpoint})
    every = json.loads(s3.get_small(s3.join("ck", f"{STEPS[0]}.manifest.json")))["files"]

    def own(h: int, path: Path) -> Path:  # host h's copy of a node-local path
        return tmp_path / "hosts" / f"host{h}" / path.relative_to("/") / "ck"
    parts = {}
    for h in range(4):  # each host's own copy: its processes' files and its own marker
        folder = own(h, node)
        for step in STEPS:
            m = marker(folder, step)
            assert m["host"] == f"host{h}" and m["step"] == int(step[-1])
            assert sorted(p.name for p in (folder / step).iterdir()) == sorted(m["files"])
            assert all((folder / step / n).stat().st_size == size for n, size in m["files"].items())
        parts[h] = marker(folder, STEPS[0])["files"]
    assert {n: s for part in parts.values() for n, s in part.items()} == every  # the parts make the whole
    assert not (node / "ck").exists()  # nothing landed in the path outside the hosts' namespaces
    for h in range(4):  # the ring: host h keeps host h-1's part, byte for byte the same files
        folder = own(h, peer)
        for step in STEPS:
            m = marker(folder, step)
            assert m["holds"] == [f"host{(h - 1) % 4}"] and m["files"] == parts[(h - 1) % 4] and m["tier"] == 1
            assert sorted(p.name for p in (folder / step).iterdir()) == sorted(parts[(h - 1) % 4])
    for step in STEPS:  # and every file of each step is on S3 under its tier's marker
        assert sorted(s3.list_names(s3.join("ck", step))) == sorted(every)
    assert [(t["tier"], t["steps_durable"]) for t in summary["io"]["tiers"]] == [(0, [1, 2]), (1, [1, 2]),
                                                                                  (2, [1, 2])]
    sources = {s["tier"]: s for s in summary["restore_sources"]}
    assert sources[1]["hosts"] == ["host2"] and sources[1]["bytes"] == 2 * sum(parts[2].values())
    assert sources[0]["hosts"] == ["host0", "host1", "host3"]
    assert sources[0]["bytes"] == 2 * sum(sum(parts[h].values()) for h in (0, 1, 3))
    assert summary["io"]["verified"] is True
    # goodput: a restart that loses a host reads the node tier and the peer tier: durable once on both
    assert summary["goodput"]["durable_on_tiers"] == [0, 1]
    on_peer = summary["metric"]["save_checkpoint_time_to_durable_tier1_mean_seconds"]
    assert summary["goodput"]["time_to_durable_seconds"] == pytest.approx(on_peer)

    r = namespaced([*common, "++hydra.run.dir=again", "++workload.checkpoint.num_checkpoints_write=0",
                    "++workload.checkpoint.num_checkpoints_read=1", "++workload.restore.lost_hosts=[2,3]"],
                   tmp_path, 4, [node, peer], s3_server.env)
    assert r.returncode == 0, r.stderr
    sources = {s["tier"]: s for s in load(tmp_path / "again" / "summary.json")["restore_sources"]}
    assert sources[2]["hosts"] == ["host2", "host3"] and sources[0]["hosts"] == ["host0", "host1"]
    assert sources[2]["bytes"] == sum(parts[2].values()) + sum(parts[3].values())


def test_keep_last_and_an_earlier_run_are_each_hosts_own(tmp_path):
    shared = "++workload.tiers=[{storage_type: local_fs, storage_root: shared}]"
    r = dlio([*HOSTS, "++hydra.run.dir=run1", "++workload.checkpoint.num_checkpoints_write=3",
              "++workload.checkpoint.num_checkpoints_read=0", "++workload.storage.keep_last=1", shared],
             tmp_path, nprocs=4, timeout=120)
    assert r.returncode == 0, r.stderr
    for h in range(4):  # each host's copy keeps its newest step (the older ones are on the shared tier)
        folder = tmp_path / "node" / f"simhost{h}" / "ck"
        assert sorted(p.name for p in folder.iterdir()) == sorted(
            ["dlio_ckpt_run.json", "global_epoch1_step3", "global_epoch1_step3.manifest.json"])
    assert len(list((tmp_path / "shared" / "ck").glob("*.manifest.json"))) == 3
    # an earlier run's steps on one host's copy alone: that host's check refuses the run (exit 2), names its
    # folder, and nothing is written anywhere
    for gone in ("node/simhost0", "node/simhost1", "node/simhost2", "shared"):
        shutil.rmtree(tmp_path / gone / "ck")
    r = dlio([*HOSTS, "++hydra.run.dir=run2", "++workload.checkpoint.num_checkpoints_write=1",
              "++workload.checkpoint.num_checkpoints_read=0", shared], tmp_path, nprocs=4, timeout=120)
    assert r.returncode == 2 and "node/simhost3/ck" in r.stderr and r.stderr.count("error:") == 1, r.stderr
    assert not (tmp_path / "run2").exists() and not (tmp_path / "node" / "simhost0" / "ck").exists()


def test_a_memory_tier_takes_what_it_reports_and_one_that_does_not_fit_is_refused(tmp_path):
    """A node tier in /dev/shm is host memory: what it holds is checked against the memory available
    (exit 2, nothing written, when it does not fit) and reported per host."""
    shm = Path("/dev/shm") / f"dlio_ckpt_test_{uuid.uuid4().hex}"
    memory = [f"++workload.storage.storage_root={shm}", "++workload.checkpoint.checkpoint_folder=ck",
              "++workload.checkpoint.num_checkpoints_read=0", "++workload.storage.scope=node",
              "++workload.hosts.simulate=2", "++workload.tiers=[{storage_type: local_fs, storage_root: disk}]"]
    try:
        r = dlio(["workload=tiny", *memory, "++workload.checkpoint.num_checkpoints_write=2",
                  "++workload.storage.keep_last=1", "++hydra.run.dir=run"], tmp_path, nprocs=2, timeout=120)
        assert r.returncode == 0, r.stderr
        tier = load(tmp_path / "run" / "summary.json")["io"]["tiers"][0]
        share = sum(marker(shm / "simhost0" / "ck", "global_epoch1_step2")["files"].values())
        assert tier["memory_bytes_per_host"] == 2 * share  # keep_last=1: the newest step and the one being written
        r = dlio(["workload=llama3_8b", "--world-size", "8", *memory, "++workload.checkpoint.num_checkpoints_write=1",
                  "++workload.checkpoint.checkpoint_folder=big", "++hydra.run.dir=big"], tmp_path, nprocs=2,
                 timeout=120)
        assert r.returncode == 2 and "is in memory" in r.stderr and "GiB available" in r.stderr, r.stderr
        assert not (tmp_path / "big").exists() and not (shm / "simhost0" / "big").exists()
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def test_a_process_killed_mid_replication_ends_the_job_and_every_marker_is_whole(tmp_path):
    """A pretend host's process killed while the peer tier is being filled: the job ends promptly, and on
    every host's node and peer copy each marker stands for files that are all there, whole (a peer
    marker only where the node tier has that step too)."""
    from tests.support.jobs import ended, rank_pid, start, wait_for

    args = [*HOSTS, "++hydra.run.dir=out", "++workload.checkpoint.num_checkpoints_write=60",
            "++workload.checkpoint.num_checkpoints_read=0", "++workload.checkpoint.async_save=True",
            "++workload.checkpoint.time_between_checkpoints=0.3",
            "++workload.tiers=[{storage_type: local_fs, storage_root: peer, scope: peer}]"]
    proc = start(args, tmp_path, nprocs=4)
    first = tmp_path / "peer" / "simhost0" / "ck" / "global_epoch1_step1.manifest.json"
    wait_for(lambda: first.exists() or proc.poll() is not None, 120)
    assert proc.poll() is None, proc.communicate()[1]
    os.kill(rank_pid(proc, 2), signal.SIGKILL)
    code, _, _ = ended(proc, 15)
    assert code != 0
    for h in range(4):
        marked = {}
        for tier in ("node", "peer"):
            folder = tmp_path / tier / f"simhost{h}" / "ck"
            marked[tier] = sorted(folder.glob("*.manifest.json"))
            for path in marked[tier]:
                files = json.loads(path.read_text())["files"]
                step = folder / path.name.removesuffix(".manifest.json")
                assert {n: (step / n).stat().st_size for n in files if (step / n).exists()} == files, path
        assert {p.name for p in marked["peer"]} <= {p.name for p in marked["node"]}


def test_clique_replication_with_two_replicas_puts_each_hosts_part_on_both_partners_byte_for_byte(tmp_path):
    """6 simulated hosts, a peer tier with ``replication: clique`` and ``replicas: 2``: cliques of 3
    consecutive hosts ({0, 1, 2}, {3, 4, 5}), each keeping both other members' parts (a ring would have
    host 0 keep hosts 5 and 4). Every peer copy holds exactly its partners' parts, each file equal to the
    byte to the node copy its owner wrote; a restore that loses host 1 reads its part back from a partner.
    About 5 s (6 processes, one tiny step)."""
    r = dlio(["workload=tiny", "++workload.hosts.simulate=6", "++workload.checkpoint.checkpoint_folder=ck",
              "++workload.storage.storage_root=node", "++workload.storage.scope=node", "++hydra.run.dir=run",
              "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1",
              "++workload.restore.lost_hosts=[1]",
              "++workload.tiers=[{storage_type: local_fs, storage_root: peer, scope: peer, replicas: 2, "
              "replication: clique}]"], tmp_path, nprocs=6, timeout=120)
    assert r.returncode == 0, r.stderr
    step = STEPS[0]
    parts = {h: marker(tmp_path / "node" / f"simhost{h}" / "ck", step)["files"] for h in range(6)}
    assert all(parts.values()) and len({n for p in parts.values() for n in p}) == sum(map(len, parts.values()))
    for h in range(6):
        partners = sorted({3 * (h // 3) + i for i in range(3)} - {h})
        folder = tmp_path / "peer" / f"simhost{h}" / "ck"
        m = marker(folder, step)
        assert sorted(m["holds"]) == [f"simhost{p}" for p in partners] and m["tier"] == 1, m
        assert m["files"] == {n: s for p in partners for n, s in parts[p].items()}
        assert sorted(p.name for p in (folder / step).iterdir()) == sorted(m["files"])
        for p in partners:
            for name in parts[p]:
                written = tmp_path / "node" / f"simhost{p}" / "ck" / step / name
                assert (folder / step / name).read_bytes() == written.read_bytes(), (h, p, name)
    sources = {s["tier"]: s for s in load(tmp_path / "run" / "summary.json")["restore_sources"]}
    assert sources[1]["hosts"] == ["simhost1"] and sources[1]["bytes"] == sum(parts[1].values())
