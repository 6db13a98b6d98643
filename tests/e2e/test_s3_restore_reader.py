"""A resharded DCP load on S3 says the reader the engine played, and its figures count what that reader asked:
``io.restore``'s ``follows``, ranged requests and bytes read held to the GETs a counting proxy in front of SeaweedFS
saw (tests/support/proxy.py). With ``io_pattern=framework`` the load plays s3torchconnector's ``S3StorageReader``
(a GET per span of nearby items, split into ``part_size`` GETs: the S3 backend's ``item_reader``); with
``io_pattern=stream`` the layout's reader's ranges in the tuned stream (requests of at most ``chunk_size``). Which
GETs s3torchconnector's own reader makes is held in test_s3_io_pattern.py; the restore plans in
tests/unit/test_restore.py."""

from __future__ import annotations

import pytest

from tests.support.cli import dlio, load
from tests.support.workloads import DCP

JOB = [*DCP, "--world-size", "4", "++workload.storage.storage_type=s3"]


@pytest.fixture(scope="module")
def saved(s3_server, tmp_path_factory) -> str:
    """The checkpoint both cases load, saved once (tiny in DCP's layout at 4 ranks): where it lies on S3. The save's
    io_pattern changes its write calls, not the objects it leaves (the layout's files; the save's requests are
    test_s3_io_pattern.py's), so one save serves the framework's load and the stream's alike."""
    root = f"{s3_server.bucket}/reader-{tmp_path_factory.getbasetemp().name}"
    tmp = tmp_path_factory.mktemp("saved")
    r = dlio([*JOB, f"++workload.storage.storage_root={root}",
              f"++workload.storage.storage_options.endpoint_url={s3_server.endpoint}",
              "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=0",
              "++hydra.run.dir=save"], tmp, env=s3_server.env)
    assert r.returncode == 0, r.stderr
    return root


@pytest.mark.parametrize("pattern", ["framework", "stream"])
def test_a_dcp_load_on_s3_says_the_reader_it_played_and_counts_its_gets(tmp_path, s3_server, saved, pattern):
    from tests.support.proxy import proxy, recording, s3_kind
    from tests.support.servers import stored_sizes

    classify, seen = recording(s3_kind)
    root = saved
    with proxy(s3_server.endpoint, classify) as p:  # the read-only restart alone, through the counting proxy
        r = dlio([*JOB, "++workload.restore.world_size=2", f"++workload.checkpoint.io_pattern={pattern}",
                  "++workload.checkpoint.num_checkpoints_read=1", "++workload.checkpoint.num_checkpoints_write=0",
                  f"++workload.storage.storage_root={root}",
                  f"++workload.storage.storage_options.endpoint_url={p.endpoint}", "++hydra.run.dir=run"], tmp_path,
                 env=s3_server.env)
    assert r.returncode == 0, r.stderr
    summary = load(tmp_path / "run" / "summary.json")
    restore, (loaded,) = summary["io"]["restore"], summary["checkpoints"]["load"]
    assert restore["resharded"] and restore["world_size"] == 2
    played = "s3torchconnector 1.5.0's S3StorageReader" in restore["follows"]
    assert played == (pattern == "framework"), restore["follows"]
    assert ("FileSystemReader" in restore["follows"]) == (pattern == "stream"), restore["follows"]

    sizes = stored_sizes(s3_server, root)
    gets = [(key, wanted) for kind, key, wanted in seen
            if kind == "GetObject (ranged)" and "/global_epoch1_step1/" in key]
    data = [(key, wanted) for key, wanted in gets if key.endswith(".distcp")]
    metadata = [key for key, _ in gets if key.endswith("/.metadata")]
    assert len(gets) == len(data) + len(metadata) and len(metadata) == 2  # .metadata whole, once per loading rank
    # the ranged requests it says (per rank, over its 2 ranks) are the GETs of the step's shards the server saw
    assert restore["ranged_requests_per_rank"]["mean"] * 2 == len(data), (restore["ranged_requests_per_rank"], data)
    assert len(data) == {"framework": 14, "stream": 53}[pattern]  # the figures docs/guides/fsdp-restart.md gives
    assert loaded["requests"]["GetObject (ranged)"]["count"] == len(gets)
    served = 0
    for key, wanted in gets:
        first, last = (int(x) for x in wanted.removeprefix("bytes=").split("-"))
        served += min(last, sizes[key] - 1) - first + 1
    assert restore["bytes_read"] == loaded["bytes"] == served, (restore["bytes_read"], loaded["bytes"], served)
    if pattern == "framework":  # s3torchconnector's spans: fewer requests than the stream's, gaps read too
        assert restore["bytes_read"] > restore["bytes_restored"]
