"""Every object-store request counted, checked against the server's own view (a counting proxy in
front of SeaweedFS and fake-gcs-server), with throttling (503 SlowDown) and dropped connections
produced for real by that proxy; and the coordination figures of each checkpoint."""

from __future__ import annotations

import statistics
import uuid
from datetime import datetime

import pytest

from tests.support.cli import dlio, load
from tests.support.proxy import gcs_kind, proxy, recording, s3_kind
from tests.support.servers import stored_sizes

pytestmark = pytest.mark.mpi
KINDS = {"s3": s3_kind, "gcs": gcs_kind}


def run_through(tmp_path, server, p, kind: str, *extra: str, root: str | None = None):
    root = root or f"{server.bucket}/{tmp_path.name}-{uuid.uuid4().hex[:8]}"
    args = ["workload=tiny", f"++workload.storage.storage_type={kind}", "++hydra.run.dir=out",
            f"++workload.storage.storage_root={root}",
            f"++workload.storage.storage_options.endpoint_url={p.endpoint}",
            "++workload.checkpoint.checkpoint_folder=ck", *extra]
    return dlio(args, tmp_path, nprocs=2, env=server.env, timeout=240)


def ours(summary: dict, attempts: bool = False) -> dict[str, int]:
    """Requests by kind from summary.json (calls into the client left out)."""
    out: dict[str, int] = {}
    for section in ("during_checkpoints", "outside_checkpoints"):
        for kind, entry in summary["requests"][section].items():
            if not kind.startswith("call: "):
                out[kind] = out.get(kind, 0) + entry["count"]
    return out


def failures(summary: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for section in ("during_checkpoints", "outside_checkpoints"):
        for entry in summary["requests"][section].values():
            for cause, n in entry.get("failures", {}).items():
                out[cause] = out.get(cause, 0) + n
    return out


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_request_counts_equal_the_servers_kind_by_kind(tmp_path, request, kind, dlio_here):
    server = request.getfixturevalue(f"{kind}_server")
    with proxy(server.endpoint, KINDS[kind]) as p:
        r = run_through(tmp_path, server, p, kind)
        assert r.returncode == 0, r.stderr
        summary = load(tmp_path / "out" / "summary.json")
        assert ours(summary) == dict(p.counts)
    lists = p.counts["ListObjects" if kind == "s3" else "list objects"]
    assert lists <= 3  # rank 0 alone lists, in its storage checks: never every rank
    save = summary["checkpoints"]["save"][0]
    assert sum(e["count"] for e in save["requests"].values()) > 0
    for entry in save["requests"].values():
        assert entry["count"] > 0 and ("derived" in entry or entry["p50_ms"] <= entry["p99_ms"] <= entry["max_ms"])
    loaded = summary["checkpoints"]["load"][0]["requests"]
    if kind == "s3":  # one GET per object and no HEAD first: the engine checks sizes by reading
        assert "HeadObject" not in loaded
        assert loaded["call: get_object (time to first byte)"]["count"] == len(_sizes(tmp_path))
    report = dlio_here(["report", "out"])  # it reads the run folder: in this process
    assert report.returncode == 0 and (tmp_path / "out" / "requests.png").stat().st_size > 10_000
    # the coordination figures are the spread of the two ranks' own records of the save (DLIO's per-epoch stats,
    # their times to the microsecond): their starts, their ends, their waits in the barrier, their durations
    ranks = [load(tmp_path / "out" / f"{r}_per_epoch_stats.json")["1"]["save_ckpt1"] for r in range(2)]
    starts, ends = ([datetime.fromisoformat(r[k]).timestamp() for r in ranks] for k in ("start", "end"))
    waits, durations = [r["barrier_wait"] for r in ranks], [r["duration"] for r in ranks]
    assert save["coordination"] == pytest.approx({
        "start_spread_seconds": max(starts) - min(starts), "end_spread_seconds": max(ends) - min(ends),
        "barrier_wait_seconds_max": max(waits), "barrier_wait_seconds_mean": statistics.fmean(waits),
        "skew_seconds": max(durations) - statistics.median(durations)}, abs=2e-6)
    for op in (save, summary["checkpoints"]["load"][0]):  # what the client side cost the host
        cpu = op["cpu"]
        assert cpu["seconds"] > 0 and 0 <= cpu["system_seconds"] <= cpu["seconds"] and cpu["minor_page_faults"] > 0
        assert cpu["seconds_per_GiB"] == pytest.approx(cpu["seconds"] / (op["bytes"] / 2**30))
    mine = load(tmp_path / "out" / "1_per_epoch_stats.json")["1"]["load_ckpt1"]
    assert mine["cpu_user_seconds"] + mine["cpu_system_seconds"] > 0 and mine["minor_page_faults"] > 0


def test_s3_ranged_reads_verify_and_count_as_the_server_saw(tmp_path, s3_server):
    """``read_size``: ranged GETs of our own (1 MiB: several per object, requested ahead) instead of
    the default one GET per object; every byte still verified, every range a GET the server saw."""
    classify, seen = recording(s3_kind)
    root = f"{s3_server.bucket}/{tmp_path.name}-{uuid.uuid4().hex[:8]}"
    with proxy(s3_server.endpoint, classify) as p:
        r = run_through(tmp_path, s3_server, p, "s3", "++workload.storage.storage_options.read_size=1048576",
                        root=root)
        assert r.returncode == 0, r.stderr
        summary = load(tmp_path / "out" / "summary.json")
        assert ours(summary) == dict(p.counts)
    # the server's view: every ranged GET the proxy forwarded, held to the objects' sizes as the server lists them
    # (botocore straight to SeaweedFS, not through us): each object read is covered by 1 MiB ranges
    # from offset 0 to its end, once per load of it, and nothing else is read in ranges
    stored = stored_sizes(s3_server, root)
    got: dict[str, list[str]] = {}
    for kind, key, wanted in seen:
        if kind == "GetObject (ranged)":
            got.setdefault(key, []).append(wanted)
    steps = ("global_epoch1_step1", "global_epoch1_step2")  # tiny reads both checkpoints it wrote
    manifests = {k: n for k, n in stored.items() if k.endswith(tuple(f"/ck/{s}.manifest.json" for s in steps))}
    data = {k: n for k, n in stored.items() if k.split("/")[-2] in steps}
    assert len(manifests) == 2 and len(data) == 2 * 4  # tiny at 4 ranks: a file each per step (DLIO's layout)
    assert sorted(got) == sorted([*manifests, *data])  # no other object is read in ranges
    for key, size in manifests.items():  # a small object: one GET from 0, past its end (the client's first part)
        (wanted,) = got[key]
        assert wanted.startswith("bytes=0-") and int(wanted.split("-")[1]) >= size - 1, (key, size, wanted)
    for key, size in data.items():
        tiles = [f"bytes={o}-{min(o + MIB, size) - 1}" for o in range(0, size, MIB)]
        assert sorted(got[key]) == sorted(tiles), (key, size, got[key])  # each once (several in flight)
    tiles = sum(-(-n // MIB) for n in data.values())
    assert p.counts["GetObject (ranged)"] == len(manifests) + tiles
    # the loads report those data GETs exactly (the manifests' reads precede each load's timing)
    assert sum(c["requests"]["GetObject (ranged)"]["count"] for c in summary["checkpoints"]["load"]) == tiles


MIB = 1 << 20


def _sizes(tmp_path) -> list[int]:
    """The sizes of the objects each process loaded (its per_epoch_stats' file times)."""
    return [n for rank in (0, 1) for _, _, _, n in
            load(tmp_path / "out" / f"{rank}_per_epoch_stats.json")["1"]["load_ckpt1"]["file_times"]]


def test_gcs_throttling_and_dropped_connections_are_counted_exactly(tmp_path, gcs_server):
    # gcsfs waits 1-2 s before each retry (its backoff has no setting): of ~62 requests, every 13th throttled and
    # every 29th dropped make 6 or so retries (uploads' starts and chunks, ranged reads, metadata), not the 11
    # (every 7th and 23rd) that took 12-16 s
    with proxy(gcs_server.endpoint, gcs_kind, throttle_every=13, drop_every=29) as p:
        r = run_through(tmp_path, gcs_server, p, "gcs")
        assert r.returncode == 0, r.stderr
        summary = load(tmp_path / "out" / "summary.json")
        assert sum(p.throttled.values()) > 0 and sum(p.dropped.values()) > 0
        assert ours(summary) == dict(p.counts)  # every attempt, retries included
        seen = failures(summary)
        assert seen.get("throttled (503 SlowDown / 429)") == sum(p.throttled.values())
        assert seen.get("connection refused or reset") == sum(p.dropped.values())


def test_s3_through_botocore_every_attempt_is_counted_exactly(tmp_path, s3_server):
    """``library=botocore``: every HTTP attempt is seen, so counts equal the server's kind by kind with
    503s and dropped connections among them, each counted as the cause it was; parts of 5 MiB make
    tiny's files multipart uploads and multi-range reads. (Its run without faults held only a subset of this:
    the same counts, the same parts and ranges, no failure but the proxy's.)"""
    with proxy(s3_server.endpoint, s3_kind, throttle_every=7, drop_every=29) as p:
        r = run_through(tmp_path, s3_server, p, "s3", "++workload.storage.storage_options.library=botocore",
                        "++workload.storage.storage_options.part_size=5242880")
        assert r.returncode == 0, r.stderr
        summary = load(tmp_path / "out" / "summary.json")
        assert ours(summary) == dict(p.counts)
    assert p.counts["UploadPart"] > p.counts["CreateMultipartUpload"] > 0
    assert p.counts["GetObject (ranged)"] > len(_sizes(tmp_path))
    seen = failures(summary)
    assert seen.get("throttled (503 SlowDown / 429)", 0) == sum(p.throttled.values())
    assert seen.get("connection refused or reset", 0) == sum(p.dropped.values())
    assert sum(p.throttled.values()) > 0 and sum(p.dropped.values()) > 0
    assert summary["io"]["storage"]["library"] == "botocore"


def test_s3_throttling_is_survived_and_the_hidden_retries_are_what_the_server_saw(tmp_path, s3_server):
    with proxy(s3_server.endpoint, s3_kind, throttle_every=9) as p:
        r = run_through(tmp_path, s3_server, p, "s3")
        assert r.returncode == 0, r.stderr
        summary = load(tmp_path / "out" / "summary.json")
        throttled = sum(p.throttled.values())
        assert throttled > 0
        # The CRT retries a throttled request itself and does not say so: we count each request once;
        # the server saw it again per 503 it sent, and the CRT sometimes adds a request of its own to
        # recover (a HEAD or GET to find the object's size), which stays hidden too
        counted = ours(summary)
        assert all(counted.get(k, 0) <= n for k, n in p.counts.items()) and set(counted) <= set(p.counts)
        hidden = sum(p.counts.values()) - sum(counted.values())
        assert throttled <= hidden <= 2 * throttled, (hidden, throttled, counted, dict(p.counts))


@pytest.mark.parametrize("library", ["s3torchconnector", "botocore"])
def test_past_the_retry_budget_the_job_ends_cleanly(tmp_path, s3_server, library):
    with proxy(s3_server.endpoint, s3_kind, throttle_every=1) as p:
        r = run_through(tmp_path, s3_server, p, "s3", "++workload.storage.storage_options.max_attempts=2",
                        f"++workload.storage.storage_options.library={library}")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "throttled: the server answered 503 SlowDown to every attempt" in r.stderr, r.stderr
    assert not (tmp_path / "out" / "summary.json").exists() or load(tmp_path / "out" / "summary.json")["status"] != "ok"
