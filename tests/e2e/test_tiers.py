"""Tiered checkpoints with real files and a real S3 server: each step drained from a local folder to
SeaweedFS, read back and verified on the way, a marker per tier, keep_last on the local tier, the
read phase from S3; bad tier lists refused before anything is written; the S3 server killed
mid-drain ends the job naming the tier and the object, and the markers say what is durable where."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.support.cli import dlio, load
from tests.support.jobs import ended, no_ok_summary, start, wait_for
from tests.support.storage import s3_tier
from tests.support.workloads import TINY_TIERED

pytestmark = pytest.mark.mpi


def names(backend, *parts: str) -> list[str]:
    return sorted(backend.list_names(backend.join(*parts)))


def test_async_saves_drained_to_s3_with_a_marker_per_tier_and_reads_from_s3(tmp_path, s3_server, monkeypatch,
                                                                           dlio_here):
    from dlio_ckpt.io.backends import get_backend

    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    r = dlio([*TINY_TIERED, "++hydra.run.dir=run", "++workload.checkpoint.async_save=True",
              "++workload.checkpoint.time_between_checkpoints=0.5", "++workload.storage.keep_last=2",
              "++workload.checkpoint.read_tier=1", s3_tier(s3_server, "tiered")],
             tmp_path, nprocs=2, timeout=240, env=s3_server.env)
    assert r.returncode == 0, r.stderr
    summary = load(tmp_path / "run" / "summary.json")
    s3 = get_backend("s3", f"{s3_server.bucket}/tiered", {"endpoint_url": s3_server.endpoint})
    local = tmp_path / "local" / "ck"
    steps = [f"global_epoch1_step{i}" for i in range(1, 5)]
    # every object of every step is on S3, whole, with the tier's marker
    files = json.loads(s3.get_small(s3.join("ck", "global_epoch1_step1.manifest.json")))["files"]
    assert names(s3, "ck") == sorted(["dlio_ckpt_run.json", *steps, *(f"{s}.manifest.json" for s in steps)])
    for step in steps:
        assert names(s3, "ck", step) == sorted(files)
        assert all(s3.size(s3.join("ck", step, n)) == size for n, size in files.items())
        assert json.loads(s3.get_small(s3.join("ck", f"{step}.manifest.json")))["tier"] == 1
    # the local tier keeps its newest two steps, each with its marker
    assert sorted(p.name for p in local.iterdir()) == sorted(["dlio_ckpt_run.json", *steps[2:],
                                                            *(f"{s}.manifest.json" for s in steps[2:])])
    tiers = summary["io"]["tiers"]
    assert [t["steps_durable"] for t in tiers] == [[3, 4], [1, 2, 3, 4]] and summary["io"]["read_tier"] == 1
    for c in summary["checkpoints"]["save"]:
        first, second = c["tiers"]
        assert first["tier"] == 0 and second["tier"] == 1 and second["bytes"] == first["bytes"] == c["bytes"]
        assert second["durable_seconds"] > first["durable_seconds"] == c["async"]["time_to_durable_seconds"]
    assert summary["metric"]["save_checkpoint_time_to_durable_tier1_mean_seconds"] > 0
    drains = summary["checkpoints"]["drain_tier1"]
    assert [d["step"] for d in drains] == [1, 2, 3, 4] and drains[0]["requests"]["UploadPart"]["count"] > 0
    load_ = summary["checkpoints"]["load"][0]  # read from S3, verified
    assert load_["bytes"] == sum(files.values())
    assert any(kind.startswith("GetObject") for kind in load_["requests"]), load_["requests"]
    stats = load(tmp_path / "run" / "0_per_epoch_stats.json")["1"]
    assert {"drain_tier1_ckpt1", "drain_tier1_ckpt4", "save_ckpt4", "load_ckpt1"} <= set(stats)
    report = dlio_here(["report", "run"])  # it reads the run folder: in this process
    assert report.returncode == 0, report.stderr


def test_a_tier_too_small_for_its_steps_is_refused(tmp_path, small_fs, dlio_here):
    """tiny's four 46 MiB steps fit the local folder, which keeps one, and not the 128 MiB tier (bad input: in this
    process)."""
    r = dlio_here(["--world-size", "2", *TINY_TIERED, "++hydra.run.dir=run", "++workload.storage.keep_last=1",
                   "++workload.checkpoint.num_checkpoints_read=0",
                   f"++workload.tiers=[{{storage_type: local_fs, storage_root: {small_fs}}}]"])
    assert r.returncode == 2 and "workload.tiers[0].storage_root" in r.stderr and "GiB" in r.stderr, r.stderr
    assert not (tmp_path / "local").exists() and not any(small_fs.iterdir())


def test_an_earlier_runs_steps_on_a_lower_tier_are_refused(tmp_path, dlio_here):  # bad input: in this process
    (tmp_path / "far" / "ck").mkdir(parents=True)
    (tmp_path / "far" / "ck" / "global_epoch1_step1.manifest.json").write_text('{"tool": "dlio_ckpt", "files": {}}')
    r = dlio_here(["--world-size", "2", *TINY_TIERED, "++hydra.run.dir=run",
                   "++workload.tiers=[{storage_type: local_fs, storage_root: far}]"])
    assert r.returncode == 2 and "on workload.tiers[0]" in r.stderr and "overwrite" in r.stderr, r.stderr
    (tmp_path / "far" / "ck" / "global_epoch1_step2").mkdir()
    (tmp_path / "far" / "ck" / "global_epoch1_step2" / "theirs.pt").write_text("x")
    r = dlio_here(["--world-size", "2", *TINY_TIERED, "++hydra.run.dir=run", "++workload.checkpoint.overwrite=True",
                   "++workload.tiers=[{storage_type: local_fs, storage_root: far}]"])
    assert r.returncode == 2 and "holds global_epoch1_step2/theirs.pt on workload.tiers[0]" in r.stderr, r.stderr


def test_the_network_to_the_s3_tier_cut_mid_drain_ends_the_job_and_the_markers_say_what_is_durable(
        tmp_path, s3_server, monkeypatch):
    """The path to SeaweedFS is cut at the drain's first request of step 3 (an event, not a moment):
    the job ends naming the tier and the object, and the markers on each tier, read from the stores
    themselves (S3 behind the cut), are exactly the steps the failed summary reports durable there."""
    from dlio_ckpt.io.backends import get_backend
    from tests.support.proxy import proxy, s3_kind

    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    root = f"cut-{time.monotonic_ns()}"
    with proxy(s3_server.endpoint, s3_kind, cut_when=lambda _m, path: "/global_epoch1_step3/" in path) as cut:
        args = [*TINY_TIERED, "++hydra.run.dir=out", "++workload.checkpoint.num_checkpoints_write=6",
                "++workload.checkpoint.time_between_checkpoints=0",
                f"++workload.tiers=[{{storage_type: s3, storage_root: '{s3_server.bucket}/{root}', "
                f"storage_options: {{endpoint_url: '{cut.endpoint}', max_attempts: 2}}}}]"]  # 2: less backoff to wait
        proc = start(args, tmp_path, env=s3_server.env)
        wait_for(cut.is_cut.is_set, timeout=120)
        code, err, _ = ended(proc, 45)
    assert code != 0
    # what meets the cut first, named with the tier and the object: step 3's drain, step 2's on a
    # process still draining it then, or rank 0 writing an earlier step's marker on S3
    drain = re.search(r"drain of step (\d) to tier 1", err)
    marker = re.search(r"marker of step (\d) on tier 1", err)
    assert (drain or marker) and "workload.tiers[0] (s3" in err, err
    where = f"s3://{s3_server.bucket}/{root}/ck/global_epoch1_step"
    assert (drain and drain[1] in "23" and f"{where}{drain[1]}/" in err) or \
        (marker and int(marker[1]) < 3 and f"{where}{marker[1]}.manifest.json" in err), err
    summary = no_ok_summary(tmp_path / "out")
    assert summary is not None
    durable = summary["steps_durable_per_tier"]
    s3 = get_backend("s3", f"{s3_server.bucket}/{root}", {"endpoint_url": s3_server.endpoint})
    on_s3 = sorted(int(n[18:].split(".")[0]) for n in s3.list_names(s3.join("ck")) if n.endswith(".manifest.json"))
    local = Path(tmp_path / "local" / "ck")
    assert durable["1"] == on_s3 and 3 not in on_s3
    assert durable["0"] == sorted(int(p.name[18:].split(".")[0]) for p in local.glob("*.manifest.json"))
    for step in on_s3:  # a marked step is whole on S3
        files = json.loads(s3.get_small(s3.join("ck", f"global_epoch1_step{step}.manifest.json")))["files"]
        assert {n: s3.size(s3.join("ck", f"global_epoch1_step{step}", n)) for n in files} == files


def test_three_local_tiers_each_keep_their_newest_steps_and_only_their_markers(tmp_path):
    """A step leaves a tier only once it is durable below (the last tier keeps its newest at once);
    markers on disk are exactly the steps each tier reports durable, never re-written after removal."""
    tiers = "[{storage_type: local_fs, storage_root: mid, keep_last: 1}, " \
            "{storage_type: local_fs, storage_root: far, keep_last: 2}]"
    r = dlio(["--world-size", "2", *TINY_TIERED, "++hydra.run.dir=run", f"++workload.tiers={tiers}",
              "++workload.checkpoint.time_between_checkpoints=0.3"], tmp_path, nprocs=2, timeout=120)
    assert r.returncode == 0, r.stderr
    summary = load(tmp_path / "run" / "summary.json")
    durable = [t["steps_durable"] for t in summary["io"]["tiers"]]
    assert durable == [[1, 2, 3, 4], [4], [3, 4]], durable
    for root, steps in zip(("local", "mid", "far"), durable, strict=True):
        folder = tmp_path / root / "ck"
        markers = sorted(int(p.name.split("step")[1].split(".")[0]) for p in folder.glob("*.manifest.json"))
        assert markers == steps and sorted(p.name for p in folder.iterdir() if p.is_dir()) == \
            [f"global_epoch1_step{i}" for i in steps]
        for i in steps:
            assert json.loads((folder / f"global_epoch1_step{i}.manifest.json").read_text()).get("tier", 0) == \
                ["local", "mid", "far"].index(root)
    assert all(len(c["tiers"]) == 3 for c in summary["checkpoints"]["save"])
