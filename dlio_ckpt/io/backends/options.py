"""``storage.storage_options`` of every backend, as pydantic models: unknown keys are errors.

Why apart from the backends: ``plan`` and the config checks validate the options of any backend
without importing its client (s3torchconnector, gcsfs, kvikio), so a typo is found even where the
package is not installed.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import AliasChoices, ByteSize, Field, SecretStr, field_validator, model_validator

from dlio_ckpt.io.backends.base import Options
from dlio_ckpt.units import Bytes

MIB = 1 << 20
RESUMABLE_UNIT = 256 << 10  # GCS resumable uploads send multiples of this


class LocalFSOptions(Options):
    threads: int = Field(1, ge=1, le=256, description="files written or read at once per process; "
                         "more than 1 helps on parallel file systems and NVMe arrays")
    queue_depth: int = Field(4, ge=1, le=64, description="chunk_size requests of one file in flight at once "
                             "(fio's iodepth); memory per process: threads x queue_depth x (2 x chunk_size + 1 MiB)")
    read_queue_depth: int | None = Field(None, ge=1, le=64, description="requests in flight when reading, where "
                                         "it differs from writing (default: queue_depth)")
    fadvise_dontneed: bool = Field(False, description="posix_fadvise(DONTNEED) on each range just written or read "
                                   "(and RANDOM on a file opened to read), as the MLCommons DLIO fork does")

class ObjectStoreOptions(Options):
    threads: int = Field(4, ge=1, le=256, description="objects in flight per process")
    retries: int = Field(2, ge=0, le=20, description="times an object is re-sent or re-read after a "
                         "transient error, on top of the client's own attempts")
    endpoint_url: str | None = None
    spread_prefixes: int = Field(
        0, ge=0, le=4096,
        description="0: keys as planned; N: put each object under one of N hashed sub-prefixes, "
        "since object stores throttle request rates per prefix",
    )
    read_ahead: int = Field(1, ge=0, le=16, description="ranges requested beyond the one being verified "
                            "(memory per thread: read_ahead + 1 ranges)")

class S3Options(ObjectStoreOptions):
    library: Literal["s3torchconnector", "botocore"] = Field(
        "s3torchconnector", description="the client: s3torchconnector (AWS's CRT, as PyTorch's S3 checkpointing "
        "uses it; its part requests are derived and its retries hidden) or botocore (every HTTP attempt counted, "
        "throttled and retried ones included); the real modes use their framework's own client")
    # The CRT already uploads and downloads the parts of one object in parallel, so few objects in
    # flight suffice; each adds the CRT's part buffers (~100 MiB at the defaults) to the process.
    threads: int = Field(2, ge=1, le=256, description="objects in flight per process")
    endpoint_url: str | None = Field(  # the AWS SDKs' variables, so existing set-ups carry over
        default_factory=lambda: os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))
    region: str = Field(default_factory=lambda: os.environ.get("AWS_REGION", os.environ.get(
        "AWS_DEFAULT_REGION", "us-east-1")))
    # Secrets are SecretStr: shown as '**********' wherever the options are printed or dumped, and
    # handed to each client by dlio_ckpt.io.backends.s3_credentials, never to the environment.
    access_key_id: str | None = Field(None, description="with secret_access_key: this storage's own keys, "
                                      "given to its clients alone (default: the AWS chain: AWS_ACCESS_KEY_ID, "
                                      "AWS_PROFILE, ~/.aws, ...)")
    secret_access_key: SecretStr | None = Field(None, description="never written to the run folder or the "
                                                "environment")
    session_token: SecretStr | None = Field(None, description="temporary keys' token (with the two above)")
    profile: str | None = Field(None, description="a profile of ~/.aws/config and ~/.aws/credentials "
                                "(instead of access_key_id and secret_access_key)")
    force_path_style: bool | None = Field(
        None, validation_alias=AliasChoices("force_path_style", "s3_force_path_style"),  # DLIO's name too
        description="default: True when endpoint_url is set")
    part_size: Bytes = Field(ByteSize(8 * MIB), ge=5 * MIB, le=5 << 30, description="multipart upload part size")
    throughput_target_gbps: float = Field(10.0, gt=0, description="s3torchconnector: the CRT sizes its "
                                          "parallel part requests to reach this")
    parts_in_flight: int = Field(4, ge=1, le=64, description="botocore: parts of one object sent or requested "
                                 "at once (memory per object: parts_in_flight + 1 parts)")
    max_attempts: int = Field(5, ge=1, le=100, validation_alias=AliasChoices("max_attempts", "s3_max_attempts"),
                              description="tries per request, first one included")
    # One GET per object by default, as s3torchconnector's own reader and the bare client do: ranges
    # of our own touched a third more fresh pages per GiB in a load after a save (bench/object_stores.py).
    read_size: Bytes = Field(ByteSize(0), ge=0, description="0: one GET per object, which the CRT splits into "
                           "part_size ranges fetched in parallel (its buffers bound the memory, not the object's "
                           "size); "
                           "N: ranged GETs of N bytes, read_ahead of them in flight beyond the one verified")

    @model_validator(mode="after")
    def _keys_in_pairs(self) -> S3Options:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("access_key_id and secret_access_key must be given together")
        if self.session_token is not None and self.access_key_id is None:
            raise ValueError("session_token needs access_key_id and secret_access_key")
        if self.access_key_id is not None and self.profile is not None:
            raise ValueError("give either access_key_id and secret_access_key or profile, not both")
        return self

    @field_validator("access_key_id", "secret_access_key", "session_token")
    @classmethod
    def _one_word(cls, value: str | SecretStr | None) -> str | SecretStr | None:
        """AWS keys are printable ASCII without spaces; anything else (a pasted newline, a quote
        kept by the shell) could only fail later as a signature mismatch, or split the profile the
        CRT client reads the keys from."""
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if text is not None and (not text or not all("!" <= c <= "~" for c in text)):
            raise ValueError("must be printable ASCII without spaces (as AWS keys are)")
        return value

    @field_validator("read_size")
    @classmethod
    def _whole_or_ranged(cls, value: int) -> int:
        if 0 < value < MIB:
            raise ValueError(f"must be 0 (one GET per object) or at least {MIB} bytes")
        return value

class GCSOptions(ObjectStoreOptions):
    # STORAGE_EMULATOR_HOST (the Google SDKs' variable) is honoured by gcsfs itself when this is unset
    project: str = Field(default_factory=lambda: os.environ.get("GOOGLE_CLOUD_PROJECT", ""))
    token: str | None = Field(
        None, description="gcsfs token: anon, google_default, cloud, or a service-account JSON path; "
        "default: anon with an endpoint_url, else Google's default credentials")
    block_size: Bytes = Field(ByteSize(16 * MIB), ge=RESUMABLE_UNIT, multiple_of=RESUMABLE_UNIT,
                            description="bytes per resumable-upload request")
    consistency: Literal["none", "md5", "crc32c"] = "none"
    # bench/object_stores.py compares read sizes with gcsfs's own reads: the smaller ranges came closest
    read_size: Bytes = Field(ByteSize(8 * MIB), ge=MIB, description="bytes per ranged GET when reading")
    max_attempts: int = Field(6, ge=1, le=100, description="tries per request, first one included, gcsfs's "
                              "backoff between them (1, 2, 4, 8, 16, then 32 s; 6, gcsfs's own count, tries a "
                              "refused connection for some 30 s); timeout bounds them all (the real modes' "
                              "frameworks keep gcsfs's 6)")
    timeout: float = Field(60.0, gt=0, description="seconds one operation may take, its tries included")

class GDSOptions(Options):
    threads: int = Field(1, ge=1, le=256, description="files in flight per process")
    kvikio_threads: int = Field(16, ge=1, le=1024, description="kvikio's I/O thread pool size")
    task_size: Bytes = Field(ByteSize(4 * MIB), ge=4096, multiple_of=4096, description="bytes per kvikio task")
    device: int | None = Field(None, ge=0, description="CUDA device of every process (default: local rank mod GPUs)")
    compat_mode: bool | None = Field(None, description="kvikio compatibility mode: None lets kvikio decide")



