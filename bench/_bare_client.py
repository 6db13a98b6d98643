"""The bare-client side of bench/object_stores.py: one MPI process PUTs and GETs its objects.

argv: kind (s3, s3-botocore, gcs) endpoint bucket prefix threads sizes_json [phases]. Prints on rank 0, per phase
("save,load" by default; "load" reads what an earlier save left), all bytes over the slowest
process's time in GiB/s (as dlio_ckpt reports), and the processes' CPU seconds and minor page faults
per GiB (as dlio_ckpt's summary.json ``cpu`` figures: every thread of each process, summed).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from mpi4py import MPI

CHUNK = 8 << 20
GIB = 1 << 30


def s3_ops(endpoint: str, bucket: str):
    from s3torchconnectorclient._mountpoint_s3_client import MountpointS3Client

    client = MountpointS3Client(region="us-east-1", endpoint=endpoint, force_path_style=True)

    def put(key: str, chunks: list[bytes]) -> None:
        stream = client.put_object(bucket, key)
        for c in chunks:
            stream.write(c)
        stream.close()

    def get(key: str) -> int:
        return sum(len(p) for p in client.get_object(bucket, key))

    return put, get


def botocore_ops(endpoint: str, bucket: str):
    """botocore as its users call it most simply: one PutObject and one GetObject per object."""
    import botocore.session
    from botocore.config import Config

    client = botocore.session.get_session().create_client(
        "s3", region_name="us-east-1", endpoint_url=endpoint,
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=32,
                      request_checksum_calculation="when_required", response_checksum_validation="when_required"))

    def put(key: str, chunks: list[bytes]) -> None:
        client.put_object(Bucket=bucket, Key=key, Body=b"".join(chunks))

    def get(key: str) -> int:
        body, n = client.get_object(Bucket=bucket, Key=key)["Body"], 0
        while part := body.read(CHUNK):
            n += len(part)
        return n

    return put, get


def gcs_ops(endpoint: str, bucket: str):
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    import gcsfs

    fs = gcsfs.GCSFileSystem(endpoint_url=endpoint, token="anon", skip_instance_cache=True)

    def put(key: str, chunks: list[bytes]) -> None:
        with fs.open(f"{bucket}/{key}", "wb", block_size=16 << 20, consistency="none") as fh:
            for c in chunks:
                fh.write(c)

    def get(key: str) -> int:
        buf, n = bytearray(CHUNK), 0
        with fs.open(f"{bucket}/{key}", "rb", block_size=0, cache_type="none") as fh:
            while k := fh.readinto(buf):
                n += k
        return n

    return put, get


def main() -> None:
    kind, endpoint, bucket, prefix, threads, sizes = sys.argv[1:7]
    phases = sys.argv[7].split(",") if len(sys.argv) > 7 else ["save", "load"]
    comm = MPI.COMM_WORLD
    mine = json.loads(sizes)[comm.rank]
    put, get = {"s3": s3_ops, "s3-botocore": botocore_ops, "gcs": gcs_ops}[kind](endpoint, bucket)
    pool = [os.urandom(CHUNK) for _ in range(4)]  # prepared before the clock starts
    plans = [[pool[i % 4] for i in range(size // CHUNK)] + ([os.urandom(size % CHUNK)] if size % CHUNK else [])
             for size in mine]
    keys = [f"{prefix}/rank{comm.rank}_file{i}" for i in range(len(mine))]
    figures = {}
    with ThreadPoolExecutor(int(threads)) as ex:
        for phase in phases:
            comm.Barrier()
            t0, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
            if phase == "save":
                list(ex.map(put, keys, plans))
            else:
                assert list(ex.map(get, keys)) == mine
            took = comm.reduce(time.perf_counter() - t0, op=MPI.MAX)
            after = resource.getrusage(resource.RUSAGE_SELF)
            cpu = comm.reduce(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, op=MPI.SUM)
            faults = comm.reduce(after.ru_minflt - before.ru_minflt, op=MPI.SUM)
            total = comm.reduce(sum(mine), op=MPI.SUM)
            if comm.rank == 0:
                figures[phase] = {"GiB_per_second": total / took / GIB, "cpu_seconds_per_GiB": cpu / (total / GIB),
                                  "minor_page_faults_per_GiB": faults / (total / GIB)}
    if comm.rank == 0:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
