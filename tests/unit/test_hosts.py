"""Hosts and their peer tiers, planned: which hosts keep a lost host's part (ring and clique), and ``plan``'s
what-if replicating over the interconnect (in this process). Hosts on one machine, for real:
tests/e2e/test_hosts.py."""

from __future__ import annotations

import json

import pytest


def test_plan_what_if_with_a_peer_tier_replicates_over_the_interconnect(tmp_path, dlio_here):
    args = ["plan", "workload=tiny", "--world-size", "8", "--format", "json", "--write-bandwidth", "1GB/s",
            "--read-bandwidth", "2GB/s", "--mtbf-hours", "1", "--interconnect-bandwidth", "0.5GB/s", "--hosts", "4",
            "++workload.storage.scope=node",
            "++workload.tiers=[{storage_type: local_fs, storage_root: p, scope: peer, replicas: 2}]"]
    r = dlio_here(args)
    assert r.returncode == 0, r.stderr
    body = json.loads(r.stdout)
    g, heaviest = body["goodput"], body["restore"]["bytes_read_per_rank"]["max"]
    part = g["checkpoint_bytes"] / 4
    assert g["peer"] == {"hosts": 4, "replicas": 2, "bytes_per_host": part, "replicate_seconds": 2 * part / 0.5e9,
                         "lost_host_restore_seconds": part / 0.5e9}
    assert g["time_to_durable_seconds"] == pytest.approx(g["checkpoint_bytes"] / 1e9 + 2 * part / 0.5e9)
    assert g["load_seconds"] == pytest.approx(max(heaviest * 8 / 2e9, part / 0.5e9))  # the load's 8 ranks
    r = dlio_here(args[:-2])  # no peer tier to replicate to
    assert r.returncode == 2 and "--interconnect-bandwidth='0.5GB/s': needs a peer tier" in r.stderr, r.stderr


def test_ring_and_clique_partners_and_who_keeps_a_lost_hosts_part():
    """Ring: host h keeps h-1..h-R. Clique (NVIDIA resiliency extension's, jump one host): groups of R+1
    consecutive hosts, each keeping the others'. A lost host's part comes from its first keeper still there."""
    from dlio_ckpt.cluster.placement import partners, surviving_keeper

    assert [partners(4, h, 1, "ring").receive_from for h in range(4)] == [(3,), (0,), (1,), (2,)]
    assert [partners(4, h, 2, "ring").send_to for h in range(4)] == [(1, 2), (2, 3), (3, 0), (0, 1)]
    assert [partners(4, h, 1, "clique").receive_from for h in range(4)] == [(1,), (0,), (3,), (2,)]
    assert sorted(partners(6, 4, 2, "clique").send_to) == [3, 5]  # host 4's clique: hosts 3, 4, 5
    assert surviving_keeper(4, 2, 1, "ring", [2]) == 3 and surviving_keeper(4, 2, 1, "ring", [2, 3]) is None
    assert surviving_keeper(4, 2, 2, "ring", [2, 3]) == 0 and surviving_keeper(4, 2, 1, "clique", [2]) == 3
