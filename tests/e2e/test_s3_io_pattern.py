"""On S3 the emulated DCP save and load (``checkpoint.io_pattern=framework``, ``layout=dcp``) make the requests the
real ``dcp.save`` and ``dcp.load`` make through s3torchconnector's ``S3StorageWriter`` and ``S3StorageReader``
(``mode=fsdp``), object by object, as the server sees them: a counting proxy in front of SeaweedFS
(tests/support/proxy.py, as test_requests.py reads the server's view), one for each run, each on its own prefix.

The job: tiny without tensor parallelism, bf16 parameters and Adam state (the emulated files are then the real ones'
sizes to the byte), 2 processes, one save, one load.

Held equal, per ``.distcp`` object: the requests of each kind (CreateMultipartUpload, UploadPart,
CompleteMultipartUpload; the load's ranged GETs), the parts' sizes and the GETs' byte ranges. The load's GETs are
those of s3torchconnector 1.5.0's default DCP reader (``DCPOptimizedS3Reader``): per rank and object one GET of the
range from its first item's start to its last item's end, which the CRT splits into ``part_size`` GETs.

Tolerated, and held as they are (docs/concepts/io-patterns.md, "On S3"):

- ``.metadata``: the same requests in both (the sequence: docs/concepts/io-patterns.md, "On S3"), its upload's one
  part's size within 2 % (the layout counts the pickle's size, within 1.4 % of real files: dcp_metadata.py).
- ``.metadata``'s GETs: one per loading rank in both (a whole GET, s3torchconnector's sequential reader), and in the
  real run one more GET and one HEAD that ``mode=fsdp`` makes after the save to count each rank's bytes (not
  DCP's).
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field

import pytest

from tests.support.bounds import DCP_METADATA
from tests.support.cli import dlio, load
from tests.support.proxy import proxy, s3_kind
from tests.support.workloads import datatypes

pytestmark = [pytest.mark.mpi, pytest.mark.real]

JOB = ["workload=tiny", "++workload.model.parallelism.tensor=1", *datatypes("bf16"),
       "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1",
       "++workload.checkpoint.checkpoint_folder=ck", "++hydra.run.dir=out"]
STEP = "ck/global_epoch1_step1/"


@dataclass
class Seen:
    """One object's requests as the server saw them: how many of each kind, the sizes of its upload's parts and the
    byte ranges its GETs asked (each sorted: several are in flight at once)."""

    kinds: Counter[str] = field(default_factory=Counter)
    parts: list[int] = field(default_factory=list)
    ranges: list[str] = field(default_factory=list)

    def upload(self) -> tuple[dict[str, int], list[int]]:
        kinds = ("CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload", "PutObject")
        return {k: n for k, n in self.kinds.items() if k in kinds}, sorted(self.parts)


def run(tmp_path, server, name: str, extra: list[str]) -> tuple[dict[str, Seen], Counter[str], dict]:
    """The job through a proxy of its own, on a prefix of its own: the step's objects' requests (by name), every
    request's kind, and the run's summary."""
    root = f"{server.bucket}/{name}-{uuid.uuid4().hex[:8]}"
    step = f"/{root}/{STEP}"
    objects: dict[str, Seen] = {}

    def classify(method: str, path: str, query: dict, headers: dict) -> str:
        kind = s3_kind(method, path, query, headers)
        if kind == "PutObject" and "x-amz-copy-source" in headers:  # the proxy's kinds count a copy as a PUT
            kind = "CopyObject"
        if path.startswith(step):
            seen = objects.setdefault(path.removeprefix(step), Seen())
            seen.kinds[kind] += 1
            if kind in ("UploadPart", "PutObject"):
                seen.parts.append(int(headers.get("content-length", 0)))
            if kind.startswith("GetObject"):
                seen.ranges.append(headers.get("range", "whole"))
        return kind

    (tmp_path / name).mkdir()
    with proxy(server.endpoint, classify) as p:
        r = dlio([*JOB, *extra, "++workload.storage.storage_type=s3", f"++workload.storage.storage_root={root}",
                  f"++workload.storage.storage_options.endpoint_url={p.endpoint}"], tmp_path / name, nprocs=2,
                 env=server.env, timeout=240)
        assert r.returncode == 0, r.stderr
    for seen in objects.values():
        seen.parts.sort()
        seen.ranges.sort()
    return objects, p.counts, load(tmp_path / name / "out" / "summary.json")


def counted(summary: dict) -> dict[str, int]:
    """The run's own count of its requests, by kind (calls into the client left out)."""
    out: Counter[str] = Counter()
    for section in ("during_checkpoints", "outside_checkpoints"):
        for kind, entry in summary["requests"][section].items():
            if not kind.startswith("call: "):
                out[kind] += entry["count"]
    return dict(out)


def test_the_emulated_dcp_on_s3_makes_the_requests_s3torchconnector_makes(tmp_path, s3_server):
    real, _, _ = run(tmp_path, s3_server, "real", ["++workload.mode=fsdp"])
    emulated, counts, summary = run(tmp_path, s3_server, "emulated", ["++workload.checkpoint.layout=dcp"])
    assert "S3StorageWriter" in summary["io"]["framework_writer"] and summary["io"]["io_pattern"] == "framework"
    assert counted(summary) == dict(counts)  # the emulator counts the requests it makes as the server saw them
    # the HEADs of a .metadata not yet there are answers, not failures
    assert not any("failures" in kind for kind in summary["checkpoints"]["save"][0]["requests"].values())

    data = {"__0_0.distcp", "__1_0.distcp"}
    assert set(real) == set(emulated) == {*data, ".metadata", ".metadata.tmp"}
    for name in sorted(data):  # the save's uploads and the load's GETs, request for request
        assert emulated[name] == real[name], (name, emulated[name], real[name])
        assert real[name].kinds["UploadPart"] == 2 and real[name].kinds["GetObject (ranged)"] >= 2, (name, real[name])
    assert real["__1_0.distcp"].kinds["GetObject (ranged)"] == 4  # rank 1's items, and rank 0's replicated ones

    # .metadata: uploaded as .metadata.tmp with the same requests, its part's size within the layout's count of the
    # pickle; then S3FileSystem.rename (the CRT's HEAD of the source, CopyObject, DeleteObject of the source)
    (want_kinds, (want,)), (got_kinds, (got,)) = real[".metadata.tmp"].upload(), emulated[".metadata.tmp"].upload()
    assert got_kinds == want_kinds == {"CreateMultipartUpload": 1, "UploadPart": 1, "CompleteMultipartUpload": 1}
    assert abs(got - want) <= DCP_METADATA * want, (got, want)  # .metadata: its pickle counted
    assert emulated[".metadata.tmp"].kinds == real[".metadata.tmp"].kinds == {**want_kinds, "HeadObject": 1,
                                                                                 "DeleteObject": 1}
    # .metadata: each rank's HEAD before it writes (prepare_local_plan), rank 0's before the rename (finish), the
    # copy, a whole GET per loading rank; the real run adds mode=fsdp's own HEAD and GET (not DCP's) after the save
    loads = emulated[".metadata"].kinds["GetObject (ranged)"]
    assert loads == 2 and emulated[".metadata"].kinds == {"HeadObject": 2 + 1, "CopyObject": 1,
                                                          "GetObject (ranged)": loads}
    assert real[".metadata"].kinds == {"HeadObject": 2 + 1 + 1, "CopyObject": 1, "GetObject (ranged)": loads + 1}
    assert set(real[".metadata"].ranges) == set(emulated[".metadata"].ranges)  # a whole GET (one part: 8 MiB)


@pytest.mark.parametrize("library", ["s3torchconnector", "botocore"])
def test_the_s3_rename_copies_then_deletes_and_a_missing_object_is_an_answer(monkeypatch, s3_server, library):
    """``S3Backend.rename`` (DCP's ``.metadata.tmp`` on S3) through either client: the target holds the source's
    bytes and the source is gone, for a key with a space and a plus (s3torchconnector's CRT takes the copy's source
    URL-encoded), the CRT's requests counted by its rule (a HEAD of the source, one CopyObject below 1 GiB); a HEAD of
    an object that is not there answers None and is not counted as a failure (DCP asks for ``.metadata`` before every
    save)."""
    from dlio_ckpt.io.backends import get_backend

    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    s3 = get_backend("s3", f"{s3_server.bucket}/rename-{library}-{uuid.uuid4().hex[:8]}",
                     {"endpoint_url": s3_server.endpoint, "library": library})
    source, target = s3.join("a b+c", ".metadata.tmp"), s3.join("a b+c", ".metadata")
    s3.put_small(source, b"pickled")
    s3.requests.take()
    assert s3.size(target) is None
    s3.rename(source, target, 7)
    assert s3.size(source) is None
    made = s3.requests.take()
    assert s3.get_small(target) == b"pickled"
    assert [r for r in made if r.failure] == []  # the two HEADs of missing objects are answers
    seen = Counter(r.kind for r in made if not r.kind.startswith("call: "))
    crt = library == "s3torchconnector"  # the CRT's copy asks the source's size first; botocore's does not
    assert seen == Counter({"HeadObject": 2 + crt, "CopyObject": 1, "DeleteObject": 1}), seen
